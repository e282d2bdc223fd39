package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemledger/submissions"
	"github.com/idemledger/submissions/admin"
	"github.com/idemledger/submissions/driver"
)

// txFixture is a Store on a pool, beside the service's own tables that
// work writes: a sale row per call, and customer 1's total due.
type txFixture struct {
	pool             *pgxpool.Pool
	st               *Store[w]
	sales, customers string
}

func newTxFixture(t *testing.T, conns int32) *txFixture {
	t.Helper()
	pool := testPool(t, conns)
	f := &txFixture{pool: pool, st: newTestStore[w](t, pool), sales: testTable(t, pool), customers: testTable(t, pool)}
	f.exec(t, pool, `CREATE TABLE `+f.sales+` (id serial PRIMARY KEY, key text NOT NULL, amount numeric NOT NULL)`)
	f.exec(t, pool, `CREATE TABLE `+f.customers+` (id int PRIMARY KEY, total_due numeric NOT NULL)`)
	f.exec(t, pool, `INSERT INTO `+f.customers+` VALUES (1, 0)`)
	return f
}

func (f *txFixture) exec(t *testing.T, q interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}, sql string, args ...any) {
	t.Helper()
	_, err := q.Exec(bg, sql, args...)
	require.NoError(t, err, sql)
}

// begin begins a transaction on f's pool, rolled back when t ends (a no-op
// once it has ended).
func (f *txFixture) begin(t *testing.T) pgx.Tx {
	t.Helper()
	tx, err := f.pool.Begin(bg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(bg) })
	return tx
}

// work returns a work that records a sale of the withdrawal under key and
// adds its amount to customer 1's total due, and answers it sent; and the
// count of its calls.
func (f *txFixture) work(key string) (func(context.Context, pgx.Tx, w) (w, error), *atomic.Int64) {
	calls := &atomic.Int64{}
	return func(ctx context.Context, tx pgx.Tx, x w) (w, error) {
		calls.Add(1)
		if _, err := tx.Exec(ctx, `INSERT INTO `+f.sales+` (key, amount) VALUES ($1, $2)`, key, x.Amount); err != nil {
			return x, err
		}
		if _, err := tx.Exec(ctx, `UPDATE `+f.customers+` SET total_due = total_due + $1 WHERE id = 1`, x.Amount); err != nil {
			return x, err
		}
		return sent(x, "0xtx-"+key), nil
	}, calls
}

// requireWritten stops t unless the sales of key are sales rows, and the
// customer's total due is due.
func (f *txFixture) requireWritten(t *testing.T, key string, sales int, due string) {
	t.Helper()
	var n int
	var got string
	require.NoError(t, f.pool.QueryRow(bg, `SELECT count(*) FROM `+f.sales+` WHERE key = $1`, key).Scan(&n))
	require.NoError(t, f.pool.QueryRow(bg, `SELECT total_due::text FROM `+f.customers+` WHERE id = 1`).Scan(&got))
	assert.Equal(t, sales, n, "sale rows of %s", key)
	assert.Equal(t, due, got, "total due")
}

// end ends tx, aborted by SubmitTx: a "commit" rolls back as a
// "rollback" does.
func (f *txFixture) end(t *testing.T, tx pgx.Tx, end string) {
	t.Helper()
	if end == "commit" {
		require.ErrorIs(t, tx.Commit(bg), pgx.ErrTxCommitRollback, "an aborted transaction does not commit")
		return
	}
	require.NoError(t, tx.Rollback(bg))
}

// requireUnclaimed stops t unless neither key nor withdrawal id has a row.
func (f *txFixture) requireUnclaimed(t *testing.T, key, id string) {
	t.Helper()
	_, found, err := f.st.Lookup(bg, "", key)
	require.NoError(t, err)
	assert.False(t, found, "a record of %s", key)
	holder, held, err := f.st.ClaimedBy(bg, "", id)
	require.NoError(t, err)
	assert.False(t, held, "a claim of %s (by %q)", id, holder)
}

// rows returns the count of rows in f's Store's table.
func (f *txFixture) rows(t *testing.T) int {
	t.Helper()
	var n int
	require.NoError(t, f.pool.QueryRow(bg, `SELECT count(*) FROM `+f.st.names.table).Scan(&n))
	return n
}

// requireUsable stops t unless tx takes a read and a write, and commits.
func (f *txFixture) requireUsable(t *testing.T, tx pgx.Tx) {
	t.Helper()
	var id int
	f.exec(t, tx, `SELECT 1`)
	require.NoError(t, tx.QueryRow(bg, `INSERT INTO `+f.sales+` (key, amount) VALUES ('usable', 1) RETURNING id`).Scan(&id))
	require.NoError(t, tx.Commit(bg), "commit after the refusal")
	var n int
	require.NoError(t, f.pool.QueryRow(bg, `SELECT count(*) FROM `+f.sales+` WHERE id = $1`, id).Scan(&n))
	assert.Equal(t, 1, n, "the row written after the refusal")
}

type txResult struct {
	out      w
	replayed bool
	err      error
}

// goSubmitTx runs SubmitTx in a goroutine of its own.
func goSubmitTx(ctx context.Context, st *Store[w], tx pgx.Tx, key string, x w, work func(context.Context, pgx.Tx, w) (w, error)) <-chan txResult {
	done := make(chan txResult, 1)
	go func() {
		out, replayed, err := SubmitTx(ctx, st, tx, "", key, x, work)
		done <- txResult{out, replayed, err}
	}()
	return done
}

// requireBlocked stops t unless tx's backend waits on a lock and the call
// of done has not returned 200ms later.
func (f *txFixture) requireBlocked(t *testing.T, tx pgx.Tx, done <-chan txResult) {
	t.Helper()
	waitForLock(t, f.pool, int(tx.Conn().PgConn().PID()))
	select {
	case r := <-done:
		require.Failf(t, "SubmitTx returned while the other transaction was open", "%+v", r)
	case <-time.After(200 * time.Millisecond):
	}
}

func receive(t *testing.T, done <-chan txResult) txResult {
	t.Helper()
	select {
	case r := <-done:
		return r
	case <-time.After(10 * time.Second):
		require.FailNow(t, "SubmitTx has not returned after 10s")
	}
	return txResult{}
}

// TestSubmitTxSameKey: a second transaction's claim of a key that an open
// one claimed waits for it; after a commit it replays the first's outcome,
// its work not called, and stays usable; after a rollback it claims.
func TestSubmitTxSameKey(t *testing.T) {
	x := newW("w-1")
	t.Run("first commits", func(t *testing.T) {
		f := newTxFixture(t, 4)
		tx1, tx2 := f.begin(t), f.begin(t)
		work1, calls1 := f.work("req-1")
		out1, replayed, err := SubmitTx(bg, f.st, tx1, "", "req-1", x, work1)
		require.NoError(t, err)
		require.False(t, replayed)
		work2, calls2 := f.work("req-1")
		done := goSubmitTx(bg, f.st, tx2, "req-1", x, work2)
		f.requireBlocked(t, tx2, done)
		require.NoError(t, tx1.Commit(bg))
		r := receive(t, done)
		require.NoError(t, r.err)
		assert.True(t, r.replayed, "replayed")
		assert.Equal(t, out1, r.out, "the first's outcome")
		assert.Equal(t, int64(1), calls1.Load())
		assert.Zero(t, calls2.Load(), "the second's work")
		f.requireUsable(t, tx2)
		f.requireWritten(t, "req-1", 1, "25.00")
	})
	t.Run("first rolls back", func(t *testing.T) {
		f := newTxFixture(t, 4)
		tx1, tx2 := f.begin(t), f.begin(t)
		work1, _ := f.work("req-1")
		_, _, err := SubmitTx(bg, f.st, tx1, "", "req-1", x, work1)
		require.NoError(t, err)
		work2, calls2 := f.work("req-1")
		done := goSubmitTx(bg, f.st, tx2, "req-1", x, work2)
		f.requireBlocked(t, tx2, done)
		require.NoError(t, tx1.Rollback(bg))
		r := receive(t, done)
		require.NoError(t, r.err)
		assert.False(t, r.replayed)
		assert.Equal(t, sent(x, "0xtx-req-1"), r.out)
		assert.Equal(t, int64(1), calls2.Load(), "the second's work")
		require.NoError(t, tx2.Commit(bg))
		f.requireWritten(t, "req-1", 1, "25.00")
		got, ok, err := f.st.Lookup(bg, "", "req-1")
		require.NoError(t, err)
		require.True(t, ok)
		assert.Equal(t, r.out, got.Outcome)
	})
}

// submitAtOnce runs pgstore.Submit of keys[i] for withdrawal x from
// len(keys) goroutines, released together, each on a connection of its own.
func (f *txFixture) submitAtOnce(t *testing.T, keys []string, x w) ([]txResult, int64) {
	t.Helper()
	var calls atomic.Int64
	results := make([]txResult, len(keys))
	var ready, done sync.WaitGroup
	start := make(chan struct{})
	for i, key := range keys {
		work, n := f.work(key)
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			defer func() { calls.Add(n.Load()) }()
			ready.Done()
			<-start
			out, replayed, err := Submit(bg, f.st, "", key, x, work)
			results[i] = txResult{out, replayed, err}
		}()
	}
	ready.Wait()
	close(start)
	done.Wait()
	return results, calls.Load()
}

// TestSubmitTxConcurrentCallers: callers of Submit released together, each
// in a transaction on a connection of its own: for one key, the work runs
// once and all get its outcome; for one withdrawal under many keys, one
// key's work runs and the others are refused, naming it.
func TestSubmitTxConcurrentCallers(t *testing.T) {
	const callers = 16
	x := newW("w-1")
	t.Run("one key", func(t *testing.T) {
		f := newTxFixture(t, callers+2)
		keys := make([]string, callers)
		for i := range keys {
			keys[i] = "req-1"
		}
		results, calls := f.submitAtOnce(t, keys, x)
		assert.Equal(t, int64(1), calls, "work calls")
		fresh := 0
		for _, r := range results {
			require.NoError(t, r.err)
			assert.Equal(t, sent(x, "0xtx-req-1"), r.out)
			if !r.replayed {
				fresh++
			}
		}
		assert.Equal(t, 1, fresh, "callers not replayed")
		f.requireWritten(t, "req-1", 1, "25.00")
	})
	t.Run("one withdrawal", func(t *testing.T) {
		f := newTxFixture(t, callers+2)
		keys := make([]string, callers)
		for i := range keys {
			keys[i] = fmt.Sprint("req-", i)
		}
		results, calls := f.submitAtOnce(t, keys, x)
		assert.Equal(t, int64(1), calls, "work calls")
		winner := ""
		for i, r := range results {
			if r.err == nil {
				require.Empty(t, winner, "a second winner")
				winner = keys[i]
			}
		}
		require.NotEmpty(t, winner)
		for i, r := range results {
			if keys[i] != winner {
				var ce *submissions.ConflictError
				require.ErrorAs(t, r.err, &ce, keys[i])
				assert.Equal(t, winner, ce.Holder)
			}
		}
		f.requireWritten(t, winner, 1, "25.00")
	})
}

// TestSubmitTxWithdrawalClaimed: a second key for a withdrawal another key
// claimed, committed or in a transaction still open (waited for), is a
// *ConflictError naming the holder, work not called, the transaction
// usable; after the open one rolls back, the second key claims it.
func TestSubmitTxWithdrawalClaimed(t *testing.T) {
	x := newW("w-1")
	conflict := func(t *testing.T, err error) {
		t.Helper()
		var ce *submissions.ConflictError
		require.ErrorAs(t, err, &ce)
		assert.Equal(t, "req-1", ce.Holder)
		assert.ErrorIs(t, err, submissions.ErrIdempotencyConflict)
	}
	t.Run("committed", func(t *testing.T) {
		f := newTxFixture(t, 4)
		work1, _ := f.work("req-1")
		_, _, err := Submit(bg, f.st, "", "req-1", x, work1)
		require.NoError(t, err)
		tx := f.begin(t)
		work2, calls2 := f.work("req-2")
		_, _, err = SubmitTx(bg, f.st, tx, "", "req-2", x, work2)
		conflict(t, err)
		assert.Zero(t, calls2.Load(), "the second's work")
		f.requireUsable(t, tx)
		f.requireWritten(t, "req-2", 0, "25.00")
	})
	t.Run("open, then committed", func(t *testing.T) {
		f := newTxFixture(t, 4)
		tx1, tx2 := f.begin(t), f.begin(t)
		work1, _ := f.work("req-1")
		_, _, err := SubmitTx(bg, f.st, tx1, "", "req-1", x, work1)
		require.NoError(t, err)
		work2, calls2 := f.work("req-2")
		done := goSubmitTx(bg, f.st, tx2, "req-2", x, work2)
		f.requireBlocked(t, tx2, done)
		require.NoError(t, tx1.Commit(bg))
		conflict(t, receive(t, done).err)
		assert.Zero(t, calls2.Load(), "the second's work")
		f.requireUsable(t, tx2)
		f.requireWritten(t, "req-1", 1, "25.00")
	})
	t.Run("open, then rolled back", func(t *testing.T) {
		f := newTxFixture(t, 4)
		tx1, tx2 := f.begin(t), f.begin(t)
		work1, _ := f.work("req-1")
		_, _, err := SubmitTx(bg, f.st, tx1, "", "req-1", x, work1)
		require.NoError(t, err)
		work2, calls2 := f.work("req-2")
		done := goSubmitTx(bg, f.st, tx2, "req-2", x, work2)
		f.requireBlocked(t, tx2, done)
		require.NoError(t, tx1.Rollback(bg))
		r := receive(t, done)
		require.NoError(t, r.err)
		assert.Equal(t, int64(1), calls2.Load(), "the second's work")
		require.NoError(t, tx2.Commit(bg))
		holder, _, err := f.st.ClaimedBy(bg, "", x.ID)
		require.NoError(t, err)
		assert.Equal(t, "req-2", holder)
		f.requireWritten(t, "req-1", 0, "25.00")
		f.requireWritten(t, "req-2", 1, "25.00")
	})
}

// TestSubmitTxWorkFails: a work that returns an error, panics, fails a
// statement or answers for another withdrawal: the error (or the panic)
// comes back, and no claim stands after a rollback, nor after a commit.
func TestSubmitTxWorkFails(t *testing.T) {
	x := newW("w-1")
	errRail := errors.New("the rail is down")
	for _, c := range []struct {
		name string
		work func(context.Context, pgx.Tx, w) (w, error)
		want error
	}{
		{"error", func(context.Context, pgx.Tx, w) (w, error) { return w{}, errRail }, errRail},
		{"another withdrawal", func(_ context.Context, _ pgx.Tx, x w) (w, error) {
			x.Amount = "26.00"
			return sent(x, "0xtx"), nil
		}, submissions.ErrInvalidFingerprint},
	} {
		for _, end := range []string{"rollback", "commit"} {
			t.Run(c.name+", "+end, func(t *testing.T) {
				f := newTxFixture(t, 4)
				tx := f.begin(t)
				work, calls := f.work("req-1")
				_, _, err := SubmitTx(bg, f.st, tx, "", "req-1", x, func(ctx context.Context, tx pgx.Tx, x w) (w, error) {
					if _, err := work(ctx, tx, x); err != nil {
						return x, err
					}
					return c.work(ctx, tx, x)
				})
				require.ErrorIs(t, err, c.want)
				require.Equal(t, int64(1), calls.Load())
				f.end(t, tx, end)
				f.requireWritten(t, "req-1", 0, "0")
				f.requireUnclaimed(t, "req-1", x.ID)
			})
		}
	}
	for _, end := range []string{"rollback", "commit"} {
		t.Run("panic, "+end, func(t *testing.T) {
			f := newTxFixture(t, 4)
			tx := f.begin(t)
			work, _ := f.work("req-1")
			require.PanicsWithValue(t, "work panicked", func() {
				_, _, _ = SubmitTx(bg, f.st, tx, "", "req-1", x, func(ctx context.Context, tx pgx.Tx, x w) (w, error) {
					_, _ = work(ctx, tx, x)
					panic("work panicked")
				})
			})
			f.end(t, tx, end)
			f.requireWritten(t, "req-1", 0, "0")
			f.requireUnclaimed(t, "req-1", x.ID)
		})
	}
	t.Run("in a savepoint, rolled back to", func(t *testing.T) {
		f := newTxFixture(t, 4)
		tx := f.begin(t)
		f.exec(t, tx, `UPDATE `+f.customers+` SET total_due = 7 WHERE id = 1`)
		sp, err := tx.Begin(bg)
		require.NoError(t, err)
		work, _ := f.work("req-1")
		_, _, err = SubmitTx(bg, f.st, sp, "", "req-1", x, func(ctx context.Context, tx pgx.Tx, x w) (w, error) {
			_, _ = work(ctx, tx, x)
			return x, errRail
		})
		require.ErrorIs(t, err, errRail)
		require.NoError(t, sp.Rollback(bg), "back to the savepoint")
		require.NoError(t, tx.Commit(bg), "the writes before the savepoint commit")
		f.requireWritten(t, "req-1", 0, "7")
		f.requireUnclaimed(t, "req-1", x.ID)
	})
	t.Run("a statement of work fails", func(t *testing.T) {
		f := newTxFixture(t, 4)
		tx := f.begin(t)
		_, _, err := SubmitTx(bg, f.st, tx, "", "req-1", x, func(ctx context.Context, tx pgx.Tx, x w) (w, error) {
			_, err := tx.Exec(ctx, `SELECT 1/0`)
			return x, err
		})
		require.ErrorContains(t, err, "division by zero")
		require.ErrorIs(t, tx.Commit(bg), pgx.ErrTxCommitRollback, "the aborted transaction rolls back")
		f.requireUnclaimed(t, "req-1", x.ID)
	})
	t.Run("pgstore.Submit rolls back after a panic", func(t *testing.T) {
		f := newTxFixture(t, 1)
		work, calls := f.work("req-1")
		require.PanicsWithValue(t, "work panicked", func() {
			_, _, _ = Submit(bg, f.st, "", "req-1", x, func(ctx context.Context, tx pgx.Tx, x w) (w, error) {
				_, _ = work(ctx, tx, x)
				panic("work panicked")
			})
		})
		assert.Zero(t, f.pool.Stat().AcquiredConns(), "the connection is back in the pool")
		ctx, cancel := context.WithTimeout(bg, 5*time.Second)
		defer cancel()
		_, replayed, err := Submit(ctx, f.st, "", "req-1", x, work)
		require.NoError(t, err, "the key is free: nobody holds it open")
		assert.False(t, replayed)
		assert.Equal(t, int64(2), calls.Load())
		f.requireWritten(t, "req-1", 1, "25.00")
	})
	t.Run("work cannot end the transaction", func(t *testing.T) {
		for _, end := range []string{"commit", "rollback"} {
			f := newTxFixture(t, 4)
			tx := f.begin(t)
			_, _, err := SubmitTx(bg, f.st, tx, "", "req-1", x, func(ctx context.Context, tx pgx.Tx, x w) (w, error) {
				if end == "commit" {
					return x, tx.Commit(ctx)
				}
				return x, tx.Rollback(ctx)
			})
			require.ErrorContains(t, err, "cannot end the transaction", end)
			require.ErrorIs(t, tx.Commit(bg), pgx.ErrTxCommitRollback, "the transaction is the caller's still, and aborted")
			f.requireUnclaimed(t, "req-1", x.ID)
		}
	})
	t.Run("pgstore.Submit rolls back", func(t *testing.T) {
		f := newTxFixture(t, 4)
		work, _ := f.work("req-1")
		_, _, err := Submit(bg, f.st, "", "req-1", x, func(ctx context.Context, tx pgx.Tx, x w) (w, error) {
			_, _ = work(ctx, tx, x)
			return x, errRail
		})
		require.ErrorIs(t, err, errRail)
		f.requireWritten(t, "req-1", 0, "0")
		f.requireUnclaimed(t, "req-1", x.ID)
	})
}

// TestSubmitTxRefusesWhatSubmitRefuses: bad keys, tenants and fingerprints,
// a nil request, and a settled key asked for another withdrawal get the
// ledger's Submit's errors for the same input; nothing is written, work is
// not called, and the transaction stays usable.
func TestSubmitTxRefusesWhatSubmitRefuses(t *testing.T) {
	f := newTxFixture(t, 4)
	ledger := submissions.NewWithStore[w](f.st, submissions.WithLogger(quiet))
	settle, _ := f.work("settled")
	_, _, err := Submit(bg, f.st, "", "settled", newW("w-settled"), settle)
	require.NoError(t, err)
	withAmount := func(a string) w { x := newW("w-1"); x.Amount = a; return x }
	withID := func(id string) w { return newW(id) }
	for _, c := range []struct {
		name, tenant, key string
		x                 w
		want              error
	}{
		{"empty key", "", "  ", newW("w-1"), submissions.ErrInvalidKey},
		{"long key", "", strings.Repeat("k", 256), newW("w-1"), submissions.ErrInvalidKey},
		{"invalid UTF-8 key", "", "req-\xff", newW("w-1"), submissions.ErrInvalidKey},
		{"NUL in key", "", "req\x00-1", newW("w-1"), submissions.ErrInvalidKey},
		{"long tenant", strings.Repeat("t", 65), "req-1", newW("w-1"), submissions.ErrInvalidTenant},
		{"invalid UTF-8 tenant", "t-\xff", "req-1", newW("w-1"), submissions.ErrInvalidTenant},
		{"NUL in tenant", "t\x00", "req-1", newW("w-1"), submissions.ErrInvalidTenant},
		{"zero amount", "", "req-1", withAmount("0.00"), submissions.ErrInvalidFingerprint},
		{"signed amount", "", "req-1", withAmount("-25"), submissions.ErrInvalidFingerprint},
		{"empty withdrawal id", "", "req-1", withID(""), submissions.ErrInvalidFingerprint},
		{"settled key, another withdrawal", "", "settled", newW("w-other"), submissions.ErrIdempotencyConflict},
		{"settled key, another amount", "", "settled", func() w { x := newW("w-settled"); x.Amount = "26"; return x }(), submissions.ErrIdempotencyConflict},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := f.rows(t)
			tx := f.begin(t)
			work, calls := f.work(c.key)
			_, _, txErr := SubmitTx(bg, f.st, tx, c.tenant, c.key, c.x, work)
			require.ErrorIs(t, txErr, c.want)
			_, ledgerErr := ledger.Tenant(c.tenant).Submit(bg, c.key, c.x, nil)
			require.ErrorIs(t, ledgerErr, c.want)
			assert.Equal(t, ledgerErr.Error(), txErr.Error(), "the ledger's error")
			assert.Zero(t, calls.Load(), "work calls")
			f.requireUsable(t, tx)
			assert.Equal(t, before, f.rows(t), "rows")
		})
	}
	t.Run("nil request", func(t *testing.T) {
		st, err := New[*w](f.pool, WithTable(f.st.names.base))
		require.NoError(t, err)
		tx := f.begin(t)
		called := false
		_, _, txErr := SubmitTx(bg, st, tx, "", "req-1", nil, func(context.Context, pgx.Tx, *w) (*w, error) { called = true; return nil, nil })
		require.ErrorIs(t, txErr, submissions.ErrInvalidFingerprint)
		_, ledgerErr := submissions.NewWithStore[*w](st, submissions.WithLogger(quiet)).Submit(bg, "req-1", nil, nil)
		assert.Equal(t, ledgerErr.Error(), txErr.Error(), "the ledger's error")
		assert.False(t, called, "work called")
		f.requireUnclaimed(t, "req-1", "w-1")
	})
}

// TestSubmitChecksBeforeBegin: Submit refuses bad input before it takes a
// connection, so a pool that is closed (or a server that is down) does not
// hide the input's error behind a store failure.
func TestSubmitChecksBeforeBegin(t *testing.T) {
	f := newTxFixture(t, 1)
	closed := testPool(t, 1)
	closed.Close()
	st, err := New[w](closed, WithTable(f.st.names.base))
	require.NoError(t, err)
	work, calls := f.work("req-1")
	for _, c := range []struct {
		name, tenant, key string
		x                 w
		want              error
	}{
		{"empty key", "", " ", newW("w-1"), submissions.ErrInvalidKey},
		{"NUL in tenant", "t\x00", "req-1", newW("w-1"), submissions.ErrInvalidTenant},
		{"empty withdrawal id", "", "req-1", newW(""), submissions.ErrInvalidFingerprint},
	} {
		_, _, err := Submit(bg, st, c.tenant, c.key, c.x, work)
		assert.ErrorIs(t, err, c.want, c.name)
		assert.NotErrorIs(t, err, submissions.ErrStoreFailed, c.name)
	}
	_, _, err = Submit(bg, st, "", "req-1", newW("w-1"), work)
	require.ErrorIs(t, err, submissions.ErrStoreFailed, "good input on a closed pool")
	assert.ErrorContains(t, err, "request key req-1: begin a transaction")
	assert.Zero(t, calls.Load(), "work calls")
}

// TestSubmitIsReadCommitted: on a pool whose sessions default to REPEATABLE
// READ, a Submit that waited on another's claim of its key still replays
// that one's outcome once it commits, rather than failing to serialize.
func TestSubmitIsReadCommitted(t *testing.T) {
	pool := testPoolWith(t, 4, func(c *pgxpool.Config) {
		c.ConnConfig.RuntimeParams["default_transaction_isolation"] = "repeatable read"
	})
	st := newTestStore[w](t, pool)
	x := newW("w-1")
	inWork, release := make(chan struct{}), make(chan struct{})
	var calls atomic.Int64
	first := make(chan txResult, 1)
	go func() {
		out, replayed, err := Submit(bg, st, "", "req-1", x, func(ctx context.Context, tx pgx.Tx, x w) (w, error) {
			calls.Add(1)
			var level string
			if err := tx.QueryRow(ctx, `SHOW transaction_isolation`).Scan(&level); err != nil {
				return x, err
			}
			if level != "read committed" {
				return x, fmt.Errorf("isolation %q", level)
			}
			close(inWork)
			<-release
			return sent(x, "0xtx"), nil
		})
		first <- txResult{out, replayed, err}
	}()
	select {
	case <-inWork:
	case r := <-first:
		require.FailNow(t, "the first Submit returned before its work ran", "%+v", r)
	}
	second := make(chan txResult, 1)
	go func() {
		out, replayed, err := Submit(bg, st, "", "req-1", x, func(context.Context, pgx.Tx, w) (w, error) {
			calls.Add(1)
			return x, errors.New("the second work ran")
		})
		second <- txResult{out, replayed, err}
	}()
	watch := testPool(t, 1)
	require.Eventually(t, func() bool {
		var waiting bool
		err := watch.QueryRow(bg, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%' || $1 || '%')`, st.names.table).Scan(&waiting)
		return err == nil && waiting
	}, 10*time.Second, 5*time.Millisecond, "the second Submit waits on the first's claim")
	close(release)
	r1, r2 := receive(t, first), receive(t, second)
	require.NoError(t, r1.err)
	require.NoError(t, r2.err, "the second, after the first committed")
	assert.True(t, r2.replayed)
	assert.Equal(t, r1.out, r2.out)
	assert.Equal(t, int64(1), calls.Load(), "work calls")
}

// TestSubmitTxKeyInFlight: a key that a ledger's Submit claimed, its send
// still running, is ErrSubmissionInFlight, and the transaction stays usable.
// TestSubmitCommitRefused: a COMMIT that the server refuses (here a
// deferred constraint that work's writes break) rolls back, and Submit says
// so: the key stays free, and a retry does the work.
func TestSubmitCommitRefused(t *testing.T) {
	x := newW("w-1")
	f := newTxFixture(t, 4)
	f.exec(t, f.pool, `ALTER TABLE `+f.sales+` ADD CONSTRAINT one_sale UNIQUE (key) DEFERRABLE INITIALLY DEFERRED`)
	work, calls := f.work("req-1")
	twice := func(ctx context.Context, tx pgx.Tx, x w) (w, error) {
		if _, err := work(ctx, tx, x); err != nil {
			return x, err
		}
		return work(ctx, tx, x)
	}
	_, _, err := Submit(bg, f.st, "", "req-1", x, twice)
	require.ErrorIs(t, err, submissions.ErrStoreFailed)
	assert.ErrorContains(t, err, "commit rolled back")
	assert.NotContains(t, err.Error(), "may or may not")
	assert.Equal(t, int64(2), calls.Load())
	f.requireWritten(t, "req-1", 0, "0")
	f.requireUnclaimed(t, "req-1", x.ID)
	_, replayed, err := Submit(bg, f.st, "", "req-1", x, work)
	require.NoError(t, err)
	assert.False(t, replayed)
	f.requireWritten(t, "req-1", 1, "25.00")
}

func TestRefused(t *testing.T) {
	assert.True(t, refused(fmt.Errorf("w: %w", &pgconn.PgError{SeverityUnlocalized: "ERROR", Code: "23505"})))
	assert.True(t, refused(&pgconn.PgError{Severity: "ERROR", Code: "40P01"}), "a server before 9.6")
	assert.False(t, refused(&pgconn.PgError{SeverityUnlocalized: "FATAL", Severity: "ERROR", Code: "57P01"}), "a session ended: the commit may stand")
	assert.False(t, refused(errors.New("ERROR")))
}

func TestSubmitTxKeyInFlight(t *testing.T) {
	f := newTxFixture(t, 4)
	ledger := submissions.NewWithStore[w](f.st, submissions.WithLogger(quiet))
	x := newW("w-1")
	sending, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := ledger.Submit(bg, "req-1", x, func(_ context.Context, x w) (w, error) {
			close(sending)
			<-release
			return sent(x, "0xledger"), nil
		})
		done <- err
	}()
	<-sending
	tx := f.begin(t)
	work, calls := f.work("req-1")
	_, _, err := SubmitTx(bg, f.st, tx, "", "req-1", x, work)
	require.ErrorIs(t, err, submissions.ErrSubmissionInFlight)
	assert.Zero(t, calls.Load(), "work calls")
	f.requireUsable(t, tx)
	close(release)
	require.NoError(t, <-done)
	f.requireWritten(t, "req-1", 0, "0")
}

// TestSubmitTxRefusesABadTransaction: a nil transaction, or one that has
// ended or is aborted, and a nil Store: an error, nothing claimed, work not
// called.
func TestSubmitTxRefusesABadTransaction(t *testing.T) {
	f := newTxFixture(t, 4)
	x := newW("w-1")
	ended := func(end func(pgx.Tx) error) func(t *testing.T) pgx.Tx {
		return func(t *testing.T) pgx.Tx {
			tx := f.begin(t)
			require.NoError(t, end(tx))
			return tx
		}
	}
	for _, c := range []struct {
		name string
		tx   func(t *testing.T) pgx.Tx
		want string
	}{
		{"nil", func(*testing.T) pgx.Tx { return nil }, "pgstore: nil transaction"},
		{"nil *pgxpool.Tx", func(*testing.T) pgx.Tx { return (*pgxpool.Tx)(nil) }, "pgstore: nil transaction"},
		{"committed", ended(func(tx pgx.Tx) error { return tx.Commit(bg) }), "the transaction has been committed or rolled back"},
		{"rolled back", ended(func(tx pgx.Tx) error { return tx.Rollback(bg) }), "the transaction has been committed or rolled back"},
		{"aborted", func(t *testing.T) pgx.Tx {
			tx := f.begin(t)
			_, err := tx.Exec(bg, `SELECT 1/0`)
			require.Error(t, err)
			return tx
		}, "the transaction is aborted by an earlier error"},
	} {
		t.Run(c.name, func(t *testing.T) {
			work, calls := f.work("req-1")
			var err error
			require.NotPanics(t, func() { _, _, err = SubmitTx(bg, f.st, c.tx(t), "", "req-1", x, work) })
			require.ErrorContains(t, err, c.want)
			assert.Zero(t, calls.Load(), "work calls")
			f.requireUnclaimed(t, "req-1", x.ID)
		})
	}
	t.Run("nil Store", func(t *testing.T) {
		work, calls := f.work("req-1")
		_, _, err := SubmitTx[w](bg, nil, f.begin(t), "", "req-1", x, work)
		require.EqualError(t, err, "pgstore: nil Store")
		_, _, err = Submit[w](bg, nil, "", "req-1", x, work)
		require.EqualError(t, err, "pgstore: nil Store")
		assert.Zero(t, calls.Load(), "work calls")
	})
}

// TestSubmitTxStopsWaitingWhenCtxEnds: a claim waiting for another
// transaction's returns promptly when its ctx is canceled or its deadline
// passes, with ctx's error.
func TestSubmitTxStopsWaitingWhenCtxEnds(t *testing.T) {
	x := newW("w-1")
	for _, c := range []struct {
		name string
		end  func(ctx context.Context, cancel context.CancelFunc) // ends ctx, and returns when it has
		want error
	}{
		{"canceled", func(_ context.Context, cancel context.CancelFunc) { cancel() }, context.Canceled},
		{"deadline", func(ctx context.Context, _ context.CancelFunc) { <-ctx.Done() }, context.DeadlineExceeded},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newTxFixture(t, 4)
			tx1, tx2 := f.begin(t), f.begin(t)
			work1, _ := f.work("req-1")
			_, _, err := SubmitTx(bg, f.st, tx1, "", "req-1", x, work1)
			require.NoError(t, err)
			ctx, cancel := context.WithTimeout(bg, time.Second)
			defer cancel()
			work2, calls2 := f.work("req-1")
			done := goSubmitTx(ctx, f.st, tx2, "req-1", x, work2)
			waitForLock(t, f.pool, int(tx2.Conn().PgConn().PID()))
			c.end(ctx, cancel)
			ended := time.Now()
			r := receive(t, done)
			assert.Less(t, time.Since(ended), 2*time.Second, "returned after ctx ended")
			require.Error(t, r.err)
			assert.ErrorIs(t, r.err, c.want, "error: %v", r.err)
			assert.Zero(t, calls2.Load(), "work calls")
			require.NoError(t, tx1.Rollback(bg))
			f.requireUnclaimed(t, "req-1", x.ID)
		})
	}
}

// TestSubmitTxOutcomeIsTheKeysEverywhere: an outcome committed by Submit is
// the key's outcome to a ledger's Submit, Outcome, ClaimedBy and Wait, on
// this instance and another; the listing of keys in flight leaves it out,
// and Prune prunes it as it prunes one a ledger recorded. The other way, a
// ledger's outcome is replayed by SubmitTx.
func TestSubmitTxOutcomeIsTheKeysEverywhere(t *testing.T) {
	f := newTxFixture(t, 4)
	x := newW("w-1")
	work, _ := f.work("req-1")
	want, _, err := Submit(bg, f.st, "", "req-1", x, work)
	require.NoError(t, err)

	other, err := New[w](testPool(t, 4), WithTable(f.st.names.base))
	require.NoError(t, err)
	for name, st := range map[string]*Store[w]{"this instance": f.st, "another instance": other} {
		t.Run(name, func(t *testing.T) {
			ledger := submissions.NewWithStore[w](st, submissions.WithLogger(quiet))
			sends := 0
			got, replayed, err := ledger.SubmitOrReplay(bg, "req-1", x, func(_ context.Context, x w) (w, error) { sends++; return x, nil })
			require.NoError(t, err)
			assert.True(t, replayed, "replayed")
			assert.Equal(t, want, got, "Submit")
			assert.Zero(t, sends, "sends")
			got, ok, err := ledger.Outcome(bg, "req-1")
			require.NoError(t, err)
			assert.True(t, ok)
			assert.Equal(t, want, got, "Outcome")
			holder, ok, err := ledger.ClaimedBy(bg, x.ID)
			require.NoError(t, err)
			assert.True(t, ok)
			assert.Equal(t, "req-1", holder, "ClaimedBy")
			ctx, cancel := context.WithTimeout(bg, 5*time.Second)
			defer cancel()
			got, err = ledger.Wait(ctx, "req-1")
			require.NoError(t, err)
			assert.Equal(t, want, got, "Wait")
		})
	}

	ledger := submissions.NewWithStore[w](f.st, submissions.WithLogger(quiet))
	_, err = ledger.Submit(bg, "req-open", newW("w-open"), func(context.Context, w) (w, error) { return w{}, errors.New("no answer") })
	require.ErrorIs(t, err, submissions.ErrOutcomeUnknown)
	claims, err := ledger.Admin().InFlight(bg, admin.InFlightQuery{})
	require.NoError(t, err)
	var listed []string
	for _, c := range claims {
		listed = append(listed, c.Key)
	}
	assert.Equal(t, []string{"req-open"}, listed, "keys in flight")

	t.Run("a ledger's outcome replayed by SubmitTx", func(t *testing.T) {
		out, err := ledger.Submit(bg, "req-ledger", newW("w-ledger"), func(_ context.Context, x w) (w, error) { return sent(x, "0xledger"), nil })
		require.NoError(t, err)
		work, calls := f.work("req-ledger")
		got, replayed, err := Submit(bg, f.st, "", "req-ledger", newW("w-ledger"), work)
		require.NoError(t, err)
		assert.True(t, replayed)
		assert.Equal(t, out, got)
		assert.Zero(t, calls.Load(), "work calls")
	})

	n, err := ledger.Admin().WithMinRetention(0).Prune(bg, time.Now(), 0)
	require.NoError(t, err)
	assert.Equal(t, 2, n, "pruned: req-1 and req-ledger")
	_, err = ledger.Submit(bg, "req-1", x, nil)
	require.ErrorIs(t, err, submissions.ErrPruned)
	work, calls := f.work("req-1")
	_, _, err = Submit(bg, f.st, "", "req-1", x, work)
	require.ErrorIs(t, err, submissions.ErrPruned, "SubmitTx of the pruned key")
	assert.Zero(t, calls.Load())
}

type driverRecord = driver.Record[w]

func TestRetryable(t *testing.T) {
	for code, want := range map[string]bool{"40P01": true, "40001": true, "23505": false, "57014": false} {
		err := fmt.Errorf("wrapped: %w", &pgconn.PgError{Code: code})
		assert.Equal(t, want, retryable(err), code)
	}
	assert.False(t, retryable(errors.New("40P01")), "not a server's error")
	assert.False(t, retryable(nil))
}

// hooksFixture is a ledger's table beside the service's withdrawals table,
// whose state the hooks move.
type hooksFixture struct {
	pool        *pgxpool.Pool
	table       string // the ledger's
	withdrawals string
}

func newHooksFixture(t *testing.T) *hooksFixture {
	t.Helper()
	pool := testPool(t, 4)
	f := &hooksFixture{pool: pool, table: testTable(t, pool), withdrawals: testTable(t, pool)}
	_, err := pool.Exec(bg, `CREATE TABLE `+f.withdrawals+` (id text PRIMARY KEY, state text NOT NULL)`)
	require.NoError(t, err)
	return f
}

// setState returns a hook that sets the withdrawal's state, to done when
// the record has an outcome.
func (f *hooksFixture) setState(state, done string) func(context.Context, pgx.Tx, string, string, driverRecord) error {
	return func(ctx context.Context, tx pgx.Tx, _, _ string, rec driverRecord) error {
		s := state
		if rec.Done {
			s = done
		}
		tag, err := tx.Exec(ctx, `UPDATE `+f.withdrawals+` SET state = $2 WHERE id = $1`, rec.Fingerprint.WithdrawalID, s)
		if err == nil && tag.RowsAffected() != 1 {
			err = fmt.Errorf("no withdrawal %s", rec.Fingerprint.WithdrawalID)
		}
		return err
	}
}

func (f *hooksFixture) hooks() Hooks[w] {
	return Hooks[w]{Claimed: f.setState("sending", "sent"), Settled: f.setState("sent", "sent"), Released: f.setState("approved", "approved")}
}

// ledger returns a ledger on a Store of f's table with h, and an approved
// withdrawal id.
func (f *hooksFixture) ledger(t *testing.T, h Hooks[w], id string) *submissions.Submissions[w] {
	t.Helper()
	st, err := New[w](f.pool, WithTable(f.table), WithHooks(h))
	require.NoError(t, err)
	require.NoError(t, st.Migrate(bg))
	_, err = f.pool.Exec(bg, `INSERT INTO `+f.withdrawals+` VALUES ($1, 'approved')`, id)
	require.NoError(t, err)
	return submissions.NewWithStore[w](st, submissions.WithLogger(quiet))
}

// state reads the withdrawal's state on a connection of the pool's.
func (f *hooksFixture) state(t *testing.T, id string) string {
	t.Helper()
	var s string
	require.NoError(t, f.pool.QueryRow(bg, `SELECT state FROM `+f.withdrawals+` WHERE id = $1`, id).Scan(&s))
	return s
}

func requireNoClaim(t *testing.T, ledger *submissions.Submissions[w], id string) {
	t.Helper()
	holder, held, err := ledger.ClaimedBy(bg, id)
	require.NoError(t, err)
	assert.False(t, held, "claimed by %q", holder)
}

// TestHooks: a Store's hooks write the service's rows in the transaction of
// each claim, settle and release, and a hook that fails rolls its change
// back.
func TestHooks(t *testing.T) {
	errHook := errors.New("the hook failed")
	t.Run("a send moves approved to sending to sent", func(t *testing.T) {
		f := newHooksFixture(t)
		ledger := f.ledger(t, f.hooks(), "w-1")
		var during string
		out, err := ledger.Submit(bg, "req-1", newW("w-1"), func(_ context.Context, x w) (w, error) {
			during = f.state(t, x.ID)
			return sent(x, "0xtx"), nil
		})
		require.NoError(t, err)
		assert.Equal(t, "sending", during, "during the send")
		assert.Equal(t, "sent", f.state(t, "w-1"), "after")
		got, ok, err := ledger.Outcome(bg, "req-1")
		require.NoError(t, err)
		assert.True(t, ok)
		assert.Equal(t, out, got)
	})
	t.Run("a send that sent nothing moves it back to approved", func(t *testing.T) {
		f := newHooksFixture(t)
		ledger := f.ledger(t, f.hooks(), "w-1")
		_, err := ledger.Submit(bg, "req-1", newW("w-1"), func(context.Context, w) (w, error) {
			return w{}, fmt.Errorf("declined: %w", submissions.ErrNotSent)
		})
		require.ErrorIs(t, err, submissions.ErrNotSent)
		assert.Equal(t, "approved", f.state(t, "w-1"))
		requireNoClaim(t, ledger, "w-1")
	})
	t.Run("Resolve and the operator's release", func(t *testing.T) {
		f := newHooksFixture(t)
		ledger := f.ledger(t, f.hooks(), "w-1")
		for _, id := range []string{"w-2", "w-3"} {
			_, err := f.pool.Exec(bg, `INSERT INTO `+f.withdrawals+` VALUES ($1, 'approved')`, id)
			require.NoError(t, err)
		}
		noAnswer := func(context.Context, w) (w, error) { return w{}, errors.New("timeout") }
		_, err := ledger.Submit(bg, "req-1", newW("w-1"), noAnswer)
		require.ErrorIs(t, err, submissions.ErrOutcomeUnknown)
		assert.Equal(t, "sending", f.state(t, "w-1"), "in flight")
		require.NoError(t, ledger.Resolve(bg, "req-1", sent(newW("w-1"), "0xfound")))
		assert.Equal(t, "sent", f.state(t, "w-1"), "resolved in flight")

		require.NoError(t, ledger.Resolve(bg, "req-2", sent(newW("w-2"), "0xfound")))
		assert.Equal(t, "sent", f.state(t, "w-2"), "resolved unknown")

		_, err = ledger.Submit(bg, "req-3", newW("w-3"), noAnswer)
		require.ErrorIs(t, err, submissions.ErrOutcomeUnknown)
		claims, err := ledger.Admin().InFlight(bg, admin.InFlightQuery{})
		require.NoError(t, err)
		require.Len(t, claims, 1)
		require.NoError(t, ledger.Admin().ReleaseClaim(bg, claims[0]))
		assert.Equal(t, "approved", f.state(t, "w-3"), "released by the operator")
	})
	t.Run("a Claimed hook that fails", func(t *testing.T) {
		for _, write := range []bool{false, true} {
			t.Run(fmt.Sprint("after its own write: ", write), func(t *testing.T) {
				f := newHooksFixture(t)
				h := f.hooks()
				claimed := h.Claimed
				h.Claimed = func(ctx context.Context, tx pgx.Tx, tenant, key string, rec driverRecord) error {
					if write {
						if err := claimed(ctx, tx, tenant, key, rec); err != nil {
							return err
						}
					}
					return errHook
				}
				ledger := f.ledger(t, h, "w-1")
				sends := 0
				_, err := ledger.Submit(bg, "req-1", newW("w-1"), func(_ context.Context, x w) (w, error) { sends++; return x, nil })
				require.ErrorIs(t, err, submissions.ErrStoreFailed)
				require.ErrorIs(t, err, errHook)
				assert.Zero(t, sends, "sends")
				assert.Equal(t, "approved", f.state(t, "w-1"))
				requireNoClaim(t, ledger, "w-1")
			})
		}
	})
	t.Run("a Settled hook that fails", func(t *testing.T) {
		f := newHooksFixture(t)
		h := f.hooks()
		h.Settled = func(context.Context, pgx.Tx, string, string, driverRecord) error { return errHook }
		ledger := f.ledger(t, h, "w-1")
		_, err := ledger.Submit(bg, "req-1", newW("w-1"), func(_ context.Context, x w) (w, error) { return sent(x, "0xtx"), nil })
		require.ErrorIs(t, err, submissions.ErrOutcomeNotRecorded)
		require.ErrorIs(t, err, errHook)
		assert.Equal(t, "sending", f.state(t, "w-1"), "the claim's state stands, not the settle's")
		_, ok, err := ledger.Outcome(bg, "req-1")
		require.NoError(t, err)
		assert.False(t, ok, "an outcome recorded")
	})
	t.Run("a Settled hook that fails in Resolve", func(t *testing.T) {
		f := newHooksFixture(t)
		h := f.hooks()
		settled := h.Settled
		fail := true
		h.Settled = func(ctx context.Context, tx pgx.Tx, tenant, key string, rec driverRecord) error {
			if fail {
				return errHook
			}
			return settled(ctx, tx, tenant, key, rec)
		}
		ledger := f.ledger(t, h, "w-1")
		_, err := ledger.Submit(bg, "req-1", newW("w-1"), func(context.Context, w) (w, error) { return w{}, errors.New("timeout") })
		require.ErrorIs(t, err, submissions.ErrOutcomeUnknown)
		err = ledger.Resolve(bg, "req-1", sent(newW("w-1"), "0xfound"))
		require.ErrorIs(t, err, errHook)
		assert.Equal(t, "sending", f.state(t, "w-1"))
		_, ok, err := ledger.Outcome(bg, "req-1")
		require.NoError(t, err)
		assert.False(t, ok, "an outcome recorded")
		fail = false
		require.NoError(t, ledger.Resolve(bg, "req-1", sent(newW("w-1"), "0xfound")), "resolved again")
		assert.Equal(t, "sent", f.state(t, "w-1"))
	})
	t.Run("a Released hook that fails", func(t *testing.T) {
		f := newHooksFixture(t)
		h := f.hooks()
		released := h.Released
		fail := true
		h.Released = func(ctx context.Context, tx pgx.Tx, tenant, key string, rec driverRecord) error {
			if fail {
				return errHook
			}
			return released(ctx, tx, tenant, key, rec)
		}
		ledger := f.ledger(t, h, "w-1")
		_, err := ledger.Submit(bg, "req-1", newW("w-1"), func(context.Context, w) (w, error) {
			return w{}, fmt.Errorf("declined: %w", submissions.ErrNotSent)
		})
		require.ErrorIs(t, err, errHook)
		require.ErrorIs(t, err, submissions.ErrStoreFailed)
		assert.NotErrorIs(t, err, submissions.ErrNotSent, "the claim was not released")
		assert.ErrorContains(t, err, "send moved nothing", "the rail's word is kept")
		assert.Equal(t, "sending", f.state(t, "w-1"), "the claim stands, and its state")
		claims, err := ledger.Admin().InFlight(bg, admin.InFlightQuery{})
		require.NoError(t, err)
		require.Len(t, claims, 1, "the claim is the operator's to close")
		assert.True(t, claims[0].Abandoned, "abandoned")
		fail = false
		require.NoError(t, ledger.Admin().ReleaseClaim(bg, claims[0]))
		assert.Equal(t, "approved", f.state(t, "w-1"), "released by the operator")
		requireNoClaim(t, ledger, "w-1")
	})
	t.Run("a change the server rolled back for a deadlock is made again", func(t *testing.T) {
		for _, fails := range []int{1, hookAttempts} {
			t.Run(fmt.Sprint("fails ", fails), func(t *testing.T) {
				f := newHooksFixture(t)
				h := f.hooks()
				claimed, calls := h.Claimed, 0
				h.Claimed = func(ctx context.Context, tx pgx.Tx, tenant, key string, rec driverRecord) error {
					calls++
					if err := claimed(ctx, tx, tenant, key, rec); err != nil {
						return err
					}
					if calls <= fails {
						return &pgconn.PgError{Code: "40P01", Message: "deadlock detected"}
					}
					return nil
				}
				ledger := f.ledger(t, h, "w-1")
				sends := 0
				_, err := ledger.Submit(bg, "req-1", newW("w-1"), func(_ context.Context, x w) (w, error) { sends++; return sent(x, "0xtx"), nil })
				if fails == hookAttempts {
					require.ErrorIs(t, err, submissions.ErrStoreFailed)
					assert.ErrorContains(t, err, "deadlock detected")
					assert.Equal(t, hookAttempts, calls, "attempts")
					assert.Zero(t, sends, "sends")
					assert.Equal(t, "approved", f.state(t, "w-1"))
					requireNoClaim(t, ledger, "w-1")
					return
				}
				require.NoError(t, err)
				assert.Equal(t, 2, calls, "attempts")
				assert.Equal(t, 1, sends, "sends")
				assert.Equal(t, "sent", f.state(t, "w-1"))
			})
		}
	})
	t.Run("a hook's error does not carry a ledger's class", func(t *testing.T) {
		f := newHooksFixture(t)
		h := f.hooks()
		h.Settled = func(context.Context, pgx.Tx, string, string, driverRecord) error {
			return fmt.Errorf("the service's own: %w", submissions.ErrNotSent)
		}
		ledger := f.ledger(t, h, "w-1")
		_, err := ledger.Submit(bg, "req-1", newW("w-1"), func(_ context.Context, x w) (w, error) { return sent(x, "0xtx"), nil })
		require.ErrorIs(t, err, submissions.ErrOutcomeNotRecorded)
		assert.NotErrorIs(t, err, submissions.ErrNotSent, "the send moved money: its key stays in flight")
		assert.ErrorContains(t, err, "the service's own: not sent", "the hook's text is kept")
		assert.Equal(t, "sending", f.state(t, "w-1"))
	})
	t.Run("a hook that panics", func(t *testing.T) {
		f := newHooksFixture(t)
		h := f.hooks()
		claimed := h.Claimed
		h.Claimed = func(ctx context.Context, tx pgx.Tx, tenant, key string, rec driverRecord) error {
			if err := claimed(ctx, tx, tenant, key, rec); err != nil {
				return err
			}
			panic("the hook panicked")
		}
		ledger := f.ledger(t, h, "w-1")
		sends := 0
		require.PanicsWithValue(t, "the hook panicked", func() {
			_, _ = ledger.Submit(bg, "req-1", newW("w-1"), func(_ context.Context, x w) (w, error) { sends++; return x, nil })
		})
		assert.Zero(t, sends, "sends")
		assert.Equal(t, "approved", f.state(t, "w-1"))
		requireNoClaim(t, ledger, "w-1")
		assert.Zero(t, f.pool.Stat().AcquiredConns(), "connections taken")
	})
	t.Run("a Claimed or Settled hook makes claims and settles alone", func(t *testing.T) {
		nop := func(context.Context, pgx.Tx, string, string, driverRecord) error { return nil }
		for _, c := range []struct {
			name    string
			h       Hooks[w]
			grouped bool
		}{
			{"none", Hooks[w]{}, true},
			{"Released", Hooks[w]{Released: nop}, true},
			{"Claimed", Hooks[w]{Claimed: nop}, false},
			{"Settled", Hooks[w]{Settled: nop}, false},
			{"both", Hooks[w]{Claimed: nop, Settled: nop}, false},
		} {
			st, err := New[w](&pgxpool.Pool{}, WithHooks(c.h))
			require.NoError(t, err)
			assert.Equal(t, c.grouped, st.grouped, c.name)
		}
	})
	t.Run("New refuses hooks of another type", func(t *testing.T) {
		_, err := New[w](&pgxpool.Pool{}, WithHooks(Hooks[string]{}))
		require.Error(t, err)
		assert.Contains(t, err.Error(), "WithHooks")
	})
}
