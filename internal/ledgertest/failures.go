package ledgertest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemledger/submissions"
	"github.com/idemledger/submissions/admin"
	"github.com/idemledger/submissions/driver"
)

// Store failures: what each error says when the store fails or panics, and
// that the ledger's own bookkeeping survives either.
var failureTests = []test{
	{"StoreFailureIsErrStoreFailed", testStoreFailureIsErrStoreFailed},
	{"AnswerIsNotRecordedWhenTheStoreFails", testAnswerIsNotRecordedWhenTheStoreFails},
	{"AnUnavailableSettleIsMadeAgain", testAnUnavailableSettleIsMadeAgain},
	{"AnUnavailableSettleThatStoodIsNotSentAgain", testAnUnavailableSettleThatStoodIsNotSentAgain},
	{"AnUnavailableSettleEndsWithItsContext", testAnUnavailableSettleEndsWithItsContext},
	{"AnAbandonThatHangsEndsSoonAfterTheDeadline", testAnAbandonThatHangsEndsSoonAfterTheDeadline},
	{"StorePanicLeavesTheLedgerWhole", testStorePanicLeavesTheLedgerWhole},
	{"ReleaseWaitsForAClaimUntilItsContextEnds", testReleaseWaitsForAClaimUntilItsContextEnds},
	{"ReleaseIsNotHeldUpByRetries", testReleaseIsNotHeldUpByRetries},
	{"SubmitDoesNotWaitForARelease", testSubmitDoesNotWaitForARelease},
	{"ReleaseAfterTheOutcomeIsRecordedIsAConflict", testReleaseAfterTheOutcomeIsRecordedIsAConflict},
	{"AbandonFailureLeavesTheLedgerWhole", testAbandonFailureLeavesTheLedgerWhole},
}

// abandoning wraps an Abandoner store, its Abandon replaced by abandon.
type abandoning struct {
	driver.Store[Withdrawal]
	abandon func(ctx context.Context, tenant, key string, token driver.Token) error
}

func (a *abandoning) Abandon(ctx context.Context, tenant, key string, token driver.Token) error {
	return a.abandon(ctx, tenant, key, token)
}

// testAbandonFailureLeavesTheLedgerWhole: the ledger tells an Abandoner of
// each send that ends without settling its claim (an error, a panic, an
// answer not recorded, a Settle that failed or panicked, which marks the
// claim only if the answer did not stand) and of no other; an Abandon that fails or panics
// changes nothing for the send's caller, whose error or panic is the one it
// would be, and leaves the key claimed and releasable.
func testAbandonFailureLeavesTheLedgerWhole(t *testing.T, newStore Factory) {
	if _, ok := newStore(t).(driver.Abandoner); !ok {
		t.Skip("the store is not an Abandoner")
	}
	for name, fail := range map[string]func() error{
		"works":  func() error { return nil },
		"fails":  func() error { return errLostConnection },
		"panics": func() error { panic("store bug in Abandon") },
	} {
		t.Run(name, func(t *testing.T) {
			st := newStore(t)
			var mu sync.Mutex
			var abandoned []string
			var settleFault func() error // of the next Settle, if any
			faulty := &hooked{Store: st, before: func(call string) error {
				mu.Lock()
				fault := settleFault
				if call == "Settle" {
					settleFault = nil
				}
				mu.Unlock()
				if call == "Settle" && fault != nil {
					return fault()
				}
				return nil
			}}
			f := setUpOn(t, &abandoning{Store: faulty, abandon: func(ctx context.Context, tenant, key string, token driver.Token) error {
				mu.Lock()
				abandoned = append(abandoned, key)
				mu.Unlock()
				if err := fail(); err != nil {
					return err
				}
				return st.(driver.Abandoner).Abandon(ctx, tenant, key, token)
			}})
			requireAbandoned := func(want ...string) {
				t.Helper()
				mu.Lock()
				defer mu.Unlock()
				require.Equal(t, want, abandoned, "the keys abandoned")
			}
			_, err := f.s.Submit(bg, "req-0", newWithdrawal("w-0"), f.rail.send)
			require.NoError(t, err)
			requireAbandoned()

			strand(t, f.s, "req-1", f.w)
			requireAbandoned("req-1")
			require.PanicsWithValue(t, "send bug", func() {
				_, _ = f.s.Submit(bg, "req-2", newWithdrawal("w-2"), func(context.Context, Withdrawal) (Withdrawal, error) { panic("send bug") })
			}, "the send's own panic goes on")
			requireAbandoned("req-1", "req-2")
			_, err = f.s.Submit(bg, "req-3", newWithdrawal("w-3"), func(context.Context, Withdrawal) (Withdrawal, error) {
				return sentTx(newWithdrawal("w-other"), "0xother"), nil
			})
			require.ErrorIs(t, err, submissions.ErrOutcomeNotRecorded)
			requireAbandoned("req-1", "req-2", "req-3")

			mu.Lock()
			settleFault = func() error { return errLostConnection }
			mu.Unlock()
			_, err = f.s.Submit(bg, "req-4", newWithdrawal("w-4"), f.rail.send)
			require.ErrorIs(t, err, submissions.ErrOutcomeNotRecorded)
			mu.Lock()
			settleFault = func() error { panic("store bug in Settle") }
			mu.Unlock()
			require.PanicsWithValue(t, "store bug in Settle", func() {
				_, _ = f.s.Submit(bg, "req-5", newWithdrawal("w-5"), f.rail.send)
			})
			requireAbandoned("req-1", "req-2", "req-3", "req-4", "req-5")

			requireKeptClaim(t, f.s, "req-1", f.w)
			for i, key := range []string{"req-1", "req-2"} { // no answer: released
				require.NoError(t, f.s.Release(bg, key), "Release of %s", key)
				requireHolder(t, f.s, []string{"w-1", "w-2"}[i], "")
			}
			for i, key := range []string{"req-3", "req-4", "req-5"} { // answered: never released
				requireRefusal(t, f.s.Release(bg, key), submissions.ErrIdempotencyConflict)
				res := f.s.Admin().Release(bg, admin.Target{Key: key, Force: true})
				require.Equal(t, admin.RuleAnswered, res.Rule, "forced Release of %s: %s", key, res.Message)
				requireHolder(t, f.s, []string{"w-3", "w-4", "w-5"}[i], key)
			}
			for i, key := range []string{"req-4", "req-5"} { // their answers are kept: resolved in one step
				res := f.s.Admin().ResolveWithAnswer(bg, admin.Target{Key: key})
				require.Equal(t, admin.Changed, res.Decision, "%s: %s", key, res.Message)
				w := newWithdrawal([]string{"w-4", "w-5"}[i])
				requireOutcome(t, f.s, key, sentTx(w, "0xtx-"+w.ID), true)
			}
			requireAbandoned("req-1", "req-2", "req-3", "req-4", "req-5")
		})
	}
}

// hooked wraps a store with hooks: before runs ahead of every call with the
// call's name, and fails it without reaching the store when it returns an
// error (or panics); after runs once a call has returned from the store.
type hooked struct {
	driver.Store[Withdrawal]
	before func(call string) error
	after  func(call string)
}

func (h *hooked) run(call string, f func()) error {
	if h.before != nil {
		if err := h.before(call); err != nil {
			return err
		}
	}
	f()
	if h.after != nil {
		h.after(call)
	}
	return nil
}

func (h *hooked) Claim(ctx context.Context, tenant, key string, fp submissions.Fingerprint, outcome *Withdrawal) (rec driver.Record[Withdrawal], ok bool, err error) {
	if herr := h.run("Claim", func() { rec, ok, err = h.Store.Claim(ctx, tenant, key, fp, outcome) }); herr != nil {
		return rec, false, herr
	}
	return rec, ok, err
}

func (h *hooked) Settle(ctx context.Context, tenant, key string, token driver.Token, outcome Withdrawal) (rec driver.Record[Withdrawal], ok bool, err error) {
	if herr := h.run("Settle", func() { rec, ok, err = h.Store.Settle(ctx, tenant, key, token, outcome) }); herr != nil {
		return rec, false, herr
	}
	return rec, ok, err
}

func (h *hooked) Release(ctx context.Context, tenant, key string, token driver.Token) (rec driver.Record[Withdrawal], ok bool, err error) {
	if herr := h.run("Release", func() { rec, ok, err = h.Store.Release(ctx, tenant, key, token) }); herr != nil {
		return rec, false, herr
	}
	return rec, ok, err
}

func (h *hooked) Lookup(ctx context.Context, tenant, key string) (rec driver.Record[Withdrawal], ok bool, err error) {
	if herr := h.run("Lookup", func() { rec, ok, err = h.Store.Lookup(ctx, tenant, key) }); herr != nil {
		return rec, false, herr
	}
	return rec, ok, err
}

func (h *hooked) ClaimedBy(ctx context.Context, tenant, id string) (key string, ok bool, err error) {
	if herr := h.run("ClaimedBy", func() { key, ok, err = h.Store.ClaimedBy(ctx, tenant, id) }); herr != nil {
		return "", false, herr
	}
	return key, ok, err
}

// failOnce returns a before hook that fails the first call named call with
// err, and lets every other call through.
func failOnce(call string, err error) func(string) error {
	var once sync.Once
	return func(c string) error {
		var fail error
		if c == call {
			once.Do(func() { fail = err })
		}
		return fail
	}
}

var errLostConnection = errors.New("connection lost")

func testStoreFailureIsErrStoreFailed(t *testing.T, newStore Factory) {
	for _, c := range []struct {
		call string
		op   func(f *fixture) error
	}{
		{"Claim", func(f *fixture) error {
			out, err := f.s.Submit(bg, "req-1", f.w, f.rail.send)
			assert.Zero(t, out)
			return err
		}},
		{"Claim", func(f *fixture) error { return f.s.Resolve(bg, "req-1", sentTx(f.w, "0xfound")) }},
		{"Settle", func(f *fixture) error {
			strand(t, f.s, "req-1", f.w)
			return f.s.Resolve(bg, "req-1", sentTx(f.w, "0xfound"))
		}},
		{"Lookup", func(f *fixture) error { strand(t, f.s, "req-1", f.w); return f.s.Release(bg, "req-1") }},
		{"Release", func(f *fixture) error { strand(t, f.s, "req-1", f.w); return f.s.Release(bg, "req-1") }},
		{"Lookup", func(f *fixture) error { _, _, err := f.s.Outcome(bg, "req-1"); return err }},
		{"ClaimedBy", func(f *fixture) error { _, _, err := f.s.ClaimedBy(bg, "w-1"); return err }},
	} {
		t.Run(c.call, func(t *testing.T) {
			f := setUpOn(t, &hooked{Store: newStore(t), before: failOnce(c.call, errLostConnection)})
			err := c.op(f)
			require.ErrorIs(t, err, submissions.ErrStoreFailed)
			require.ErrorIs(t, err, errLostConnection, "the store's error is wrapped")
			for _, refusal := range []error{submissions.ErrIdempotencyConflict, submissions.ErrSubmissionInFlight, submissions.ErrOutcomeUnknown, submissions.ErrOutcomeNotRecorded} {
				assert.NotErrorIs(t, err, refusal)
			}
			f.rail.requireSends(t, 0)
		})
	}
}

func testAnswerIsNotRecordedWhenTheStoreFails(t *testing.T, newStore Factory) {
	st := newStore(t)
	fail := failOnce("Settle", errLostConnection)
	var settles atomic.Int32
	f := setUpOn(t, &hooked{Store: st, before: func(call string) error {
		if call == "Settle" {
			settles.Add(1)
		}
		return fail(call)
	}})
	out, err := f.s.Submit(bg, "req-1", f.w, f.rail.send)
	require.EqualValues(t, 1, settles.Load(), "a Settle that failed otherwise than unavailable is not made again")
	require.ErrorIs(t, err, submissions.ErrOutcomeNotRecorded)
	require.ErrorIs(t, err, errLostConnection)
	require.NotErrorIs(t, err, submissions.ErrStoreFailed, "money moved: not the class that says nothing was sent")
	require.Contains(t, err.Error(), "may or may not", "the store may have recorded it before it failed")
	require.Equal(t, sentTx(f.w, "0xtx-w-1"), out, "the rail's answer comes back")
	// The key stays in flight, for this instance and any other.
	other := submissions.NewWithStore(st, submissions.WithLogger(quiet))
	requireKeptClaim(t, other, "req-1", f.w)
	require.NoError(t, other.Resolve(bg, "req-1", out), "Resolve with the answer that came back")
	requireOutcome(t, other, "req-1", out, true)
	f.rail.requireSends(t, 1)
}

// errUnavailable is a store's error after which a Settle may stand if made
// again (a failover, say).
var errUnavailable = fmt.Errorf("%w: %w", driver.ErrUnavailable, errLostConnection)

// testAnUnavailableSettleIsMadeAgain: a Settle that fails with
// driver.ErrUnavailable is made again on the claim's token until it stands,
// and the caller gets the answer recorded; send ran once.
func testAnUnavailableSettleIsMadeAgain(t *testing.T, newStore Factory) {
	var settles atomic.Int32
	f := setUpOn(t, &hooked{Store: newStore(t), before: func(call string) error {
		if call == "Settle" && settles.Add(1) <= 2 {
			return errUnavailable
		}
		return nil
	}})
	out, err := f.s.Submit(bg, "req-1", f.w, f.rail.send)
	require.NoError(t, err)
	require.Equal(t, sentTx(f.w, "0xtx-w-1"), out)
	require.EqualValues(t, 3, settles.Load(), "two Settles that failed, and the one that stood")
	requireOutcome(t, f.s, "req-1", out, true)
	f.rail.requireSends(t, 1)
}

// settleStandsThenFails wraps a store whose first Settle records the
// outcome and then fails with errUnavailable, as a commit whose answer was
// lost does.
type settleStandsThenFails struct {
	driver.Store[Withdrawal]
	settles atomic.Int32
}

func (s *settleStandsThenFails) Settle(ctx context.Context, tenant, key string, token driver.Token, outcome Withdrawal) (driver.Record[Withdrawal], bool, error) {
	rec, ok, err := s.Store.Settle(ctx, tenant, key, token, outcome)
	if s.settles.Add(1) == 1 && err == nil {
		return driver.Record[Withdrawal]{}, false, errUnavailable
	}
	return rec, ok, err
}

// testAnUnavailableSettleThatStoodIsNotSentAgain: a Settle that stood but
// said the store was unavailable is made again, finds the claim done with
// the same outcome, and the caller gets it as recorded.
func testAnUnavailableSettleThatStoodIsNotSentAgain(t *testing.T, newStore Factory) {
	st := &settleStandsThenFails{Store: newStore(t)}
	f := setUpOn(t, st)
	out, err := f.s.Submit(bg, "req-1", f.w, f.rail.send)
	require.NoError(t, err)
	require.EqualValues(t, 2, st.settles.Load())
	requireOutcome(t, f.s, "req-1", out, true)
	f.rail.requireSends(t, 1)
}

// testAnUnavailableSettleEndsWithItsContext: a Settle that stays
// unavailable is made again until the caller's ctx ends, and no later: the
// caller gets ErrOutcomeNotRecorded, with the answer, soon after its
// deadline, and the key stays in flight for an operator.
func testAnUnavailableSettleEndsWithItsContext(t *testing.T, newStore Factory) {
	st := newStore(t)
	var settles atomic.Int32
	f := setUpOn(t, &hooked{Store: st, before: func(call string) error {
		if call == "Settle" {
			settles.Add(1)
			return errUnavailable
		}
		return nil
	}})
	const deadline = 300 * time.Millisecond
	took, out, err := submitWithin(f, deadline)
	require.ErrorIs(t, err, submissions.ErrOutcomeNotRecorded)
	require.Equal(t, sentTx(f.w, "0xtx-w-1"), out, "the rail's answer comes back")
	assert.Greater(t, settles.Load(), int32(2), "made again while ctx lasted")
	assert.GreaterOrEqual(t, took, deadline, "made again until ctx ended")
	assert.Less(t, took, deadline+time.Second, "and no longer")
	other := submissions.NewWithStore(st, submissions.WithLogger(quiet))
	requireKeptClaim(t, other, "req-1", f.w)
	f.rail.requireSends(t, 1)
}

// submitWithin submits f's withdrawal under req-1 with a ctx of deadline,
// and returns how long it took and Submit's answer.
func submitWithin(f *fixture, deadline time.Duration) (time.Duration, Withdrawal, error) {
	ctx, cancel := context.WithTimeout(bg, deadline)
	defer cancel()
	began := time.Now()
	out, err := f.s.Submit(ctx, "req-1", f.w, f.rail.send)
	return time.Since(began), out, err
}

// testAnAbandonThatHangsEndsSoonAfterTheDeadline: after a Settle that
// failed, the ledger abandons the claim; when the store does not answer
// (a server frozen, say), the caller still hears back within a few hundred
// milliseconds of its deadline.
func testAnAbandonThatHangsEndsSoonAfterTheDeadline(t *testing.T, newStore Factory) {
	abandons := make(chan struct{}, 1)
	st := &abandoning{Store: &hooked{Store: newStore(t), before: func(call string) error {
		if call == "Settle" {
			return errLostConnection
		}
		return nil
	}}, abandon: func(ctx context.Context, _, _ string, _ driver.Token) error {
		abandons <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	}}
	f := setUpOn(t, st)
	const deadline = 200 * time.Millisecond
	took, _, err := submitWithin(f, deadline)
	require.ErrorIs(t, err, submissions.ErrOutcomeNotRecorded)
	require.Len(t, abandons, 1, "the claim was abandoned")
	assert.Less(t, took, deadline+300*time.Millisecond, "the caller hears back soon after its deadline")
	f.rail.requireSends(t, 1)
}

// testStorePanicLeavesTheLedgerWhole: a store call that panics (a codec
// whose MarshalJSON panics, say) panics on out of the ledger, and leaves the
// ledger's own bookkeeping as it was: afterwards a Release is still refused
// during a running send of the key, and a second key still cannot claim the
// withdrawal.
func testStorePanicLeavesTheLedgerWhole(t *testing.T, newStore Factory) {
	for call, req1Done := range map[string]bool{"Claim": false, "Settle": false, "Lookup": true, "Release": true} {
		t.Run(call, func(t *testing.T) {
			var once sync.Once
			f := setUpOn(t, &hooked{Store: newStore(t), before: func(c string) error {
				if c == call {
					once.Do(func() { panic("store bug in " + call) })
				}
				return nil
			}})
			require.PanicsWithValue(t, "store bug in "+call, func() {
				strand(t, f.s, "req-0", newWithdrawal("w-0")) // the Lookup and Release of the Release below
				_, _ = f.s.Submit(bg, "req-1", f.w, f.rail.send)
				_ = f.s.Release(bg, "req-0")
			})
			// What the panic left in flight, nobody sends any more: an
			// operator releases it (the Release of a key with an outcome
			// is refused as ever).
			switch {
			case req1Done:
				requireRefusal(t, f.s.Release(bg, "req-1"), submissions.ErrIdempotencyConflict)
			case call == "Settle": // the rail answered: resolved with its answer, never released
				requireRefusal(t, f.s.Release(bg, "req-1"), submissions.ErrIdempotencyConflict)
				res := f.s.Admin().ResolveWithAnswer(bg, admin.Target{Key: "req-1"})
				require.Equal(t, admin.Changed, res.Decision, res.Message)
				requireOutcome(t, f.s, "req-1", sentTx(f.w, "0xtx-w-1"), true)
			default:
				require.NoError(t, f.s.Release(bg, "req-1"), "Release of the key whose Submit panicked")
				requireHolder(t, f.s, "w-1", "")
			}
			require.NoError(t, f.s.Release(bg, "req-0"), "Release of the key stranded before the panic")
			requireHolder(t, f.s, "w-0", "")

			started, finish := make(chan struct{}), make(chan struct{})
			done := make(chan error)
			go func() {
				_, err := f.s.Submit(bg, "req-2", newWithdrawal("w-2"), f.rail.blocking(started, finish))
				done <- err
			}()
			<-started
			requireRefusal(t, f.s.Release(bg, "req-2"), submissions.ErrSubmissionInFlight)
			_, err := f.s.Submit(bg, "req-3", newWithdrawal("w-2"), f.rail.send)
			requireConflict(t, err, "req-2")
			close(finish)
			require.NoError(t, <-done)
			requireRefusal(t, f.s.Release(bg, "req-2"), submissions.ErrIdempotencyConflict)
		})
	}
}

// blockAfterClaim returns an after hook that, at the first Claim, says so on
// claimed and waits for proceed: the claim is in the store and its reply has
// not come back.
func blockAfterClaim(claimed chan<- struct{}, proceed <-chan struct{}) func(string) {
	var once sync.Once
	return func(call string) {
		if call == "Claim" {
			once.Do(func() { close(claimed); <-proceed })
		}
	}
}

// testReleaseWaitsForAClaimUntilItsContextEnds: a Release of a key that a
// Submit of the same ledger is claiming waits for the claim's reply, since
// the claim may be one it must not free, and gives up when its context
// ends; once the claim is back, the Release finds its send running.
func testReleaseWaitsForAClaimUntilItsContextEnds(t *testing.T, newStore Factory) {
	claimed, proceed := make(chan struct{}), make(chan struct{})
	f := setUpOn(t, &hooked{Store: newStore(t), after: blockAfterClaim(claimed, proceed)})
	started, finish := make(chan struct{}), make(chan struct{})
	submitted := make(chan error)
	go func() {
		_, err := f.s.Submit(bg, "req-1", f.w, f.rail.blocking(started, finish))
		submitted <- err
	}()
	<-claimed

	ctx, cancel := context.WithTimeout(bg, 50*time.Millisecond)
	defer cancel()
	err := f.s.Release(ctx, "req-1")
	require.ErrorIs(t, err, context.DeadlineExceeded, "the wait ends with the context")
	require.NotErrorIs(t, err, submissions.ErrSubmissionInFlight)
	require.NotErrorIs(t, err, submissions.ErrStoreFailed, "a wait that its context ended is no store failure")

	// A negative check, best effort: the Release has not answered after a
	// while; the refusal below shows it waited for the claim's reply.
	released := make(chan error)
	go func() { released <- f.s.Release(bg, "req-1") }()
	select {
	case err := <-released:
		require.FailNow(t, "Release during the claim returned before the claim's reply; want it to wait", "%v", err)
	case <-time.After(20 * time.Millisecond):
	}
	close(proceed)
	<-started
	requireRefusal(t, <-released, submissions.ErrSubmissionInFlight)
	close(finish)
	require.NoError(t, <-submitted)
	f.rail.requireSends(t, 1)
	requireOutcome(t, f.s, "req-1", sentTx(f.w, "0xtx-w-1"), true)
}

// testReleaseIsNotHeldUpByRetries: an operator releases a stuck key while
// clients keep retrying it through the same ledger, their claims of the key
// overlapping in the store. The release waits only for the claims that were
// in the store when it looked, and so answers long before its deadline.
func testReleaseIsNotHeldUpByRetries(t *testing.T, newStore Factory) {
	f := setUpOn(t, &hooked{Store: newStore(t), after: func(call string) {
		if call == "Claim" {
			time.Sleep(2 * time.Millisecond) // a store's round trip
		}
	}})
	strand(t, f.s, "req-1", f.w)
	stop := make(chan struct{})
	var retries sync.WaitGroup
	for range 4 {
		retries.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, _ = f.s.Submit(bg, "req-1", newWithdrawal("w-other"), failing) // refused: the key is w-1's
			}
		})
	}
	ctx, cancel := context.WithTimeout(bg, time.Second)
	defer cancel()
	time.Sleep(10 * time.Millisecond) // the retries are under way
	err := f.s.Release(ctx, "req-1")
	close(stop)
	retries.Wait()
	require.NoError(t, err, "Release while the key's retries run")
}

// testSubmitDoesNotWaitForARelease: a Submit of a key that the same ledger
// is releasing answers at once, from what the store holds.
func testSubmitDoesNotWaitForARelease(t *testing.T, newStore Factory) {
	releasing, proceed := make(chan struct{}), make(chan struct{})
	var once sync.Once
	f := setUpOn(t, &hooked{Store: newStore(t), before: func(call string) error {
		if call == "Release" {
			once.Do(func() { close(releasing); <-proceed })
		}
		return nil
	}})
	strand(t, f.s, "req-1", f.w)
	released := make(chan error)
	go func() { released <- f.s.Release(bg, "req-1") }()
	<-releasing
	ctx, cancel := context.WithTimeout(bg, time.Second)
	defer cancel()
	_, err := f.s.Submit(ctx, "req-1", f.w, f.rail.send)
	requireRefusal(t, err, submissions.ErrSubmissionInFlight)
	close(proceed)
	require.NoError(t, <-released)
	_, err = f.s.Submit(bg, "req-1", f.w, f.rail.send)
	require.NoError(t, err, "Submit once the release is done")
	f.rail.requireSends(t, 1)
}

func testReleaseAfterTheOutcomeIsRecordedIsAConflict(t *testing.T, newStore Factory) {
	// The send has returned and its outcome is recorded, but Submit has not
	// returned yet: the key has an outcome, and a Release of it on the same
	// ledger is refused as any key with an outcome is, not as in flight.
	h := &hooked{Store: newStore(t)}
	f := setUpOn(t, h)
	var releaseErr error
	h.after = func(call string) {
		if call == "Settle" {
			releaseErr = f.s.Release(bg, "req-1")
		}
	}
	out, err := f.s.Submit(bg, "req-1", f.w, f.rail.send)
	require.NoError(t, err)
	requireRefusal(t, releaseErr, submissions.ErrIdempotencyConflict)
	require.NotErrorIs(t, releaseErr, submissions.ErrSubmissionInFlight)
	requireOutcome(t, f.s, "req-1", out, true)
	f.rail.requireSends(t, 1)
}
