package engine

import (
	"errors"
	"fmt"

	"github.com/idemledger/submissions/driver"
)

// The ledger's errors. Package driver defines them, so that package
// submissions (and admin, ErrClaimChanged and ErrNotSupported) returns these
// very values as its own, and a reader of its doc can open their definitions.
var (
	ErrInvalidKey         = driver.ErrInvalidKey
	ErrInvalidTenant      = driver.ErrInvalidTenant
	ErrSubmissionInFlight = driver.ErrSubmissionInFlight
	ErrAbandoned          = driver.ErrAbandoned
	ErrResolvedMeanwhile  = driver.ErrResolvedMeanwhile
	ErrReleasedMeanwhile  = driver.ErrReleasedMeanwhile
	ErrUnknownKey         = driver.ErrUnknownKey
	ErrStoreFailed        = driver.ErrStoreFailed
	ErrNotSent            = driver.ErrNotSent
	ErrOutcomeUnknown     = driver.ErrOutcomeUnknown
	ErrOutcomeNotRecorded = driver.ErrOutcomeNotRecorded
	ErrClaimChanged       = driver.ErrClaimChanged
	ErrNotSupported       = driver.ErrNotSupported
)

// storeFailed is the one place where a Store's error becomes the caller's:
// the *ConflictError a claim answers with goes on as it is, and any other
// error is an ErrStoreFailed of call on what ("request key k1", "withdrawal
// w-1").
func storeFailed(what, call string, cause error) error {
	if ce, ok := errors.AsType[*driver.ConflictError](cause); ok {
		return ce
	}
	cause = foreign(cause)
	if what == "" {
		return fmt.Errorf("%w: %s: %w", ErrStoreFailed, call, cause)
	}
	return fmt.Errorf("%w: %s: %s: %w", ErrStoreFailed, what, call, cause)
}

// classes are the errors that class a ledger call's outcome, which a Store
// (and a hook it runs) never returns: see foreign.
var classes = [...]error{
	ErrInvalidKey, ErrInvalidTenant, ErrSubmissionInFlight, ErrAbandoned, ErrResolvedMeanwhile,
	ErrReleasedMeanwhile, ErrUnknownKey, ErrStoreFailed, ErrNotSent, ErrOutcomeUnknown,
	ErrOutcomeNotRecorded, ErrClaimChanged, ErrNotSupported, driver.ErrIdempotencyConflict,
	driver.ErrPruned, driver.ErrInvalidFingerprint,
}

// foreign returns a Store's error as the cause a ledger error wraps: err
// itself, unless errors.Is finds one of the ledger's classes in it, when
// only its text is kept. A store's or a hook's error that wraps ErrNotSent,
// say, would otherwise make a claim left in flight read as a send that
// moved nothing.
func foreign(err error) error {
	for _, class := range classes {
		if errors.Is(err, class) {
			return errors.New(err.Error())
		}
	}
	return err
}

// keyTaken is the error of a request key used for another withdrawal.
func keyTaken(key string) error {
	return fmt.Errorf("%w: request key %s belongs to another withdrawal", driver.ErrIdempotencyConflict, key)
}

// hasOutcome is the error of a change to a key that has an outcome.
func hasOutcome(key, what string) error {
	return fmt.Errorf("%w: request key %s has %s", driver.ErrIdempotencyConflict, key, what)
}

// answeredKey is the error of a release of a key in flight whose send got
// an answer that was not recorded: money moved.
func answeredKey(key string) error {
	return fmt.Errorf("%w: request key %s has an answer of its send that was not recorded: %w", driver.ErrIdempotencyConflict, key, ErrAbandoned)
}

// prunedKey is the error of a request key whose record was pruned.
func prunedKey(key string) error {
	return fmt.Errorf("%w: request key %s was pruned", driver.ErrPruned, key)
}

// inFlight is the error of a request key in flight.
func inFlight(key string) error {
	return fmt.Errorf("%w: request key %s", ErrSubmissionInFlight, key)
}

// abandoned is the error of a request key in flight whose send ended
// without a recorded answer: it is in flight, and waits for an operator.
func abandoned(key string) error {
	return fmt.Errorf("%w: request key %s: %w", ErrSubmissionInFlight, key, ErrAbandoned)
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
