package idemhttp

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"unicode/utf8"

	"github.com/idemledger/submissions"
)

// An Exchange is one request under an idempotency key and the response it
// got: the outcome that a handler of InTx keeps for the key, and replays.
type Exchange struct {
	// Request is the request's fingerprint, as RequestFingerprint makes it.
	Request submissions.Fingerprint `json:"request"`
	// Status and Body are the response: its status and its JSON body.
	Status int             `json:"status"`
	Body   json.RawMessage `json:"body"`
}

// Fingerprint returns e.Request, so that an Exchange is its own withdrawal
// to a ledger.
func (e Exchange) Fingerprint() submissions.Fingerprint { return e.Request }

// A Transactor runs work in one transaction together with tenant's claim of
// key and the outcome work returns, commits it, and returns the outcome and
// whether it was replayed: pgstore.Submit, bound to its Store, is one. A
// key another request holds in a transaction still open is waited for.
type Transactor[T any] func(ctx context.Context, tenant, key string, req Exchange,
	work func(ctx context.Context, tx T, req Exchange) (Exchange, error)) (out Exchange, replayed bool, err error)

// A Writer makes a request's writes in tx, the transaction of its key, and
// returns the response to keep and send: its status (200 to 599) and what
// to encode as its JSON body. A response is kept whatever its status. An
// error rolls the transaction back, key included, and is written: a
// *Problem as it is (a refusal that leaves the key free), any other as
// ProblemFor's problem (a 500 but for the ledger's errors), as are a status
// out of that range and a body that cannot be encoded.
type Writer[T any] func(ctx context.Context, tx T, r *http.Request, body []byte) (status int, resp any, err error)

// MaxBody is the most bytes of a request body that InTx reads.
const MaxBody = 1 << 20

// TypeBodyTooLarge is the type URI of the 413 problem InTx writes for a body
// of more than MaxBody bytes.
const TypeBodyTooLarge = "urn:submissions:problem:body-too-large"

var (
	problemBodyTooLarge = Problem{Type: TypeBodyTooLarge, Title: "Request body too large", Status: http.StatusRequestEntityTooLarge,
		Detail: "The request body is over 1 MiB. This request wrote nothing."}
	problemRequestReused = Problem{Type: TypeKeyReused, Title: "Idempotency key reused", Status: http.StatusUnprocessableEntity,
		Detail: "The request key was used before for a request with another method, path, query or body. This request wrote nothing."}
)

// InTx returns a handler whose writes and the request's key commit in one
// transaction: it reads r's Idempotency-Key and body, runs write through
// run with the request's fingerprint (RequestFingerprint), and writes the
// response write returned. A retry of the request gets the same status and
// body, with Idempotent-Replayed: true; the same key with another method,
// path, query or body gets a 422 key-reused problem, write not called. A retry
// that comes while the first is still in its transaction waits for it, for
// as long as r's context lasts: its answer is known as soon as that
// transaction ends (a replay if it committed; if it rolled back, the retry
// writes). tenant names r's tenant; nil is the default tenant.
func InTx[T any](run Transactor[T], tenant func(*http.Request) string, write Writer[T]) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, err := Key(r.Header)
		if err != nil {
			WriteError(w, err)
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBody))
		if err != nil {
			if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
				WriteProblem(w, problemBodyTooLarge)
				return
			}
			WriteError(w, err)
			return
		}
		var t string
		if tenant != nil {
			t = tenant(r)
		}
		req := Exchange{Request: RequestFingerprint(key, r, body)}
		out, replayed, err := run(r.Context(), t, key, req, func(ctx context.Context, tx T, req Exchange) (Exchange, error) {
			status, resp, err := write(ctx, tx, r, body)
			switch {
			case err != nil:
				return Exchange{}, err
			case status < 200 || status > 599:
				return Exchange{}, fmt.Errorf("idemhttp: a Writer answered status %d", status)
			}
			b, err := json.Marshal(resp)
			if err != nil {
				return Exchange{}, err
			}
			return Exchange{Request: req.Request, Status: status, Body: b}, nil
		})
		if err != nil {
			p := ProblemFor(err)
			if refusal, ok := errors.AsType[*Problem](err); ok {
				p = *refusal
			} else if p.Type == TypeKeyReused {
				p = problemRequestReused
			}
			WriteProblem(w, p)
			return
		}
		writeBody(w, out.Status, bytes.Clone(out.Body), replayed)
	})
}

// RequestFingerprint is the fingerprint InTx gives r, under key, with its
// body: key itself is the withdrawal id (each key is its own), and the
// destination is "sha256:" and the hex SHA-256 of r's method, path, query
// (its parameters sorted) and body. A JSON body is hashed as its decoded
// value re-encoded, object members sorted, no spaces, numbers as written
// (so "1.0" is not "1"); any other body, or one not valid UTF-8, as its
// bytes. Amount and currency
// are fixed ("1", "REQ").
func RequestFingerprint(key string, r *http.Request, body []byte) submissions.Fingerprint {
	h := sha256.New()
	target := r.Method + " " + r.URL.Path
	if q := r.URL.Query(); len(q) != 0 {
		target += "?" + q.Encode()
	}
	_, _ = io.WriteString(h, target+"\n")
	_, _ = h.Write(canonicalBody(body))
	return submissions.Fingerprint{WithdrawalID: key, Amount: "1", Currency: "REQ", Destination: "sha256:" + hex.EncodeToString(h.Sum(nil))}
}

// canonicalBody is body as JSON re-encoded, members sorted, numbers as
// written, or body itself when it is not one JSON value or is not valid
// UTF-8 (which decoding would make U+FFFD, so that two bodies became one).
func canonicalBody(body []byte) []byte {
	if !utf8.Valid(body) {
		return body
	}
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	var v any
	if d.Decode(&v) != nil || d.More() {
		return body
	}
	if _, err := d.Token(); err != io.EOF {
		return body
	}
	b, err := json.Marshal(v)
	if err != nil {
		return body
	}
	return b
}
