package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/idemledger/submissions/driver"
	"github.com/idemledger/submissions/observe"
)

// Listed is a claim in flight as the ledger lists it: as its Store does,
// and whether this ledger, or any ledger on a Store that is a
// driver.Tracker, is sending it.
type Listed struct {
	driver.InFlight
	Sending bool
}

// List lists the claims in flight that q selects, each with Sending, or
// returns ErrInvalidTenant for a tenant of q's that is not valid. Its Limit
// must be at least 1.
func (l *Ledger[R]) List(ctx context.Context, q driver.ListQuery) ([]Listed, error) {
	for _, tenant := range q.Tenants {
		if err := ValidateTenant(tenant); err != nil {
			return nil, err
		}
	}
	lister, ok := l.store.(driver.Lister)
	if !ok {
		return nil, fmt.Errorf("%w: the store cannot list its claims in flight (it is not a Lister)", ErrNotSupported)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	found, err := lister.ListInFlight(ctx, q)
	if err != nil {
		return nil, l.failed(ctx, "", "list the claims in flight", err)
	}
	claims := make([]Listed, len(found))
	for i, c := range found {
		sending, err := l.tracker.Sending(ctx, c.Tenant, c.Key, c.Token)
		if err != nil {
			return nil, l.failed(ctx, "", "list the claims in flight", err)
		}
		if t, here := l.tracker.(*tracked[R]); here && !c.Answered {
			if how := t.endedHere(c.Tenant, c.Key, c.Token); how != nil { // as the Store would have it
				c.Abandoned, c.Answered = true, how.answered
			}
		}
		claims[i] = Listed{InFlight: c, Sending: sending != nil}
	}
	return claims, nil
}

// Looked is a key's record as an operator's action finds it.
type Looked[R any] struct {
	Key     string           // the key, trimmed
	Record  driver.Record[R] // meaningful when Found
	Found   bool
	Sending bool // this ledger, or any on a Store that is a driver.Tracker, runs a send under the record's claim
}

// Look checks tenant and key and returns the key's record as the store has
// it, and whether a send runs under its claim.
func (l *Ledger[R]) Look(ctx context.Context, tenant, key string) (Looked[R], error) {
	key, err := begin(ctx, tenant, key)
	if err != nil {
		return Looked[R]{Key: key}, err
	}
	rec, ok, err := l.store.Lookup(ctx, tenant, key)
	if err != nil {
		return Looked[R]{Key: key}, storeFailed("request key "+key, "lookup", err)
	}
	found := Looked[R]{Key: key, Record: rec, Found: ok}
	if ok && !rec.Done && !rec.Answered {
		l.endedHere(tenant, key, &found.Record)
	}
	if ok && !rec.Done {
		sending, err := l.tracker.Sending(ctx, tenant, key, rec.Token)
		if err != nil {
			return found, l.failed(ctx, "request key "+key, "lookup", err)
		}
		found.Sending = sending != nil
	}
	return found, nil
}

// endedHere adds to rec, a record in flight, what this ledger knows of how
// its claim's send ended here, as the Store would have it.
func (l *Ledger[R]) endedHere(tenant, key string, rec *driver.Record[R]) {
	t, ok := l.tracker.(*tracked[R])
	if !ok {
		return
	}
	if how := t.endedHere(tenant, key, rec.Token); how != nil {
		rec.Abandoned = true
		if how.answered {
			rec.Answered, rec.Answer = true, how.answer
		}
	}
}

// Fingerprint returns outcome's fingerprint in canonical form, or the error
// of a nil outcome or an invalid fingerprint.
func (l *Ledger[R]) Fingerprint(outcome R) (driver.Fingerprint, error) {
	return l.fingerprint(outcome)
}

// Exactly returns nil when every store gives outcome back as it is, and
// otherwise says where it would not (see exactly).
func (l *Ledger[R]) Exactly(outcome R) error {
	return exactlyBy(&l.exact, &outcome)
}

// Prune turns the records settled before before into tombstones, in batches
// of batch (at least 1), until a batch prunes fewer or ctx ends, and returns
// how many it pruned.
func (l *Ledger[R]) Prune(ctx context.Context, before time.Time, batch int) (int, error) {
	p, ok := l.store.(driver.Pruner)
	if !ok {
		return 0, fmt.Errorf("%w: the store cannot prune (it is not a Pruner)", ErrNotSupported)
	}
	total := 0
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		pruned, err := p.Prune(ctx, before, batch)
		if err != nil {
			return total, l.failed(ctx, "", "prune", err)
		}
		total += len(pruned)
		for _, r := range pruned {
			l.report(ctx, r.Tenant, observe.EventPruned, r.Key, r.WithdrawalID, 0, nil)
		}
		if len(pruned) < batch {
			return total, nil
		}
	}
}
