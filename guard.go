package submissions

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// guard makes a backend of any Store. It keeps, in the ledger's memory, the
// claims of keys it has asked the store for and the claims it is sending,
// and releases a claim only when it is none of them. The Store's calls run
// outside g.mu, so a slow one holds up only its own caller, and no call waits
// for another except a release, for the claims of its key that were in the
// store when it looked (ending when its ctx does).
type guard[R Fingerprinter] struct {
	Store[R]

	mu       sync.Mutex                 // protects everything below, and every claiming
	claiming map[keyRef][]*claiming     // keys in Store.Claim for a send, each claim of them
	sending  map[claimRef]chan struct{} // claims being sent, each with the channel closed when its send ends, made by a wait for it
}

// claiming is one Store.Claim of a key for a send, until it returns.
type claiming struct {
	returned chan struct{} // closed when it returns; made by a release that waits for it
}

// keyRef names one request key.
type keyRef struct {
	tenant, key string
}

// claimRef names one claim.
type claimRef struct {
	keyRef
	token Token
}

// errWaitEnded is releaseIdle's error when its ctx ends while it waits.
var errWaitEnded = errors.New("waited for a claim of the key")

func newGuard[R Fingerprinter](st Store[R]) *guard[R] {
	return &guard[R]{Store: st, claiming: make(map[keyRef][]*claiming), sending: make(map[claimRef]chan struct{})}
}

func (g *guard[R]) claimToSend(ctx context.Context, tenant, key string, fp Fingerprint, _, _ string) (*Fingerprint, *R, sending[R], error) {
	c, k := &claiming{}, keyRef{tenant, key}
	g.mu.Lock()
	g.claiming[k] = append(g.claiming[k], c)
	g.mu.Unlock()

	var (
		rec     Record[R]
		claimed bool
		err     error
	)
	defer func() { // also when the store panics
		g.mu.Lock()
		defer g.mu.Unlock()
		if claimed && err == nil {
			g.sending[claimRef{k, rec.Token}] = nil
		}
		if rest := slices.DeleteFunc(g.claiming[k], func(o *claiming) bool { return o == c }); len(rest) > 0 {
			g.claiming[k] = rest
		} else {
			delete(g.claiming, k)
		}
		if c.returned != nil {
			close(c.returned)
		}
	}()
	rec, claimed, err = g.Store.Claim(ctx, tenant, key, fp, nil)
	switch {
	case err != nil:
		return nil, nil, nil, err
	case !claimed && rec.Pruned:
		return nil, nil, nil, errTombstone
	case !claimed && rec.Done:
		return &rec.Fingerprint, &rec.Outcome, nil, nil
	case !claimed:
		return &rec.Fingerprint, nil, nil, nil
	}
	return nil, nil, &guardSending[R]{g: g, ref: claimRef{k, rec.Token}}, nil
}

func (g *guard[R]) releaseIdle(ctx context.Context, tenant, key string) (Record[R], bool, error) {
	rec, ok, err := g.Store.Lookup(ctx, tenant, key)
	if err != nil || !ok || rec.Done {
		return rec, false, err
	}
	return g.releaseClaim(ctx, tenant, key, rec.Token)
}

// releaseClaim releases key's claim token, which the caller has seen in the
// store, unless the ledger is sending it.
func (g *guard[R]) releaseClaim(ctx context.Context, tenant, key string, token Token) (Record[R], bool, error) {
	k := keyRef{tenant, key}
	if err := g.claimsReturned(ctx, k); err != nil {
		return Record[R]{}, false, err
	}
	g.mu.Lock()
	_, sending := g.sending[claimRef{k, token}]
	g.mu.Unlock()
	if sending {
		return Record[R]{}, false, errSending
	}
	// No claim of this ledger can make the claim seen: it stands until it
	// is released, and Release frees no other.
	return g.Store.Release(ctx, tenant, key, token)
}

// claimsReturned waits for the Store.Claim calls of k under way to return,
// so that a claim of k the caller has seen in the store is known to be sent
// by this ledger or not. A claim that this ledger's Store.Claim made and
// that has not returned yet was in the store when the caller saw it; a claim
// made later cannot have made the claim seen.
func (g *guard[R]) claimsReturned(ctx context.Context, k keyRef) error {
	g.mu.Lock()
	var waits []chan struct{}
	for _, c := range g.claiming[k] {
		if c.returned == nil {
			c.returned = make(chan struct{})
		}
		waits = append(waits, c.returned)
	}
	g.mu.Unlock()
	for _, returned := range waits {
		select {
		case <-returned:
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", errWaitEnded, ctx.Err())
		}
	}
	return nil
}

// waitKey waits for key's claim. A claim this ledger is sending is waited
// for here, in memory, until its send ends. A claim whose send ended without
// an answer (Record.Abandoned) has none to wait for. Any other claim in
// flight may be sent by another process: it is waited for in the store,
// until it is settled, released or abandoned, with the Store's WaitClaim when it is a Waiter and
// otherwise by polling Lookup, first after pollFirst, then less and less
// often, at least every pollMost.
func (g *guard[R]) waitKey(ctx context.Context, tenant, key string) (R, error) {
	var zero R
	rec, ok, err := g.Store.Lookup(ctx, tenant, key)
	switch {
	case err != nil:
		return zero, err
	case !ok:
		return zero, errNotClaimed
	case rec.Pruned:
		return zero, errWaitPruned
	case rec.Done:
		return rec.Outcome, nil
	case rec.Abandoned: // its send ended without an answer, here or elsewhere
		return zero, errNoOutcome
	}
	k := keyRef{tenant, key}
	ref := claimRef{k, rec.Token}
	if err := g.claimsReturned(ctx, k); err != nil {
		return zero, ctx.Err()
	}
	g.mu.Lock()
	ended, sending := g.sending[ref]
	if sending && ended == nil {
		ended = make(chan struct{})
		g.sending[ref] = ended
	}
	g.mu.Unlock()
	if sending {
		select {
		case <-ended:
		case <-ctx.Done():
			return zero, ctx.Err()
		}
		if rec, ok, err = g.Store.Lookup(ctx, tenant, key); err != nil {
			return zero, err
		}
		switch {
		case !ok || rec.Token != ref.token:
			return zero, errReleased
		case rec.Pruned:
			return zero, errWaitPruned
		case rec.Done:
			return rec.Outcome, nil
		}
		return zero, errNoOutcome
	}
	if w, isWaiter := g.Store.(Waiter[R]); isWaiter {
		rec, ok, err = w.WaitClaim(ctx, tenant, key, ref.token)
	} else {
		rec, ok, err = g.poll(ctx, tenant, key, ref.token)
	}
	switch {
	case err != nil:
		return zero, err
	case !ok || rec.Token != ref.token:
		return zero, errReleased
	case rec.Pruned:
		return zero, errWaitPruned
	case !rec.Done: // abandoned (or a Waiter that broke its contract)
		return zero, errNoOutcome
	}
	return rec.Outcome, nil
}

// The intervals of guard's polling of a Store that is not a Waiter.
const (
	pollFirst = 5 * time.Millisecond
	pollMost  = time.Second
)

// poll reads key's record until its claim token is no longer in flight or
// is abandoned, or ctx ends.
func (g *guard[R]) poll(ctx context.Context, tenant, key string, token Token) (Record[R], bool, error) {
	t := time.NewTimer(pollFirst)
	defer t.Stop()
	for every := pollFirst; ; every = min(2*every, pollMost) {
		select {
		case <-t.C:
		case <-ctx.Done():
			return Record[R]{}, false, ctx.Err()
		}
		rec, ok, err := g.Store.Lookup(ctx, tenant, key)
		if err != nil || !ok || rec.Done || rec.Abandoned || rec.Token != token {
			return rec, ok, err
		}
		t.Reset(every)
	}
}

// listInFlight lists the Store's claims in flight, each Sending when this
// ledger is sending it or has a Store.Claim of its key under way (which may
// be the claim listed, about to be sent).
func (g *guard[R]) listInFlight(ctx context.Context, q ListQuery) ([]Claim, error) {
	l, ok := g.Store.(Lister)
	if !ok {
		return nil, errNotLister
	}
	claims, err := l.ListInFlight(ctx, q)
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for i := range claims {
		c := &claims[i]
		k := keyRef{c.Tenant, c.Key}
		_, sending := g.sending[claimRef{k, c.Token}]
		c.Sending = sending || len(g.claiming[k]) > 0
	}
	return claims, nil
}

// guardSending is a claim a guard is sending.
type guardSending[R Fingerprinter] struct {
	g     *guard[R]
	ref   claimRef
	ended bool // only the ledger's goroutine for the send reads and writes it
}

func (s *guardSending[R]) settle(ctx context.Context, outcome R) (*R, bool, error) {
	if s.ended {
		return nil, false, nil
	}
	defer s.end() // also when the store panics
	rec, settled, err := s.g.Store.Settle(ctx, s.ref.tenant, s.ref.key, s.ref.token, outcome)
	if err == nil && rec.Pruned && rec.Token == s.ref.token {
		return nil, false, errTombstone
	}
	if err != nil || settled || !rec.Done || rec.Token != s.ref.token {
		return nil, settled, err
	}
	return &rec.Outcome, false, nil
}

// abandonTimeout bounds a Store's Abandon, which runs when the send's ctx may
// have ended already.
const abandonTimeout = 5 * time.Second

// abandon ends the send with no outcome and, when the Store is an Abandoner,
// records that in the store, so that waiters in other processes learn it.
// That record is best effort: the claim's mark is cleared first, and an error
// or a panic of Abandon is contained, so that the send's caller gets its
// error as it would without it (and a panic under way goes on unchanged).
func (s *guardSending[R]) abandon(ctx context.Context) {
	if s.ended {
		return
	}
	s.end()
	a, ok := s.g.Store.(Abandoner)
	if !ok {
		return
	}
	defer func() { _ = recover() }() // contained: see above
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), abandonTimeout)
	defer cancel()
	_ = a.Abandon(actx, s.ref.tenant, s.ref.key, s.ref.token)
}

// end ends the send: the claim is no longer marked as being sent, and the
// ledger's waits for it end.
func (s *guardSending[R]) end() {
	if s.ended {
		return
	}
	s.ended = true
	s.g.mu.Lock()
	defer s.g.mu.Unlock()
	if ended := s.g.sending[s.ref]; ended != nil {
		close(ended)
	}
	delete(s.g.sending, s.ref)
}
