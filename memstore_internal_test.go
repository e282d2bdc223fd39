package submissions

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

type horizonOutcome struct{ ID string }

func (h horizonOutcome) Fingerprint() Fingerprint {
	return Fingerprint{WithdrawalID: h.ID, Amount: "1", Currency: "BTC", Destination: "bc1q"}
}

// TestPruneKeepsARecordSettledAtItsHorizon: Prune takes the records done
// strictly before its horizon; one done at the horizon itself (a time only
// the store knows, to the nanosecond) stays.
func TestPruneKeepsARecordSettledAtItsHorizon(t *testing.T) {
	ctx := context.Background()
	m := NewMemoryStore[horizonOutcome]().(*memStore[horizonOutcome])
	out := horizonOutcome{ID: "w-1"}
	_, _, err := m.Claim(ctx, "", "req-1", out.Fingerprint(), &out)
	require.NoError(t, err)
	require.Len(t, m.settled, 1)
	done := time.Unix(0, m.settled[0].at)

	pruned, err := m.Prune(ctx, done, 10)
	require.NoError(t, err)
	require.Empty(t, pruned, "done at the horizon, not before it")
	pruned, err = m.Prune(ctx, done.Add(time.Nanosecond), 10)
	require.NoError(t, err)
	require.Len(t, pruned, 1, "done a nanosecond before the horizon")
}
