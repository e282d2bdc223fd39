// Package ledgertest runs the rules of the ledger over a store: every rule
// of docs/rules.md through submissions.NewWithStore, the concurrency tests
// (goroutines released together, sends counted), and a fault at every store
// call. The root package runs it over the memory store, internal/engine over
// the memory store behind the bare Store interface, and pgstore over
// PostgreSQL:
//
//	func TestLedgerRules(t *testing.T) {
//		ledgertest.Run(t, func(t *testing.T) driver.Store[ledgertest.Withdrawal] {
//			return newEmptyStore(t)
//		})
//	}
//
// What a Store itself must answer is checked by the storetest package.
package ledgertest

import (
	"context"
	"log/slog"
	"testing"

	"github.com/idemledger/submissions"
	"github.com/idemledger/submissions/driver"
)

// Factory returns a new, empty store. A test calls it for every ledger it
// makes; some make two ledgers on one store, as two instances of a service
// share a database. It may register cleanups with t.
type Factory func(t *testing.T) driver.Store[Withdrawal]

// Run runs the suite against the stores newStore makes.
func Run(t *testing.T, newStore Factory) {
	for _, group := range []struct {
		name  string
		tests []test
	}{
		{"keys", keyTests},
		{"fingerprints", fingerprintTests},
		{"submit", submitTests},
		{"claims", claimTests},
		{"resolve", resolveTests},
		{"release", releaseTests},
		{"doors", doorTests},
		{"not sent", notSentTests},
		{"reads", readTests},
		{"tenants", tenantTests},
		{"admin", adminTests},
		{"operate", operateTests},
		{"retention", retentionTests},
		{"wait", waitTests},
		{"store failures", failureTests},
		{"concurrency", concurrencyTests},
		{"faults", faultTests},
	} {
		t.Run(group.name, func(t *testing.T) {
			for _, tc := range group.tests {
				t.Run(tc.name, func(t *testing.T) { tc.run(t, newStore) })
			}
		})
	}
}

type test struct {
	name string
	run  func(t *testing.T, newStore Factory)
}

var (
	bg    = context.Background()
	quiet = slog.New(slog.DiscardHandler)
)

// fixture is what most tests start with: a ledger on a new store, its logs,
// a rail that counts its sends, and a withdrawal, w-1.
type fixture struct {
	t     *testing.T
	store driver.Store[Withdrawal]
	s     *submissions.Submissions[Withdrawal]
	logs  *logs
	rail  *rail
	w     Withdrawal
}

// setUp returns a fixture on a new store from newStore.
func setUp(t *testing.T, newStore Factory) *fixture {
	t.Helper()
	return setUpOn(t, newStore(t))
}

// setUpOn returns a fixture on st, which may be a wrapper of a store.
func setUpOn(t *testing.T, st driver.Store[Withdrawal]) *fixture {
	l := &logs{}
	return &fixture{
		t:     t,
		store: st,
		s:     submissions.NewWithStore(st, submissions.WithLogger(slog.New(l))),
		logs:  l,
		rail:  &rail{},
		w:     newWithdrawal("w-1"),
	}
}
