// Package storetest is the conformance suite of the driver.Store contract:
// it calls a Store and the optional interfaces it implements directly, from
// many goroutines at once and through two handles on one state, as two
// processes would. Each test names the method or interface it checks. A
// store's test is a few lines:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) (a, b driver.Store[storetest.Withdrawal]) {
//			st := newEmptyStore(t)
//			return st, anotherHandleOn(t, st)
//		})
//	}
//
// The rules a ledger applies over a Store (submissions' own tests run them
// over every store) are not here: this suite checks what a Store answers.
package storetest

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemledger/submissions/driver"
)

// Factory returns two handles on one new, empty state, as two processes
// sharing a database have: for a database, two Stores on one table through
// two connection pools. A Store whose state lives in the value itself
// returns that value twice. It may register cleanups with t.
type Factory func(t *testing.T) (a, b driver.Store[Withdrawal])

// Withdrawal is the type the suite stores, as a payout service would have
// it: its fingerprint stays the same as it moves from approved to sent. A
// store under test must keep its outcomes whole (all fields are exported and
// encode to JSON).
type Withdrawal struct {
	ID       string
	Amount   string
	Currency string
	Dest     string
	State    string
	TxHash   string
}

// Fingerprint returns the withdrawal's identity: id, amount, currency and
// destination.
func (w Withdrawal) Fingerprint() driver.Fingerprint {
	return driver.Fingerprint{WithdrawalID: w.ID, Amount: w.Amount, Currency: w.Currency, Destination: w.Dest}
}

// Run runs the suite against the stores newStores makes, each test on a new
// state; it calls newStores once more, first, to learn which optional
// interfaces the store implements (both handles must agree). The group of
// an optional interface that the store does not implement is skipped, and
// says so: a skip that is expected, not a pass.
//
// The suite reads the store's clock (ClaimedAt, Prune's before) as within
// an hour of the test's own.
func Run(t *testing.T, newStores Factory) {
	t.Helper()
	a, b := newStores(t)
	require.NotNil(t, a, "storetest: the Factory returned a nil Store a")
	require.NotNil(t, b, "storetest: the Factory returned a nil Store b")
	for _, g := range []struct {
		name string
		is   func(store) bool // nil: every Store
		run  func(t *testing.T, newStores Factory)
	}{
		{"Store/Claim", nil, testClaim},
		{"Store/Settle", nil, testSettle},
		{"Store/Release", nil, testRelease},
		{"Store/Lookup", nil, testLookup},
		{"Store/ClaimedBy", nil, testClaimedBy},
		{"Store/cancelled ctx", nil, testCancelled},
		{"Lister", isLister, testLister},
		{"Waiter", isWaiter, testWaiter},
		{"Abandoner", isAbandoner, testAbandoner},
		{"Answerer", isAnswerer, testAnswerer},
		{"Pruner", isPruner, testPruner},
		{"Tracker", isTracker, testTracker},
		{"Replayer", isReplayer, testReplayer},
	} {
		t.Run(g.name, func(t *testing.T) {
			if g.is != nil {
				require.Equal(t, g.is(a), g.is(b), "storetest: one handle is a driver.%s and the other is not", g.name)
				if !g.is(a) {
					t.Skipf("the store is not a driver.%s", g.name)
				}
			}
			g.run(t, newStores)
		})
	}
}

func isLister(st store) bool    { _, ok := st.(driver.Lister); return ok }
func isWaiter(st store) bool    { _, ok := st.(driver.Waiter[Withdrawal]); return ok }
func isAbandoner(st store) bool { _, ok := st.(driver.Abandoner); return ok }
func isAnswerer(st store) bool  { _, ok := st.(driver.Answerer[Withdrawal]); return ok }
func isPruner(st store) bool    { _, ok := st.(driver.Pruner); return ok }
func isTracker(st store) bool   { _, ok := st.(driver.Tracker[Withdrawal]); return ok }
func isReplayer(st store) bool  { _, ok := st.(driver.Replayer[Withdrawal]); return ok }
