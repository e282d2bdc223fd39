package driver

import (
	"errors"
	"fmt"

	"github.com/idemledger/submissions/internal/valid"
)

// Limits on what a ledger accepts, in bytes of the input as given. Every
// store holds values up to these sizes.
const (
	MaxTenantLen       = 64   // a tenant id
	MaxKeyLen          = 255  // a request key, after trimming
	MaxWithdrawalIDLen = 255  // Fingerprint.WithdrawalID
	MaxDestinationLen  = 1024 // Fingerprint.Destination
	MaxAmountLen       = 100  // Fingerprint.Amount
)

// valid.Amount applies MaxAmountLen as valid.MaxAmountLen: should the two
// differ, one of these conversions overflows uint and the package does not
// compile.
const _ = uint(MaxAmountLen-valid.MaxAmountLen) + uint(valid.MaxAmountLen-MaxAmountLen)

// ErrInvalidFingerprint: a Fingerprint breaks the rules documented on
// Fingerprint, or the request or outcome is a nil pointer. Nothing was
// claimed or sent. Package submissions returns it as its own.
var ErrInvalidFingerprint = errors.New("invalid fingerprint")

// Fingerprint is what identifies a withdrawal to the ledger. Two requests with
// the same fingerprint are the same withdrawal; a state transition of a
// withdrawal (approved, sending, sent) must not change it. Package
// submissions names it too, as submissions.Fingerprint.
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
	_, err := f.Canonical()
	return err
}

// Canonical returns f with its amount and currency in canonical form
// ("025.50" is "25.5", "usdc" is "USDC"), the form in which a ledger passes
// fingerprints to a Store, or Validate's error. It allocates only for an
// amount with no digit before its point, or a currency with a lower-case
// letter.
func (f Fingerprint) Canonical() (Fingerprint, error) {
	if !valid.Text(f.WithdrawalID, MaxWithdrawalIDLen) {
		return f, fmt.Errorf("%w: WithdrawalID: %s", ErrInvalidFingerprint, valid.TextProblem(f.WithdrawalID, MaxWithdrawalIDLen))
	}
	if !valid.Text(f.Destination, MaxDestinationLen) {
		return f, fmt.Errorf("%w: Destination: %s", ErrInvalidFingerprint, valid.TextProblem(f.Destination, MaxDestinationLen))
	}
	amount, ok := valid.Amount(f.Amount)
	if !ok {
		return f, fmt.Errorf("%w: Amount: not a positive decimal of at most %d bytes", ErrInvalidFingerprint, MaxAmountLen)
	}
	currency, ok := valid.Currency(f.Currency)
	if !ok {
		return f, fmt.Errorf("%w: Currency: not 2-12 ASCII letters or digits", ErrInvalidFingerprint)
	}
	f.Amount, f.Currency = amount, currency
	return f, nil
}
