package submissions_test

import (
	"testing"

	"go.uber.org/goleak"
)

// The concurrency tests are storetest's, run by TestMemoryStore and
// TestMemoryStoreBehindTheStoreInterface under -race; this checks that no test
// of the package leaves a goroutine behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
