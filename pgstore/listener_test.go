package pgstore

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
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
	"github.com/idemledger/submissions/driver"
)

// soon is the generous bound of what the tests here want promptly: a wait's
// answer after the change that ends it, an unrelated call while waits run.
const soon = 5 * time.Second

// listenerPool returns a pool of conns connections whose config, with which
// a Store's listener connects, counts in connected the connections made with
// it outside the pool, and calls again (when not nil) at each after the
// first, failing the connection with its error.
func listenerPool(t *testing.T, conns int32, connected *atomic.Int64, again func() error) *pgxpool.Pool {
	t.Helper()
	return testPoolWith(t, conns, func(cfg *pgxpool.Config) {
		cfg.ConnConfig.AfterConnect = func(context.Context, *pgconn.PgConn) error {
			if connected.Add(1) > 1 && again != nil {
				return again()
			}
			return nil
		}
		cfg.BeforeConnect = func(_ context.Context, cc *pgx.ConnConfig) error {
			cc.AfterConnect = nil // the pool's own connections
			return nil
		}
	})
}

// lockHolders returns the backends that hold the shared advisory lock of a
// wait for the default tenant's key of st's table: the listeners of the
// Stores where it is waited for.
func lockHolders(pool *pgxpool.Pool, st *Store[w], key string) ([]int32, error) {
	var pids []int32
	err := pool.QueryRow(bg, `SELECT coalesce(array_agg(pid), '{}') FROM pg_locks
WHERE locktype = 'advisory' AND mode = 'ShareLock' AND granted AND objsubid = 1
AND (classid::bigint << 32) | objid::bigint = hashtextextended('submissions wait ' || (`+strings.TrimPrefix(st.sql.channel, "SELECT ")+`) || ' ' || $1, 0)`,
		waitPayload("", key)).Scan(&pids)
	return pids, err
}

// requireLocked stops t unless, within soon, n listeners hold the lock of a
// wait for key: a change to key's claim notifies them. It returns their
// backends.
func requireLocked(t *testing.T, pool *pgxpool.Pool, st *Store[w], key string, n int) []int32 {
	t.Helper()
	var pids []int32
	require.Eventually(t, func() bool {
		p, err := lockHolders(pool, st, key)
		pids = p
		return err == nil && len(p) == n
	}, soon, 5*time.Millisecond, "listeners holding the lock of %s", key)
	return pids
}

// requireGone stops t unless, within soon, none of the backends pids runs:
// the listeners have closed their connections.
func requireGone(t *testing.T, pool *pgxpool.Pool, pids []int32) {
	t.Helper()
	require.Eventually(t, func() bool {
		var n int
		err := pool.QueryRow(bg, `SELECT count(*) FROM pg_stat_activity WHERE pid = ANY($1)`, pids).Scan(&n)
		return err == nil && n == 0
	}, soon, 5*time.Millisecond, "listeners still connected")
}

// kill ends the backend pid, as a server that drops a connection does.
func kill(t *testing.T, pool *pgxpool.Pool, pid int32) {
	t.Helper()
	var killed bool
	require.NoError(t, pool.QueryRow(bg, `SELECT pg_terminate_backend($1)`, pid).Scan(&killed))
	require.True(t, killed)
}

// requireWaited stops t unless done answers within soon with key's record,
// settled with outcome.
func requireWaited(t *testing.T, done <-chan waited, outcome w, what string) {
	t.Helper()
	select {
	case got := <-done:
		require.NoError(t, got.err, what)
		require.True(t, got.ok, what)
		require.True(t, got.rec.Done, what)
		require.Equal(t, outcome, got.rec.Outcome, what)
	case <-time.After(soon):
		require.FailNow(t, "no prompt answer", what)
	}
}

// TestManyWaitsShareOneListenerOutsideThePool: a hundred waits through each
// of two Stores (two instances), each on a pool of two connections, half on
// one key and half on ten: each Store's waits share one listener, on a
// connection of its own, holding the lock of each key once; the pools stay
// free for unrelated submits, and for the settles, which end every wait at
// once by their notifications (the waits would read their rows again only
// in an hour). When the waits end, the listeners close their connections.
func TestManyWaitsShareOneListenerOutsideThePool(t *testing.T) {
	const waitsPerStore = 100
	var connectedA, connectedB atomic.Int64
	poolA, poolB := listenerPool(t, 2, &connectedA, nil), listenerPool(t, 2, &connectedB, nil)
	observer := testPool(t, 1)
	a := newTestStore[w](t, poolA)
	b, err := New[w](poolB, WithTable(a.names.base))
	require.NoError(t, err)
	keys := []string{"one"}
	for i := range 10 {
		keys = append(keys, fmt.Sprint("many-", i))
	}
	tokens := map[string]driver.Token{}
	for _, key := range keys {
		rec, claimed, err := a.Claim(bg, "", key, newW("w-"+key).Fingerprint(), nil)
		require.NoError(t, err)
		require.True(t, claimed)
		tokens[key] = rec.Token
	}
	ctx, cancel := context.WithTimeout(bg, time.Minute)
	defer cancel()
	var done []<-chan waited
	var waitedFor []string
	for _, st := range []*Store[w]{a, b} {
		for i := range waitsPerStore {
			key := keys[0]
			if i%2 == 1 {
				key = keys[1+i/2%10]
			}
			done = append(done, goWaitClaim(ctx, st, key, tokens[key], time.Hour))
			waitedFor = append(waitedFor, key)
		}
	}
	var listeners []int32
	for _, key := range keys {
		listeners = requireLocked(t, observer, a, key, 2) // a's listener and b's
	}

	for name, st := range map[string]*Store[w]{"A": a, "B": b} {
		ledger := submissions.NewWithStore[w](st, submissions.WithLogger(quiet))
		x := newW("w-unrelated-" + name)
		sctx, cancel := context.WithTimeout(bg, soon)
		start := time.Now()
		out, err := ledger.Submit(sctx, "unrelated-"+name, x, func(_ context.Context, x w) (w, error) { return sent(x, "0xu"), nil })
		cancel()
		require.NoError(t, err, "an unrelated Submit through %s while its waits wait", name)
		assert.Equal(t, sent(x, "0xu"), out)
		t.Logf("an unrelated Submit through %s took %v", name, time.Since(start).Round(time.Microsecond))
	}

	start := time.Now()
	for _, key := range keys {
		sctx, cancel := context.WithTimeout(bg, soon)
		_, settled, err := a.Settle(sctx, "", key, tokens[key], sent(newW("w-"+key), "0x"+key))
		cancel()
		require.NoError(t, err, "the settle of %s through a pool the waits share", key)
		require.True(t, settled)
	}
	for i, ch := range done {
		requireWaited(t, ch, sent(newW("w-"+waitedFor[i]), "0x"+waitedFor[i]), fmt.Sprintf("wait %d of %s", i, waitedFor[i]))
	}
	t.Logf("%d waits answered %v after the first of %d settles", len(done), time.Since(start).Round(time.Microsecond), len(keys))
	assert.EqualValues(t, 1, connectedA.Load(), "A's listener connections")
	assert.EqualValues(t, 1, connectedB.Load(), "B's listener connections")
	requireGone(t, observer, listeners)
	requireGivenBack(t, poolA)
	requireGivenBack(t, poolB)
}

// TestWaitsOutliveTheirListenersConnection: the server drops the listener's
// connection while waits wait. The listener connects again, and every wait
// reads its row again: a claim settled while no listener held its lock (so
// that no notification was sent) ends its wait at once, and a claim settled
// after ends its wait by its notification.
func TestWaitsOutliveTheirListenersConnection(t *testing.T) {
	var connected atomic.Int64
	reconnecting, reconnect := make(chan struct{}), make(chan struct{})
	pool := listenerPool(t, 2, &connected, func() error {
		close(reconnecting)
		<-reconnect
		return nil
	})
	resume := sync.OnceFunc(func() { close(reconnect) })
	defer resume() // after a failure: the listener connects, and ends with the waits
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	observer := testPool(t, 1)
	st := newTestStore[w](t, pool)
	tokens := map[string]driver.Token{}
	done := map[string]<-chan waited{}
	for _, key := range []string{"settled-while-down", "settled-after"} {
		rec, _, err := st.Claim(bg, "", key, newW("w-"+key).Fingerprint(), nil)
		require.NoError(t, err)
		tokens[key] = rec.Token
		done[key] = goWaitClaim(ctx, st, key, rec.Token, time.Hour)
	}
	pids := requireLocked(t, observer, st, "settled-after", 1)
	requireLocked(t, observer, st, "settled-while-down", 1)

	kill(t, observer, pids[0])
	select {
	case <-reconnecting:
	case <-time.After(soon):
		require.FailNow(t, "the listener did not connect again")
	}
	holders, err := lockHolders(observer, st, "settled-while-down")
	require.NoError(t, err)
	assert.Empty(t, holders, "no listener holds the lock")
	_, settled, err := st.Settle(bg, "", "settled-while-down", tokens["settled-while-down"], sent(newW("w-settled-while-down"), "0x1"))
	require.NoError(t, err)
	require.True(t, settled)
	resume()
	requireWaited(t, done["settled-while-down"], sent(newW("w-settled-while-down"), "0x1"), "a claim settled while no listener was connected")

	requireLocked(t, observer, st, "settled-after", 1)
	_, settled, err = st.Settle(bg, "", "settled-after", tokens["settled-after"], sent(newW("w-settled-after"), "0x2"))
	require.NoError(t, err)
	require.True(t, settled)
	requireWaited(t, done["settled-after"], sent(newW("w-settled-after"), "0x2"), "a claim settled after the listener connected again")
	assert.EqualValues(t, 2, connected.Load(), "listener connections")
	requireGivenBack(t, pool)
}

// TestWaitsEndWhenTheirListenerCannotConnect: when the listener cannot
// connect again after its connection broke, every wait ends with its error,
// and the next wait starts another listener; a Store whose table does not
// exist fails its waits with the error that says to call Migrate.
func TestWaitsEndWhenTheirListenerCannotConnect(t *testing.T) {
	var connected atomic.Int64
	refused := errors.New("refused")
	pool := listenerPool(t, 2, &connected, func() error {
		if connected.Load() == 2 {
			return refused
		}
		return nil
	})
	observer := testPool(t, 1)
	st := newTestStore[w](t, pool)
	x := newW("w-1")
	rec, _, err := st.Claim(bg, "", "req-1", x.Fingerprint(), nil)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	var waits []<-chan waited
	for range 3 {
		waits = append(waits, goWaitClaim(ctx, st, "req-1", rec.Token, time.Hour))
	}
	kill(t, observer, requireLocked(t, observer, st, "req-1", 1)[0])
	for _, done := range waits {
		select {
		case got := <-done:
			require.ErrorIs(t, got.err, refused)
		case <-time.After(soon):
			require.FailNow(t, "a wait did not end when its listener could not connect")
		}
	}

	done := goWaitClaim(ctx, st, "req-1", rec.Token, time.Hour)
	requireLocked(t, observer, st, "req-1", 1)
	_, settled, err := st.Settle(bg, "", "req-1", rec.Token, sent(x, "0x1"))
	require.NoError(t, err)
	require.True(t, settled)
	requireWaited(t, done, sent(x, "0x1"), "a wait after the failure")
	assert.EqualValues(t, 3, connected.Load(), "listener connections")

	missing, err := New[w](pool, WithTable(testTable(t, pool))) // never migrated
	require.NoError(t, err)
	_, _, err = missing.WaitClaim(bg, "", "req-1", 1)
	require.ErrorIs(t, err, errNoTable)
	requireGivenBack(t, pool)
}

// waitChild is the child process of TestWaitsInTwoProcesses (role "wait"):
// an instance on a pool of two connections that waits through a ledger, many
// times, for each key of PGSTORE_TEST_KEYS, says "waiting", and once told (a
// line on stdin) submits a key of its own and says how that went
// ("submitted", and the error if any); then it says how each wait ended
// ("waited", the key, and the outcome's ref or the error).
func waitChild() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, ledger, err := childLedger(ctx, 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	var out sync.Mutex
	var wg sync.WaitGroup
	for _, key := range strings.Split(os.Getenv("PGSTORE_TEST_KEYS"), ",") {
		for range 25 {
			wg.Go(func() {
				got, err := ledger.Wait(ctx, key)
				out.Lock()
				defer out.Unlock()
				fmt.Println("waited", key, got.TxHash, err)
			})
		}
	}
	fmt.Println("waiting")
	if _, err = bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		return err
	}
	sctx, scancel := context.WithTimeout(ctx, soon)
	defer scancel()
	x := newW(fmt.Sprint("w-own-", os.Getpid()))
	_, err = ledger.Submit(sctx, fmt.Sprint("own-", os.Getpid()), x, func(_ context.Context, x w) (w, error) { return sent(x, "0xown"), nil })
	out.Lock()
	fmt.Println("submitted", err)
	out.Unlock()
	wg.Wait()
	return nil
}

// TestWaitsInTwoProcesses: two processes, each on a pool of two
// connections, wait for five keys, a hundred and twenty-five times each; each
// submits a key of its own meanwhile, at once, and every wait in both ends
// promptly with the outcome settled by a third.
func TestWaitsInTwoProcesses(t *testing.T) {
	pool := testPool(t, 2)
	st := newTestStore[w](t, pool)
	var keys []string
	tokens := map[string]driver.Token{}
	for i := range 5 {
		key := fmt.Sprint("req-", i)
		rec, _, err := st.Claim(bg, "", key, newW("w-"+key).Fingerprint(), nil)
		require.NoError(t, err)
		keys, tokens[key] = append(keys, key), rec.Token
	}
	type child struct {
		cmd   *exec.Cmd
		stdin io.WriteCloser
		out   *bufio.Scanner
	}
	var children []child
	for range 2 {
		cmd, stdin, out := spawn(t, "wait", "PGSTORE_TEST_TABLE="+st.names.base, "PGSTORE_TEST_KEYS="+strings.Join(keys, ","))
		c := child{cmd, stdin, out}
		require.True(t, c.out.Scan(), "a child did not start waiting")
		require.Equal(t, "waiting", c.out.Text())
		children = append(children, c)
	}
	for _, key := range keys {
		requireLocked(t, pool, st, key, 2) // each child's listener
	}
	for _, c := range children {
		_, err := io.WriteString(c.stdin, "submit\n")
		require.NoError(t, err)
	}
	for _, key := range keys {
		_, settled, err := st.Settle(bg, "", key, tokens[key], sent(newW("w-"+key), "0x"+key))
		require.NoError(t, err)
		require.True(t, settled)
	}
	settled := time.Now()
	for _, c := range children {
		waits := map[string]int{}
		for c.out.Scan() {
			switch kind, rest, _ := strings.Cut(c.out.Text(), " "); kind {
			case "submitted":
				assert.Equal(t, "<nil>", rest, "a child's own submit while its waits wait")
			case "waited":
				key, got, _ := strings.Cut(rest, " ")
				assert.Equal(t, "0x"+key+" <nil>", got, "a wait of %s", key)
				waits[key]++
			}
		}
		require.NoError(t, c.cmd.Wait(), "a child")
		assert.Less(t, time.Since(settled), soon, "the children's waits ended after the settles")
		for _, key := range keys {
			assert.Equal(t, 25, waits[key], "waits of %s that ended", key)
		}
	}
}

// TestAListenerKeepsTheLocksOfItsWaits: while waits of two keys wait, the
// listener holds both keys' locks, steadily: a wait that enters does not
// drop the lock of a key still waited for. When one wait ends, its key's
// lock goes and the other's stays.
func TestAListenerKeepsTheLocksOfItsWaits(t *testing.T) {
	pool := testPool(t, 4)
	st := newTestStore[w](t, pool)
	ctx, cancel := context.WithTimeout(bg, time.Minute)
	defer cancel()
	actx, aleave := context.WithCancel(ctx)
	defer aleave()
	tokens := map[string]driver.Token{}
	for _, k := range []string{"a", "b"} {
		rec, _, err := st.Claim(bg, "", k, newW("w-"+k).Fingerprint(), nil)
		require.NoError(t, err)
		tokens[k] = rec.Token
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { _, _, _ = st.waitClaim(actx, "", "a", tokens["a"], time.Hour) })
	requireLocked(t, pool, st, "a", 1)
	wg.Go(func() { _, _, _ = st.waitClaim(ctx, "", "b", tokens["b"], time.Hour) })
	requireLocked(t, pool, st, "b", 1)
	for range 20 {
		for _, k := range []string{"a", "b"} {
			holders, err := lockHolders(pool, st, k)
			require.NoError(t, err)
			require.Len(t, holders, 1, "the listener's lock of %s, while both are waited for", k)
		}
		time.Sleep(10 * time.Millisecond)
	}
	aleave()
	requireLocked(t, pool, st, "a", 0)
	holders, err := lockHolders(pool, st, "b")
	require.NoError(t, err)
	require.Len(t, holders, 1, "the lock of b, still waited for")
	cancel()
}

// TestAListenerWhoseLockFailsConnectsAgain: when the listener's statement
// that locks a key fails (here it waits for a settle of the key that holds
// its exclusive lock longer than the listener's statement_timeout), the
// listener connects again and tries again, and the wait ends with its
// outcome once the key can be locked: a failing statement is not a session
// that changed (ErrNoSession).
func TestAListenerWhoseLockFailsConnectsAgain(t *testing.T) {
	pool := testPool(t, 4)
	direct, err := pgx.ParseConfig(os.Getenv(urlVar))
	require.NoError(t, err)
	direct.RuntimeParams["statement_timeout"] = "50ms"
	st := newTestStore[w](t, pool)
	st.listener = direct
	rec, _, err := st.Claim(bg, "", "req-1", newW("w-1").Fingerprint(), nil)
	require.NoError(t, err)

	// A transaction holds the key's exclusive wait lock, as a settle does
	// while it commits.
	tx, err := pool.Begin(bg)
	require.NoError(t, err)
	defer tx.Rollback(bg)
	_, err = tx.Exec(bg, `SELECT pg_advisory_xact_lock(hashtextextended('submissions wait ' || (`+strings.TrimPrefix(st.sql.channel, "SELECT ")+`) || ' ' || $1, 0))`, waitPayload("", "req-1"))
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(bg, 30*time.Second)
	defer cancel()
	done := make(chan waited, 1)
	go func() {
		rec, ok, err := st.waitClaim(ctx, "", "req-1", rec.Token, time.Hour)
		done <- waited{rec, ok, err}
	}()
	time.Sleep(300 * time.Millisecond) // several statements time out meanwhile
	select {
	case got := <-done:
		t.Fatalf("the wait ended while its key could not be locked: %+v", got)
	default:
	}
	require.NoError(t, tx.Rollback(bg))
	requireLocked(t, pool, st, "req-1", 1)
	want, settled, err := st.Settle(bg, "", "req-1", rec.Token, sent(newW("w-1"), "0x1"))
	require.NoError(t, err)
	require.True(t, settled)
	select {
	case got := <-done:
		require.NoError(t, got.err)
		require.True(t, got.ok)
		assert.Equal(t, want, got.rec)
	case <-time.After(10 * time.Second):
		t.Fatal("the wait did not end after the settle")
	}
}

// TestANotificationIsReadWhileTheListenerLocksOtherKeys: a notification
// that reaches the listener while it locks the keys of waits that come and
// go wakes its wait at the end of that statement, not once the listener
// finds nothing to lock (which, with waits coming and going, may be never).
// Here each lock of the listener waits for a transaction that holds the key
// exclusively, as a settle does while it commits, so that it always has
// another key to lock.
func TestANotificationIsReadWhileTheListenerLocksOtherKeys(t *testing.T) {
	pool := testPool(t, 8)
	st := newTestStore[w](t, pool)
	ctx, cancel := context.WithTimeout(bg, time.Minute)
	defer cancel()
	lockKey := `hashtextextended('submissions wait ' || (` + strings.TrimPrefix(st.sql.channel, "SELECT ") + `) || ' ' || $1, 0)`
	hold := func(key string) (unlock func()) { // the key's exclusive wait lock, in a transaction
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, `SELECT pg_advisory_xact_lock(`+lockKey+`)`, waitPayload("", key))
		require.NoError(t, err)
		var once sync.Once
		unlock = func() { once.Do(func() { require.NoError(t, tx.Rollback(bg)) }) }
		t.Cleanup(unlock)
		return unlock
	}
	blocked := func(key string) { // the listener waits for key's lock
		t.Helper()
		require.Eventually(t, func() bool {
			var n int
			err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND mode = 'ShareLock' AND NOT granted
AND (classid::bigint << 32) | objid::bigint = `+lockKey, waitPayload("", key)).Scan(&n)
			return err == nil && n == 1
		}, soon, 5*time.Millisecond, "the listener waiting for the lock of %s", key)
	}
	tokens := map[string]driver.Token{}
	for _, k := range []string{"a", "b", "c", "d"} {
		rec, _, err := st.Claim(ctx, "", k, newW("w-"+k).Fingerprint(), nil)
		require.NoError(t, err)
		tokens[k] = rec.Token
	}
	unlockB, unlockC, unlockD := hold("b"), hold("c"), hold("d")
	wctx, leave := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer leave()
	done := make(chan waited, 1)
	go func() {
		rec, ok, err := st.waitClaim(ctx, "", "a", tokens["a"], time.Hour)
		done <- waited{rec, ok, err}
	}()
	requireLocked(t, pool, st, "a", 1)
	wait := func(k string) { wg.Go(func() { _, _, _ = st.waitClaim(wctx, "", k, tokens[k], time.Hour) }) }
	wait("b")
	blocked("b")
	// Notified now, the listener reads it after its lock of b (the server
	// sends it once that statement has ended), in its lock of c.
	_, settled, err := st.Settle(ctx, "", "a", tokens["a"], sent(newW("w-a"), "0xa"))
	require.NoError(t, err)
	require.True(t, settled)
	wait("c")
	unlockB()
	blocked("c")
	wait("d")
	unlockC() // the lock of c ends; the listener goes on to lock d, and waits
	blocked("d")
	select {
	case got := <-done:
		require.NoError(t, got.err)
		require.True(t, got.ok)
		assert.True(t, got.rec.Done, "the outcome of a")
	case <-time.After(soon):
		t.Fatal("the wait of a did not end while the listener waited to lock another key")
	}
	unlockD()
}

// TestAListenerIgnoresTheConfigsNotificationHandler: with a notification
// handler in the pool's connection config (pgx then keeps no notification
// for WaitForNotification), the listener still hears its notifications.
func TestAListenerIgnoresTheConfigsNotificationHandler(t *testing.T) {
	var handled atomic.Int32
	pool := testPoolWith(t, 4, func(c *pgxpool.Config) {
		c.ConnConfig.OnNotification = func(*pgconn.PgConn, *pgconn.Notification) { handled.Add(1) }
	})
	st := newTestStore[w](t, pool)
	rec, _, err := st.Claim(bg, "", "req-1", newW("w-1").Fingerprint(), nil)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(bg, time.Minute)
	defer cancel()
	done := make(chan waited, 1)
	go func() {
		rec, ok, err := st.waitClaim(ctx, "", "req-1", rec.Token, time.Hour)
		done <- waited{rec, ok, err}
	}()
	requireLocked(t, pool, st, "req-1", 1)
	want, settled, err := st.Settle(bg, "", "req-1", rec.Token, sent(newW("w-1"), "0x1"))
	require.NoError(t, err)
	require.True(t, settled)
	select {
	case got := <-done:
		require.NoError(t, got.err)
		require.True(t, got.ok)
		assert.Equal(t, want, got.rec)
	case <-time.After(soon):
		t.Fatal("the wait did not hear the settle")
	}
	assert.Zero(t, handled.Load(), "notifications the pool's own connections took")
}
