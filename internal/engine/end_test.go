package engine

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestAfterEndEndsSoonAfterItsCaller: a call made for a send after its ctx
// may have ended is not cancelled with ctx, and ends endGrace after ctx
// does, or abandonTimeout from now, whichever comes first.
func TestAfterEndEndsSoonAfterItsCaller(t *testing.T) {
	within := func(t *testing.T, ctx context.Context, want time.Duration) {
		t.Helper()
		deadline, ok := ctx.Deadline()
		require.True(t, ok, "a deadline")
		assert.WithinDuration(t, time.Now().Add(want), deadline, 50*time.Millisecond)
	}
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	ctx, stop := afterEnd(ended)
	within(t, ctx, endGrace)
	assert.NoError(t, ctx.Err(), "not cancelled with its caller's ctx")
	stop()

	past, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Hour))
	defer cancel()
	ctx, stop = afterEnd(past)
	within(t, ctx, endGrace)
	stop()

	soon, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	ctx, stop = afterEnd(soon)
	within(t, ctx, time.Second+endGrace)
	stop()

	late, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	ctx, stop = afterEnd(late)
	within(t, ctx, abandonTimeout)
	stop()

	ctx, stop = afterEnd(context.Background())
	within(t, ctx, abandonTimeout)
	stop()

	assert.Less(t, endGrace, 300*time.Millisecond, "a caller hears back within a few hundred milliseconds of its deadline")
	assert.Less(t, resettlePause, resettlePauseMax)
}

func TestSleepEndsWithItsContext(t *testing.T) {
	began := time.Now()
	assert.True(t, sleep(context.Background(), 20*time.Millisecond))
	assert.GreaterOrEqual(t, time.Since(began), 20*time.Millisecond)

	ended, cancel := context.WithCancel(context.Background())
	cancel()
	began = time.Now()
	assert.False(t, sleep(ended, time.Hour))
	assert.Less(t, time.Since(began), time.Second)
}
