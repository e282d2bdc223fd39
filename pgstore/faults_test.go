package pgstore

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemledger/submissions"
	"github.com/idemledger/submissions/internal/ledgertest"
)

type w = ledgertest.Withdrawal

func newW(id string) w {
	return w{ID: id, Amount: "25.00", Currency: "USDC", Dest: "0x9f2c", State: "approved"}
}

func sent(x w, tx string) w {
	x.State, x.TxHash = "sent", tx
	return x
}

// counter counts the statements a pool sends.
type counter struct{ n atomic.Int64 }

func (c *counter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (c *counter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func TestRoundTrips(t *testing.T) {
	count := &counter{}
	pool := testPoolWith(t, 2, func(cfg *pgxpool.Config) { cfg.ConnConfig.Tracer = count })
	ledger := submissions.NewWithStore[w](newTestStore[w](t, pool), submissions.WithLogger(quiet))
	send := func(_ context.Context, x w) (w, error) { return sent(x, "0xtx"), nil }
	_, err := ledger.Submit(bg, "warm-up", newW("w-0"), send)
	require.NoError(t, err)
	for _, c := range []struct {
		name string
		call func() error
		want int64
	}{
		{"fresh submit", func() error { _, err := ledger.Submit(bg, "req-1", newW("w-1"), send); return err }, 2},
		{"replay", func() error { _, err := ledger.Submit(bg, "req-1", newW("w-1"), send); return err }, 1},
		{"second client", func() error {
			_, err := ledger.Submit(bg, "req-2", newW("w-1"), send)
			if errors.As(err, new(*submissions.ConflictError)) {
				return nil
			}
			return err
		}, 2},
		{"outcome", func() error { _, _, err := ledger.Outcome(bg, "req-1"); return err }, 1},
		{"claimed by", func() error { _, _, err := ledger.ClaimedBy(bg, "w-1"); return err }, 1},
	} {
		before := count.n.Load()
		require.NoError(t, c.call(), c.name)
		assert.Equal(t, c.want, count.n.Load()-before, "statements of %s", c.name)
	}
}

// backendPID returns the process id of the server backend of pool's only
// connection.
func backendPID(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var pid int
	require.NoError(t, pool.QueryRow(bg, "SELECT pg_backend_pid()").Scan(&pid))
	return pid
}

// terminate ends the backend pid and waits until it is gone. It reports
// failures with assert, so that other goroutines may call it.
func terminate(t *testing.T, admin *pgxpool.Pool, pid int) {
	t.Helper()
	if _, err := admin.Exec(bg, "SELECT pg_terminate_backend($1)", pid); !assert.NoError(t, err, "pg_terminate_backend") {
		return
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		var alive bool
		err := admin.QueryRow(bg, "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1)", pid).Scan(&alive)
		if !assert.NoError(t, err, "pg_stat_activity") || !alive {
			return
		}
	}
	assert.Fail(t, "backend still alive", "backend %d", pid)
}

// waitForLock waits until backend pid waits on a lock. It reports failures
// with assert, so that other goroutines may call it.
func waitForLock(t *testing.T, admin *pgxpool.Pool, pid int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		var waiting bool
		err := admin.QueryRow(bg, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock')`, pid).Scan(&waiting)
		if !assert.NoError(t, err, "pg_stat_activity") || waiting {
			return
		}
		if time.Now().After(deadline) {
			assert.Fail(t, "never waited on a lock", "backend %d", pid)
			return
		}
	}
}

// outcomeWriteKilled is what killedDuringTheOutcomeWrite returns.
type outcomeWriteKilled struct {
	ledger *submissions.Submissions[w]
	st     *Store[w]
	out    w     // Submit's answer
	err    error // Submit's error
	sends  *atomic.Int64
}

// killedDuringTheOutcomeWrite submits w-1 under req-1 through a ledger on a
// pool of one connection, whose send holds the claimed row, so that the
// outcome's UPDATE waits on it, and kills that connection while it waits;
// then it calls after.
func killedDuringTheOutcomeWrite(t *testing.T, ctx context.Context, after func()) outcomeWriteKilled {
	pool := testPool(t, 1) // one connection: the claim's, then the outcome's
	admin := testPool(t, 2)
	st := newTestStore[w](t, pool)
	ledger := submissions.NewWithStore[w](st, submissions.WithLogger(quiet))
	pid := backendPID(t, pool)
	var sends atomic.Int64
	killed := make(chan struct{})
	out, err := ledger.Submit(ctx, "req-1", newW("w-1"), func(_ context.Context, x w) (w, error) {
		sends.Add(1)
		blocker, err := admin.Begin(bg)
		if err != nil {
			return w{}, err
		}
		if _, err := blocker.Exec(bg, "SELECT 1 FROM "+st.names.table+" WHERE request_key = 'req-1' FOR UPDATE"); err != nil {
			return w{}, err
		}
		go func() {
			defer close(killed)
			defer blocker.Rollback(bg)
			waitForLock(t, admin, pid)
			terminate(t, admin, pid)
			after()
		}()
		return sent(x, "0xmoved"), nil
	})
	<-killed
	return outcomeWriteKilled{ledger, st, out, err, &sends}
}

// TestConnectionKilledDuringTheOutcomeWrite: the rail has moved the money,
// and the connection dies while its UPDATE of the outcome waits on a row
// lock. The store was unavailable, not refusing: the ledger writes the
// outcome again, on a new connection, and Submit returns it recorded;
// nothing is sent again.
func TestConnectionKilledDuringTheOutcomeWrite(t *testing.T) {
	k := killedDuringTheOutcomeWrite(t, bg, func() {})
	ledger, st, out, err, sends := k.ledger, k.st, k.out, k.err, k.sends
	x := newW("w-1")
	require.NoError(t, err, "Submit: the outcome written again")
	require.Equal(t, sent(x, "0xmoved"), out)
	rec, ok, err := st.Lookup(bg, "", "req-1")
	require.NoError(t, err)
	require.True(t, ok)
	assert.True(t, rec.Done, "recorded")
	assert.Equal(t, out, rec.Outcome)
	got, err := ledger.Submit(bg, "req-1", x, func(context.Context, w) (w, error) { sends.Add(1); return w{}, errors.New("sent twice") })
	require.NoError(t, err, "replay")
	require.Equal(t, out, got, "replay")
	require.EqualValues(t, 1, sends.Load(), "sends")
}

// TestConnectionKilledDuringTheOutcomeWriteAsItsContextEnds: the same, but
// the caller's ctx ends as the connection dies. The rail has answered, so
// the ledger writes the outcome again past the end of ctx, within its bound,
// and Submit returns it recorded; nothing is sent again.
func TestConnectionKilledDuringTheOutcomeWriteAsItsContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	k := killedDuringTheOutcomeWrite(t, ctx, cancel)
	ledger, st, out, err, sends := k.ledger, k.st, k.out, k.err, k.sends
	x := newW("w-1")
	require.NoError(t, err, "Submit: the outcome written again past the end of its ctx")
	require.Equal(t, sent(x, "0xmoved"), out, "Submit returns the rail's outcome")
	rec, ok, err := st.Lookup(bg, "", "req-1")
	require.NoError(t, err)
	require.True(t, ok)
	assert.True(t, rec.Done, "recorded")
	assert.Equal(t, out, rec.Outcome)
	again := func(context.Context, w) (w, error) { sends.Add(1); return w{}, errors.New("sent twice") }
	got, err := ledger.Submit(bg, "req-1", x, again)
	require.NoError(t, err, "replay")
	require.Equal(t, out, got, "replay")
	_, err = ledger.Submit(bg, "req-2", x, again)
	require.ErrorAs(t, err, new(*submissions.ConflictError), "another key")
	require.EqualValues(t, 1, sends.Load(), "sends")
}

// TestConnectionKilledDuringTheClaim: the claim's INSERT waits on a row
// another transaction is writing, and its connection dies. Nothing is sent,
// the error says so, and once the other transaction is gone the withdrawal is
// sent once.
func TestConnectionKilledDuringTheClaim(t *testing.T) {
	pool := testPool(t, 1)
	admin := testPool(t, 2)
	st := newTestStore[w](t, pool)
	ledger := submissions.NewWithStore[w](st, submissions.WithLogger(quiet))
	pid := backendPID(t, pool)

	blocker, err := admin.Begin(bg)
	require.NoError(t, err)
	defer blocker.Rollback(bg)
	_, err = blocker.Exec(bg, `INSERT INTO `+st.names.table+` (request_key, withdrawal_id, amount, currency, destination)
		VALUES ('req-1', 'w-blocker', '1', 'BTC', 'bc1q')`)
	require.NoError(t, err)
	var sends atomic.Int64
	send := func(_ context.Context, x w) (w, error) { sends.Add(1); return sent(x, "0xtx"), nil }
	done := make(chan error, 1)
	go func() {
		_, err := ledger.Submit(bg, "req-1", newW("w-1"), send)
		done <- err
	}()
	waitForLock(t, admin, pid)
	terminate(t, admin, pid)
	err = <-done
	require.ErrorIs(t, err, submissions.ErrStoreFailed, "Submit: the store failed, nothing was sent")
	require.Zero(t, sends.Load(), "sends")
	require.NoError(t, blocker.Rollback(bg))
	_, err = ledger.Submit(bg, "req-1", newW("w-1"), send)
	require.NoError(t, err, "Submit once the claim is free")
	require.EqualValues(t, 1, sends.Load(), "sends")
}

// TestAKeySeenBeforeIsClaimedAgainOnceReleased: a Store tries a plain read
// first for a key it has seen; when another instance has released the key
// meanwhile, it claims it as any other store would.
func TestAKeySeenBeforeIsClaimedAgainOnceReleased(t *testing.T) {
	count := &counter{}
	pool := testPoolWith(t, 2, func(cfg *pgxpool.Config) { cfg.ConnConfig.Tracer = count })
	st := newTestStore[w](t, pool)
	here := submissions.NewWithStore[w](st, submissions.WithLogger(quiet))
	other, err := New[w](pool, WithTable(strings.Trim(st.names.table, `"`)))
	require.NoError(t, err)
	elsewhere := submissions.NewWithStore[w](other, submissions.WithLogger(quiet))
	var sends atomic.Int64
	failing := func(context.Context, w) (w, error) { sends.Add(1); return w{}, errors.New("rail timed out") }
	_, err = here.Submit(bg, "req-1", newW("w-1"), failing)
	require.ErrorIs(t, err, submissions.ErrOutcomeUnknown, "Submit with a failing send")
	require.NoError(t, elsewhere.Release(bg, "req-1"), "Release on another instance")
	before := count.n.Load()
	out, err := here.Submit(bg, "req-1", newW("w-1"), func(_ context.Context, x w) (w, error) { sends.Add(1); return sent(x, "0xtx"), nil })
	require.NoError(t, err, "Submit after the release")
	require.Equal(t, "0xtx", out.TxHash, "Submit after the release sends")
	assert.EqualValues(t, 3, count.n.Load()-before, "statements: a read that misses, the claim, the outcome")
	// Released here, the key's next submit is a fresh one: two statements.
	_, err = here.Submit(bg, "req-2", newW("w-2"), failing)
	require.ErrorIs(t, err, submissions.ErrOutcomeUnknown, "Submit with a failing send")
	require.NoError(t, here.Release(bg, "req-2"))
	before = count.n.Load()
	_, err = here.Submit(bg, "req-2", newW("w-2"), func(_ context.Context, x w) (w, error) { return sent(x, "0xtx"), nil })
	require.NoError(t, err)
	assert.EqualValues(t, 2, count.n.Load()-before, "statements after a release here")
	require.EqualValues(t, 3, sends.Load(), "sends: a failed one and one after each release")
}
