package submissions

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Limits on what the ledger accepts, in bytes of the input as given. Every
// store holds values up to these sizes.
const (
	MaxTenantLen       = 64   // a tenant id (see Submissions.Tenant)
	MaxKeyLen          = 255  // a request key, after trimming
	MaxWithdrawalIDLen = 255  // Fingerprint.WithdrawalID
	MaxDestinationLen  = 1024 // Fingerprint.Destination
	MaxAmountLen       = 100  // Fingerprint.Amount
)

// Fingerprint is what identifies a withdrawal to the ledger. Two requests with
// the same fingerprint are the same withdrawal; a state transition of a
// withdrawal (approved, sending, sent) must not change it.
//
// Fingerprints are compared by meaning, not bytes: amounts numerically
// ("25.00", "25.0" and "025" are equal), currencies case-insensitively, and
// WithdrawalID and Destination exactly. A valid fingerprint has:
//
//   - a WithdrawalID of 1 to MaxWithdrawalIDLen bytes and a Destination of 1
//     to MaxDestinationLen bytes, each valid UTF-8 without NUL bytes;
//   - an Amount of at most MaxAmountLen bytes that is a plain positive
//     decimal: ASCII digits with at most one decimal point, no sign, exponent
//     or spaces, and not zero;
//   - a Currency of 2 to 12 ASCII letters or digits.
//
// Anything else is refused with ErrInvalidFingerprint before anything is
// claimed or sent.
type Fingerprint struct {
	WithdrawalID string // what the claim is on; server-assigned, never client-minted
	Amount       string // positive decimal in major units: "25.00"
	Currency     string // 2-12 ASCII letters/digits, case-insensitive: "usdc" == "USDC"
	Destination  string // compared exactly
}

// Fingerprinter is the constraint on what can be submitted: the service's own
// withdrawal type. Its Fingerprint must not change as the withdrawal moves
// through its states, because the outcome of a send is checked against the
// request by fingerprint.
type Fingerprinter interface {
	Fingerprint() Fingerprint
}

// Validate returns nil if f is a valid fingerprint, and otherwise an error
// wrapping ErrInvalidFingerprint that names the first field at fault: the
// check every ledger call makes, for a service to run when it creates a
// withdrawal.
func (f Fingerprint) Validate() error {
	return normalize(&f)
}

// normalize checks f by the rules of Fingerprint and puts its amount and
// currency in canonical form ("025.50" -> "25.5", "usdc" -> "USDC"), in
// place. It allocates only for an amount with no digit before its point, or a
// currency with a lower-case letter.
func normalize(f *Fingerprint) error {
	if !validText(f.WithdrawalID, MaxWithdrawalIDLen) {
		return fmt.Errorf("%w: WithdrawalID: %s", ErrInvalidFingerprint, textProblem(f.WithdrawalID, MaxWithdrawalIDLen))
	}
	if !validText(f.Destination, MaxDestinationLen) {
		return fmt.Errorf("%w: Destination: %s", ErrInvalidFingerprint, textProblem(f.Destination, MaxDestinationLen))
	}
	amount, ok := validAmount(f.Amount)
	if !ok {
		return fmt.Errorf("%w: Amount: not a positive decimal of at most %d bytes", ErrInvalidFingerprint, MaxAmountLen)
	}
	currency, ok := canonicalCurrency(f.Currency)
	if !ok {
		return fmt.Errorf("%w: Currency: not 2-12 ASCII letters or digits", ErrInvalidFingerprint)
	}
	f.Amount, f.Currency = amount, currency
	return nil
}

// Bits of a fingerprint's fields, for differing.
const (
	withdrawalIDField = 1 << iota
	amountField
	currencyField
	destinationField
)

// differing compares got, as given, with want, a canonical fingerprint, field
// by field, and returns the fields that differ as bits: a field of got that is
// not valid differs. It allocates nothing.
func differing(want *Fingerprint, got *Fingerprint) (fields int) {
	if got.WithdrawalID != want.WithdrawalID {
		fields |= withdrawalIDField
	}
	if a, ok := canonicalAmount(got.Amount); !ok || a != want.Amount {
		fields |= amountField
	}
	if !sameCurrency(want.Currency, got.Currency) {
		fields |= currencyField
	}
	if got.Destination != want.Destination {
		fields |= destinationField
	}
	return fields
}

// sameCurrency reports whether currency, as given, is a valid currency whose
// canonical form is canonical (itself valid), without allocating.
func sameCurrency(canonical, currency string) bool {
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

// fieldNames names the fields of a differing result, by their Fingerprint
// names: "Amount, Destination".
func fieldNames(fields int) string {
	var names []string
	for i, name := range []string{"WithdrawalID", "Amount", "Currency", "Destination"} {
		if fields&(1<<i) != 0 {
			names = append(names, name)
		}
	}
	return strings.Join(names, ", ")
}

// validText reports whether s can be an identifier of at most limit bytes:
// not empty, valid UTF-8, and without NUL bytes, which no database text
// column holds.
func validText(s string, limit int) bool {
	return s != "" && len(s) <= limit && (plainASCII(s) || unicodeText(s))
}

// unicodeText reports whether s is valid UTF-8 without NUL bytes.
func unicodeText(s string) bool {
	return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0
}

// textProblem says why validText refuses s.
func textProblem(s string, limit int) string {
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

// validAmount reports whether a is a valid amount, a plain positive decimal
// of at most MaxAmountLen bytes, and returns its canonical form.
func validAmount(a string) (string, bool) {
	if len(a) > MaxAmountLen {
		return "", false
	}
	return canonicalAmount(a)
}

// canonicalAmount reports whether a is a plain positive decimal, of any
// length, and returns its canonical form: no leading zeros before the first
// significant digit but one before a point, no trailing zeros after the
// point, no bare point. Only an amount with no digit before the point (".5")
// needs a new string, one byte longer; every other canonical form is a
// substring of a. Comparisons read amounts with it, so that the canonical
// form of a valid amount reads as the same amount.
func canonicalAmount(a string) (string, bool) {
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

// canonicalCurrency reports whether c is 2-12 ASCII letters or digits and
// returns it in upper case, allocating only when c has a lower-case letter.
func canonicalCurrency(c string) (string, bool) {
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

// validKey trims key and checks it against the rules of ErrInvalidKey.
func validKey(key string) (string, error) {
	// Most keys have nothing to trim: ASCII white space is at most ' ', and
	// Unicode's other spaces start and end with bytes of at least RuneSelf.
	if n := len(key); n == 0 || key[0] <= ' ' || key[0] >= utf8.RuneSelf || key[n-1] <= ' ' || key[n-1] >= utf8.RuneSelf {
		key = strings.TrimSpace(key)
	}
	if !validText(key, MaxKeyLen) {
		return "", fmt.Errorf("%w: %s", ErrInvalidKey, textProblem(key, MaxKeyLen))
	}
	return key, nil
}
