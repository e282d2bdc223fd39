package valid

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestTextAtItsBounds: the limit counts bytes and admits exactly limit; a NUL
// byte or invalid UTF-8 is refused wherever it is, in short and long text,
// ASCII or not.
func TestTextAtItsBounds(t *testing.T) {
	for _, c := range []struct {
		s    string
		want bool
	}{
		{strings.Repeat("k", 64), true},
		{strings.Repeat("k", 65), false},
		{strings.Repeat("é", 32), true}, // 64 bytes
		{strings.Repeat("é", 32) + "k", false},
		{"", false},
		{"\x00é", false},
		{"é\x00", false},
		{"\x00", false},
		{"abcdefgh\x00", false},
		{"é", true},
		{"\xff", false},
		{"abcdefghijklmnop", true},
		{"abcdefghijklmnopq", true},
	} {
		assert.Equal(t, c.want, Text(c.s, 64), "Text(%q, 64)", c.s)
	}
}

func TestTextProblemSaysWhy(t *testing.T) {
	assert.Equal(t, "empty", TextProblem("", 4))
	assert.Equal(t, "longer than 4 bytes", TextProblem("abcde", 4))
	assert.Equal(t, "not valid UTF-8", TextProblem("a\xff", 4))
	assert.Equal(t, "has a NUL byte", TextProblem("a\x00", 4))
	assert.Equal(t, "has a NUL byte", TextProblem("abc\x00", 4), "at the limit")
}

// TestAmountsAtTheirBounds: every digit, one point at most wherever it is,
// and the limit of MaxAmountLen bytes as given.
func TestAmountsAtTheirBounds(t *testing.T) {
	for _, c := range []struct {
		a, want string
		ok      bool
	}{
		{"9", "9", true},
		{"19.9", "19.9", true},
		{"1", "1", true},
		{"0.90", "0.9", true},
		{".5", "0.5", true},
		{".5.5", "", false},
		{"5.5.", "", false},
		{"1/2", "", false},
		{"1:2", "", false},
		{strings.Repeat("0", MaxAmountLen-1) + "1", "1", true},
		{strings.Repeat("0", MaxAmountLen) + "1", "", false},
	} {
		got, ok := Amount(c.a)
		assert.Equal(t, c.ok, ok, "Amount(%q) accepts", c.a)
		assert.Equal(t, c.want, got, "Amount(%q)", c.a)
	}
}

// TestCurrenciesAtTheirBounds: 2 to 12 letters or digits, the ends of each
// range included, in upper case.
func TestCurrenciesAtTheirBounds(t *testing.T) {
	for _, c := range []struct {
		c, want string
		ok      bool
	}{
		{"EU", "EU", true},
		{"E", "", false},
		{"ABCDEFGHIJKL", "ABCDEFGHIJKL", true},
		{"ABCDEFGHIJKLM", "", false},
		{"ZZ", "ZZ", true},
		{"AA", "AA", true},
		{"A9", "A9", true},
		{"A0", "A0", true},
		{"zz", "ZZ", true},
		{"az", "AZ", true},
		{"A@", "", false},
		{"A[", "", false},
		{"A`", "", false},
		{"A{", "", false},
		{"A/", "", false},
		{"A:", "", false},
	} {
		got, ok := Currency(c.c)
		assert.Equal(t, c.ok, ok, "Currency(%q) accepts", c.c)
		assert.Equal(t, c.want, got, "Currency(%q)", c.c)
	}
}

func TestSameCurrencyReadsCase(t *testing.T) {
	assert.True(t, SameCurrency("USDC", "usdc"))
	assert.True(t, SameCurrency("USDC", "UsDc"))
	assert.True(t, SameCurrency("AZ", "az"))
	assert.True(t, SameCurrency("USD1", "usd1"), "digits stay as they are")
	assert.True(t, SameCurrency("A09", "a09"))
	assert.False(t, SameCurrency("USDC", "USD"))
	assert.False(t, SameCurrency("USDC", "USDT"))
	assert.False(t, SameCurrency("A{", "a["), "only letters change case")
	assert.False(t, SameCurrency("A@", "a`"))
}

func TestTrimTakesSurroundingSpace(t *testing.T) {
	for in, want := range map[string]string{
		"req-1":           "req-1",
		"  req-1 ":        "req-1",
		"\treq\n":         "req",
		"\u00a0req":       "req",
		"req\u00a0":       "req",
		"\u2000req":       "req",
		"!req!":           "!req!",
		"":                "",
		" ":               "",
		"re q":            "re q",
		"\u00e9req\u00e9": "\u00e9req\u00e9",
	} {
		assert.Equal(t, want, Trim(in), "Trim(%q)", in)
	}
}
