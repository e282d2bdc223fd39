package pgstore

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemledger/submissions/internal/testdb"
)

// urlVar names the connection string the tests read.
const urlVar = testdb.URLVar

// restartVar names the shell command that restarts the test database's server
// in immediate mode (a crash-like stop, then a start), for the restart test:
// scripts/test sets it when it starts the server itself.
const restartVar = "SUBMISSIONS_TEST_PG_RESTART"

// testPool returns a pool on the test database with room for conns
// connections. Without a database it skips the test, saying how to get one;
// with CI=true a missing database fails it instead.
func testPool(t testing.TB, conns int32) *pgxpool.Pool {
	t.Helper()
	return testPoolWith(t, conns, nil)
}

// testPoolWith is testPool with configure applied to the pool's config.
func testPoolWith(t testing.TB, conns int32, configure func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(testdb.URL(t))
	require.NoError(t, err, urlVar)
	cfg.MaxConns = conns
	if configure != nil {
		configure(cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err == nil {
		err = pool.Ping(ctx)
	}
	require.NoError(t, err, "connect to the test database")
	t.Cleanup(pool.Close)
	return pool
}

// restartCommand returns the command in restartVar. Without one it skips the
// test, saying how to get one; with CI=true a missing command fails it instead.
func restartCommand(t testing.TB) string {
	t.Helper()
	cmd := os.Getenv(restartVar)
	if cmd == "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is not set, and CI=true: the server restart test must run (scripts/test sets it when it starts the server)", restartVar)
		}
		t.Skipf("%s is not set: skipping the test that restarts the PostgreSQL server (scripts/test sets it when it starts a local server; by hand: %s='pg_ctlcluster 15 main restart -m immediate')", restartVar, restartVar)
	}
	return cmd
}

// serverUp waits, until timeout, for the server at url to accept a connection
// and run a statement.
func serverUp(url string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		conn, err := pgx.Connect(ctx, url)
		if err == nil {
			_, err = conn.Exec(ctx, "SELECT 1")
			conn.Close(ctx)
		}
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the server does not accept connections after %v: %w", timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

var tables atomic.Int64

// testTable returns a table name of this test's own, dropped when it ends.
func testTable(t testing.TB, pool *pgxpool.Pool) string {
	t.Helper()
	name := fmt.Sprintf("t%d_%d", os.Getpid(), tables.Add(1))
	t.Cleanup(func() {
		_, err := pool.Exec(context.Background(), "DROP TABLE IF EXISTS "+name)
		assert.NoError(t, err, "drop %s", name)
	})
	return name
}
