package engine

import (
	"errors"
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
