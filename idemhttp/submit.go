package idemhttp

import (
	"context"
	"net/http"

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
	key, err := Key(r.Header)
	if err != nil {
		WriteError(w, err)
		var zero R
		return zero, err
	}
	out, replayed, err := ledger.SubmitOrReplay(ctx, key, req, send)
	if err != nil {
		WriteError(w, err)
		return out, err
	}
	WriteJSON(w, status, out, replayed)
	return out, nil
}
