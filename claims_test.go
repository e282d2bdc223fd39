package submissions

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// In the memory store a record and its claim change together under one lock,
// so a claim always names the key whose record is released. The claims index
// keeps the guard of its own anyway, and this test holds it to it.
func TestClaimsReleaseOnlyTheNamedKey(t *testing.T) {
	c := claims{}
	require.NoError(t, c.claim("t", "w-1", "req-1"))
	for _, key := range []string{"req-2", "req-1"} {
		err := c.claim("t", "w-1", key)
		require.Equal(t, &ConflictError{Tenant: "t", Holder: "req-1", Key: key, WithdrawalID: "w-1"}, err, "a claim by %s", key)
	}
	c.release("w-1", "req-2")
	holder, ok := c.holder("w-1")
	require.True(t, ok, "after a release by another key")
	require.Equal(t, "req-1", holder)
	c.release("w-1", "req-1")
	_, ok = c.holder("w-1")
	require.False(t, ok, "after the holder's release")
}
