package engine

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/idemledger/submissions/driver"
)

// TestStoreFailedSaysWhatAndWhich: a store's error becomes ErrStoreFailed
// naming the call, and what it was about when there is one thing; a
// *ConflictError goes on as it is.
func TestStoreFailedSaysWhatAndWhich(t *testing.T) {
	cause := errors.New("connection reset")
	err := storeFailed("request key k1", "claim", cause)
	assert.EqualError(t, err, "store failed: request key k1: claim: connection reset")
	assert.ErrorIs(t, err, ErrStoreFailed)
	assert.ErrorIs(t, err, cause)
	assert.EqualError(t, storeFailed("", "prune", cause), "store failed: prune: connection reset")
	conflict := &driver.ConflictError{Holder: "k0", Key: "k1", WithdrawalID: "w-1"}
	assert.Same(t, conflict, storeFailed("request key k1", "claim", conflict))
}

// TestStoreFailedHidesTheLedgersClasses: a store's (or a hook's) error
// that wraps one of the ledger's errors keeps its text but not its class.
func TestStoreFailedHidesTheLedgersClasses(t *testing.T) {
	for _, class := range classes {
		cause := fmt.Errorf("the hook's: %w", class)
		err := storeFailed("request key k1", "settle", cause)
		assert.ErrorIs(t, err, ErrStoreFailed)
		if class != ErrStoreFailed {
			assert.NotErrorIs(t, err, class)
		}
		assert.NotErrorIs(t, err, cause)
		assert.EqualError(t, err, "store failed: request key k1: settle: the hook's: "+class.Error())
		why := unsettled[transfer](&driver.Record[transfer]{}, cause, transfer{})
		assert.NotErrorIs(t, why, class)
	}
	own := errors.New("the service's own")
	assert.ErrorIs(t, storeFailed("", "claim", fmt.Errorf("hook: %w", own)), own, "another error stays reachable")
}
