package engine

import (
	"errors"
	"fmt"

	"github.com/idemledger/submissions/driver"
)

// The ledger's errors. Package submissions documents them and returns them as
// its own (and admin ErrClaimChanged and ErrNotSupported); driver defines the
// ones a Store's answers carry.
var (
	ErrInvalidKey         = errors.New("invalid request key")
	ErrInvalidTenant      = errors.New("invalid tenant")
	ErrSubmissionInFlight = errors.New("submission in flight")
	ErrUnknownKey         = errors.New("request key is not claimed")
	ErrStoreFailed        = errors.New("store failed")
	ErrNotSent            = errors.New("not sent")
	ErrOutcomeUnknown     = errors.New("outcome unknown")
	ErrOutcomeNotRecorded = errors.New("outcome not recorded")
	ErrClaimChanged       = errors.New("claim changed")
	ErrNotSupported       = errors.New("not supported by the store")
)

// storeFailed is the one place where a Store's error becomes the caller's:
// the *ConflictError a claim answers with goes on as it is, and any other
// error is an ErrStoreFailed of call on what ("request key k1", "withdrawal
// w-1").
func storeFailed(what, call string, cause error) error {
	if ce, ok := errors.AsType[*driver.ConflictError](cause); ok {
		return ce
	}
	if what == "" {
		return fmt.Errorf("%w: %s: %w", ErrStoreFailed, call, cause)
	}
	return fmt.Errorf("%w: %s: %s: %w", ErrStoreFailed, what, call, cause)
}

// keyTaken is the error of a request key used for another withdrawal.
func keyTaken(key string) error {
	return fmt.Errorf("%w: request key %s belongs to another withdrawal", driver.ErrIdempotencyConflict, key)
}

// hasOutcome is the error of a change to a key that has an outcome.
func hasOutcome(key, what string) error {
	return fmt.Errorf("%w: request key %s has %s", driver.ErrIdempotencyConflict, key, what)
}

// prunedKey is the error of a request key whose record was pruned.
func prunedKey(key string) error {
	return fmt.Errorf("%w: request key %s was pruned", driver.ErrPruned, key)
}

// inFlight is the error of a request key in flight.
func inFlight(key string) error {
	return fmt.Errorf("%w: request key %s", ErrSubmissionInFlight, key)
}

// claimChanged is the error of an action on a claim that is gone.
func claimChanged(key string) error {
	return fmt.Errorf("%w: request key %s: the claim is no longer in the store under its token", ErrClaimChanged, key)
}

// errNilRequest is the error of a nil request or outcome, which has no
// fingerprint.
func errNilRequest(v any) error {
	return fmt.Errorf("%w: nil %T", driver.ErrInvalidFingerprint, v)
}
