package submissions_test

import (
	"errors"
	"log/slog"
	"testing"

	"github.com/idemledger/submissions"
)

// TestFingerprintCharacterRanges holds the rules of Fingerprint and of request
// keys to the ends of every range they allow: the last digit and letter of
// each range is accepted (and compares by meaning), and what is one step
// outside is refused.
func TestFingerprintCharacterRanges(t *testing.T) {
	s := submissions.New[withdrawal](submissions.WithLogger(slog.New(slog.DiscardHandler)))
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
		if _, err := s.Submit(bg, key, w, nil); err != nil {
			t.Fatalf("amount %q, currency %q: %v", c.amount, c.currency, err)
		}
		w.Amount, w.Currency = c.same, c.sameCurrency
		if _, err := s.Submit(bg, key, w, nil); err != nil {
			t.Fatalf("amount %q, currency %q after %q, %q: got %v; want a replay", c.same, c.sameCurrency, c.amount, c.currency, err)
		}
	}

	for _, c := range []struct{ name, id, amount, currency, dest string }{
		{"a second point after a leading one", "w-1", ".5.5", "USDC", "0xabc"},
		{"a 13-character currency", "w-1", "1", "ABCDEFGHIJKLM", "0xabc"},
		{"a withdrawal id that starts with NUL", "\x00w-1", "1", "USDC", "0xabc"},
		{"a destination that starts with NUL", "w-1", "1", "USDC", "\x000xabc"},
	} {
		w := withdrawal{ID: c.id, Amount: c.amount, Currency: c.currency, Dest: c.dest}
		if _, err := s.Submit(bg, "req-refused", w, nil); !errors.Is(err, submissions.ErrInvalidFingerprint) {
			t.Errorf("%s: got %v; want ErrInvalidFingerprint", c.name, err)
		}
	}
	_, err := s.Submit(bg, "\x00req-1", newWithdrawal("w-nul"), nil)
	wantErr(t, err, submissions.ErrInvalidKey)
}
