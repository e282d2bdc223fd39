// Package valid holds the rules on the text a ledger accepts: identifiers,
// amounts and currencies, checked and put in canonical form without
// allocating where it can. The driver package's Fingerprint, the engine and
// the memory store read them here, so that every door applies one rule.
package valid

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxAmountLen is the most bytes an amount may have as given:
// driver.MaxAmountLen, which driver makes sure at compile time is this number.
const MaxAmountLen = 100

// Text reports whether s can be an identifier of at most limit bytes: not
// empty, valid UTF-8, and without NUL bytes, which no database text column
// holds.
func Text(s string, limit int) bool {
	return s != "" && len(s) <= limit && (plainASCII(s) || unicodeText(s))
}

// unicodeText reports whether s is valid UTF-8 without NUL bytes.
func unicodeText(s string) bool {
	return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0
}

// TextProblem says why Text refuses s.
func TextProblem(s string, limit int) string {
	switch {
	case s == "":
		return "empty"
	case len(s) > limit:
		return fmt.Sprintf("longer than %d bytes", limit)
	case !utf8.ValidString(s):
		return "not valid UTF-8"
	}
	return "has a NUL byte"
}

// plainASCII reports whether every byte of s is ASCII and not NUL, the usual
// identifier, checked eight bytes at a time. A false answer says nothing: the
// caller checks such a string byte by byte.
func plainASCII(s string) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	n := len(s)
	if n < 8 {
		for i := 0; i < n; i++ {
			if b := s[i]; b == 0 || b >= utf8.RuneSelf {
				return false
			}
		}
		return true
	}
	// A byte with its high bit set, or a zero byte (whose subtraction
	// borrows into its high bit), leaves a high bit set in seen. The last
	// word overlaps the one before it unless n is a multiple of 8.
	var seen uint64
	for i := 0; i < n-8; i += 8 {
		x := word(s, i)
		seen |= x | (x - ones)
	}
	x := word(s, n-8)
	seen |= x | (x - ones)
	return seen&highs == 0
}

// word returns the eight bytes of s from i as a little-endian number.
func word(s string, i int) uint64 {
	s = s[i : i+8]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

// Amount reports whether a is a valid amount, a plain positive decimal of
// at most MaxAmountLen bytes, and returns its canonical form.
func Amount(a string) (string, bool) {
	if len(a) > MaxAmountLen {
		return "", false
	}
	return CanonicalAmount(a)
}

// CanonicalAmount reports whether a is a plain positive decimal, of any
// length, and returns its canonical form: no leading zeros before the first
// significant digit but one before a point, no trailing zeros after the
// point, no bare point. Only an amount with no digit before the point (".5")
// needs a new string, one byte longer; every other canonical form is a
// substring of a. Comparisons read amounts with it, so that the canonical
// form of a valid amount reads as the same amount.
func CanonicalAmount(a string) (string, bool) {
	dot, first, end := -1, -1, -1 // the point; the first non-zero digit; past the last one
	for i := 0; i < len(a); i++ {
		c := a[i]
		switch {
		case c-'1' <= '9'-'1': // a byte, so c < '1' wraps to a large value
			if first < 0 {
				first = i
			}
			end = i + 1
		case c == '0':
		case c == '.' && dot < 0:
			dot = i
		default:
			return "", false
		}
	}
	switch {
	case first < 0: // no digit, or only zeros
		return "", false
	case dot < 0: // an integer keeps its trailing zeros
		return a[first:], true
	case end <= dot: // the fraction is all zeros: drop it and the point
		end = dot
	}
	switch {
	case first < dot:
		return a[first:end], true
	case dot > 0: // "00.5": keep the zero just before the point
		return a[dot-1 : end], true
	}
	return "0" + a[:end], true
}

// Currency reports whether c is 2-12 ASCII letters or digits and returns it
// in upper case, allocating only when c has a lower-case letter.
func Currency(c string) (string, bool) {
	if len(c) < 2 || len(c) > 12 {
		return "", false
	}
	lower := false
	for i := 0; i < len(c); i++ {
		switch b := c[i]; {
		case b-'A' <= 'Z'-'A', b-'0' <= '9'-'0': // a byte: below the range wraps
		case b-'a' <= 'z'-'a':
			lower = true
		default:
			return "", false
		}
	}
	if lower {
		return strings.ToUpper(c), true
	}
	return c, true
}

// SameCurrency reports whether currency, as given, is a valid currency whose
// canonical form is canonical (itself valid), without allocating.
func SameCurrency(canonical, currency string) bool {
	if len(currency) != len(canonical) {
		return false
	}
	for i := 0; i < len(currency); i++ {
		b := currency[i]
		if b-'a' <= 'z'-'a' {
			b -= 'a' - 'A'
		}
		if b != canonical[i] {
			return false
		}
	}
	return true
}

// Trim returns key without surrounding white space.
func Trim(key string) string {
	return strings.TrimSpace(key)
}
