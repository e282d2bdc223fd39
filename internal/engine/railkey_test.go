package engine

import (
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// uuidV8 is the form of an RFC 9562 UUID of version 8.
var uuidV8 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-8[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestRailKeyIsAUUIDOfTenantAndWithdrawalOnly(t *testing.T) {
	// The derivation is pinned: a change would give a withdrawal claimed
	// before an upgrade another key at its rail after.
	require.Equal(t, "4d7f4bf7-5be5-8373-bf64-8e37d39bf4de", RailKey("", "wd-1"))
	seen := map[string][2]string{}
	for _, c := range [][2]string{
		{"", "wd-1"}, {"", "wd-2"}, {"t1", "wd-1"}, {"t", "1wd-1"}, {"t1w", "d-1"}, {"", "t1wd-1"},
		{"", " wd-1"}, {"", "WD-1"}, {"t1", ""}, {"", ""}, {"\x00", ""}, {"", "\x00"},
	} {
		key := RailKey(c[0], c[1])
		assert.Regexp(t, uuidV8, key, "%q", c)
		assert.Equal(t, key, RailKey(c[0], c[1]), "%q: the same every time", c)
		if prev, ok := seen[key]; ok {
			t.Errorf("%q and %q share the rail key %s", prev, c, key)
		}
		seen[key] = c
	}
}

func TestRailKeyFromContextFindsTheSendsThroughDerivedContexts(t *testing.T) {
	type other struct{}
	parent, cancel := context.WithCancel(context.WithValue(context.Background(), other{}, "v"))
	sc := &sendCtx{parent, "t1", "wd-1"}
	child, stop := context.WithTimeout(sc, 1<<62)
	defer stop()
	for _, ctx := range []context.Context{sc, child, context.WithValue(child, other{}, "w")} {
		key, ok := RailKeyFromContext(ctx)
		require.True(t, ok)
		require.Equal(t, RailKey("t1", "wd-1"), key)
	}
	assert.Equal(t, "v", child.Value(other{}), "other values pass through")
	cancel()
	select { // the parent's cancellation reaches a context derived from the send's
	case <-child.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("a context derived from the send's was not cancelled with its parent")
	}
	_, ok := RailKeyFromContext(parent)
	assert.False(t, ok)
}
