package submissions_test

import (
	"testing"

	"github.com/idemledger/submissions"
	"github.com/idemledger/submissions/driver"
	"github.com/idemledger/submissions/storetest"
)

// TestMemoryStoreConformance runs the driver contract's suite over the
// memory store: one value, given as both handles, since its state lives in
// the value itself.
func TestMemoryStoreConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) (a, b driver.Store[storetest.Withdrawal]) {
		st := submissions.NewMemoryStore[storetest.Withdrawal]()
		return st, st
	})
}
