package submissions_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemledger/submissions"
)

// TestFingerprintCharacterRanges holds the rules of Fingerprint and of request
// keys to the ends of every range they allow: the last digit and letter of
// each range is accepted (and compares by meaning), and what is one step
// outside is refused.
func TestFingerprintCharacterRanges(t *testing.T) {
	s := submissions.New[withdrawal](quiet)
	base := newWithdrawal("")
	for i, c := range []struct{ amount, currency, same, sameCurrency string }{
		{"9", "USDC", "09.0", "usdc"},
		{"19.99", "USDC", "019.990", "USDC"},
		{"1", "XYZ", "1", "xyz"},
		{"1", "zz", "1.0", "ZZ"},
		{"1", "A9", "1", "a9"},
		{"1", "ABCDEFGHIJKL", "1", "abcdefghijkl"}, // 12 characters
	} {
		w := base
		w.ID, w.Amount, w.Currency = string(rune('a'+i)), c.amount, c.currency
		key := "req-" + w.ID
		_, err := s.Submit(bg, key, w, nil)
		require.NoError(t, err, "amount %q, currency %q", c.amount, c.currency)
		w.Amount, w.Currency = c.same, c.sameCurrency
		_, err = s.Submit(bg, key, w, nil)
		require.NoError(t, err, "amount %q, currency %q after %q, %q: want a replay", c.same, c.sameCurrency, c.amount, c.currency)
	}

	for _, c := range []struct{ name, id, amount, currency, dest string }{
		{"a second point after a leading one", "w-1", ".5.5", "USDC", "0xabc"},
		{"a 13-character currency", "w-1", "1", "ABCDEFGHIJKLM", "0xabc"},
		{"a currency with the byte after Z", "w-1", "1", "US[", "0xabc"},
		{"a currency with the byte before a", "w-1", "1", "us`", "0xabc"},
		{"a withdrawal id that starts with NUL", "\x00w-1", "1", "USDC", "0xabc"},
		{"a destination that starts with NUL", "w-1", "1", "USDC", "\x000xabc"},
	} {
		w := withdrawal{ID: c.id, Amount: c.amount, Currency: c.currency, Dest: c.dest}
		_, err := s.Submit(bg, "req-refused", w, nil)
		assert.ErrorIs(t, err, submissions.ErrInvalidFingerprint, c.name)
	}
	_, err := s.Submit(bg, "\x00req-1", newWithdrawal("w-nul"), nil)
	require.ErrorIs(t, err, submissions.ErrInvalidKey)
}

// TestAnAnswerInAnotherSpellingIsTheSameWithdrawal: the rail may answer with
// the amount and currency spelled otherwise than the request; it is the same
// withdrawal, recorded. A currency that only looks the same is not.
func TestAnAnswerInAnotherSpellingIsTheSameWithdrawal(t *testing.T) {
	for name, s := range ledgers[withdrawal]() {
		t.Run(name, func(t *testing.T) {
			for i, c := range []struct {
				amount, currency string
				same             bool
			}{
				{"25", "usdc", true},
				{"025.000", "Usdc", true},
				{"25", "USD", false},
				{"25", "USDc\u0301", false},
				{"25", "uSD\u212a", false}, // a Kelvin sign, not a K
			} {
				req := withdrawal{ID: fmt.Sprint("w-", i), Amount: "25.00", Currency: "USDC", Dest: "0xabc"}
				if !c.same {
					req.Currency = "USDK"
				}
				out, err := s.Submit(bg, fmt.Sprint("req-", i), req, func(_ context.Context, w withdrawal) (withdrawal, error) {
					w.Amount, w.Currency, w.TxHash = c.amount, c.currency, "0xtx"
					return w, nil
				})
				if c.same {
					assert.NoError(t, err, "an answer of %q %q", c.amount, c.currency)
				} else {
					assert.ErrorIs(t, err, submissions.ErrOutcomeNotRecorded, "an answer of %q %q", c.amount, c.currency)
				}
				assert.Equal(t, c.amount, out.Amount)
			}
		})
	}
}
