package submissions

import (
	"errors"
	"math/big"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"
)

// plainDecimal is rule 2's amount, said another way: digits with at most one
// point, at least one digit.
var plainDecimal = regexp.MustCompile(`^([0-9]+\.?[0-9]*|\.[0-9]+)$`)

// value returns a's value, for an amount that plainDecimal accepts.
func value(t *testing.T, a string) *big.Rat {
	t.Helper()
	if strings.HasSuffix(a, ".") {
		a += "0"
	}
	r, ok := new(big.Rat).SetString(a)
	if !ok {
		t.Fatalf("big.Rat cannot read %q", a)
	}
	return r
}

// FuzzAmount checks canonicalAmount against an independent reading of rule 2
// and 3: it accepts exactly the plain positive decimals, keeps their value,
// and its output is canonical already.
func FuzzAmount(f *testing.F) {
	for _, a := range []string{"25.00", "025", "0.50", ".5", "5.", "0", "0.0", ".", "", "-1", "1e3", "1.2.3", "100", "٢٥"} {
		f.Add(a)
	}
	f.Fuzz(func(t *testing.T, a string) {
		c, ok := canonicalAmount(a)
		valid := plainDecimal.MatchString(a) && strings.Trim(a, "0.") != ""
		if ok != valid {
			t.Fatalf("canonicalAmount(%q): ok %v; want %v", a, ok, valid)
		}
		if !ok {
			return
		}
		if value(t, c).Cmp(value(t, a)) != 0 {
			t.Fatalf("canonicalAmount(%q) = %q: another value", a, c)
		}
		if again, ok := canonicalAmount(c); !ok || again != c {
			t.Fatalf("canonicalAmount(%q) = %q, %v; want it unchanged", c, again, ok)
		}
	})
}

// FuzzSameAmount checks rule 3: two amounts have the same canonical form
// exactly when they have the same value.
func FuzzSameAmount(f *testing.F) {
	f.Add("25.00", "25")
	f.Add("0.5", ".50")
	f.Add("10", "1")
	f.Add("2.55", "25.5")
	f.Fuzz(func(t *testing.T, a, b string) {
		ca, okA := canonicalAmount(a)
		cb, okB := canonicalAmount(b)
		if !okA || !okB {
			return
		}
		if same := value(t, a).Cmp(value(t, b)) == 0; same != (ca == cb) {
			t.Fatalf("%q (%q) and %q (%q): same value %v, same canonical form %v", a, ca, b, cb, same, ca == cb)
		}
	})
}

// FuzzCurrency checks rule 2 and 3 for currencies: 2-12 ASCII letters or
// digits, compared without case.
func FuzzCurrency(f *testing.F) {
	for _, c := range []string{"USDC", "usdc", "U", "ABCDEFGHIJKLM", "US-D", "ÜSD", "eth2"} {
		f.Add(c)
	}
	f.Fuzz(func(t *testing.T, c string) {
		got, ok := canonicalCurrency(c)
		valid := len(c) >= 2 && len(c) <= 12 && strings.IndexFunc(c, func(r rune) bool {
			return !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9')
		}) < 0
		if ok != valid {
			t.Fatalf("canonicalCurrency(%q): ok %v; want %v", c, ok, valid)
		}
		if ok && got != strings.ToUpper(c) {
			t.Fatalf("canonicalCurrency(%q) = %q; want %q", c, got, strings.ToUpper(c))
		}
	})
}

// FuzzKey checks rule 1: a key is trimmed, and refused when empty, over
// MaxKeyLen bytes, not UTF-8, or holding a NUL byte.
func FuzzKey(f *testing.F) {
	for _, k := range []string{"req-1", "  req-1 ", "", " \t", "req\x00", "req-\xff", strings.Repeat("k", MaxKeyLen+1)} {
		f.Add(k)
	}
	f.Fuzz(func(t *testing.T, k string) {
		got, err := validKey(k)
		trimmed := strings.TrimSpace(k)
		valid := trimmed != "" && len(trimmed) <= MaxKeyLen && utf8.ValidString(trimmed) && !strings.Contains(trimmed, "\x00")
		if (err == nil) != valid {
			t.Fatalf("validKey(%q): error %v; want valid %v", k, err, valid)
		}
		if err == nil && got != trimmed {
			t.Fatalf("validKey(%q) = %q; want %q", k, got, trimmed)
		}
	})
}

// FuzzFingerprint checks a whole fingerprint as Submit checks it (normalize,
// then checkIdentity): accepted exactly when every part is valid by the
// readings above, refused with ErrInvalidFingerprint otherwise, never a
// panic; and what it accepts, checked again, stays as it is.
func FuzzFingerprint(f *testing.F) {
	f.Add("w-1", "25.00", "usdc", "0xabc")
	f.Add("", "1", "EUR", "d")
	f.Add("w\x00", "1", "EUR", "d")
	f.Add("w", "1", "EUR", "d-\xff")
	f.Add("w", "-1", "EU", "d")
	f.Fuzz(func(t *testing.T, id, amount, currency, dest string) {
		fp := Fingerprint{WithdrawalID: id, Amount: amount, Currency: currency, Destination: dest}
		err := normalize(&fp)
		_, amountOK := canonicalAmount(amount)
		_, currencyOK := canonicalCurrency(currency)
		text := func(s string) bool { return s != "" && utf8.ValidString(s) && !strings.Contains(s, "\x00") }
		valid := amountOK && currencyOK && text(id) && text(dest)
		switch {
		case (err == nil) != valid:
			t.Fatalf("%+v: error %v; want valid %v", fp, err, valid)
		case err != nil && !errors.Is(err, ErrInvalidFingerprint):
			t.Fatalf("%+v: error %v; want an ErrInvalidFingerprint", fp, err)
		case err != nil:
			return
		}
		if fp.WithdrawalID != id || fp.Destination != dest {
			t.Fatalf("%+v: the id or the destination changed", fp)
		}
		again := fp
		if err := normalize(&again); err != nil || again != fp {
			t.Fatalf("normalize(%+v) = %+v, %v; want it unchanged", fp, again, err)
		}
	})
}
