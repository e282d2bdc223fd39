package submissions

import (
	"math/big"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
	require.True(t, ok, "big.Rat reads %q", a)
	return r
}

// FuzzAmount checks validAmount against an independent reading of rules 2
// and 3: it accepts exactly the plain positive decimals of at most
// MaxAmountLen bytes, keeps their value, and its output is canonical already,
// also when it is a byte longer than the limit (".5" is "0.5").
func FuzzAmount(f *testing.F) {
	for _, a := range []string{"25.00", "025", "0.50", ".5", "5.", "0", "0.0", ".", "", "-1", "1e3", "1.2.3", "100", "٢٥", strings.Repeat("1", MaxAmountLen+1)} {
		f.Add(a)
	}
	f.Fuzz(func(t *testing.T, a string) {
		c, ok := validAmount(a)
		valid := len(a) <= MaxAmountLen && plainDecimal.MatchString(a) && strings.Trim(a, "0.") != ""
		require.Equal(t, valid, ok, "validAmount(%q) accepts", a)
		if !ok {
			return
		}
		require.Zero(t, value(t, c).Cmp(value(t, a)), "validAmount(%q) = %q keeps the value", a, c)
		again, ok := canonicalAmount(c)
		require.True(t, ok)
		require.Equal(t, c, again, "canonicalAmount(%q) is canonical already", c)
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
		same := value(t, a).Cmp(value(t, b)) == 0
		require.Equal(t, same, ca == cb, "%q (%q) and %q (%q): same value, same canonical form", a, ca, b, cb)
	})
}

// FuzzCurrency checks rules 2 and 3 for currencies: 2-12 ASCII letters or
// digits, compared without case.
func FuzzCurrency(f *testing.F) {
	for _, c := range []string{"USDC", "usdc", "U", "ABCDEFGHIJKLM", "US-D", "ÜSD", "eth2", "@[`{/:"} {
		f.Add(c)
	}
	f.Fuzz(func(t *testing.T, c string) {
		got, ok := canonicalCurrency(c)
		valid := len(c) >= 2 && len(c) <= 12 && strings.IndexFunc(c, func(r rune) bool {
			return !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9')
		}) < 0
		require.Equal(t, valid, ok, "canonicalCurrency(%q) accepts", c)
		if ok {
			require.Equal(t, strings.ToUpper(c), got)
		}
	})
}

// FuzzKey checks rule 1: a key is trimmed, and refused when empty, over
// MaxKeyLen bytes, not UTF-8, or holding a NUL byte.
func FuzzKey(f *testing.F) {
	for _, k := range []string{"req-1", "  req-1 ", "", " \t", "req\x00", "req-\xff", strings.Repeat("k", MaxKeyLen+1), "\u00a0req\u0085",
		" req", "req ", "\treq", "req\n", "\u00a0req", "req\u00a0", "!req!", "\x7freq\x7f", "\x1freq\x1f", "req\u2000", "\u2000req"} {
		f.Add(k)
	}
	f.Fuzz(func(t *testing.T, k string) {
		got, err := validKey(k)
		trimmed := strings.TrimSpace(k)
		valid := trimmed != "" && len(trimmed) <= MaxKeyLen && utf8.ValidString(trimmed) && !strings.Contains(trimmed, "\x00")
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
// above and within its limit, refused with ErrInvalidFingerprint otherwise,
// never a panic; and what it accepts, checked again, stays as it is.
func FuzzFingerprint(f *testing.F) {
	f.Add("w-1", "25.00", "usdc", "0xabc")
	f.Add("", "1", "EUR", "d")
	f.Add("w\x00", "1", "EUR", "d")
	f.Add("w", "1", "EUR", "d-\xff")
	f.Add("w", "-1", "EU", "d")
	f.Add(strings.Repeat("i", MaxWithdrawalIDLen+1), "1", "EUR", "d")
	f.Fuzz(func(t *testing.T, id, amount, currency, dest string) {
		fp := Fingerprint{WithdrawalID: id, Amount: amount, Currency: currency, Destination: dest}
		err := normalize(&fp)
		_, amountOK := canonicalAmount(amount)
		_, currencyOK := canonicalCurrency(currency)
		text := func(s string, limit int) bool {
			return s != "" && len(s) <= limit && utf8.ValidString(s) && !strings.Contains(s, "\x00")
		}
		valid := amountOK && len(amount) <= MaxAmountLen && currencyOK && text(id, MaxWithdrawalIDLen) && text(dest, MaxDestinationLen)
		if valid {
			require.NoError(t, err, "%+v", fp)
		} else {
			require.ErrorIs(t, err, ErrInvalidFingerprint, "%+v", fp)
			return
		}
		require.Equal(t, id, fp.WithdrawalID, "the id is kept as it is")
		require.Equal(t, dest, fp.Destination, "the destination is kept as it is")
		again := fp
		require.NoError(t, normalize(&again))
		require.Equal(t, fp, again, "a canonical fingerprint stays as it is")
	})
}

// FuzzText checks the fast path of validText against the plain reading of
// its rule: not empty, within the limit, valid UTF-8, no NUL byte.
func FuzzText(f *testing.F) {
	for _, s := range []string{"", "a", "\x80", "\x7f", "a\x00", "0b7e91d4-0000-4c2f-8a6b-000000000001", "abc\x00defghijk", "abcdefghijk\x00",
		"abcdefgh\x80", "abcdefghijk\x80", "\x80abcdefgh", "€uro", "\xff", "exactly8", "seventeen chars!!", strings.Repeat("k", 65)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want := s != "" && len(s) <= 64 && utf8.ValidString(s) && !strings.Contains(s, "\x00")
		require.Equal(t, want, validText(s, 64), "validText(%q)", s)
		plain := !strings.ContainsFunc(s, func(r rune) bool { return r == 0 || r >= utf8.RuneSelf })
		require.Equal(t, plain, plainASCII(s), "plainASCII(%q)", s)
	})
}

func TestDifferingNamesTheFields(t *testing.T) {
	want := Fingerprint{WithdrawalID: "w-1", Amount: "25", Currency: "USDC", Destination: "d"}
	for _, c := range []struct {
		got    Fingerprint
		fields string
	}{
		{Fingerprint{WithdrawalID: "w-1", Amount: "25.00", Currency: "usdc", Destination: "d"}, ""},
		{Fingerprint{WithdrawalID: "w-2", Amount: "25", Currency: "USDC", Destination: "d"}, "WithdrawalID"},
		{Fingerprint{WithdrawalID: "w-1", Amount: "2.5", Currency: "USDC", Destination: "d"}, "Amount"},
		{Fingerprint{WithdrawalID: "w-1", Amount: "", Currency: "USDC", Destination: "d"}, "Amount"},
		{Fingerprint{WithdrawalID: "w-1", Amount: "25", Currency: "US-C", Destination: "d"}, "Currency"},
		{Fingerprint{WithdrawalID: "w-1", Amount: "25", Currency: "USDC", Destination: "D"}, "Destination"},
		{Fingerprint{}, "WithdrawalID, Amount, Currency, Destination"},
	} {
		assert.Equal(t, c.fields, fieldNames(differing(&want, &c.got)), "%+v", c.got)
	}
}
