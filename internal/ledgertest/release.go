package ledgertest

import (
	"context"
	"fmt"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemledger/submissions"
)

// Release: "I looked at the rail, nothing was sent".
var releaseTests = []test{
	{"ReleaseFreesTheKeyAndTheWithdrawal", testReleaseFreesTheKeyAndTheWithdrawal},
	{"ReleasedKeyMaySendAgain", testReleasedKeyMaySendAgain},
	{"ReleaseOfAKeyWithAnOutcomeIsRefused", testReleaseOfAKeyWithAnOutcomeIsRefused},
	{"ReleaseIsRefusedWhileTheSendRuns", testReleaseIsRefusedWhileTheSendRuns},
	{"ReleaseOfAnUnknownKeyDoesNothing", testReleaseOfAnUnknownKeyDoesNothing},
	{"LateReleaseDoesNotEvictAMovedClaim", testLateReleaseDoesNotEvictAMovedClaim},
}

func testReleaseFreesTheKeyAndTheWithdrawal(t *testing.T, newStore Factory) {
	f := setUp(t, newStore)
	strand(t, f.s, "req-1", f.w)
	require.NoError(t, f.s.Release(bg, " req-1"))
	released := f.logs.at(slog.LevelInfo, "req-1", "w-1")
	require.Len(t, released, 1, "Info entries after Release")
	require.Equal(t, "submission released", released[0].msg)
	requireHolder(t, f.s, "w-1", "")
	requireOutcome(t, f.s, "req-1", Withdrawal{}, false)
	// Another key may now send it, once.
	_, err := f.s.Submit(bg, "req-2", f.w, f.rail.send)
	require.NoError(t, err, "Submit under another key after Release")
	_, err = f.s.Submit(bg, "req-1", f.w, f.rail.send)
	requireConflict(t, err, "req-2")
	f.rail.requireSends(t, 1)
}

func testReleasedKeyMaySendAgain(t *testing.T, newStore Factory) {
	f := setUp(t, newStore)
	strand(t, f.s, "req-1", f.w)
	require.NoError(t, f.s.Release(bg, "req-1"))
	_, err := f.s.Submit(bg, "req-1", f.w, f.rail.send)
	require.NoError(t, err, "Submit after Release")
	f.rail.requireSends(t, 1)
}

func testReleaseOfAKeyWithAnOutcomeIsRefused(t *testing.T, newStore Factory) {
	f := setUp(t, newStore)
	out, err := f.s.Submit(bg, "req-1", f.w, f.rail.send)
	require.NoError(t, err)
	requireRefusal(t, f.s.Release(bg, "req-1"), submissions.ErrIdempotencyConflict)
	requireOutcome(t, f.s, "req-1", out, true)
	requireHolder(t, f.s, "w-1", "req-1")

	// A resolved key is as closed as a sent one.
	w2 := newWithdrawal("w-2")
	strand(t, f.s, "req-2", w2)
	require.NoError(t, f.s.Resolve(bg, "req-2", w2))
	requireRefusal(t, f.s.Release(bg, "req-2"), submissions.ErrIdempotencyConflict)
	requireHolder(t, f.s, "w-2", "req-2")
}

func testReleaseIsRefusedWhileTheSendRuns(t *testing.T, newStore Factory) {
	for _, fail := range []bool{false, true} {
		t.Run(fmt.Sprint("send fails ", fail), func(t *testing.T) {
			f := setUp(t, newStore)
			started, finish := make(chan struct{}), make(chan struct{})
			done := make(chan error)
			send := f.rail.blocking(started, finish)
			if fail {
				send = func(ctx context.Context, w Withdrawal) (Withdrawal, error) {
					close(started)
					<-finish
					return Withdrawal{}, errRail
				}
			}
			go func() {
				_, err := f.s.Submit(bg, "req-1", f.w, send)
				done <- err
			}()
			<-started
			requireRefusal(t, f.s.Release(bg, "req-1"), submissions.ErrSubmissionInFlight)
			requireHolder(t, f.s, "w-1", "req-1")
			close(finish)
			err := <-done
			if fail {
				require.ErrorIs(t, err, errRail)
				require.NoError(t, f.s.Release(bg, "req-1"), "Release once the send has failed")
				requireHolder(t, f.s, "w-1", "")
				return
			}
			require.NoError(t, err)
			requireRefusal(t, f.s.Release(bg, "req-1"), submissions.ErrIdempotencyConflict)
			requireHolder(t, f.s, "w-1", "req-1")
		})
	}
}

func testReleaseOfAnUnknownKeyDoesNothing(t *testing.T, newStore Factory) {
	f := setUp(t, newStore)
	_, err := f.s.Submit(bg, "req-1", f.w, nil)
	require.NoError(t, err)
	require.NoError(t, f.s.Release(bg, "req-404"), "Release of an unknown key")
	requireHolder(t, f.s, "w-1", "req-1")
}

func testLateReleaseDoesNotEvictAMovedClaim(t *testing.T, newStore Factory) {
	f := setUp(t, newStore)
	strand(t, f.s, "req-1", f.w)
	require.NoError(t, f.s.Release(bg, "req-1"))
	strand(t, f.s, "req-2", f.w)
	// The operator's second, late release of req-1 must not free req-2's
	// claim: a release names a key, never the withdrawal.
	require.NoError(t, f.s.Release(bg, "req-1"), "late Release")
	requireKeptClaim(t, f.s, "req-2", f.w)
}
