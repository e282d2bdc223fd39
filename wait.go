package submissions

import (
	"context"
	"errors"
	"fmt"
)

// Wait blocks until key has an outcome and returns it, at once if it has
// one already. It returns an error wrapping ErrOutcomeUnknown when the key's
// send ends, or had ended, without an outcome: the key is in flight and no
// send of it runs that this ledger knows of. It returns ErrUnknownKey for a
// key without a claim, or one released while Wait waited; ErrPruned for a
// key whose record was pruned; ctx's error when
// ctx ends first; ErrStoreFailed when the store fails; and ErrInvalidTenant
// or ErrInvalidKey before anything else. Wait sends nothing and changes
// nothing.
//
// In memory Wait knows every send of the ledgers on its store. On another
// Store it knows this ledger's sends, and the sends that ended without an
// answer anywhere when the Store is an Abandoner (Record.Abandoned); any
// other claim in flight, which another process may be sending, is waited for
// until it is settled, released or abandoned (see the README), through the
// Store's WaitClaim if it is a Waiter, by polling Lookup otherwise.
func (s *Submissions[R]) Wait(ctx context.Context, key string) (R, error) {
	var zero R
	if s.tenantErr != nil {
		return zero, s.tenantErr
	}
	key, err := validKey(key)
	if err != nil {
		return zero, err
	}
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	out, err := s.state().be.waitKey(ctx, s.tenant, key)
	switch {
	case err == nil:
		return out, nil
	case errors.Is(err, errNoOutcome):
		return zero, fmt.Errorf("%w: request key %s: %w", ErrOutcomeUnknown, key, err)
	case errors.Is(err, errNotClaimed):
		return zero, fmt.Errorf("%w: request key %s", ErrUnknownKey, key)
	case errors.Is(err, errWaitPruned):
		return zero, prunedKey(key)
	case errors.Is(err, errReleased):
		return zero, fmt.Errorf("%w: request key %s was %w", ErrUnknownKey, key, err)
	case ctx.Err() != nil:
		return zero, ctx.Err()
	}
	return zero, fromStore(key, "wait", err)
}
