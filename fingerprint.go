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

// canonical validates f and returns its canonical form: the amount without
// leading or trailing zeros ("025.50" -> "25.5"), the currency in upper case.
// It does not allocate when f is already canonical.
func canonical(f Fingerprint) (Fingerprint, error) {
	if err := checkText("withdrawal id", f.WithdrawalID); err != nil {
		return Fingerprint{}, err
	}
	if err := checkText("destination", f.Destination); err != nil {
		return Fingerprint{}, err
	}
	amount, ok := canonicalAmount(f.Amount)
	if !ok {
		return Fingerprint{}, fmt.Errorf("%w: amount %q is not a positive decimal", ErrInvalidFingerprint, f.Amount)
	}
	currency, ok := canonicalCurrency(f.Currency)
	if !ok {
		return Fingerprint{}, fmt.Errorf("%w: currency %q is not 2-12 ASCII letters or digits", ErrInvalidFingerprint, f.Currency)
	}
	return Fingerprint{WithdrawalID: f.WithdrawalID, Amount: amount, Currency: currency, Destination: f.Destination}, nil
}

// checkText refuses an empty identifier, or one that a store could not hold.
func checkText(field, s string) error {
	switch {
	case s == "":
		return fmt.Errorf("%w: %s is empty", ErrInvalidFingerprint, field)
	case !utf8.ValidString(s):
		return fmt.Errorf("%w: %s is not valid UTF-8", ErrInvalidFingerprint, field)
	case strings.IndexByte(s, 0) >= 0:
		return fmt.Errorf("%w: %s contains a NUL byte", ErrInvalidFingerprint, field)
	}
	return nil
}

// canonicalAmount reports whether a is a plain positive decimal and returns
// its canonical form. Only an amount with no digit before the point (".5")
// needs a new string; every other canonical form is a substring of a.
func canonicalAmount(a string) (string, bool) {
	dot, digits, nonzero := -1, 0, false
	for i := 0; i < len(a); i++ {
		switch c := a[i]; {
		case '0' <= c && c <= '9':
			digits++
			nonzero = nonzero || c != '0'
		case c == '.' && dot < 0:
			dot = i
		default:
			return "", false
		}
	}
	if digits == 0 || !nonzero {
		return "", false
	}
	if dot < 0 {
		return strings.TrimLeft(a, "0"), true
	}
	whole := strings.TrimLeft(a[:dot], "0")
	frac := strings.TrimRight(a[dot+1:], "0")
	start := dot - len(whole)
	switch {
	case frac == "":
		return whole, true // nonzero, so whole has a digit other than 0
	case whole != "":
		return a[start : dot+1+len(frac)], true
	case dot > 0:
		return a[dot-1 : dot+1+len(frac)], true // "00.5" -> "0.5"
	}
	return "0." + frac, true
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
	case !utf8.ValidString(k):
		return "", fmt.Errorf("%w: not valid UTF-8", ErrInvalidKey)
	case strings.IndexByte(k, 0) >= 0:
		return "", fmt.Errorf("%w: contains a NUL byte", ErrInvalidKey)
	}
	return k, nil
}
