package ledgertest

import (
	"context"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemledger/submissions"
	"github.com/idemledger/submissions/driver"
)

// Claims: the Store's own contract, call by call, and claim tokens: an
// outcome is recorded only on the claim its send ran under.
var claimTests = []test{
	{"StoreClaimsOnceAndRefusesASecondKey", testStoreClaimsOnceAndRefusesASecondKey},
	{"StoreSettlesAndReleasesOnlyTheNamedClaim", testStoreSettlesAndReleasesOnlyTheNamedClaim},
	{"AnswerDoesNotLandOnANewClaimOfTheSameWithdrawal", testAnswerDoesNotLandOnANewClaimOfTheSameWithdrawal},
	{"AnswerDoesNotLandOnAClaimOfAnotherWithdrawal", testAnswerDoesNotLandOnAClaimOfAnotherWithdrawal},
	{"AnswerAfterAReleaseIsNotRecorded", testAnswerAfterAReleaseIsNotRecorded},
	{"AnswerAfterAResolveStandsOnlyIfTheSame", testAnswerAfterAResolveStandsOnlyIfTheSame},
}

// canonical is w-1's fingerprint as the ledger hands it to a store.
var canonical = submissions.Fingerprint{WithdrawalID: "w-1", Amount: "25", Currency: "USDC", Destination: "0xabc"}

// elsewhere returns a ledger on f's store that runs it through the Store
// interface alone, as another instance of the service would, keeping marks
// of its own.
func (f *fixture) elsewhere() *submissions.Submissions[Withdrawal] {
	return submissions.NewWithStore[Withdrawal](struct{ driver.Store[Withdrawal] }{f.store}, submissions.WithLogger(quiet))
}

func testStoreClaimsOnceAndRefusesASecondKey(t *testing.T, newStore Factory) {
	st := newStore(t)
	rec, claimed, err := st.Claim(bg, "", "req-1", canonical, nil)
	require.NoError(t, err)
	require.True(t, claimed)
	require.Equal(t, canonical, rec.Fingerprint)
	require.False(t, rec.Done)
	require.NotZero(t, rec.Token, "a claim has a token")

	again, claimed, err := st.Claim(bg, "", "req-1", submissions.Fingerprint{WithdrawalID: "w-9", Amount: "1", Currency: "EUR", Destination: "x"}, nil)
	require.NoError(t, err)
	require.False(t, claimed, "a key's second claim changes nothing")
	require.Equal(t, rec, again, "and returns the key's record, whatever the fingerprint asked")

	_, claimed, err = st.Claim(bg, "", "req-2", canonical, nil)
	require.False(t, claimed)
	var ce *submissions.ConflictError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, submissions.ConflictError{Holder: "req-1", Key: "req-2", WithdrawalID: "w-1"}, *ce)
	_, found, err := st.Lookup(bg, "", "req-2")
	require.NoError(t, err)
	require.False(t, found, "the loser leaves no trace")

	found2 := sentTx(newWithdrawal("w-2"), "0xfound")
	fp2 := submissions.Fingerprint{WithdrawalID: "w-2", Amount: "25", Currency: "USDC", Destination: "0xabc"}
	rec2, claimed, err := st.Claim(bg, "", "req-3", fp2, &found2)
	require.NoError(t, err)
	require.True(t, claimed)
	require.True(t, rec2.Done, "a claim with an outcome is done")
	require.Equal(t, fp2, rec2.Fingerprint)
	require.Equal(t, found2, rec2.Outcome)
	require.NotEqual(t, rec.Token, rec2.Token)

	looked, found, err := st.Lookup(bg, "", "req-1")
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, rec, looked)
	holder, found, err := st.ClaimedBy(bg, "", "w-1")
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, "req-1", holder)
	_, found, err = st.ClaimedBy(bg, "", "w-404")
	require.NoError(t, err)
	require.False(t, found)
}

func testStoreSettlesAndReleasesOnlyTheNamedClaim(t *testing.T, newStore Factory) {
	st := newStore(t)
	first, _, err := st.Claim(bg, "", "req-1", canonical, nil)
	require.NoError(t, err)
	rec, released, err := st.Release(bg, "", "req-1", first.Token)
	require.NoError(t, err)
	require.True(t, released)
	require.Equal(t, first, rec, "Release returns the released record")
	_, found, err := st.ClaimedBy(bg, "", "w-1")
	require.NoError(t, err)
	require.False(t, found, "the withdrawal's claim goes with its record")

	second, claimed, err := st.Claim(bg, "", "req-1", canonical, nil)
	require.NoError(t, err)
	require.True(t, claimed)
	require.NotEqual(t, first.Token, second.Token, "a claim of a released key is a new claim")

	answer := sentTx(newWithdrawal("w-1"), "0xfirst")
	rec, settled, err := st.Settle(bg, "", "req-1", first.Token, answer)
	require.NoError(t, err)
	require.False(t, settled, "the first claim's answer does not land on the second")
	require.Zero(t, rec)
	rec, released, err = st.Release(bg, "", "req-1", first.Token)
	require.NoError(t, err)
	require.False(t, released, "a release of the first claim does not free the second")
	require.Zero(t, rec)

	answer.TxHash = "0xsecond"
	rec, settled, err = st.Settle(bg, "", "req-1", second.Token, answer)
	require.NoError(t, err)
	require.True(t, settled)
	require.Equal(t, driver.Record[Withdrawal]{Fingerprint: canonical, Outcome: answer, Done: true, Token: second.Token}, rec)

	other := answer
	other.TxHash = "0xother"
	rec, settled, err = st.Settle(bg, "", "req-1", second.Token, other)
	require.NoError(t, err)
	require.False(t, settled, "a done claim keeps its outcome")
	require.Equal(t, answer, rec.Outcome)
	rec, released, err = st.Release(bg, "", "req-1", second.Token)
	require.NoError(t, err)
	require.False(t, released, "a done claim is never released")
	require.Equal(t, answer, rec.Outcome)

	rec, settled, err = st.Settle(bg, "", "req-404", second.Token, answer)
	require.NoError(t, err)
	require.False(t, settled)
	require.Zero(t, rec)
	rec, released, err = st.Release(bg, "", "req-404", second.Token)
	require.NoError(t, err)
	require.False(t, released)
	require.Zero(t, rec)
}

// testAnswerDoesNotLandOnANewClaimOfTheSameWithdrawal: while the key's send
// runs, another instance releases the key (its operator asserts that nothing
// was sent) and the same withdrawal is claimed again under the key. The first
// send's answer comes back unrecorded; the new claim stands.
func testAnswerDoesNotLandOnANewClaimOfTheSameWithdrawal(t *testing.T, newStore Factory) {
	f := setUp(t, newStore)
	elsewhere := f.elsewhere()
	out, err := f.s.Submit(bg, "req-1", f.w, func(ctx context.Context, req Withdrawal) (Withdrawal, error) {
		forceRelease(t, elsewhere, "req-1")
		_, err := elsewhere.Submit(ctx, "req-1", req, failing)
		require.ErrorIs(t, err, submissions.ErrOutcomeUnknown, "the second claim's send")
		return f.rail.send(ctx, req)
	})
	require.ErrorIs(t, err, submissions.ErrOutcomeNotRecorded)
	require.Equal(t, sentTx(f.w, "0xtx-w-1"), out, "the rail's answer comes back")
	require.ErrorIs(t, err, submissions.ErrReleasedMeanwhile)
	requireKeptClaim(t, f.s, "req-1", f.w)
	f.logs.requireAnswerLogged(t, slog.LevelError, "req-1", "w-1", "0xtx-w-1")
}

func testAnswerDoesNotLandOnAClaimOfAnotherWithdrawal(t *testing.T, newStore Factory) {
	f := setUp(t, newStore)
	elsewhere := f.elsewhere()
	w2 := newWithdrawal("w-2")
	out, err := f.s.Submit(bg, "req-1", f.w, func(ctx context.Context, req Withdrawal) (Withdrawal, error) {
		forceRelease(t, elsewhere, "req-1")
		strand(t, elsewhere, "req-1", w2)
		return f.rail.send(ctx, req)
	})
	require.ErrorIs(t, err, submissions.ErrOutcomeNotRecorded)
	require.Equal(t, sentTx(f.w, "0xtx-w-1"), out)
	requireKeptClaim(t, f.s, "req-1", w2)
	requireHolder(t, f.s, "w-1", "")
}

func testAnswerAfterAReleaseIsNotRecorded(t *testing.T, newStore Factory) {
	f := setUp(t, newStore)
	elsewhere := f.elsewhere()
	out, err := f.s.Submit(bg, "req-1", f.w, func(ctx context.Context, req Withdrawal) (Withdrawal, error) {
		forceRelease(t, elsewhere, "req-1")
		return f.rail.send(ctx, req)
	})
	require.ErrorIs(t, err, submissions.ErrOutcomeNotRecorded)
	require.Contains(t, err.Error(), "released")
	require.Equal(t, sentTx(f.w, "0xtx-w-1"), out)
	requireOutcome(t, f.s, "req-1", Withdrawal{}, false)
	requireHolder(t, f.s, "w-1", "")
}

// testAnswerAfterAResolveStandsOnlyIfTheSame: an operator on another
// instance resolves the key while its send runs; the resolved outcome
// stands, and a rail that answers otherwise gets its answer back unrecorded.
func testAnswerAfterAResolveStandsOnlyIfTheSame(t *testing.T, newStore Factory) {
	resolveDuringTheSend(t, newStore, (*fixture).elsewhere)
}
