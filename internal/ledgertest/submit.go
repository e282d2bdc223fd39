package ledgertest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemledger/submissions"
	"github.com/idemledger/submissions/observe"
)

// Submit: claim, send outside any lock, record; replay; refuse; and a send
// that ends without an answer, or with one that cannot be recorded, keeps
// the claim.
var submitTests = []test{
	{"FreshSubmitClaimsThenSendsThenRecords", testFreshSubmitClaimsThenSendsThenRecords},
	{"NilSendRecordsTheRequest", testNilSendRecordsTheRequest},
	{"ReplayReturnsTheStoredOutcomeWithoutSending", testReplayReturnsTheStoredOutcomeWithoutSending},
	{"KeyReusedForAnotherWithdrawalIsAConflict", testKeyReusedForAnotherWithdrawalIsAConflict},
	{"KeyWithoutOutcomeIsInFlight", testKeyWithoutOutcomeIsInFlight},
	{"SecondKeyForAClaimedWithdrawalIsRefused", testSecondKeyForAClaimedWithdrawalIsRefused},
	{"SecondKeyIsRefusedWhileTheFirstIsInFlight", testSecondKeyIsRefusedWhileTheFirstIsInFlight},
	{"FailedSendIsOutcomeUnknown", testFailedSendIsOutcomeUnknown},
	{"AnswerWithAnErrorIsOutcomeUnknown", testAnswerWithAnErrorIsOutcomeUnknown},
	{"PanickingSendKeepsTheKeyClaimedAndPanicsOn", testPanickingSendKeepsTheKeyClaimedAndPanicsOn},
	{"SendWhoseContextEndsIsOutcomeUnknown", testSendWhoseContextEndsIsOutcomeUnknown},
	{"AnswerAfterTheContextEndedIsRecorded", testAnswerAfterTheContextEndedIsRecorded},
	{"AnswerForAnotherWithdrawalIsNotRecorded", testAnswerForAnotherWithdrawalIsNotRecorded},
	{"DoneContextClaimsNothing", testDoneContextClaimsNothing},
	{"UnrecordedAnswerReachesTheObserver", testUnrecordedAnswerReachesTheObserver},
}

func testFreshSubmitClaimsThenSendsThenRecords(t *testing.T, newStore Factory) {
	f := setUp(t, newStore)
	type ctxKey struct{}
	ctx := context.WithValue(bg, ctxKey{}, "mine")
	calls := 0
	out, err := f.s.Submit(ctx, "req-1", f.w, func(sctx context.Context, req Withdrawal) (Withdrawal, error) {
		calls++
		assert.Equal(t, "mine", sctx.Value(ctxKey{}), "send gets the caller's context")
		assert.Equal(t, f.w, req, "send gets the request")
		// Both indexes are claimed before send runs.
		requireHolder(t, f.s, "w-1", "req-1")
		requireOutcome(t, f.s, "req-1", Withdrawal{}, false)
		_, err := f.s.Submit(bg, "req-1", f.w, nil)
		requireRefusal(t, err, submissions.ErrSubmissionInFlight)
		_, err = f.s.Submit(bg, "req-2", f.w, nil)
		requireConflict(t, err, "req-1")
		// send runs outside any lock: the ledger serves other withdrawals meanwhile.
		_, err = f.s.Submit(bg, "req-3", newWithdrawal("w-3"), nil)
		assert.NoError(t, err, "Submit of another withdrawal during send")
		return sentTx(req, "0xtx"), nil
	})
	require.NoError(t, err)
	require.Equal(t, 1, calls, "send calls")
	require.Equal(t, sentTx(f.w, "0xtx"), out)
	requireOutcome(t, f.s, "req-1", out, true)
	requireHolder(t, f.s, "w-1", "req-1")
}

func testNilSendRecordsTheRequest(t *testing.T, newStore Factory) {
	f := setUp(t, newStore)
	out, err := f.s.Submit(bg, "req-1", f.w, nil)
	require.NoError(t, err)
	require.Equal(t, f.w, out)
	requireOutcome(t, f.s, "req-1", f.w, true)
	requireHolder(t, f.s, "w-1", "req-1")
}

func testReplayReturnsTheStoredOutcomeWithoutSending(t *testing.T, newStore Factory) {
	f := setUp(t, newStore)
	first, err := f.s.Submit(bg, "req-1", f.w, f.rail.send)
	require.NoError(t, err)
	require.Empty(t, f.logs.at(slog.LevelDebug, "req-1", "w-1"), "a fresh submit logs no replay")
	respelled := f.w
	respelled.Amount, respelled.Currency = "25", "usdc"
	for _, w := range []Withdrawal{f.w, respelled, f.w} {
		got, err := f.s.Submit(bg, "req-1", w, func(context.Context, Withdrawal) (Withdrawal, error) {
			t.Error("send called on a replay")
			return Withdrawal{}, nil
		})
		require.NoError(t, err)
		require.Equal(t, first, got)
	}
	f.rail.requireSends(t, 1)
	replays := f.logs.at(slog.LevelDebug, "req-1", "w-1")
	require.Len(t, replays, 3, "replays logged at Debug with key and withdrawal")
	require.Empty(t, f.logs.at(slog.LevelInfo, "req-1", "w-1"), "replays are not logged at Info")
	assert.Equal(t, "submission replayed", replays[0].msg)
}

func testKeyReusedForAnotherWithdrawalIsAConflict(t *testing.T, newStore Factory) {
	for _, inFlight := range []bool{false, true} {
		t.Run(fmt.Sprint("in flight ", inFlight), func(t *testing.T) {
			f := setUp(t, newStore)
			if inFlight {
				strand(t, f.s, "req-1", f.w)
			} else {
				_, err := f.s.Submit(bg, "req-1", f.w, f.rail.send)
				require.NoError(t, err)
			}
			_, err := f.s.Submit(bg, "req-1", newWithdrawal("w-2"), f.rail.send)
			requireRefusal(t, err, submissions.ErrIdempotencyConflict)
			require.Contains(t, err.Error(), "request key req-1 belongs to another withdrawal")
			var ce *submissions.ConflictError
			require.False(t, errors.As(err, &ce), "a reused key names no withdrawal holder: %v", err)
			requireHolder(t, f.s, "w-2", "")
			f.rail.requireSends(t, map[bool]int64{false: 1, true: 0}[inFlight])
		})
	}
}

func testKeyWithoutOutcomeIsInFlight(t *testing.T, newStore Factory) {
	f := setUp(t, newStore)
	started, finish := make(chan struct{}), make(chan struct{})
	done := make(chan error)
	go func() {
		_, err := f.s.Submit(bg, "req-1", f.w, f.rail.blocking(started, finish))
		done <- err
	}()
	<-started
	_, err := f.s.Submit(bg, "req-1", f.w, f.rail.send)
	requireRefusal(t, err, submissions.ErrSubmissionInFlight)
	require.NotErrorIs(t, err, submissions.ErrAbandoned, "its send is running")
	require.Contains(t, err.Error(), "req-1")
	close(finish)
	require.NoError(t, <-done)
	f.rail.requireSends(t, 1)
}

func testSecondKeyForAClaimedWithdrawalIsRefused(t *testing.T, newStore Factory) {
	f := setUp(t, newStore)
	first, err := f.s.Submit(bg, "req-1", f.w, f.rail.send)
	require.NoError(t, err)
	_, err = f.s.Submit(bg, "req-2", f.w, f.rail.send)
	ce := requireConflict(t, err, "req-1")
	require.Equal(t, submissions.ConflictError{Holder: "req-1", Key: "req-2", WithdrawalID: "w-1"}, *ce)
	requireRefusal(t, err, submissions.ErrIdempotencyConflict)
	f.rail.requireSends(t, 1)
	// The refusal tells the loser where to look.
	requireOutcome(t, f.s, ce.Holder, first, true)
	// The loser left no trace: its key is unknown and free for other work.
	requireOutcome(t, f.s, "req-2", Withdrawal{}, false)
	require.NoError(t, f.s.Release(bg, "req-2"), "Release of the loser's key")
	requireHolder(t, f.s, "w-1", "req-1")
	_, err = f.s.Submit(bg, "req-2", newWithdrawal("w-2"), f.rail.send)
	require.NoError(t, err, "Submit of another withdrawal under the loser's key")
	f.rail.requireSends(t, 2)
}

func testSecondKeyIsRefusedWhileTheFirstIsInFlight(t *testing.T, newStore Factory) {
	f := setUp(t, newStore)
	strand(t, f.s, "req-1", f.w)
	_, err := f.s.Submit(bg, "req-2", f.w, f.rail.send)
	requireConflict(t, err, "req-1")
	f.rail.requireSends(t, 0)
}

func testFailedSendIsOutcomeUnknown(t *testing.T, newStore Factory) {
	f := setUp(t, newStore)
	out, err := f.s.Submit(bg, "req-1", f.w, failing)
	require.ErrorIs(t, err, submissions.ErrOutcomeUnknown)
	require.ErrorIs(t, err, errRail, "the error wraps the send's")
	require.NotErrorIs(t, err, submissions.ErrOutcomeNotRecorded)
	require.Zero(t, out)
	requireAwaitingOperator(t, f.s, "req-1", f.w)
	f.logs.requireWarned(t, "req-1", "w-1")
}

func testAnswerWithAnErrorIsOutcomeUnknown(t *testing.T, newStore Factory) {
	f := setUp(t, newStore)
	out, err := f.s.Submit(bg, "req-1", f.w, func(_ context.Context, w Withdrawal) (Withdrawal, error) {
		return sentTx(w, "0xmaybe"), errRail
	})
	require.ErrorIs(t, err, submissions.ErrOutcomeUnknown)
	require.ErrorIs(t, err, errRail)
	require.Zero(t, out, "an answer that comes with an error is no answer")
	requireKeptClaim(t, f.s, "req-1", f.w)
}

type panicValue struct{ why string }

func testPanickingSendKeepsTheKeyClaimedAndPanicsOn(t *testing.T, newStore Factory) {
	f := setUp(t, newStore)
	want := &panicValue{"rail client bug"}
	require.PanicsWithValue(t, want, func() {
		_, _ = f.s.Submit(bg, "req-1", f.w, func(context.Context, Withdrawal) (Withdrawal, error) { panic(want) })
	}, "the send's own panic value goes on")
	requireKeptClaim(t, f.s, "req-1", f.w)
	f.logs.requireWarned(t, "req-1", "w-1")
	// The ledger no longer runs that send, so the operator may release it.
	require.NoError(t, f.s.Release(bg, "req-1"), "Release after the panic")
}

func testSendWhoseContextEndsIsOutcomeUnknown(t *testing.T, newStore Factory) {
	f := setUp(t, newStore)
	ctx, cancel := context.WithCancelCause(bg)
	timeout := errors.New("the caller's deadline passed")
	_, err := f.s.Submit(ctx, "req-1", f.w, func(ctx context.Context, _ Withdrawal) (Withdrawal, error) {
		cancel(timeout) // the caller gives up while the rail call waits
		<-ctx.Done()
		return Withdrawal{}, fmt.Errorf("rail call: %w", context.Cause(ctx))
	})
	require.ErrorIs(t, err, submissions.ErrOutcomeUnknown)
	require.ErrorIs(t, err, timeout)
	requireKeptClaim(t, f.s, "req-1", f.w)
}

// testAnswerAfterTheContextEndedIsRecorded: the rail answered, so money
// moved; the answer is recorded although the caller gave up meanwhile, and
// a retry replays it.
func testAnswerAfterTheContextEndedIsRecorded(t *testing.T, newStore Factory) {
	f := setUp(t, newStore)
	ctx, cancel := context.WithCancel(bg)
	out, err := f.s.Submit(ctx, "req-1", f.w, func(ctx context.Context, req Withdrawal) (Withdrawal, error) {
		cancel() // the caller gave up while the rail was still working
		return f.rail.send(ctx, req)
	})
	require.NoError(t, err, "an answer after the context ended")
	require.Equal(t, sentTx(f.w, "0xtx-w-1"), out, "the rail's answer comes back, recorded")
	requireOutcome(t, f.s, "req-1", out, true)
	requireRefusal(t, f.s.Release(bg, "req-1"), submissions.ErrIdempotencyConflict)
	again, err := f.s.Submit(bg, "req-1", f.w, f.rail.send)
	require.NoError(t, err)
	require.Equal(t, out, again)
	f.rail.requireSends(t, 1)
}

// testAnswerForAnotherWithdrawalIsNotRecorded: the rail answers, so money
// may have moved; an answer of another withdrawal is returned, not recorded,
// with the fields that differ named, and never as the caller's conflict.
func testAnswerForAnotherWithdrawalIsNotRecorded(t *testing.T, newStore Factory) {
	for _, c := range []struct {
		name, fields string
		answer       Withdrawal
		late         bool
		resolve      error // what Resolve with the answer returns
	}{
		{"another amount", "Amount", Withdrawal{ID: "w-1", Amount: "26", Currency: "USDC", Dest: "0xabc", TxHash: "0xa"}, false, submissions.ErrIdempotencyConflict},
		{"another id and currency", "WithdrawalID, Currency", Withdrawal{ID: "w-2", Amount: "25", Currency: "EUR", Dest: "0xabc", TxHash: "0xb"}, false, submissions.ErrIdempotencyConflict},
		{"not a valid fingerprint", "Destination", Withdrawal{ID: "w-1", Amount: "25", Currency: "USDC", TxHash: "0xc"}, false, submissions.ErrInvalidFingerprint},
		{"another amount, after the context ended", "Amount", Withdrawal{ID: "w-1", Amount: "1", Currency: "USDC", Dest: "0xabc", TxHash: "0xd"}, true, submissions.ErrIdempotencyConflict},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := setUp(t, newStore)
			ctx, cancel := context.WithCancel(bg)
			defer cancel()
			out, err := f.s.Submit(ctx, "req-1", f.w, func(context.Context, Withdrawal) (Withdrawal, error) {
				if c.late {
					cancel()
				}
				return c.answer, nil
			})
			require.ErrorIs(t, err, submissions.ErrOutcomeNotRecorded)
			require.NotErrorIs(t, err, submissions.ErrIdempotencyConflict, "the rail's mismatch is not the caller's conflict")
			require.Contains(t, err.Error(), c.fields, "the error names the fields that differ")
			require.Equal(t, c.answer, out, "the rail's answer comes back")
			requireAwaitingOperator(t, f.s, "req-1", f.w)
			requireHolder(t, f.s, "w-2", "")
			f.logs.requireAnswerLogged(t, slog.LevelError, "req-1", "w-1", c.answer.TxHash)
			// The answer cannot close the key; the operator resolves it with what the rail shows.
			requireRefusal(t, f.s.Resolve(bg, "req-1", c.answer), c.resolve)
			require.NoError(t, f.s.Resolve(bg, "req-1", sentTx(f.w, "0xfound")))
		})
	}
}

func testDoneContextClaimsNothing(t *testing.T, newStore Factory) {
	f := setUp(t, newStore)
	ctx, cancel := context.WithCancel(bg)
	cancel()
	_, err := f.s.Submit(ctx, "req-1", f.w, f.rail.send)
	require.ErrorIs(t, err, context.Canceled)
	require.NotErrorIs(t, err, submissions.ErrStoreFailed, "ctx.Err() alone: done before the claim")
	require.ErrorIs(t, f.s.Resolve(ctx, "req-1", f.w), context.Canceled)
	require.ErrorIs(t, f.s.Release(ctx, "req-1"), context.Canceled)
	_, _, err = f.s.Outcome(ctx, "req-1")
	require.ErrorIs(t, err, context.Canceled)
	_, _, err = f.s.ClaimedBy(ctx, "w-1")
	require.ErrorIs(t, err, context.Canceled)
	f.rail.requireSends(t, 0)
	requireHolder(t, f.s, "w-1", "")
	requireOutcome(t, f.s, "req-1", Withdrawal{}, false)
	// The key is free: with a live context the first submit sends.
	_, err = f.s.Submit(bg, "req-1", f.w, f.rail.send)
	require.NoError(t, err)
	f.rail.requireSends(t, 1)
}

// An answer that is not recorded is given to the observer with its event,
// whatever the reason: the rail's word is kept somewhere.
func testUnrecordedAnswerReachesTheObserver(t *testing.T, newStore Factory) {
	f := setUp(t, newStore)
	obs := &kindEvents{kind: observe.EventNotRecorded}
	s := submissions.NewWithStore(f.store, submissions.WithLogger(quiet), submissions.WithObserver(obs))
	other := f.elsewhere()
	answer := sentTx(f.w, "0xtx-late")
	_, err := s.Submit(bg, "req-1", f.w, func(ctx context.Context, w Withdrawal) (Withdrawal, error) {
		forceRelease(t, other, "req-1")
		return answer, nil
	})
	require.ErrorIs(t, err, submissions.ErrReleasedMeanwhile)
	obs.mu.Lock()
	defer obs.mu.Unlock()
	require.Len(t, obs.got, 1)
	assert.Equal(t, answer, obs.got[0].Answer, "the rail's answer")
	assert.ErrorIs(t, obs.got[0].Err, submissions.ErrOutcomeNotRecorded)
	assert.Equal(t, "req-1", obs.got[0].Key)
}
