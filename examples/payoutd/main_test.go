package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/idemledger/submissions/internal/testdb"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// urlVar names the connection string of the PostgreSQL tests.
const urlVar = testdb.URLVar

// forEachStore runs test as a subtest on each store: "memory", and
// "postgres" on a schema of its own (see testDatabase), with db its
// connection string. db is "" for memory.
func forEachStore(t *testing.T, test func(t *testing.T, db string)) {
	t.Run("memory", func(t *testing.T) { test(t, "") })
	t.Run("postgres", func(t *testing.T) { test(t, testDatabase(t)) })
}

var schemas atomic.Int64

// testDatabase returns a connection string to the test database whose
// search_path is a schema of this test's own, dropped when the test ends:
// payoutd's tables made through it are the test's alone. Without a database
// it skips the test, saying how to get one; with CI=true it fails it instead.
func testDatabase(t *testing.T) string {
	t.Helper()
	base := testdb.URL(t)
	schema := fmt.Sprintf("payoutd_test_%d_%d", os.Getpid(), schemas.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, base)
	require.NoError(t, err, "connect to the test database")
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "CREATE SCHEMA "+schema)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, base)
		if !assert.NoError(t, err, "connect to drop schema %s", schema) {
			return
		}
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE")
		assert.NoError(t, err, "drop schema %s", schema)
	})
	u, err := url.Parse(base)
	require.NoError(t, err, urlVar)
	q := u.Query()
	q.Set("search_path", schema) // a run-time parameter of every connection
	u.RawQuery = q.Encode()
	return u.String()
}

// testPool returns a pool on db, closed when the test ends.
func testPool(t *testing.T, db string) *pgxpool.Pool {
	t.Helper()
	pool, err := connect(db)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// api is a payoutd server in this process, over HTTP on loopback.
type api struct {
	url  string
	rail *rail
	srv  *server // nil for another process's
}

// serve starts a server on db ("" for memory) with rail, whose sends get
// sendTimeout, and returns its address. It is closed when the test ends.
func serve(t *testing.T, db string, rail *rail, sendTimeout time.Duration) *api {
	t.Helper()
	return serveWaiting(t, db, rail, sendTimeout, 0)
}

// serveWaiting is serve with a server whose repeats of a key in flight wait
// up to wait for its outcome.
func serveWaiting(t *testing.T, db string, rail *rail, sendTimeout, wait time.Duration) *api {
	t.Helper()
	return serveConfig(t, db, config{Rail: rail, SendTimeout: sendTimeout, Wait: wait, Logger: slog.New(slog.DiscardHandler)})
}

// serveConfig is serve with a server made of cfg, on db.
func serveConfig(t *testing.T, db string, cfg config) *api {
	t.Helper()
	if db != "" {
		cfg.Pool = testPool(t, db)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	srv, err := newServer(ctx, cfg)
	require.NoError(t, err)
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close) // before the pool closes: cleanups run last first
	return &api{url: ts.URL, rail: cfg.Rail, srv: srv}
}

// fates is a rail's decision per withdrawal id, answer by default; safe for
// concurrent use.
type fates struct {
	mu   sync.Mutex
	byID map[string]fate
}

func (f *fates) set(id string, x fate) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.byID == nil {
		f.byID = make(map[string]fate)
	}
	f.byID[id] = x
}

func (f *fates) decide(w Withdrawal) fate {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.byID[w.ID]
}

// response is what a request got.
type response struct {
	status int
	header http.Header
	body   []byte
	key    string // the Idempotency-Key sent, for taps
}

// problem decodes the response as a problem, after checking its content type.
func (r response) problem(t *testing.T) map[string]any {
	t.Helper()
	require.Equal(t, "application/problem+json", r.header.Get("Content-Type"), "%s", r.body)
	var p map[string]any
	require.NoError(t, json.Unmarshal(r.body, &p), "%s", r.body)
	assert.EqualValues(t, r.status, p["status"], "status in the problem")
	assert.Regexp(t, `^urn:(submissions|payoutd):problem:[a-z-]+$`, p["type"], "a type of ours")
	return p
}

// problemOf checks that the response is a problem of status and type typ,
// and returns it.
func (r response) problemOf(t *testing.T, status int, typ string) map[string]any {
	t.Helper()
	require.Equal(t, status, r.status, "%s", r.body)
	p := r.problem(t)
	assert.Equal(t, typ, p["type"])
	return p
}

// withdrawal decodes the response as a withdrawal, after checking its
// content type.
func (r response) withdrawal(t *testing.T) withdrawalView {
	t.Helper()
	require.Equal(t, "application/json", r.header.Get("Content-Type"), "%s", r.body)
	var w withdrawalView
	require.NoError(t, json.Unmarshal(r.body, &w), "%s", r.body)
	return w
}

// request makes a request with client (nil: a new connection of its own)
// and returns what it got, or an error. tenant and key are headers, left out
// when "-".
func request(client *http.Client, method, url, tenant, key, body string) (response, error) {
	if client == nil {
		tr := &http.Transport{DisableKeepAlives: true}
		defer tr.CloseIdleConnections()
		client = &http.Client{Transport: tr}
	}
	req, err := http.NewRequest(method, url, bytes.NewBufferString(body))
	if err != nil {
		return response{}, err
	}
	if tenant != "-" {
		req.Header.Set(tenantHeader, tenant)
	}
	if key != "-" {
		req.Header.Set("Idempotency-Key", key)
	}
	res, err := client.Do(req)
	if err != nil {
		return response{}, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return response{status: res.StatusCode, header: res.Header, body: b}, err
}

// do is request on a connection of its own, failing the test on an error.
func do(t *testing.T, method, url, tenant, key, body string) response {
	t.Helper()
	res, err := request(nil, method, url, tenant, key, body)
	require.NoError(t, err, "%s %s", method, url)
	return res
}

// create creates a withdrawal for tenant through a and returns its id.
func create(t *testing.T, a *api, tenant string) string {
	t.Helper()
	res := do(t, "POST", a.url+"/withdrawals", tenant, "-", `{"amount":"25.00","currency":"USDC","destination":"0xdest"}`)
	require.Equal(t, http.StatusCreated, res.status, "%s", res.body)
	w := res.withdrawal(t)
	require.Regexp(t, `^wd_[0-9a-f]{32}$`, w.ID)
	assert.Equal(t, Withdrawal{ID: w.ID, Amount: "25.00", Currency: "USDC", Destination: "0xdest", State: stateApproved}, w.Withdrawal)
	assert.Equal(t, "/withdrawals/"+w.ID, res.header.Get("Location"))
	assert.NotContains(t, string(res.body), "claimed_by")
	return w.ID
}

// railSends returns GET /rail/sends of the server at url.
func railSends(t *testing.T, url string) map[string]int {
	t.Helper()
	res := do(t, "GET", url+"/rail/sends", "-", "-", "")
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	var sends map[string]int
	require.NoError(t, json.Unmarshal(res.body, &sends), "%s", res.body)
	return sends
}

// taps submits each withdrawal of ids n times at once, the i-th time under
// key(id, i), each from a connection of its own, through the servers in urls in
// turn, with every request released together. It returns what each got, per
// withdrawal.
func taps(t *testing.T, urls []string, tenant string, key func(id string, i int) string, ids []string, n int) map[string][]response {
	t.Helper()
	type result struct {
		id  string
		res response
		err error
	}
	results := make(chan result, len(ids)*n)
	start := make(chan struct{})
	var ready, done sync.WaitGroup
	for _, id := range ids {
		for i := range n {
			ready.Add(1)
			done.Go(func() {
				// A client of its own, so that every tap opens its own connection.
				tr := &http.Transport{DisableKeepAlives: true}
				defer tr.CloseIdleConnections()
				client := &http.Client{Transport: tr}
				url := urls[i%len(urls)] + "/withdrawals/" + id + "/submit"
				ready.Done()
				<-start
				res, err := request(client, "POST", url, tenant, key(id, i), "")
				res.key = key(id, i)
				results <- result{id, res, err}
			})
		}
	}
	ready.Wait()
	close(start)
	done.Wait()
	close(results)
	got := make(map[string][]response)
	for r := range results {
		require.NoError(t, r.err, "tap on %s", r.id)
		got[r.id] = append(got[r.id], r.res)
	}
	return got
}

// checkTaps checks what the taps on one withdrawal got: one 201 that was the
// send, every other 201 the same body replayed, the rest 409 in flight. It
// returns the body of the 201s.
func checkTaps(t *testing.T, id string, got []response) []byte {
	t.Helper()
	var sent []byte
	fresh, replays := 0, 0
	unexpected := map[string]int{}
	for _, res := range got {
		switch res.status {
		case http.StatusCreated:
			if sent == nil {
				sent = res.body
			}
			assert.Equal(t, string(sent), string(res.body), "every 201 has the same body, byte for byte")
			if res.header.Get("Idempotent-Replayed") == "true" {
				replays++
			} else {
				assert.Empty(t, res.header.Values("Idempotent-Replayed"))
				fresh++
			}
		case http.StatusConflict:
			p := res.problem(t)
			assert.NotContains(t, p, "holder", "the same key in flight, not another key")
		default:
			unexpected[fmt.Sprintf("%d %s", res.status, res.body)]++
		}
	}
	assert.Empty(t, unexpected, "taps on %s: responses other than 201 and 409, with their counts", id)
	require.NotNil(t, sent, "no tap on %s got a 201", id)
	assert.Equal(t, 1, fresh, "201s without Idempotent-Replayed: the one send (and %d replays)", replays)
	var w Withdrawal
	require.NoError(t, json.Unmarshal(sent, &w))
	assert.Equal(t, id, w.ID)
	assert.Equal(t, stateSent, w.State)
	assert.NotEmpty(t, w.Tx)
	return sent
}

// payoutd -h prints its usage to stdout and exits 0, as submissionsctl -h
// does; a flag it does not know prints the usage to stderr and fails.
func TestHelp(t *testing.T) {
	var stdout, stderr bytes.Buffer
	require.ErrorIs(t, run(t.Context(), []string{"-h"}, &stdout, &stderr), flag.ErrHelp)
	assert.Contains(t, stdout.String(), "Usage: payoutd [flags]")
	assert.Contains(t, stdout.String(), "-send-timeout")
	assert.Empty(t, stderr.String())

	stdout.Reset()
	err := run(t.Context(), []string{"-no-such-flag"}, &stdout, &stderr)
	require.Error(t, err)
	assert.NotErrorIs(t, err, flag.ErrHelp)
	assert.Empty(t, stdout.String())
	assert.Contains(t, stderr.String(), "Usage: payoutd [flags]")

	bin := buildPayoutd(t)
	cmd := exec.Command(bin, "-h")
	out, err := cmd.Output()
	require.NoError(t, err, "payoutd -h exits 0")
	assert.Contains(t, string(out), "Usage: payoutd [flags]")
	out, err = exec.Command(bin, "ctl", "-h").Output()
	require.NoError(t, err, "payoutd ctl -h exits 0")
	assert.Contains(t, string(out), "Usage: payoutd ctl [global flags] COMMAND")
	err = exec.Command(bin, "-no-such-flag").Run()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	assert.NotZero(t, exit.ExitCode())
}
