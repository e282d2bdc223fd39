package pgstore

import (
	"fmt"
	"testing"
)

// TestRecentKeysAreBounded: the keys a Store remembers, to read a retry
// first, take bounded memory however many keys it sees (at most two
// generations of recentCap), and the most recent recentCap of them are always
// remembered.
func TestRecentKeysAreBounded(t *testing.T) {
	var r recentKeys
	key := func(i int) string { return fmt.Sprint("req-", i) }
	const n = 2*recentCap + 1
	for i := range n {
		r.add(key(i))
		if held := len(r.new) + len(r.old); held > 2*recentCap {
			t.Fatalf("after %d keys: %d remembered; want at most %d", i+1, held, 2*recentCap)
		}
	}
	for i := n - recentCap; i < n; i++ {
		if !r.has(key(i)) {
			t.Fatalf("key %d of the last %d is forgotten", i, recentCap)
		}
	}
	if r.has(key(0)) {
		t.Fatalf("the first of %d keys is still remembered; want it dropped", n)
	}
	r.forget(key(n - 1))
	if r.has(key(n - 1)) {
		t.Fatal("a forgotten key is still remembered")
	}
}
