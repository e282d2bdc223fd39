package idemhttp_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemledger/submissions"
	"github.com/idemledger/submissions/driver"
	"github.com/idemledger/submissions/idemhttp"
)

func TestKey(t *testing.T) {
	uuid := "8e03978e-40d5-43e8-bc93-6894a57f9324"
	atLimit := strings.Repeat("k", driver.MaxKeyLen)
	overLimit := atLimit + "k"
	tests := []struct {
		name   string
		fields []string // the field lines; nil for none
		key    string   // the key, when valid
		err    error    // the error, otherwise
		msg    string   // and its message
	}{
		{"quoted", []string{`"` + uuid + `"`}, uuid, nil, ""},
		{"bare", []string{uuid}, uuid, nil, ""},
		{"quoted escapes", []string{`"a\"b\\c"`}, `a"b\c`, nil, ""},
		{"quoted punctuation", []string{`"a b,c;d=e:f/g'h"`}, "a b,c;d=e:f/g'h", nil, ""},
		{"quoted first and last visible", []string{`"  ~"`}, "~", nil, ""},
		{"field at its limit", []string{strings.Repeat(" ", idemhttp.MaxFieldLen-2) + "k1"}, "k1", nil, ""},
		{"space inside a bare key", []string{"k 1"}, "", idemhttp.ErrKeyMalformed, "Idempotency-Key is malformed: text after the key"},
		{"bare tchar colon slash", []string{"!#$%&'*+-.^_`|~09AZaz:/"}, "!#$%&'*+-.^_`|~09AZaz:/", nil, ""},
		{"white space around quoted", []string{" \t\"k1\"\t "}, "k1", nil, ""},
		{"white space around bare", []string{"\t k1 \t"}, "k1", nil, ""},
		{"spaces inside the quotes", []string{`"  k1 "`}, "k1", nil, ""},
		{"quoted at the limit", []string{`"` + atLimit + `"`}, atLimit, nil, ""},
		{"bare at the limit", []string{atLimit}, atLimit, nil, ""},
		{"escaped at the limit", []string{`"` + strings.Repeat(`\\`, driver.MaxKeyLen) + `"`}, strings.Repeat(`\`, driver.MaxKeyLen), nil, ""},

		{"missing", nil, "", idemhttp.ErrKeyMissing, "Idempotency-Key is missing"},
		{"two field lines", []string{"k1", "k1"}, "", idemhttp.ErrKeyRepeated, "Idempotency-Key is repeated"},
		{"list of strings", []string{`"k1", "k2"`}, "", idemhttp.ErrKeyList, "Idempotency-Key is a list"},
		{"list of bare keys", []string{"k1,k2"}, "", idemhttp.ErrKeyList, "Idempotency-Key is a list"},
		{"trailing comma", []string{`"k1",`}, "", idemhttp.ErrKeyList, "Idempotency-Key is a list"},
		{"empty", []string{""}, "", idemhttp.ErrKeyEmpty, "Idempotency-Key is empty"},
		{"white space only", []string{" \t "}, "", idemhttp.ErrKeyEmpty, "Idempotency-Key is empty"},
		{"empty string", []string{`""`}, "", idemhttp.ErrKeyEmpty, "Idempotency-Key is empty"},
		{"spaces string", []string{`"   "`}, "", idemhttp.ErrKeyEmpty, "Idempotency-Key is empty"},
		{"quoted over the limit", []string{`"` + overLimit + `"`}, "", idemhttp.ErrKeyTooLong, "Idempotency-Key is too long"},
		{"bare over the limit", []string{overLimit}, "", idemhttp.ErrKeyTooLong, "Idempotency-Key is too long"},
		{"field over its limit", []string{`"k1"` + strings.Repeat(" ", idemhttp.MaxFieldLen)}, "", idemhttp.ErrKeyTooLong, "Idempotency-Key is too long"},
		{"control in string", []string{"\"k\x01\""}, "", idemhttp.ErrKeyMalformed, "Idempotency-Key is malformed: invalid character"},
		{"tab in string", []string{"\"k\t1\""}, "", idemhttp.ErrKeyMalformed, "Idempotency-Key is malformed: invalid character"},
		{"DEL in string", []string{"\"k\x7f\""}, "", idemhttp.ErrKeyMalformed, "Idempotency-Key is malformed: invalid character"},
		{"control in bare", []string{"k\x00"}, "", idemhttp.ErrKeyMalformed, "Idempotency-Key is malformed: invalid character"},
		{"non-ASCII in string", []string{`"café"`}, "", idemhttp.ErrKeyMalformed, "Idempotency-Key is malformed: invalid character"},
		{"non-ASCII in bare", []string{"café"}, "", idemhttp.ErrKeyMalformed, "Idempotency-Key is malformed: invalid character"},
		{"unterminated", []string{`"k1`}, "", idemhttp.ErrKeyMalformed, "Idempotency-Key is malformed: unterminated string"},
		{"unterminated after escape", []string{`"k1\"`}, "", idemhttp.ErrKeyMalformed, "Idempotency-Key is malformed: unterminated string"},
		{"unterminated in escape", []string{`"k1\`}, "", idemhttp.ErrKeyMalformed, "Idempotency-Key is malformed: unterminated string"},
		{"bad escape", []string{`"k\n1"`}, "", idemhttp.ErrKeyMalformed, "Idempotency-Key is malformed: bad escape"},
		{"text after the string", []string{`"k1"x`}, "", idemhttp.ErrKeyMalformed, "Idempotency-Key is malformed: text after the key"},
		{"two strings", []string{`"k1" "k2"`}, "", idemhttp.ErrKeyMalformed, "Idempotency-Key is malformed: text after the key"},
		{"two bare keys", []string{"k1 k2"}, "", idemhttp.ErrKeyMalformed, "Idempotency-Key is malformed: text after the key"},
		{"quote after bare", []string{`k1"`}, "", idemhttp.ErrKeyMalformed, "Idempotency-Key is malformed: text after the key"},
		{"parameters on string", []string{`"k1";a=1`}, "", idemhttp.ErrKeyMalformed, "Idempotency-Key is malformed: parameters are not accepted"},
		{"parameters on bare", []string{"k1;a"}, "", idemhttp.ErrKeyMalformed, "Idempotency-Key is malformed: parameters are not accepted"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{"Accept": {"application/json"}}
			for _, f := range tt.fields {
				h.Add("idempotency-key", f)
			}
			key, err := idemhttp.Key(h)
			if tt.err == nil {
				require.NoError(t, err)
				assert.Equal(t, tt.key, key)
				return
			}
			require.ErrorIs(t, err, tt.err)
			require.ErrorIs(t, err, submissions.ErrInvalidKey)
			assert.Empty(t, key)
			assert.EqualError(t, err, tt.msg)
			p := idemhttp.ProblemFor(err)
			assert.Equal(t, http.StatusBadRequest, p.Status)
			assert.Equal(t, idemhttp.TypeInvalidKey, p.Type)
			assert.Equal(t, tt.msg+".", p.Detail)
		})
	}
}

// Every key Key returns is one the ledger takes as it is.
func TestKeyIsALedgerKey(t *testing.T) {
	ledger := submissions.New[withdrawal](quiet)
	for i, f := range []string{`"  a b "`, `"\\"`, `"` + strings.Repeat(`\"`, driver.MaxKeyLen) + `"`, "~"} {
		key, err := idemhttp.Key(http.Header{idemhttp.KeyHeader: {f}})
		require.NoError(t, err, f)
		w := newWithdrawal("wd-" + string(rune('a'+i)))
		_, err = ledger.Submit(t.Context(), key, w, sent)
		require.NoError(t, err, f)
		holder, ok, err := ledger.ClaimedBy(t.Context(), w.ID)
		require.NoError(t, err)
		require.True(t, ok)
		assert.Equal(t, key, holder, "the ledger keeps the key as Key returns it")
	}
}
