package idemhttp

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/idemledger/submissions"
)

// Submit reads r's key, runs ledger.SubmitOrReplay(ctx, key, req, send) and
// writes the outcome as JSON with status (the first send and every replay
// get the same status and body; replays carry Idempotent-Replayed: true),
// or the problem of the error (ProblemForAnswer: an answer not recorded is
// in it). It returns what SubmitOrReplay returned (or the key error). ctx
// governs the ledger call: a service may pass
// context.WithoutCancel(r.Context()) with its own timeout so a client
// hanging up does not cut a send short.
func Submit[R submissions.Fingerprinter](ctx context.Context, w http.ResponseWriter, r *http.Request,
	ledger *submissions.Submissions[R], status int, req R, send func(context.Context, R) (R, error)) (R, error) {
	return SubmitWith(ctx, w, r, ledger, status, req, send, SubmitOptions{})
}

// SubmitWaiting is SubmitWith(ctx, w, r, ledger, status, req, send,
// SubmitOptions{Wait: wait}).
func SubmitWaiting[R submissions.Fingerprinter](ctx context.Context, w http.ResponseWriter, r *http.Request,
	ledger *submissions.Submissions[R], status int, req R, send func(context.Context, R) (R, error), wait time.Duration) (R, error) {
	return SubmitWith(ctx, w, r, ledger, status, req, send, SubmitOptions{Wait: wait})
}

// SubmitOptions are what SubmitWith does beyond Submit. The zero value is
// Submit.
type SubmitOptions struct {
	// Wait is how long a request that finds its key's send running waits
	// (while ctx lasts) for the key's outcome before it answers; 0 or less
	// answers at once.
	Wait time.Duration
	// RetryAfter is the Retry-After of the 409 of a key whose send is
	// running: when its outcome is likely known, such as the rail's usual
	// time to answer. It is rounded up to whole seconds; 0 or less is
	// RetryAfter, one second.
	RetryAfter time.Duration
}

// SubmitWith is Submit with opts. For a key whose send is running, it waits
// up to opts.Wait for the key's outcome with ledger.Wait before it answers.
// An outcome that comes in time is written as a replay: status, the same
// body, Idempotent-Replayed: true, and returned with a nil error. A send
// that ends without an outcome is the problem of ErrOutcomeUnknown (502),
// returned. Otherwise (the wait ran out, or the key was released: its send
// moved nothing, or an operator released it) it writes and returns
// ErrSubmissionInFlight's problem (409, with a Retry-After of
// opts.RetryAfter), as Submit does: the client's retry, with a send's full
// time, sends if the key is free. A key whose send ended without an answer
// is not waited for: its 409 awaiting-operator comes at once.
func SubmitWith[R submissions.Fingerprinter](ctx context.Context, w http.ResponseWriter, r *http.Request,
	ledger *submissions.Submissions[R], status int, req R, send func(context.Context, R) (R, error), opts SubmitOptions) (R, error) {
	key, err := Key(r.Header)
	if err != nil {
		WriteError(w, err)
		var zero R
		return zero, err
	}
	out, replayed, err := ledger.SubmitOrReplay(ctx, key, req, send)
	if opts.Wait > 0 && errors.Is(err, submissions.ErrSubmissionInFlight) && !errors.Is(err, submissions.ErrAbandoned) {
		wctx, cancel := context.WithTimeout(ctx, opts.Wait)
		waited, werr := ledger.Wait(wctx, key)
		cancel()
		switch {
		case werr == nil:
			out, replayed, err = waited, true, nil
		case errors.Is(werr, submissions.ErrOutcomeUnknown):
			err = werr
		}
	}
	if err != nil {
		p := ProblemForAnswer(err, out)
		if p.Type == TypeKeyInFlight {
			p.RetryAfter = opts.RetryAfter
		}
		WriteProblem(w, p)
		return out, err
	}
	WriteJSON(w, status, out, replayed)
	return out, nil
}
