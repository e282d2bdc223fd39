package submissions

import "github.com/idemledger/submissions/driver"

// Fingerprint is what identifies a withdrawal to the ledger: a struct of
// four strings, WithdrawalID (what the claim is on; assigned by the service,
// never minted by the client), Amount (a positive decimal in major units,
// "25.00"), Currency (2-12 ASCII letters or digits, "USDC") and Destination.
// Two requests with the same fingerprint are the same withdrawal; a state
// transition of a withdrawal (approved, sending, sent) must not change it.
//
// Fingerprints are compared by meaning, not bytes: amounts numerically
// ("25.00", "25.0" and "025" are equal), currencies case-insensitively, and
// WithdrawalID and Destination exactly. Its Validate method returns the
// error every ledger call returns for an invalid one (ErrInvalidFingerprint);
// the rules are written on driver.Fingerprint, the type it names.
type Fingerprint = driver.Fingerprint

// Fingerprinter is the constraint on what can be submitted: the service's own
// withdrawal type. Its Fingerprint must not change as the withdrawal moves
// through its states, because the outcome of a send is checked against the
// request by fingerprint.
type Fingerprinter = driver.Fingerprinter
