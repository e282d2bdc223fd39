package valid

import (
	"math/big"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

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
		c, ok := Amount(a)
		valid := len(a) <= MaxAmountLen && plainDecimal.MatchString(a) && strings.Trim(a, "0.") != ""
		require.Equal(t, valid, ok, "Amount(%q) accepts", a)
		if !ok {
			return
		}
		require.Zero(t, value(t, c).Cmp(value(t, a)), "Amount(%q) = %q keeps the value", a, c)
		again, ok := CanonicalAmount(c)
		require.True(t, ok)
		require.Equal(t, c, again, "CanonicalAmount(%q) is canonical already", c)
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
		ca, okA := CanonicalAmount(a)
		cb, okB := CanonicalAmount(b)
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
		got, ok := Currency(c)
		valid := len(c) >= 2 && len(c) <= 12 && strings.IndexFunc(c, func(r rune) bool {
			return !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9')
		}) < 0
		require.Equal(t, valid, ok, "Currency(%q) accepts", c)
		if ok {
			require.Equal(t, strings.ToUpper(c), got)
		}
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
		require.Equal(t, want, Text(s, 64), "Text(%q)", s)
		plain := !strings.ContainsFunc(s, func(r rune) bool { return r == 0 || r >= utf8.RuneSelf })
		require.Equal(t, plain, plainASCII(s), "plainASCII(%q)", s)
	})
}
