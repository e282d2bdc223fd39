package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/idemledger/submissions/internal/testdb"
)

// mainVar, set to a JSON array of arguments, makes the test binary the sales
// command run with them: the child processes of the tests.
const mainVar = "SALES_TEST_MAIN"

func TestMain(m *testing.M) {
	if args, ok := os.LookupEnv(mainVar); ok {
		var a []string
		if err := json.Unmarshal([]byte(args), &a); err != nil {
			fmt.Fprintln(os.Stderr, mainVar, err)
			os.Exit(1)
		}
		os.Exit(mainArgs(a))
	}
	goleak.VerifyTestMain(m)
}

// urlVar names the connection string of the PostgreSQL tests.
const urlVar = testdb.URLVar

// testDB is a test's own schema in the test database.
type testDB struct {
	url  string        // its connection string: search_path and application_name set
	app  string        // the application_name of every connection made with url
	pool *pgxpool.Pool // on url, for the test's own queries
}

// testDatabase returns a schema of the test's own in the test database,
// dropped when the test ends: the service's tables made through its url
// are the test's alone. Without a database it skips the test, saying how to
// get one; with CI=true it fails it instead.
func testDatabase(t *testing.T) *testDB {
	t.Helper()
	base := testdb.URL(t)
	schema := fmt.Sprintf("sales_test_%d_%x", os.Getpid(), rand.Uint64())
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
	q.Set("search_path", schema)
	q.Set("application_name", schema)
	u.RawQuery = q.Encode()
	db := &testDB{url: u.String(), app: schema}
	db.pool, err = connect(ctx, db.url)
	require.NoError(t, err)
	t.Cleanup(db.pool.Close)
	return db
}

// serve starts a server made of cfg on a pool of its own on db, behind
// httptest.NewServer, and returns its URL. Both close when the test ends.
func serve(t *testing.T, db *testDB, cfg config) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	pool, err := connect(ctx, db.url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	cfg.Pool = pool
	srv, err := newServer(ctx, cfg)
	require.NoError(t, err)
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close) // before the pool closes: cleanups run last first
	return ts.URL
}

// response is what a request got.
type response struct {
	status  int
	header  http.Header
	body    []byte
	elapsed time.Duration
}

// problem checks that the response is a problem of status and type typ, and
// returns it.
func (r response) problem(t *testing.T, status int, typ string) map[string]any {
	t.Helper()
	require.Equal(t, status, r.status, "%s", r.body)
	require.Equal(t, "application/problem+json", r.header.Get("Content-Type"), "%s", r.body)
	var p map[string]any
	require.NoError(t, json.Unmarshal(r.body, &p), "%s", r.body)
	assert.EqualValues(t, status, p["status"], "status in the problem")
	assert.Equal(t, typ, p["type"], "%s", r.body)
	return p
}

// sale checks that the response is a 201 with a sale, and returns the sale.
func (r response) sale(t *testing.T) sale {
	t.Helper()
	require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
	require.Equal(t, "application/json", r.header.Get("Content-Type"), "%s", r.body)
	var s sale
	require.NoError(t, json.Unmarshal(r.body, &s), "%s", r.body)
	return s
}

// replayed reports the response's Idempotent-Replayed.
func (r response) replayed() bool { return r.header.Get("Idempotent-Replayed") == "true" }

// request makes a request on a connection of its own, with key as its
// Idempotency-Key unless key is "-".
func request(method, url, key string, body []byte) (response, error) {
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		return response{}, err
	}
	if key != "-" {
		req.Header.Set("Idempotency-Key", key)
	}
	began := time.Now()
	res, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return response{}, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return response{status: res.StatusCode, header: res.Header, body: b, elapsed: time.Since(began)}, err
}

// do is request, failing the test on an error.
func do(t *testing.T, method, url, key, body string) response {
	t.Helper()
	res, err := request(method, url, key, []byte(body))
	require.NoError(t, err, "%s %s", method, url)
	return res
}

// taps sends body to each of urls at once, the i-th request under key(i),
// each on a connection of its own: every request is made ready in a
// goroutine of its own, then they are released together. wait returns what
// each got, in the order of urls.
func taps(urls []string, key func(i int) string, body string) (wait func(t *testing.T) []response) {
	type result struct {
		res response
		err error
	}
	results := make([]result, len(urls))
	start := make(chan struct{})
	var ready, done sync.WaitGroup
	for i, u := range urls {
		ready.Add(1)
		done.Go(func() {
			ready.Done()
			<-start
			results[i].res, results[i].err = request(http.MethodPost, u, key(i), []byte(body))
		})
	}
	ready.Wait()
	close(start)
	return func(t *testing.T) []response {
		t.Helper()
		done.Wait()
		var got []response
		for i, r := range results {
			require.NoError(t, r.err, "tap %d on %s", i, urls[i])
			got = append(got, r.res)
		}
		return got
	}
}

// sameKey is taps' key for taps that all use key.
func sameKey(key string) func(int) string { return func(int) string { return key } }

// createCustomer creates the customer through the API at base.
func createCustomer(t *testing.T, base, shop, id string) {
	t.Helper()
	res := do(t, http.MethodPut, base+"/shops/"+shop+"/customers/"+id, "-", "")
	require.Equal(t, http.StatusCreated, res.status, "%s", res.body)
}

// salesOf returns how many sales the customer has, from the database.
func salesOf(t *testing.T, db *testDB, shop, customer string) int {
	t.Helper()
	var n int
	require.NoError(t, db.pool.QueryRow(t.Context(), `SELECT count(*) FROM sales WHERE shop = $1 AND customer = $2`, shop, customer).Scan(&n))
	return n
}

// totalDue returns the customer's total_due, from the database.
func totalDue(t *testing.T, db *testDB, shop, customer string) string {
	t.Helper()
	var due string
	require.NoError(t, db.pool.QueryRow(t.Context(), `SELECT round(total_due, 2)::text FROM customers WHERE shop = $1 AND id = $2`, shop, customer).Scan(&due))
	return due
}

// keysOf returns how many keys the shop has in the keys' table.
func keysOf(t *testing.T, db *testDB, shop string) int {
	t.Helper()
	var n int
	require.NoError(t, db.pool.QueryRow(t.Context(), `SELECT count(*) FROM `+keysTable+` WHERE tenant = $1`, shop).Scan(&n))
	return n
}

// command runs the test binary as the sales command with args, and
// returns its exit code, stdout and stderr.
func command(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	cmd := child(t, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if exit, ok := err.(*exec.ExitError); ok {
		return exit.ExitCode(), stdout.String(), stderr.String()
	}
	require.NoError(t, err)
	return 0, stdout.String(), stderr.String()
}

// child returns the command that runs the test binary as the sales command
// with args.
func child(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	self, err := os.Executable()
	require.NoError(t, err)
	a, err := json.Marshal(args)
	require.NoError(t, err)
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), mainVar+"="+string(a))
	return cmd
}

// sales -h prints its usage on stdout and exits 0; a flag it does not know
// prints the usage on stderr and exits 2; no database is an error, 1.
func TestHelp(t *testing.T) {
	var stdout, stderr bytes.Buffer
	require.ErrorIs(t, run(t.Context(), []string{"-h"}, &stdout, &stderr), flag.ErrHelp)
	assert.Contains(t, stdout.String(), "Usage: sales [flags]")
	assert.Contains(t, stdout.String(), "-commit-delay")
	assert.Empty(t, stderr.String())

	code, out, errOut := command(t, "-h")
	assert.Equal(t, 0, code, "sales -h exits 0\n%s", errOut)
	assert.Contains(t, out, "Usage: sales [flags]")
	assert.Contains(t, out, "-database-url")

	code, out, errOut = command(t, "-no-such-flag")
	assert.Equal(t, 2, code)
	assert.Empty(t, out)
	assert.Contains(t, errOut, "flag provided but not defined: -no-such-flag")
	assert.Contains(t, errOut, "Usage: sales [flags]")

	code, _, errOut = command(t, "-database-url", "")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "sales: no database")
}
