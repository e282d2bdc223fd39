package submissions

import (
	"errors"
	"fmt"
)

var (
	// ErrIdempotencyConflict is returned when a call contradicts what the
	// ledger already holds: a request key reused for another withdrawal, a
	// withdrawal claimed by another key (as a *ConflictError), an outcome that
	// differs from the one already recorded, or a Release of a key that
	// already produced an outcome.
	ErrIdempotencyConflict = errors.New("idempotency conflict")

	// ErrSubmissionInFlight is returned when a request key is claimed and its
	// outcome is not known yet: its send is running, or it failed in a way
	// that leaves the money possibly moving. The key stays claimed until
	// Resolve or Release closes it.
	ErrSubmissionInFlight = errors.New("submission in flight")

	// ErrInvalidKey is returned by every method that takes a request key when
	// the key is empty after trimming white space, longer than MaxKeyLen
	// bytes, not valid UTF-8, or contains a NUL byte. Nothing is claimed,
	// sent or read.
	ErrInvalidKey = errors.New("invalid request key")

	// ErrOutcomeNotRecorded is returned, with the outcome send returned, when
	// that outcome was not recorded: the caller's context had ended, the
	// store failed (a lost connection, a database down), or while its send
	// ran the key was released through another instance or resolved with
	// another outcome, which stands. The money may have moved. Unless it was
	// released or resolved, the key stays in flight: resolve it with the
	// outcome that came with this error. A store that failed to answer may
	// have recorded the outcome all the same; resolving the key with it is
	// accepted then too.
	ErrOutcomeNotRecorded = errors.New("outcome not recorded")

	// ErrInvalidFingerprint is returned when a withdrawal's Fingerprint breaks
	// the rules documented on Fingerprint. Nothing is claimed or sent.
	ErrInvalidFingerprint = errors.New("invalid fingerprint")
)

// ConflictError reports that a withdrawal is already claimed by another
// request key. It names the holder so that the refused caller can look the
// withdrawal up (Outcome(ctx, Holder)) instead of guessing.
//
// errors.Is(err, ErrIdempotencyConflict) is true for a *ConflictError.
type ConflictError struct {
	// Holder is the request key that holds the claim on the withdrawal.
	Holder string
	// Key is the request key that was refused.
	Key string
	// WithdrawalID is the withdrawal both keys asked for.
	WithdrawalID string
}

// Error says which withdrawal is claimed and by which key.
func (e *ConflictError) Error() string {
	return fmt.Sprintf("%v: withdrawal %s is claimed by request key %s", ErrIdempotencyConflict, e.WithdrawalID, e.Holder)
}

// Unwrap returns ErrIdempotencyConflict, so errors.Is reaches it.
func (e *ConflictError) Unwrap() error { return ErrIdempotencyConflict }

// conflictf returns an error wrapping ErrIdempotencyConflict.
func conflictf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrIdempotencyConflict}, args...)...)
}

// keyTaken returns the ErrIdempotencyConflict of a request key used for a
// withdrawal other than the one it was first used for.
func keyTaken(key string) error {
	return conflictf("request key %s belongs to another withdrawal", key)
}

// inFlight returns an error wrapping ErrSubmissionInFlight for key.
func inFlight(key, why string) error {
	return fmt.Errorf("%w: request key %s %s", ErrSubmissionInFlight, key, why)
}
