package pgstore

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemledger/submissions"
	"github.com/idemledger/submissions/driver"
	"github.com/idemledger/submissions/internal/ledgertest"
	"github.com/idemledger/submissions/storetest"
)

var bg = context.Background()

func TestNewRefusesBadInput(t *testing.T) {
	_, err := New[w](nil)
	assert.EqualError(t, err, "pgstore: nil pool")
	pool := &pgxpool.Pool{} // never used: New does not touch the database
	_, err = New[w](pool, WithCodec(nil))
	assert.EqualError(t, err, "pgstore: nil codec")
	for _, name := range []string{"", "Submissions", "1abc", "a-b", "a.b.c", "x;drop table y", strings.Repeat("a", 41), ".a", "a."} {
		_, err := New[w](pool, WithTable(name))
		assert.Error(t, err, "WithTable(%q)", name)
	}
	for _, name := range []string{"submissions", "payouts.submissions", "_t1", strings.Repeat("a", 40)} {
		_, err := New[w](pool, WithTable(name))
		assert.NoError(t, err, "WithTable(%q)", name)
	}
}

func TestMigrateIsIdempotent(t *testing.T) {
	pool := testPool(t, 4)
	table := testTable(t, pool)
	s, err := New[w](pool, WithTable(table))
	require.NoError(t, err)
	for i := range 2 {
		require.NoError(t, s.Migrate(bg), "Migrate #%d", i+1)
	}
	rows, err := pool.Query(bg, `SELECT conname FROM pg_constraint WHERE conrelid = $1::regclass ORDER BY conname`, table)
	require.NoError(t, err)
	var got []string
	for rows.Next() {
		var name string
		require.NoError(t, rows.Scan(&name))
		got = append(got, name)
	}
	require.NoError(t, rows.Err())
	assert.Equal(t, []string{table + "_key_unique", table + "_settled_check", table + "_withdrawal_unique"}, got, "constraints")
}

func TestMigrateFromManyInstancesAtOnce(t *testing.T) {
	table := testTable(t, testPool(t, 2))
	migrateAtOnce(t, 8, func() *pgxpool.Pool { return testPool(t, 1) }, table) // each instance its own connection
}

// migrateAtOnce runs Migrate of table from instances Stores, each on a pool
// of its own from newPool, released together; every one succeeds.
func migrateAtOnce(t *testing.T, instances int, newPool func() *pgxpool.Pool, table string) {
	t.Helper()
	var ready, done sync.WaitGroup
	start := make(chan struct{})
	errs := make(chan error, instances)
	for range instances {
		s, err := New[w](newPool(), WithTable(table))
		require.NoError(t, err)
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			ready.Done()
			<-start
			errs <- s.Migrate(bg)
		}()
	}
	ready.Wait()
	close(start)
	done.Wait()
	close(errs)
	for err := range errs {
		assert.NoError(t, err, "Migrate")
	}
}

// TestUniqueConstraintsPickOneWinner races plain INSERTs from separate
// connections: the database lets one through, and translate tells the losers
// which constraint stopped them.
func TestUniqueConstraintsPickOneWinner(t *testing.T) {
	const racers = 16
	pool := testPool(t, racers)
	s := newTestStore[w](t, pool)
	insert := `INSERT INTO ` + s.names.table + ` (request_key, withdrawal_id, amount, currency, destination) VALUES ($1, $2, '1', 'BTC', 'bc1q')`
	for _, c := range []struct {
		name string
		row  func(i int) (key, withdrawal string)
		want error
	}{
		{"one key, many withdrawals", func(i int) (string, string) { return "req-1", fmt.Sprint("w-a", i) }, errKeyTaken},
		{"one withdrawal, many keys", func(i int) (string, string) { return fmt.Sprint("req-b", i), "w-1" }, errWithdrawalTaken},
	} {
		t.Run(c.name, func(t *testing.T) {
			conns := make([]*pgxpool.Conn, racers)
			for i := range conns {
				conn, err := pool.Acquire(bg)
				require.NoError(t, err)
				defer conn.Release()
				conns[i] = conn
			}
			var ready, done sync.WaitGroup
			start := make(chan struct{})
			errs := make([]error, racers)
			for i, conn := range conns {
				ready.Add(1)
				done.Add(1)
				go func() {
					defer done.Done()
					key, w := c.row(i)
					ready.Done()
					<-start
					_, err := conn.Exec(bg, insert, key, w)
					errs[i] = s.translate(err)
				}()
			}
			ready.Wait()
			close(start)
			done.Wait()
			wins := 0
			for _, err := range errs {
				if err == nil {
					wins++
					continue
				}
				assert.ErrorIs(t, err, c.want, "a loser's error")
			}
			assert.Equal(t, 1, wins, "winners")
		})
	}
}

func TestTranslateLeavesOtherErrorsAlone(t *testing.T) {
	s, err := New[w](&pgxpool.Pool{})
	require.NoError(t, err)
	plain := fmt.Errorf("connection reset")
	assert.Same(t, plain, s.translate(plain))
	assert.NoError(t, s.translate(nil))
	for _, pgErr := range []*pgconn.PgError{
		{Code: "23505", ConstraintName: "another_unique"}, // a unique violation of no constraint of the store
		{Code: "57P01"}, // admin shutdown
		{Code: "42P02"}, // undefined parameter: not a missing table
	} {
		assert.Same(t, error(pgErr), s.translate(pgErr), pgErr.Code)
	}
	for code, want := range map[string]error{"42P01": errNoTable, "23505": errKeyTaken} {
		pgErr := &pgconn.PgError{Code: code, ConstraintName: s.names.keyConstraint}
		got := s.translate(pgErr)
		assert.ErrorIs(t, got, want, code)
		assert.ErrorIs(t, got, pgErr, code)
	}
}

// A Store answers the driver's optional calls but the two a process answers
// best alone.
var (
	_ driver.Store[w]    = (*Store[w])(nil)
	_ driver.Lister      = (*Store[w])(nil)
	_ driver.Waiter[w]   = (*Store[w])(nil)
	_ driver.Abandoner   = (*Store[w])(nil)
	_ driver.Answerer[w] = (*Store[w])(nil)
	_ driver.Pruner      = (*Store[w])(nil)
)

// TestNeitherATrackerNorAReplayer: the sends under way and the outcomes a
// process remembers are each process's own, not the table's: a ledger on a
// Store keeps its marks of its own sends, and checks every retry in the table.
func TestNeitherATrackerNorAReplayer(t *testing.T) {
	var st any = (*Store[w])(nil)
	_, tracker := st.(driver.Tracker[w])
	assert.False(t, tracker, "a driver.Tracker")
	_, replayer := st.(driver.Replayer[w])
	assert.False(t, replayer, "a driver.Replayer")
}

// newTestStore returns a migrated store on a table of t's own.
func newTestStore[R any](t testing.TB, pool *pgxpool.Pool) *Store[R] {
	t.Helper()
	s, err := New[R](pool, WithTable(testTable(t, pool)))
	require.NoError(t, err)
	require.NoError(t, s.Migrate(bg))
	return s
}

// TestConformance runs the two suites over PostgreSQL: store, the driver
// contract called directly, through two Stores on one table, each with a
// pool of its own, as two processes would have; and ledger, the ledger's rules
// over a Store.
func TestConformance(t *testing.T) {
	pool := testPool(t, 32)
	t.Run("store", func(t *testing.T) {
		other := testPool(t, 32)
		storetest.Run(t, func(t *testing.T) (a, b driver.Store[storetest.Withdrawal]) {
			st := newTestStore[storetest.Withdrawal](t, pool)
			twin, err := New[storetest.Withdrawal](other, WithTable(st.names.base))
			require.NoError(t, err)
			return st, twin
		})
	})
	t.Run("store/alone", func(t *testing.T) { // every claim and settle a statement of its own
		other := testPool(t, 32)
		storetest.Run(t, func(t *testing.T) (a, b driver.Store[storetest.Withdrawal]) {
			st := newTestStore[storetest.Withdrawal](t, pool)
			st.grouped = false
			twin, err := New[storetest.Withdrawal](other, WithTable(st.names.base), WithoutGrouping())
			require.NoError(t, err)
			return st, twin
		})
	})
	t.Run("ledger", func(t *testing.T) {
		ledgertest.Run(t, func(t *testing.T) driver.Store[ledgertest.Withdrawal] {
			return newTestStore[ledgertest.Withdrawal](t, pool)
		})
	})
}

// TestAMissingTableSaysToCallMigrate: every call of a Store whose table does
// not exist fails with an error that says so and what to do, and wraps the
// driver's error.
func TestAMissingTableSaysToCallMigrate(t *testing.T) {
	pool := testPool(t, 2)
	st, err := New[w](pool, WithTable(testTable(t, pool))) // never migrated
	require.NoError(t, err)
	ledger := submissions.NewWithStore[w](st, submissions.WithLogger(quiet))
	check := func(call string, err error) { // a Store's error
		t.Helper()
		assert.ErrorIs(t, err, errNoTable, call)
		assert.ErrorContains(t, err, "pgstore: the table does not exist: call Migrate", call)
		var pgErr *pgconn.PgError
		if assert.ErrorAs(t, err, &pgErr, call) {
			assert.Equal(t, "42P01", pgErr.Code, call)
		}
	}
	checkLedger := func(call string, err error) { // the ledger's, which wraps it
		t.Helper()
		assert.ErrorIs(t, err, submissions.ErrStoreFailed, call)
		check(call, err)
	}
	var sends int
	_, err = ledger.Submit(bg, "req-1", newW("w-1"), func(_ context.Context, x w) (w, error) { sends++; return x, nil })
	checkLedger("Submit", err)
	assert.Zero(t, sends, "sends")
	checkLedger("Resolve", ledger.Resolve(bg, "req-1", sent(newW("w-1"), "0xfound")))
	checkLedger("Release", ledger.Release(bg, "req-1"))
	_, _, err = ledger.Outcome(bg, "req-1")
	checkLedger("Outcome", err)
	_, _, err = ledger.ClaimedBy(bg, "w-1")
	checkLedger("ClaimedBy", err)
	_, _, err = st.Settle(bg, "", "req-1", 1, newW("w-1"))
	check("Settle", err)
	_, _, err = st.Release(bg, "", "req-1", 1)
	check("Store.Release", err)
	_, _, _, _, err = st.holder(bg, st.pool, "", "req-1", "w-1")
	check("the lost-claim read", err)
}
