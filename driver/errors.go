package driver

import "errors"

// The errors of a ledger, defined here so that each is one value wherever it
// is returned: package submissions returns them as its own, under the same
// names, and says what each means and what its caller may do next. A Store
// returns none of them.
var (
	ErrInvalidKey         = errors.New("invalid request key")
	ErrInvalidTenant      = errors.New("invalid tenant")
	ErrSubmissionInFlight = errors.New("submission in flight")
	ErrAbandoned          = errors.New("no answer of its send was recorded")
	ErrResolvedMeanwhile  = errors.New("resolved otherwise while send ran")
	ErrReleasedMeanwhile  = errors.New("released while send ran")
	ErrUnknownKey         = errors.New("request key is not claimed")
	ErrStoreFailed        = errors.New("store failed")
	ErrNotSent            = errors.New("not sent")
	ErrOutcomeUnknown     = errors.New("outcome unknown")
	ErrOutcomeNotRecorded = errors.New("outcome not recorded")
)

// The errors of an operator's call: package admin returns them as its own,
// under the same names. A Store returns neither.
var (
	ErrClaimChanged = errors.New("claim changed")
	ErrNotSupported = errors.New("not supported by the store")
)

// ErrUnavailable is wrapped by a Store in the error of a call that may
// succeed if made again: its server could not be reached or went away, is
// not (or is no longer) the primary, or rolled the change back. After a
// Settle fails with it, the ledger makes the Settle again, on the claim's
// token, while its caller's ctx lasts: a failover need not leave the answer
// to an operator.
var ErrUnavailable = errors.New("store unavailable")
