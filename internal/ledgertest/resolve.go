package ledgertest

import (
	"context"
	"fmt"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemledger/submissions"
	"github.com/idemledger/submissions/admin"
)

// Resolve: "I looked at the rail, here is what happened".
var resolveTests = []test{
	{"ResolveClosesAnInFlightKey", testResolveClosesAnInFlightKey},
	{"ResolveOfAnotherWithdrawalOnAnInFlightKeyIsRefused", testResolveOfAnotherWithdrawalOnAnInFlightKeyIsRefused},
	{"ResolveOfASentKey", testResolveOfASentKey},
	{"ResolveDuringTheSend", testResolveDuringTheSend},
	{"ResolveUnderAFreshKey", testResolveUnderAFreshKey},
	{"SameOutcomeIsTheSameWhateverItsBytes", testSameOutcomeIsTheSameWhateverItsBytes},
	{"AnOutcomeNotGivenBackExactlyIsNotRecorded", testAnOutcomeNotGivenBackExactlyIsNotRecorded},
}

func testResolveClosesAnInFlightKey(t *testing.T, newStore Factory) {
	f := setUp(t, newStore)
	strand(t, f.s, "req-1", f.w)

	found := sentTx(f.w, "0xfound")
	found.Amount, found.Currency = "25", "usdc" // the same withdrawal, written another way
	require.NoError(t, f.s.Resolve(bg, " req-1 ", found))
	resolved := f.logs.at(slog.LevelInfo, "req-1", "w-1")
	require.Len(t, resolved, 1, "Info entries after Resolve")
	require.Equal(t, "submission resolved", resolved[0].msg)
	got, err := f.s.Submit(bg, "req-1", f.w, f.rail.send)
	require.NoError(t, err)
	require.Equal(t, found, got, "Submit after Resolve replays the resolved outcome")
	f.rail.requireSends(t, 0)
	requireOutcome(t, f.s, "req-1", found, true)

	require.NoError(t, f.s.Resolve(bg, "req-1", found), "the same outcome again")
	requireRefusal(t, f.s.Resolve(bg, "req-1", sentTx(f.w, "0xother")), submissions.ErrIdempotencyConflict)
	requireRefusal(t, f.s.Resolve(bg, "req-1", sentTx(newWithdrawal("w-2"), "0xfound")), submissions.ErrIdempotencyConflict)
	requireOutcome(t, f.s, "req-1", found, true)
	requireHolder(t, f.s, "w-2", "")
}

func testResolveOfAnotherWithdrawalOnAnInFlightKeyIsRefused(t *testing.T, newStore Factory) {
	f := setUp(t, newStore)
	strand(t, f.s, "req-1", f.w)
	requireRefusal(t, f.s.Resolve(bg, "req-1", newWithdrawal("w-2")), submissions.ErrIdempotencyConflict)
	requireOutcome(t, f.s, "req-1", Withdrawal{}, false)
	requireHolder(t, f.s, "w-2", "")
	requireRefusal(t, f.s.Resolve(bg, "req-1", Withdrawal{ID: "w-1"}), submissions.ErrInvalidFingerprint)
	requireKeptClaim(t, f.s, "req-1", f.w)
}

func testResolveOfASentKey(t *testing.T, newStore Factory) {
	f := setUp(t, newStore)
	out, err := f.s.Submit(bg, "req-1", f.w, f.rail.send)
	require.NoError(t, err)
	require.NoError(t, f.s.Resolve(bg, "req-1", out), "Resolve with the recorded outcome")
	requireRefusal(t, f.s.Resolve(bg, "req-1", f.w), submissions.ErrIdempotencyConflict)
	requireOutcome(t, f.s, "req-1", out, true)
}

// testResolveDuringTheSend: an operator may resolve a key while this ledger
// still runs its send; the resolved outcome stands, and a rail that answers
// otherwise has its answer returned, unrecorded.
func testResolveDuringTheSend(t *testing.T, newStore Factory) {
	resolveDuringTheSend(t, newStore, func(f *fixture) *submissions.Submissions[Withdrawal] { return f.s })
}

// resolveDuringTheSend runs the send of a key that the ledger by returns
// resolves, and checks what stands, when the rail agrees and when it does
// not.
func resolveDuringTheSend(t *testing.T, newStore Factory, by func(*fixture) *submissions.Submissions[Withdrawal]) {
	for _, agree := range []bool{true, false} {
		t.Run(fmt.Sprint("the rail agrees ", agree), func(t *testing.T) {
			f := setUp(t, newStore)
			resolver := by(f)
			resolved := sentTx(f.w, "0xfound")
			out, err := f.s.Submit(bg, "req-1", f.w, func(ctx context.Context, req Withdrawal) (Withdrawal, error) {
				require.NoError(t, resolver.Resolve(ctx, "req-1", resolved), "Resolve during the send")
				if agree {
					return resolved, nil
				}
				return sentTx(req, "0xrail"), nil
			})
			if agree {
				require.NoError(t, err)
				require.Equal(t, resolved, out)
			} else {
				require.ErrorIs(t, err, submissions.ErrOutcomeNotRecorded)
				require.NotErrorIs(t, err, submissions.ErrIdempotencyConflict)
				require.Equal(t, sentTx(f.w, "0xrail"), out, "the rail's answer comes back")
			}
			requireOutcome(t, f.s, "req-1", resolved, true)
		})
	}
}

func testResolveUnderAFreshKey(t *testing.T, newStore Factory) {
	f := setUp(t, newStore)
	strand(t, f.s, "req-1", f.w)

	// A callback under a fresh key cannot write onto a held withdrawal.
	requireConflict(t, f.s.Resolve(bg, "callback-1", sentTx(f.w, "0xforged")), "req-1")
	requireOutcome(t, f.s, "callback-1", Withdrawal{}, false)
	requireKeptClaim(t, f.s, "req-1", f.w)

	// On a free withdrawal it records the key, with the outcome and the claim.
	w2 := newWithdrawal("w-2")
	require.NoError(t, f.s.Resolve(bg, "callback-2", sentTx(w2, "0xseen")))
	requireHolder(t, f.s, "w-2", "callback-2")
	got, err := f.s.Submit(bg, "callback-2", w2, f.rail.send)
	require.NoError(t, err)
	require.Equal(t, sentTx(w2, "0xseen"), got)
	_, err = f.s.Submit(bg, "req-9", w2, f.rail.send)
	requireConflict(t, err, "callback-2")
	f.rail.requireSends(t, 0)
}

// testSameOutcomeIsTheSameWhateverItsBytes: "the same outcome" is one
// definition on every store (equal JSON values of the encoding/json
// encodings), for outcomes holding the characters that JSON escapes too.
func testSameOutcomeIsTheSameWhateverItsBytes(t *testing.T, newStore Factory) {
	f := setUp(t, newStore)
	for i, tx := range []string{"0x\xef\xbf\xbd", "0x\u2028<&>", "0x\\ufffd", "0x\x00\x7f"} {
		key := "req-" + string(rune('a'+i))
		w := newWithdrawal("w-" + key)
		outcome := sentTx(w, tx)
		require.NoError(t, f.s.Resolve(bg, key, outcome), "Resolve with TxHash %q", tx)
		require.NoError(t, f.s.Resolve(bg, key, outcome), "the same outcome again, TxHash %q", tx)
		out, err := f.s.Submit(bg, key, w, f.rail.send)
		require.NoError(t, err)
		require.NoError(t, f.s.Resolve(bg, key, out), "the outcome as the store gives it back, TxHash %q", tx)
		requireRefusal(t, f.s.Resolve(bg, key, sentTx(w, tx+"!")), submissions.ErrIdempotencyConflict)
	}
	f.rail.requireSends(t, 0)
}

// testAnOutcomeNotGivenBackExactlyIsNotRecorded: an answer holding text that
// is not valid UTF-8, which no store can give back as it is, is not
// recorded by any store: from the rail, the caller gets it with
// ErrOutcomeNotRecorded and the key waits for an operator; from Resolve,
// nothing is written.
func testAnOutcomeNotGivenBackExactlyIsNotRecorded(t *testing.T, newStore Factory) {
	f := setUp(t, newStore)
	bad := sentTx(f.w, "0x\xff\xfe")
	out, err := f.s.Submit(bg, "req-1", f.w, func(context.Context, Withdrawal) (Withdrawal, error) { return bad, nil })
	require.ErrorIs(t, err, submissions.ErrOutcomeNotRecorded)
	require.ErrorContains(t, err, "TxHash holds text that is not valid UTF-8")
	require.Equal(t, bad, out, "the rail's answer is the caller's")
	requireAwaitingOperator(t, f.s, "req-1", f.w)

	w2 := newWithdrawal("w-2")
	err = f.s.Resolve(bg, "req-2", sentTx(w2, "0x\xff"))
	require.ErrorIs(t, err, submissions.ErrOutcomeNotRecorded)
	requireOutcome(t, f.s, "req-2", Withdrawal{}, false)
	requireHolder(t, f.s, "w-2", "")
	err = f.s.Resolve(bg, "req-1", sentTx(f.w, "0x\xff"))
	require.ErrorIs(t, err, submissions.ErrOutcomeNotRecorded)
	requireAwaitingOperator(t, f.s, "req-1", f.w)

	// The operator's door refuses it, saying where.
	res := f.s.Admin().Resolve(bg, admin.Target{Key: "req-1", Force: true}, sentTx(f.w, "0x\xfe"))
	assert.Equal(t, admin.Refused, res.Decision)
	assert.Equal(t, admin.RuleInvalidOutcome, res.Rule)
	assert.ErrorIs(t, res.Err, admin.ErrInvalidOutcome)
	assert.Equal(t, "the outcome is not valid: the outcome's TxHash holds text that is not valid UTF-8: nothing changed", res.Message)
	requireAwaitingOperator(t, f.s, "req-1", f.w)

	found := sentTx(f.w, "0xfe")
	require.NoError(t, f.s.Resolve(bg, "req-1", found), "the operator writes it as the rail shows it")
	requireOutcome(t, f.s, "req-1", found, true)
}
