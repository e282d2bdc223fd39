package pgstore

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemledger/submissions"
	"github.com/idemledger/submissions/admin"
	"github.com/idemledger/submissions/driver"
)

// The listing's own tests; its rules are the conformance suites'
// (TestConformance).

const (
	settledRows  = 1_000_000
	inFlightRows = 300
	bigTenants   = 10
)

// millionRows returns a migrated store on a table of its own with
// settledRows settled rows, claimed over the last 30 days, and inFlightRows
// in flight, claimed over the last 5 hours, spread over bigTenants tenants
// ("tenant-0" to "tenant-9"), analyzed. Building it takes some seconds.
func millionRows(t testing.TB, pool *pgxpool.Pool) *Store[w] {
	t.Helper()
	st := newTestStore[w](t, pool)
	ctx, cancel := context.WithTimeout(bg, 5*time.Minute)
	defer cancel()
	// Loaded without its constraints and indexes, which are made after, as
	// a bulk load would: several times faster than inserting into them. The
	// table stays logged: a crash restart of the server (by any test) would
	// empty an unlogged one, and the pool would reconnect to it unawares.
	n := st.names
	_, err := pool.Exec(ctx, `ALTER TABLE `+n.table+` DROP CONSTRAINT `+n.keyUnique+`, DROP CONSTRAINT `+n.withdrawalUnique+`;
DROP INDEX `+n.inFlightIndex+`, `+n.prunableIndex)
	require.NoError(t, err)
	for _, sql := range []string{
		`INSERT INTO ` + st.names.table + ` (tenant, request_key, withdrawal_id, amount, currency, destination, outcome, claimed_at, settled_at)
SELECT 'tenant-' || (i % $2), 'settled-' || i, 'w-settled-' || i, '25', 'USDC', '0x9f2c4e1b7a3d5c8e0f6a2b4d1c3e5f7a9b8c6d4e',
	'{"State":"sent"}'::bytea, now() - (i * interval '30 days' / $1), now() - (i * interval '30 days' / $1) + interval '1 second'
FROM generate_series(1, $1::int) AS i`,
		`INSERT INTO ` + st.names.table + ` (tenant, request_key, withdrawal_id, amount, currency, destination, claimed_at)
SELECT 'tenant-' || (i % $2), 'flight-' || i, 'w-flight-' || i, '25', 'USDC', '0x9f2c4e1b7a3d5c8e0f6a2b4d1c3e5f7a9b8c6d4e',
	now() - (i * interval '5 hours' / $1)
FROM generate_series(1, $1::int) AS i`,
	} {
		rows := settledRows
		if strings.Contains(sql, "flight-") {
			rows = inFlightRows
		}
		_, err = pool.Exec(ctx, sql, rows, bigTenants)
		require.NoError(t, err)
	}
	_, err = pool.Exec(ctx, `ALTER TABLE `+n.table+` ADD CONSTRAINT `+n.keyUnique+` UNIQUE (tenant, request_key),
	ADD CONSTRAINT `+n.withdrawalUnique+` UNIQUE (tenant, withdrawal_id)`)
	require.NoError(t, err)
	require.NoError(t, st.Migrate(ctx), "the indexes")
	_, err = pool.Exec(ctx, "ANALYZE "+n.table)
	require.NoError(t, err)
	return st
}

// listQueries are the shapes of listing a ledger issues: every tenant or
// some, the first page or a later one, every claim or the older ones.
func listQueries() map[string]driver.ListQuery {
	after := &driver.InFlight{Tenant: "tenant-3", Key: "flight-150", ClaimedAt: time.Now().Add(-150 * 5 * time.Hour / inFlightRows)}
	hourAgo := time.Now().Add(-time.Hour)
	return map[string]driver.ListQuery{
		"every tenant, first page":          {Limit: 100},
		"every tenant, older, a later page": {ClaimedBefore: hourAgo, After: after, Limit: 100},
		"one tenant, first page":            {Tenants: []string{"tenant-3"}, Limit: 100},
		"two tenants, first page":           {Tenants: []string{"tenant-3", "tenant-7"}, Limit: 100},
		"two tenants, older, a later page":  {Tenants: []string{"tenant-3", "tenant-7"}, ClaimedBefore: hourAgo, After: after, Limit: 100},
		"a tenant with no claim":            {Tenants: []string{"nobody"}, Limit: 1000},
	}
}

// planNodes returns every node of an EXPLAIN (FORMAT JSON) plan, depth first.
func planNodes(t *testing.T, explained []byte) []map[string]any {
	t.Helper()
	var doc []struct {
		Plan map[string]any `json:"Plan"`
	}
	require.NoError(t, json.Unmarshal(explained, &doc), "%s", explained)
	require.Len(t, doc, 1)
	var nodes []map[string]any
	var walk func(n map[string]any)
	walk = func(n map[string]any) {
		nodes = append(nodes, n)
		children, _ := n["Plans"].([]any)
		for _, c := range children {
			walk(c.(map[string]any))
		}
	}
	walk(doc[0].Plan)
	return nodes
}

// requireInFlightIndexScan stops t unless the plan reads the table through
// the in-flight index only, without a sequential scan, and without a sort
// unless sorted is true.
func requireInFlightIndexScan(t *testing.T, st *Store[w], explained []byte, sorted bool, what string) {
	t.Helper()
	scans := 0
	for _, n := range planNodes(t, explained) {
		switch typ := n["Node Type"]; {
		case typ == "Index Scan", typ == "Index Only Scan":
			require.Equal(t, st.names.inFlightName, n["Index Name"], "%s: %s", what, explained)
			scans++
		case typ == "Limit", typ == "Sort" && sorted:
		default:
			require.Failf(t, "not an index scan", "%s: a %v node: %s", what, typ, explained)
		}
	}
	require.Equal(t, 1, scans, "%s: %s", what, explained)
	var summary []string
	for _, n := range planNodes(t, explained) {
		s := fmt.Sprint(n["Node Type"])
		for _, k := range []string{"Index Name", "Index Cond", "Filter"} {
			if v, ok := n[k]; ok {
				s += fmt.Sprintf(" %s: %v;", k, v)
			}
		}
		summary = append(summary, s)
	}
	t.Logf("%s: %s", what, strings.Join(summary, " <- "))
}

// TestListingIsAnIndexScanOnAMillionRows: with a million settled rows beside
// the few in flight, every shape of listing reads the in-flight index only
// (no sequential scan), in its order (no sort; of several tenants, the
// planner may sort their claims in flight instead), in the plan made for its
// values and in the generic plan a prepared statement may settle on; it runs much faster
// than the same query as a full scan; and the ledger's pages over it list
// every claim in flight once, oldest first.
func TestListingIsAnIndexScanOnAMillionRows(t *testing.T) {
	pool := testPool(t, 4)
	start := time.Now()
	serverStart := func() (at time.Time) { // a restart from elsewhere shows here
		require.NoError(t, pool.QueryRow(bg, "SELECT pg_postmaster_start_time()").Scan(&at))
		return at
	}
	serverBefore := serverStart()
	st := millionRows(t, pool)
	t.Logf("%d settled and %d in-flight rows made in %v", settledRows, inFlightRows, time.Since(start).Round(time.Millisecond))

	conn, err := pool.Acquire(bg)
	require.NoError(t, err)
	defer conn.Release()
	for name, q := range listQueries() {
		sql, args := listSQL(st.names.table, q)
		var explained []byte
		require.NoError(t, conn.QueryRow(bg, "EXPLAIN (FORMAT JSON) "+sql, args...).Scan(&explained))
		requireInFlightIndexScan(t, st, explained, len(q.Tenants) > 1, name+", custom plan")

		_, err := conn.Exec(bg, "PREPARE listing AS "+sql)
		require.NoError(t, err)
		_, err = conn.Exec(bg, "SET plan_cache_mode = force_generic_plan")
		require.NoError(t, err)
		literals := make([]string, len(args))
		for i, a := range args {
			literals[i] = literal(t, a)
		}
		require.NoError(t, conn.QueryRow(bg, "EXPLAIN (FORMAT JSON) EXECUTE listing("+strings.Join(literals, ", ")+")").Scan(&explained))
		requireInFlightIndexScan(t, st, explained, len(q.Tenants) > 1, name+", generic plan")
		_, err = conn.Exec(bg, "DEALLOCATE listing; RESET plan_cache_mode")
		require.NoError(t, err)
	}

	// Timed beside the same query as a full scan, from the plans' own
	// figures, the best of three each.
	q := listQueries()["one tenant, first page"]
	sql, args := listSQL(st.names.table, q)
	timed := func(fullScan bool) float64 {
		best := 0.0
		for range 3 {
			tx, err := conn.Begin(bg)
			require.NoError(t, err)
			if fullScan {
				_, err = tx.Exec(bg, "SET LOCAL enable_indexscan = off; SET LOCAL enable_indexonlyscan = off; SET LOCAL enable_bitmapscan = off")
				require.NoError(t, err)
			}
			var explained []byte
			require.NoError(t, tx.QueryRow(bg, "EXPLAIN (ANALYZE, FORMAT JSON) "+sql, args...).Scan(&explained))
			require.NoError(t, tx.Rollback(bg))
			var doc []struct {
				Time float64 `json:"Execution Time"`
			}
			require.NoError(t, json.Unmarshal(explained, &doc))
			if best == 0 || doc[0].Time < best {
				best = doc[0].Time
			}
		}
		return best
	}
	indexed, full := timed(false), timed(true)
	t.Logf("a page of one tenant's claims in flight: %.3f ms through the index, %.1f ms as a full scan (%.0fx)", indexed, full, full/indexed)
	assert.Less(t, indexed*10, full, "the listing is at least 10 times faster than a full scan")

	// The ledger's pages over the table.
	ops := submissions.NewWithStore[w](st, submissions.WithLogger(quiet)).Admin()
	var walk []admin.Claim
	var after *admin.Claim
	for {
		page, err := ops.InFlight(bg, admin.InFlightQuery{After: after, Limit: 128})
		require.NoError(t, err)
		walk = append(walk, page...)
		if len(page) < 128 {
			break
		}
		after = &page[len(page)-1]
	}
	var inFlight int
	require.NoError(t, pool.QueryRow(bg, "SELECT count(*) FROM "+st.names.table+" WHERE outcome IS NULL").Scan(&inFlight))
	require.Len(t, walk, inFlightRows, "%d rows in flight in the table; the server started at %v before the test and at %v after",
		inFlight, serverBefore, serverStart())
	require.True(t, slices.IsSortedFunc(walk, func(a, b admin.Claim) int { return a.ClaimedAt.Compare(b.ClaimedAt) }))
	for i, c := range walk { // the oldest is flight-300
		require.Equal(t, fmt.Sprint("flight-", inFlightRows-i), c.Key)
	}
}

// literal returns a as an SQL literal, for EXECUTE.
func literal(t *testing.T, a any) string {
	t.Helper()
	switch v := a.(type) {
	case time.Time:
		return "'" + v.Format(time.RFC3339Nano) + "'"
	case string:
		return "'" + strings.ReplaceAll(v, "'", "''") + "'"
	case []string:
		quoted := make([]string, len(v))
		for i, s := range v {
			quoted[i] = literal(t, s)
		}
		return "ARRAY[" + strings.Join(quoted, ", ") + "]::text[]"
	case int:
		return fmt.Sprint(v)
	}
	require.Failf(t, "no literal", "%T", a)
	return ""
}

// indexes returns the names of table's indexes.
func indexes(t *testing.T, pool *pgxpool.Pool, table string) []string {
	t.Helper()
	rows, err := pool.Query(bg, `SELECT i.relname FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid WHERE x.indrelid = $1::regclass ORDER BY 1`, table)
	require.NoError(t, err)
	var names []string
	for rows.Next() {
		var name string
		require.NoError(t, rows.Scan(&name))
		names = append(names, name)
	}
	require.NoError(t, rows.Err())
	return names
}

// TestMigrateReplacesTheInFlightIndexByTenant: a table made with the index
// of the keys in flight by tenant gets the index by age instead, whatever
// schema it is in; Migrate then finds it up to date.
func TestMigrateReplacesTheInFlightIndexByTenant(t *testing.T) {
	pool := testPool(t, 2)
	for _, qualified := range []bool{false, true} {
		table := testTable(t, pool)
		name := table
		if qualified {
			name = "public." + table
		}
		st, err := New[w](pool, WithTable(name))
		require.NoError(t, err)
		old := strings.ReplaceAll(st.schema, `(claimed_at, tenant COLLATE "C", request_key COLLATE "C")`, `(tenant, claimed_at)`)
		old = strings.ReplaceAll(old, st.names.inFlightIndex, quoteIdent(table+"_in_flight"))
		old = strings.ReplaceAll(old, "DROP INDEX IF EXISTS "+st.names.oldInFlightIndex+";", "")
		_, err = pool.Exec(bg, old)
		require.NoError(t, err)
		require.Equal(t, []string{table + "_in_flight", table + "_key_unique", table + "_prunable", table + "_withdrawal_unique"}, indexes(t, pool, table))

		require.NoError(t, st.Migrate(bg))
		require.Equal(t, []string{table + "_in_flight_age", table + "_key_unique", table + "_prunable", table + "_withdrawal_unique"}, indexes(t, pool, table), name)
		var current bool
		require.NoError(t, pool.QueryRow(bg, st.sql.upToDate, st.upToDateArgs()...).Scan(&current))
		assert.True(t, current, "%s: up to date", name)
		require.NoError(t, st.Migrate(bg), "again")
	}
}

// quoteIdent quotes an identifier as the store quotes its names.
func quoteIdent(name string) string { return `"` + name + `"` }
