package engine_test

import (
	"testing"

	"github.com/idemledger/submissions"
	"github.com/idemledger/submissions/driver"
	"github.com/idemledger/submissions/internal/ledgertest"
)

// The ledger's rules over the memory store behind the bare Store interface,
// with only the abilities pgstore has, so that the engine tracks its sends
// itself and waits by polling. The root package's tests run them over the
// memory store as New runs it, a Tracker and a Replayer.

func memory(*testing.T) driver.Store[ledgertest.Withdrawal] {
	return submissions.NewMemoryStore[ledgertest.Withdrawal]()
}

// opaque hides a store's type: the ledger runs it as it runs any Store that
// is a Lister, a Pruner and an Abandoner.
type opaque struct {
	driver.Store[ledgertest.Withdrawal]
	driver.Lister
	driver.Pruner
	driver.Abandoner
}

func TestRulesOverAStoreTheEngineTracks(t *testing.T) {
	ledgertest.Run(t, func(t *testing.T) driver.Store[ledgertest.Withdrawal] {
		st := memory(t)
		return opaque{st, st.(driver.Lister), st.(driver.Pruner), st.(driver.Abandoner)}
	})
}
