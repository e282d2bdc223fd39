package pgstore

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/idemledger/submissions"
	"github.com/idemledger/submissions/admin"
)

// The test binary is also the child process of the multi-process tests: with
// childVar set, TestMain runs the child's part instead of the tests.
const childVar = "PGSTORE_TEST_CHILD"

func TestMain(m *testing.M) {
	if role := os.Getenv(childVar); role != "" {
		if err := child(role); err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// child runs one instance of a payout service: a ledger on the shared table,
// and a rail that writes every send to the sends table; or, as role "wait",
// waitChild.
func child(role string) error {
	if role == "wait" {
		return waitChild()
	}
	ctx := context.Background()
	pool, ledger, err := childLedger(ctx, 0)
	if err != nil {
		return err
	}
	defer pool.Close()
	rail := func(ctx context.Context, x w) (w, error) {
		if os.Getenv("PGSTORE_TEST_NOT_SENT") != "" && rand.IntN(2) == 0 {
			return w{}, fmt.Errorf("rail busy: %w", submissions.ErrNotSent) // and it moved nothing
		}
		if _, err := pool.Exec(ctx, "INSERT INTO "+os.Getenv("PGSTORE_TEST_SENDS")+" (withdrawal_id, process) VALUES ($1, $2)", x.ID, os.Getpid()); err != nil {
			return w{}, err
		}
		return sent(x, fmt.Sprintf("0x%d-%s", os.Getpid(), x.ID)), nil
	}
	switch role {
	case "race":
		return race(ctx, ledger, rail)
	case "crash":
		_, err := ledger.Submit(ctx, os.Getenv("PGSTORE_TEST_KEY"), newW(os.Getenv("PGSTORE_TEST_ID")), func(ctx context.Context, x w) (w, error) {
			if _, err := rail(ctx, x); err != nil {
				return w{}, err
			}
			fmt.Println("sending") // and the process dies here
			select {}
		})
		return err
	}
	return fmt.Errorf("unknown role %q", role)
}

// childLedger returns a ledger over the table PGSTORE_TEST_TABLE names, on
// a pool of conns connections (pgxpool's default for 0), for a child
// process; the caller closes the pool.
func childLedger(ctx context.Context, conns int32) (*pgxpool.Pool, *submissions.Submissions[w], error) {
	cfg, err := pgxpool.ParseConfig(os.Getenv(urlVar))
	if err != nil {
		return nil, nil, err
	}
	if conns > 0 {
		cfg.MaxConns = conns
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	st, err := New[w](pool, WithTable(os.Getenv("PGSTORE_TEST_TABLE")))
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return pool, submissions.NewWithStore[w](st, submissions.WithLogger(quiet)), nil
}

// race submits every withdrawal from several goroutines, once the parent says
// go, and prints a line per call: what came back.
func race(ctx context.Context, ledger *submissions.Submissions[w], rail func(context.Context, w) (w, error)) error {
	n, err := strconv.Atoi(os.Getenv("PGSTORE_TEST_N"))
	if err != nil {
		return err
	}
	fmt.Println("ready")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		return err
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, i := range rand.Perm(n) {
				id := fmt.Sprint("w-", i)
				key := "req-" + id
				if os.Getenv("PGSTORE_TEST_KEYS") == "own" {
					key = fmt.Sprintf("p%d-g%d-%s", os.Getpid(), g, id)
				}
				_, err := ledger.Submit(ctx, key, newW(id), rail)
				for errors.Is(err, submissions.ErrNotSent) { // the claim is released: retry
					mu.Lock()
					fmt.Println("notsent " + id)
					mu.Unlock()
					_, err = ledger.Submit(ctx, key, newW(id), rail)
				}
				var conflict *submissions.ConflictError
				line := "ok " + id // sent, or replayed
				switch {
				case errors.As(err, &conflict):
					line = "conflict " + id + " " + conflict.Holder
				case errors.Is(err, submissions.ErrSubmissionInFlight):
					line = "inflight " + id
				case err != nil:
					line = "error " + id + " " + err.Error()
				}
				mu.Lock()
				fmt.Println(line)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return nil
}

// spawn starts the test binary as a child with role and env, and returns it
// with its stdin and stdout. It is killed when t ends.
func spawn(t *testing.T, role string, env ...string) (*exec.Cmd, io.WriteCloser, *bufio.Scanner) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), append([]string{childVar + "=" + role}, env...)...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, stdin, bufio.NewScanner(stdout)
}

// sendsTable creates a table of t's own where the children's rail writes
// each send, with nothing unique about it: a second send would show.
func sendsTable(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	name := testTable(t, pool)
	_, err := pool.Exec(bg, "CREATE TABLE "+name+" (withdrawal_id text NOT NULL, process int NOT NULL)")
	require.NoError(t, err)
	return name
}

func TestProcessesRaceOnTheSameWithdrawals(t *testing.T) {
	const (
		processes   = 4
		withdrawals = 40
	)
	for _, c := range []struct{ keys, notSent string }{{"shared", ""}, {"own", ""}, {"shared", "1"}, {"own", "1"}} {
		keys := c.keys
		name := keys + " keys"
		if c.notSent != "" {
			name += ", a rail that often says it moved nothing"
		}
		t.Run(name, func(t *testing.T) {
			pool := testPool(t, 4)
			st := newTestStore[w](t, pool)
			sends := sendsTable(t, pool)
			env := []string{
				"PGSTORE_TEST_TABLE=" + strings.Trim(st.names.table, `"`),
				"PGSTORE_TEST_SENDS=" + sends,
				"PGSTORE_TEST_N=" + strconv.Itoa(withdrawals),
				"PGSTORE_TEST_KEYS=" + keys,
				"PGSTORE_TEST_NOT_SENT=" + c.notSent,
			}
			type proc struct {
				cmd   *exec.Cmd
				stdin io.WriteCloser
				out   *bufio.Scanner
			}
			var procs []proc
			for range processes {
				cmd, stdin, out := spawn(t, "race", env...)
				require.True(t, out.Scan(), "a child did not get ready")
				require.Equal(t, "ready", out.Text(), "a child did not get ready")
				procs = append(procs, proc{cmd, stdin, out})
			}
			for _, p := range procs { // go, all at once
				_, err := io.WriteString(p.stdin, "go\n")
				require.NoError(t, err)
			}
			results := map[string]int{}
			for _, p := range procs {
				for p.out.Scan() {
					kind, rest, _ := strings.Cut(p.out.Text(), " ")
					assert.NotEqual(t, "error", kind, "a child: %s", rest)
					results[kind]++
				}
				require.NoError(t, p.cmd.Wait(), "a child")
			}
			if c.notSent != "" {
				assert.NotZero(t, results["notsent"], "sends that moved nothing, each retried")
			}
			calls := processes * 4 * withdrawals
			require.Equal(t, calls, results["ok"]+results["conflict"]+results["inflight"], "calls answered: %v", results)
			rows, err := pool.Query(bg, "SELECT withdrawal_id, count(*) FROM "+sends+" GROUP BY withdrawal_id")
			require.NoError(t, err)
			sent := map[string]int64{}
			for rows.Next() {
				var id string
				var n int64
				require.NoError(t, rows.Scan(&id, &n))
				sent[id] = n
			}
			require.NoError(t, rows.Err())
			for i := range withdrawals {
				id := fmt.Sprint("w-", i)
				assert.EqualValues(t, 1, sent[id], "sends of %s", id)
			}
			assert.Len(t, sent, withdrawals, "withdrawals sent")
			// Under keys of their own, every call but the winner's is refused.
			if keys == "own" {
				assert.Equal(t, withdrawals, results["ok"], "calls that got an outcome")
			}
			t.Logf("%d processes, %d calls: %v", processes, calls, results)
		})
	}
}

// TestProcessKilledInsideItsSend: a process dies with SIGKILL while its send
// runs. Another process finds the key in flight, refuses a second key naming
// it, and closes it: with Resolve when the rail shows the transfer, with
// Release when it shows none.
func TestProcessKilledInsideItsSend(t *testing.T) {
	pool := testPool(t, 4)
	st := newTestStore[w](t, pool)
	sends := sendsTable(t, pool)
	ledger := submissions.NewWithStore[w](st, submissions.WithLogger(quiet))
	var parentSends int
	send := func(_ context.Context, x w) (w, error) { parentSends++; return sent(x, "0xparent"), nil }

	for _, exit := range []string{"resolve", "release"} {
		key, id := "req-"+exit, "w-"+exit
		cmd, _, out := spawn(t, "crash",
			"PGSTORE_TEST_TABLE="+strings.Trim(st.names.table, `"`), "PGSTORE_TEST_SENDS="+sends,
			"PGSTORE_TEST_KEY="+key, "PGSTORE_TEST_ID="+id)
		require.True(t, out.Scan(), "the child did not reach its send")
		require.Equal(t, "sending", out.Text(), "the child did not reach its send")
		require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
		_ = cmd.Wait()

		_, err := ledger.Submit(bg, key, newW(id), send)
		require.ErrorIs(t, err, submissions.ErrSubmissionInFlight, "%s: Submit under the dead process's key", exit)
		_, err = ledger.Submit(bg, "another-"+key, newW(id), send)
		var conflict *submissions.ConflictError
		require.ErrorAs(t, err, &conflict, "%s: Submit under another key", exit)
		require.Equal(t, key, conflict.Holder, "%s: the conflict names the dead process's key", exit)
		switch exit {
		case "resolve": // the operator finds the transfer on the rail
			found := sent(newW(id), "0xfound")
			require.NoError(t, ledger.Resolve(bg, key, found), "Resolve")
			got, err := ledger.Submit(bg, key, newW(id), send)
			require.NoError(t, err, "Submit after Resolve")
			require.Equal(t, found, got, "Submit after Resolve replays")
		case "release": // the operator finds nothing on the rail
			_, err := pool.Exec(bg, "DELETE FROM "+sends+" WHERE withdrawal_id = $1", id)
			require.NoError(t, err)
			// The dead process's send is not known to have ended: Release
			// refuses it, and the operator who has looked at the rail
			// releases it with force.
			require.ErrorIs(t, ledger.Release(bg, key), submissions.ErrSubmissionInFlight, "Release")
			res := ledger.Admin().Release(bg, admin.Target{Key: key, Force: true})
			require.Equal(t, admin.Changed, res.Decision, "forced Release: %s", res.Message)
			_, err = ledger.Submit(bg, key, newW(id), send)
			require.NoError(t, err, "Submit after Release")
		}
	}
	require.Equal(t, 1, parentSends, "sends by the surviving process: one, after the Release")
}
