package pgstore

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemledger/submissions"
)

// The retention rules are the conformance suites' (TestConformance); these
// are Prune's plan and cost on a big table.

// requirePrunableIndexScan stops t unless the plan finds the rows to prune
// through the prunable index, with no sequential scan and no sort.
func requirePrunableIndexScan(t *testing.T, st *Store[w], explained []byte, what string) {
	t.Helper()
	used := false
	var summary []string
	for _, n := range planNodes(t, explained) {
		typ := fmt.Sprint(n["Node Type"])
		require.NotContains(t, []string{"Seq Scan", "Sort", "Bitmap Heap Scan"}, typ, "%s: %s", what, explained)
		if n["Index Name"] == st.names.prunableName {
			used = true
		}
		s := typ
		if v, ok := n["Index Name"]; ok {
			s += fmt.Sprintf(" (%v)", v)
		}
		summary = append(summary, s)
	}
	require.True(t, used, "%s: the prunable index: %s", what, explained)
	t.Logf("%s: %s", what, strings.Join(summary, " <- "))
}

// TestPruneIsAnIndexScanOnAMillionRows: on a table of a million settled
// rows, half of them past the horizon, a batch of Prune reads the prunable
// index in order (in the plan made for its values and in the generic plan),
// prunes the oldest rows, and a later batch does not read the tombstones the
// earlier ones left.
func TestPruneIsAnIndexScanOnAMillionRows(t *testing.T) {
	pool := testPool(t, 4)
	st := millionRows(t, pool)
	before := time.Now().Add(-15 * 24 * time.Hour)
	const limit = 1000

	conn, err := pool.Acquire(bg)
	require.NoError(t, err)
	defer conn.Release()
	var explained []byte
	require.NoError(t, conn.QueryRow(bg, "EXPLAIN (FORMAT JSON) "+st.sql.prune, before, limit).Scan(&explained))
	requirePrunableIndexScan(t, st, explained, "custom plan")
	_, err = conn.Exec(bg, "PREPARE pruning AS "+st.sql.prune)
	require.NoError(t, err)
	_, err = conn.Exec(bg, "SET plan_cache_mode = force_generic_plan")
	require.NoError(t, err)
	require.NoError(t, conn.QueryRow(bg, "EXPLAIN (FORMAT JSON) EXECUTE pruning("+literal(t, before)+", "+literal(t, limit)+")").Scan(&explained))
	requirePrunableIndexScan(t, st, explained, "generic plan")
	_, err = conn.Exec(bg, "DEALLOCATE pruning; RESET plan_cache_mode")
	require.NoError(t, err)

	for batch := range 3 {
		start := time.Now()
		pruned, err := st.Prune(bg, before, limit)
		took := time.Since(start)
		require.NoError(t, err)
		require.Len(t, pruned, limit)
		keys := map[string]bool{}
		for _, p := range pruned {
			keys[p.Key] = true
		}
		for i := range limit { // the oldest is settled-1000000
			require.True(t, keys[fmt.Sprint("settled-", settledRows-batch*limit-i)], "batch %d: the oldest first", batch)
		}
		t.Logf("batch %d: %d rows pruned in %v", batch, len(pruned), took.Round(time.Microsecond))
	}
	// The tombstones hold their keys and withdrawals.
	ledger := submissions.NewWithStore[w](st, submissions.WithLogger(quiet))
	_, err = ledger.Tenant("tenant-0").Submit(bg, "settled-1000000", newW("w-settled-1000000"), nil)
	require.ErrorIs(t, err, submissions.ErrPruned)
}
