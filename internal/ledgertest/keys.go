package ledgertest

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemledger/submissions"
	"github.com/idemledger/submissions/driver"
)

// Request keys: trimmed; empty, too long, not UTF-8 or holding a NUL byte
// refused by every method before anything else happens.
var keyTests = []test{
	{"KeyIsTrimmed", testKeyIsTrimmed},
	{"KeyAtTheLimitIsAccepted", testKeyAtTheLimitIsAccepted},
	{"InvalidKeysAreRefusedByEveryMethodFirst", testInvalidKeysAreRefusedByEveryMethodFirst},
}

func testKeyIsTrimmed(t *testing.T, newStore Factory) {
	f := setUp(t, newStore)
	first, err := f.s.Submit(bg, "  req-1 \t\n", f.w, f.rail.send)
	require.NoError(t, err)
	got, err := f.s.Submit(bg, "req-1", f.w, f.rail.send)
	require.NoError(t, err)
	require.Equal(t, first, got)
	f.rail.requireSends(t, 1)
	requireHolder(t, f.s, "w-1", "req-1")
	requireOutcome(t, f.s, " req-1", first, true)
}

func testKeyAtTheLimitIsAccepted(t *testing.T, newStore Factory) {
	f := setUp(t, newStore)
	ascii := strings.Repeat("k", driver.MaxKeyLen)
	wide := strings.Repeat("€", driver.MaxKeyLen/3) // three bytes each: 255 bytes
	for i, key := range []string{ascii, wide} {
		w := newWithdrawal("w-" + string(rune('a'+i)))
		out, err := f.s.Submit(bg, "  "+key+"  ", w, f.rail.send)
		require.NoError(t, err, "Submit with a %d-byte key", len(key))
		requireHolder(t, f.s, w.ID, key)
		requireOutcome(t, f.s, key, out, true)
	}
}

func testInvalidKeysAreRefusedByEveryMethodFirst(t *testing.T, newStore Factory) {
	keys := map[string]string{
		"empty":                "",
		"white space":          " \t\n ",
		"one byte too long":    strings.Repeat("k", driver.MaxKeyLen+1),
		"a wide rune too long": strings.Repeat("€", driver.MaxKeyLen/3) + "k",
		"not UTF-8":            "req-\xff",
		"NUL":                  "req\x001",
	}
	done, cancel := context.WithCancel(bg)
	cancel()
	for name, key := range keys {
		t.Run(name, func(t *testing.T) {
			f := setUp(t, newStore)
			// A done context and an invalid fingerprint: the key is checked first.
			bad := Withdrawal{ID: "w-1", Amount: "-1", Currency: "USDC", Dest: "0xabc"}
			_, err := f.s.Submit(done, key, bad, f.rail.send)
			requireRefusal(t, err, submissions.ErrInvalidKey)
			requireRefusal(t, f.s.Resolve(done, key, bad), submissions.ErrInvalidKey)
			requireRefusal(t, f.s.Release(done, key), submissions.ErrInvalidKey)
			_, _, err = f.s.Outcome(done, key)
			requireRefusal(t, err, submissions.ErrInvalidKey)
			_, err = f.s.Submit(bg, key, f.w, f.rail.send)
			requireRefusal(t, err, submissions.ErrInvalidKey)
			requireRefusal(t, f.s.Resolve(bg, key, f.w), submissions.ErrInvalidKey)
			f.rail.requireSends(t, 0)
			requireHolder(t, f.s, "w-1", "")
		})
	}
}
