package verify

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemledger/submissions/internal/figures"
)

// The HA tests: ledger processes on PostgreSQL run by Patroni over etcd
// (scripts/ha), through a connection string that finds the primary, while
// the cluster meets a fault that nobody scripts the recovery of: the
// leader's postmaster killed, the leader frozen past Patroni's TTL, or a
// switchover. Each process's rail reports every transfer to this process,
// outside the cluster, as in TestFailover.
const (
	haVar      = "SUBMISSIONS_TEST_HA"      // "1" runs TestHA
	haModeVar  = "SUBMISSIONS_FAILOVER_HA"  // makes a ledger process one of TestHA's
	haRunsVar  = "SUBMISSIONS_HA_SCENARIOS" // the scenarios TestHA runs, comma-separated; all when empty
	haWorkers  = 8                          // goroutines of a ledger process
	haTimeout  = 10 * time.Second           // each Submit's deadline
	haLate     = 300 * time.Millisecond     // how long after its deadline a Submit may return
	haBefore   = 100                        // withdrawals submitted before the fault
	haAfter    = 200                        // withdrawals submitted after the fault is over and the cluster took a send that began after it
	haFrozen   = 30 * time.Second           // how long freeze keeps the leader stopped: Patroni's TTL (20 s) and 10 s
	haScenario = 4 * time.Minute            // the most a scenario may take
)

// haScript runs scripts/ha with args, and returns what it printed.
func haScript(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join("..", "scripts", "ha"), args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "scripts/ha %s: %s", strings.Join(args, " "), stderr.String())
	return strings.TrimSpace(string(out))
}

// haFaults are the scenarios, by name: each makes its fault, tells at on
// the moment it is made, and returns once the fault is over (the cluster
// may still be recovering).
var haFaults = map[string]func(t *testing.T, at chan<- time.Time){
	"crash": func(t *testing.T, at chan<- time.Time) {
		haScript(t, "crash")
		at <- time.Now()
	},
	"freeze": func(t *testing.T, at chan<- time.Time) {
		haScript(t, "freeze")
		at <- time.Now()
		time.Sleep(haFrozen)
		haScript(t, "thaw")
	},
	"switchover": func(t *testing.T, at chan<- time.Time) {
		at <- time.Now()
		haScript(t, "switchover")
	},
}

func TestHA(t *testing.T) {
	if os.Getenv(haVar) != "1" {
		t.Skip(haVar + " is not 1: skipping the HA tests, which run etcd, Patroni and PostgreSQL of their own as root (scripts/ha test runs them)")
	}
	scenarios := []string{"crash", "switchover", "freeze"}
	if s := os.Getenv(haRunsVar); s != "" {
		scenarios = strings.Split(s, ",")
	}
	t.Cleanup(func() { haScript(t, "down") })
	for _, name := range scenarios {
		fault, ok := haFaults[name]
		require.True(t, ok, "%s names no scenario", name)
		t.Run(name, func(t *testing.T) { haRun(t, name, fault) })
	}
}

// haRun runs one scenario: load from the ledger processes, the fault once
// haBefore withdrawals were submitted, and the end once haAfter more were
// submitted after the fault was over and the cluster recorded a send that
// began after it was made; then the checks of TestFailover's, on the
// primary the cluster has then.
func haRun(t *testing.T, name string, fault func(t *testing.T, at chan<- time.Time)) {
	url := haScript(t, "up")
	table := "ha_" + name
	dropTable(t, url, table)
	r := startRailRun(t, url, table, haModeVar+"=1")
	leader := haScript(t, "leader")

	var (
		faultAt  = make(chan time.Time, 1)
		faulted  time.Time     // when the fault was made
		first    time.Duration // from the fault to the first send recorded that began after it
		faultEnd = make(chan struct{})
		over     bool          // the fault is over
		lastSent time.Time     // when the last send recorded was told
		gap      time.Duration // the longest time without a send recorded, from the fault on
		phase    int           // 0 before the fault, 1 faulted, 2 stopped
		at       int           // withdrawals submitted once the fault was over and a send after it recorded
	)
	running := failoverProcesses
	deadline := time.After(haScenario)
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
		if !r.take(t, l) {
			continue
		}
		if phase == 0 && len(r.ids) >= haBefore {
			phase = 1
			go func() { // the processes' lines are read meanwhile
				defer close(faultEnd)
				fault(t, faultAt)
			}()
		}
		if faulted.IsZero() {
			select {
			case faulted = <-faultAt:
			default:
			}
		}
		// The first Submit that began after the fault and sent, its
		// outcome recorded.
		if sent := l.fields[0] == "ok" && l.fields[4] == "sent"; sent && !faulted.IsZero() {
			since := faulted
			if lastSent.After(since) {
				since = lastSent
			}
			gap = max(gap, time.Since(since))
			began, err := strconv.ParseInt(l.fields[5], 10, 64)
			require.NoError(t, err)
			if first == 0 && began >= faulted.UnixMilli() {
				first = time.Since(faulted)
			}
		}
		if l.fields[0] == "ok" && l.fields[4] == "sent" {
			lastSent = time.Now()
		}
		if !over {
			select {
			case <-faultEnd:
				over = true
			default:
			}
		}
		if over && first > 0 && at == 0 {
			at = len(r.ids)
		}
		if phase == 1 && at > 0 && len(r.ids) >= at+haAfter {
			r.finish(t)
			phase = 2
		}
	}
	for p, cmd := range r.procs {
		require.NoError(t, cmd.Wait(), "ledger process %d", p)
	}
	require.Equal(t, 2, phase, "the fault happened and the cluster took writes after it")
	// The cluster heals by itself: the old leader rejoins as a replica.
	healed := time.Now()
	for !haHealthy() {
		require.Less(t, time.Since(healed), time.Minute, "a leader and a synchronous standby again, after %s", name)
		time.Sleep(200 * time.Millisecond)
	}
	assert.NotEqual(t, leader, haScript(t, "leader"), "another node leads after the %s", name)
	c := r.check(t, url, table)
	assert.Empty(t, r.late, "Submits that returned more than %v after their deadline", haLate)
	if name == "freeze" {
		assert.Less(t, first, haFrozen, "submits succeed on the new primary while the old one is still frozen")
	}
	if name == "switchover" {
		assert.Empty(t, r.cut, "keys cut off by a switchover: only ErrStoreFailed, retried, may come of one")
	}
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range r.cut {
			if !yield(k) {
				return
			}
		}
	})
	t.Logf("%s: keys cut off: %v", name, keys)
	figures.Add(t, "HA %s: %d ledger processes of %d goroutines, %d Submits of %d withdrawals, each with a %v deadline; "+
		"first successful submit %v after the fault, the longest time without one %v; %d Submits retried after ErrStoreFailed; %d late; "+
		"%d keys cut off (%d ErrOutcomeNotRecorded, %d ErrOutcomeUnknown), %d in flight afterwards: %d resolved from the rail, %d released; "+
		"%d replays ahead of the standby",
		name, failoverProcesses, haWorkers, r.answers+r.retries, len(r.ids), haTimeout,
		first.Round(10*time.Millisecond), gap.Round(10*time.Millisecond), r.retries, len(r.late),
		len(r.cut), r.cutAs("notrecorded"), r.cutAs("unknown"), c.inFlight, c.resolved, c.released, c.ahead)
}

// haHealthy reports whether scripts/ha sees a leader and a synchronous
// standby.
func haHealthy() bool {
	return exec.Command(filepath.Join("..", "scripts", "ha"), "healthy").Run() == nil
}

// dropTable drops table on url, so that a scenario starts empty.
func dropTable(t *testing.T, url, table string) {
	pool, err := pgxpool.New(bg, url)
	require.NoError(t, err)
	defer pool.Close()
	_, err = pool.Exec(bg, "DROP TABLE IF EXISTS "+table)
	require.NoError(t, err)
}
