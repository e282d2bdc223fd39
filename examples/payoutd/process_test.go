package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSeveralProcessesOnOneDatabase(t *testing.T) {
	db := testDatabase(t)
	bin := buildPayoutd(t)

	// Started at once, on a schema without tables: their migrations race.
	var procs []*process
	for range 3 {
		procs = append(procs, launch(t, bin, "-addr", "127.0.0.1:0", "-database-url", db, "-rail-latency", "50ms"))
	}
	var urls []string
	apis := map[string]*api{}
	for _, p := range procs {
		p.ready(t)
		urls = append(urls, p.url)
		apis[p.url] = &api{url: p.url}
	}

	var ids []string
	for i := range 4 {
		ids = append(ids, create(t, apis[urls[i%len(urls)]], ""))
	}
	got := taps(t, urls, "", keyPer("tap-"), ids, 24) // 8 taps a withdrawal on each process

	total := map[string]int{}
	for _, url := range urls {
		for id, n := range railSends(t, url) {
			total[id] += n
		}
	}
	for _, id := range ids {
		sent := checkTaps(t, id, got[id])
		assert.Equal(t, 1, total[id], "money movements of %s, summed over the processes", id)
		for _, url := range urls {
			w := do(t, "GET", url+"/withdrawals/"+id, "-", "-", "").withdrawal(t)
			assert.Equal(t, ptr("tap-"+id), w.ClaimedBy, "on %s", url)
			body, err := json.Marshal(w.Withdrawal)
			require.NoError(t, err)
			assert.JSONEq(t, string(sent), string(body), "on %s", url)
		}
	}
	assert.Len(t, total, len(ids))

	for _, p := range procs {
		p.stop(t)
	}
}

func TestGracefulShutdown(t *testing.T) {
	bin := buildPayoutd(t)
	p := launch(t, bin, "-addr", "127.0.0.1:0", "-rail-latency", "1s")
	p.ready(t)
	a := &api{url: p.url}
	id := create(t, a, "")

	submitted := make(chan response, 1)
	go func() {
		res, err := request(nil, "POST", a.url+"/withdrawals/"+id+"/submit", "-", "k", "")
		if err != nil {
			res.body = []byte(err.Error())
		}
		submitted <- res
	}()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		res, err := request(nil, "GET", a.url+"/withdrawals/"+id, "-", "-", "")
		require.NoError(c, err)
		var w Withdrawal
		require.NoError(c, json.Unmarshal(res.body, &w))
		assert.Equal(c, stateInFlight, w.State)
	}, 10*time.Second, 10*time.Millisecond, "the submit reaches the rail")

	p.stop(t) // while the rail takes its second
	res := <-submitted
	require.Equal(t, http.StatusCreated, res.status, "the submit in flight finishes: %s", res.body)
	var w Withdrawal
	require.NoError(t, json.Unmarshal(res.body, &w))
	assert.Equal(t, stateSent, w.State)

	_, err := request(nil, "GET", a.url+"/rail/sends", "-", "-", "")
	assert.Error(t, err, "the process is gone")
}

// buildPayoutd builds the payoutd command into a directory of the test's and
// returns its path. It builds with the race detector when the tests run
// under it.
func buildPayoutd(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "payoutd")
	args := []string{"build", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	out, err := exec.Command("go", append(args, ".")...).CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	return bin
}

// process is a payoutd process.
type process struct {
	cmd    *exec.Cmd
	url    string        // where it listens, once ready
	listen chan string   // the address it prints
	eof    chan struct{} // closed when its stdout ends
	stdout lockedBuffer
	stderr lockedBuffer
}

var listening = regexp.MustCompile(`^payoutd listening on (http://\S+)$`)

// launch starts bin with args. The process is killed when the test ends, if
// it still runs.
func launch(t *testing.T, bin string, args ...string) *process {
	t.Helper()
	return launchWith(t, nil, bin, args...)
}

// launchWith is launch with env, NAME=value, added to the process's
// environment.
func launchWith(t *testing.T, env []string, bin string, args ...string) *process {
	t.Helper()
	p := &process{cmd: exec.Command(bin, args...), listen: make(chan string, 1), eof: make(chan struct{})}
	if env != nil {
		p.cmd.Env = append(os.Environ(), env...)
	}
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
		t.Fatalf("payoutd ended before listening:\n%s%s", p.stdout.String(), p.stderr.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("payoutd does not listen after a minute:\n%s%s", p.stdout.String(), p.stderr.String())
	}
}

// stop sends SIGTERM to the process and checks that it shuts down cleanly.
func (p *process) stop(t *testing.T) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-p.eof:
	case <-time.After(30 * time.Second):
		t.Fatalf("payoutd still runs 30 seconds after SIGTERM:\n%s%s", p.stdout.String(), p.stderr.String())
	}
	err := p.cmd.Wait()
	require.NoError(t, err, "exit status after SIGTERM:\n%s%s", p.stdout.String(), p.stderr.String())
	assert.Contains(t, p.stdout.String(), "payoutd stopped\n")
	assert.Contains(t, p.stderr.String(), "shutting down")
}

// killed waits for the process to end, and checks that SIGKILL ended it.
func (p *process) killed(t *testing.T) {
	t.Helper()
	select {
	case <-p.eof:
	case <-time.After(30 * time.Second):
		t.Fatalf("payoutd still runs 30 seconds after it should have killed itself:\n%s%s", p.stdout.String(), p.stderr.String())
	}
	err := p.cmd.Wait()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "payoutd ended without an error:\n%s%s", p.stdout.String(), p.stderr.String())
	status, ok := exit.Sys().(syscall.WaitStatus)
	require.True(t, ok)
	require.True(t, status.Signaled() && status.Signal() == syscall.SIGKILL, "payoutd ended otherwise than by SIGKILL (%v):\n%s%s",
		err, p.stdout.String(), p.stderr.String())
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
