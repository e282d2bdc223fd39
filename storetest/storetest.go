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

// Run runs the suite against the stores newStores makes.
func Run(t *testing.T, newStores Factory) {
	t.Helper()
	t.Run("Store", func(t *testing.T) { runStore(t, newStores) })
}

func runStore(t *testing.T, newStores Factory) {
	a, _ := newStores(t)
	if a == nil {
		t.Fatal("storetest: the Factory returned a nil Store")
	}
}
