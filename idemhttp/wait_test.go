package idemhttp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemledger/submissions"
	"github.com/idemledger/submissions/idemhttp"
	"github.com/idemledger/submissions/observe"
)

// waiting submits the request's withdrawal with SubmitWaiting, waiting up to
// wait for a key in flight.
func waiting(ledger *submissions.Submissions[withdrawal], rail *rail, wait time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var wd withdrawal
		if err := json.NewDecoder(r.Body).Decode(&wd); err != nil {
			http.Error(w, "bad body", http.StatusBadRequest)
			return
		}
		_, _ = idemhttp.SubmitWaiting(r.Context(), w, r, ledger, http.StatusCreated, wd, rail.Send, wait)
	})
}

func TestSubmitWaiting(t *testing.T) {
	// inFlight starts a send of wd-1 under key-1 that answers, or fails, when
	// finish is closed, and returns the recorder of its response.
	inFlight := func(t *testing.T, h http.Handler, r *rail) (finish chan struct{}, first chan int) {
		started := make(chan struct{})
		finish, first = make(chan struct{}), make(chan int, 1)
		send := r.send
		r.send = func(ctx context.Context, w withdrawal) (withdrawal, error) {
			close(started)
			<-finish
			return send(ctx, w)
		}
		go func() { first <- post(t, h, "key-1", newWithdrawal("wd-1")).Code }()
		<-started
		return finish, first
	}

	t.Run("a double tap gets the first one's outcome as a replay", func(t *testing.T) {
		ledger, r := submissions.New[withdrawal](), &rail{send: sent}
		h := waiting(ledger, r, time.Minute)
		finish, first := inFlight(t, h, r)
		second := make(chan []any, 1)
		go func() {
			rec := post(t, h, "key-1", newWithdrawal("wd-1"))
			second <- []any{rec.Code, rec.Body.String(), rec.Header().Get("Idempotent-Replayed")}
		}()
		close(finish)
		require.Equal(t, http.StatusCreated, <-first)
		got := <-second
		assert.Equal(t, http.StatusCreated, got[0])
		assert.Equal(t, "true", got[2])
		replay := post(t, h, "key-1", newWithdrawal("wd-1"))
		assert.Equal(t, replay.Body.String(), got[1], "the same body as every replay")
		assert.EqualValues(t, 1, r.calls.Load())
	})

	t.Run("a send without an answer is a 502", func(t *testing.T) {
		waits := make(chan struct{}, 1)
		ledger := submissions.New[withdrawal](submissions.WithObserver(observerFunc(func(e observe.Event) {
			if e.Kind == observe.EventInFlight {
				waits <- struct{}{} // the second request was refused, and waits
			}
		})))
		r := &rail{send: failing}
		h := waiting(ledger, r, time.Minute)
		finish, first := inFlight(t, h, r)
		second := make(chan int, 1)
		go func() { second <- post(t, h, "key-1", newWithdrawal("wd-1")).Code }()
		<-waits
		close(finish)
		assert.Equal(t, http.StatusBadGateway, <-first)
		assert.Equal(t, http.StatusBadGateway, <-second)
	})

	t.Run("a key awaiting an operator is not waited for", func(t *testing.T) {
		ledger, r := submissions.New[withdrawal](quiet), &rail{send: failing}
		h := waiting(ledger, r, time.Hour)
		require.Equal(t, http.StatusBadGateway, post(t, h, "key-1", newWithdrawal("wd-1")).Code)
		rec := post(t, h, "key-1", newWithdrawal("wd-1"))
		assert.Equal(t, http.StatusConflict, rec.Code, "at once, not the 502 a wait would end with: %s", rec.Body)
		assert.Equal(t, idemhttp.TypeAwaitingOperator, problemOf(t, rec).Type)
		assert.Empty(t, rec.Header().Values("Retry-After"))
		assert.EqualValues(t, 1, r.calls.Load())
	})

	t.Run("a key released while it waits is a 409, and the retry sends", func(t *testing.T) {
		waits := make(chan struct{}, 1)
		ledger := submissions.New[withdrawal](submissions.WithObserver(observerFunc(func(e observe.Event) {
			if e.Kind == observe.EventInFlight {
				waits <- struct{}{} // the second request was refused, and waits
			}
		})))
		r := &rail{send: func(context.Context, withdrawal) (withdrawal, error) {
			return withdrawal{}, fmt.Errorf("rail busy: %w", submissions.ErrNotSent)
		}}
		h := waiting(ledger, r, time.Minute)
		finish, first := inFlight(t, h, r)
		second := make(chan []any, 1)
		go func() {
			rec := post(t, h, "key-1", newWithdrawal("wd-1"))
			second <- []any{rec.Code, rec.Header().Get("Retry-After")}
		}()
		<-waits
		r.send = sent // the rail is back for the next send
		close(finish)
		assert.Equal(t, http.StatusServiceUnavailable, <-first, "the send that moved nothing")
		assert.Equal(t, []any{http.StatusConflict, idemhttp.RetryAfter}, <-second, "the waiting request, its wait ended by the release")
		assert.EqualValues(t, 1, r.calls.Load(), "the waiting request sent nothing")
		assert.Equal(t, http.StatusCreated, post(t, h, "key-1", newWithdrawal("wd-1")).Code, "the retry sends")
		assert.EqualValues(t, 2, r.calls.Load())
	})

	t.Run("a wait that runs out, or none, is a 409", func(t *testing.T) {
		for _, wait := range []time.Duration{0, time.Millisecond} {
			ledger, r := submissions.New[withdrawal](), &rail{send: sent}
			h := waiting(ledger, r, wait)
			finish, first := inFlight(t, h, r)
			rec := post(t, h, "key-1", newWithdrawal("wd-1"))
			assert.Equal(t, http.StatusConflict, rec.Code, "wait %v", wait)
			close(finish)
			assert.Equal(t, http.StatusCreated, <-first)
		}
	})
}

// observerFunc is an observe.Observer of a function.
type observerFunc func(observe.Event)

func (f observerFunc) Observe(_ context.Context, e observe.Event) { f(e) }
