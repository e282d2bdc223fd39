package main

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemledger/submissions"
	"github.com/idemledger/submissions/idemhttp"
	"github.com/idemledger/submissions/observe"
)

// count returns how many withdrawals m keeps.
func (m *memWithdrawals) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.byID)
}

// withdrawalCount returns how many withdrawals a's server keeps.
func withdrawalCount(t *testing.T, a *api, db string) int {
	t.Helper()
	if db == "" {
		return a.srv.withdrawals.(*memWithdrawals).count()
	}
	var n int
	require.NoError(t, testPool(t, db).QueryRow(context.Background(), `SELECT count(*) FROM payoutd_withdrawals`).Scan(&n))
	return n
}

const createBody = `{"amount":"25.00","currency":"USDC","destination":"0xdest"}`

// createKeyed creates a withdrawal for tenant under key with body, and
// returns what it got.
func createKeyed(t *testing.T, a *api, tenant, key, body string) response {
	t.Helper()
	return do(t, "POST", a.url+"/withdrawals", tenant, key, body)
}

// TestCreateWithKey: POST /withdrawals under an Idempotency-Key creates one
// withdrawal, however many times and however concurrently it is sent: every
// repeat replays the first 201; the key with another body is a 422; a body
// refused leaves the key unused.
func TestCreateWithKey(t *testing.T) {
	forEachStore(t, func(t *testing.T, db string) {
		a := serve(t, db, newRail(0, 0, 0, 0, 0), 10*time.Second)

		t.Run("at once", func(t *testing.T) {
			before := withdrawalCount(t, a, db)
			const n = 16
			got := make([]response, n)
			start := make(chan struct{})
			var ready, done sync.WaitGroup
			for i := range n {
				ready.Add(1)
				done.Go(func() {
					tr := &http.Transport{DisableKeepAlives: true} // a connection of its own
					defer tr.CloseIdleConnections()
					client := &http.Client{Transport: tr}
					ready.Done()
					<-start
					res, err := request(client, "POST", a.url+"/withdrawals", "-", "create-1", createBody)
					assert.NoError(t, err)
					got[i] = res
				})
			}
			ready.Wait()
			close(start)
			done.Wait()

			fresh := 0
			var first withdrawalView
			for _, res := range got {
				require.Equal(t, http.StatusCreated, res.status, "every one a 201: %s", res.body)
				w := res.withdrawal(t)
				if first.ID == "" {
					first = w
				}
				assert.Equal(t, first.ID, w.ID, "one withdrawal")
				assert.Equal(t, string(got[0].body), string(res.body), "the same body, byte for byte")
				assert.Equal(t, "/withdrawals/"+w.ID, res.header.Get("Location"))
				if res.header.Get(idemhttp.ReplayedHeader) == "" {
					fresh++
				} else {
					assert.Equal(t, "true", res.header.Get(idemhttp.ReplayedHeader))
				}
			}
			assert.Equal(t, 1, fresh, "one created, the rest replayed")
			assert.Equal(t, before+1, withdrawalCount(t, a, db), "one withdrawal created")
			assert.Equal(t, Withdrawal{ID: first.ID, Amount: "25.00", Currency: "USDC", Destination: "0xdest", State: stateApproved}, first.Withdrawal)

			res := createKeyed(t, a, "", "create-1", `{"destination":"0xdest", "currency":"USDC","amount":"25.00"}`)
			require.Equal(t, http.StatusCreated, res.status, "the same JSON, spelled otherwise: %s", res.body)
			assert.Equal(t, "true", res.header.Get(idemhttp.ReplayedHeader))
			assert.Equal(t, first.ID, res.withdrawal(t).ID)
		})

		t.Run("another body", func(t *testing.T) {
			first := createKeyed(t, a, "", "create-2", createBody)
			require.Equal(t, http.StatusCreated, first.status, "%s", first.body)
			before := withdrawalCount(t, a, db)
			res := createKeyed(t, a, "", "create-2", `{"amount":"26.00","currency":"USDC","destination":"0xdest"}`)
			p := res.problemOf(t, http.StatusUnprocessableEntity, idemhttp.TypeKeyReused)
			assert.Contains(t, p["detail"], "another method, path, query or body")
			assert.Equal(t, before, withdrawalCount(t, a, db), "nothing created")
			again := createKeyed(t, a, "", "create-2", createBody)
			require.Equal(t, http.StatusCreated, again.status)
			assert.Equal(t, string(first.body), string(again.body), "the first is still the key's")
		})

		t.Run("a body refused leaves the key unused", func(t *testing.T) {
			before := withdrawalCount(t, a, db)
			res := createKeyed(t, a, "", "create-3", `{"amount":"-1","currency":"USDC"}`)
			p := res.problemOf(t, http.StatusUnprocessableEntity, idemhttp.TypeInvalidFingerprint)
			assert.Len(t, p["errors"], 2, "every field at fault, as without a key")
			res = createKeyed(t, a, "", "create-3", `{"amount":`)
			res.problemOf(t, http.StatusBadRequest, typeMalformed)
			assert.Equal(t, before, withdrawalCount(t, a, db))

			res = createKeyed(t, a, "", "create-3", createBody)
			require.Equal(t, http.StatusCreated, res.status, "the key, unused, creates: %s", res.body)
			assert.Empty(t, res.header.Values(idemhttp.ReplayedHeader))
			assert.Equal(t, before+1, withdrawalCount(t, a, db))
		})

		t.Run("a bad key", func(t *testing.T) {
			before := withdrawalCount(t, a, db)
			createKeyed(t, a, "", `"k`, createBody).problemOf(t, http.StatusBadRequest, idemhttp.TypeInvalidKey)
			createKeyed(t, a, "", "  ", createBody).problemOf(t, http.StatusBadRequest, idemhttp.TypeInvalidKey)
			assert.Equal(t, before, withdrawalCount(t, a, db))
		})

		t.Run("without a key, each call creates", func(t *testing.T) {
			assert.NotEqual(t, create(t, a, ""), create(t, a, ""))
		})

		t.Run("keys are per tenant, and apart from the sends'", func(t *testing.T) {
			res := createKeyed(t, a, "", "create-4", createBody)
			require.Equal(t, http.StatusCreated, res.status, "%s", res.body)
			mine := res.withdrawal(t).ID
			res = createKeyed(t, a, "acme", "create-4", createBody)
			require.Equal(t, http.StatusCreated, res.status, "%s", res.body)
			assert.Empty(t, res.header.Values(idemhttp.ReplayedHeader))
			theirs := res.withdrawal(t).ID
			assert.NotEqual(t, mine, theirs)
			do(t, "GET", a.url+"/withdrawals/"+theirs, "-", "-", "").problemOf(t, http.StatusNotFound, typeNotFound)

			res = do(t, "POST", a.url+"/withdrawals/"+mine+"/submit", "-", "create-4", "")
			require.Equal(t, http.StatusCreated, res.status, "the create's key is no send's: %s", res.body)
			assert.Empty(t, res.header.Values(idemhttp.ReplayedHeader))
			assert.Equal(t, stateSent, res.withdrawal(t).State)
		})
	})
}

// In memory, a repeat of a key whose create runs waits for it, as on
// PostgreSQL it waits for the first's transaction: it gets the first's
// response, replayed, or, if the first failed (and wrote nothing), makes
// its own.
func TestMemoryCreateWaits(t *testing.T) {
	req := idemhttp.Exchange{Request: idemhttp.RequestFingerprint("k", httptest.NewRequest(http.MethodPost, "/withdrawals", nil), []byte(createBody))}
	answer := func(body string) func(context.Context, creator, idemhttp.Exchange) (idemhttp.Exchange, error) {
		return func(ctx context.Context, c creator, req idemhttp.Exchange) (idemhttp.Exchange, error) {
			return idemhttp.Exchange{Request: req.Request, Status: http.StatusCreated, Body: []byte(body)}, nil
		}
	}
	for _, c := range []struct {
		name      string
		firstErr  error
		want      string
		replayed  bool
		secondRan bool
	}{
		{"the first answers", nil, `"first"`, true, false},
		{"the first fails", errors.New("store down"), `"second"`, false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			ws := &memWithdrawals{}
			refused := make(chan struct{}, 2) // the repeat's refusal while the first runs, before it waits
			run := memCreateTx(submissions.New[idemhttp.Exchange](submissions.WithObserver(inFlightSignal(refused))), ws)
			inFirst, finish := make(chan struct{}), make(chan struct{})
			firstDone := make(chan error, 1)
			go func() {
				_, _, err := run(t.Context(), "", "k", req, func(ctx context.Context, cr creator, req idemhttp.Exchange) (idemhttp.Exchange, error) {
					close(inFirst)
					<-finish
					if c.firstErr != nil {
						return idemhttp.Exchange{}, c.firstErr
					}
					return answer(`"first"`)(ctx, cr, req)
				})
				firstDone <- err
			}()
			<-inFirst
			type result struct {
				out      idemhttp.Exchange
				replayed bool
				err      error
			}
			second := make(chan result, 1)
			ran := false
			go func() {
				out, replayed, err := run(t.Context(), "", "k", req, func(ctx context.Context, cr creator, req idemhttp.Exchange) (idemhttp.Exchange, error) {
					ran = true
					return answer(`"second"`)(ctx, cr, req)
				})
				second <- result{out, replayed, err}
			}()
			<-refused // the repeat found the key in flight, and waits
			select {
			case r := <-second:
				t.Fatalf("the repeat answered while the first ran: %+v", r)
			default:
			}
			close(finish)
			assert.ErrorIs(t, <-firstDone, c.firstErr)
			r := <-second
			require.NoError(t, r.err)
			assert.Equal(t, c.want, string(r.out.Body))
			assert.Equal(t, c.replayed, r.replayed)
			assert.Equal(t, c.secondRan, ran)
		})
	}
}

// inFlightSignal is an observer that sends on ch each time a call finds its
// key in flight.
type inFlightSignal chan struct{}

func (s inFlightSignal) Observe(_ context.Context, e observe.Event) {
	if e.Kind == observe.EventInFlight {
		select {
		case s <- struct{}{}:
		default:
		}
	}
}
