package verify

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemledger/submissions"
	"github.com/idemledger/submissions/admin"
	"github.com/idemledger/submissions/internal/figures"
	"github.com/idemledger/submissions/pgstore"
)

// The failover test: ledger processes on a primary with a synchronous
// standby (scripts/failover), the primary killed mid-run and the standby
// promoted. Each process's rail reports every transfer to this process over
// a pipe, outside the database, so the count of sends survives the failover.
const (
	failoverVar       = "SUBMISSIONS_TEST_FAILOVER"  // "1" runs TestFailover
	failoverChildVar  = "SUBMISSIONS_FAILOVER_CHILD" // makes the test binary ledger process number N
	failoverTableVar  = "SUBMISSIONS_FAILOVER_TABLE" // the table a ledger process works on
	failoverProcesses = 3
	failoverWorkers   = 4   // goroutines of a process, each submitting blocks of withdrawals until told to stop
	failoverBlock     = 10  // withdrawals a worker submits in an order of its own
	failoverKillAfter = 600 // answers before the primary is killed, and after the promotion before the end
	failoverTable     = "failover_submissions"
	failoverHeldFor   = time.Second // how long a held send's caller waits for its answer to be recorded
)

// failoverW is withdrawal id, as every process submits it.
func failoverW(id string) W {
	return W{ID: id, Amount: "10", Currency: "EUR", Dest: "acct-" + id}
}

// failoverKey is the key worker g submits withdrawal i under: "k-i", and for
// every fourth withdrawal "alt-i" from odd workers, so that two keys race
// for it.
func failoverKey(i, g int) string {
	if i%4 == 0 && g%2 == 1 {
		return fmt.Sprint("alt-", i)
	}
	return fmt.Sprint("k-", i)
}

// failoverScript runs scripts/failover with command, and returns what it
// printed.
func failoverScript(t *testing.T, command string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join("..", "scripts", "failover"), command)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "scripts/failover %s: %s", command, stderr.String())
	return strings.TrimSpace(string(out))
}

// failoverSent is one transfer, as the rail reported it.
type failoverSent struct{ key, tx string }

// failoverLine is a line a ledger process printed; nil fields for its end.
type failoverLine struct {
	process int
	fields  []string
}

// railRun is what the test learns from its ledger processes: what the rail
// moved, and what each caller was told.
type railRun struct {
	sends       map[string][]failoverSent // by withdrawal
	told        map[string]string         // key: the outcome's TxHash a caller was told was recorded
	toldBySend  map[string]bool           // keys told so by the Submit that sent
	cut         map[string]string         // key: how its send's caller was cut off
	storeFailed map[string]bool           // keys of a Submit that got ErrStoreFailed
	holders     map[string]bool           // keys a ConflictError named
	ids         map[string]bool           // the withdrawals submitted
	late        []string                  // Submits that returned after their deadline
	answers     int                       // Submits returned, each with its final answer
	recovered   int                       // Submits answered after failing with the primary gone
	retries     int                       // Submits retried after ErrStoreFailed

	lines  chan failoverLine
	stop   chan struct{}
	procs  []*exec.Cmd
	stdins []io.WriteCloser
}

// startRailRun migrates table on url and starts the ledger processes on it,
// each with env added to its environment.
func startRailRun(t *testing.T, url, table string, env ...string) *railRun {
	pool, err := pgxpool.New(bg, url)
	require.NoError(t, err)
	st, err := pgstore.New[W](pool, pgstore.WithTable(table))
	require.NoError(t, err)
	require.NoError(t, st.Migrate(bg))
	pool.Close()

	r := &railRun{
		sends: map[string][]failoverSent{}, told: map[string]string{}, toldBySend: map[string]bool{}, cut: map[string]string{},
		storeFailed: map[string]bool{}, holders: map[string]bool{}, ids: map[string]bool{},
		lines: make(chan failoverLine), stop: make(chan struct{}),
	}
	for p := range failoverProcesses {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), failoverChildVar+"="+strconv.Itoa(p), "SUBMISSIONS_FAILOVER_URL="+url, failoverTableVar+"="+table)
		cmd.Env = append(cmd.Env, env...)
		cmd.Stderr = os.Stderr
		stdin, err := cmd.StdinPipe()
		require.NoError(t, err)
		stdout, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				select {
				case r.lines <- failoverLine{p, strings.Fields(sc.Text())}:
				case <-r.stop:
					return
				}
			}
			select {
			case r.lines <- failoverLine{p, nil}:
			case <-r.stop:
			}
		}()
		r.procs, r.stdins = append(r.procs, cmd), append(r.stdins, stdin)
	}
	t.Cleanup(func() { close(r.stop) }) // before the processes are killed
	return r
}

// take records what line l says, and reports whether it is a Submit's
// answer.
func (r *railRun) take(t *testing.T, l failoverLine) bool {
	f := l.fields
	switch f[0] {
	case "sent": // withdrawal key tx
		r.sends[f[1]] = append(r.sends[f[1]], failoverSent{f[2], f[3]})
	case "storefailed": // key
		r.storeFailed[f[1]] = true
		r.retries++
	case "late": // key milliseconds error
		r.late = append(r.late, strings.Join(f[1:], " "))
	case "ok", "inflight", "conflict", "cut": // key withdrawal ... failures
		r.answers++
		r.ids[f[2]] = true
		if f[len(f)-1] != "0" && f[0] != "cut" {
			r.recovered++
		}
		switch f[0] {
		case "ok": // ... tx sent|replayed began
			if prev, ok := r.told[f[1]]; ok {
				assert.Equal(t, prev, f[3], "outcomes told for %s", f[1])
			}
			r.told[f[1]] = f[3]
			r.toldBySend[f[1]] = r.toldBySend[f[1]] || f[4] == "sent"
		case "conflict": // ... holder
			r.holders[f[3]] = true
		case "cut": // ... class tx
			r.cut[f[1]] = f[3]
		}
		return true
	case "error":
		t.Errorf("process %d: %s", l.process, strings.Join(f[1:], " "))
	default:
		t.Logf("process %d: %s", l.process, strings.Join(f, " "))
	}
	return false
}

// finish tells the processes to stop, and waits for them.
func (r *railRun) finish(t *testing.T) {
	failoverTell(t, r.stdins, "stop")
	for _, stdin := range r.stdins {
		require.NoError(t, stdin.Close())
	}
}

// closed is what check did to the keys left in flight.
type closed struct{ inFlight, resolved, released, ahead int }

// check checks, on the primary that url finds, that every withdrawal moved
// at most once on the rail, that every outcome a caller was told is there,
// and that every key left in flight is listed; it closes those from the
// rail's record, retries them, and checks that every withdrawal then moved
// exactly once.
func (r *railRun) check(t *testing.T, url, table string) closed {
	var c closed
	// At most once, as the rail counts: before anything is closed by hand.
	for id, s := range r.sends {
		assert.Len(t, s, 1, "transfers of %s", id)
	}

	pool, err := pgxpool.New(bg, url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	st, err := pgstore.New[W](pool, pgstore.WithTable(table))
	require.NoError(t, err)
	ledger := submissions.NewWithStore[W](st, quiet)
	outcome := func(key string) (W, bool) {
		out, ok, err := ledger.Outcome(bg, key)
		require.NoError(t, err, "Outcome of %s", key)
		return out, ok
	}

	// Every outcome a Submit that sent was told was recorded is there. A
	// replay may have read, on the old primary, a record its standby did
	// not have yet (PostgreSQL shows a commit to other sessions while it
	// waits for the standby): the sender was then cut off, and the key is
	// in flight until closed below.
	for key, tx := range r.told {
		out, ok := outcome(key)
		if !ok && !r.toldBySend[key] && r.cut[key] == "notrecorded" {
			c.ahead++
			continue
		}
		if assert.True(t, ok, "%s: told recorded, not on the new primary", key) {
			assert.Equal(t, tx, out.TxHash, "%s: the outcome told", key)
		}
	}

	// The keys cut off are in flight, and closed from the rail's record:
	// resolved with its transfer, or released when it moved nothing.
	claims := failoverInFlight(t, ledger)
	c.inFlight = len(claims)
	for _, cl := range claims {
		assert.True(t, r.cut[cl.Key] != "" || r.storeFailed[cl.Key], "%s is in flight, yet no caller of it was cut off", cl.Key)
		id := cl.Fingerprint.WithdrawalID
		if s := r.sends[id]; len(s) > 0 {
			assert.Equal(t, cl.Key, s[0].key, "the key whose send moved %s", id)
			found := failoverW(id)
			found.TxHash = s[0].tx
			require.NoError(t, ledger.Admin().ResolveClaim(bg, cl, found), "resolve %s", cl.Key)
			c.resolved++
		} else {
			// A claim cut off is not known to have ended: the operator who
			// has looked at the rail releases it with force.
			res := ledger.Admin().Release(bg, admin.Target{Tenant: cl.Tenant, Key: cl.Key, Token: cl.Token, Force: true})
			require.Equal(t, admin.Changed, res.Decision, "release %s: %s", cl.Key, res.Message)
			c.released++
		}
	}
	assert.Empty(t, failoverInFlight(t, ledger), "keys in flight once closed")
	parentSends := 0
	rail := func(_ context.Context, x W) (W, error) {
		x.TxHash = fmt.Sprint("0xparent-", parentSends)
		parentSends++
		r.sends[x.ID] = append(r.sends[x.ID], failoverSent{"retry", x.TxHash})
		return x, nil
	}
	for _, cl := range claims { // a retry completes each
		id := cl.Fingerprint.WithdrawalID
		_, err := ledger.Submit(bg, cl.Key, failoverW(id), rail)
		require.NoError(t, err, "retry of %s after it was closed", cl.Key)
	}
	assert.Equal(t, c.released, parentSends, "sends of the retries: those of the released keys")

	// None lost, none twice: every withdrawal moved once, and its outcome
	// is that transfer, under the key that sent it; every key a conflict
	// named holds an outcome.
	for id := range r.ids {
		if !assert.Len(t, r.sends[id], 1, "transfers of %s", id) {
			continue
		}
		key := r.sends[id][0].key
		if key == "retry" {
			continue // checked by the retry's Submit
		}
		out, ok := outcome(key)
		if assert.True(t, ok, "%s: no outcome for the key that sent it", id) {
			assert.Equal(t, r.sends[id][0].tx, out.TxHash, "%s: the outcome of %s", id, key)
		}
	}
	for key, tx := range r.told {
		out, _ := outcome(key)
		assert.Equal(t, tx, out.TxHash, "%s: the outcome told, once the keys cut off are closed", key)
	}
	for key := range r.holders { // or the claim seen was a commit that the standby never had
		_, ok := outcome(key)
		assert.True(t, ok || r.storeFailed[key], "%s, named by a conflict, has no outcome", key)
	}
	return c
}

// cutAs counts the keys cut off as class.
func (r *railRun) cutAs(class string) int {
	n := 0
	for _, c := range r.cut {
		if c == class {
			n++
		}
	}
	return n
}

func TestFailover(t *testing.T) {
	if os.Getenv(failoverVar) != "1" {
		t.Skip(failoverVar + " is not 1: skipping the failover test, which runs two PostgreSQL clusters of its own as root (scripts/failover test runs it)")
	}
	url := failoverScript(t, "up")
	t.Cleanup(func() { failoverScript(t, "down") })
	r := startRailRun(t, url, failoverTable)

	var (
		promoted    int // answers when the standby was promoted
		holding     int // processes inside their held send
		heldAnswers int // held sends answered
		killed      time.Time
		outage      time.Duration // from the kill to the end of the promotion
		phase       int           // 0 before the kill, 1 killed, 2 promoted, 3 stopped
	)
	running := failoverProcesses
	deadline := time.After(2 * time.Minute)
	for running > 0 {
		var l failoverLine
		select {
		case l = <-r.lines:
		case <-deadline:
			t.Fatalf("the ledger processes did not finish in time (phase %d, %d answers)", phase, r.answers)
		}
		if l.fields == nil {
			running--
			continue
		}
		if l.fields[0] == "holding" {
			holding++
		} else if r.take(t, l) && strings.HasPrefix(l.fields[1], "held-") {
			heldAnswers++
		}
		// The primary dies while every process is inside a send, a third
		// of the way through; the sends then answer, with no primary to
		// record the answers; then the standby is promoted.
		if phase == 0 && holding == failoverProcesses && r.answers >= failoverKillAfter {
			killed = time.Now()
			failoverScript(t, "kill-primary")
			failoverTell(t, r.stdins, "release")
			phase = 1
		}
		if phase == 1 && heldAnswers == failoverProcesses {
			failoverScript(t, "promote")
			outage = time.Since(killed)
			promoted, phase = r.answers, 2
		}
		if phase == 2 && r.recovered > 0 && r.answers >= promoted+failoverKillAfter {
			r.finish(t)
			phase = 3
		}
	}
	for p, cmd := range r.procs {
		require.NoError(t, cmd.Wait(), "ledger process %d", p)
	}
	require.Equal(t, 3, phase, "the failover happened")
	assert.NotZero(t, r.retries, "Submits that failed with the primary gone")
	// Each held send answered with no primary to record it.
	for p := range failoverProcesses {
		assert.Equal(t, "notrecorded", r.cut[fmt.Sprint("held-", p)], "the held send of process %d", p)
	}
	c := r.check(t, url, failoverTable)
	figures.Add(t, "%d ledger processes, %d Submits of %d withdrawals (%d answered after failing with the primary gone), 1 failover: "+
		"primary killed in immediate mode, standby promoted %v later; %d Submits retried after ErrStoreFailed; "+
		"%d keys cut off (%d ErrOutcomeNotRecorded), %d in flight afterwards: %d resolved from the rail, %d released; "+
		"%d replays ahead of the standby; each withdrawal moved once",
		failoverProcesses, r.answers+r.retries, len(r.ids), r.recovered, outage.Round(time.Millisecond), r.retries,
		len(r.cut), r.cutAs("notrecorded"), c.inFlight, c.resolved, c.released, c.ahead)
}

// failoverTell writes line to every ledger process.
func failoverTell(t *testing.T, stdins []io.WriteCloser, line string) {
	for _, stdin := range stdins {
		_, err := io.WriteString(stdin, line+"\n")
		require.NoError(t, err)
	}
}

// failoverInFlight lists every key in flight.
func failoverInFlight(t *testing.T, ledger *submissions.Submissions[W]) []admin.Claim {
	var all []admin.Claim
	q := admin.InFlightQuery{Limit: admin.MaxListLimit}
	for {
		page, err := ledger.Admin().InFlight(bg, q)
		require.NoError(t, err)
		all = append(all, page...)
		if len(page) < q.Limit {
			return all
		}
		q.After = &page[len(page)-1]
	}
}
