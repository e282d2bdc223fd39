package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRailShares(t *testing.T) {
	for want, r := range map[fate]*rail{
		answer:      newRail(0, 0, 0, 0, 0),
		decline:     newRail(0, 1, 0, 0, 0),
		unavailable: newRail(0, 0, 1, 0, 0),
		fail:        newRail(0, 0, 0, 1, 0),
		hang:        newRail(0, 0, 0, 0, 1),
	} {
		for range 20 {
			assert.Equal(t, want, r.decide(Withdrawal{}))
		}
	}
}

func TestRailFlags(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel() // run stops as soon as it listens
	for _, args := range [][]string{
		{"-rail-decline", "0.5", "-rail-unavailable", "0.6"},
		{"-rail-fail", "0.5", "-rail-timeout-share", "0.6"},
		{"-rail-decline", "-0.1"},
		{"-rail-unavailable", "NaN"},
	} {
		var stderr bytes.Buffer
		err := run(ctx, args, &bytes.Buffer{}, &stderr)
		require.Error(t, err, "%q", args)
		assert.Contains(t, err.Error(), "-rail-decline, -rail-unavailable, -rail-fail and -rail-timeout-share must be shares from 0 to 1, together at most 1")
	}
	var stdout, stderr bytes.Buffer
	require.NoError(t, run(ctx, []string{"-addr", "127.0.0.1:0", "-rail-decline", "0.25", "-rail-unavailable", "0.25",
		"-rail-fail", "0.25", "-rail-timeout-share", "0.25"}, &stdout, &stderr), "%s", stderr.String())
	assert.Contains(t, stdout.String(), "payoutd stopped")
}
