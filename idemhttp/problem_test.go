package idemhttp_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemledger/submissions"
	"github.com/idemledger/submissions/driver"
	"github.com/idemledger/submissions/idemhttp"
)

// ledgerError returns the error of a ledger call made to fail one way.
type ledgerError func(t *testing.T) error

func submitErr(t *testing.T, l *submissions.Submissions[withdrawal], ctx context.Context, key string, w withdrawal,
	send func(context.Context, withdrawal) (withdrawal, error)) error {
	t.Helper()
	_, err := l.Submit(ctx, key, w, send)
	require.Error(t, err)
	return err
}

var (
	invalidKey ledgerError = func(t *testing.T) error {
		return submitErr(t, submissions.New[withdrawal](quiet), t.Context(), " ", newWithdrawal("wd-1"), sent)
	}
	invalidTenant ledgerError = func(t *testing.T) error {
		l := submissions.New[withdrawal](quiet).Tenant(strings.Repeat("t", driver.MaxTenantLen+1))
		return submitErr(t, l, t.Context(), "k1", newWithdrawal("wd-1"), sent)
	}
	invalidFingerprint ledgerError = func(t *testing.T) error {
		w := newWithdrawal("wd-1")
		w.Amount = "-1"
		return submitErr(t, submissions.New[withdrawal](quiet), t.Context(), "k1", w, sent)
	}
	withdrawalClaimed ledgerError = func(t *testing.T) error {
		l := submissions.New[withdrawal](quiet)
		_, err := l.Submit(t.Context(), "k1", newWithdrawal("wd-1"), sent)
		require.NoError(t, err)
		return submitErr(t, l, t.Context(), "k2", newWithdrawal("wd-1"), sent)
	}
	keyReused ledgerError = func(t *testing.T) error {
		l := submissions.New[withdrawal](quiet)
		_, err := l.Submit(t.Context(), "k1", newWithdrawal("wd-1"), sent)
		require.NoError(t, err)
		return submitErr(t, l, t.Context(), "k1", newWithdrawal("wd-2"), sent)
	}
	// A second request while the first one's send runs.
	keyInFlight ledgerError = func(t *testing.T) error {
		l := submissions.New[withdrawal](quiet)
		started, finish, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
		go func() {
			_, err := l.Submit(context.Background(), "k1", newWithdrawal("wd-1"), func(ctx context.Context, w withdrawal) (withdrawal, error) {
				close(started)
				<-finish
				return sent(ctx, w)
			})
			done <- err
		}()
		<-started
		err := submitErr(t, l, t.Context(), "k1", newWithdrawal("wd-1"), sent)
		close(finish)
		require.NoError(t, <-done)
		require.NotErrorIs(t, err, submissions.ErrAbandoned, "the send runs")
		return err
	}
	// A retry after a send that ended without an answer.
	awaitingOperator ledgerError = func(t *testing.T) error {
		l := submissions.New[withdrawal](quiet)
		_ = submitErr(t, l, t.Context(), "k1", newWithdrawal("wd-1"), failing)
		return submitErr(t, l, t.Context(), "k1", newWithdrawal("wd-1"), sent)
	}
	keyPruned ledgerError = func(t *testing.T) error {
		l := submissions.New[withdrawal](quiet)
		_, err := l.Submit(t.Context(), "k1", newWithdrawal("wd-1"), sent)
		require.NoError(t, err)
		_, err = l.Admin().WithMinRetention(0).Prune(t.Context(), time.Now(), 0)
		require.NoError(t, err)
		return submitErr(t, l, t.Context(), "k1", newWithdrawal("wd-1"), sent)
	}
	// The rail said it moved nothing: errRail's text stays out of the problem.
	notSent ledgerError = func(t *testing.T) error {
		return submitErr(t, submissions.New[withdrawal](quiet), t.Context(), "k1", newWithdrawal("wd-1"), notSending(errRail))
	}
	// The rail's word wraps errors of other classes: it is still not sent.
	notSentDeadline ledgerError = func(t *testing.T) error {
		return submitErr(t, submissions.New[withdrawal](quiet), t.Context(), "k1", newWithdrawal("wd-1"), notSending(context.DeadlineExceeded))
	}
	notSentStoreFailed ledgerError = func(t *testing.T) error {
		return submitErr(t, submissions.New[withdrawal](quiet), t.Context(), "k1", newWithdrawal("wd-1"),
			notSending(fmt.Errorf("the rail's own ledger: %w", storeFailed(t))))
	}
	outcomeUnknown ledgerError = func(t *testing.T) error {
		return submitErr(t, submissions.New[withdrawal](quiet), t.Context(), "k1", newWithdrawal("wd-1"), failing)
	}
	// The rail's error is a context error: the money may have moved all the same.
	outcomeUnknownDeadline ledgerError = func(t *testing.T) error {
		return submitErr(t, submissions.New[withdrawal](quiet), t.Context(), "k1", newWithdrawal("wd-1"),
			func(context.Context, withdrawal) (withdrawal, error) { return withdrawal{}, context.DeadlineExceeded })
	}
	notRecordedOtherWithdrawal ledgerError = func(t *testing.T) error {
		return submitErr(t, submissions.New[withdrawal](quiet), t.Context(), "k1", newWithdrawal("wd-1"),
			func(ctx context.Context, w withdrawal) (withdrawal, error) {
				w, _ = sent(ctx, w)
				w.ID = "wd-2"
				return w, nil
			})
	}
	// The rail answered with text no store gives back as it is.
	notRecordedNotExact ledgerError = func(t *testing.T) error {
		return submitErr(t, submissions.New[withdrawal](quiet), t.Context(), "k1", newWithdrawal("wd-1"),
			func(ctx context.Context, w withdrawal) (withdrawal, error) {
				w, _ = sent(ctx, w)
				w.TxID = "0x\xff"
				return w, nil
			})
	}
	// An operator closed the claim while the rail answered: errors as the
	// ledger makes them.
	notRecordedResolved ledgerError = func(*testing.T) error {
		return fmt.Errorf("%w: request key k1: %w", submissions.ErrOutcomeNotRecorded, submissions.ErrResolvedMeanwhile)
	}
	notRecordedResolvedPruned ledgerError = func(*testing.T) error {
		return fmt.Errorf("%w: request key k1: %w, and pruned", submissions.ErrOutcomeNotRecorded, submissions.ErrResolvedMeanwhile)
	}
	notRecordedReleased ledgerError = func(*testing.T) error {
		return fmt.Errorf("%w: request key k1: %w", submissions.ErrOutcomeNotRecorded, submissions.ErrReleasedMeanwhile)
	}
	// The rail said nothing moved, after an operator released the key.
	notSentReleased ledgerError = func(*testing.T) error {
		return fmt.Errorf("request key k1: %w: %w", submissions.ErrReleasedMeanwhile, fmt.Errorf("%w: %w", submissions.ErrNotSent, errRail))
	}
	storeFailed ledgerError = func(t *testing.T) error {
		return submitErr(t, submissions.NewWithStore[withdrawal](brokenStore{}, quiet), t.Context(), "k1", newWithdrawal("wd-1"), sent)
	}
	canceled ledgerError = func(t *testing.T) error {
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		return submitErr(t, submissions.New[withdrawal](quiet), ctx, "k1", newWithdrawal("wd-1"), sent)
	}
	deadline ledgerError = func(t *testing.T) error {
		ctx, cancel := context.WithDeadline(t.Context(), time.Unix(0, 0))
		defer cancel()
		return submitErr(t, submissions.New[withdrawal](quiet), ctx, "k1", newWithdrawal("wd-1"), sent)
	}
	keyMissing ledgerError = func(*testing.T) error { return idemhttp.ErrKeyMissing }
)

// wrapped is the error of make wrapped twice, as a service might.
func wrapped(make ledgerError) ledgerError {
	return func(t *testing.T) error {
		return fmt.Errorf("payoutd: withdraw: %w", fmt.Errorf("ledger: %w", make(t)))
	}
}

func TestProblemFor(t *testing.T) {
	tests := []struct {
		name       string
		err        ledgerError
		is         error // what err must be, to know the test made the right one
		status     int
		typ        string
		holder     string
		retryAfter bool
	}{
		{"invalid key", invalidKey, submissions.ErrInvalidKey, 400, idemhttp.TypeInvalidKey, "", false},
		{"key missing", keyMissing, idemhttp.ErrKeyMissing, 400, idemhttp.TypeInvalidKey, "", false},
		{"invalid tenant", invalidTenant, submissions.ErrInvalidTenant, 400, idemhttp.TypeInvalidTenant, "", false},
		{"invalid fingerprint", invalidFingerprint, submissions.ErrInvalidFingerprint, 422, idemhttp.TypeInvalidFingerprint, "", false},
		{"withdrawal claimed", withdrawalClaimed, submissions.ErrIdempotencyConflict, 409, idemhttp.TypeWithdrawalClaimed, "k1", false},
		{"key reused", keyReused, submissions.ErrIdempotencyConflict, 422, idemhttp.TypeKeyReused, "", false},
		{"key in flight", keyInFlight, submissions.ErrSubmissionInFlight, 409, idemhttp.TypeKeyInFlight, "", true},
		{"awaiting an operator", awaitingOperator, submissions.ErrAbandoned, 409, idemhttp.TypeAwaitingOperator, "", false},
		{"wrapped awaiting an operator", wrapped(awaitingOperator), submissions.ErrAbandoned, 409, idemhttp.TypeAwaitingOperator, "", false},
		{"key pruned", keyPruned, submissions.ErrPruned, 410, idemhttp.TypeKeyPruned, "", false},
		{"not sent", notSent, submissions.ErrNotSent, 503, idemhttp.TypeNotSent, "", true},
		{"not sent, with a deadline", notSentDeadline, context.DeadlineExceeded, 503, idemhttp.TypeNotSent, "", true},
		{"not sent, with a store failure", notSentStoreFailed, submissions.ErrStoreFailed, 503, idemhttp.TypeNotSent, "", true},
		{"wrapped not sent", wrapped(notSent), submissions.ErrNotSent, 503, idemhttp.TypeNotSent, "", true},
		{"outcome unknown", outcomeUnknown, submissions.ErrOutcomeUnknown, 502, idemhttp.TypeOutcomeUnknown, "", false},
		{"outcome unknown with a deadline", outcomeUnknownDeadline, context.DeadlineExceeded, 502, idemhttp.TypeOutcomeUnknown, "", false},
		{"not recorded: another withdrawal", notRecordedOtherWithdrawal, submissions.ErrOutcomeNotRecorded, 502, idemhttp.TypeOutcomeNotRecorded, "", false},
		{"not recorded: not given back as it is", notRecordedNotExact, submissions.ErrOutcomeNotRecorded, 502, idemhttp.TypeOutcomeNotRecorded, "", false},
		{"not recorded: resolved meanwhile", notRecordedResolved, submissions.ErrResolvedMeanwhile, 502, idemhttp.TypeOutcomeNotRecorded, "", false},
		{"not recorded: resolved meanwhile, and pruned", notRecordedResolvedPruned, submissions.ErrResolvedMeanwhile, 502, idemhttp.TypeOutcomeNotRecorded, "", false},
		{"not recorded: released meanwhile", notRecordedReleased, submissions.ErrReleasedMeanwhile, 502, idemhttp.TypeOutcomeNotRecorded, "", false},
		{"not sent: released meanwhile", notSentReleased, submissions.ErrReleasedMeanwhile, 503, idemhttp.TypeNotSent, "", true},
		{"store failed", storeFailed, submissions.ErrStoreFailed, 503, idemhttp.TypeStoreUnavailable, "", true},
		{"canceled before the claim", canceled, context.Canceled, 503, idemhttp.TypeRequestEnded, "", true},
		{"deadline before the claim", deadline, context.DeadlineExceeded, 503, idemhttp.TypeRequestEnded, "", true},
		{"wrapped withdrawal claimed", wrapped(withdrawalClaimed), submissions.ErrIdempotencyConflict, 409, idemhttp.TypeWithdrawalClaimed, "k1", false},
		{"wrapped key reused", wrapped(keyReused), submissions.ErrIdempotencyConflict, 422, idemhttp.TypeKeyReused, "", false},
		{"wrapped outcome unknown", wrapped(outcomeUnknown), submissions.ErrOutcomeUnknown, 502, idemhttp.TypeOutcomeUnknown, "", false},
		{"wrapped store failed", wrapped(storeFailed), submissions.ErrStoreFailed, 503, idemhttp.TypeStoreUnavailable, "", true},
		{"wrapped key missing", wrapped(keyMissing), idemhttp.ErrKeyMissing, 400, idemhttp.TypeInvalidKey, "", false},
		{"unknown", func(*testing.T) error { return errors.New("secret 10.0.0.1") }, nil, 500, idemhttp.TypeInternal, "", false},
		{"nil", func(*testing.T) error { return nil }, nil, 500, idemhttp.TypeInternal, "", false},
	}
	types := map[string]string{} // type -> title, each title once
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.err(t)
			if tt.is != nil {
				require.ErrorIs(t, err, tt.is)
			}
			p := idemhttp.ProblemFor(err)
			assert.Equal(t, tt.status, p.Status)
			assert.Equal(t, tt.typ, p.Type)
			assert.Equal(t, tt.holder, p.Holder)
			assert.NotEmpty(t, p.Title)
			assert.NotEmpty(t, p.Detail)
			if tt.holder != "" {
				assert.Contains(t, p.Detail, tt.holder)
			}
			for _, secret := range []string{"10.0.0"} {
				assert.NotContains(t, p.Detail, secret, "no internal text in a problem")
			}
			assert.NotContains(t, strings.ToLower(p.Detail), "nothing was sent", "a problem says what this request did")
			assert.Nil(t, p.Answer, "ProblemFor has no answer to give")
			assert.Nil(t, p.Errors)
			assert.Zero(t, p.RetryAfter)
			if title, ok := types[p.Type]; ok {
				assert.Equal(t, title, p.Title)
			}
			types[p.Type] = p.Title

			rec := httptest.NewRecorder()
			idemhttp.WriteError(rec, err)
			assert.Equal(t, tt.status, rec.Code)
			assert.Equal(t, "application/problem+json", rec.Header().Get("Content-Type"))
			if tt.retryAfter {
				assert.Equal(t, "1", rec.Header().Get("Retry-After"))
			} else {
				assert.Empty(t, rec.Header().Values("Retry-After"))
			}
			assert.Empty(t, rec.Header().Values(idemhttp.ReplayedHeader))
			var got map[string]any
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &got))
			assert.Equal(t, p.Type, got["type"])
			assert.Equal(t, p.Title, got["title"])
			assert.Equal(t, float64(tt.status), got["status"])
			assert.Equal(t, p.Detail, got["detail"])
			if tt.holder != "" {
				assert.Equal(t, tt.holder, got["holder"])
			} else {
				assert.NotContains(t, got, "holder")
			}
			assert.NotContains(t, got, "answer")
			assert.NotContains(t, got, "errors")
		})
	}
	t.Run("every type has its own title", func(t *testing.T) {
		titles := map[string]bool{}
		for _, title := range types {
			assert.False(t, titles[title], title)
			titles[title] = true
		}
		assert.Len(t, types, 14)
	})
}

// The detail of a pruned key says what is true of it: its outcome is gone,
// and neither the key nor its withdrawal is ever free again. It says
// nothing of when it was settled: an operator may prune at once.
func TestProblemForPrunedKey(t *testing.T) {
	p := idemhttp.ProblemFor(keyPruned(t))
	assert.Contains(t, p.Detail, "settled, then pruned by an operator")
	assert.Contains(t, p.Detail, "outcome is no longer kept")
	assert.Contains(t, p.Detail, "The key and its withdrawal stay claimed for ever")
	assert.NotContains(t, p.Detail, "long ago")
}

// A key in flight and a key awaiting an operator say different things: one
// runs and is worth coming back to, the other waits for an operator.
func TestProblemForInFlight(t *testing.T) {
	running := idemhttp.ProblemFor(keyInFlight(t))
	assert.Contains(t, running.Detail, "is running")
	assert.Contains(t, running.Detail, "after Retry-After")

	waiting := idemhttp.ProblemFor(awaitingOperator(t))
	for _, says := range []string{"ended without an answer", "the money may have moved", "No send is running",
		"this request sent nothing", "An operator must look at the payment rail", "a retry under it gets the outcome the operator recorded",
		"Never retry under a new key"} {
		assert.Contains(t, waiting.Detail, says)
	}
	assert.NotContains(t, waiting.Detail, "Retry-After")
	assert.NotEqual(t, running.Title, waiting.Title)
}

// An answer not recorded is told as it happened: the claim stands, or an
// operator resolved or released it while the rail answered.
func TestProblemForOutcomeNotRecorded(t *testing.T) {
	const stands = "The request key stays claimed until an operator"
	for _, make := range []ledgerError{notRecordedOtherWithdrawal, notRecordedNotExact, wrapped(notRecordedNotExact)} {
		assert.Contains(t, idemhttp.ProblemFor(make(t)).Detail, stands)
	}
	for _, make := range []ledgerError{notRecordedResolved, notRecordedResolvedPruned, wrapped(notRecordedResolved)} {
		p := idemhttp.ProblemFor(make(t))
		assert.Contains(t, p.Detail, "was resolved otherwise (by an operator, or another part of the service) while it was answering")
		assert.Contains(t, p.Detail, "the key's recorded outcome and the rail's answer disagree")
		assert.Contains(t, p.Detail, "Escalate")
		assert.NotContains(t, p.Detail, "stays claimed")
	}
	for _, make := range []ledgerError{notRecordedReleased, wrapped(notRecordedReleased)} {
		p := idemhttp.ProblemFor(make(t))
		assert.Contains(t, p.Detail, "an operator released this request key while it was answering")
		assert.Contains(t, p.Detail, "free again")
		assert.Contains(t, p.Detail, "an operator must look at the rail before the withdrawal is sent again")
		assert.NotContains(t, p.Detail, "stays claimed")
	}
}

func TestProblemForAnswer(t *testing.T) {
	answer := newWithdrawal("wd-1")
	answer.Status, answer.TxID = "sent", "0xfeed"

	t.Run("an answer not recorded is in the problem", func(t *testing.T) {
		for _, make := range []ledgerError{notRecordedOtherWithdrawal, notRecordedResolved, notRecordedReleased} {
			err := make(t)
			p := idemhttp.ProblemForAnswer(err, answer)
			assert.Equal(t, idemhttp.TypeOutcomeNotRecorded, p.Type)
			assert.JSONEq(t, `{"id":"wd-1","amount":"25.00","currency":"USDC","address":"0xabc","status":"sent","tx_id":"0xfeed"}`, string(p.Answer))
			assert.Equal(t, idemhttp.ProblemFor(err).Detail+" The rail's answer is in this problem's answer member.", p.Detail)

			rec := httptest.NewRecorder()
			idemhttp.WriteProblem(rec, p)
			var got map[string]any
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &got))
			assert.Equal(t, "0xfeed", got["answer"].(map[string]any)["tx_id"])
		}
	})
	t.Run("only there", func(t *testing.T) {
		for _, make := range []ledgerError{outcomeUnknown, awaitingOperator, notSent, keyReused} {
			err := make(t)
			assert.Equal(t, idemhttp.ProblemFor(err), idemhttp.ProblemForAnswer(err, answer))
		}
	})
	t.Run("an answer that is not JSON is left out", func(t *testing.T) {
		err := notRecordedReleased(t)
		assert.Equal(t, idemhttp.ProblemFor(err), idemhttp.ProblemForAnswer(err, func() {}))
	})
}

func TestWriteProblem(t *testing.T) {
	t.Run("503 gets Retry-After", func(t *testing.T) {
		rec := httptest.NewRecorder()
		idemhttp.WriteProblem(rec, idemhttp.Problem{Type: "urn:x", Title: "Down", Status: http.StatusServiceUnavailable})
		assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
		assert.Equal(t, "1", rec.Header().Get("Retry-After"))
		assert.JSONEq(t, `{"type":"urn:x","title":"Down","status":503}`, rec.Body.String())
	})
	t.Run("a Retry-After of the problem's own", func(t *testing.T) {
		problems := []idemhttp.Problem{idemhttp.ProblemFor(keyInFlight(t)), idemhttp.ProblemFor(storeFailed(t)),
			{Type: "urn:x", Title: "Slow down", Status: http.StatusTooManyRequests}}
		for after, want := range map[time.Duration]string{time.Nanosecond: "1", time.Second: "1", 1500 * time.Millisecond: "2",
			2 * time.Second: "2", time.Hour: "3600"} {
			for _, p := range problems {
				p.RetryAfter = after
				rec := httptest.NewRecorder()
				idemhttp.WriteProblem(rec, p)
				assert.Equal(t, []string{want}, rec.Header().Values("Retry-After"), "%v on a %d", after, p.Status)
				var got map[string]any
				require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &got))
				for member := range got {
					assert.Contains(t, []string{"type", "title", "status", "detail"}, member, "not in the body")
				}
			}
		}
	})
	t.Run("the members a problem has", func(t *testing.T) {
		rec := httptest.NewRecorder()
		idemhttp.WriteProblem(rec, idemhttp.Problem{Type: "urn:x", Title: "Odd", Status: 422, Answer: json.RawMessage(`{"a":1}`),
			Errors: []idemhttp.FieldError{{Pointer: "#/amount", Detail: "is missing"}}})
		assert.JSONEq(t, `{"type":"urn:x","title":"Odd","status":422,"answer":{"a":1},"errors":[{"pointer":"#/amount","detail":"is missing"}]}`, rec.Body.String())
	})
	t.Run("an answer that is not JSON is left out", func(t *testing.T) {
		rec := httptest.NewRecorder()
		idemhttp.WriteProblem(rec, idemhttp.Problem{Type: "urn:x", Title: "Odd", Status: 502, Answer: json.RawMessage(`{"a":`)})
		assert.Equal(t, 502, rec.Code)
		assert.JSONEq(t, `{"type":"urn:x","title":"Odd","status":502}`, rec.Body.String())
	})
	for status, want := range map[int]int{0: 500, 200: 500, 399: 500, 400: 400, 599: 599, 600: 500} {
		t.Run(fmt.Sprint("status ", status), func(t *testing.T) {
			rec := httptest.NewRecorder()
			idemhttp.WriteProblem(rec, idemhttp.Problem{Type: "urn:x", Title: "Odd", Status: status})
			assert.Equal(t, want, rec.Code)
			assert.JSONEq(t, fmt.Sprintf(`{"type":"urn:x","title":"Odd","status":%d}`, want), rec.Body.String())
		})
	}
}

func TestWriteJSON(t *testing.T) {
	for _, replayed := range []bool{false, true} {
		t.Run(fmt.Sprint("replayed ", replayed), func(t *testing.T) {
			rec := httptest.NewRecorder()
			idemhttp.WriteJSON(rec, http.StatusCreated, newWithdrawal("wd-1"), replayed)
			assert.Equal(t, http.StatusCreated, rec.Code)
			assert.Equal(t, "application/json", rec.Header().Get("Content-Type"))
			if replayed {
				assert.Equal(t, []string{"true"}, rec.Header().Values(idemhttp.ReplayedHeader))
			} else {
				assert.Empty(t, rec.Header().Values(idemhttp.ReplayedHeader))
			}
			assert.JSONEq(t, `{"id":"wd-1","amount":"25.00","currency":"USDC","address":"0xabc","status":"approved"}`, rec.Body.String())
		})
	}
	t.Run("unencodable is 500", func(t *testing.T) {
		rec := httptest.NewRecorder()
		idemhttp.WriteJSON(rec, http.StatusCreated, func() {}, false)
		assert.Equal(t, http.StatusInternalServerError, rec.Code)
		assert.Equal(t, "application/problem+json", rec.Header().Get("Content-Type"))
	})
}
