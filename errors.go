package submissions

import (
	"errors"
	"fmt"
)

// The errors of a ledger, in three classes by what the caller may do next.
// Refused, nothing sent: ErrInvalidTenant, ErrInvalidKey, ErrInvalidFingerprint,
// ErrIdempotencyConflict (and *ConflictError), ErrSubmissionInFlight, ErrPruned,
// for Wait ErrUnknownKey, and for
// Admin's calls ErrClaimChanged and ErrNotSupported. Failed before sending:
// ErrStoreFailed. Money may have moved: ErrOutcomeUnknown and
// ErrOutcomeNotRecorded.
var (
	// ErrInvalidKey: the request key is empty after trimming white space,
	// longer than MaxKeyLen bytes, not valid UTF-8, or holds a NUL byte.
	// Nothing was read, claimed or sent.
	ErrInvalidKey = errors.New("invalid request key")

	// ErrInvalidTenant: a tenant id given to Tenant is longer than
	// MaxTenantLen bytes, not valid UTF-8, or holds a NUL byte. Every method
	// of that view returns it; nothing was read, claimed or sent.
	ErrInvalidTenant = errors.New("invalid tenant")

	// ErrInvalidFingerprint: a Fingerprint breaks the rules documented on
	// Fingerprint, or the request or outcome is a nil pointer. Nothing was
	// claimed or sent.
	ErrInvalidFingerprint = errors.New("invalid fingerprint")

	// ErrIdempotencyConflict: the call contradicts what the ledger holds: a
	// request key reused for another withdrawal, a withdrawal claimed by
	// another key (a *ConflictError), an outcome other than the one recorded,
	// or a Release of a key that has an outcome. Nothing was sent; retrying
	// the same call gets the same answer.
	ErrIdempotencyConflict = errors.New("idempotency conflict")

	// ErrSubmissionInFlight: the request key is claimed and its outcome is not
	// known: its send is running, or ended without a recorded answer. Nothing
	// was sent by this call. Retry later, or see the outcome with Outcome; an
	// operator closes a key left in flight with Resolve or Release.
	ErrSubmissionInFlight = errors.New("submission in flight")

	// ErrUnknownKey: Wait's key has no claim: it was never claimed, or it
	// was released (before or while Wait waited). Nothing was sent by this
	// call. A Submit under the key claims it afresh.
	ErrUnknownKey = errors.New("request key is not claimed")

	// ErrPruned: the request key's record, or the record of the key that
	// claims the withdrawal, was settled and then pruned (Admin.Prune): its
	// outcome is gone, and the key and the withdrawal stay claimed for ever.
	// Nothing was sent, and nothing ever will be for them: a Submit of the
	// key, or of another key for the withdrawal (a *ConflictError with
	// Pruned set), is refused, as are Resolve and Release of the key, and
	// Outcome cannot replay it. Look at the rail, or the service's own
	// records, for what was sent.
	ErrPruned = errors.New("pruned")

	// ErrStoreFailed: the store failed or could not be reached, and this call
	// sent nothing. A write it was making may or may not stand: a Submit
	// retried may find its key in flight (an operator may Release it: nothing
	// was sent), and a Resolve or Release retried tells which.
	ErrStoreFailed = errors.New("store failed")

	// ErrOutcomeUnknown: send ended without an answer (an error, or a nil
	// answer; a send that panics panics on, with the same meaning), so the
	// money may have moved. The key stays claimed: do not retry under a new
	// key; an operator looks at the rail, then calls Resolve with what was
	// sent, or Release if nothing was.
	ErrOutcomeUnknown = errors.New("outcome unknown")

	// ErrOutcomeNotRecorded: send answered, Submit returns the answer with
	// this error, and the answer was not recorded: its context had ended, it
	// is for another withdrawal (the error names the fields that differ), the
	// store failed while recording it (it may stand all the same), or the key
	// was released or resolved otherwise while send ran. The money may have
	// moved: escalate, never retry under a new key. An answer of the request's
	// own withdrawal may be recorded with Resolve, unless the key was
	// released or resolved meanwhile.
	ErrOutcomeNotRecorded = errors.New("outcome not recorded")

	// ErrClaimChanged: an Admin action names a claim (its tenant, key and
	// token) that is no longer in the store: it was released, and the key
	// may have been claimed again under another token. Nothing was changed,
	// and no other claim of the key was touched. List the claims in flight
	// again, and look at the rail for the claim that holds the key now.
	ErrClaimChanged = errors.New("claim changed")

	// ErrNotSupported: the ledger's Store lacks the optional ability the
	// call needs, such as a Lister for Admin.InFlight and Admin.Reconcile.
	// Nothing was read or changed.
	ErrNotSupported = errors.New("not supported by the store")
)

// ConflictError reports that a withdrawal is already claimed by another
// request key, and names that key, so that the refused caller can look the
// withdrawal up (Outcome(ctx, Holder)) instead of guessing.
//
// errors.Is(err, ErrIdempotencyConflict) is true for a *ConflictError, and
// errors.Is(err, ErrPruned) too when Pruned is set.
type ConflictError struct {
	Tenant       string // the tenant of both keys; "" is the default tenant
	Holder       string // the request key that holds the claim
	Key          string // the request key that was refused
	WithdrawalID string // the withdrawal both keys asked for
	Pruned       bool   // the holder's record was pruned: its outcome is gone
}

// Error says which withdrawal is claimed and by which key.
func (e *ConflictError) Error() string {
	if e.Pruned {
		return fmt.Sprintf("%v: withdrawal %s is claimed by request key %s, which was %v", ErrIdempotencyConflict, e.WithdrawalID, e.Holder, ErrPruned)
	}
	return fmt.Sprintf("%v: withdrawal %s is claimed by request key %s", ErrIdempotencyConflict, e.WithdrawalID, e.Holder)
}

// Unwrap returns ErrIdempotencyConflict, so errors.Is reaches it.
func (e *ConflictError) Unwrap() error { return ErrIdempotencyConflict }

// Is reports whether target is ErrPruned and the holder was pruned.
func (e *ConflictError) Is(target error) bool { return e.Pruned && target == ErrPruned }

// keyTaken is the error of a request key used for another withdrawal.
func keyTaken(key string) error {
	return fmt.Errorf("%w: request key %s belongs to another withdrawal", ErrIdempotencyConflict, key)
}

// hasOutcome is the error of a change to a key that has an outcome.
func hasOutcome(key, what string) error {
	return fmt.Errorf("%w: request key %s has %s", ErrIdempotencyConflict, key, what)
}

// prunedKey is the error of a request key whose record was pruned.
func prunedKey(key string) error {
	return fmt.Errorf("%w: request key %s was pruned", ErrPruned, key)
}

// inFlight is the error of a request key in flight.
func inFlight(key string) error {
	return fmt.Errorf("%w: request key %s", ErrSubmissionInFlight, key)
}

// fromStore is the error of a store call that returned cause: the
// *ConflictError a claim answers with, as it is, and any other an
// ErrStoreFailed.
func fromStore(key, call string, cause error) error {
	if ce, ok := errors.AsType[*ConflictError](cause); ok {
		return ce
	}
	return fmt.Errorf("%w: request key %s: %s: %w", ErrStoreFailed, key, call, cause)
}

// claimChanged is the error of an action on a claim that is gone.
func claimChanged(key string) error {
	return fmt.Errorf("%w: request key %s: the claim is no longer in the store under its token", ErrClaimChanged, key)
}
