package ledgertest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemledger/submissions"
	"github.com/idemledger/submissions/admin"
	"github.com/idemledger/submissions/driver"
	"github.com/idemledger/submissions/observe"
)

// Doors: every door that resolves or releases (the service's own Resolve
// and Release, the Admin's, Reconcile) decides alike, and none frees a
// withdrawal whose send may still move money, in this ledger or another on
// the same store (a second instance, which knows nothing of this one's
// sends but what the store says).
var doorTests = []test{
	{"AnAnswerAfterTheCallersDeadlineIsRecorded", testAnAnswerAfterTheCallersDeadlineIsRecorded},
	{"NoDoorReleasesAClaimAnotherInstanceIsSending", testNoDoorReleasesAClaimAnotherInstanceIsSending},
	{"AClaimWhoseSendEndedIsReleasedByAnyInstance", testAClaimWhoseSendEndedIsReleasedByAnyInstance},
	{"TheServicesResolveSaysWhatTheAdminSays", testTheServicesResolveSaysWhatTheAdminSays},
	{"AnAnsweredClaimIsNeverReleased", testAnAnsweredClaimIsNeverReleased},
	{"AnAnswerTheStoreFailedToRecordIsNeverFreed", testAnAnswerTheStoreFailedToRecordIsNeverFreed},
	{"AClaimMadeAsTheCallerLeftIsReleased", testAClaimMadeAsTheCallerLeftIsReleased},
	{"TheServicesOutcomeRuleHoldsAtEveryDoor", testTheServicesOutcomeRuleHoldsAtEveryDoor},
}

// instance is another instance on st: a ledger that runs st through the
// Store interface and the optional abilities pgstore has, none of this
// process's memory.
func instance(st driver.Store[Withdrawal]) *submissions.Submissions[Withdrawal] {
	var view driver.Store[Withdrawal] = struct{ driver.Store[Withdrawal] }{st}
	l, isLister := st.(driver.Lister)
	a, isAbandoner := st.(driver.Abandoner)
	switch {
	case isLister && isAbandoner:
		view = struct {
			driver.Store[Withdrawal]
			driver.Lister
			driver.Abandoner
		}{st, l, a}
	case isLister:
		view = lister{st, l}
	case isAbandoner:
		view = struct {
			driver.Store[Withdrawal]
			driver.Abandoner
		}{st, a}
	}
	return submissions.NewWithStore(view, submissions.WithLogger(quiet))
}

// The rail answers after the caller has stopped waiting: the answer is
// recorded all the same, so that no door takes it for a claim without one.
func testAnAnswerAfterTheCallersDeadlineIsRecorded(t *testing.T, newStore Factory) {
	f := setUp(t, newStore)
	ctx, cancel := context.WithTimeout(bg, 30*time.Millisecond)
	defer cancel()
	late := func(ctx context.Context, w Withdrawal) (Withdrawal, error) {
		<-ctx.Done() // the caller gave up before the rail answered
		return f.rail.send(ctx, w)
	}
	out, err := f.s.Submit(ctx, "req-1", f.w, late)
	require.NoError(t, err, "Submit whose send answered after its deadline")
	require.Equal(t, sentTx(f.w, "0xtx-w-1"), out)
	requireOutcome(t, f.s, "req-1", out, true)

	requireRefusal(t, f.s.Release(bg, "req-1"), submissions.ErrIdempotencyConflict)
	res := f.s.Admin().Release(bg, admin.Target{Key: "req-1", Force: true})
	require.Equal(t, admin.Refused, res.Decision, res.Message)
	require.Equal(t, admin.RuleHasOutcome, res.Rule)
	_, err = f.s.Submit(bg, "req-2", f.w, f.rail.send)
	requireConflict(t, err, "req-1")
	replayed, err := f.s.Submit(bg, "req-1", f.w, f.rail.send)
	require.NoError(t, err)
	require.Equal(t, out, replayed)
	f.rail.requireSends(t, 1)
}

// While instance a sends, instance b's Release, its Admin's Release without
// force, ReleaseClaim and a Reconcile that the rail tells "not sent" all
// leave the claim alone: a send that has not reached the rail yet would
// otherwise be sent again under another key.
func testNoDoorReleasesAClaimAnotherInstanceIsSending(t *testing.T, newStore Factory) {
	f := setUp(t, newStore)
	b := instance(f.store)
	started, finish := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := f.s.Submit(bg, "req-1", f.w, f.rail.blocking(started, finish))
		done <- err
	}()
	<-started

	requireRefusal(t, b.Release(bg, "req-1"), submissions.ErrSubmissionInFlight)
	res := b.Admin().Release(bg, admin.Target{Key: "req-1"})
	require.Equal(t, admin.Refused, res.Decision, res.Message)
	require.Equal(t, admin.RuleSendMayRun, res.Rule)
	if _, ok := f.store.(driver.Lister); ok {
		claims, err := b.Admin().InFlight(bg, admin.InFlightQuery{})
		require.NoError(t, err)
		require.Len(t, claims, 1)
		require.Equal(t, admin.SendUnknown, claims[0].Send(), "b cannot know a's send")
		requireRefusal(t, b.Admin().ReleaseClaim(bg, claims[0]), submissions.ErrSubmissionInFlight)
		notSent := func(context.Context, admin.Claim) (admin.Finding[Withdrawal], error) {
			return admin.Finding[Withdrawal]{Verdict: admin.VerdictNotSent}, nil
		}
		rep, err := b.Admin().Reconcile(bg, 0, notSent)
		require.NoError(t, err)
		assert.Empty(t, rep.Released, "Reconcile released a claim whose send runs")
		assert.Len(t, rep.Skipped, 1)
	}
	_, err := b.Submit(bg, "req-2", f.w, f.rail.send)
	requireConflict(t, err, "req-1")

	close(finish)
	require.NoError(t, <-done, "a's send, recorded")
	f.rail.requireSends(t, 1)
	requireOutcome(t, b, "req-1", sentTx(f.w, "0xtx-w-1"), true)
}

// A send that ended without an answer is known to have ended, by its own
// instance always and by another through a store that records it (a
// driver.Abandoner): the claim can be released there, and sent again.
func testAClaimWhoseSendEndedIsReleasedByAnyInstance(t *testing.T, newStore Factory) {
	f := setUp(t, newStore)
	strand(t, f.s, "req-1", f.w)
	b := instance(f.store)
	if _, ok := f.store.(driver.Abandoner); ok {
		require.NoError(t, b.Release(bg, "req-1"), "Release by another instance of a claim the store knows ended")
	} else {
		requireRefusal(t, b.Release(bg, "req-1"), submissions.ErrSubmissionInFlight)
		require.NoError(t, f.s.Release(bg, "req-1"), "Release by the instance whose send ended")
	}
	_, err := b.Submit(bg, "req-2", f.w, f.rail.send)
	require.NoError(t, err)
	f.rail.requireSends(t, 1)
}

// The service's Resolve and the Admin's decide in one place: the same
// refusal and words for an outcome of another amount, and an unknown key
// recorded by the service's (rule 13) where the Admin's refuses it.
func testTheServicesResolveSaysWhatTheAdminSays(t *testing.T, newStore Factory) {
	f := setUp(t, newStore)
	strand(t, f.s, "req-1", f.w)
	other := sentTx(f.w, "0xd")
	other.Amount = "26"
	err := f.s.Resolve(bg, "req-1", other)
	requireRefusal(t, err, submissions.ErrIdempotencyConflict)
	res := f.s.Admin().Resolve(bg, admin.Target{Key: "req-1", Force: true}, other)
	require.Equal(t, admin.Refused, res.Decision)
	require.Equal(t, admin.RuleFieldDiffers, res.Rule)
	require.Equal(t, res.Err.Error(), err.Error(), "the same words at both doors")
	require.Contains(t, err.Error(), `amount "26" is not the claim's "25"`)

	w2 := newWithdrawal("w-2")
	res = f.s.Admin().Resolve(bg, admin.Target{Key: "req-2"}, sentTx(w2, "0xe"))
	require.Equal(t, admin.RuleUnknownKey, res.Rule, res.Message)
	require.NoError(t, f.s.Resolve(bg, "req-2", sentTx(w2, "0xe")))
	requireOutcome(t, f.s, "req-2", sentTx(w2, "0xe"), true)
	err = f.s.Resolve(bg, "req-3", sentTx(w2, "0xe"))
	requireConflict(t, err, "req-2")
}

// The rail answered, and the answer could not be recorded (it is for
// another amount): the claim says so, in every instance whose store keeps
// it (a driver.Answerer), and no door releases it, with force or without.
func testAnAnsweredClaimIsNeverReleased(t *testing.T, newStore Factory) {
	f := setUp(t, newStore)
	answer := sentTx(f.w, "0xodd")
	answer.Amount = "26"
	out, err := f.s.Submit(bg, "req-1", f.w, func(context.Context, Withdrawal) (Withdrawal, error) {
		f.rail.calls.Add(1)
		return answer, nil
	})
	require.ErrorIs(t, err, submissions.ErrOutcomeNotRecorded)
	require.Equal(t, answer, out)
	others := []*submissions.Submissions[Withdrawal]{f.s}
	if _, ok := f.store.(driver.Answerer[Withdrawal]); ok {
		others = append(others, instance(f.store))
	}
	for i, s := range others {
		requireRefusal(t, s.Release(bg, "req-1"), submissions.ErrIdempotencyConflict)
		res := s.Admin().Release(bg, admin.Target{Key: "req-1", Force: true})
		require.Equal(t, admin.Refused, res.Decision, "instance %d: %s", i, res.Message)
		require.Equal(t, admin.RuleAnswered, res.Rule, "instance %d", i)
		require.True(t, res.Claim.Answered, "instance %d", i)
		require.Equal(t, admin.SendAnswered, res.Claim.Send(), "instance %d", i)
		if _, ok := f.store.(driver.Lister); ok {
			claims, err := s.Admin().InFlight(bg, admin.InFlightQuery{})
			require.NoError(t, err)
			require.Len(t, claims, 1)
			assert.Equal(t, admin.SendAnswered, claims[0].Send(), "instance %d: listed", i)
		}
		// The answer kept is for another amount: it cannot close the claim.
		res = s.Admin().ResolveWithAnswer(bg, admin.Target{Key: "req-1"})
		require.Equal(t, admin.RuleFieldDiffers, res.Rule, "instance %d: %s", i, res.Message)
	}
	_, err = f.s.Submit(bg, "req-2", f.w, f.rail.send)
	requireConflict(t, err, "req-1")
	f.rail.requireSends(t, 1)
	require.NoError(t, f.s.Resolve(bg, "req-1", sentTx(f.w, "0xfound")), "resolved with what the rail shows")
}

// The rail answered, and the store failed, or panicked, as the ledger
// recorded the answer: from then until the claim is marked answered, the
// send still runs, and a Release made in between (here, as the ledger
// abandons the send) is refused. A send taken for ended as the Settle
// failed would let it free a withdrawal the rail has moved.
func testAnAnswerTheStoreFailedToRecordIsNeverFreed(t *testing.T, newStore Factory) {
	for _, panics := range []bool{false, true} {
		name := map[bool]string{false: "Settle fails", true: "Settle panics"}[panics]
		t.Run(name, func(t *testing.T) {
			st := &failingSettle{Store: newStore(t), panics: panics}
			f := setUpOn(t, st)
			st.during = func() {
				requireRefusal(t, f.s.Release(bg, "req-1"), submissions.ErrSubmissionInFlight)
				requireRefusal(t, f.s.Admin().Release(bg, admin.Target{Key: "req-1", Force: true}).Err, submissions.ErrSubmissionInFlight)
			}
			func() {
				defer func() {
					if p := recover(); p != nil && p != errPanic {
						panic(p)
					}
				}()
				_, err := f.s.Submit(bg, "req-1", f.w, f.rail.send)
				require.ErrorIs(t, err, submissions.ErrOutcomeNotRecorded)
				require.ErrorIs(t, err, errInjected)
			}()
			require.True(t, st.abandoned, "the ledger abandoned the send")
			requireRefusal(t, f.s.Release(bg, "req-1"), submissions.ErrIdempotencyConflict)
			res := f.s.Admin().Release(bg, admin.Target{Key: "req-1", Force: true})
			require.Equal(t, admin.RuleAnswered, res.Rule, res.Message)
			_, err := f.s.Submit(bg, "req-2", f.w, f.rail.send)
			requireConflict(t, err, "req-1")
			f.rail.requireSends(t, 1)
		})
	}
}

// failingSettle is a store whose Settle fails, or panics, having recorded
// nothing, and which runs during as the ledger abandons the send (as an
// Abandoner, and an Answerer when the store is one), before it passes the
// call on.
type failingSettle struct {
	driver.Store[Withdrawal]
	panics    bool
	during    func()
	abandoned bool
}

// Settle implements driver.Store.
func (s *failingSettle) Settle(context.Context, string, string, driver.Token, Withdrawal) (driver.Record[Withdrawal], bool, error) {
	if s.panics {
		panic(errPanic)
	}
	return driver.Record[Withdrawal]{}, false, errInjected
}

// Abandon implements driver.Abandoner.
func (s *failingSettle) Abandon(ctx context.Context, tenant, key string, token driver.Token) error {
	s.abandoning()
	if a, ok := s.Store.(driver.Abandoner); ok {
		return a.Abandon(ctx, tenant, key, token)
	}
	return nil
}

// AbandonAnswered implements driver.Answerer.
func (s *failingSettle) AbandonAnswered(ctx context.Context, tenant, key string, token driver.Token, answer *Withdrawal) error {
	s.abandoning()
	switch a := s.Store.(type) {
	case driver.Answerer[Withdrawal]:
		return a.AbandonAnswered(ctx, tenant, key, token, answer)
	case driver.Abandoner:
		return a.Abandon(ctx, tenant, key, token)
	}
	return nil
}

func (s *failingSettle) abandoning() {
	if !s.abandoned {
		s.abandoned = true
		s.during()
	}
}

// The caller's ctx ends while the store claims: the claim the store made
// all the same is released, send is not called, and the caller is told so
// (ErrNotSent); no claim stands behind an error that says this call sent
// nothing.
func testAClaimMadeAsTheCallerLeftIsReleased(t *testing.T, newStore Factory) {
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	st := &leavesAsItClaims{Store: newStore(t), leave: cancel}
	f := setUpOn(t, st)
	ev := &events{}
	s := submissions.NewWithStore(f.store, submissions.WithLogger(quiet), submissions.WithObserver(ev))
	_, err := s.Submit(ctx, "req-1", f.w, f.rail.send)
	requireRefusal(t, err, submissions.ErrNotSent)
	require.ErrorIs(t, err, context.Canceled)
	require.Contains(t, err.Error(), "claim released")
	f.rail.requireSends(t, 0)
	assert.Equal(t, 1, ev.count(observe.EventClaimed, "", "req-1"), "a claim, and its end: a gauge of sends in progress stays whole")
	assert.Equal(t, 1, ev.count(observe.EventNotSent, "", "req-1"))
	requireOutcome(t, f.s, "req-1", Withdrawal{}, false)
	requireHolder(t, f.s, "w-1", "")
	_, err = f.s.Submit(bg, "req-2", f.w, f.rail.send)
	require.NoError(t, err, "another key sends the withdrawal")
	f.rail.requireSends(t, 1)

	// The store panics as the claim is released: the claim is abandoned,
	// known to have ended, and released without force.
	ctx, cancel = context.WithCancel(bg)
	defer cancel()
	st.leave, st.panics = cancel, true
	w2 := newWithdrawal("w-2")
	require.PanicsWithValue(t, errPanic, func() { _, _ = s.Submit(ctx, "req-3", w2, f.rail.send) })
	f.rail.requireSends(t, 1)
	assert.Equal(t, 2, ev.count(observe.EventNotSent, "", "req-3")+ev.count(observe.EventNotSent, "", "req-1"), "every claim not sent ends, for the gauges")
	st.panics = false
	require.NoError(t, s.Release(bg, "req-3"), "a claim whose release panicked is abandoned, and released without force")
	requireHolder(t, s, "w-2", "")
}

// leavesAsItClaims is a store whose Claim claims, and then ends its
// caller's ctx (leave) as it returns; with panics, its Release panics.
type leavesAsItClaims struct {
	driver.Store[Withdrawal]
	leave  func()
	panics bool
}

// Claim implements driver.Store.
func (s *leavesAsItClaims) Claim(ctx context.Context, tenant, key string, fp driver.Fingerprint, outcome *Withdrawal) (driver.Record[Withdrawal], bool, error) {
	defer s.leave()
	return s.Store.Claim(ctx, tenant, key, fp, outcome)
}

// Release implements driver.Store.
func (s *leavesAsItClaims) Release(ctx context.Context, tenant, key string, token driver.Token) (driver.Record[Withdrawal], bool, error) {
	if s.panics {
		panic(errPanic)
	}
	return s.Store.Release(ctx, tenant, key, token)
}

// The service's rule for an outcome (WithOutcomeCheck) holds at the
// service's own Resolve as at its Admin's, which adds rules of its own
// after it; the rail's answers are not checked.
func testTheServicesOutcomeRuleHoldsAtEveryDoor(t *testing.T, newStore Factory) {
	f := setUp(t, newStore)
	errNoTx := errors.New("sent without its transaction")
	s := submissions.NewWithStore(f.store, submissions.WithLogger(quiet), submissions.WithOutcomeCheck(func(w Withdrawal) error {
		if w.State == "sent" && w.TxHash == "" {
			return errNoTx
		}
		return nil
	}))
	_, err := s.Submit(bg, "req-1", f.w, failing)
	require.ErrorIs(t, err, submissions.ErrOutcomeUnknown)
	bare := sentTx(f.w, "")

	err = s.Resolve(bg, "req-1", bare)
	requireRefusal(t, err, admin.ErrInvalidOutcome)
	require.ErrorIs(t, err, errNoTx)
	res := s.Admin().Resolve(bg, admin.Target{Key: "req-1", Force: true}, bare)
	require.Equal(t, admin.RuleInvalidOutcome, res.Rule, res.Message)
	require.Equal(t, res.Err.Error(), err.Error(), "the same words at both doors")
	require.Contains(t, res.Message, "sent without its transaction")
	w2 := newWithdrawal("w-2")
	requireRefusal(t, s.Resolve(bg, "req-2", sentTx(w2, "")), admin.ErrInvalidOutcome)
	requireOutcome(t, s, "req-2", Withdrawal{}, false)

	errOdd := errors.New("odd transaction")
	strict := s.Admin().WithOutcomeCheck(func(w Withdrawal) error {
		if w.TxHash == "0xodd" {
			return errOdd
		}
		return nil
	})
	res = strict.Resolve(bg, admin.Target{Key: "req-1", Force: true}, bare)
	require.ErrorIs(t, res.Err, errNoTx, "the ledger's rule, first")
	res = strict.Resolve(bg, admin.Target{Key: "req-1", Force: true}, sentTx(f.w, "0xodd"))
	require.ErrorIs(t, res.Err, errOdd, "and the Admin's")
	requireOutcome(t, s, "req-1", Withdrawal{}, false)

	require.NoError(t, s.Resolve(bg, "req-1", sentTx(f.w, "0xok")))
	requireOutcome(t, s, "req-1", sentTx(f.w, "0xok"), true)
	out, err := s.Submit(bg, "req-3", newWithdrawal("w-3"), func(_ context.Context, w Withdrawal) (Withdrawal, error) { return sentTx(w, ""), nil })
	require.NoError(t, err, "the rail's answer is the rail's")
	require.Equal(t, sentTx(newWithdrawal("w-3"), ""), out)

	require.PanicsWithValue(t, "submissions: WithOutcomeCheck of func(ledgertest.otherOutcome) error for a ledger of storetest.Withdrawal outcomes", func() {
		submissions.NewWithStore(f.store, submissions.WithOutcomeCheck(func(otherOutcome) error { return nil }))
	})
}

// otherOutcome is an outcome type that is not Withdrawal.
type otherOutcome struct{ Withdrawal }
