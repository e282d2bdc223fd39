package pgstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemledger/submissions"
	"github.com/idemledger/submissions/internal/figures"
)

// errRailRefused is the rail's refusal: it moved no money.
var errRailRefused = errors.New("the rail refused the transfer: nothing moved")

// restartRail is the rail of the restart test: it logs every send, with the
// key it was made under and the answer it gave, so that a second send of a
// withdrawal shows and an operator can look up what was sent.
type restartRail struct {
	maxDelay    time.Duration // each send takes a random time up to this
	refuseOneIn int           // one send in this many is refused, moving nothing
	seq         atomic.Int64  // numbers the answers, so that no two are alike
	// gate, when set, holds the answers of the sends that reach it: the
	// money has moved, and the answer comes back once the gate is opened.
	gate     atomic.Pointer[chan struct{}]
	held     atomic.Int64 // sends that reached a gate
	heldKeys sync.Map     // the request keys of those sends

	mu    sync.Mutex
	sends map[string][]railSend // withdrawal id -> its sends
}

type railSend struct {
	key    string // the request key of the Submit that sent it
	answer w
}

// send returns the send of one Submit under key, which notes in *called that
// it ran and in *answer what it answered, if it moved money.
func (r *restartRail) send(key string, called *bool, answer *w) func(context.Context, w) (w, error) {
	return func(_ context.Context, x w) (w, error) {
		*called = true
		time.Sleep(rand.N(r.maxDelay))
		if rand.N(r.refuseOneIn) == 0 {
			return w{}, errRailRefused
		}
		*answer = sent(x, fmt.Sprintf("0x%s-%d", x.ID, r.seq.Add(1)))
		r.mu.Lock()
		r.sends[x.ID] = append(r.sends[x.ID], railSend{key: key, answer: *answer})
		r.mu.Unlock()
		if g := r.gate.Load(); g != nil {
			r.held.Add(1)
			r.heldKeys.Store(key, true)
			<-*g
		}
		return *answer, nil
	}
}

// sendsOf returns the sends of withdrawal id.
func (r *restartRail) sendsOf(id string) []railSend {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]railSend(nil), r.sends[id]...)
}

// restartKeys returns withdrawal i's id and its two request keys: a, which
// most calls share, and b, a second key for the same withdrawal.
func restartKeys(i int) (id, a, b string) {
	id = fmt.Sprintf("w-%05d", i)
	return id, "a-" + id, "b-" + id
}

// sibling returns the other request key of key's withdrawal.
func sibling(key string) string {
	if rest, ok := strings.CutPrefix(key, "a-"); ok {
		return "b-" + rest
	}
	return "a-" + strings.TrimPrefix(key, "b-")
}

// TestServerRestartedDuringARun restarts the PostgreSQL server in immediate
// mode (a crash, then recovery) twice while several ledgers, instances each
// with a pool of its own, submit withdrawals from many goroutines: most calls
// under a key they share, some under a second key for the same withdrawal.
// Every call that fails says what is known: a claim the store could not make
// sent nothing, an outcome that could not be recorded comes back with the
// rail's answer, a key left in flight is refused as in flight. Once the server
// is back the run resumes; then an operator resolves each key left in flight
// with what the rail sent, or releases it when the rail sent nothing, and
// submits again: every withdrawal ends sent exactly once, its recorded outcome
// the rail's answer, claimed by the key that sent it.
func TestServerRestartedDuringARun(t *testing.T) {
	const (
		ledgers  = 3
		workers  = 12                     // goroutines, spread over the ledgers
		restarts = 2                      // immediate restarts of the server
		newEvery = 10 * time.Millisecond  // a new withdrawal comes up this often while the server is up
		window   = 8                      // a call picks one of the latest window withdrawals
		maxDelay = 20 * time.Millisecond  // the rail takes up to this long
		held     = 3                      // answers held until the server is down, at each restart
		warmUp   = 700 * time.Millisecond // the run before the first restart
		calm     = 500 * time.Millisecond // the run after each restart, at least
	)
	admin := testPool(t, 2)
	command := restartCommand(t)
	url := os.Getenv(urlVar)
	table := testTable(t, admin)
	ls := make([]*submissions.Submissions[w], ledgers)
	stores := make([]*Store[w], ledgers)
	for i := range ls {
		st, err := New[w](testPool(t, 6), WithTable(table))
		require.NoError(t, err)
		require.NoError(t, st.Migrate(bg))
		stores[i], ls[i] = st, submissions.NewWithStore[w](st, submissions.WithLogger(quiet))
	}
	// Whatever happens, the server is left running for the tests after this
	// one (this runs before the table is dropped and the pools closed).
	pending := func() {} // waits for the restart command still running, if any
	t.Cleanup(func() {
		pending()
		if err := serverUp(url, 20*time.Second); err == nil {
			return
		}
		out, err := exec.Command("sh", "-c", command).CombinedOutput()
		assert.NoError(t, err, "restarting the server after the test: %s\n%s", command, out)
		assert.NoError(t, serverUp(url, 30*time.Second), "after the test")
	})

	var failures atomic.Int64
	fail := func(format string, args ...any) {
		t.Helper()
		if failures.Add(1) <= 20 {
			t.Errorf(format, args...)
		}
	}
	rail := &restartRail{maxDelay: maxDelay, refuseOneIn: 50, sends: map[string][]railSend{}}

	// What the calls got. A call's epoch is the number of restarts completed
	// when it started; restarting is set from the moment a restart begins
	// until the server accepts connections again.
	var (
		epoch                                        atomic.Int32
		restarting                                   atomic.Bool
		top                                          atomic.Int64 // the latest withdrawal
		sends, replays, conflicts, inFlight, refused atomic.Int64
		claimFailed, notRecorded                     [restarts + 1]atomic.Int64 // by epoch: failures of the next restart
		heldRecorded                                 [restarts + 1]atomic.Int64 // by epoch: answers held through the next restart, recorded after it
		sentIn                                       [restarts + 1]atomic.Int64 // fresh sends recorded, by epoch
		failedWhileUp                                [restarts + 1]atomic.Int64
		unrecordedKeys                               sync.Map // request keys whose outcome came back not recorded
		refusedKeys                                  sync.Map // request keys the rail refused to send
	)
	start := time.Now()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	stopWorkers := sync.OnceFunc(func() { close(stop); wg.Wait() })
	t.Cleanup(stopWorkers) // after a t.Fatal in the middle of the run

	// New withdrawals come up while the server is up; while it is down the
	// calls retry the latest ones.
	wg.Go(func() {
		tick := time.NewTicker(newEvery)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if !restarting.Load() {
					top.Add(1)
				}
			}
		}
	})
	for g := range workers {
		ledger := ls[g%ledgers]
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				i := max(0, int(top.Load())-rand.N(window))
				id, key, other := restartKeys(i)
				if rand.N(4) == 0 {
					key = other
				}
				e, up := epoch.Load(), !restarting.Load()
				var called bool
				var answer w
				ctx, cancel := context.WithTimeout(bg, 10*time.Second)
				out, err := ledger.Submit(ctx, key, newW(id), rail.send(key, &called, &answer))
				cancel()
				var conflict *submissions.ConflictError
				failed := false
				switch {
				case err == nil && called:
					if out != answer {
						fail("%s: got %+v; want the rail's answer %+v", key, out, answer)
					}
					sends.Add(1)
					sentIn[e].Add(1)
					if _, ok := rail.heldKeys.LoadAndDelete(key); ok {
						heldRecorded[e].Add(1)
					}
				case err == nil: // a replay: the answer this key's send got
					found := false
					for _, s := range rail.sendsOf(id) {
						found = found || s == railSend{key: key, answer: out}
					}
					if !found {
						fail("%s: replayed %+v, which the rail never answered under this key", key, out)
					}
					replays.Add(1)
				case errors.As(err, &conflict):
					if called || out != (w{}) || conflict.Key != key || conflict.WithdrawalID != id || conflict.Holder != sibling(key) {
						fail("%s: called send %v, got %+v, %#v; want nothing sent and the other key named", key, called, out, conflict)
					}
					conflicts.Add(1)
				case errors.Is(err, submissions.ErrSubmissionInFlight):
					if called || out != (w{}) {
						fail("%s: in flight, yet called send %v and got %+v: %v", key, called, out, err)
					}
					inFlight.Add(1)
				case errors.Is(err, submissions.ErrOutcomeNotRecorded):
					if !called || out != answer || answer == (w{}) {
						fail("%s: outcome not recorded, with send called %v and %+v; want the rail's answer %+v: %v", key, called, out, answer, err)
					}
					notRecorded[e].Add(1)
					unrecordedKeys.Store(key, true)
					failed = true
				case errors.Is(err, errRailRefused):
					if !errors.Is(err, submissions.ErrOutcomeUnknown) || !called || out != (w{}) || answer != (w{}) {
						fail("%s: the rail refused, yet got %+v: %v", key, out, err)
					}
					refused.Add(1)
					refusedKeys.Store(key, true)
				case errors.Is(err, submissions.ErrStoreFailed):
					if called || out != (w{}) {
						fail("%s: the store failed before sending, yet send was called (%v) or an outcome returned (%+v): %v", key, called, out, err)
					}
					claimFailed[e].Add(1)
					failed = true
				default:
					fail("%s: an error that does not say what is known (called send: %v): %v", key, called, err)
				}
				if failed {
					if up && !restarting.Load() && epoch.Load() == e {
						failedWhileUp[e].Add(1) // started and ended while the server was up
					}
					time.Sleep(time.Duration(5+rand.N(15)) * time.Millisecond) // a client's back-off
				}
			}
		})
	}

	// restart restarts the server. First it holds the answers of a few sends
	// until the server is down, so that their outcomes are written to a
	// server that is gone. It returns once the server accepts connections
	// again, with how long it was unavailable, and leaves pending to wait for
	// the command, which may still be checking that it does.
	restart := func(r int) time.Duration {
		probe, err := pgx.Connect(bg, url) // a connection that dies with the server
		require.NoError(t, err, "restart %d: connect", r+1)
		defer probe.Close(bg)
		// A checkpoint first, so that the server's recovery replays only
		// this run's writes: after a long test run it may otherwise outlast
		// the held callers' deadlines. It needs pg_checkpoint (scripts/pg
		// grants it).
		if _, err := probe.Exec(bg, "CHECKPOINT"); err != nil {
			t.Logf("restart %d: no checkpoint before it (%v); the server's recovery may outlast the held callers' deadlines", r+1, err)
		}
		gate := make(chan struct{})
		openGate := sync.OnceFunc(func() { rail.gate.Store(nil); close(gate) })
		defer openGate()
		before := rail.held.Load()
		rail.gate.Store(&gate)
		for deadline := time.Now().Add(5 * time.Second); rail.held.Load()-before < held && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
		restarting.Store(true)
		began := time.Now()
		cmd := exec.Command("sh", "-c", command)
		var output bytes.Buffer
		cmd.Stdout, cmd.Stderr = &output, &output
		require.NoError(t, cmd.Start(), "restart %d: %s", r+1, command)
		pending = sync.OnceFunc(func() {
			assert.NoError(t, cmd.Wait(), "restart %d: %s\n%s", r+1, command, output.Bytes())
		})
		down := false
		for deadline := time.Now().Add(10 * time.Second); !down && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			ctx, cancel := context.WithTimeout(bg, 2*time.Second)
			_, err := probe.Exec(ctx, "SELECT 1")
			cancel()
			down = err != nil
		}
		openGate()
		assert.True(t, down, "restart %d: the server never went down: is %s=%q a restart in immediate mode?", r+1, restartVar, command)
		require.NoError(t, serverUp(url, 30*time.Second), "restart %d", r+1)
		epoch.Store(int32(r + 1))
		restarting.Store(false)
		return time.Since(began)
	}
	time.Sleep(warmUp)
	var outages []string
	for r := range restarts {
		outages = append(outages, restart(r).Round(100*time.Millisecond).String())
		time.Sleep(calm)
		for deadline := time.Now().Add(10 * time.Second); sentIn[r+1].Load() < 10 && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond) // until the run has resumed
		}
		if r+1 < restarts {
			pending()
		}
	}
	stopWorkers()
	runTime := time.Since(start)
	n := int(top.Load()) + 1 // no call picked a withdrawal beyond these

	// The run resumed after each restart: calls that started once the server
	// was back sent withdrawals and recorded their outcomes.
	for e := range restarts + 1 {
		assert.NotZero(t, sentIn[e].Load(), "withdrawals sent and recorded after restart %d", e)
	}
	// Each restart made claims and outcome writes fail.
	for r := range restarts {
		assert.NotZero(t, claimFailed[r].Load(), "claims failed at restart %d", r+1)
		// The answers held until the server was down were written again
		// once it was back, within their callers' deadlines.
		assert.GreaterOrEqual(t, heldRecorded[r].Load(), int64(held), "answers held through restart %d, recorded once the server was back", r+1)
	}
	assert.Zero(t, failedWhileUp[0].Load(), "calls failed before the first restart")

	// The operator: every key left in flight is resolved with what the rail
	// sent under it, or released when the rail sent nothing, and every
	// withdrawal is submitted again.
	var resolved, released, sentLate, recordedAfterAll, claimedAfterAll atomic.Int64
	ctx, cancel := context.WithTimeout(bg, 60*time.Second)
	defer cancel()
	parallel := func(each func(ledger *submissions.Submissions[w], st *Store[w], i int)) {
		var wg sync.WaitGroup
		for g := range workers {
			wg.Go(func() {
				for i := g; i < n; i += workers {
					each(ls[g%ledgers], stores[g%ledgers], i)
				}
			})
		}
		wg.Wait()
	}
	parallel(func(ledger *submissions.Submissions[w], _ *Store[w], i int) {
		id, key, _ := restartKeys(i)
		holder, held, err := ledger.ClaimedBy(ctx, id)
		if err != nil {
			fail("reconcile %s: ClaimedBy: %v", id, err)
			return
		}
		sent := rail.sendsOf(id)
		switch {
		case len(sent) > 1:
			fail("%s was sent %d times: %+v", id, len(sent), sent)
			return
		case !held && len(sent) == 1:
			fail("%s was sent under %s, and no key claims it", id, sent[0].key)
			return
		case held:
			key = holder
			_, done, err := ledger.Outcome(ctx, holder)
			switch {
			case err != nil:
				fail("reconcile %s: Outcome(%s): %v", id, holder, err)
				return
			case done:
				if _, ok := unrecordedKeys.Load(holder); ok {
					// The outcome's write committed, and the connection
					// died before it answered.
					recordedAfterAll.Add(1)
				}
			case len(sent) == 1 && sent[0].key != holder:
				fail("%s was sent under %s, and %s claims it", id, sent[0].key, holder)
				return
			case len(sent) == 1:
				if err := ledger.Resolve(ctx, holder, sent[0].answer); err != nil {
					fail("Resolve(%s) with the rail's answer: %v", holder, err)
					return
				}
				resolved.Add(1)
			default:
				if err := ledger.Release(ctx, holder); err != nil {
					fail("Release(%s), which the rail never sent: %v", holder, err)
					return
				}
				released.Add(1)
				if _, ok := refusedKeys.Load(holder); !ok {
					// The claim's INSERT committed, and the connection
					// died before it answered.
					claimedAfterAll.Add(1)
				}
			}
		}
		for { // the rail may refuse; then the key is released and sent again
			var called bool
			var answer w
			out, err := ledger.Submit(ctx, key, newW(id), rail.send(key, &called, &answer))
			switch {
			case errors.Is(err, errRailRefused):
				if err := ledger.Release(ctx, key); err != nil {
					fail("Release(%s), which the rail refused: %v", key, err)
					return
				}
				continue
			case err != nil:
				fail("reconcile: Submit(%s): %v", key, err)
			case called:
				if out != answer {
					fail("reconcile: Submit(%s): got %+v; want the rail's answer %+v", key, out, answer)
				}
				sentLate.Add(1)
			}
			return
		}
	})

	// Every withdrawal was sent once, under the key that claims it, and its
	// recorded outcome is the rail's answer; the other key holds nothing.
	parallel(func(ledger *submissions.Submissions[w], st *Store[w], i int) {
		id, _, _ := restartKeys(i)
		sent := rail.sendsOf(id)
		if len(sent) != 1 {
			fail("%s was sent %d times; want once", id, len(sent))
			return
		}
		holder, held, err := ledger.ClaimedBy(ctx, id)
		if err != nil || !held || holder != sent[0].key {
			fail("ClaimedBy(%s): got %q, %v, %v; want %q, which sent it", id, holder, held, err, sent[0].key)
			return
		}
		if out, ok, err := ledger.Outcome(ctx, holder); err != nil || !ok || out != sent[0].answer {
			fail("Outcome(%s): got %+v, %v, %v; want the rail's answer %+v", holder, out, ok, err, sent[0].answer)
		}
		if rec, ok, err := st.Lookup(ctx, "", sibling(holder)); err != nil || ok {
			fail("%s, the other key of %s: got %+v, %v, %v; want no record", sibling(holder), id, rec, ok, err)
		}
	})
	var rows, settled int
	require.NoError(t, admin.QueryRow(ctx, "SELECT count(*), count(outcome) FROM "+table).Scan(&rows, &settled))
	rail.mu.Lock()
	withdrawalsSent := len(rail.sends)
	rail.mu.Unlock()
	assert.Equal(t, n, rows, "rows")
	assert.Equal(t, n, settled, "rows with an outcome")
	assert.Equal(t, n, withdrawalsSent, "withdrawals sent")
	pending() // the last restart command, which the operator's work overlapped
	if extra := failures.Load() - 20; extra > 0 {
		t.Errorf("and %d more failures", extra)
	}

	var failedClaims, unrecorded, failedUp, recordedAgain int64
	for e := range restarts + 1 {
		recordedAgain += heldRecorded[e].Load()
		failedClaims += claimFailed[e].Load()
		unrecorded += notRecorded[e].Load()
		failedUp += failedWhileUp[e].Load()
	}
	figures.Add(t, "restart: %d restarts, %d calls failed during them (%d claims failed, nothing sent; %d outcomes not recorded, returned with the rail's answer); "+
		"%d answers held until the server was down, recorded once it was back; %d withdrawals, each sent once",
		restarts, failedClaims+unrecorded, failedClaims, unrecorded, recordedAgain, n)
	t.Logf("run %v, server unavailable %s; calls: %d sent, %d replayed, %d refused for the other key, %d in flight, %d refused by the rail, %d failed while the server was up; after all, %d claims reported failed were made and %d outcomes reported not recorded were recorded; operator: %d keys resolved, %d released, %d withdrawals sent afterwards; %v in all",
		runTime.Round(100*time.Millisecond), strings.Join(outages, " and "), sends.Load(), replays.Load(), conflicts.Load(), inFlight.Load(), refused.Load(), failedUp, claimedAfterAll.Load(), recordedAfterAll.Load(),
		resolved.Load(), released.Load(), sentLate.Load(), time.Since(start).Round(100*time.Millisecond))
}
