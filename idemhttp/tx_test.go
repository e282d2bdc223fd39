package idemhttp_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemledger/submissions"
	"github.com/idemledger/submissions/idemhttp"
)

// txLedger is a Transactor as a transaction behaves: work's writes (a
// count) and the outcome stand together, or, on an error, neither does.
type txLedger struct {
	mu       sync.Mutex
	outcomes map[string]idemhttp.Exchange // tenant + "/" + key
	writes   int
}

func (l *txLedger) run(ctx context.Context, tenant, key string, req idemhttp.Exchange,
	work func(context.Context, *int, idemhttp.Exchange) (idemhttp.Exchange, error)) (idemhttp.Exchange, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if out, ok := l.outcomes[tenant+"/"+key]; ok {
		if out.Request != req.Request {
			return idemhttp.Exchange{}, false, fmt.Errorf("%w: request key %s belongs to another withdrawal", submissions.ErrIdempotencyConflict, key)
		}
		return out, true, nil
	}
	writes := l.writes
	out, err := work(ctx, &writes, req)
	if err != nil {
		return idemhttp.Exchange{}, false, err
	}
	if l.outcomes == nil {
		l.outcomes = map[string]idemhttp.Exchange{}
	}
	l.outcomes[tenant+"/"+key], l.writes = out, writes
	return out, false, nil
}

type sale struct {
	Customer string `json:"customer"`
	Amount   string `json:"amount"`
	ID       int    `json:"id,omitempty"`
}

// record writes a sale: one write, the sale with its number as the body.
func record(_ context.Context, writes *int, r *http.Request, body []byte) (int, any, error) {
	var s sale
	if err := json.Unmarshal(body, &s); err != nil {
		return http.StatusBadRequest, map[string]string{"error": "not JSON"}, nil
	}
	if s.Customer == "fail" {
		return 0, nil, errors.New("database down")
	}
	if s.Customer == "unknown" {
		return 0, nil, &idemhttp.Problem{Type: "urn:sales:problem:unknown-customer", Title: "Unknown customer", Status: http.StatusNotFound}
	}
	if s.Customer == "nostatus" {
		return 0, s, nil
	}
	if s.Customer == "unencodable" {
		return http.StatusCreated, func() {}, nil
	}
	*writes++
	s.ID = *writes
	return http.StatusCreated, s, nil
}

func TestInTx(t *testing.T) {
	l := &txLedger{}
	h := idemhttp.InTx(l.run, func(r *http.Request) string { return r.Header.Get("X-Shop") }, record)
	post := func(shop, key, path, body string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
		if key != "" {
			r.Header.Set("Idempotency-Key", key)
		}
		r.Header.Set("X-Shop", shop)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	problemType := func(t *testing.T, w *httptest.ResponseRecorder) string {
		t.Helper()
		var p idemhttp.Problem
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &p), w.Body.String())
		return p.Type
	}

	first := post("s1", "k1", "/sales", `{"customer":"c1","amount":"500.00"}`)
	require.Equal(t, http.StatusCreated, first.Code, first.Body.String())
	assert.Equal(t, "application/json", first.Header().Get("Content-Type"))
	assert.Empty(t, first.Header().Get(idemhttp.ReplayedHeader))
	assert.JSONEq(t, `{"customer":"c1","amount":"500.00","id":1}`, first.Body.String())

	t.Run("a repeat replays status and body", func(t *testing.T) {
		for _, body := range []string{`{"customer":"c1","amount":"500.00"}`, ` { "amount" : "500.00", "customer":"c1" } `} {
			w := post("s1", "k1", "/sales", body)
			assert.Equal(t, http.StatusCreated, w.Code)
			assert.Equal(t, first.Body.String(), w.Body.String())
			assert.Equal(t, "true", w.Header().Get(idemhttp.ReplayedHeader))
		}
		assert.Equal(t, 1, l.writes)
	})
	t.Run("another body, path or amount spelling is 422", func(t *testing.T) {
		for _, c := range []struct{ path, body string }{
			{"/sales", `{"customer":"c1","amount":"501.00"}`},
			{"/sales", `{"customer":"c1","amount":"500.0"}`},
			{"/refunds", `{"customer":"c1","amount":"500.00"}`},
			{"/sales?dry_run=1", `{"customer":"c1","amount":"500.00"}`},
			{"/sales", `{"customer":"c1","amount":"500.00"} x`},
		} {
			w := post("s1", "k1", c.path, c.body)
			require.Equal(t, http.StatusUnprocessableEntity, w.Code, c)
			assert.Equal(t, idemhttp.TypeKeyReused, problemType(t, w))
			assert.Contains(t, w.Body.String(), "another method, path, query or body")
		}
		assert.Equal(t, 1, l.writes)
	})
	t.Run("tenants are apart", func(t *testing.T) {
		w := post("s2", "k1", "/sales", `{"customer":"c1","amount":"500.00"}`)
		assert.Equal(t, http.StatusCreated, w.Code)
		assert.Empty(t, w.Header().Get(idemhttp.ReplayedHeader))
		assert.Equal(t, 2, l.writes)
	})
	t.Run("an error writes nothing and keeps the key free", func(t *testing.T) {
		for _, customer := range []string{"fail", "unencodable", "nostatus"} {
			body := `{"customer":"` + customer + `","amount":"1"}`
			w := post("s1", "k-"+customer, "/sales", body)
			assert.Equal(t, http.StatusInternalServerError, w.Code)
			assert.Equal(t, idemhttp.TypeInternal, problemType(t, w))
			_, kept := l.outcomes["s1/k-"+customer]
			assert.False(t, kept)
		}
		assert.Equal(t, 2, l.writes)
	})
	t.Run("a refusal is written and keeps the key free", func(t *testing.T) {
		w := post("s1", "k-unknown", "/sales", `{"customer":"unknown","amount":"1"}`)
		assert.Equal(t, http.StatusNotFound, w.Code)
		assert.Equal(t, "urn:sales:problem:unknown-customer", problemType(t, w))
		_, kept := l.outcomes["s1/k-unknown"]
		assert.False(t, kept)
		w = post("s1", "k-unknown", "/sales", `{"customer":"c2","amount":"1"}`)
		assert.Equal(t, http.StatusCreated, w.Code, "the same key, another body: not a reuse")
		assert.Equal(t, 3, l.writes)
		assert.Equal(t, "Unknown customer: none", (&idemhttp.Problem{Title: "Unknown customer", Detail: "none"}).Error())
		assert.Equal(t, "Unknown customer", (&idemhttp.Problem{Title: "Unknown customer"}).Error())
	})
	t.Run("a response of any status is kept", func(t *testing.T) {
		w := post("s1", "k-bad", "/sales", `not json`)
		assert.Equal(t, http.StatusBadRequest, w.Code)
		w = post("s1", "k-bad", "/sales", `not json`)
		assert.Equal(t, http.StatusBadRequest, w.Code)
		assert.Equal(t, "true", w.Header().Get(idemhttp.ReplayedHeader))
	})
	t.Run("key and body refused", func(t *testing.T) {
		w := post("s1", "", "/sales", `{}`)
		assert.Equal(t, http.StatusBadRequest, w.Code)
		assert.Equal(t, idemhttp.TypeInvalidKey, problemType(t, w))
		w = post("s1", "k-big", "/sales", `"`+strings.Repeat("a", idemhttp.MaxBody)+`"`)
		assert.Equal(t, http.StatusRequestEntityTooLarge, w.Code)
		assert.Equal(t, idemhttp.TypeBodyTooLarge, problemType(t, w))
		assert.Equal(t, 3, l.writes)
	})
	t.Run("a status outside 200 to 599 is an error", func(t *testing.T) {
		var sl txLedger
		h := idemhttp.InTx(sl.run, nil, func(_ context.Context, writes *int, r *http.Request, _ []byte) (int, any, error) {
			var status int
			_, err := fmt.Sscan(r.URL.Query().Get("status"), &status)
			*writes++
			return status, "ok", err
		})
		for status, kept := range map[int]bool{199: false, 200: true, 599: true, 600: false} {
			r := httptest.NewRequest(http.MethodPost, fmt.Sprintf("/x?status=%d", status), nil)
			r.Header.Set("Idempotency-Key", fmt.Sprint("k", status))
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			_, ok := sl.outcomes[fmt.Sprint("/k", status)]
			assert.Equal(t, kept, ok, "status %d kept", status)
			if kept {
				assert.Equal(t, status, w.Code)
			} else {
				assert.Equal(t, http.StatusInternalServerError, w.Code, "status %d", status)
			}
		}
		assert.Equal(t, 2, sl.writes)
	})
	t.Run("nil tenant func is the default tenant", func(t *testing.T) {
		h := idemhttp.InTx(l.run, nil, record)
		r := httptest.NewRequest(http.MethodPost, "/sales", strings.NewReader(`{"customer":"c9","amount":"1"}`))
		r.Header.Set("Idempotency-Key", "k9")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		assert.Equal(t, http.StatusCreated, w.Code)
		_, kept := l.outcomes["/k9"]
		assert.True(t, kept)
	})
}

func TestRequestFingerprint(t *testing.T) {
	fpOf := func(method, target, body string) submissions.Fingerprint {
		return idemhttp.RequestFingerprint("k1", httptest.NewRequest(method, target, nil), []byte(body))
	}
	fp := fpOf("POST", "/sales", `{"b":[1,2],"a":"x"}`)
	assert.Equal(t, "k1", fp.WithdrawalID)
	_, err := fp.Canonical()
	require.NoError(t, err, "a valid fingerprint")
	same := []string{"{\n \"a\": \"x\", \"b\": [1, 2]\n}", `{"a":"x","b":[1,2]}`}
	for _, body := range same {
		assert.Equal(t, fp, fpOf("POST", "/sales", body), body)
	}
	other := []string{`{"a":"x","b":[1,2.0]}`, `{"a":"x","b":[1,2]}{}`, `{"a":"x","b":[1,2]}]`, `{"a":"x"}`, ``}
	for _, body := range other {
		assert.NotEqual(t, fp, fpOf("POST", "/sales", body), body)
	}
	assert.NotEqual(t, fp, fpOf("PUT", "/sales", same[1]))
	assert.NotEqual(t, fp, fpOf("POST", "/sale", same[1]))
	assert.NotEqual(t, fp, fpOf("POST", "/sales?x=1", same[1]))
	assert.Equal(t, fpOf("POST", "/sales?a=1&b=2", same[1]), fpOf("POST", "/sales?b=2&a=1", same[1]), "parameters in any order")
	assert.NotEqual(t, fpOf("POST", "/sales?a=1&b=2", same[1]), fpOf("POST", "/sales?a=1&b=3", same[1]))
	raw := fpOf("POST", "/x", "a b")
	assert.NotEqual(t, raw, fpOf("POST", "/x", "a  b"), "a body that is not JSON is its bytes")
	assert.NotEqual(t, fpOf("POST", "/x", "{\"a\":\"\xff\"}"), fpOf("POST", "/x", "{\"a\":\"\xfe\"}"), "a body not valid UTF-8 is its bytes")
}
