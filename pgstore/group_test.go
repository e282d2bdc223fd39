package pgstore

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemledger/submissions/driver"
)

// testGroup is a group of ints whose statements are recorded: alone adds
// one, run adds ten, each unless told to fail or panic.
type testGroup struct {
	group[int, int]
	rmu    sync.Mutex
	runs   [][]int // the requests of each run, alone or together
	gate   chan struct{}
	panics atomic.Bool
}

func newTestGroup() *testGroup {
	g := &testGroup{gate: make(chan struct{})}
	close(g.gate)
	record := func(qs ...int) {
		g.rmu.Lock()
		g.runs = append(g.runs, qs)
		g.rmu.Unlock()
		<-g.gate
		if g.panics.Load() {
			panic("statement panicked")
		}
	}
	g.alone = func(ctx context.Context, q int) (int, error) {
		record(q)
		return q + 1, nil
	}
	g.run = func(ctx context.Context, calls []*call[int, int]) {
		qs := make([]int, len(calls))
		for i, c := range calls {
			qs[i] = c.q
		}
		record(qs...)
		for _, c := range calls {
			c.a = c.q + 10
		}
	}
	return g
}

// waitRuns waits until g has run n statements.
func (g *testGroup) waitRuns(t *testing.T, n int) {
	t.Helper()
	require.Eventually(t, func() bool { g.rmu.Lock(); defer g.rmu.Unlock(); return len(g.runs) == n }, 5*time.Second, time.Millisecond)
}

// queued returns how many calls wait for a group.
func (g *testGroup) queued() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.queue)
}

// TestGroupRunsALoneCallAlone: a call that finds no group running runs its
// own statement at once, alone.
func TestGroupRunsALoneCallAlone(t *testing.T) {
	g := newTestGroup()
	for q := range 3 {
		a, err := g.do(bg, q)
		require.NoError(t, err)
		assert.Equal(t, q+1, a)
	}
	assert.Equal(t, [][]int{{0}, {1}, {2}}, g.runs)
	require.Eventually(t, func() bool { g.mu.Lock(); defer g.mu.Unlock(); return g.running == 0 }, 5*time.Second, time.Millisecond,
		"groups running after every call returned")
}

// TestGroupGathersTheCallsThatWait: while maxGroups statements run, calls
// queue, and the next group runs all of them in one statement; a call whose
// context ends while it waits gets its error at once and is not run.
func TestGroupGathersTheCallsThatWait(t *testing.T) {
	g := newTestGroup()
	g.gate = make(chan struct{})
	answers := make(chan [3]int, 10)
	ask := func(ctx context.Context, q int) {
		a, err := g.do(ctx, q)
		e := 0
		if err != nil {
			e = 1
			assert.ErrorIs(t, err, context.Canceled)
		}
		answers <- [3]int{q, a, e}
	}
	for q := range maxGroups { // each runs alone, and holds its group
		go ask(bg, q)
		g.waitRuns(t, q+1)
	}
	ended, cancel := context.WithCancel(bg)
	go ask(ended, 100)
	for q := 10; q < 15; q++ {
		go ask(bg, q)
	}
	require.Eventually(t, func() bool { return g.queued() == 6 }, 5*time.Second, time.Millisecond)
	cancel()
	got := map[int][2]int{}
	a := <-answers // while every group still runs
	got[a[0]] = [2]int{a[1], a[2]}
	close(g.gate)
	for range maxGroups + 5 {
		a := <-answers
		got[a[0]] = [2]int{a[1], a[2]}
	}
	for q := range maxGroups {
		assert.Equal(t, [2]int{q + 1, 0}, got[q], "call %d, alone", q)
	}
	for q := 10; q < 15; q++ {
		assert.Equal(t, [2]int{q + 10, 0}, got[q], "call %d, in a group", q)
	}
	assert.Equal(t, [2]int{0, 1}, got[100], "the call whose context ended")
	require.Len(t, g.runs, maxGroups+1, "statements: %v", g.runs)
	assert.ElementsMatch(t, []int{10, 11, 12, 13, 14}, g.runs[maxGroups], "the group's statement")
	require.Eventually(t, func() bool { g.mu.Lock(); defer g.mu.Unlock(); return g.running == 0 }, 5*time.Second, time.Millisecond)
}

// TestGroupPanicsInEveryCaller: a statement's panic goes on to every caller
// it answered for, in the caller's goroutine, and the group runs on.
func TestGroupPanicsInEveryCaller(t *testing.T) {
	g := newTestGroup()
	g.gate = make(chan struct{})
	g.panics.Store(true)
	var panicked atomic.Int32
	var wg sync.WaitGroup
	ask := func(q int) {
		wg.Go(func() {
			defer func() {
				if p := recover(); p != nil {
					assert.Equal(t, "statement panicked", p)
					panicked.Add(1)
				}
			}()
			_, _ = g.do(bg, q)
			t.Errorf("call %d returned", q)
		})
	}
	for q := range maxGroups {
		ask(q)
		g.waitRuns(t, q+1)
	}
	for q := 10; q < 13; q++ {
		ask(q)
	}
	require.Eventually(t, func() bool { return g.queued() == 3 }, 5*time.Second, time.Millisecond)
	close(g.gate)
	wg.Wait()
	assert.EqualValues(t, maxGroups+3, panicked.Load(), "callers that saw the panic")
	g.panics.Store(false)
	a, err := g.do(bg, 7)
	require.NoError(t, err)
	assert.Equal(t, 8, a, "a call after the panics")
}

// TestJointContextEndsWithTheLastOfItsCalls: a group's statement runs until
// every one of its callers' contexts has ended, and keeps the values of the
// first.
func TestJointContextEndsWithTheLastOfItsCalls(t *testing.T) {
	type key struct{}
	first, cancelFirst := context.WithCancel(context.WithValue(bg, key{}, "first"))
	second, cancelSecond := context.WithCancel(bg)
	defer cancelSecond()
	ctx, stop := jointContext([]*call[int, int]{{ctx: first}, {ctx: second}})
	defer stop()
	assert.Equal(t, "first", ctx.Value(key{}))
	cancelFirst()
	select {
	case <-ctx.Done():
		t.Fatal("the joint context ended with the first of two")
	case <-time.After(50 * time.Millisecond):
	}
	cancelSecond()
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the joint context did not end with the last")
	}
	ctx, stop = jointContext([]*call[int, int]{{ctx: bg}})
	stop()
	assert.Error(t, ctx.Err(), "a stopped joint context")
}

// blockWrites takes a lock on st's table that its INSERTs and UPDATEs wait
// for, and returns the function that lets them go.
func blockWrites(t *testing.T, st *Store[w]) (release func()) {
	t.Helper()
	tx, err := st.pool.Begin(bg)
	require.NoError(t, err)
	_, err = tx.Exec(bg, "LOCK TABLE "+st.names.table+" IN SHARE MODE")
	require.NoError(t, err)
	var once sync.Once
	release = func() { once.Do(func() { require.NoError(t, tx.Commit(bg)) }) }
	t.Cleanup(release)
	return release
}

// grouped runs fs at once on st: the first maxGroups alone, each holding a
// group, and the others together, in one group; it returns once they all
// have, having checked that the others ran together.
func grouped(t *testing.T, st *Store[w], queued func() int, fs ...func()) {
	t.Helper()
	release := blockWrites(t, st)
	var wg sync.WaitGroup
	for i, f := range fs[:maxGroups] { // one at a time, or two could share a group
		wg.Go(f)
		require.Eventually(t, func() bool { // it holds a group
			st.claims.mu.Lock()
			running := st.claims.running
			st.claims.mu.Unlock()
			st.settles.mu.Lock()
			running += st.settles.running
			st.settles.mu.Unlock()
			return running == i+1 && queued() == 0
		}, 5*time.Second, time.Millisecond)
	}
	for _, f := range fs[maxGroups:] {
		wg.Go(f)
	}
	require.Eventually(t, func() bool { return queued() == len(fs)-maxGroups }, 5*time.Second, time.Millisecond, "calls queued: %d, groups running: %d claims, %d settles", queued(), st.claims.running, st.settles.running)
	release()
	wg.Wait()
}

// TestGroupedClaimsAnswerAsAlone: claims made in one group of one statement
// get what each would have got alone: a fresh key is claimed; a key settled
// before comes back with its outcome; a withdrawal another key holds is a
// conflict naming it; of two keys for one withdrawal exactly one wins and the
// other is told it holds it; of two claims of one key, one claims and the
// other finds the claim.
func TestGroupedClaimsAnswerAsAlone(t *testing.T) {
	st := newTestStore[w](t, testPool(t, 8))
	done, claimed, err := st.Claim(bg, "", "done", newW("w-done").Fingerprint(), nil)
	require.NoError(t, err)
	require.True(t, claimed)
	_, _, err = st.Settle(bg, "", "done", done.Token, sent(newW("w-done"), "0xdone"))
	require.NoError(t, err)
	_, claimed, err = st.Claim(bg, "other", "holder", newW("w-held").Fingerprint(), nil) // in another tenant
	require.NoError(t, err)
	require.True(t, claimed)
	// A fresh Store, so that none of these keys is one it has seen.
	st, err = New[w](testPool(t, 8), WithTable(st.names.base))
	require.NoError(t, err)

	type answer struct {
		rec     driver.Record[w]
		claimed bool
		err     error
	}
	reqs := []struct{ tenant, key, id string }{
		{"", "first", "w-first"}, {"", "second", "w-second"}, // alone, each holding a group
		{"", "fresh", "w-fresh"},
		{"", "done", "w-done"},
		{"other", "taker", "w-held"},
		{"", "one-of-two-a", "w-contended"}, {"", "one-of-two-b", "w-contended"},
		{"", "same-key", "w-same"}, {"", "same-key", "w-same"},
		{"other", "fresh", "w-fresh"}, // the same key and withdrawal in another tenant
	}
	answers := make([]answer, len(reqs))
	fs := make([]func(), len(reqs))
	for i, r := range reqs {
		fs[i] = func() {
			rec, ok, err := st.Claim(bg, r.tenant, r.key, newW(r.id).Fingerprint(), nil)
			answers[i] = answer{rec, ok, err}
		}
	}
	grouped(t, st, func() int { st.claims.mu.Lock(); defer st.claims.mu.Unlock(); return len(st.claims.queue) }, fs...)

	for i, r := range reqs {
		a := answers[i]
		switch r.key {
		case "first", "second", "fresh":
			require.NoError(t, a.err, r.key)
			assert.True(t, a.claimed, "%s/%s claimed", r.tenant, r.key)
			assert.Equal(t, newW(r.id).Fingerprint(), a.rec.Fingerprint)
			assert.NotZero(t, a.rec.Token)
			assert.False(t, a.rec.Done)
		case "done":
			require.NoError(t, a.err, r.key)
			assert.False(t, a.claimed)
			assert.True(t, a.rec.Done)
			assert.Equal(t, done.Token, a.rec.Token)
			assert.Equal(t, sent(newW("w-done"), "0xdone"), a.rec.Outcome)
		case "taker":
			var conflict *driver.ConflictError
			require.ErrorAs(t, a.err, &conflict)
			assert.Equal(t, driver.ConflictError{Tenant: "other", Holder: "holder", Key: "taker", WithdrawalID: "w-held"}, *conflict)
		}
	}
	// Of two keys for one withdrawal, one wins.
	a, b := answers[5], answers[6]
	if b.err == nil {
		a, b = b, a
	}
	require.NoError(t, a.err)
	assert.True(t, a.claimed, "the winner of the withdrawal")
	var conflict *driver.ConflictError
	require.ErrorAs(t, b.err, &conflict, "the loser of the withdrawal")
	assert.Equal(t, "w-contended", conflict.WithdrawalID)
	assert.NotEqual(t, conflict.Key, conflict.Holder)
	// Of two claims of one key, one claims; the other finds its claim.
	a, b = answers[7], answers[8]
	require.NoError(t, a.err)
	require.NoError(t, b.err)
	assert.True(t, a.claimed != b.claimed, "one claim of the key claims: %v %v", a.claimed, b.claimed)
	assert.Equal(t, a.rec.Token, b.rec.Token, "both see one claim")
	assert.NotEqual(t, answers[2].rec.Token, answers[9].rec.Token, "one key in two tenants: two claims")
}

// TestGroupedSettlesAnswerAsAlone: settles made in one group of one
// statement get what each would have got alone: the outcome is written on a
// claim in flight; a claim settled already (resolved) comes back done and
// not settled; a claim released, or of another token, comes back as nothing.
func TestGroupedSettlesAnswerAsAlone(t *testing.T) {
	st := newTestStore[w](t, testPool(t, 8))
	claim := func(key string) driver.Token {
		rec, claimed, err := st.Claim(bg, "", key, newW("w-"+key).Fingerprint(), nil)
		require.NoError(t, err)
		require.True(t, claimed)
		return rec.Token
	}
	tokens := map[string]driver.Token{}
	for _, k := range []string{"first", "second", "fresh", "resolved", "released", "stale"} {
		tokens[k] = claim(k)
	}
	_, settled, err := st.Settle(bg, "", "resolved", tokens["resolved"], sent(newW("w-resolved"), "0xresolved"))
	require.NoError(t, err)
	require.True(t, settled)
	_, released, err := st.Release(bg, "", "released", tokens["released"])
	require.NoError(t, err)
	require.True(t, released)

	keys := []string{"first", "second", "fresh", "resolved", "released", "stale"}
	type answer struct {
		rec     driver.Record[w]
		settled bool
		err     error
	}
	answers := make([]answer, len(keys))
	fs := make([]func(), len(keys))
	for i, k := range keys {
		token := tokens[k]
		if k == "stale" {
			token++ // no claim of the key has it
		}
		fs[i] = func() {
			rec, ok, err := st.Settle(bg, "", k, token, sent(newW("w-"+k), "0x"+k))
			answers[i] = answer{rec, ok, err}
		}
	}
	grouped(t, st, func() int { st.settles.mu.Lock(); defer st.settles.mu.Unlock(); return len(st.settles.queue) }, fs...)

	for i, k := range keys {
		a := answers[i]
		require.NoError(t, a.err, k)
		switch k {
		case "first", "second", "fresh":
			assert.True(t, a.settled, k)
			assert.Equal(t, driver.Record[w]{Fingerprint: newW("w-" + k).Fingerprint(), Outcome: sent(newW("w-"+k), "0x"+k), Done: true, Token: tokens[k]}, a.rec, k)
			rec, ok, err := st.Lookup(bg, "", k)
			require.NoError(t, err)
			require.True(t, ok)
			assert.Equal(t, a.rec, rec, "%s as stored", k)
		case "resolved":
			assert.False(t, a.settled, k)
			assert.True(t, a.rec.Done)
			assert.Equal(t, "0xresolved", a.rec.Outcome.TxHash, "the outcome it had")
		default:
			assert.False(t, a.settled, k)
			assert.Zero(t, a.rec, k)
		}
	}
}

// TestGroupsThatCrossGiveWay: two groups, through two Stores, whose rows
// meet on two withdrawals in opposite orders (the server may break a
// deadlock between them by rolling one back) end with each withdrawal
// claimed by one key, and every other claim told which.
func TestGroupsThatCrossGiveWay(t *testing.T) {
	a := newTestStore[w](t, testPool(t, 4))
	b, err := New[w](testPool(t, 4), WithTable(a.names.base))
	require.NoError(t, err)
	release := blockWrites(t, a)
	groups := [2][]claimReq{
		{{"", "a-1", newW("w-1").Fingerprint()}, {"", "a-2", newW("w-2").Fingerprint()}},
		{{"", "b-1", newW("w-2").Fingerprint()}, {"", "b-2", newW("w-1").Fingerprint()}},
	}
	calls := [2][]*call[claimReq, int64]{}
	var wg sync.WaitGroup
	for i, st := range []*Store[w]{a, b} {
		for _, q := range groups[i] {
			calls[i] = append(calls[i], &call[claimReq, int64]{ctx: bg, q: q, done: make(chan struct{})})
		}
		wg.Go(func() { st.claimGroup(bg, calls[i]) })
	}
	require.Eventually(t, func() bool { // both wait for the lock
		var n int
		err := a.pool.QueryRow(bg, "SELECT count(*) FROM pg_locks WHERE relation = $1::regclass AND NOT granted", a.names.table).Scan(&n)
		return err == nil && n == 2
	}, 10*time.Second, 5*time.Millisecond)
	release()
	wg.Wait()
	var alone int
	for i, st := range []*Store[w]{a, b} {
		for _, c := range calls[i] {
			if c.err != nil {
				require.ErrorIs(t, c.err, errAlone, "a claim its group did not make")
				alone++
				_, _, err := st.Claim(bg, c.q.tenant, c.q.key, c.q.fp, nil)
				var conflict *driver.ConflictError
				require.ErrorAs(t, err, &conflict, "%s made alone", c.q.key)
				continue
			}
			assert.NotZero(t, c.a)
		}
	}
	assert.Equal(t, 2, alone, "claims left to be made alone")
	for _, id := range []string{"w-1", "w-2"} {
		_, found, err := a.ClaimedBy(bg, "", id)
		require.NoError(t, err)
		assert.True(t, found, id)
	}
}

// TestAGroupFailingOnTheServerLeavesItsClaimsAlone: when the server refuses
// a group's statement (an ERROR), nothing of it was written and each claim is
// left to be made alone; an error of the connection, or a session the server
// ended (FATAL, which may come after the commit), is every claim's.
func TestAGroupFailingOnTheServerLeavesItsClaimsAlone(t *testing.T) {
	server := &pgconn.PgError{Severity: "ERROR", Code: "40P01", Message: "deadlock detected"}
	assert.ErrorIs(t, groupFailed(server, server), errAlone)
	assert.ErrorIs(t, groupFailed(server, server), server, "the server's error stays")
	conn := errors.New("connection reset")
	assert.Same(t, conn, groupFailed(conn, conn))
	ended := &pgconn.PgError{Severity: "FATAL", Code: "57P01", Message: "terminating connection due to administrator command"}
	assert.Same(t, ended, groupFailed(ended, ended), "a session the server ended")
	localized := &pgconn.PgError{Severity: "FEHLER", SeverityUnlocalized: "ERROR", Code: "40P01"}
	assert.ErrorIs(t, groupFailed(localized, localized), errAlone, "a refusal in another language")
	localized = &pgconn.PgError{Severity: "ERROR", SeverityUnlocalized: "FATAL", Code: "57P01"}
	assert.Same(t, localized, groupFailed(localized, localized), "an end of the session, whatever the language")
}

// TestAGroupedClaimWhoseCallerLeftIsReleased: a caller whose context ends
// while its group's statement runs (on, for the others) gets ctx's error at
// once, as it would from a statement of its own, and the claim the statement
// makes for it is released: nothing is left claimed for a caller who is
// gone. The others' claims stand.
func TestAGroupedClaimWhoseCallerLeftIsReleased(t *testing.T) {
	pool := testPool(t, 8)
	st := newTestStore[w](t, pool)
	// Rows of transactions of the test's own, not committed: a claim of one
	// of their keys waits for its transaction.
	hold := func(keys ...string) func() {
		tx, err := pool.Begin(bg)
		require.NoError(t, err)
		for _, k := range keys {
			_, err := tx.Exec(bg, "INSERT INTO "+st.names.table+" (tenant, request_key, withdrawal_id, amount, currency, destination) VALUES ('', $1, $2, '1.00', 'USD', 'x')", k, "w-"+k)
			require.NoError(t, err)
		}
		var once sync.Once
		end := func() { once.Do(func() { require.NoError(t, tx.Rollback(bg)) }) }
		t.Cleanup(end)
		return end
	}
	first, second := hold("a-block", "b-block"), hold("c-block")
	type answer struct {
		claimed bool
		err     error
	}
	answers := map[string]answer{}
	var mu sync.Mutex
	claim := func(ctx context.Context, key string) func() {
		return func() {
			_, claimed, err := st.Claim(ctx, "", key, newW("w-"+key).Fingerprint(), nil)
			mu.Lock()
			answers[key] = answer{claimed, err}
			mu.Unlock()
		}
	}
	queued := func() int { st.claims.mu.Lock(); defer st.claims.mu.Unlock(); return len(st.claims.queue) }
	leaving, leave := context.WithCancel(bg)
	defer leave()
	var wg sync.WaitGroup
	for i, k := range []string{"a-block", "b-block"} { // each alone, holding a group, waiting for first
		wg.Go(claim(bg, k))
		require.Eventually(t, func() bool {
			st.claims.mu.Lock()
			defer st.claims.mu.Unlock()
			return st.claims.running == i+1 && len(st.claims.queue) == 0
		}, 5*time.Second, time.Millisecond)
	}
	for _, k := range []string{"c-block", "stayer"} {
		wg.Go(claim(bg, k))
	}
	wg.Go(claim(leaving, "leaver"))
	require.Eventually(t, func() bool { return queued() == 3 }, 5*time.Second, time.Millisecond)
	first() // the two alone end, and the group of three runs, waiting for second on c-block
	require.Eventually(t, func() bool {
		var n int
		err := pool.QueryRow(bg, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%unnest%' AND query LIKE '%' || $1 || '%'", st.names.base).Scan(&n)
		return err == nil && n == 1
	}, 10*time.Second, 5*time.Millisecond, "the group's statement waits")
	leave()
	require.Eventually(t, func() bool { // while its group's statement waits
		mu.Lock()
		defer mu.Unlock()
		_, ok := answers["leaver"]
		return ok
	}, 5*time.Second, time.Millisecond, "the caller who left")
	second()
	wg.Wait()

	for _, k := range []string{"a-block", "b-block", "c-block", "stayer"} {
		require.NoError(t, answers[k].err, k)
		assert.True(t, answers[k].claimed, k)
	}
	require.ErrorIs(t, answers["leaver"].err, context.Canceled)
	require.Eventually(t, func() bool {
		_, found, err := st.Lookup(bg, "", "leaver")
		return err == nil && !found
	}, 10*time.Second, 5*time.Millisecond, "the claim its group made for the caller who left is released")
}

// TestASettleGroupWritesInOneStatement: a group of settles writes every
// outcome it can in its one statement, and leaves to be made alone only a
// second settle of a key it has, or one whose statement failed.
func TestASettleGroupWritesInOneStatement(t *testing.T) {
	st := newTestStore[w](t, testPool(t, 4))
	var calls []*call[settleReq, settled]
	for _, k := range []string{"a", "b", "b"} {
		rec, _, err := st.Claim(bg, "", k, newW("w-"+k).Fingerprint(), nil)
		require.NoError(t, err)
		encoded, err := st.encode(k, sent(newW("w-"+k), "0x"+k))
		require.NoError(t, err)
		calls = append(calls, &call[settleReq, settled]{ctx: bg, q: settleReq{"", k, rec.Token, encoded}, done: make(chan struct{})})
	}
	st.settleGroup(bg, calls)
	for i, c := range calls[:2] {
		require.NoError(t, c.err, "settle %d", i)
		assert.Equal(t, settled{true, newW("w-" + c.q.key).Fingerprint()}, c.a, "settle %d", i)
	}
	assert.ErrorIs(t, calls[2].err, errAlone, "the second settle of b")

	ctx, cancel := context.WithCancel(bg)
	cancel()
	failing := &call[settleReq, settled]{ctx: bg, q: settleReq{"", "a", calls[0].q.token, calls[0].q.encoded}, done: make(chan struct{})}
	st.settleGroup(ctx, []*call[settleReq, settled]{failing})
	assert.ErrorIs(t, failing.err, errAlone, "a settle whose group's statement failed")
}
