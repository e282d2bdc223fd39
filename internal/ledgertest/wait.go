package ledgertest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemledger/submissions"
	"github.com/idemledger/submissions/admin"
	"github.com/idemledger/submissions/driver"
)

// Wait: a call that blocks until a key has an outcome, its send ends without
// one, the key is released, or ctx ends.
var waitTests = []test{
	{"WaitOnADoneKeyReturnsAtOnce", testWaitOnADoneKeyReturnsAtOnce},
	{"WaitDuringASendGetsItsOutcome", testWaitDuringASendGetsItsOutcome},
	{"WaitWhenTheSendFailsIsOutcomeUnknown", testWaitWhenTheSendFailsIsOutcomeUnknown},
	{"WaitAfterTheSendFailedIsOutcomeUnknownAtOnce", testWaitAfterTheSendFailedIsOutcomeUnknownAtOnce},
	{"WaitOnAnUnknownKey", testWaitOnAnUnknownKey},
	{"WaitOfAKeyReleasedWhileWaiting", testWaitOfAKeyReleasedWhileWaiting},
	{"WaitEndsWithCtx", testWaitEndsWithCtx},
	{"ManyWaitersGetOneSendsOutcome", testManyWaitersGetOneSendsOutcome},
	{"WaitStaysInItsTenant", testWaitStaysInItsTenant},
	{"WaitAfterASettleFailedIsOutcomeUnknown", testWaitAfterASettleFailedIsOutcomeUnknown},
	{"WaitOfTheSendingLedgerEndsWithAResolveElsewhere", testWaitOfTheSendingLedgerEndsWithAResolveElsewhere},
}

// waitElsewhere returns a ledger on f's store that runs it through the Store
// interface, and through the Waiter interface when the store is one, as
// another instance of the service would.
func (f *fixture) waitElsewhere() *submissions.Submissions[Withdrawal] {
	w, ok := f.store.(driver.Waiter[Withdrawal])
	if !ok {
		return f.elsewhere()
	}
	return submissions.NewWithStore[Withdrawal](struct {
		driver.Store[Withdrawal]
		driver.Waiter[Withdrawal]
	}{f.store, w}, submissions.WithLogger(quiet))
}

// waitResult is what a Wait returned.
type waitResult struct {
	out Withdrawal
	err error
}

// goWait runs s.Wait(ctx, key) on a goroutine and returns the channel of its
// result.
func goWait(ctx context.Context, s *submissions.Submissions[Withdrawal], key string) <-chan waitResult {
	done := make(chan waitResult, 1)
	go func() {
		out, err := s.Wait(ctx, key)
		done <- waitResult{out, err}
	}()
	return done
}

// requireWaiting stops t if the Wait of done has returned after a short
// while: it must be waiting (a check that can only miss a bug, never fail a
// correct store).
func requireWaiting(t *testing.T, done <-chan waitResult) {
	t.Helper()
	select {
	case r := <-done:
		require.FailNow(t, "Wait returned while the send ran", "%+v", r)
	case <-time.After(20 * time.Millisecond):
	}
}

// waitedFor returns what the Wait of done returned, failing t after a minute.
func waitedFor(t *testing.T, done <-chan waitResult) waitResult {
	t.Helper()
	select {
	case r := <-done:
		return r
	case <-time.After(time.Minute):
		require.FailNow(t, "Wait did not return")
	}
	return waitResult{}
}

// sendInBackground submits w under key through s with send on a goroutine,
// and returns the channel of Submit's error.
func sendInBackground(s *submissions.Submissions[Withdrawal], key string, w Withdrawal, send func(context.Context, Withdrawal) (Withdrawal, error)) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := s.Submit(bg, key, w, send)
		done <- err
	}()
	return done
}

func testWaitOnADoneKeyReturnsAtOnce(t *testing.T, newStore Factory) {
	f := setUp(t, newStore)
	want, err := f.s.Submit(bg, "req-1", f.w, f.rail.send)
	require.NoError(t, err)
	for name, s := range map[string]*submissions.Submissions[Withdrawal]{"here": f.s, "elsewhere": f.waitElsewhere()} {
		t.Run(name, func(t *testing.T) {
			got, err := s.Wait(bg, " req-1 ")
			require.NoError(t, err)
			assert.Equal(t, want, got)
		})
	}
	require.NoError(t, f.s.Resolve(bg, "req-2", sentTx(newWithdrawal("w-2"), "0xr")))
	got, err := f.s.Wait(bg, "req-2")
	require.NoError(t, err)
	assert.Equal(t, sentTx(newWithdrawal("w-2"), "0xr"), got, "a resolved key's outcome")
	f.rail.requireSends(t, 1)
}

func testWaitDuringASendGetsItsOutcome(t *testing.T, newStore Factory) {
	f := setUp(t, newStore)
	started, finish := make(chan struct{}), make(chan struct{})
	sent := sendInBackground(f.s, "req-1", f.w, f.rail.blocking(started, finish))
	<-started
	here, there := goWait(bg, f.s, "req-1"), goWait(bg, f.waitElsewhere(), "req-1")
	requireWaiting(t, here)
	requireWaiting(t, there)
	close(finish)
	require.NoError(t, <-sent)
	for _, done := range []<-chan waitResult{here, there} {
		r := waitedFor(t, done)
		require.NoError(t, r.err)
		assert.Equal(t, sentTx(f.w, "0xtx-w-1"), r.out)
	}
	f.rail.requireSends(t, 1)
}

func testWaitWhenTheSendFailsIsOutcomeUnknown(t *testing.T, newStore Factory) {
	f := setUp(t, newStore)
	started, finish := make(chan struct{}), make(chan struct{})
	sent := sendInBackground(f.s, "req-1", f.w, func(context.Context, Withdrawal) (Withdrawal, error) {
		close(started)
		<-finish
		return Withdrawal{}, errRail
	})
	<-started
	here, there := goWait(bg, f.s, "req-1"), goWait(bg, f.waitElsewhere(), "req-1")
	requireWaiting(t, here)
	requireWaiting(t, there)
	close(finish)
	require.ErrorIs(t, <-sent, submissions.ErrOutcomeUnknown)
	r := waitedFor(t, here)
	require.ErrorIs(t, r.err, submissions.ErrOutcomeUnknown, "the send this ledger ran ended without an answer")
	assert.Contains(t, r.err.Error(), "req-1")
	assert.Zero(t, r.out)

	if _, ok := f.store.(driver.Abandoner); ok {
		// The store recorded that the send ended without an answer: another
		// instance waiting for it learns it too.
		r = waitedFor(t, there)
		require.ErrorIs(t, r.err, submissions.ErrOutcomeUnknown, "another instance, told by the store")
		assert.Zero(t, r.out)
	} else {
		// Without an Abandoner another instance cannot tell a send that
		// ended elsewhere from one that runs there still: it waits, until
		// its ctx ends.
		ctx, cancel := context.WithTimeout(bg, 50*time.Millisecond)
		defer cancel()
		_, err := f.elsewhere().Wait(ctx, "req-1")
		if !errors.Is(err, submissions.ErrOutcomeUnknown) {
			require.ErrorIs(t, err, context.DeadlineExceeded)
		}
	}
	requireKeptClaim(t, f.s, "req-1", f.w)
}

// testWaitAfterTheSendFailedIsOutcomeUnknownAtOnce: a Wait that starts after
// the key's send ended without an answer returns ErrOutcomeUnknown at once,
// in the ledger that ran the send and in another instance, on a store that
// records it (an Abandoner; the memory store knows it in any case); and
// again after a Resolve, the outcome.
func testWaitAfterTheSendFailedIsOutcomeUnknownAtOnce(t *testing.T, newStore Factory) {
	f := setUp(t, newStore)
	if _, ok := f.store.(driver.Abandoner); !ok {
		t.Skip("the store is not an Abandoner: a Wait waits for a claim whose send ended elsewhere")
	}
	strand(t, f.s, "req-1", f.w)
	_, err := f.s.Submit(bg, "req-2", newWithdrawal("w-2"), func(context.Context, Withdrawal) (Withdrawal, error) {
		return sentTx(newWithdrawal("w-other"), "0xother"), nil // an answer for another withdrawal: not recorded
	})
	require.ErrorIs(t, err, submissions.ErrOutcomeNotRecorded)
	ctx, cancel := context.WithCancel(bg)
	_, err = f.s.Submit(ctx, "req-3", newWithdrawal("w-3"), func(ctx context.Context, _ Withdrawal) (Withdrawal, error) {
		cancel() // the caller gave up while the send ran: it is recorded all the same
		return Withdrawal{}, ctx.Err()
	})
	require.ErrorIs(t, err, submissions.ErrOutcomeUnknown)
	for _, key := range []string{"req-1", "req-2", "req-3"} {
		for name, s := range map[string]*submissions.Submissions[Withdrawal]{"here": f.s, "elsewhere": f.waitElsewhere(), "polling": f.elsewhere()} {
			t.Run(key+" "+name, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(bg, time.Minute)
				defer cancel()
				start := time.Now()
				out, err := s.Wait(ctx, key)
				require.ErrorIs(t, err, submissions.ErrOutcomeUnknown)
				assert.Contains(t, err.Error(), key)
				assert.Zero(t, out)
				assert.Less(t, time.Since(start), 10*time.Second, "at once, not when ctx ends")
			})
		}
	}
	if _, ok := f.store.(driver.Lister); ok {
		claims, err := f.s.Admin().InFlight(bg, admin.InFlightQuery{})
		require.NoError(t, err)
		require.Len(t, claims, 3)
		for _, c := range claims {
			assert.True(t, c.Abandoned, "%s: listed as abandoned", c.Key)
			assert.False(t, c.Sending, c.Key)
		}
	}
	requireKeptClaim(t, f.s, "req-1", f.w)
	require.NoError(t, f.elsewhere().Resolve(bg, "req-1", sentTx(f.w, "0xfound")), "an abandoned claim is resolved as any other")
	for name, s := range map[string]*submissions.Submissions[Withdrawal]{"here": f.s, "elsewhere": f.waitElsewhere()} {
		got, err := s.Wait(bg, "req-1")
		require.NoError(t, err, name)
		assert.Equal(t, sentTx(f.w, "0xfound"), got, name)
	}
	requireRefusal(t, f.s.Release(bg, "req-2"), submissions.ErrIdempotencyConflict) // answered: money moved
	require.NoError(t, f.s.Release(bg, "req-3"), "an abandoned claim is released as any other")
	_, err = f.waitElsewhere().Wait(bg, "req-3")
	requireRefusal(t, err, submissions.ErrUnknownKey)
}

func testWaitOnAnUnknownKey(t *testing.T, newStore Factory) {
	f := setUp(t, newStore)
	_, err := f.s.Wait(bg, "req-1")
	requireRefusal(t, err, submissions.ErrUnknownKey)
	assert.Contains(t, err.Error(), "req-1")

	_, err = f.s.Wait(bg, " ")
	requireRefusal(t, err, submissions.ErrInvalidKey)
	_, err = f.s.Tenant("\x00").Wait(bg, " ")
	requireRefusal(t, err, submissions.ErrInvalidTenant)
	ctx, cancel := context.WithCancel(bg)
	cancel()
	_, err = f.s.Wait(ctx, "req-1")
	require.ErrorIs(t, err, context.Canceled)

	strand(t, f.s, "req-1", f.w)
	require.NoError(t, f.s.Release(bg, "req-1"))
	_, err = f.s.Wait(bg, "req-1")
	requireRefusal(t, err, submissions.ErrUnknownKey)
	f.rail.requireSends(t, 0)
}

func testWaitOfAKeyReleasedWhileWaiting(t *testing.T, newStore Factory) {
	t.Run("a claim another ledger holds", func(t *testing.T) {
		f := setUp(t, newStore)
		// Claimed through the store, as an instance that sends it, or died
		// sending it, leaves it.
		_, claimed, err := f.store.Claim(bg, "", "req-1", f.w.Fingerprint(), nil)
		require.NoError(t, err)
		require.True(t, claimed)
		done := goWait(bg, f.waitElsewhere(), "req-1")
		requireWaiting(t, done)
		forceRelease(t, f.s, "req-1")
		r := waitedFor(t, done)
		requireRefusal(t, r.err, submissions.ErrUnknownKey)
	})
	t.Run("a claim this ledger sends", func(t *testing.T) {
		f := setUp(t, newStore)
		started, finish := make(chan struct{}), make(chan struct{})
		sent := sendInBackground(f.s, "req-1", f.w, f.rail.blocking(started, finish))
		<-started
		done := goWait(bg, f.s, "req-1")
		requireWaiting(t, done)
		forceRelease(t, f.elsewhere(), "req-1") // another instance releases what it does not send
		close(finish)
		require.ErrorIs(t, <-sent, submissions.ErrOutcomeNotRecorded)
		r := waitedFor(t, done)
		requireRefusal(t, r.err, submissions.ErrUnknownKey)
	})
}

func testWaitEndsWithCtx(t *testing.T, newStore Factory) {
	f := setUp(t, newStore)
	started, finish := make(chan struct{}), make(chan struct{})
	sent := sendInBackground(f.s, "req-1", f.w, f.rail.blocking(started, finish))
	<-started
	for name, s := range map[string]*submissions.Submissions[Withdrawal]{"here": f.s, "elsewhere": f.waitElsewhere()} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(bg)
			done := goWait(ctx, s, "req-1")
			requireWaiting(t, done)
			cancel()
			r := waitedFor(t, done)
			require.ErrorIs(t, r.err, context.Canceled)
			assert.Zero(t, r.out)
		})
	}
	close(finish)
	require.NoError(t, <-sent)
	got, err := f.s.Wait(bg, "req-1")
	require.NoError(t, err, "a wait that ended takes nothing from the next")
	assert.Equal(t, sentTx(f.w, "0xtx-w-1"), got)
}

func testManyWaitersGetOneSendsOutcome(t *testing.T, newStore Factory) {
	const waiters = 32
	f := setUp(t, newStore)
	elsewhere := f.waitElsewhere()
	started, finish := make(chan struct{}), make(chan struct{})
	sent := sendInBackground(f.s, "req-1", f.w, f.rail.blocking(started, finish))
	<-started
	var ready, wg sync.WaitGroup
	start := make(chan struct{})
	results := make(chan waitResult, waiters)
	ready.Add(waiters)
	wg.Add(waiters)
	for i := range waiters {
		go func() {
			defer wg.Done()
			s := f.s
			if i%2 == 1 {
				s = elsewhere
			}
			ready.Done()
			<-start
			out, err := s.Wait(bg, "req-1")
			results <- waitResult{out, err}
		}()
	}
	ready.Wait()
	close(start)
	close(finish)
	wg.Wait()
	require.NoError(t, <-sent)
	close(results)
	for r := range results {
		require.NoError(t, r.err)
		assert.Equal(t, sentTx(f.w, "0xtx-w-1"), r.out)
	}
	f.rail.requireSends(t, 1)
}

func testWaitStaysInItsTenant(t *testing.T, newStore Factory) {
	f := setUp(t, newStore)
	a, b := f.s.Tenant("a"), f.s.Tenant("b")
	started, finish := make(chan struct{}), make(chan struct{})
	sent := sendInBackground(a, "req-1", f.w, f.rail.blocking(started, finish))
	<-started
	_, err := b.Wait(bg, "req-1")
	requireRefusal(t, err, submissions.ErrUnknownKey)
	_, err = f.s.Wait(bg, "req-1")
	requireRefusal(t, err, submissions.ErrUnknownKey)

	bw := f.w
	bw.Dest = "0xb"
	startedB, finishB := make(chan struct{}), make(chan struct{})
	sentB := sendInBackground(b, "req-1", bw, f.rail.blocking(startedB, finishB))
	<-startedB
	inA, inB := goWait(bg, a, "req-1"), goWait(bg, b.Tenant("b"), "req-1")
	close(finish)
	require.NoError(t, <-sent)
	r := waitedFor(t, inA)
	require.NoError(t, r.err)
	assert.Equal(t, sentTx(f.w, "0xtx-w-1"), r.out)
	requireWaiting(t, inB)
	close(finishB)
	require.NoError(t, <-sentB)
	r = waitedFor(t, inB)
	require.NoError(t, r.err)
	assert.Equal(t, sentTx(bw, "0xtx-w-1"), r.out, "tenant b's own outcome")
	f.rail.requireSends(t, 2)
}

// testWaitAfterASettleFailedIsOutcomeUnknown: a send whose answer the store
// failed to record (its Settle failed, or panicked) ends without an outcome
// like any other: on a store that records it (an Abandoner), a Wait of the
// key through another ledger returns ErrOutcomeUnknown at once instead of
// waiting until its ctx ends. Had the Settle stood, the Wait would return
// the outcome: the mark is made only on a claim still in flight.
func testWaitAfterASettleFailedIsOutcomeUnknown(t *testing.T, newStore Factory) {
	st := newStore(t)
	if _, ok := st.(driver.Abandoner); !ok {
		t.Skip("the store is not an Abandoner: a Wait elsewhere waits for a claim whose send ended without an answer")
	}
	for name, fault := range map[string]func() error{
		"fails":  func() error { return errLostConnection },
		"panics": func() error { panic("store bug in Settle") },
	} {
		t.Run(name, func(t *testing.T) {
			key := "req-" + name
			w := newWithdrawal("w-" + name)
			failing := &hooked{Store: st, before: func(call string) error {
				if call == "Settle" {
					return fault()
				}
				return nil
			}}
			sender := submissions.NewWithStore[Withdrawal](&abandoning{Store: failing, abandon: st.(driver.Abandoner).Abandon},
				submissions.WithLogger(quiet))
			r := &rail{}
			func() {
				defer func() { _ = recover() }() // the store's panic goes on to the caller
				_, err := sender.Submit(bg, key, w, r.send)
				require.ErrorIs(t, err, submissions.ErrOutcomeNotRecorded)
			}()
			r.requireSends(t, 1)
			other := submissions.NewWithStore[Withdrawal](st, submissions.WithLogger(quiet))
			ctx, cancel := context.WithTimeout(bg, 15*time.Second)
			defer cancel()
			start := time.Now()
			_, err := other.Wait(ctx, key)
			require.ErrorIs(t, err, submissions.ErrOutcomeUnknown, "another ledger learns that the send ended without a recorded answer")
			assert.Less(t, time.Since(start), 10*time.Second, "at once, not when ctx ends")
			rec, ok, err := st.Lookup(bg, "", key)
			require.NoError(t, err)
			require.True(t, ok)
			assert.True(t, rec.Abandoned, "the claim is marked abandoned")
			assert.False(t, rec.Done)
		})
	}
}

// testWaitOfTheSendingLedgerEndsWithAResolveElsewhere: a Wait through the
// ledger that is running the key's send is told of a Resolve made through
// another ledger on the same store while the send still runs, and returns
// the resolved outcome then, not when its own send ends.
func testWaitOfTheSendingLedgerEndsWithAResolveElsewhere(t *testing.T, newStore Factory) {
	f := setUp(t, newStore)
	started, finish := make(chan struct{}), make(chan struct{})
	sent := sendInBackground(f.s, "req-1", f.w, f.rail.blocking(started, finish))
	<-started
	here := goWait(bg, f.s, "req-1")
	requireWaiting(t, here)
	found := sentTx(f.w, "0xfound")
	require.NoError(t, f.waitElsewhere().Resolve(bg, "req-1", found))
	select {
	case r := <-here:
		require.NoError(t, r.err)
		assert.Equal(t, found, r.out, "the outcome resolved elsewhere")
	case <-time.After(10 * time.Second):
		close(finish)
		require.FailNow(t, "the Wait of the sending ledger did not end when the key was resolved elsewhere")
	}
	close(finish)
	err := <-sent
	require.ErrorIs(t, err, submissions.ErrOutcomeNotRecorded, "the send's own answer differs from the one resolved")
	f.rail.requireSends(t, 1)
}
