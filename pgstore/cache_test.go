package pgstore

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
		r.add("", key(i))
		require.LessOrEqual(t, len(r.new)+len(r.old), 2*recentCap, "keys remembered after %d", i+1)
	}
	for i := n - recentCap; i < n; i++ {
		require.True(t, r.has("", key(i)), "key %d of the last %d is forgotten", i, recentCap)
	}
	assert.False(t, r.has("", key(0)), "the first of %d keys is still remembered", n)
	r.forget("", key(n-1))
	assert.False(t, r.has("", key(n-1)), "a forgotten key is still remembered")
}

// TestRecentKeysAreTenants: a key is remembered with its tenant, and
// forgotten only in its tenant; no split of the same bytes into tenant and key
// is another's.
func TestRecentKeysAreTenants(t *testing.T) {
	var r recentKeys
	r.add("a", "bk")
	assert.True(t, r.has("a", "bk"))
	for _, other := range [][2]string{{"", "bk"}, {"b", "bk"}, {"ab", "k"}, {"", "abk"}, {"a", "b"}} {
		assert.False(t, r.has(other[0], other[1]), "tenant %q, key %q", other[0], other[1])
	}
	r.add("b", "bk")
	r.forget("b", "bk")
	assert.False(t, r.has("b", "bk"))
	assert.True(t, r.has("a", "bk"), "forgotten in another tenant")
}
