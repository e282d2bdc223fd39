package engine

import (
	"context"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemledger/submissions/driver"
	"github.com/idemledger/submissions/internal/valid"
)

// FuzzKey checks rule 1: a key is trimmed, and refused when empty, over
// driver.MaxKeyLen bytes, not UTF-8, or holding a NUL byte.
func FuzzKey(f *testing.F) {
	for _, k := range []string{"req-1", "  req-1 ", "", " \t", "req\x00", "req-\xff", strings.Repeat("k", driver.MaxKeyLen+1), "\u00a0req\u0085",
		" req", "req ", "\treq", "req\n", "\u00a0req", "req\u00a0", "!req!", "\x7freq\x7f", "\x1freq\x1f", "req\u2000", "\u2000req"} {
		f.Add(k)
	}
	f.Fuzz(func(t *testing.T, k string) {
		got, err := validKey(k)
		trimmed := strings.TrimSpace(k)
		valid := trimmed != "" && len(trimmed) <= driver.MaxKeyLen && utf8.ValidString(trimmed) && !strings.Contains(trimmed, "\x00")
		if !valid {
			require.ErrorIs(t, err, ErrInvalidKey, "validKey(%q)", k)
			return
		}
		require.NoError(t, err, "validKey(%q)", k)
		require.Equal(t, trimmed, got, "validKey(%q)", k)
	})
}

// FuzzFingerprint checks a whole fingerprint as the ledger checks it
// (normalize): accepted exactly when every part is valid by the readings
// above and within its limit, refused with driver.ErrInvalidFingerprint otherwise,
// never a panic; and what it accepts, checked again, stays as it is.
func FuzzFingerprint(f *testing.F) {
	f.Add("w-1", "25.00", "usdc", "0xabc")
	f.Add("", "1", "EUR", "d")
	f.Add("w\x00", "1", "EUR", "d")
	f.Add("w", "1", "EUR", "d-\xff")
	f.Add("w", "-1", "EU", "d")
	f.Add(strings.Repeat("i", driver.MaxWithdrawalIDLen+1), "1", "EUR", "d")
	f.Fuzz(func(t *testing.T, id, amount, currency, dest string) {
		fp := driver.Fingerprint{WithdrawalID: id, Amount: amount, Currency: currency, Destination: dest}
		fp, err := fp.Canonical()
		_, amountOK := valid.CanonicalAmount(amount)
		_, currencyOK := valid.Currency(currency)
		text := func(s string, limit int) bool {
			return s != "" && len(s) <= limit && utf8.ValidString(s) && !strings.Contains(s, "\x00")
		}
		valid := amountOK && len(amount) <= driver.MaxAmountLen && currencyOK && text(id, driver.MaxWithdrawalIDLen) && text(dest, driver.MaxDestinationLen)
		if valid {
			require.NoError(t, err, "%+v", fp)
		} else {
			require.ErrorIs(t, err, driver.ErrInvalidFingerprint, "%+v", fp)
			return
		}
		require.Equal(t, id, fp.WithdrawalID, "the id is kept as it is")
		require.Equal(t, dest, fp.Destination, "the destination is kept as it is")
		again, err := fp.Canonical()
		require.NoError(t, err)
		require.Equal(t, fp, again, "a canonical fingerprint stays as it is")
	})
}

func TestDifferingNamesTheFields(t *testing.T) {
	want := driver.Fingerprint{WithdrawalID: "w-1", Amount: "25", Currency: "USDC", Destination: "d"}
	for _, c := range []struct {
		got    driver.Fingerprint
		fields string
	}{
		{driver.Fingerprint{WithdrawalID: "w-1", Amount: "25.00", Currency: "usdc", Destination: "d"}, ""},
		{driver.Fingerprint{WithdrawalID: "w-2", Amount: "25", Currency: "USDC", Destination: "d"}, "WithdrawalID"},
		{driver.Fingerprint{WithdrawalID: "w-1", Amount: "2.5", Currency: "USDC", Destination: "d"}, "Amount"},
		{driver.Fingerprint{WithdrawalID: "w-1", Amount: "", Currency: "USDC", Destination: "d"}, "Amount"},
		{driver.Fingerprint{WithdrawalID: "w-1", Amount: "25", Currency: "US-C", Destination: "d"}, "Currency"},
		{driver.Fingerprint{WithdrawalID: "w-1", Amount: "25", Currency: "USDC", Destination: "D"}, "Destination"},
		{driver.Fingerprint{}, "WithdrawalID, Amount, Currency, Destination"},
	} {
		assert.Equal(t, c.fields, fieldNames(Differing(&want, &c.got)), "%+v", c.got)
	}
}

// TestEveryCallChecksItsTenant: the engine checks the tenant of every
// call, first, before its key or ctx, and touches no store for an invalid
// one.
func TestEveryCallChecksItsTenant(t *testing.T) {
	l := New[transfer](newMapStore(), nil, nil)
	done, cancel := context.WithCancel(context.Background())
	cancel()
	bad := "t\x00"
	sends := 0
	send := func(_ context.Context, r transfer) (transfer, error) { sends++; return r, nil }
	w := transfer{ID: "w-1"}
	_, _, err := l.Submit(done, bad, "", w, send)
	assert.ErrorIs(t, err, ErrInvalidTenant, "Submit")
	assert.ErrorIs(t, l.Resolve(done, bad, "", 0, w), ErrInvalidTenant, "Resolve")
	assert.ErrorIs(t, l.Release(done, bad, "", 0), ErrInvalidTenant, "Release")
	_, _, err = l.Outcome(done, bad, "")
	assert.ErrorIs(t, err, ErrInvalidTenant, "Outcome")
	_, _, err = l.ClaimedBy(done, bad, "w-1")
	assert.ErrorIs(t, err, ErrInvalidTenant, "ClaimedBy")
	_, err = l.Wait(done, bad, "")
	assert.ErrorIs(t, err, ErrInvalidTenant, "Wait")
	_, err = l.Look(done, bad, "")
	assert.ErrorIs(t, err, ErrInvalidTenant, "Look")
	_, err = l.List(done, driver.ListQuery{Tenants: []string{"", bad}, Limit: 1})
	assert.ErrorIs(t, err, ErrInvalidTenant, "List")
	_, _, err = SubmitTx(done, &mapTx{mapStore: newMapStore()}, bad, "", w, nil)
	assert.ErrorIs(t, err, ErrInvalidTenant, "SubmitTx")
	assert.Zero(t, sends)
}
