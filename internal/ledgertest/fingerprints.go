package ledgertest

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemledger/submissions"
	"github.com/idemledger/submissions/driver"
)

// Fingerprints: invalid ones refused with nothing claimed or sent; every
// value the ledger accepts held by every store; compared by meaning.
var fingerprintTests = []test{
	{"InvalidFingerprintsAreRefused", testInvalidFingerprintsAreRefused},
	{"EdgeFingerprintsAreAccepted", testEdgeFingerprintsAreAccepted},
	{"ValuesAtTheLimitsAreHeld", testValuesAtTheLimitsAreHeld},
	{"FingerprintsCompareByMeaning", testFingerprintsCompareByMeaning},
	{"SmallAmountsCompareNumerically", testSmallAmountsCompareNumerically},
}

// with returns w-1 changed by change.
func with(change func(*Withdrawal)) Withdrawal {
	w := newWithdrawal("w-1")
	change(&w)
	return w
}

func testInvalidFingerprintsAreRefused(t *testing.T, newStore Factory) {
	cases := map[string]Withdrawal{
		"empty id":              with(func(w *Withdrawal) { w.ID = "" }),
		"id not UTF-8":          with(func(w *Withdrawal) { w.ID = "w-\xfe" }),
		"id with NUL":           with(func(w *Withdrawal) { w.ID = "w\x00" }),
		"id one byte too long":  with(func(w *Withdrawal) { w.ID = strings.Repeat("i", driver.MaxWithdrawalIDLen+1) }),
		"empty destination":     with(func(w *Withdrawal) { w.Dest = "" }),
		"destination not UTF-8": with(func(w *Withdrawal) { w.Dest = "0x\xc3" }),
		"destination with NUL":  with(func(w *Withdrawal) { w.Dest = "0x\x00ab" }),
		"destination too long":  with(func(w *Withdrawal) { w.Dest = strings.Repeat("d", driver.MaxDestinationLen+1) }),
		"empty amount":          with(func(w *Withdrawal) { w.Amount = "" }),
		"zero amount":           with(func(w *Withdrawal) { w.Amount = "0" }),
		"zero with decimals":    with(func(w *Withdrawal) { w.Amount = "000.000" }),
		"negative amount":       with(func(w *Withdrawal) { w.Amount = "-25.00" }),
		"signed amount":         with(func(w *Withdrawal) { w.Amount = "+25.00" }),
		"exponent":              with(func(w *Withdrawal) { w.Amount = "2.5e1" }),
		"two points":            with(func(w *Withdrawal) { w.Amount = "2.5.0" }),
		"only a point":          with(func(w *Withdrawal) { w.Amount = "." }),
		"spaces in amount":      with(func(w *Withdrawal) { w.Amount = " 25" }),
		"grouped amount":        with(func(w *Withdrawal) { w.Amount = "1,000" }),
		"non-ASCII digits":      with(func(w *Withdrawal) { w.Amount = "٢٥" }),
		"word amount":           with(func(w *Withdrawal) { w.Amount = "NaN" }),
		"amount too long":       with(func(w *Withdrawal) { w.Amount = "1" + strings.Repeat("0", driver.MaxAmountLen) }),
		"empty currency":        with(func(w *Withdrawal) { w.Currency = "" }),
		"one-letter currency":   with(func(w *Withdrawal) { w.Currency = "U" }),
		"13-letter currency":    with(func(w *Withdrawal) { w.Currency = "ABCDEFGHIJKLM" }),
		"currency with dash":    with(func(w *Withdrawal) { w.Currency = "US-D" }),
		"currency with space":   with(func(w *Withdrawal) { w.Currency = "US D" }),
		"non-ASCII currency":    with(func(w *Withdrawal) { w.Currency = "ÜSD" }),
	}
	for name, w := range cases {
		t.Run(name, func(t *testing.T) {
			f := setUp(t, newStore)
			_, err := f.s.Submit(bg, "req-1", w, f.rail.send)
			requireRefusal(t, err, submissions.ErrInvalidFingerprint)
			requireRefusal(t, f.s.Resolve(bg, "req-2", w), submissions.ErrInvalidFingerprint)
			f.rail.requireSends(t, 0)
			requireOutcome(t, f.s, "req-1", Withdrawal{}, false)
			requireOutcome(t, f.s, "req-2", Withdrawal{}, false)
			requireHolder(t, f.s, "w-1", "")
			// Nothing was recorded: the key is free for a valid withdrawal.
			_, err = f.s.Submit(bg, "req-1", f.w, f.rail.send)
			require.NoError(t, err, "Submit after the refusal")
			f.rail.requireSends(t, 1)
		})
	}
}

func testEdgeFingerprintsAreAccepted(t *testing.T, newStore Factory) {
	for i, c := range []struct{ amount, currency string }{
		{"0.01", "BTC"}, {".5", "ab"}, {"5.", "ABCDEFGHIJ12"}, {"1000000000000000000000000.000000000000000001", "usdt"}, {"007", "Eth2"},
	} {
		f := setUp(t, newStore)
		w := Withdrawal{ID: "w-1", Amount: c.amount, Currency: c.currency, Dest: " exact dest "}
		out, err := f.s.Submit(bg, fmt.Sprint("req-", i), w, nil)
		require.NoError(t, err, "Submit(%q %q)", c.amount, c.currency)
		requireOutcome(t, f.s, fmt.Sprint("req-", i), out, true)
	}
}

// testValuesAtTheLimitsAreHeld: every store holds what the ledger accepts,
// multi-byte text at the byte limits included, and gives it back whole.
func testValuesAtTheLimitsAreHeld(t *testing.T, newStore Factory) {
	f := setUp(t, newStore)
	cases := []Withdrawal{
		{
			ID:       strings.Repeat("i", driver.MaxWithdrawalIDLen),
			Amount:   "1" + strings.Repeat("0", driver.MaxAmountLen-3) + ".5",
			Currency: "ABCDEFGHIJKL",
			Dest:     strings.Repeat("d", driver.MaxDestinationLen),
		},
		{
			ID:       strings.Repeat("й", driver.MaxWithdrawalIDLen/2) + "i", // two bytes each, and one
			Amount:   "0." + strings.Repeat("0", driver.MaxAmountLen-3) + "1",
			Currency: "eur",
			Dest:     strings.Repeat("€", driver.MaxDestinationLen/3) + "d", // three bytes each, and one
		},
		{
			ID:       "w-point",
			Amount:   "." + strings.Repeat("0", driver.MaxAmountLen-2) + "1", // its canonical form, 0.0...1, is a byte longer
			Currency: "EUR",
			Dest:     "d",
		},
	}
	for i, w := range cases {
		key := fmt.Sprint("req-", i)
		out, err := f.s.Submit(bg, key, w, f.rail.send)
		require.NoError(t, err, "Submit of case %d", i)
		require.Equal(t, sentTx(w, "0xtx-"+w.ID), out)
		replay, err := f.s.Submit(bg, key, w, f.rail.send)
		require.NoError(t, err, "replay of case %d", i)
		require.Equal(t, out, replay)
		requireOutcome(t, f.s, key, out, true)
		requireHolder(t, f.s, w.ID, key)
		_, err = f.s.Submit(bg, key+"-other", w, f.rail.send)
		requireConflict(t, err, key)
		require.NoError(t, f.s.Resolve(bg, key, out), "Resolve with the recorded outcome")
	}
	f.rail.requireSends(t, int64(len(cases)))
}

func testFingerprintsCompareByMeaning(t *testing.T, newStore Factory) {
	base := Withdrawal{ID: "w-1", Amount: "25.00", Currency: "usdc", Dest: "0xAbC"}
	spelled := func(amount, currency, dest string) Withdrawal {
		w := base
		w.Amount, w.Currency, w.Dest = amount, currency, dest
		return w
	}
	same := []Withdrawal{
		spelled("25.00", "usdc", "0xAbC"),
		spelled("25.0", "USDC", "0xAbC"),
		spelled("025", "Usdc", "0xAbC"),
		spelled("25", "uSdC", "0xAbC"),
		spelled("0025.", "USDC", "0xAbC"),
	}
	different := []Withdrawal{
		spelled("25.01", "USDC", "0xAbC"),
		spelled("250", "USDC", "0xAbC"),
		spelled("2.5", "USDC", "0xAbC"),
		spelled("25", "USDT", "0xAbC"),
		spelled("25", "USDC", "0xabc"),
		spelled("25", "USDC", "0xAbC "),
		{ID: "W-1", Amount: "25", Currency: "USDC", Dest: "0xAbC"},
	}
	f := setUp(t, newStore)
	want, err := f.s.Submit(bg, "req-1", base, f.rail.send)
	require.NoError(t, err)
	for _, w := range same {
		got, err := f.s.Submit(bg, "req-1", w, f.rail.send)
		if assert.NoError(t, err, "Submit(%+v)", w) {
			assert.Equal(t, want, got, "Submit(%+v)", w)
		}
	}
	for _, w := range different {
		_, err := f.s.Submit(bg, "req-1", w, f.rail.send)
		assert.ErrorIs(t, err, submissions.ErrIdempotencyConflict, "Submit(%+v)", w)
	}
	// The same value, spelled in a way that is not valid, is bad input, and
	// never a replay.
	for _, amount := range []string{
		strings.Repeat("0", driver.MaxAmountLen-1) + "25", // 25, in one byte too many
		"25." + strings.Repeat("0", driver.MaxAmountLen-2),
		"", "-25", "25e0", " 25", "25 ",
	} {
		_, err := f.s.Submit(bg, "req-1", spelled(amount, "USDC", "0xAbC"), f.rail.send)
		assert.ErrorIs(t, err, submissions.ErrInvalidFingerprint, "Submit(amount %q)", amount)
	}
	for _, w := range []Withdrawal{spelled("25", "US DC", "0xAbC"), spelled("25", "USDC", ""), {Amount: "25", Currency: "USDC", Dest: "0xAbC"}} {
		_, err := f.s.Submit(bg, "req-1", w, f.rail.send)
		assert.ErrorIs(t, err, submissions.ErrInvalidFingerprint, "Submit(%+v)", w)
	}
	f.rail.requireSends(t, 1)
}

func testSmallAmountsCompareNumerically(t *testing.T, newStore Factory) {
	f := setUp(t, newStore)
	f.w.Amount = ".5"
	_, err := f.s.Submit(bg, "req-1", f.w, nil)
	require.NoError(t, err)
	for _, a := range []string{"0.5", "00.50", "0.500", ".5"} {
		f.w.Amount = a
		_, err := f.s.Submit(bg, "req-1", f.w, nil)
		assert.NoError(t, err, "Submit(amount %q): want a replay", a)
	}
	f.w.Amount = "5"
	_, err = f.s.Submit(bg, "req-1", f.w, nil)
	requireRefusal(t, err, submissions.ErrIdempotencyConflict)
}
