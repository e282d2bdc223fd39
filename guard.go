package submissions

import (
	"context"
	"sync"
)

// guard makes a backend of any Store. It keeps, in the ledger's memory, the
// keys the ledger is claiming and the claims it is sending, and releases a
// claim only when it is none of them. The Store's calls run outside g.mu, so
// a slow one holds up only its own caller, and no call waits for another
// except a release, for a claim of the same key (ending when its ctx does).
type guard[R Fingerprinter] struct {
	Store[R]

	mu       sync.Mutex               // protects everything below
	claiming map[string]int           // keys in Store.Claim for a send, and how many claims of each
	idle     map[string]chan struct{} // closed when a key's claims have returned; made for a release that waits
	sending  map[claimRef]struct{}    // claims being sent
}

// claimRef names one claim.
type claimRef struct {
	key   string
	token Token
}

func newGuard[R Fingerprinter](st Store[R]) *guard[R] {
	return &guard[R]{Store: st, claiming: make(map[string]int), idle: make(map[string]chan struct{}), sending: make(map[claimRef]struct{})}
}

func (g *guard[R]) claimToSend(ctx context.Context, key string, fp Fingerprint, _, _ string) (*Fingerprint, *R, sending[R], error) {
	g.mu.Lock()
	g.claiming[key]++
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
			g.sending[claimRef{key, rec.Token}] = struct{}{}
		}
		if g.claiming[key]--; g.claiming[key] == 0 {
			delete(g.claiming, key)
			if idle, ok := g.idle[key]; ok {
				close(idle)
				delete(g.idle, key)
			}
		}
	}()
	rec, claimed, err = g.Store.Claim(ctx, key, fp, nil)
	switch {
	case err != nil:
		return nil, nil, nil, err
	case !claimed && rec.Done:
		return &rec.Fingerprint, &rec.Outcome, nil, nil
	case !claimed:
		return &rec.Fingerprint, nil, nil, nil
	}
	return nil, nil, &guardSending[R]{g: g, ref: claimRef{key, rec.Token}}, nil
}

func (g *guard[R]) releaseIdle(ctx context.Context, key string) (Record[R], bool, error) {
	rec, ok, err := g.Store.Lookup(ctx, key)
	if err != nil || !ok || rec.Done {
		return rec, false, err
	}
	// The claim may be one that a Store.Claim of this ledger made and has
	// not returned yet: wait until no claim of the key is in the store, then
	// see whether the ledger sends it.
	for {
		g.mu.Lock()
		if g.claiming[key] == 0 {
			_, sending := g.sending[claimRef{key, rec.Token}]
			g.mu.Unlock()
			if sending {
				return rec, false, errSending
			}
			break
		}
		idle, ok := g.idle[key]
		if !ok {
			idle = make(chan struct{})
			g.idle[key] = idle
		}
		g.mu.Unlock()
		select {
		case <-idle:
		case <-ctx.Done():
			return Record[R]{}, false, ctx.Err()
		}
	}
	// No claim of this ledger can make the claim looked at: it stands until
	// it is released, and Release frees no other.
	return g.Store.Release(ctx, key, rec.Token)
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
	rec, settled, err := s.g.Store.Settle(ctx, s.ref.key, s.ref.token, outcome)
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
