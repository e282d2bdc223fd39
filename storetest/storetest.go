// Package storetest is the conformance suite every submissions.Store passes:
// the rules of the ledger, run through submissions.NewWithStore, and the
// concurrency tests, with goroutines released together and sends counted.
// A store's test is a few lines:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) submissions.Store[storetest.Withdrawal] {
//			return newEmptyStore(t)
//		})
//	}
package storetest

import (
	"context"
	"log/slog"
	"testing"

	"github.com/idemledger/submissions"
)

// Factory returns a new, empty store. A test calls it for every ledger it
// makes (some make several, and some share one store between two ledgers, as
// two instances of a service share a database). It may register cleanups
// with t.
type Factory func(t *testing.T) submissions.Store[Withdrawal]

// Run runs the suite against the stores newStore makes.
func Run(t *testing.T, newStore Factory) {
	for _, group := range []struct {
		name  string
		tests []test
	}{{"rules", rules}, {"concurrency", concurrency}, {"faults", faults}} {
		t.Run(group.name, func(t *testing.T) {
			for _, tc := range group.tests {
				t.Run(tc.name, func(t *testing.T) { tc.run(t, env{t: t, newStore: newStore}) })
			}
		})
	}
}

type test struct {
	name string
	run  func(*testing.T, env)
}

// env gives a test its ledgers.
type env struct {
	t        *testing.T
	newStore Factory
}

// ledger returns a ledger over a new store, logging into the returned logs.
func (e env) ledger() (*submissions.Submissions[Withdrawal], *logs) {
	l := &logs{}
	return submissions.NewWithStore(e.newStore(e.t), submissions.WithLogger(slog.New(l))), l
}

var (
	bg    = context.Background()
	quiet = slog.New(slog.DiscardHandler)
)

// rules has a test for every rule of the ledger, and for the corners of each.
var rules = []test{
	{"KeyIsTrimmed", testKeyIsTrimmed},
	{"KeyAtLimitIsAccepted", testKeyAtLimitIsAccepted},
	{"InvalidKeysAreRefusedByEveryMethodFirst", testInvalidKeysAreRefusedByEveryMethodFirst},
	{"InvalidFingerprintsAreRefused", testInvalidFingerprintsAreRefused},
	{"EdgeFingerprintsAreAccepted", testEdgeFingerprintsAreAccepted},
	{"FingerprintsCompareByMeaning", testFingerprintsCompareByMeaning},
	{"SmallAmountsCompareNumerically", testSmallAmountsCompareNumerically},
	{"FreshSubmitClaimsThenSendsThenRecords", testFreshSubmitClaimsThenSendsThenRecords},
	{"NilSendRecordsTheRequest", testNilSendRecordsTheRequest},
	{"ReplayReturnsTheStoredOutcomeWithoutSending", testReplayReturnsTheStoredOutcomeWithoutSending},
	{"KeyReusedForAnotherWithdrawalIsAConflict", testKeyReusedForAnotherWithdrawalIsAConflict},
	{"KeyWithoutOutcomeIsInFlight", testKeyWithoutOutcomeIsInFlight},
	{"SecondKeyForAClaimedWithdrawalIsRefused", testSecondKeyForAClaimedWithdrawalIsRefused},
	{"SecondKeyIsRefusedWhileTheFirstIsInFlight", testSecondKeyIsRefusedWhileTheFirstIsInFlight},
	{"FailedSendKeepsTheKeyClaimed", testFailedSendKeepsTheKeyClaimed},
	{"PanickingSendKeepsTheKeyClaimedAndPanicsOn", testPanickingSendKeepsTheKeyClaimedAndPanicsOn},
	{"SendWhoseContextEndsKeepsTheKeyClaimed", testSendWhoseContextEndsKeepsTheKeyClaimed},
	{"AnswerAfterTheContextEndedIsNotTakenAsKnown", testAnswerAfterTheContextEndedIsNotTakenAsKnown},
	{"OutcomeForAnotherWithdrawalKeepsTheKeyClaimed", testOutcomeForAnotherWithdrawalKeepsTheKeyClaimed},
	{"DoneContextClaimsNothing", testDoneContextClaimsNothing},
	{"ResolveClosesAnInFlightKey", testResolveClosesAnInFlightKey},
	{"ResolveOfAnotherWithdrawalOnAnInFlightKeyIsRefused", testResolveOfAnotherWithdrawalOnAnInFlightKeyIsRefused},
	{"ResolveOfASentKey", testResolveOfASentKey},
	{"ResolveDuringTheSend", testResolveDuringTheSend},
	{"ResolveUnderAFreshKey", testResolveUnderAFreshKey},
	{"ReleaseFreesTheKeyAndTheWithdrawal", testReleaseFreesTheKeyAndTheWithdrawal},
	{"ReleasedKeyMaySendAgain", testReleasedKeyMaySendAgain},
	{"ReleaseOfAKeyWithAnOutcomeIsRefused", testReleaseOfAKeyWithAnOutcomeIsRefused},
	{"ReleaseIsRefusedWhileTheSendRuns", testReleaseIsRefusedWhileTheSendRuns},
	{"ReleaseOfAnUnknownKeyDoesNothing", testReleaseOfAnUnknownKeyDoesNothing},
	{"LateReleaseDoesNotEvictAMovedClaim", testLateReleaseDoesNotEvictAMovedClaim},
	{"Reads", testReads},
	{"OutcomeNotRecordedWhenTheStoreFails", testOutcomeNotRecordedWhenTheStoreFails},
	{"OutcomeNotRecordedWhenReleasedMeanwhile", testOutcomeNotRecordedWhenReleasedMeanwhile},
	{"OutcomeNotRecordedOnAnotherClaim", testOutcomeNotRecordedOnAnotherClaim},
	{"ResolvedMeanwhile", testResolvedMeanwhile},
	{"MarkComesBeforeTheClaim", testMarkComesBeforeTheClaim},
	{"ReleaseAfterTheOutcomeIsRecordedIsAConflict", testReleaseAfterTheOutcomeIsRecordedIsAConflict},
}

// concurrency proves that the rules hold under any interleaving.
var concurrency = []test{
	{"ConcurrentTapsOfOneKeySendOnce", testConcurrentTapsOfOneKeySendOnce},
	{"ConcurrentKeysForOneWithdrawalSendOnce", testConcurrentKeysForOneWithdrawalSendOnce},
	{"Stress", testStress},
}
