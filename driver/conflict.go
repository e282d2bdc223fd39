package driver

import (
	"errors"
	"fmt"
)

// The errors a Store's answers carry. Package submissions returns them as
// its own, under the same names.
var (
	// ErrIdempotencyConflict: the call contradicts what the ledger holds: a
	// request key reused for another withdrawal, a withdrawal claimed by
	// another key (a *ConflictError), an outcome other than the one recorded,
	// or a Release of a key that has an outcome. This call sent nothing (the
	// holder may have); retrying it gets the same answer.
	ErrIdempotencyConflict = errors.New("idempotency conflict")

	// ErrPruned: the request key's record, or the record of the key that
	// claims the withdrawal, was settled and then pruned: its outcome is
	// gone, and the key and the withdrawal stay claimed for ever.
	ErrPruned = errors.New("pruned")
)

// ConflictError reports that a withdrawal is already claimed by another
// request key, and names that key, so that the refused caller can look the
// withdrawal up instead of guessing. Store.Claim answers with one; package
// submissions returns it as it is.
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
