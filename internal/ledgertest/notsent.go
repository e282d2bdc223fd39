package ledgertest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemledger/submissions"
	"github.com/idemledger/submissions/observe"
)

// The rail's word: a send that says it moved nothing (ErrNotSent) releases
// its claim, and every send of a withdrawal carries one rail key.
var notSentTests = []test{
	{"NotSentReleasesAndARetrySendsOnce", testNotSentReleasesAndARetrySendsOnce},
	{"WaitsDuringASendThatMovedNothingEndWithTheClaim", testWaitsDuringASendThatMovedNothingEndWithTheClaim},
	{"NotSentLeavesAClaimResolvedMeanwhile", testNotSentLeavesAClaimResolvedMeanwhile},
	{"NotSentLeavesANewClaimMadeMeanwhile", testNotSentLeavesANewClaimMadeMeanwhile},
	{"NotSentRacingReleasesAndResolvesSendsOnce", testNotSentRacingReleasesAndResolvesSendsOnce},
	{"RailKeyIsTheWithdrawalsOnEveryClaim", testRailKeyIsTheWithdrawalsOnEveryClaim},
}

// errBusy is a rail's answer that nothing moved.
var errBusy = fmt.Errorf("rail busy: %w", submissions.ErrNotSent)

// requireNotSent stops t unless err is the refusal of a send that said it
// moved nothing, wrapping the send's error.
func requireNotSent(t *testing.T, err error) {
	t.Helper()
	requireRefusal(t, err, submissions.ErrNotSent)
	require.ErrorIs(t, err, errBusy)
}

func testNotSentReleasesAndARetrySendsOnce(t *testing.T, newStore Factory) {
	f := setUp(t, newStore)
	ev := &events{}
	s := submissions.NewWithStore(f.store, submissions.WithLogger(quiet), submissions.WithObserver(ev))
	_, err := s.Submit(bg, "req-1", f.w, func(context.Context, Withdrawal) (Withdrawal, error) {
		return Withdrawal{}, errBusy
	})
	requireNotSent(t, err)
	assert.Contains(t, err.Error(), "request key req-1")
	assert.Equal(t, 1, ev.count(observe.EventNotSent, "", "req-1"), "events of a send that moved nothing")
	requireOutcome(t, s, "req-1", Withdrawal{}, false)
	requireHolder(t, s, "w-1", "")
	_, err = s.Wait(bg, "req-1")
	require.ErrorIs(t, err, submissions.ErrUnknownKey, "Wait of the released key")

	// The retry sends, once; the next replays.
	out, err := s.Submit(bg, "req-1", f.w, f.rail.send)
	require.NoError(t, err, "retry after a send that moved nothing")
	again, err := s.Submit(bg, "req-1", f.w, f.rail.send)
	require.NoError(t, err)
	require.Equal(t, out, again)
	f.rail.requireSends(t, 1)
}

func testNotSentLeavesAClaimResolvedMeanwhile(t *testing.T, newStore Factory) {
	f := setUp(t, newStore)
	resolved := sentTx(f.w, "0xtx-operator")
	_, err := f.s.Submit(bg, "req-1", f.w, func(ctx context.Context, w Withdrawal) (Withdrawal, error) {
		require.NoError(t, f.elsewhere().Resolve(ctx, "req-1", resolved))
		return Withdrawal{}, errBusy
	})
	requireNotSent(t, err)
	assert.ErrorIs(t, err, submissions.ErrResolvedMeanwhile)
	assert.NotErrorIs(t, err, submissions.ErrReleasedMeanwhile)
	requireOutcome(t, f.s, "req-1", resolved, true)
	requireHolder(t, f.s, "w-1", "req-1")
	got, err := f.s.Submit(bg, "req-1", f.w, f.rail.send)
	require.NoError(t, err)
	require.Equal(t, resolved, got, "the retry replays the operator's outcome")
	f.rail.requireSends(t, 0)
}

func testNotSentLeavesANewClaimMadeMeanwhile(t *testing.T, newStore Factory) {
	f := setUp(t, newStore)
	other := f.elsewhere()
	var second error
	_, err := f.s.Submit(bg, "req-1", f.w, func(ctx context.Context, w Withdrawal) (Withdrawal, error) {
		// An operator of another instance releases the claim while its send
		// runs, and another key claims the withdrawal and sends it: the
		// first send then says it moved nothing.
		forceRelease(t, other, "req-1")
		_, second = other.Submit(ctx, "req-2", w, func(ctx context.Context, w Withdrawal) (Withdrawal, error) {
			return f.rail.send(ctx, w)
		})
		return Withdrawal{}, errBusy
	})
	requireNotSent(t, err)
	require.NoError(t, second)
	assert.ErrorIs(t, err, submissions.ErrReleasedMeanwhile)
	assert.NotErrorIs(t, err, submissions.ErrResolvedMeanwhile)
	requireHolder(t, f.s, "w-1", "req-2")
	_, err = f.s.Submit(bg, "req-3", f.w, f.rail.send)
	requireConflict(t, err, "req-2")
	f.rail.requireSends(t, 1)
}

// testNotSentRacingReleasesAndResolvesSendsOnce races clients whose rail
// often says nothing moved, or fails having moved nothing (the key left in
// flight), with operators who release the key (through the ledger that
// sends, which refuses while a send runs) and resolve it (through another
// instance, once a release has freed a claim): the rail never runs two sends of the withdrawal at once, and
// moves its money at most once.
func testNotSentRacingReleasesAndResolvesSendsOnce(t *testing.T, newStore Factory) {
	var released atomic.Int64 // operators' releases that freed a claim, over all rounds
	for round := range 20 {
		f := setUp(t, newStore)
		other := f.elsewhere()
		w := newWithdrawal(fmt.Sprint("w-", round))
		var running, overlaps, moved, freed atomic.Int64
		send := func(ctx context.Context, w Withdrawal) (Withdrawal, error) {
			if running.Add(1) > 1 {
				overlaps.Add(1)
			}
			defer running.Add(-1)
			switch rand.IntN(4) {
			case 0, 1:
				return Withdrawal{}, errBusy
			case 2:
				return Withdrawal{}, errRail // and it moved nothing: an operator may release it
			}
			moved.Add(1)
			return sentTx(w, "0xtx-"+w.ID), nil
		}
		const clients, operators = 8, 4
		var wg sync.WaitGroup
		var clientsLeft atomic.Int64
		clientsLeft.Store(clients)
		errs := make(chan error, 1024)
		report := func(who string, err error) {
			if err != nil && !refusedOrNotSent(err) {
				select {
				case errs <- fmt.Errorf("%s: %w", who, err):
				default:
				}
			}
		}
		start := make(chan struct{})
		for i := range clients + operators {
			wg.Go(func() {
				<-start
				switch {
				case i < clients: // submits until the withdrawal has an outcome
					defer clientsLeft.Add(-1)
					for j := 0; !done(f.s, w.ID); j++ {
						if j == 100000 {
							report("client", fmt.Errorf("%d: %w", i, errStalled))
							return
						}
						_, err := f.s.Submit(bg, fmt.Sprint("req-", j%2), w, send)
						report(fmt.Sprint("client ", i), err)
						runtime.Gosched()
					}
				case i%2 == 0: // releases the claim, whoever holds it, while the clients run
					for clientsLeft.Load() > 0 {
						if holder, ok, _ := f.s.ClaimedBy(bg, w.ID); ok {
							err := f.s.Release(bg, holder)
							if err == nil {
								freed.Add(1)
							}
							report("releaser", err)
						}
						runtime.Gosched()
					}
				default: // resolves a key once, at some moment after a release, while the clients run
					for clientsLeft.Load() > 0 {
						if freed.Load() > 0 && rand.IntN(64) == 0 {
							report("resolver", other.Resolve(bg, fmt.Sprint("req-", i%2), sentTx(w, "0xtx-operator")))
							return
						}
						runtime.Gosched()
					}
				}
			})
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("round %d: %v", round, err)
		}
		for _, key := range []string{"req-0", "req-1"} {
			for _, e := range f.logs.at(slog.LevelInfo, key, w.ID) {
				if e.msg == "submission released" {
					released.Add(1)
				}
			}
		}
		require.Zero(t, overlaps.Load(), "round %d: sends of the withdrawal that ran at once", round)
		require.LessOrEqual(t, moved.Load(), int64(1), "round %d: sends that moved the money", round)
	}
	require.NotZero(t, released.Load(), "operators' releases that freed a claim")
}

// errStalled is the error of a racer that made no progress.
var errStalled = errors.New("no outcome after 100,000 submits")

// done reports whether the withdrawal id has an outcome in s.
func done(s *submissions.Submissions[Withdrawal], id string) bool {
	holder, ok, _ := s.ClaimedBy(bg, id)
	if !ok {
		return false
	}
	_, ok, _ = s.Outcome(bg, holder)
	return ok
}

// refusedOrNotSent reports whether err is one a racer of
// testNotSentRacingReleasesAndResolvesSendsOnce may get.
func refusedOrNotSent(err error) bool {
	for _, ok := range []error{submissions.ErrNotSent, submissions.ErrSubmissionInFlight, submissions.ErrIdempotencyConflict,
		submissions.ErrOutcomeNotRecorded, submissions.ErrOutcomeUnknown} {
		if errors.Is(err, ok) {
			return true
		}
	}
	return false
}

func testRailKeyIsTheWithdrawalsOnEveryClaim(t *testing.T, newStore Factory) {
	f := setUp(t, newStore)
	var mu sync.Mutex
	keys := map[string][]string{} // by tenant and withdrawal
	send := func(tenant string, outcome error) func(context.Context, Withdrawal) (Withdrawal, error) {
		return func(ctx context.Context, w Withdrawal) (Withdrawal, error) {
			key, ok := submissions.RailKeyFromContext(ctx)
			require.True(t, ok, "RailKeyFromContext in send")
			mu.Lock()
			keys[tenant+"/"+w.ID] = append(keys[tenant+"/"+w.ID], key)
			mu.Unlock()
			return sentTx(w, "0xtx"), outcome
		}
	}
	for _, tenant := range []string{"", "t1"} {
		s := f.s.Tenant(tenant)
		for _, id := range []string{"w-1", "w-2"} {
			w := newWithdrawal(id)
			_, err := s.Submit(bg, "k-"+id, w, send(tenant, errBusy))
			requireNotSent(t, err)
			_, err = s.Submit(bg, "k-"+id, w, send(tenant, errRail)) // outcome unknown
			require.ErrorIs(t, err, submissions.ErrOutcomeUnknown)
			require.NoError(t, s.Release(bg, "k-"+id))
			_, err = s.Submit(bg, "k2-"+id, w, send(tenant, nil))
			require.NoError(t, err)
		}
	}
	seen := map[string]string{}
	for name, ks := range keys {
		require.Len(t, ks, 3, name)
		want := submissions.RailKey(name[:len(name)-len("w-1")-1], name[len(name)-len("w-1"):])
		for _, k := range ks {
			require.Equal(t, want, k, "%s: rail key of each claim", name)
		}
		require.NotContains(t, seen, want, "%s has the rail key of %s", name, seen[want])
		seen[want] = name
	}
	require.Len(t, seen, 4)
	_, ok := submissions.RailKeyFromContext(bg)
	require.False(t, ok, "RailKeyFromContext outside a send")
}

func testWaitsDuringASendThatMovedNothingEndWithTheClaim(t *testing.T, newStore Factory) {
	f := setUp(t, newStore)
	started, finish := make(chan struct{}), make(chan struct{})
	submitted := make(chan error, 1)
	go func() {
		_, err := f.s.Submit(bg, "req-1", f.w, func(context.Context, Withdrawal) (Withdrawal, error) {
			close(started)
			<-finish
			return Withdrawal{}, errBusy
		})
		submitted <- err
	}()
	<-started
	ctx, cancel := context.WithTimeout(bg, 10*time.Second)
	defer cancel()
	waited := make(chan error, 2)
	for _, s := range []*submissions.Submissions[Withdrawal]{f.s, f.elsewhere()} {
		go func() {
			_, err := s.Wait(ctx, "req-1")
			waited <- err
		}()
	}
	close(finish)
	requireNotSent(t, <-submitted)
	for range 2 {
		err := <-waited
		require.ErrorIs(t, err, submissions.ErrUnknownKey, "a Wait begun while the send ran: the claim is gone")
		require.NoError(t, ctx.Err(), "the Waits ended with the claim, not with their context")
	}
}
