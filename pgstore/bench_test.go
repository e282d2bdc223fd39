package pgstore

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemledger/submissions"
	"github.com/idemledger/submissions/admin"
	"github.com/idemledger/submissions/driver"
)

var quiet = slog.New(slog.DiscardHandler)

// The ledger on PostgreSQL runs beside its floor, the same round trips issued
// directly through pgx on the same schema, in turns inside one benchmark, so
// that the drift of a shared machine falls on both alike. Each turn runs
// callers goroutines at once, perWorker calls each, on one side and then the
// other. The figures are calls per second on each side and their ratio
// (ledger over floor: higher is better). Fresh submits and replays run with
// each of callerCounts; the others with workers.
const (
	workers   = 16
	perWorker = 25
)

var callerCounts = []int{1, 8, 64}

// floorSQL is the least a claim, an outcome and a replay cost on the schema:
// a claim returns its token, and the outcome is written on that claim. Every
// statement names the tenant, as the store's do; the benchmarks work in the
// default tenant, floorTenant. The floor does the ledger's job with no more:
// it encodes the outcome it writes and decodes the one it reads, with
// encoding/json as the store does by default.
type floorSQL struct{ insert, update, selectRow string }

const floorTenant = ""

func newFloor(table string) floorSQL {
	return floorSQL{
		insert:    `INSERT INTO ` + table + ` (tenant, request_key, withdrawal_id, amount, currency, destination) VALUES ($1, $2, $3, $4, $5, $6) RETURNING claim_id`,
		update:    `UPDATE ` + table + ` SET outcome = $4, settled_at = now() WHERE tenant = $1 AND request_key = $2 AND claim_id = $3 AND outcome IS NULL`,
		selectRow: `SELECT withdrawal_id, amount, currency, destination, outcome FROM ` + table + ` WHERE tenant = $1 AND request_key = $2`,
	}
}

// turns runs ledger(worker, n) and then floor(worker, n) for n in
// [turn*perWorker, (turn+1)*perWorker) on callers goroutines each, in turns,
// and reports both sides' calls per second and their ratio. With a pool, it
// reports the WAL bytes each side wrote per call too (nothing else should
// write meanwhile).
func turns(b *testing.B, callers int, pool *pgxpool.Pool, ledger, floor func(worker, n int) error) {
	turnsOf(b, callers, perWorker, pool, ledger, floor)
}

// turnsOf is turns with perWorker calls of each goroutine in a turn.
func turnsOf(b *testing.B, callers, perWorker int, pool *pgxpool.Pool, ledger, floor func(worker, n int) error) {
	side := func(turn int, f func(worker, n int) error) time.Duration {
		var wg sync.WaitGroup
		start := time.Now()
		for g := range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range perWorker {
					if err := f(g, turn*perWorker+i); !assert.NoError(b, err) {
						return
					}
				}
			}()
		}
		wg.Wait()
		return time.Since(start)
	}
	// One turn untimed, so that every connection has prepared the
	// statements of both sides: the figures are of a service running.
	side(0, ledger)
	side(0, floor)
	var ledgerTime, floorTime time.Duration
	var ledgerWAL, floorWAL int64
	turn := 1
	for b.Loop() {
		at := walAt(b, pool)
		ledgerTime += side(turn, ledger)
		mid := walAt(b, pool)
		floorTime += side(turn, floor)
		end := walAt(b, pool)
		ledgerWAL += walBetween(b, pool, at, mid)
		floorWAL += walBetween(b, pool, mid, end)
		turn++
	}
	calls := float64((turn - 1) * callers * perWorker)
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(calls/ledgerTime.Seconds(), "ledger-calls/s")
	b.ReportMetric(calls/floorTime.Seconds(), "floor-calls/s")
	b.ReportMetric(floorTime.Seconds()/ledgerTime.Seconds(), "ratio")
	if pool != nil {
		b.ReportMetric(float64(ledgerWAL)/calls, "ledger-WAL-B/call")
		b.ReportMetric(float64(floorWAL)/calls, "floor-WAL-B/call")
	}
}

// walAt returns the server's WAL position, or "" without a pool.
func walAt(b *testing.B, pool *pgxpool.Pool) string {
	var lsn string
	if pool != nil {
		require.NoError(b, pool.QueryRow(bg, "SELECT pg_current_wal_insert_lsn()::text").Scan(&lsn))
	}
	return lsn
}

// walBetween returns the WAL bytes from one position to another, or 0
// without a pool.
func walBetween(b *testing.B, pool *pgxpool.Pool, from, to string) int64 {
	var n int64
	if pool != nil {
		require.NoError(b, pool.QueryRow(bg, "SELECT pg_wal_lsn_diff($2::pg_lsn, $1::pg_lsn)::bigint", from, to).Scan(&n))
	}
	return n
}

func benchStores(b *testing.B, callers int) (*submissions.Submissions[w], *pgxpool.Pool, floorSQL) {
	pool := testPool(b, int32(callers)+2)
	ledgerStore, err := New[w](pool, WithTable(testTable(b, pool)))
	require.NoError(b, err)
	floorStore, err := New[w](pool, WithTable(testTable(b, pool)))
	require.NoError(b, err)
	for _, s := range []*Store[w]{ledgerStore, floorStore} {
		require.NoError(b, s.Migrate(bg))
	}
	ledger := submissions.NewWithStore[w](ledgerStore, submissions.WithLogger(quiet))
	return ledger, pool, newFloor(floorStore.names.table)
}

func benchWithdrawal(side string, worker, n int) (string, w) {
	key := fmt.Sprintf("%s-5f0c2a8e-4b1d-9e3a-%04d-%08d", side, worker, n)
	x := newW(fmt.Sprintf("%s-0b7e91d4-4c2f-8a6b-%04d-%08d", side, worker, n))
	x.Dest = "0x9f2c4e1b7a3d5c8e0f6a2b4d1c3e5f7a9b8c6d4e"
	return key, x
}

// BenchmarkPostgresFresh: fresh submits, beside the floor's INSERT of the
// claim and UPDATE of its outcome, with 1, 8 and 64 callers; both sides'
// WAL bytes per call too.
func BenchmarkPostgresFresh(b *testing.B) {
	for _, callers := range callerCounts {
		b.Run(fmt.Sprint("callers=", callers), func(b *testing.B) {
			ledger, pool, floor := benchStores(b, callers)
			send := func(_ context.Context, x w) (w, error) { return sent(x, "0xtx"), nil }
			turns(b, callers, pool, func(worker, n int) error {
				key, x := benchWithdrawal("L", worker, n)
				_, err := ledger.Submit(bg, key, x, send)
				return err
			}, func(worker, n int) error {
				key, x := benchWithdrawal("F", worker, n)
				var token int64
				if err := pool.QueryRow(bg, floor.insert, floorTenant, key, x.ID, x.Amount, x.Currency, x.Dest).Scan(&token); err != nil {
					return err
				}
				outcome, err := json.Marshal(sent(x, "0xtx"))
				if err != nil {
					return err
				}
				_, err = pool.Exec(bg, floor.update, floorTenant, key, token, outcome)
				return err
			})
		})
	}
}

// replayFloor is the replay benchmarks' floor: a table of its own, a text
// primary key and the outcome.
type replayFloor struct {
	pool  *pgxpool.Pool
	table string
}

func newReplayFloor(b *testing.B, pool *pgxpool.Pool) replayFloor {
	f := replayFloor{pool, testTable(b, pool)}
	_, err := pool.Exec(bg, `CREATE TABLE `+f.table+` (key text PRIMARY KEY, outcome bytea NOT NULL)`)
	require.NoError(b, err)
	return f
}

// add writes key's outcome.
func (f replayFloor) add(b *testing.B, key string, outcome w) {
	encoded, err := json.Marshal(outcome)
	require.NoError(b, err)
	_, err = f.pool.Exec(bg, `INSERT INTO `+f.table+` VALUES ($1, $2)`, key, encoded)
	require.NoError(b, err)
}

// replay reads key's outcome and decodes it: the floor's call.
func (f replayFloor) replay(key string) error {
	var outcome []byte
	if err := f.pool.QueryRow(bg, `SELECT outcome FROM `+f.table+` WHERE key = $1`, key).Scan(&outcome); err != nil {
		return err
	}
	var x w
	return json.Unmarshal(outcome, &x)
}

// BenchmarkPostgresReplay: replays of settled keys, beside the floor: one
// pool.QueryRow of "SELECT outcome FROM t WHERE key = $1" on a table of
// its own (a text primary key and the outcome) and json.Unmarshal of it;
// with 1, 8 and 64 callers on one pool, in turns of 64 calls. Each caller
// replays keys of its own, 64 of them in turn. "seen" is a ledger whose
// Store made the keys; "restarted" is a ledger on a new Store, as after a
// restart or on another instance, whose first replay of a key also tries to
// claim it.
func BenchmarkPostgresReplay(b *testing.B) {
	const perTurn, keys = 64, 64
	for _, callers := range callerCounts {
		for _, restarted := range []bool{false, true} {
			name := fmt.Sprintf("callers=%d/seen", callers)
			if restarted {
				name = fmt.Sprintf("callers=%d/restarted", callers)
			}
			b.Run(name, func(b *testing.B) {
				pool := testPool(b, int32(callers)+2)
				table := testTable(b, pool)
				onTable := func() *submissions.Submissions[w] {
					st, err := New[w](pool, WithTable(table))
					require.NoError(b, err)
					require.NoError(b, st.Migrate(bg))
					return submissions.NewWithStore[w](st, submissions.WithLogger(quiet))
				}
				ledger, floor := onTable(), newReplayFloor(b, pool)
				send := func(_ context.Context, x w) (w, error) { return sent(x, "0xtx"), nil }
				for g := range callers {
					for n := range keys {
						key, x := benchWithdrawal("L", g, n)
						_, err := ledger.Submit(bg, key, x, send)
						require.NoError(b, err)
						key, x = benchWithdrawal("F", g, n)
						floor.add(b, key, sent(x, "0xtx"))
					}
				}
				if restarted {
					ledger = onTable()
				}
				turnsOf(b, callers, max(1, perTurn/callers), nil, func(worker, n int) error {
					key, x := benchWithdrawal("L", worker, n%keys)
					_, err := ledger.Submit(bg, key, x, send)
					return err
				}, func(worker, n int) error {
					key, _ := benchWithdrawal("F", worker, n%keys)
					return floor.replay(key)
				})
			})
		}
	}
}

// BenchmarkPostgresReplayRecord is what reading the record a replay needs
// costs beside BenchmarkPostgresReplay's floor: the Store's own statement
// for a key's record (its fingerprint, for the ledger to check the retry's
// withdrawal, its token and its flags, with the outcome), issued directly
// through pgx and decoded, beside the floor's statement, with 1 and 8
// callers, in turns of 64 calls.
func BenchmarkPostgresReplayRecord(b *testing.B) {
	const perTurn = 64
	for _, callers := range callerCounts[:2] {
		b.Run(fmt.Sprint("callers=", callers), func(b *testing.B) {
			pool := testPool(b, int32(callers)+2)
			st, err := New[w](pool, WithTable(testTable(b, pool)))
			require.NoError(b, err)
			require.NoError(b, st.Migrate(bg))
			floor := newReplayFloor(b, pool)
			for g := range callers {
				key, x := benchWithdrawal("L", g, 0)
				outcome := sent(x, "0xtx")
				_, _, err := st.Claim(bg, floorTenant, key, x.Fingerprint(), &outcome)
				require.NoError(b, err)
				floor.add(b, key, outcome)
			}
			turnsOf(b, callers, max(1, perTurn/callers), nil, func(worker, _ int) error {
				key, _ := benchWithdrawal("L", worker, 0)
				var row storedRow
				if err := pool.QueryRow(bg, st.sql.lookup, floorTenant, key).Scan(&row.token, &row.fp.WithdrawalID, &row.fp.Amount,
					&row.fp.Currency, &row.fp.Destination, &row.outcome, &row.pruned, &row.abandoned, &row.answered, &row.answer); err != nil {
					return err
				}
				_, err := st.record(key, row)
				return err
			}, func(worker, _ int) error {
				key, _ := benchWithdrawal("L", worker, 0)
				return floor.replay(key)
			})
		})
	}
}

// BenchmarkPostgresGroupingAlone: what grouping costs a lone caller: fresh
// submits of one caller through a ledger whose Store groups claims and
// settles (the default), beside one whose Store does not (the "floor"), on
// one table, in turns.
func BenchmarkPostgresGroupingAlone(b *testing.B) {
	pool := testPool(b, 3)
	table := testTable(b, pool)
	grouped, err := New[w](pool, WithTable(table))
	require.NoError(b, err)
	require.NoError(b, grouped.Migrate(bg))
	alone, err := New[w](pool, WithTable(table), WithoutGrouping())
	require.NoError(b, err)
	send := func(_ context.Context, x w) (w, error) { return sent(x, "0xtx"), nil }
	ledger := func(st *Store[w], side string) func(worker, n int) error {
		l := submissions.NewWithStore[w](st, submissions.WithLogger(quiet))
		return func(worker, n int) error {
			key, x := benchWithdrawal(side, worker, n)
			_, err := l.Submit(bg, key, x, send)
			return err
		}
	}
	turns(b, 1, nil, ledger(grouped, "G"), ledger(alone, "A"))
}

// BenchmarkPostgresWAL: the WAL bytes a Store's claim and settle write,
// each alone, beside the floor's INSERT and UPDATE of the same rows, in
// turns of perTurn of each.
func BenchmarkPostgresWAL(b *testing.B) {
	_, pool, floor := benchStores(b, 1)
	st, err := New[w](pool, WithTable(testTable(b, pool)))
	require.NoError(b, err)
	require.NoError(b, st.Migrate(bg))
	const perTurn = 100
	var wal [4]int64 // claim, settle, floor insert, floor update
	turn := 0
	for b.Loop() {
		var tokens [perTurn]driver.Token
		var floorTokens [perTurn]int64
		steps := [4]func(i int) error{
			func(i int) error {
				key, x := benchWithdrawal("L", turn, i)
				rec, _, err := st.Claim(bg, floorTenant, key, x.Fingerprint(), nil)
				tokens[i] = rec.Token
				return err
			},
			func(i int) error {
				key, x := benchWithdrawal("L", turn, i)
				_, _, err := st.Settle(bg, floorTenant, key, tokens[i], sent(x, "0xtx"))
				return err
			},
			func(i int) error {
				key, x := benchWithdrawal("F", turn, i)
				return pool.QueryRow(bg, floor.insert, floorTenant, key, x.ID, x.Amount, x.Currency, x.Dest).Scan(&floorTokens[i])
			},
			func(i int) error {
				key, x := benchWithdrawal("F", turn, i)
				outcome, err := json.Marshal(sent(x, "0xtx"))
				if err == nil {
					_, err = pool.Exec(bg, floor.update, floorTenant, key, floorTokens[i], outcome)
				}
				return err
			},
		}
		for k, step := range steps {
			at := walAt(b, pool)
			for i := range perTurn {
				require.NoError(b, step(i))
			}
			wal[k] += walBetween(b, pool, at, walAt(b, pool))
		}
		turn++
	}
	n := float64(turn * perTurn)
	b.ReportMetric(0, "ns/op")
	for k, unit := range []string{"claim-WAL-B", "settle-WAL-B", "floor-insert-WAL-B", "floor-update-WAL-B"} {
		b.ReportMetric(float64(wal[k])/n, unit)
	}
}

// BenchmarkPostgresListInFlight: a page of claims in flight through a
// ledger's Admin (100 of every tenant's, then 100 of one tenant's, in turns)
// on a table of a million settled rows, beside the same statement run as a
// full scan (index scans turned off for its connection), which is what the
// listing would cost without its index. The figures are the time per listing
// on each side and the full scan's time over the ledger's (higher is better).
func BenchmarkPostgresListInFlight(b *testing.B) {
	pool := testPool(b, 4)
	st := millionRows(b, pool)
	ops := submissions.NewWithStore[w](st, submissions.WithLogger(quiet)).Admin()
	conn, err := pool.Acquire(bg)
	require.NoError(b, err)
	defer conn.Release()
	_, err = conn.Exec(bg, "SET enable_indexscan = off; SET enable_indexonlyscan = off; SET enable_bitmapscan = off")
	require.NoError(b, err)
	queries := []admin.InFlightQuery{{Limit: 100}, {Tenants: []string{"tenant-3"}, Limit: 100}}
	ledger := func(i int) {
		claims, err := ops.InFlight(bg, queries[i%2])
		if err != nil || len(claims) == 0 {
			b.Fatal(claims, err)
		}
	}
	fullScan := func(i int) {
		q := queries[i%2]
		sql, args := listSQL(st.names.table, driver.ListQuery{Tenants: q.Tenants, Limit: q.Limit})
		rows, err := conn.Query(bg, sql, args...)
		if err != nil {
			b.Fatal(err)
		}
		n := 0
		for rows.Next() {
			n++
		}
		if rows.Close(); rows.Err() != nil || n == 0 {
			b.Fatal(n, rows.Err())
		}
	}
	// One turn untimed: statements prepared, caches warm.
	ledger(0)
	ledger(1)
	fullScan(0)
	fullScan(1)
	const perTurn = 10 // ledger listings a turn, beside one full scan
	var ledgerTime, fullTime time.Duration
	turns := 0
	for b.Loop() {
		start := time.Now()
		for i := range perTurn {
			ledger(i)
		}
		mid := time.Now()
		fullScan(turns)
		ledgerTime += mid.Sub(start)
		fullTime += time.Since(mid)
		turns++
	}
	ledgerPer := float64(ledgerTime.Nanoseconds()) / float64(turns*perTurn)
	fullPer := float64(fullTime.Nanoseconds()) / float64(turns)
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(ledgerPer, "ledger-ns/list")
	b.ReportMetric(fullPer, "fullscan-ns/list")
	b.ReportMetric(fullPer/ledgerPer, "speedup")
}

// BenchmarkPostgresFreshMillion: fresh submits through two ledgers, one on a
// table of a million settled rows (and a few hundred in flight), the other on
// an empty table, in turns as the other benchmarks run, with 16 workers. Both
// tables are logged, migrated and analyzed. Its "ledger" figures are the big
// table's and its "floor" figures the empty table's; the ratio is the big
// table's calls per second over the empty one's (the bar: at least 0.9).
func BenchmarkPostgresFreshMillion(b *testing.B) {
	pool := testPool(b, workers+2)
	big := millionRows(b, pool)
	_, err := pool.Exec(bg, `ALTER TABLE `+big.names.table+` SET LOGGED`) // as a service's table is
	require.NoError(b, err)
	_, err = pool.Exec(bg, "ANALYZE "+big.names.table)
	require.NoError(b, err)
	empty := newTestStore[w](b, pool)
	onBig := submissions.NewWithStore[w](big, submissions.WithLogger(quiet))
	onEmpty := submissions.NewWithStore[w](empty, submissions.WithLogger(quiet))
	send := func(_ context.Context, x w) (w, error) { return sent(x, "0xtx"), nil }
	turns(b, workers, nil, func(worker, n int) error {
		key, x := benchWithdrawal("B", worker, n)
		_, err := onBig.Submit(bg, key, x, send)
		return err
	}, func(worker, n int) error {
		key, x := benchWithdrawal("E", worker, n)
		_, err := onEmpty.Submit(bg, key, x, send)
		return err
	})
}

// BenchmarkPostgresSubmitTx: pgstore.Submit, whose work records a sale and
// adds it to its customer's total due in the claim's transaction, beside the
// floor's one transaction of the same writes: BEGIN, a plain INSERT of the
// key's row, the sale's INSERT, the customer's UPDATE, the UPDATE of the
// key's outcome, COMMIT; with 1 and 8 callers, each caller its own customer.
func BenchmarkPostgresSubmitTx(b *testing.B) {
	for _, callers := range []int{1, 8} {
		b.Run(fmt.Sprint("callers=", callers), func(b *testing.B) {
			pool := testPool(b, int32(callers)+2)
			st := newTestStore[w](b, pool)
			floor := newFloor(newTestStore[w](b, pool).names.table)
			sales, customers := testTable(b, pool), testTable(b, pool)
			for _, sql := range []string{
				`CREATE TABLE ` + sales + ` (id serial PRIMARY KEY, key text NOT NULL, amount numeric NOT NULL)`,
				`CREATE TABLE ` + customers + ` (id int PRIMARY KEY, total_due numeric NOT NULL)`,
				`INSERT INTO ` + customers + ` SELECT g, 0 FROM generate_series(0, ` + fmt.Sprint(callers) + `) g`,
			} {
				_, err := pool.Exec(bg, sql)
				require.NoError(b, err)
			}
			insertSale := `INSERT INTO ` + sales + ` (key, amount) VALUES ($1, $2)`
			updateDue := `UPDATE ` + customers + ` SET total_due = total_due + $2 WHERE id = $1`
			sale := func(ctx context.Context, tx pgx.Tx, worker int, key string, x w) error {
				if _, err := tx.Exec(ctx, insertSale, key, x.Amount); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, updateDue, worker, x.Amount)
				return err
			}
			turns(b, callers, pool, func(worker, n int) error {
				key, x := benchWithdrawal("L", worker, n)
				_, _, err := Submit(bg, st, floorTenant, key, x, func(ctx context.Context, tx pgx.Tx, x w) (w, error) {
					return sent(x, "0xtx"), sale(ctx, tx, worker, key, x)
				})
				return err
			}, func(worker, n int) error {
				key, x := benchWithdrawal("F", worker, n)
				return pgx.BeginFunc(bg, pool, func(tx pgx.Tx) error {
					var token int64
					if err := tx.QueryRow(bg, floor.insert, floorTenant, key, x.ID, x.Amount, x.Currency, x.Dest).Scan(&token); err != nil {
						return err
					}
					if err := sale(bg, tx, worker, key, x); err != nil {
						return err
					}
					outcome, err := json.Marshal(sent(x, "0xtx"))
					if err != nil {
						return err
					}
					_, err = tx.Exec(bg, floor.update, floorTenant, key, token, outcome)
					return err
				})
			})
		})
	}
}
