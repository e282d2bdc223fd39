package engine

import (
	"context"
	"slices"
	"sync"

	"github.com/idemledger/submissions/driver"
)

// tracked lifts a Store that is not a driver.Tracker to one, keeping the
// marks of the ledger's own sends in memory: the claims of keys it has asked
// the store for, and the claims it is sending. The Store's calls run outside
// mu, so a slow one holds up only its own caller; only Sending waits for
// another call, a Store.Claim of the same key under way (ending when its ctx
// does).
type tracked[R any] struct {
	store driver.Store[R]

	mu       sync.Mutex                 // protects everything below, and every claiming
	claiming map[keyRef][]*claiming     // keys in Store.Claim for a send, each claim of them
	sending  map[claimRef]chan struct{} // claims being sent, each with the channel closed when its send ends, made by Sending
	ended    map[claimRef]*ended[R]     // claims whose send ended here without a recorded answer, until closed here
}

// claiming is one Store.Claim of a key for a send, until it returns.
type claiming struct {
	returned chan struct{} // closed when it returns; made by a Sending that waits for it
}

// keyRef names one request key.
type keyRef struct {
	tenant, key string
}

// claimRef names one claim.
type claimRef struct {
	keyRef
	token driver.Token
}

func track[R any](st driver.Store[R]) *tracked[R] {
	return &tracked[R]{store: st, claiming: make(map[keyRef][]*claiming), sending: make(map[claimRef]chan struct{}),
		ended: make(map[claimRef]*ended[R])}
}

// ClaimSend implements driver.Tracker: Store.Claim, with the claim marked as
// being sent once it returns, and the call marked as under way until then.
func (g *tracked[R]) ClaimSend(ctx context.Context, tenant, key string, fp driver.Fingerprint) (driver.Record[R], driver.Send[R], error) {
	c, k := &claiming{}, keyRef{tenant, key}
	g.mu.Lock()
	g.claiming[k] = append(g.claiming[k], c)
	g.mu.Unlock()

	var (
		rec     driver.Record[R]
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
	rec, claimed, err = g.store.Claim(ctx, tenant, key, fp, nil)
	if err != nil || !claimed {
		return rec, nil, err
	}
	return rec, &trackedSend[R]{g: g, ref: claimRef{k, rec.Token}}, nil
}

// Sending implements driver.Tracker. It first waits for the Store.Claim calls
// of the key under way to return: a claim of the key that the caller has
// seen in the store, and that one of them made, is not marked as being sent
// until it returns; a claim made later cannot be the one the caller saw.
func (g *tracked[R]) Sending(ctx context.Context, tenant, key string, token driver.Token) (<-chan struct{}, error) {
	k := keyRef{tenant, key}
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
			return nil, ctx.Err()
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	ref := claimRef{k, token}
	ended, ok := g.sending[ref]
	if !ok {
		return nil, nil
	}
	if ended == nil {
		ended = make(chan struct{})
		g.sending[ref] = ended
	}
	return ended, nil
}

// ended is how a send ended here without a recorded answer: with an
// answer that was not recorded, or none.
type ended[R any] struct {
	answered bool
	answer   *R // the answer, when kept
}

// trackedSend is a claim a tracked Store is sending.
type trackedSend[R any] struct {
	g         *tracked[R]
	ref       claimRef
	ended     bool // only the ledger's goroutine for the send reads and writes these
	abandoned bool
}

// Settle implements driver.Send: a Settle that fails or panics leaves the
// send running, for the ledger to settle again or abandon.
func (s *trackedSend[R]) Settle(ctx context.Context, outcome R) (driver.Record[R], bool, error) {
	if s.ended {
		return driver.Record[R]{}, false, nil
	}
	rec, settled, err := s.g.store.Settle(ctx, s.ref.tenant, s.ref.key, s.ref.token, outcome)
	if err == nil {
		s.end()
	}
	return rec, settled, err
}

// Release implements driver.Send.
func (s *trackedSend[R]) Release(ctx context.Context) (driver.Record[R], bool, error) {
	if s.ended {
		return driver.Record[R]{}, false, nil
	}
	defer s.end() // also when the store panics
	return s.g.store.Release(ctx, s.ref.tenant, s.ref.key, s.ref.token)
}

// Abandon implements driver.Send: it ends the send and, when the Store is an
// Abandoner, records there that it ended without an answer, so that waits in
// other processes learn it.
func (s *trackedSend[R]) Abandon(ctx context.Context) error {
	if s.abandoned {
		return nil
	}
	s.abandoned = true
	s.endHere(&ended[R]{})
	if a, ok := s.g.store.(driver.Abandoner); ok {
		return a.Abandon(ctx, s.ref.tenant, s.ref.key, s.ref.token)
	}
	return nil
}

// AbandonAnswered implements driver.Send: it records in the Store that the
// send got an answer that was not recorded, when it is an Answerer (and
// only that it ended, when it is just an Abandoner), and then ends the
// send here, where the answer is kept: no call sees the claim neither
// sending nor answered here.
func (s *trackedSend[R]) AbandonAnswered(ctx context.Context, answer *R) error {
	if s.abandoned {
		return nil
	}
	s.abandoned = true
	defer s.endHere(&ended[R]{answered: true, answer: answer}) // also when the store panics
	switch st := s.g.store.(type) {
	case driver.Answerer[R]:
		return st.AbandonAnswered(ctx, s.ref.tenant, s.ref.key, s.ref.token, answer)
	case driver.Abandoner:
		return st.Abandon(ctx, s.ref.tenant, s.ref.key, s.ref.token)
	}
	return nil
}

// endHere ends the send and keeps how it ended, in one step: no call sees
// the claim neither sending nor ended here.
func (s *trackedSend[R]) endHere(how *ended[R]) {
	s.g.mu.Lock()
	defer s.g.mu.Unlock()
	s.g.ended[s.ref] = how
	s.endLocked()
}

// endedHere returns how the send of the claim token ended in this ledger
// without a recorded answer, or nil: what an Abandoner (or an Answerer)
// records, known here even of a Store that is not one, or whose call
// failed.
func (g *tracked[R]) endedHere(tenant, key string, token driver.Token) *ended[R] {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.ended[claimRef{keyRef{tenant, key}, token}]
}

// forget drops the mark of a claim that endedHere reports, once it is
// closed.
func (g *tracked[R]) forget(tenant, key string, token driver.Token) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.ended, claimRef{keyRef{tenant, key}, token})
}

// end ends the send: the claim is no longer marked as being sent, and the
// waits for its end end.
func (s *trackedSend[R]) end() {
	if s.ended {
		return
	}
	s.g.mu.Lock()
	defer s.g.mu.Unlock()
	s.endLocked()
}

// endLocked is end; the caller holds the lock.
func (s *trackedSend[R]) endLocked() {
	if s.ended {
		return
	}
	s.ended = true
	if ended := s.g.sending[s.ref]; ended != nil {
		close(ended)
	}
	delete(s.g.sending, s.ref)
}
