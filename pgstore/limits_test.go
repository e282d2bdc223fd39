package pgstore

import (
	"context"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemledger/submissions"
	"github.com/idemledger/submissions/driver"
)

// atLimit returns text of exactly n bytes, valid UTF-8, made of lead and then
// as many of the multi-byte runes as fit, padded with ASCII.
func atLimit(n int, lead string, runes ...string) string {
	var b strings.Builder
	b.WriteString(lead)
	for i := 0; ; i++ {
		r := runes[i%len(runes)]
		if b.Len()+len(r) > n {
			break
		}
		b.WriteString(r)
	}
	b.WriteString(strings.Repeat("x", n-b.Len()))
	return b.String()
}

// TestValuesAtTheLedgersLimits: a key, a withdrawal id, a destination and an
// amount of the largest sizes the ledger accepts, multi-byte UTF-8 where the
// field allows it, go through Submit, Resolve, Outcome and ClaimedBy on
// PostgreSQL: the store accepts exactly what the ledger accepts.
func TestValuesAtTheLedgersLimits(t *testing.T) {
	pool := testPool(t, 2)
	ledger := submissions.NewWithStore[w](newTestStore[w](t, pool), submissions.WithLogger(quiet))
	runes := []string{"é", "€", "𝄞", "日"} // 2, 3, 4 and 3 bytes
	big := func(i int, lead string) (string, w) {
		key := atLimit(driver.MaxKeyLen, lead+"-key-", runes[i%len(runes):]...)
		x := w{
			ID:       atLimit(driver.MaxWithdrawalIDLen, lead+"-id-", runes[i%len(runes):]...),
			Amount:   strings.Repeat("9", driver.MaxAmountLen-3) + ".50",
			Currency: "ABCDEFGHIJ12",
			Dest:     atLimit(driver.MaxDestinationLen, lead+"-dest-", runes[i%len(runes):]...),
			State:    "approved",
		}
		return key, x
	}
	for i, lead := range []string{"a", "b", "c", "d"} {
		key, x := big(i, lead)
		require.Len(t, key, driver.MaxKeyLen)
		require.Len(t, x.ID, driver.MaxWithdrawalIDLen)
		require.Len(t, x.Dest, driver.MaxDestinationLen)
		require.Len(t, x.Amount, driver.MaxAmountLen)
		require.True(t, utf8.ValidString(key) && utf8.ValidString(x.ID) && utf8.ValidString(x.Dest))
		require.Greater(t, len(key), utf8.RuneCountInString(key), "the key is multi-byte")

		// Submit, then replay.
		out, err := ledger.Submit(bg, key, x, func(_ context.Context, x w) (w, error) { return sent(x, "0x"+lead), nil })
		require.NoError(t, err, "Submit %s", lead)
		assert.Equal(t, sent(x, "0x"+lead), out)
		again, err := ledger.Submit(bg, key, x, nil)
		require.NoError(t, err, "replay %s", lead)
		assert.Equal(t, out, again, "replay %s", lead)
		got, ok, err := ledger.Outcome(bg, key)
		require.NoError(t, err)
		assert.True(t, ok)
		assert.Equal(t, out, got, "Outcome %s", lead)
		holder, ok, err := ledger.ClaimedBy(bg, x.ID)
		require.NoError(t, err)
		assert.True(t, ok)
		assert.Equal(t, key, holder, "ClaimedBy %s", lead)
	}

	// Resolve of a key left in flight, and of an unknown key.
	key, x := big(0, "e")
	_, err := ledger.Submit(bg, key, x, func(context.Context, w) (w, error) { return w{}, assert.AnError })
	require.ErrorIs(t, err, submissions.ErrOutcomeUnknown)
	require.NoError(t, ledger.Resolve(bg, key, sent(x, "0xfound")), "Resolve of an in-flight key")
	fresh, y := big(1, "f")
	require.NoError(t, ledger.Resolve(bg, fresh, sent(y, "0xfresh")), "Resolve of an unknown key")
	for k, want := range map[string]w{key: sent(x, "0xfound"), fresh: sent(y, "0xfresh")} {
		got, ok, err := ledger.Outcome(bg, k)
		require.NoError(t, err)
		assert.True(t, ok)
		assert.Equal(t, want, got)
	}
	holder, ok, err := ledger.ClaimedBy(bg, y.ID)
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, fresh, holder)

	// One byte more is the ledger's refusal, before the store.
	_, err = ledger.Submit(bg, key+"x", x, nil)
	assert.ErrorIs(t, err, submissions.ErrInvalidKey)
	x.Dest += "x"
	_, err = ledger.Submit(bg, "req-over", x, nil)
	assert.ErrorIs(t, err, submissions.ErrInvalidFingerprint)
}
