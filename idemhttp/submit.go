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
// or the problem of the error. It returns what SubmitOrReplay returned (or
// the key error). ctx governs the ledger call: a service may pass
// context.WithoutCancel(r.Context()) with its own timeout so a client
// hanging up does not cut a send short.
func Submit[R submissions.Fingerprinter](ctx context.Context, w http.ResponseWriter, r *http.Request,
	ledger *submissions.Submissions[R], status int, req R, send func(context.Context, R) (R, error)) (R, error) {
	return SubmitWaiting(ctx, w, r, ledger, status, req, send, 0)
}

// SubmitWaiting is Submit that waits, for a key in flight, up to wait (and
// while ctx lasts) for the key's outcome with ledger.Wait before it answers.
// An outcome that comes in time is written as a replay: status, the same
// body, Idempotent-Replayed: true, and returned with a nil error. A send
// that ends without an outcome is the problem of ErrOutcomeUnknown (502),
// returned. Otherwise (the wait ran out, or the key was released: its send
// moved nothing, or an operator released it) it writes and returns
// ErrSubmissionInFlight's problem (409, Retry-After), as Submit does: the
// client's retry, with a send's full time, sends if the key is free. A wait
// of 0 or less is Submit.
func SubmitWaiting[R submissions.Fingerprinter](ctx context.Context, w http.ResponseWriter, r *http.Request,
	ledger *submissions.Submissions[R], status int, req R, send func(context.Context, R) (R, error), wait time.Duration) (R, error) {
	key, err := Key(r.Header)
	if err != nil {
		WriteError(w, err)
		var zero R
		return zero, err
	}
	out, replayed, err := ledger.SubmitOrReplay(ctx, key, req, send)
	if wait > 0 && errors.Is(err, submissions.ErrSubmissionInFlight) {
		wctx, cancel := context.WithTimeout(ctx, wait)
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
		WriteError(w, err)
		return out, err
	}
	WriteJSON(w, status, out, replayed)
	return out, nil
}
