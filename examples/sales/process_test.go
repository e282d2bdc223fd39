package main

import (
	"bufio"
	"bytes"
	"context"
	"net/http"
	"os/exec"
	"regexp"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Sixteen taps under one key, released together, eight on each of two
// sales processes on one database, each on a connection of its own: one
// sale, the balance moved once, and sixteen 201s with one body.
func TestTapsOnTwoProcesses(t *testing.T) {
	t.Parallel()
	db := testDatabase(t)
	const delay = 750 * time.Millisecond // the sale's transaction stays open this long
	// Started at once, on a schema without tables: their migrations race.
	var procs []*process
	for range 2 {
		procs = append(procs, launch(t, "-addr", "127.0.0.1:0", "-database-url", db.url, "-commit-delay", delay.String()))
	}
	for _, p := range procs {
		p.ready(t)
	}
	createCustomer(t, procs[0].url, "dhaka-1", "c1")

	var urls []string
	for i := range 16 {
		urls = append(urls, procs[i%2].url+"/shops/dhaka-1/sales")
	}
	// While the winner's transaction is open, the other taps wait for it in
	// PostgreSQL: count them.
	watch, cancel := context.WithCancel(t.Context())
	watched := make(chan int, 1)
	go func() {
		most := 0
		for watch.Err() == nil {
			var n int
			if db.pool.QueryRow(watch, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'`, db.app).Scan(&n) == nil {
				most = max(most, n)
			}
			time.Sleep(5 * time.Millisecond)
		}
		watched <- most
	}()
	got := taps(urls, sameKey("tap-16"), saleBody)(t)
	cancel()
	waiting := <-watched

	require.Len(t, got, 16)
	body := string(got[0].body)
	fresh := 0
	for i, res := range got {
		s := res.sale(t)
		assert.Equal(t, "500.00", s.TotalDue, "tap %d", i)
		assert.Equal(t, body, string(res.body), "tap %d: every tap gets the same body, byte for byte", i)
		if !res.replayed() {
			fresh++
		}
	}
	assert.Equal(t, 1, fresh, "taps answered without Idempotent-Replayed: the one that wrote the sale")
	assert.Equal(t, 1, salesOf(t, db, "dhaka-1", "c1"), "sales in the database")
	assert.Equal(t, "500.00", totalDue(t, db, "dhaka-1", "c1"), "total_due moved once")
	assert.GreaterOrEqual(t, waiting, 2, "taps seen waiting at once in PostgreSQL for the first one's transaction")
	for _, p := range procs {
		res := do(t, http.MethodGet, p.url+"/shops/dhaka-1/customers/c1", "-", "")
		assert.JSONEq(t, `{"shop":"dhaka-1","id":"c1","total_due":"500.00"}`, string(res.body), "on %s", p.url)
	}

	for _, p := range procs {
		p.stop(t)
	}
}

// process is a sales process: the test binary run as the command.
type process struct {
	cmd    *exec.Cmd
	url    string        // where it listens, once ready
	listen chan string   // the address it prints
	eof    chan struct{} // closed when its stdout ends
	stdout lockedBuffer
	stderr lockedBuffer
}

var listening = regexp.MustCompile(`^sales listening on (http://\S+)$`)

// launch starts the sales command with args. The process is killed when
// the test ends, if it still runs.
func launch(t *testing.T, args ...string) *process {
	t.Helper()
	p := &process{cmd: child(t, args...), listen: make(chan string, 1), eof: make(chan struct{})}
	p.cmd.Stderr = &p.stderr
	stdout, err := p.cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, p.cmd.Start())
	go func() {
		defer close(p.eof)
		lines := bufio.NewScanner(stdout)
		for lines.Scan() {
			p.stdout.Write(append(lines.Bytes(), '\n'))
			if m := listening.FindStringSubmatch(lines.Text()); m != nil {
				p.listen <- m[1]
			}
		}
	}()
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Kill()
			<-p.eof
			_ = p.cmd.Wait()
		}
	})
	return p
}

// ready waits for the process to print where it listens.
func (p *process) ready(t *testing.T) {
	t.Helper()
	select {
	case p.url = <-p.listen:
	case <-p.eof:
		t.Fatalf("sales ended before listening:\n%s%s", p.stdout.String(), p.stderr.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("sales does not listen after a minute:\n%s%s", p.stdout.String(), p.stderr.String())
	}
}

// stop sends SIGTERM to the process and checks that it shuts down cleanly
// (under -race, a race it saw would make its exit status 66).
func (p *process) stop(t *testing.T) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-p.eof:
	case <-time.After(30 * time.Second):
		t.Fatalf("sales still runs 30 seconds after SIGTERM:\n%s%s", p.stdout.String(), p.stderr.String())
	}
	err := p.cmd.Wait()
	require.NoError(t, err, "exit status after SIGTERM:\n%s%s", p.stdout.String(), p.stderr.String())
	assert.Contains(t, p.stdout.String(), "sales stopped\n")
	assert.NotContains(t, p.stderr.String(), "level=WARN", "warnings logged")
}

// lockedBuffer is a bytes.Buffer safe for concurrent use.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
