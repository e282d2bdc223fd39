package pgstore

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemledger/submissions"
)

// touchy is an outcome whose encoding panics when its TxHash is "boom".
type touchy struct{ w }

func (t touchy) MarshalJSON() ([]byte, error) {
	if t.TxHash == "boom" {
		panic("the outcome's MarshalJSON panicked")
	}
	return json.Marshal(t.w)
}

// panicky is a Codec whose Unmarshal panics.
type panicky struct{ jsonCodec }

func (panicky) Unmarshal([]byte, any) error { panic("the codec's Unmarshal panicked") }

// TestACodecThatPanicsLeavesNoConnectionTaken: an outcome whose encoding
// panics, in a Resolve (Claim) or in the record of a send's answer (Settle),
// and a codec whose decoding panics, in a read: the panic goes on to the
// caller, and the pool's one connection is back, outside any transaction; a
// send whose Settle panicked leaves its claim abandoned. The ledger goes on
// working.
func TestACodecThatPanicsLeavesNoConnectionTaken(t *testing.T) {
	admin := testPool(t, 1)
	pool := testPool(t, 1) // one connection: a leaked one would hold up every later call
	pid := backendPID(t, pool)
	st := newTestStore[touchy](t, pool)
	ledger := submissions.NewWithStore[touchy](st, submissions.WithLogger(quiet))
	ctx, cancel := context.WithTimeout(bg, 10*time.Second)
	defer cancel()
	free := func(after string) {
		t.Helper()
		require.Zero(t, pool.Stat().AcquiredConns(), "connections acquired after %s", after)
		var state string
		require.NoError(t, admin.QueryRow(ctx, "SELECT state FROM pg_stat_activity WHERE pid = $1", pid).Scan(&state))
		require.Equal(t, "idle", state, "the connection after %s", after)
	}
	boom := func(id string) touchy {
		x := touchy{newW(id)}
		x.State, x.TxHash = "sent", "boom"
		return x
	}

	require.PanicsWithValue(t, "the outcome's MarshalJSON panicked", func() { _ = ledger.Resolve(ctx, "req-1", boom("w-1")) }, "Resolve")
	free("a Claim whose encoding panicked")
	_, held, err := ledger.ClaimedBy(ctx, "w-1")
	require.NoError(t, err)
	assert.False(t, held, "the Resolve claimed nothing")

	x := touchy{newW("w-2")}
	require.PanicsWithValue(t, "the outcome's MarshalJSON panicked", func() {
		_, _ = ledger.Submit(ctx, "req-2", x, func(context.Context, touchy) (touchy, error) { return boom("w-2"), nil })
	}, "Submit")
	free("a Settle whose encoding panicked")
	rec, ok, err := st.Lookup(ctx, "", "req-2")
	require.NoError(t, err)
	require.True(t, ok)
	assert.True(t, rec.Abandoned, "the claim whose Settle panicked is abandoned")
	_, err = ledger.Submit(ctx, "req-2", x, nil)
	require.ErrorIs(t, err, submissions.ErrSubmissionInFlight, "the key stays claimed")
	assert.True(t, rec.Answered, "the rail answered: the claim says so, without the answer it could not encode")
	assert.Nil(t, rec.Answer)
	require.ErrorIs(t, ledger.Release(ctx, "req-2"), submissions.ErrIdempotencyConflict, "an answered claim is never released")
	found := x
	found.State, found.TxHash = "sent", "0xtx"
	require.NoError(t, ledger.Resolve(ctx, "req-2", found), "resolved with what the rail shows")
	out, err := ledger.Submit(ctx, "req-2", x, nil)
	require.NoError(t, err, "Submit again replays")
	assert.Equal(t, "0xtx", out.TxHash)

	reader, err := New[touchy](pool, WithTable(st.names.base), WithCodec(panicky{}))
	require.NoError(t, err)
	readLedger := submissions.NewWithStore[touchy](reader, submissions.WithLogger(quiet))
	require.PanicsWithValue(t, "the codec's Unmarshal panicked", func() { _, _, _ = readLedger.Outcome(ctx, "req-2") }, "Outcome")
	free("a Lookup whose decoding panicked")
	require.PanicsWithValue(t, "the codec's Unmarshal panicked", func() { _, _ = readLedger.Submit(ctx, "req-2", x, nil) }, "replay")
	free("a Claim whose decoding panicked")

	got, ok, err := ledger.Outcome(ctx, "req-2")
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, out, got)
}
