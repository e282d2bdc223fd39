package submissions

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxKeyLen is the longest request key accepted, in bytes, after trimming.
const MaxKeyLen = 255

// Fingerprint is what identifies a withdrawal to the ledger. Two requests with
// the same fingerprint are the same withdrawal; a state transition of a
// withdrawal (approved, sending, sent) must not change it.
//
// Fingerprints are compared by meaning, not bytes: amounts numerically
// ("25.00", "25.0" and "025" are equal), currencies case-insensitively, and
// WithdrawalID and Destination exactly. A valid fingerprint has:
//
//   - a non-empty WithdrawalID and Destination, each valid UTF-8 without NUL
//     bytes (so that every store can hold them);
//   - an Amount that is a plain positive decimal: ASCII digits with at most
//     one decimal point, no sign, exponent or spaces, and not zero;
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

// normalize validates f's amount and currency and puts both in canonical
// form ("025.50" -> "25.5", "usdc" -> "USDC"), in place: copies of a
// Fingerprint cost more than its checks. It allocates nothing when they are
// canonical already, nor for most amounts that are not. It leaves the withdrawal id and destination to checkIdentity: they are compared
// exactly, so a request whose id and destination equal those of a valid
// record is valid without a second look.
func normalize(f *Fingerprint) error {
	amount, ok := canonicalAmount(f.Amount)
	if !ok {
		return fmt.Errorf("%w: amount %q is not a positive decimal", ErrInvalidFingerprint, f.Amount)
	}
	currency, ok := canonicalCurrency(f.Currency)
	if !ok {
		return fmt.Errorf("%w: currency %q is not 2-12 ASCII letters or digits", ErrInvalidFingerprint, f.Currency)
	}
	f.Amount, f.Currency = amount, currency
	return nil
}

// checkIdentity refuses an empty withdrawal id or destination, or one that a
// store could not hold as text.
func checkIdentity(f *Fingerprint) error {
	if err := checkText("withdrawal id", f.WithdrawalID); err != nil {
		return err
	}
	return checkText("destination", f.Destination)
}

// checkText refuses an empty identifier, or one that a store could not hold.
func checkText(field, s string) error {
	if s == "" {
		return fmt.Errorf("%w: %s is empty", ErrInvalidFingerprint, field)
	}
	if why := storable(s); why != "" {
		return fmt.Errorf("%w: %s %s", ErrInvalidFingerprint, field, why)
	}
	return nil
}

// storable says why s cannot be stored as text by every store (not valid
// UTF-8, or a NUL byte), or returns "" when it can.
func storable(s string) string {
	switch {
	case !utf8.ValidString(s):
		return "is not valid UTF-8"
	case strings.IndexByte(s, 0) >= 0:
		return "contains a NUL byte"
	}
	return ""
}

// canonicalAmount reports whether a is a plain positive decimal and returns
// its canonical form: no leading zeros before the first significant digit but
// one before a point, no trailing zeros after the point, no bare point. Only an
// amount with no digit before the point (".5") needs a new string; every other
// canonical form is a substring of a.
func canonicalAmount(a string) (string, bool) {
	// A mutant of end's -1 is equivalent: end is set with first, and read
	// only once first is set.
	dot, first, end := -1, -1, -1 // the point; the first non-zero digit; past the last one
	for i := 0; i < len(a); i++ {
		switch c := a[i]; {
		case c == '0':
		case '1' <= c && c <= '9':
			if first < 0 {
				first = i
			}
			end = i + 1
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
	// A mutant of <= to < here is equivalent: when end == dot, end = dot
	// changes nothing.
	case end <= dot: // the fraction is all zeros: drop it and the point
		end = dot
	}
	switch {
	// A mutant of < to <= here is equivalent: first is the index of a digit
	// and dot that of the point, never the same.
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
		case 'a' <= b && b <= 'z':
			lower = true
		case 'A' <= b && b <= 'Z', '0' <= b && b <= '9':
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
	k := strings.TrimSpace(key)
	switch {
	case k == "":
		return "", fmt.Errorf("%w: empty", ErrInvalidKey)
	case len(k) > MaxKeyLen:
		return "", fmt.Errorf("%w: %d bytes, more than %d", ErrInvalidKey, len(k), MaxKeyLen)
	}
	if why := storable(k); why != "" {
		return "", fmt.Errorf("%w: %s", ErrInvalidKey, why)
	}
	return k, nil
}
