package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemledger/submissions/idemhttp"
)

const saleBody = `{"customer":"c1","amount":"500.00"}`

// lockWaiters returns how many of db's connections wait for a lock.
func lockWaiters(t require.TestingT, db *testDB) int {
	var n int
	require.NoError(t, db.pool.QueryRow(context.Background(),
		`SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'`, db.app).Scan(&n))
	return n
}

// Two taps under one key, at once, on two connections: the first holds its
// transaction open (its sale and balance written, not committed) until the
// second is seen waiting inside PostgreSQL; then one sale stands, the
// balance moved once, and both got the same 201.
func TestDoubleTap(t *testing.T) {
	t.Parallel()
	db := testDatabase(t)
	entered := make(chan struct{}, 2)
	release := make(chan struct{})
	var writes atomic.Int32
	base := serve(t, db, config{beforeCommit: func(ctx context.Context) error {
		writes.Add(1)
		entered <- struct{}{}
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}})
	createCustomer(t, base, "dhaka-1", "c1")
	url := base + "/shops/dhaka-1/sales"

	wait := taps([]string{url, url}, sameKey("tap-7f3a"), saleBody)
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		close(release)
		t.Fatal("no tap wrote its sale within 30s")
	}
	ok := assert.Eventually(t, func() bool { return lockWaiters(t, db) >= 1 }, 30*time.Second, 5*time.Millisecond,
		"the second tap waits in PostgreSQL for the first one's transaction")
	assert.Len(t, entered, 0, "the second tap does not write while the first one's transaction is open")
	close(release)
	got := wait(t)
	require.True(t, ok)

	require.Len(t, got, 2)
	first, second := got[0].sale(t), got[1].sale(t)
	assert.Equal(t, string(got[0].body), string(got[1].body), "both taps get the same body, byte for byte")
	assert.Equal(t, first, second)
	assert.NotEqual(t, got[0].replayed(), got[1].replayed(), "one tap wrote the sale, the other one got it replayed")
	for _, res := range got {
		if !res.replayed() {
			assert.Empty(t, res.header.Values("Idempotent-Replayed"))
		}
	}
	assert.Equal(t, sale{ID: first.ID, Shop: "dhaka-1", Customer: "c1", Amount: "500.00", TotalDue: "500.00", CreatedAt: first.CreatedAt}, first)
	assert.EqualValues(t, 1, writes.Load(), "writes of a sale")
	assert.Equal(t, 1, salesOf(t, db, "dhaka-1", "c1"), "sales in the database")
	assert.Equal(t, "500.00", totalDue(t, db, "dhaka-1", "c1"), "total_due moved once")

	// A retry later replays too, and the customer reads the same.
	again := do(t, http.MethodPost, url, "tap-7f3a", saleBody)
	assert.Equal(t, string(got[0].body), string(again.body))
	assert.True(t, again.replayed())
	assert.JSONEq(t, `{"shop":"dhaka-1","id":"c1","total_due":"500.00"}`, string(do(t, http.MethodGet, base+"/shops/dhaka-1/customers/c1", "-", "").body))
}

// The same key with another body is refused, writing nothing; the same
// body written another way (members reordered, white space) is a replay;
// the same key in another shop is another key.
func TestKeyReused(t *testing.T) {
	t.Parallel()
	db := testDatabase(t)
	base := serve(t, db, config{})
	createCustomer(t, base, "dhaka-1", "c1")
	createCustomer(t, base, "dhaka-1", "c2")
	url := base + "/shops/dhaka-1/sales"

	first := do(t, http.MethodPost, url, "k1", saleBody)
	s := first.sale(t)
	assert.False(t, first.replayed())
	assert.Equal(t, "500.00", s.TotalDue)

	for _, body := range []string{
		`{"customer":"c1","amount":"600.00"}`,
		`{"customer":"c1","amount":"500"}`, // the same amount, another request: bodies are compared as JSON, not as money
		`{"customer":"c2","amount":"500.00"}`,
	} {
		res := do(t, http.MethodPost, url, "k1", body)
		p := res.problem(t, http.StatusUnprocessableEntity, idemhttp.TypeKeyReused)
		assert.Contains(t, p["detail"], "wrote nothing", body)
	}
	// The sale is checked after the key: under a used key, a body changed
	// into one the check refuses is key-reused too, not the check's problem.
	for _, body := range []string{
		`{"customer":"c1","amount":"0"}`,
		`{"customer":"c1"}`,
		"not json",
		`{"customer":"c9","amount":"500.00"}`,
	} {
		res := do(t, http.MethodPost, url, "k1", body)
		res.problem(t, http.StatusUnprocessableEntity, idemhttp.TypeKeyReused)
	}
	assert.Equal(t, 1, salesOf(t, db, "dhaka-1", "c1"))
	assert.Equal(t, 0, salesOf(t, db, "dhaka-1", "c2"))
	assert.Equal(t, "500.00", totalDue(t, db, "dhaka-1", "c1"), "total_due unchanged")
	assert.Equal(t, "0.00", totalDue(t, db, "dhaka-1", "c2"))

	for _, body := range []string{
		saleBody,
		`{"amount":"500.00","customer":"c1"}`,
		"  {\n\t\"amount\" : \"500.00\" ,\r\n \"customer\":\"c1\" }\n",
	} {
		res := do(t, http.MethodPost, url, "k1", body)
		require.Equal(t, http.StatusCreated, res.status, "%q: %s", body, res.body)
		assert.True(t, res.replayed(), body)
		assert.Equal(t, string(first.body), string(res.body), body)
	}
	assert.Equal(t, 1, salesOf(t, db, "dhaka-1", "c1"))
	assert.Equal(t, "500.00", totalDue(t, db, "dhaka-1", "c1"))

	// Another sale of c1 under a new key moves the balance again: a delta.
	s2 := do(t, http.MethodPost, url, "k2", `{"customer":"c1","amount":"0.5"}`).sale(t)
	assert.Equal(t, "0.50", s2.Amount)
	assert.Equal(t, "500.50", s2.TotalDue)
	assert.Greater(t, s2.ID, s.ID)

	// The same key in another shop is that shop's own.
	createCustomer(t, base, "sylhet-2", "c1")
	other := do(t, http.MethodPost, base+"/shops/sylhet-2/sales", "k1", saleBody)
	assert.Equal(t, "sylhet-2", other.sale(t).Shop)
	assert.False(t, other.replayed())
	assert.Equal(t, "500.00", totalDue(t, db, "sylhet-2", "c1"))
	assert.Equal(t, "500.50", totalDue(t, db, "dhaka-1", "c1"))
}

// Refused requests write nothing and leave the key unused, whether InTx
// refused them before the claim (key, size) or writeSale inside the
// transaction (body, fields, customer): the same key with a good request
// writes the sale. A refusal is no failure: it is not logged.
func TestBadInputs(t *testing.T) {
	t.Parallel()
	db := testDatabase(t)
	var logs syncBuffer
	base := serve(t, db, config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	createCustomer(t, base, "dhaka-1", "c1")
	url := base + "/shops/dhaka-1/sales"
	const key = "k-bad"

	t.Run("key", func(t *testing.T) {
		for _, k := range []string{"-", "", `"unterminated`, "a, b", "a;x=1", strings.Repeat("k", 256)} {
			res := do(t, http.MethodPost, url, k, saleBody)
			res.problem(t, http.StatusBadRequest, idemhttp.TypeInvalidKey)
		}
	})
	t.Run("malformed", func(t *testing.T) {
		for _, body := range []string{"", "not json", "[]", "null", `"sale"`, `{"customer":"c1","amount":"500.00"} {}`, `{"customer":"c1",`} {
			res := do(t, http.MethodPost, url, key, body)
			res.problem(t, http.StatusBadRequest, typeMalformedBody)
		}
	})
	t.Run("invalid", func(t *testing.T) {
		for body, pointers := range map[string][]string{
			`{"customer":"c1","amount":500}`:             {"#/amount"},
			`{"customer":"c1","amount":"0"}`:             {"#/amount"},
			`{"customer":"c1","amount":"0.00"}`:          {"#/amount"},
			`{"customer":"c1","amount":"-5.00"}`:         {"#/amount"},
			`{"customer":"c1","amount":"1.234"}`:         {"#/amount"},
			`{"customer":"c1","amount":"1e3"}`:           {"#/amount"},
			`{"customer":"c1","amount":" 5"}`:            {"#/amount"},
			`{"customer":"c1","amount":"5."}`:            {"#/amount"},
			`{"customer":"c1","amount":"1000000000000"}`: {"#/amount"},
			`{"customer":"c1"}`:                          {"#/amount"},
			`{"customer":"","amount":"500.00"}`:          {"#/customer"},
			`{"customer":null,"amount":"500.00"}`:        {"#/customer"},
			`{"amount":"500.00"}`:                        {"#/customer"},
			`{}`:                                         {"#/customer", "#/amount"},
			`{"customer":"c1","amount":"5","note":"x"}`:  {"#/note"},
			`{"customer":"c1","amount":"5","a/b":1}`:     {"#/a~1b"},
		} {
			res := do(t, http.MethodPost, url, key, body)
			p := res.problem(t, http.StatusUnprocessableEntity, typeInvalidSale)
			var got []string
			errs, _ := p["errors"].([]any)
			for _, e := range errs {
				got = append(got, e.(map[string]any)["pointer"].(string))
			}
			assert.Equal(t, pointers, got, body)
		}
	})
	t.Run("unknown customer", func(t *testing.T) {
		res := do(t, http.MethodPost, url, key, `{"customer":"c9","amount":"5.00"}`)
		res.problem(t, http.StatusNotFound, typeUnknownCustomer)
		res = do(t, http.MethodPost, base+"/shops/elsewhere/sales", key, saleBody)
		res.problem(t, http.StatusNotFound, typeUnknownCustomer)
	})
	t.Run("too large", func(t *testing.T) {
		body := `{"customer":"c1","amount":"500.00","pad":"` + strings.Repeat("x", idemhttp.MaxBody) + `"}`
		res := do(t, http.MethodPost, url, key, body)
		res.problem(t, http.StatusRequestEntityTooLarge, idemhttp.TypeBodyTooLarge)
	})
	t.Run("bad shop", func(t *testing.T) {
		res := do(t, http.MethodPost, base+"/shops/-x/sales", key, saleBody)
		res.problem(t, http.StatusNotFound, typeNotFound)
	})

	assert.Equal(t, 0, salesOf(t, db, "dhaka-1", "c1"), "sales written by refused requests")
	assert.Equal(t, "0.00", totalDue(t, db, "dhaka-1", "c1"))
	assert.Equal(t, 0, keysOf(t, db, "dhaka-1"), "keys claimed by refused requests")
	assert.Equal(t, 0, keysOf(t, db, "elsewhere"), "keys claimed by refused requests")
	assert.Empty(t, logs.String(), "refusals logged")

	// The key is unused: a good request under it writes, and is no replay.
	res := do(t, http.MethodPost, url, key, saleBody)
	assert.Equal(t, "500.00", res.sale(t).TotalDue)
	assert.False(t, res.replayed())

	// An unknown customer's sale, refused, goes through under its key once
	// the customer exists.
	const later = `{"customer":"c9","amount":"7.25"}`
	do(t, http.MethodPost, url, "k-later", later).problem(t, http.StatusNotFound, typeUnknownCustomer)
	createCustomer(t, base, "dhaka-1", "c9")
	res = do(t, http.MethodPost, url, "k-later", later)
	assert.Equal(t, "7.25", res.sale(t).TotalDue)
	assert.False(t, res.replayed())
	assert.Equal(t, 1, salesOf(t, db, "dhaka-1", "c9"))
}

// syncBuffer is a bytes.Buffer safe for concurrent use: a logger's output.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// A failure inside the sale's transaction rolls back the sale, the balance
// and the key: nothing stands, and a retry under the key writes the sale.
func TestFailedWriteLeavesNothing(t *testing.T) {
	t.Parallel()
	db := testDatabase(t)
	var fail atomic.Bool
	fail.Store(true)
	base := serve(t, db, config{beforeCommit: func(context.Context) error {
		if fail.Load() {
			return errors.New("the disk is full")
		}
		return nil
	}})
	createCustomer(t, base, "dhaka-1", "c1")
	url := base + "/shops/dhaka-1/sales"

	res := do(t, http.MethodPost, url, "k1", saleBody)
	p := res.problem(t, http.StatusInternalServerError, idemhttp.TypeInternal)
	assert.NotContains(t, p["detail"], "disk", "no internal error text in a problem")
	assert.Equal(t, 0, salesOf(t, db, "dhaka-1", "c1"))
	assert.Equal(t, "0.00", totalDue(t, db, "dhaka-1", "c1"))
	assert.Equal(t, 0, keysOf(t, db, "dhaka-1"), "the key rolled back with the sale")

	fail.Store(false)
	res = do(t, http.MethodPost, url, "k1", saleBody)
	assert.Equal(t, "500.00", res.sale(t).TotalDue)
	assert.False(t, res.replayed())
	assert.Equal(t, 1, salesOf(t, db, "dhaka-1", "c1"))
}

// Customers are created by PUT, read by GET.
func TestCustomers(t *testing.T) {
	t.Parallel()
	db := testDatabase(t)
	base := serve(t, db, config{})
	url := base + "/shops/dhaka-1/customers/c1"

	do(t, http.MethodGet, url, "-", "").problem(t, http.StatusNotFound, typeNotFound)
	res := do(t, http.MethodPut, url, "-", "")
	assert.Equal(t, http.StatusCreated, res.status)
	assert.JSONEq(t, `{"shop":"dhaka-1","id":"c1","total_due":"0.00"}`, string(res.body))
	do(t, http.MethodPost, base+"/shops/dhaka-1/sales", "k1", `{"customer":"c1","amount":"12.30"}`).sale(t)
	res = do(t, http.MethodPut, url, "-", "")
	assert.Equal(t, http.StatusOK, res.status, "it exists already")
	assert.JSONEq(t, `{"shop":"dhaka-1","id":"c1","total_due":"12.30"}`, string(res.body))
	res = do(t, http.MethodGet, url, "-", "")
	assert.Equal(t, http.StatusOK, res.status)
	assert.JSONEq(t, `{"shop":"dhaka-1","id":"c1","total_due":"12.30"}`, string(res.body))
	do(t, http.MethodGet, base+"/shops/sylhet-2/customers/c1", "-", "").problem(t, http.StatusNotFound, typeNotFound)
	do(t, http.MethodPut, base+"/shops/dhaka-1/customers/.c1", "-", "").problem(t, http.StatusNotFound, typeNotFound)
}

// Sales of one customer under different keys, at once, all count: each
// moves total_due by its amount in SQL, so none is lost.
func TestConcurrentSalesAddUp(t *testing.T) {
	t.Parallel()
	db := testDatabase(t)
	// Each transaction stays open a while after its writes, so that a sale
	// that read the balance before another committed would lose that one.
	base := serve(t, db, config{CommitDelay: 50 * time.Millisecond})
	createCustomer(t, base, "dhaka-1", "c1")
	url := base + "/shops/dhaka-1/sales"

	const n = 10
	urls := make([]string, n)
	for i := range urls {
		urls[i] = url
	}
	got := taps(urls, func(i int) string { return fmt.Sprintf("sale-%d", i) }, `{"customer":"c1","amount":"100.10"}`)(t)
	ids := map[int64]bool{}
	for _, res := range got {
		s := res.sale(t)
		assert.False(t, res.replayed())
		assert.False(t, ids[s.ID], "sale ids are distinct")
		ids[s.ID] = true
	}
	assert.Len(t, ids, n)
	assert.Equal(t, n, salesOf(t, db, "dhaka-1", "c1"))
	assert.Equal(t, "1001.00", totalDue(t, db, "dhaka-1", "c1"), "every sale moved total_due")
}
