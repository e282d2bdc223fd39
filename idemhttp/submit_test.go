package idemhttp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemledger/submissions"
	"github.com/idemledger/submissions/idemhttp"
)

// rail counts the sends of send.
type rail struct {
	calls atomic.Int32
	send  func(context.Context, withdrawal) (withdrawal, error)
}

func (r *rail) Send(ctx context.Context, w withdrawal) (withdrawal, error) {
	r.calls.Add(1)
	return r.send(ctx, w)
}

// result is what a handler's call of Submit returned.
type result struct {
	out withdrawal
	err error
}

// handler submits the withdrawal in the request's body, answering 201, and
// passes on what Submit returned.
func handler(ledger *submissions.Submissions[withdrawal], rail *rail, results chan<- result) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var wd withdrawal
		if err := json.NewDecoder(r.Body).Decode(&wd); err != nil {
			http.Error(w, "bad body", http.StatusBadRequest)
			return
		}
		out, err := idemhttp.Submit(r.Context(), w, r, ledger, http.StatusCreated, wd, rail.Send)
		if results != nil {
			results <- result{out, err}
		}
	})
}

// post sends wd to h under key ("" for no key) and returns the response.
func post(t *testing.T, h http.Handler, key string, wd withdrawal) *httptest.ResponseRecorder {
	t.Helper()
	body, err := json.Marshal(wd)
	require.NoError(t, err)
	r := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/withdrawals", bytes.NewReader(body))
	if key != "" {
		r.Header.Set(idemhttp.KeyHeader, key)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	return rec
}

func problemOf(t *testing.T, rec *httptest.ResponseRecorder) idemhttp.Problem {
	t.Helper()
	require.Equal(t, "application/problem+json", rec.Header().Get("Content-Type"))
	var p idemhttp.Problem
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &p))
	require.Equal(t, rec.Code, p.Status)
	return p
}

func TestSubmit(t *testing.T) {
	t.Run("replay has the first body and the replay header", func(t *testing.T) {
		r := &rail{send: sent}
		results := make(chan result, 3)
		h := handler(submissions.New[withdrawal](quiet), r, results)
		wd := newWithdrawal("wd-1")

		first := post(t, h, `"k1"`, wd)
		require.Equal(t, http.StatusCreated, first.Code)
		assert.Equal(t, "application/json", first.Header().Get("Content-Type"))
		assert.Empty(t, first.Header().Values(idemhttp.ReplayedHeader))
		res := <-results
		require.NoError(t, res.err)
		assert.Equal(t, "sent", res.out.Status)
		assert.JSONEq(t, `{"id":"wd-1","amount":"25.00","currency":"USDC","address":"0xabc","status":"sent","tx_id":"0xfeed"}`, first.Body.String())

		for _, key := range []string{`"k1"`, "k1"} { // a bare key is the same key
			again := post(t, h, key, wd)
			require.Equal(t, http.StatusCreated, again.Code)
			assert.Equal(t, []string{"true"}, again.Header().Values(idemhttp.ReplayedHeader))
			assert.Equal(t, "application/json", again.Header().Get("Content-Type"))
			assert.Equal(t, first.Body.Bytes(), again.Body.Bytes())
			res := <-results
			require.NoError(t, res.err)
			assert.Equal(t, "sent", res.out.Status)
		}
		assert.Equal(t, int32(1), r.calls.Load())
	})

	t.Run("key errors are 400 and send nothing", func(t *testing.T) {
		r := &rail{send: sent}
		results := make(chan result, 2)
		h := handler(submissions.New[withdrawal](quiet), r, results)

		rec := post(t, h, "", newWithdrawal("wd-1"))
		assert.Equal(t, http.StatusBadRequest, rec.Code)
		assert.Equal(t, idemhttp.TypeInvalidKey, problemOf(t, rec).Type)
		assert.ErrorIs(t, (<-results).err, idemhttp.ErrKeyMissing)

		rec = post(t, h, `"k1", "k2"`, newWithdrawal("wd-1"))
		assert.Equal(t, http.StatusBadRequest, rec.Code)
		assert.Equal(t, "Idempotency-Key is a list.", problemOf(t, rec).Detail)
		assert.ErrorIs(t, (<-results).err, idemhttp.ErrKeyList)
		assert.Zero(t, r.calls.Load())
	})

	t.Run("second key is 409 naming the holder", func(t *testing.T) {
		r := &rail{send: sent}
		h := handler(submissions.New[withdrawal](quiet), r, nil)
		require.Equal(t, http.StatusCreated, post(t, h, "phone-1", newWithdrawal("wd-1")).Code)

		rec := post(t, h, "laptop-9", newWithdrawal("wd-1"))
		assert.Equal(t, http.StatusConflict, rec.Code)
		p := problemOf(t, rec)
		assert.Equal(t, idemhttp.TypeWithdrawalClaimed, p.Type)
		assert.Equal(t, "phone-1", p.Holder)
		assert.Equal(t, int32(1), r.calls.Load())
	})

	t.Run("money may have moved is 502 and keeps the key", func(t *testing.T) {
		r := &rail{send: failing}
		results := make(chan result, 2)
		h := handler(submissions.New[withdrawal](quiet), r, results)

		rec := post(t, h, "k1", newWithdrawal("wd-1"))
		assert.Equal(t, http.StatusBadGateway, rec.Code)
		assert.Equal(t, idemhttp.TypeOutcomeUnknown, problemOf(t, rec).Type)
		assert.ErrorIs(t, (<-results).err, errRail)

		rec = post(t, h, "k1", newWithdrawal("wd-1"))
		assert.Equal(t, http.StatusConflict, rec.Code)
		assert.Equal(t, idemhttp.TypeAwaitingOperator, problemOf(t, rec).Type, "no send runs: the key waits for an operator")
		assert.Empty(t, rec.Header().Values("Retry-After"), "coming back sooner gets the same answer")
		err := (<-results).err
		assert.ErrorIs(t, err, submissions.ErrSubmissionInFlight)
		assert.ErrorIs(t, err, submissions.ErrAbandoned)
		assert.Equal(t, int32(1), r.calls.Load())
	})

	t.Run("not sent is 503, and a retry of the key sends again", func(t *testing.T) {
		r := &rail{}
		r.send = func(ctx context.Context, w withdrawal) (withdrawal, error) {
			if r.calls.Load() == 1 {
				return notSending(errRail)(ctx, w)
			}
			return sent(ctx, w)
		}
		results := make(chan result, 2)
		h := handler(submissions.New[withdrawal](quiet), r, results)

		rec := post(t, h, "k1", newWithdrawal("wd-1"))
		assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
		assert.Equal(t, idemhttp.TypeNotSent, problemOf(t, rec).Type)
		assert.Equal(t, "1", rec.Header().Get("Retry-After"))
		assert.ErrorIs(t, (<-results).err, submissions.ErrNotSent)

		rec = post(t, h, "k1", newWithdrawal("wd-1"))
		assert.Equal(t, http.StatusCreated, rec.Code, "%s", rec.Body)
		assert.Empty(t, rec.Header().Values(idemhttp.ReplayedHeader), "sent by this request")
		assert.NoError(t, (<-results).err)
		assert.Equal(t, int32(2), r.calls.Load())
	})

	t.Run("an answer not recorded is 502 and returned", func(t *testing.T) {
		r := &rail{send: func(ctx context.Context, w withdrawal) (withdrawal, error) {
			w, _ = sent(ctx, w)
			w.Amount = "26.00"
			return w, nil
		}}
		results := make(chan result, 1)
		h := handler(submissions.New[withdrawal](quiet), r, results)

		rec := post(t, h, "k1", newWithdrawal("wd-1"))
		assert.Equal(t, http.StatusBadGateway, rec.Code)
		p := problemOf(t, rec)
		assert.Equal(t, idemhttp.TypeOutcomeNotRecorded, p.Type)
		assert.Contains(t, p.Detail, "stays claimed until an operator")
		assert.JSONEq(t, `{"id":"wd-1","amount":"26.00","currency":"USDC","address":"0xabc","status":"sent","tx_id":"0xfeed"}`,
			string(p.Answer), "the client gets the rail's answer")
		res := <-results
		assert.ErrorIs(t, res.err, submissions.ErrOutcomeNotRecorded)
		assert.Equal(t, "0xfeed", res.out.TxID, "Submit returns the rail's answer")
	})

	t.Run("an answer after an operator resolved the key is 502, and a retry gets the operator's outcome", func(t *testing.T) {
		ledger := submissions.New[withdrawal](quiet)
		started, finish := make(chan struct{}), make(chan struct{})
		r := &rail{send: func(ctx context.Context, w withdrawal) (withdrawal, error) {
			close(started)
			<-finish
			return sent(ctx, w)
		}}
		results := make(chan result, 2)
		h := handler(ledger, r, results)
		first := make(chan *httptest.ResponseRecorder, 1)
		go func() { first <- post(t, h, "k1", newWithdrawal("wd-1")) }()
		<-started
		resolved := newWithdrawal("wd-1")
		resolved.Status, resolved.TxID = "sent", "0xoperator"
		require.NoError(t, ledger.Resolve(t.Context(), "k1", resolved))
		close(finish)

		rec := <-first
		assert.Equal(t, http.StatusBadGateway, rec.Code)
		p := problemOf(t, rec)
		assert.Equal(t, idemhttp.TypeOutcomeNotRecorded, p.Type)
		assert.Contains(t, p.Detail, "was resolved otherwise")
		assert.Contains(t, p.Detail, "disagree")
		assert.NotContains(t, p.Detail, "stays claimed")
		assert.Contains(t, string(p.Answer), `"tx_id":"0xfeed"`, "the rail's answer, not dropped")
		assert.ErrorIs(t, (<-results).err, submissions.ErrResolvedMeanwhile)

		rec = post(t, h, "k1", newWithdrawal("wd-1"))
		assert.Equal(t, http.StatusCreated, rec.Code, "%s", rec.Body)
		assert.Equal(t, []string{"true"}, rec.Header().Values(idemhttp.ReplayedHeader))
		assert.Contains(t, rec.Body.String(), `"tx_id":"0xoperator"`, "a retry replays the recorded outcome, which the detail said disagrees with the rail")
		assert.NoError(t, (<-results).err)
		assert.Equal(t, int32(1), r.calls.Load())
	})
}

// A service that knows how long its sends take says so in the Retry-After
// of a key whose send runs; a key awaiting an operator has none.
func TestSubmitWithRetryAfter(t *testing.T) {
	ledger := submissions.New[withdrawal](quiet)
	started, finish := make(chan struct{}), make(chan struct{})
	r := &rail{send: func(ctx context.Context, w withdrawal) (withdrawal, error) {
		if w.ID == "wd-1" {
			close(started)
			<-finish
			return sent(ctx, w)
		}
		return failing(ctx, w)
	}}
	h := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var wd withdrawal
		if err := json.NewDecoder(req.Body).Decode(&wd); err != nil {
			http.Error(w, "bad body", http.StatusBadRequest)
			return
		}
		_, _ = idemhttp.SubmitWith(req.Context(), w, req, ledger, http.StatusCreated, wd, r.Send,
			idemhttp.SubmitOptions{RetryAfter: 2500 * time.Millisecond})
	})
	first := make(chan int, 1)
	go func() { first <- post(t, h, "k1", newWithdrawal("wd-1")).Code }()
	<-started
	rec := post(t, h, "k1", newWithdrawal("wd-1"))
	assert.Equal(t, idemhttp.TypeKeyInFlight, problemOf(t, rec).Type)
	assert.Equal(t, []string{"3"}, rec.Header().Values("Retry-After"), "the service's, in whole seconds")
	close(finish)
	assert.Equal(t, http.StatusCreated, <-first)

	assert.Equal(t, http.StatusBadGateway, post(t, h, "k2", newWithdrawal("wd-2")).Code)
	rec = post(t, h, "k2", newWithdrawal("wd-2"))
	assert.Equal(t, idemhttp.TypeAwaitingOperator, problemOf(t, rec).Type)
	assert.Empty(t, rec.Header().Values("Retry-After"))

	rec = post(t, h, "", newWithdrawal("wd-3"))
	assert.Equal(t, idemhttp.TypeInvalidKey, problemOf(t, rec).Type)
	assert.Empty(t, rec.Header().Values("Retry-After"), "only a key whose send runs")
}

// Taps released together over separate connections: one send, one 201, the
// others 409 in flight; then every replay has the first body.
func TestSubmitConcurrentDoubleTaps(t *testing.T) {
	const n = 32
	var others atomic.Int32           // responses received, of requests that did not send
	othersDone := make(chan struct{}) // closed when n-1 requests have their response
	r := &rail{}
	r.send = func(ctx context.Context, w withdrawal) (withdrawal, error) {
		if r.calls.Load() == 1 { // the first send waits for every other tap
			select {
			case <-othersDone:
			case <-time.After(10 * time.Second):
				return withdrawal{}, fmt.Errorf("the other taps did not end")
			}
		}
		return sent(ctx, w)
	}
	srv := httptest.NewServer(handler(submissions.New[withdrawal](quiet), r, nil))
	defer srv.Close()
	body, err := json.Marshal(newWithdrawal("wd-1"))
	require.NoError(t, err)

	type response struct {
		code     int
		body     []byte
		replayed []string
		problem  idemhttp.Problem
	}
	tap := func(t *testing.T, start <-chan struct{}) (response, error) {
		tr := &http.Transport{DisableKeepAlives: true} // a connection of its own
		defer tr.CloseIdleConnections()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL, bytes.NewReader(body))
		if err != nil {
			return response{}, err
		}
		req.Header.Set(idemhttp.KeyHeader, `"tap-7f3a"`)
		<-start
		resp, err := (&http.Client{Transport: tr}).Do(req)
		if err != nil {
			return response{}, err
		}
		defer resp.Body.Close()
		got := response{code: resp.StatusCode, replayed: resp.Header.Values(idemhttp.ReplayedHeader)}
		if got.body, err = io.ReadAll(resp.Body); err != nil {
			return response{}, err
		}
		if resp.StatusCode != http.StatusCreated {
			if err := json.Unmarshal(got.body, &got.problem); err != nil {
				return response{}, err
			}
			if others.Add(1) == n-1 {
				close(othersDone)
			}
		}
		return got, nil
	}
	fire := func(t *testing.T, count int) []response {
		start := make(chan struct{})
		responses := make([]response, count)
		errs := make([]error, count)
		var wg sync.WaitGroup
		for i := range count {
			wg.Go(func() { responses[i], errs[i] = tap(t, start) })
		}
		close(start)
		wg.Wait()
		for _, err := range errs {
			require.NoError(t, err)
		}
		return responses
	}

	var created []byte
	inFlight := 0
	for _, resp := range fire(t, n) {
		switch resp.code {
		case http.StatusCreated:
			require.Nil(t, created, "one 201")
			created = resp.body
			assert.Empty(t, resp.replayed)
		case http.StatusConflict:
			assert.Equal(t, idemhttp.TypeKeyInFlight, resp.problem.Type)
			inFlight++
		default:
			t.Errorf("status %d: %s", resp.code, resp.body)
		}
	}
	assert.Equal(t, int32(1), r.calls.Load(), "one send")
	require.NotNil(t, created)
	assert.Equal(t, n-1, inFlight)

	for _, resp := range fire(t, 8) {
		assert.Equal(t, http.StatusCreated, resp.code)
		assert.Equal(t, created, resp.body)
		assert.Equal(t, []string{"true"}, resp.replayed)
	}
	assert.Equal(t, int32(1), r.calls.Load(), "replays send nothing")
}
