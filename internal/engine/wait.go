package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/idemledger/submissions/driver"
)

// Wait blocks until tenant's key has an outcome and returns it. A claim in
// flight is waited for in the store until it is settled, released or
// abandoned there: with its WaitClaim when it is a driver.Waiter and no send
// of this ledger runs under the claim; otherwise by polling Lookup, and then,
// when this ledger is sending the claim, until that send ends too, whichever
// comes first. A wait for a send of this ledger holds none of the store's
// connections, which the send needs to record its answer.
func (l *Ledger[R]) Wait(ctx context.Context, tenant, key string) (R, error) {
	var zero R
	key, err := begin(ctx, tenant, key)
	if err != nil {
		return zero, err
	}
	rec, ok, err := l.store.Lookup(ctx, tenant, key)
	if err != nil {
		return zero, l.failed(ctx, "request key "+key, "wait", err)
	}
	if !ok || rec.Done || rec.Abandoned {
		return l.waited(key, rec, ok, rec.Token)
	}
	token := rec.Token
	ended, err := l.tracker.Sending(ctx, tenant, key, token)
	if err != nil {
		return zero, l.failed(ctx, "request key "+key, "wait", err)
	}
	wctx := ctx
	if ended != nil {
		var cancel context.CancelFunc
		wctx, cancel = context.WithCancel(ctx)
		defer cancel()
		go func() {
			select {
			case <-ended:
				cancel()
			case <-wctx.Done():
			}
		}()
	}
	if w, isWaiter := l.store.(driver.Waiter[R]); isWaiter && ended == nil {
		rec, ok, err = w.WaitClaim(wctx, tenant, key, token)
	} else {
		rec, ok, err = l.poll(wctx, tenant, key, token)
	}
	if err != nil && ctx.Err() == nil && wctx.Err() != nil {
		// This ledger's send ended: what it left is in the store now, and a
		// claim still in flight has no send that may answer.
		rec, ok, err = l.store.Lookup(ctx, tenant, key)
	}
	if err != nil {
		return zero, l.failed(ctx, "request key "+key, "wait", err)
	}
	return l.waited(key, rec, ok, token)
}

// waited is Wait's answer for the record of key a wait for claim token
// ended with.
func (l *Ledger[R]) waited(key string, rec driver.Record[R], ok bool, token driver.Token) (R, error) {
	var zero R
	switch {
	case !ok:
		if token == 0 {
			return zero, fmt.Errorf("%w: %s", ErrUnknownKey, key)
		}
		return zero, fmt.Errorf("%w: %s was released while waited for", ErrUnknownKey, key)
	case rec.Token != token:
		return zero, fmt.Errorf("%w: %s was released while waited for", ErrUnknownKey, key)
	case rec.Pruned:
		return zero, prunedKey(key)
	case rec.Done:
		return rec.Outcome, nil
	}
	return zero, fmt.Errorf("%w: request key %s: its send ended without an answer", ErrOutcomeUnknown, key)
}

// The intervals of the polling of a Store that is not a Waiter.
const (
	pollFirst = 5 * time.Millisecond
	pollMost  = time.Second
)

// poll reads key's record until its claim token is no longer in flight or
// is abandoned, or ctx ends: first after pollFirst, then less and less
// often, at least every pollMost.
func (l *Ledger[R]) poll(ctx context.Context, tenant, key string, token driver.Token) (driver.Record[R], bool, error) {
	t := time.NewTimer(pollFirst)
	defer t.Stop()
	for every := pollFirst; ; every = min(2*every, pollMost) {
		select {
		case <-t.C:
		case <-ctx.Done():
			return driver.Record[R]{}, false, ctx.Err()
		}
		rec, ok, err := l.store.Lookup(ctx, tenant, key)
		if err != nil || !ok || rec.Done || rec.Abandoned || rec.Token != token {
			return rec, ok, err
		}
		t.Reset(every)
	}
}
