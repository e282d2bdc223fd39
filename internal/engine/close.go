package engine

import (
	"context"
	"fmt"

	"github.com/idemledger/submissions/driver"
	"github.com/idemledger/submissions/observe"
)

// Resolve records outcome on tenant's key: on its claim token, or, when token
// is zero, on whatever claim the key has, claiming the key and the
// withdrawal with the outcome if it has none.
func (l *Ledger[R]) Resolve(ctx context.Context, tenant, key string, token driver.Token, outcome R) error {
	key, err := begin(ctx, tenant, key)
	if err != nil {
		return err
	}
	fp, err := l.fingerprint(outcome)
	if err != nil {
		return err
	}
	if err := exactlyBy(&l.exact, &outcome); err != nil {
		return fmt.Errorf("%w: request key %s: %w", ErrOutcomeNotRecorded, key, err)
	}
	var rec driver.Record[R]
	if token == 0 {
		var claimed bool
		rec, claimed, err = l.store.Claim(ctx, tenant, key, fp, &outcome)
		switch {
		case err != nil:
			return storeFailed("request key "+key, "record", err)
		case claimed:
			l.report(ctx, tenant, observe.EventResolved, key, fp.WithdrawalID, 0, nil)
			return nil
		}
	} else {
		var ok bool
		rec, ok, err = l.store.Lookup(ctx, tenant, key)
		switch {
		case err != nil:
			return storeFailed("request key "+key, "lookup", err)
		case !ok || rec.Token != token:
			return claimChanged(key)
		}
	}
	switch {
	case rec.Pruned:
		return prunedKey(key)
	case Differing(&rec.Fingerprint, &fp) != 0:
		return keyTaken(key)
	case !rec.Done:
		claim := rec.Token
		var settled bool
		if rec, settled, err = l.store.Settle(ctx, tenant, key, claim, outcome); err != nil {
			return storeFailed("request key "+key, "record", err)
		}
		switch {
		case settled:
			l.closed(tenant, key, claim)
			l.report(ctx, tenant, observe.EventResolved, key, fp.WithdrawalID, 0, nil)
			return nil
		case rec.Done:
		case token != 0:
			return claimChanged(key)
		default:
			return fmt.Errorf("%w: request key %s was released while it was resolved", ErrSubmissionInFlight, key)
		}
	}
	return sameAsRecorded(key, rec.Outcome, outcome)
}

// Release drops the claim token of tenant's key, the claim an Admin
// looked at. It refuses a claim whose send is running, and says why a claim
// it did not drop stands: pruned, settled, answered, or changed (released,
// perhaps claimed again).
func (l *Ledger[R]) Release(ctx context.Context, tenant, key string, token driver.Token) error {
	key, err := begin(ctx, tenant, key)
	if err != nil {
		return err
	}
	// A claim seen in the store that no send runs under stands until it is
	// closed: its send could only have started with the claim.
	sending, err := l.tracker.Sending(ctx, tenant, key, token)
	switch {
	case err != nil:
		return l.failed(ctx, "request key "+key, "release", err)
	case sending != nil:
		return inFlight(key)
	}
	rec, released, err := l.store.Release(ctx, tenant, key, token)
	switch {
	case err != nil:
		return storeFailed("request key "+key, "release", err)
	case released:
		l.closed(tenant, key, token)
		l.report(ctx, tenant, observe.EventReleased, key, rec.Fingerprint.WithdrawalID, 0, nil)
		return nil
	case rec.Pruned:
		return prunedKey(key)
	case rec.Done:
		return hasOutcome(key, "an outcome")
	case rec.Answered:
		return answeredKey(key)
	}
	return claimChanged(key)
}

// closed forgets what the ledger kept of the claim token of tenant's key,
// now closed.
func (l *Ledger[R]) closed(tenant, key string, token driver.Token) {
	if t, ok := l.tracker.(*tracked[R]); ok {
		t.forget(tenant, key, token)
	}
}

// failed is the error of a call on what whose wait ended: ctx's error when
// ctx ended, and otherwise the store's failure.
func (l *Ledger[R]) failed(ctx context.Context, what, call string, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	return storeFailed(what, call, err)
}

// Outcome returns the outcome recorded for tenant's key.
func (l *Ledger[R]) Outcome(ctx context.Context, tenant, key string) (outcome R, ok bool, err error) {
	key, err = begin(ctx, tenant, key)
	if err != nil {
		return outcome, false, err
	}
	rec, found, err := l.store.Lookup(ctx, tenant, key)
	switch {
	case err != nil:
		return outcome, false, storeFailed("request key "+key, "lookup", err)
	case found && rec.Pruned:
		return outcome, false, prunedKey(key)
	case !found || !rec.Done:
		return outcome, false, nil
	}
	return rec.Outcome, true, nil
}

// ClaimedBy returns the request key that holds tenant's withdrawalID.
func (l *Ledger[R]) ClaimedBy(ctx context.Context, tenant, withdrawalID string) (key string, ok bool, err error) {
	if err := ValidateTenant(tenant); err != nil {
		return "", false, err
	}
	if err := ctx.Err(); err != nil {
		return "", false, err
	}
	if !validID(withdrawalID) {
		return "", false, nil
	}
	key, ok, err = l.store.ClaimedBy(ctx, tenant, withdrawalID)
	if err != nil {
		return "", false, storeFailed("withdrawal "+withdrawalID, "lookup", err)
	}
	return key, ok, nil
}
