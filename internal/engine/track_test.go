package engine

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/idemledger/submissions/driver"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type transfer struct{ ID, TxHash string }

func (p transfer) Fingerprint() driver.Fingerprint {
	return driver.Fingerprint{WithdrawalID: p.ID, Amount: "10", Currency: "EUR", Destination: "DE89"}
}

// mapStore is the least Store: one tenant's records and claims in two maps,
// no optional ability, so that a ledger on it runs through the adapter.
type mapStore struct {
	mu     sync.Mutex
	recs   map[string]driver.Record[transfer]
	claims map[string]string
	tokens driver.Token
}

func newMapStore() *mapStore {
	return &mapStore{recs: map[string]driver.Record[transfer]{}, claims: map[string]string{}}
}

func (m *mapStore) Claim(_ context.Context, _, key string, fp driver.Fingerprint, outcome *transfer) (driver.Record[transfer], bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if rec, ok := m.recs[key]; ok {
		return rec, false, nil
	}
	if holder, ok := m.claims[fp.WithdrawalID]; ok {
		return driver.Record[transfer]{}, false, &driver.ConflictError{Holder: holder, Key: key, WithdrawalID: fp.WithdrawalID}
	}
	m.tokens++
	rec := driver.Record[transfer]{Fingerprint: fp, Token: m.tokens}
	if outcome != nil {
		rec.Outcome, rec.Done = *outcome, true
	}
	m.recs[key], m.claims[fp.WithdrawalID] = rec, key
	return rec, true, nil
}

func (m *mapStore) Settle(_ context.Context, _, key string, token driver.Token, outcome transfer) (driver.Record[transfer], bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	rec, ok := m.recs[key]
	switch {
	case !ok || rec.Token != token:
		return driver.Record[transfer]{}, false, nil
	case rec.Done:
		return rec, false, nil
	}
	rec.Outcome, rec.Done = outcome, true
	m.recs[key] = rec
	return rec, true, nil
}

func (m *mapStore) Release(_ context.Context, _, key string, token driver.Token) (driver.Record[transfer], bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	rec, ok := m.recs[key]
	switch {
	case !ok || rec.Token != token:
		return driver.Record[transfer]{}, false, nil
	case rec.Done:
		return rec, false, nil
	}
	delete(m.recs, key)
	delete(m.claims, rec.Fingerprint.WithdrawalID)
	return rec, true, nil
}

func (m *mapStore) Lookup(_ context.Context, _, key string) (driver.Record[transfer], bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	rec, ok := m.recs[key]
	return rec, ok, nil
}

func (m *mapStore) ClaimedBy(_ context.Context, _, withdrawalID string) (string, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	key, ok := m.claims[withdrawalID]
	return key, ok, nil
}

// panicsOnce is a Store whose Settle panics once armed.
type panicsOnce struct {
	driver.Store[transfer]
	armed bool
}

func (p *panicsOnce) Settle(ctx context.Context, tenant, key string, token driver.Token, outcome transfer) (driver.Record[transfer], bool, error) {
	if p.armed {
		p.armed = false
		panic("store bug")
	}
	return p.Store.Settle(ctx, tenant, key, token, outcome)
}

// TestTrackedForgetsEveryMark takes keys through every step of a ledger on a
// Store that is not a Tracker, whose marks the adapter keeps: a failed send,
// a panicking one, the release that reopens the key, a second send, a
// resolve under a fresh key, refusals, a store that panics. A mark that is
// not forgotten would make a later release refuse, or wait until its context
// ends; so every step must answer within a deadline, and no mark may be left
// once the keys are done with.
func TestTrackedForgetsEveryMark(t *testing.T) {
	st := &panicsOnce{Store: newMapStore()}
	l := New[transfer](st, slog.New(slog.DiscardHandler), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req := transfer{ID: "w-1"}
	timeout := func(context.Context, transfer) (transfer, error) { return transfer{}, errors.New("rail timed out") }
	_, _, err := l.Submit(ctx, "", "req-1", req, timeout)
	require.ErrorIs(t, err, ErrOutcomeUnknown)
	require.NoError(t, releaseKey(ctx, l, "req-1"), "Release after the failed send")
	require.Panics(t, func() {
		_, _, _ = l.Submit(ctx, "", "req-1", req, func(context.Context, transfer) (transfer, error) { panic("rail bug") })
	})
	require.NoError(t, releaseKey(ctx, l, "req-1"), "Release after the panic")
	sent := transfer{ID: "w-1", TxHash: "0xtx"}
	out, _, err := l.Submit(ctx, "", "req-1", req, func(context.Context, transfer) (transfer, error) { return sent, nil })
	require.NoError(t, err)
	require.Equal(t, sent, out)
	found := transfer{ID: "w-2", TxHash: "0xfound"}
	require.NoError(t, l.Resolve(ctx, "", "req-2", 0, found), "Resolve under a fresh key")
	out, replayed, err := l.Submit(ctx, "", "req-2", transfer{ID: "w-2"}, nil)
	require.NoError(t, err)
	require.True(t, replayed)
	require.Equal(t, found, out)
	require.ErrorIs(t, releaseKey(ctx, l, "req-1"), driver.ErrIdempotencyConflict)
	_, _, err = l.Submit(ctx, "", "req-3", req, nil)
	require.ErrorIs(t, err, driver.ErrIdempotencyConflict)

	// A Settle that panics, once: the key stays in flight, and nobody sends
	// it any more, so it may be released.
	st.armed = true
	require.Panics(t, func() { _, _, _ = l.Submit(ctx, "", "req-4", transfer{ID: "w-4"}, nil) })
	require.NoError(t, releaseKey(ctx, l, "req-4"), "Release after the store panicked")

	g := l.tracker.(*tracked[transfer])
	g.mu.Lock()
	defer g.mu.Unlock()
	assert.Empty(t, g.claiming, "keys still being claimed once every call has returned")
	assert.Empty(t, g.sending, "claims still being sent once every call has returned")
}

// TestWaitLearnsOfItsOwnSendsEnd: on a Store that can neither wait nor
// record an abandoned send, a Wait through the ledger that runs the key's
// send learns from the send itself that it ended: without an answer
// (ErrOutcomeUnknown), or with one (the outcome), at once and not when its
// ctx ends.
func TestWaitLearnsOfItsOwnSendsEnd(t *testing.T) {
	for name, answer := range map[string]error{"without an answer": errors.New("rail timed out"), "with an answer": nil} {
		t.Run(name, func(t *testing.T) {
			l := New[transfer](newMapStore(), slog.New(slog.DiscardHandler), nil)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			started, finish := make(chan struct{}), make(chan struct{})
			sent := make(chan error, 1)
			go func() {
				_, _, err := l.Submit(ctx, "", "req-1", transfer{ID: "w-1"}, func(context.Context, transfer) (transfer, error) {
					close(started)
					<-finish
					return transfer{ID: "w-1", TxHash: "0xtx"}, answer
				})
				sent <- err
			}()
			<-started
			type result struct {
				out transfer
				err error
			}
			waited := make(chan result, 1)
			go func() {
				out, err := l.Wait(ctx, "", "req-1")
				waited <- result{out, err}
			}()
			time.Sleep(20 * time.Millisecond) // the Wait is under way (a check that can only miss a bug)
			close(finish)
			require.Equal(t, answer == nil, <-sent == nil)
			select {
			case r := <-waited:
				if answer != nil {
					require.ErrorIs(t, r.err, ErrOutcomeUnknown)
					assert.EqualError(t, r.err, "outcome unknown: request key req-1: its send ended without an answer")
				} else {
					require.NoError(t, r.err)
					assert.Equal(t, transfer{ID: "w-1", TxHash: "0xtx"}, r.out)
				}
			case <-time.After(5 * time.Second):
				require.FailNow(t, "the Wait did not learn that the send ended")
			}
		})
	}
}

// TestWaitSaysWhyAKeyIsUnknown: a key never claimed, and a key released while
// a Wait waited, are both ErrUnknownKey, each saying which it is.
func TestWaitSaysWhyAKeyIsUnknown(t *testing.T) {
	st := newMapStore()
	l := New[transfer](st, slog.New(slog.DiscardHandler), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := l.Wait(ctx, "", "req-9")
	assert.EqualError(t, err, "request key is not claimed: req-9")

	_, _, err = st.Claim(ctx, "", "req-1", transfer{ID: "w-1"}.Fingerprint(), nil) // claimed elsewhere: no send of this ledger
	require.NoError(t, err)
	waited := make(chan error, 1)
	go func() {
		_, err := l.Wait(ctx, "", "req-1")
		waited <- err
	}()
	time.Sleep(20 * time.Millisecond)
	require.NoError(t, releaseKey(ctx, l, "req-1"))
	err = <-waited
	require.ErrorIs(t, err, ErrUnknownKey)
	assert.EqualError(t, err, "request key is not claimed: req-1 was released while waited for")
}

// waiterStore is a mapStore that is a driver.Waiter, and counts the waits it
// is asked for.
type waiterStore struct {
	*mapStore
	waits atomic.Int64
}

func (s *waiterStore) WaitClaim(ctx context.Context, tenant, key string, token driver.Token) (driver.Record[transfer], bool, error) {
	s.waits.Add(1)
	<-ctx.Done() // never woken: the ledger must not rely on it here
	return driver.Record[transfer]{}, false, ctx.Err()
}

// TestAWaitForItsOwnSendHoldsNoStoreWait: a Wait of a key this ledger is
// sending does not wait in the store's WaitClaim, which may hold a
// connection that the send needs to record its answer: it reads the store
// now and then, and learns from the send itself when it ends.
func TestAWaitForItsOwnSendHoldsNoStoreWait(t *testing.T) {
	st := &waiterStore{mapStore: newMapStore()}
	l := New[transfer](st, slog.New(slog.DiscardHandler), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	started, finish := make(chan struct{}), make(chan struct{})
	sent := make(chan error, 1)
	go func() {
		_, _, err := l.Submit(ctx, "", "req-1", transfer{ID: "w-1"}, func(context.Context, transfer) (transfer, error) {
			close(started)
			<-finish
			return transfer{ID: "w-1", TxHash: "0xtx"}, nil
		})
		sent <- err
	}()
	<-started
	waited := make(chan error, 1)
	go func() {
		_, err := l.Wait(ctx, "", "req-1")
		waited <- err
	}()
	time.Sleep(20 * time.Millisecond)
	close(finish)
	require.NoError(t, <-sent)
	require.NoError(t, <-waited)
	assert.Zero(t, st.waits.Load(), "WaitClaims asked for while this ledger sent the key")

	_, _, err := st.Claim(ctx, "", "req-2", transfer{ID: "w-2"}.Fingerprint(), nil) // claimed elsewhere
	require.NoError(t, err)
	wctx, wcancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer wcancel()
	_, err = l.Wait(wctx, "", "req-2")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Equal(t, int64(1), st.waits.Load(), "a claim this ledger does not send is waited for in the store")
}

// settleFails is a mapStore whose Settle writes the outcome and then fails,
// saying it settled all the same.
type settleFails struct{ *mapStore }

func (s settleFails) Settle(ctx context.Context, tenant, key string, token driver.Token, outcome transfer) (driver.Record[transfer], bool, error) {
	rec, _, _ := s.mapStore.Settle(ctx, tenant, key, token, outcome)
	return rec, true, errors.New("connection reset")
}

// TestASettleThatFailsIsAFailure: a Settle that returns an error failed,
// whatever else it says: the answer comes back not recorded, as one that
// may or may not stand.
func TestASettleThatFailsIsAFailure(t *testing.T) {
	l := New[transfer](settleFails{newMapStore()}, slog.New(slog.DiscardHandler), nil)
	out, _, err := l.Submit(context.Background(), "", "k1", transfer{ID: "w-1"}, func(_ context.Context, r transfer) (transfer, error) {
		r.TxHash = "0xabc"
		return r, nil
	})
	require.ErrorIs(t, err, ErrOutcomeNotRecorded)
	assert.ErrorContains(t, err, "the store failed, and the answer may or may not stand: connection reset")
	assert.Equal(t, "0xabc", out.TxHash)
}

// releaseKey releases the claim of key in the default tenant that l's
// store holds, as an Admin does having looked at it; nil when key has none.
func releaseKey(ctx context.Context, l *Ledger[transfer], key string) error {
	rec, ok, err := l.store.Lookup(ctx, "", key)
	if err != nil || !ok {
		return err
	}
	return l.Release(ctx, "", key, rec.Token)
}
