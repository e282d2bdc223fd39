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

	"github.com/idemledger/submissions"
	"github.com/idemledger/submissions/storetest"
)

type w = storetest.Withdrawal

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
	ledger := submissions.NewWithStore[w](newTestStore[w](t, pool))
	send := func(_ context.Context, x w) (w, error) { return sent(x, "0xtx"), nil }
	if _, err := ledger.Submit(bg, "warm-up", newW("w-0"), send); err != nil {
		t.Fatal(err)
	}
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
		if err := c.call(); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := count.n.Load() - before; got != c.want {
			t.Errorf("%s: statements: got %d; want %d", c.name, got, c.want)
		}
	}
}

// backendPID returns the process id of the server backend of pool's only
// connection.
func backendPID(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var pid int
	if err := pool.QueryRow(bg, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	return pid
}

// terminate ends the backend pid and waits until it is gone. It reports
// failures with t.Errorf, so that other goroutines may call it.
func terminate(t *testing.T, admin *pgxpool.Pool, pid int) {
	t.Helper()
	if _, err := admin.Exec(bg, "SELECT pg_terminate_backend($1)", pid); err != nil {
		t.Errorf("pg_terminate_backend: %v", err)
		return
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		var alive bool
		if err := admin.QueryRow(bg, "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1)", pid).Scan(&alive); err != nil {
			t.Errorf("pg_stat_activity: %v", err)
			return
		}
		if !alive {
			return
		}
	}
	t.Errorf("backend %d still alive", pid)
}

// waitForLock waits until backend pid waits on a lock.
func waitForLock(t *testing.T, admin *pgxpool.Pool, pid int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		var waiting bool
		if err := admin.QueryRow(bg, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock')`, pid).Scan(&waiting); err != nil {
			t.Error(err)
			return
		}
		if waiting {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("backend %d never waited on a lock", pid)
			return
		}
	}
}

// TestConnectionKilledDuringTheOutcomeWrite: the rail has moved the money,
// and the connection dies while its UPDATE of the outcome waits on a row lock.
// Submit returns the outcome with ErrOutcomeNotRecorded; the key stays in
// flight; nothing is sent again.
func TestConnectionKilledDuringTheOutcomeWrite(t *testing.T) {
	pool := testPool(t, 1) // one connection: the claim's, then the outcome's
	admin := testPool(t, 2)
	st := newTestStore[w](t, pool)
	ledger := submissions.NewWithStore[w](st)
	pid := backendPID(t, pool)
	var sends atomic.Int64
	x := newW("w-1")
	killed := make(chan struct{})
	out, err := ledger.Submit(bg, "req-1", x, func(_ context.Context, x w) (w, error) {
		sends.Add(1)
		// Hold the claimed row, so that the outcome's UPDATE waits on it,
		// and kill that connection while it waits.
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
		}()
		return sent(x, "0xmoved"), nil
	})
	<-killed
	if !errors.Is(err, submissions.ErrOutcomeNotRecorded) || out != sent(x, "0xmoved") {
		t.Fatalf("Submit: got %+v, %v; want the rail's outcome and ErrOutcomeNotRecorded", out, err)
	}
	again := func(context.Context, w) (w, error) { sends.Add(1); return w{}, errors.New("sent twice") }
	_, err = ledger.Submit(bg, "req-1", x, again)
	if !errors.Is(err, submissions.ErrSubmissionInFlight) {
		t.Fatalf("retry: got %v; want ErrSubmissionInFlight", err)
	}
	_, err = ledger.Submit(bg, "req-2", x, again)
	if !errors.As(err, new(*submissions.ConflictError)) {
		t.Fatalf("another key: got %v; want a *ConflictError", err)
	}
	if err := ledger.Resolve(bg, "req-1", out); err != nil {
		t.Fatalf("Resolve with the outcome the error came with: %v", err)
	}
	if got, err := ledger.Submit(bg, "req-1", x, again); err != nil || got != out {
		t.Fatalf("replay after Resolve: got %+v, %v; want %+v", got, err, out)
	}
	if n := sends.Load(); n != 1 {
		t.Fatalf("sends: got %d; want 1", n)
	}
}

// TestConnectionKilledDuringTheClaim: the claim's INSERT waits on a row
// another transaction is writing, and its connection dies. Nothing is sent,
// the error says so, and once the other transaction is gone the withdrawal is
// sent once.
func TestConnectionKilledDuringTheClaim(t *testing.T) {
	pool := testPool(t, 1)
	admin := testPool(t, 2)
	st := newTestStore[w](t, pool)
	ledger := submissions.NewWithStore[w](st)
	pid := backendPID(t, pool)

	blocker, err := admin.Begin(bg)
	if err != nil {
		t.Fatal(err)
	}
	defer blocker.Rollback(bg)
	if _, err := blocker.Exec(bg, `INSERT INTO `+st.names.table+` (request_key, withdrawal_id, amount, currency, destination)
		VALUES ('req-1', 'w-blocker', '1', 'BTC', 'bc1q')`); err != nil {
		t.Fatal(err)
	}
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
	if !errors.Is(err, submissions.ErrStoreFailed) {
		t.Fatalf("Submit: got %v; want ErrStoreFailed: nothing was sent", err)
	}
	if err := blocker.Rollback(bg); err != nil {
		t.Fatal(err)
	}
	if _, err := ledger.Submit(bg, "req-1", newW("w-1"), send); err != nil {
		t.Fatalf("Submit once the claim is free: %v", err)
	}
	if n := sends.Load(); n != 1 {
		t.Fatalf("sends: got %d; want 1", n)
	}
}

// TestAKeySeenBeforeIsClaimedAgainOnceReleased: a Store tries a plain read
// first for a key it has seen; when another instance has released the key
// meanwhile, it claims it as any other store would.
func TestAKeySeenBeforeIsClaimedAgainOnceReleased(t *testing.T) {
	count := &counter{}
	pool := testPoolWith(t, 2, func(cfg *pgxpool.Config) { cfg.ConnConfig.Tracer = count })
	st := newTestStore[w](t, pool)
	here := submissions.NewWithStore[w](st)
	other, err := New[w](pool, WithTable(strings.Trim(st.names.table, `"`)))
	if err != nil {
		t.Fatal(err)
	}
	elsewhere := submissions.NewWithStore[w](other)
	var sends atomic.Int64
	failing := func(context.Context, w) (w, error) { sends.Add(1); return w{}, errors.New("rail timed out") }
	if _, err := here.Submit(bg, "req-1", newW("w-1"), failing); err == nil {
		t.Fatal("Submit with a failing send: got nil error")
	}
	if err := elsewhere.Release(bg, "req-1"); err != nil {
		t.Fatalf("Release on another instance: %v", err)
	}
	before := count.n.Load()
	out, err := here.Submit(bg, "req-1", newW("w-1"), func(_ context.Context, x w) (w, error) { sends.Add(1); return sent(x, "0xtx"), nil })
	if err != nil || out.TxHash != "0xtx" {
		t.Fatalf("Submit after the release: got %+v, %v; want it sent", out, err)
	}
	if got := count.n.Load() - before; got != 3 {
		t.Errorf("statements: got %d; want 3 (a read that misses, the claim, the outcome)", got)
	}
	// Released here, the key's next submit is a fresh one: two statements.
	if _, err := here.Submit(bg, "req-2", newW("w-2"), failing); err == nil {
		t.Fatal("Submit with a failing send: got nil error")
	}
	if err := here.Release(bg, "req-2"); err != nil {
		t.Fatal(err)
	}
	before = count.n.Load()
	if _, err := here.Submit(bg, "req-2", newW("w-2"), func(_ context.Context, x w) (w, error) { return sent(x, "0xtx"), nil }); err != nil {
		t.Fatal(err)
	}
	if got := count.n.Load() - before; got != 2 {
		t.Errorf("statements after a release here: got %d; want 2", got)
	}
	if n := sends.Load(); n != 3 {
		t.Fatalf("sends: got %d; want 3 (a failed one and one after each release)", n)
	}
}
