package pgstore

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemledger/submissions"
)

// TestSchemaIsWhatMigrateRuns: Schema returns the statements of the Store
// for the same table, and refuses the names New refuses, with the same error.
func TestSchemaIsWhatMigrateRuns(t *testing.T) {
	for _, name := range []string{"submissions", "payouts.submissions", "_t1"} {
		st, err := New[w](&pgxpool.Pool{}, WithTable(name))
		require.NoError(t, err)
		ddl, err := Schema(name)
		require.NoError(t, err)
		assert.Equal(t, st.schema, ddl, name)
		assert.Contains(t, ddl, "CREATE TABLE IF NOT EXISTS "+st.names.table+" (", name)
		assert.NotContains(t, ddl, "{{", name)
	}
	for _, name := range []string{"", "Submissions", "a.b.c", "x;drop table y", strings.Repeat("a", 41)} {
		_, want := New[w](&pgxpool.Pool{}, WithTable(name))
		require.Error(t, want, name)
		_, err := Schema(name)
		assert.EqualError(t, err, want.Error(), name)
	}
}

// TestSchemaRunByAMigrationTool: a table made by running Schema's text, as a
// migration tool would, is one the Store works on and Migrate finds up to
// date.
func TestSchemaRunByAMigrationTool(t *testing.T) {
	pool := testPool(t, 2)
	table := testTable(t, pool)
	ddl, err := Schema(table)
	require.NoError(t, err)
	_, err = pool.Exec(bg, ddl)
	require.NoError(t, err)
	st, err := New[w](pool, WithTable(table))
	require.NoError(t, err)
	ledger := submissions.NewWithStore[w](st, submissions.WithLogger(quiet))
	out, err := ledger.Submit(bg, "req-1", newW("w-1"), func(_ context.Context, x w) (w, error) { return sent(x, "0xtx"), nil })
	require.NoError(t, err)
	assert.Equal(t, "0xtx", out.TxHash)
	var current bool
	require.NoError(t, pool.QueryRow(bg, st.sql.upToDate, st.upToDateArgs()...).Scan(&current))
	assert.True(t, current, "Migrate finds the table up to date")
}

// TestMigrateReportSaysWhatItDid: Created for a table that was not there,
// Updated for one that lacked a part, UpToDate when nothing ran, under
// either spelling of the table's name.
func TestMigrateReportSaysWhatItDid(t *testing.T) {
	pool := testPool(t, 2)
	table := testTable(t, pool)
	st, err := New[w](pool, WithTable(table))
	require.NoError(t, err)
	qualified, err := New[w](pool, WithTable("public."+table))
	require.NoError(t, err)
	for i, want := range []Migration{Created, UpToDate, UpToDate} {
		got, err := []*Store[w]{st, st, qualified}[i].MigrateReport(bg)
		require.NoError(t, err)
		assert.Equal(t, want, got, "migration %d", i)
	}
	_, err = pool.Exec(bg, "DROP INDEX "+st.names.prunableIndex)
	require.NoError(t, err)
	got, err := qualified.MigrateReport(bg)
	require.NoError(t, err)
	assert.Equal(t, Updated, got, "a table that lacked an index")
	got, err = st.MigrateReport(bg)
	require.NoError(t, err)
	assert.Equal(t, UpToDate, got)
	for m, want := range map[Migration]string{UpToDate: "up to date", Created: "created", Updated: "updated", 7: "Migration(7)"} {
		assert.Equal(t, want, m.String())
	}
}

// TestMigrateLeavesAnUpToDateTableAlone: once the table is up to date,
// Migrate takes no lock on it, so that a transaction holding the table (a
// pg_dump, a long report) does not make it wait, nor every statement of the
// ledger queued behind it. A table missing a part gets it back.
func TestMigrateLeavesAnUpToDateTableAlone(t *testing.T) {
	pool := testPool(t, 2)
	st := newTestStore[w](t, pool)

	reader, err := pool.Begin(bg)
	require.NoError(t, err)
	defer reader.Rollback(bg)
	_, err = reader.Exec(bg, "LOCK TABLE "+st.names.table+" IN ACCESS SHARE MODE")
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(bg, 5*time.Second)
	defer cancel()
	require.NoError(t, st.Migrate(ctx), "Migrate beside a transaction that reads the table")
	require.NoError(t, reader.Rollback(bg))

	_, err = pool.Exec(bg, "DROP INDEX "+st.names.prunableIndex)
	require.NoError(t, err)
	require.NoError(t, st.Migrate(bg))
	var present bool
	require.NoError(t, pool.QueryRow(bg, "SELECT to_regclass($1) IS NOT NULL", st.names.prunableIndex).Scan(&present))
	assert.True(t, present, "Migrate makes the index again")
}

// TestMigrateLockIsTheTablesWhateverItsSpelling: "t" and "public.t" (with the
// default search_path) are one table, so Migrate under either spelling waits
// while a transaction holds the lock of the other; the lock of another table
// does not hold it up.
func TestMigrateLockIsTheTablesWhateverItsSpelling(t *testing.T) {
	admin := testPool(t, 2)
	table := testTable(t, admin)
	for _, c := range []struct{ holds, waits string }{
		{table, "public." + table},
		{"public." + table, table},
	} {
		t.Run(c.holds+" holds", func(t *testing.T) {
			holding, err := New[w](admin, WithTable(c.holds))
			require.NoError(t, err)
			pool := testPool(t, 1)
			waiting, err := New[w](pool, WithTable(c.waits))
			require.NoError(t, err)
			pid := backendPID(t, pool)

			tx, err := admin.Begin(bg)
			require.NoError(t, err)
			defer tx.Rollback(bg)
			require.NoError(t, holding.lock(bg, tx))
			done := make(chan error, 1)
			go func() { done <- waiting.Migrate(bg) }()
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
				select {
				case err := <-done:
					require.Fail(t, "Migrate did not wait for the lock held under the other spelling", "Migrate(%s) returned %v", c.waits, err)
				default:
				}
				var advisory bool
				require.NoError(t, admin.QueryRow(bg, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND wait_event = 'advisory')`, pid).Scan(&advisory))
				if advisory {
					break
				}
				require.True(t, time.Now().Before(deadline), "Migrate(%s) neither returned nor waited on an advisory lock", c.waits)
			}

			// Another table's lock is another lock.
			other, err := New[w](admin, WithTable("public."+testTable(t, admin)))
			require.NoError(t, err)
			ctx, cancel := context.WithTimeout(bg, 5*time.Second)
			defer cancel()
			require.NoError(t, other.Migrate(ctx), "Migrate of another table")

			require.NoError(t, tx.Commit(bg))
			require.NoError(t, <-done, "Migrate(%s) once the lock is free", c.waits)
		})
	}
}

// TestMigrateRecordsTheHooksCommand: a Store with a hook records its
// Command on the table as it migrates it, once (an up-to-date table and the
// same comment take no lock: it runs beside a reader), and HookedBy reads it
// back; a Store without hooks records nothing, nor does it clear the mark.
// New refuses a Command that would not print as given.
func TestMigrateRecordsTheHooksCommand(t *testing.T) {
	pool := testPool(t, 2)
	table := testTable(t, pool)
	plain, err := New[w](pool, WithTable(table))
	require.NoError(t, err)
	require.NoError(t, plain.Migrate(bg))
	_, hooked, err := plain.HookedBy(bg)
	require.NoError(t, err)
	assert.False(t, hooked, "a table migrated without hooks")

	nop := func(context.Context, pgx.Tx, string, string, driverRecord) error { return nil }
	for _, c := range []struct {
		h    Hooks[w]
		want string
	}{
		{Hooks[w]{Released: nop}, ""},
		{Hooks[w]{Claimed: nop, Command: "payoutd ctl"}, "payoutd ctl"},
		{Hooks[w]{Settled: nop, Command: "it's ctl"}, "it's ctl"},
	} {
		st, err := New[w](pool, WithTable(table), WithHooks(c.h))
		require.NoError(t, err)
		require.NoError(t, st.Migrate(bg))
		for _, s := range []*Store[w]{st, plain} {
			command, hooked, err := s.HookedBy(bg)
			require.NoError(t, err)
			assert.True(t, hooked, "%q", c.want)
			assert.Equal(t, c.want, command)
		}
		reader, err := pool.Begin(bg)
		require.NoError(t, err)
		_, err = reader.Exec(bg, "LOCK TABLE "+table+" IN SHARE UPDATE EXCLUSIVE MODE")
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(bg, 2*time.Second)
		require.NoError(t, st.Migrate(ctx), "Migrate of a table marked already takes no lock")
		cancel()
		require.NoError(t, reader.Rollback(bg))
	}
	require.NoError(t, plain.Migrate(bg))
	command, hooked, err := plain.HookedBy(bg)
	require.NoError(t, err)
	assert.True(t, hooked, "a Migrate without hooks leaves the mark")
	assert.Equal(t, "it's ctl", command)

	_, err = pool.Exec(bg, "COMMENT ON TABLE "+table+" IS 'the team''s own words'")
	require.NoError(t, err)
	_, hooked, err = plain.HookedBy(bg)
	require.NoError(t, err)
	assert.False(t, hooked, "a comment of another's is no mark")
	_, err = pool.Exec(bg, "COMMENT ON TABLE "+table+" IS NULL")
	require.NoError(t, err)

	for _, bad := range []string{strings.Repeat("c", 201), "\xff", "a\x00b"} {
		_, err := New[w](pool, WithHooks(Hooks[w]{Released: nop, Command: bad}))
		require.ErrorContains(t, err, "Hooks.Command", "%q", bad)
	}
}
