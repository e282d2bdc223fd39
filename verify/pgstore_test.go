package verify

import (
	"context"
	"os"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/idemledger/submissions"
	"github.com/idemledger/submissions/driver"
	"github.com/idemledger/submissions/internal/figures"
	"github.com/idemledger/submissions/pgstore"
)

// postgresRun sizes the run on PostgreSQL (SUBMISSIONS_LIN_HISTORIES
// overrides its count of histories).
var postgresRun = linConfig{histories: 1000, clients: 6, ops: 12, groups: 2}

// postgresLanes returns three ledgers on table, as three instances of a
// service, each with a Store of its own and marks of its own, with the faults
// of the Settle kinds of Send.
func postgresLanes(t require.TestingT, pool *pgxpool.Pool, table string) []lane {
	var lanes []lane
	for i := range 3 {
		st, err := pgstore.New[W](pool, pgstore.WithTable(table))
		require.NoError(t, err)
		require.NoError(t, st.Migrate(bg))
		lanes = append(lanes, lane{submissions.NewWithStore[W](faultyPostgres{st}, quiet), i})
	}
	return lanes
}

// faultyPostgres is pgstore, with every ability it has, whose Settle plays
// the faults of injectSettleFault, and whose Lookup and WaitClaim note their
// reads.
type faultyPostgres struct{ *pgstore.Store[W] }

// Lookup implements driver.Store.
func (s faultyPostgres) Lookup(ctx context.Context, tenant, key string) (driver.Record[W], bool, error) {
	defer noteRead(ctx)
	return s.Store.Lookup(ctx, tenant, key)
}

// WaitClaim implements driver.Waiter.
func (s faultyPostgres) WaitClaim(ctx context.Context, tenant, key string, token driver.Token) (driver.Record[W], bool, error) {
	noteRead(ctx)
	return s.Store.WaitClaim(ctx, tenant, key, token)
}

// Settle implements driver.Store.
func (s faultyPostgres) Settle(ctx context.Context, tenant, key string, token driver.Token, outcome W) (driver.Record[W], bool, error) {
	return injectSettleFault(ctx, func() (driver.Record[W], bool, error) {
		return s.Store.Settle(ctx, tenant, key, token, outcome)
	})
}

func TestLinearizablePostgres(t *testing.T) {
	pool := testPool(t)
	lanes := postgresLanes(t, pool, testTable(t, pool, "lin"))
	// One table for every history: each history's keys and withdrawals are
	// its own (they carry its number), so it starts from an empty ledger.
	run := checkHistories(t, linSize(t, postgresRun), os.TempDir(), func(int) []lane { return lanes })
	require.NoError(t, run.err())
	figures.Add(t, "linearizable: %s, %d clients in 2 tenants on the same keys, on 3 ledgers with a PostgreSQL store each, on one table",
		run, postgresRun.clients)
}

func TestPostgresLedgersFollowTheModel(t *testing.T) {
	pool := testPool(t)
	table := testTable(t, pool, "model")
	postgresLanes(t, pool, table) // migrates the table once
	check(t, 1, func(rt *rapid.T) []lane {
		_, err := pool.Exec(bg, "TRUNCATE "+table)
		require.NoError(rt, err)
		return postgresLanes(rt, pool, table) // stores that know nothing of the last run
	})
}

func TestPostgresWaitAfterEverySend(t *testing.T) {
	pool := testPool(t)
	table := testTable(t, pool, "wait")
	postgresLanes(t, pool, table) // migrates the table once
	waitAfterEverySend(t, func(t *testing.T) []lane {
		_, err := pool.Exec(bg, "TRUNCATE "+table)
		require.NoError(t, err)
		return postgresLanes(t, pool, table)
	})
}

func TestPostgresWaitWhileSending(t *testing.T) {
	pool := testPool(t)
	table := testTable(t, pool, "sending")
	postgresLanes(t, pool, table) // migrates the table once
	waitWhileSending(t, func(t *testing.T) []lane {
		_, err := pool.Exec(bg, "TRUNCATE "+table)
		require.NoError(t, err)
		return postgresLanes(t, pool, table)
	})
}
