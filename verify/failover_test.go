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
	failoverProcesses = 3
	failoverWorkers   = 4   // goroutines of a process, each submitting blocks of withdrawals until told to stop
	failoverBlock     = 10  // withdrawals a worker submits in an order of its own
	failoverKillAfter = 600 // answers before the primary is killed, and after the promotion before the end
	failoverTable     = "failover_submissions"
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

func TestFailover(t *testing.T) {
	if os.Getenv(failoverVar) != "1" {
		t.Skip(failoverVar + " is not 1: skipping the failover test, which runs two PostgreSQL clusters of its own as root (scripts/failover test runs it)")
	}
	url := failoverScript(t, "up")
	t.Cleanup(func() { failoverScript(t, "down") })
	pool, err := pgxpool.New(bg, url)
	require.NoError(t, err)
	st, err := pgstore.New[W](pool, pgstore.WithTable(failoverTable))
	require.NoError(t, err)
	require.NoError(t, st.Migrate(bg))
	pool.Close()

	lines := make(chan failoverLine)
	stop := make(chan struct{})
	var procs []*exec.Cmd
	var stdins []io.WriteCloser
	for p := range failoverProcesses {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), failoverChildVar+"="+strconv.Itoa(p), "SUBMISSIONS_FAILOVER_URL="+url)
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
				case lines <- failoverLine{p, strings.Fields(sc.Text())}:
				case <-stop:
					return
				}
			}
			select {
			case lines <- failoverLine{p, nil}:
			case <-stop:
			}
		}()
		procs, stdins = append(procs, cmd), append(stdins, stdin)
	}
	t.Cleanup(func() { close(stop) }) // before the processes are killed

	var (
		sends       = map[string][]failoverSent{} // by withdrawal
		told        = map[string]string{}         // key: the outcome's TxHash a caller was told was recorded
		toldBySend  = map[string]bool{}           // keys told so by the Submit that sent
		cut         = map[string]string{}         // key: how its send's caller was cut off
		storeFailed = map[string]bool{}           // keys of a Submit that got ErrStoreFailed
		holders     = map[string]bool{}           // keys a ConflictError named
		ids         = map[string]bool{}           // the withdrawals submitted
		answers     int                           // Submits returned, each with its final answer
		promoted    int                           // answers when the standby was promoted
		recovered   int                           // Submits answered after failing with the primary gone
		retries     int                           // Submits retried after ErrStoreFailed
		holding     int                           // processes inside their held send
		heldAnswers int                           // held sends answered
		killed      time.Time
		outage      time.Duration // from the kill to the end of the promotion
		phase       int           // 0 before the kill, 1 killed, 2 promoted, 3 stopped
	)
	running := failoverProcesses
	deadline := time.After(2 * time.Minute)
	for running > 0 {
		var l failoverLine
		select {
		case l = <-lines:
		case <-deadline:
			t.Fatalf("the ledger processes did not finish in time (phase %d, %d answers)", phase, answers)
		}
		f := l.fields
		if f == nil {
			running--
			continue
		}
		switch f[0] {
		case "sent": // withdrawal key tx
			sends[f[1]] = append(sends[f[1]], failoverSent{f[2], f[3]})
		case "holding":
			holding++
		case "storefailed": // key
			storeFailed[f[1]] = true
			retries++
		case "ok", "inflight", "conflict", "cut": // key withdrawal ... failures
			answers++
			ids[f[2]] = true
			if f[len(f)-1] != "0" && f[0] != "cut" {
				recovered++
			}
			if strings.HasPrefix(f[1], "held-") {
				heldAnswers++
			}
			switch f[0] {
			case "ok": // ... tx sent|replayed
				if prev, ok := told[f[1]]; ok {
					assert.Equal(t, prev, f[3], "outcomes told for %s", f[1])
				}
				told[f[1]] = f[3]
				toldBySend[f[1]] = toldBySend[f[1]] || f[4] == "sent"
			case "conflict": // ... holder
				holders[f[3]] = true
			case "cut": // ... class tx
				cut[f[1]] = f[3]
			}
		case "error":
			t.Errorf("process %d: %s", l.process, strings.Join(f[1:], " "))
		default:
			t.Logf("process %d: %s", l.process, strings.Join(f, " "))
		}
		// The primary dies while every process is inside a send, a third
		// of the way through; the sends then answer, with no primary to
		// record the answers; then the standby is promoted.
		if phase == 0 && holding == failoverProcesses && answers >= failoverKillAfter {
			killed = time.Now()
			failoverScript(t, "kill-primary")
			failoverTell(t, stdins, "release")
			phase = 1
		}
		if phase == 1 && heldAnswers == failoverProcesses {
			failoverScript(t, "promote")
			outage = time.Since(killed)
			promoted, phase = answers, 2
		}
		if phase == 2 && recovered > 0 && answers >= promoted+failoverKillAfter {
			failoverTell(t, stdins, "stop")
			for _, stdin := range stdins {
				require.NoError(t, stdin.Close())
			}
			phase = 3
		}
	}
	for p, cmd := range procs {
		require.NoError(t, cmd.Wait(), "ledger process %d", p)
	}
	require.Equal(t, 3, phase, "the failover happened")
	assert.NotZero(t, retries, "Submits that failed with the primary gone")

	// At most once, as the rail counts: before anything is closed by hand.
	for id, s := range sends {
		assert.Len(t, s, 1, "transfers of %s", id)
	}

	// The new primary, through the same multi-host string.
	pool, err = pgxpool.New(bg, url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	st, err = pgstore.New[W](pool, pgstore.WithTable(failoverTable))
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
	ahead := 0
	for key, tx := range told {
		out, ok := outcome(key)
		if !ok && !toldBySend[key] && cut[key] == "notrecorded" {
			ahead++
			continue
		}
		if assert.True(t, ok, "%s: told recorded, not on the new primary", key) {
			assert.Equal(t, tx, out.TxHash, "%s: the outcome told", key)
		}
	}
	// Each held send answered with no primary to record it.
	for p := range failoverProcesses {
		assert.Equal(t, "notrecorded", cut[fmt.Sprint("held-", p)], "the held send of process %d", p)
	}

	// The keys cut off are in flight, and closed from the rail's record:
	// resolved with its transfer, or released when it moved nothing.
	claims := failoverInFlight(t, ledger)
	var resolved, released int
	for _, c := range claims {
		assert.True(t, cut[c.Key] != "" || storeFailed[c.Key], "%s is in flight, yet no caller of it was cut off", c.Key)
		id := c.Fingerprint.WithdrawalID
		if s := sends[id]; len(s) > 0 {
			assert.Equal(t, c.Key, s[0].key, "the key whose send moved %s", id)
			found := failoverW(id)
			found.TxHash = s[0].tx
			require.NoError(t, ledger.Admin().ResolveClaim(bg, c, found), "resolve %s", c.Key)
			resolved++
		} else {
			require.NoError(t, ledger.Admin().ReleaseClaim(bg, c), "release %s", c.Key)
			released++
		}
	}
	assert.Empty(t, failoverInFlight(t, ledger), "keys in flight once closed")
	parentSends := 0
	rail := func(_ context.Context, x W) (W, error) {
		x.TxHash = fmt.Sprint("0xparent-", parentSends)
		parentSends++
		sends[x.ID] = append(sends[x.ID], failoverSent{"retry", x.TxHash})
		return x, nil
	}
	for _, c := range claims { // a retry completes each
		id := c.Fingerprint.WithdrawalID
		_, err := ledger.Submit(bg, c.Key, failoverW(id), rail)
		require.NoError(t, err, "retry of %s after it was closed", c.Key)
	}
	assert.Equal(t, released, parentSends, "sends of the retries: those of the released keys")

	// None lost, none twice: every withdrawal moved once, and its outcome
	// is that transfer, under the key that sent it; every key a conflict
	// named holds an outcome.
	for id := range ids {
		if !assert.Len(t, sends[id], 1, "transfers of %s", id) {
			continue
		}
		key := sends[id][0].key
		if key == "retry" {
			continue // checked by the retry's Submit
		}
		out, ok := outcome(key)
		if assert.True(t, ok, "%s: no outcome for the key that sent it", id) {
			assert.Equal(t, sends[id][0].tx, out.TxHash, "%s: the outcome of %s", id, key)
		}
	}
	for key, tx := range told {
		out, _ := outcome(key)
		assert.Equal(t, tx, out.TxHash, "%s: the outcome told, once the keys cut off are closed", key)
	}
	for key := range holders { // or the claim seen was a commit that the standby never had
		_, ok := outcome(key)
		assert.True(t, ok || storeFailed[key], "%s, named by a conflict, has no outcome", key)
	}
	notRecorded := 0
	for _, class := range cut {
		if class == "notrecorded" {
			notRecorded++
		}
	}
	figures.Add(t, "%d ledger processes, %d Submits of %d withdrawals (%d answered after failing with the primary gone), 1 failover: "+
		"primary killed in immediate mode, standby promoted %v later; %d Submits retried after ErrStoreFailed; "+
		"%d keys cut off (%d ErrOutcomeNotRecorded), %d in flight afterwards: %d resolved from the rail, %d released; "+
		"%d replays ahead of the standby; each withdrawal moved once",
		failoverProcesses, answers+retries, len(ids), recovered, outage.Round(time.Millisecond), retries,
		len(cut), notRecorded, len(claims), resolved, released, ahead)
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
