package submissions

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
)

// guard makes a backend of any Store. It keeps, in the ledger's memory, the
// claims of keys it has asked the store for and the claims it is sending,
// and releases a claim only when it is none of them. The Store's calls run
// outside g.mu, so a slow one holds up only its own caller, and no call waits
// for another except a release, for the claims of its key that were in the
// store when it looked (ending when its ctx does).
type guard[R Fingerprinter] struct {
	Store[R]

	mu       sync.Mutex             // protects everything below, and every claiming
	claiming map[keyRef][]*claiming // keys in Store.Claim for a send, each claim of them
	sending  map[claimRef]struct{}  // claims being sent
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
	return &guard[R]{Store: st, claiming: make(map[keyRef][]*claiming), sending: make(map[claimRef]struct{})}
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
			g.sending[claimRef{k, rec.Token}] = struct{}{}
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
	// The claim may be one that a Store.Claim of this ledger made and has
	// not returned yet. Such a claim was in the store when the caller saw
	// it: wait for those to return (a claim made later cannot have made the
	// claim seen), then see whether the ledger sends it.
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
			return Record[R]{}, false, fmt.Errorf("%w: %w", errWaitEnded, ctx.Err())
		}
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
	defer s.abandon() // also when the store panics
	rec, settled, err := s.g.Store.Settle(ctx, s.ref.tenant, s.ref.key, s.ref.token, outcome)
	if err == nil && rec.Pruned && rec.Token == s.ref.token {
		return nil, false, errTombstone
	}
	if err != nil || settled || !rec.Done || rec.Token != s.ref.token {
		return nil, settled, err
	}
	return &rec.Outcome, false, nil
}

func (s *guardSending[R]) abandon() {
	if s.ended {
		return
	}
	s.ended = true
	s.g.mu.Lock()
	defer s.g.mu.Unlock()
	delete(s.g.sending, s.ref)
}
