package idemhttp

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/idemledger/submissions"
)

// The type URIs of the problems ProblemFor returns, one for each class of
// error.
const (
	TypeInvalidKey         = "urn:submissions:problem:invalid-key"
	TypeInvalidTenant      = "urn:submissions:problem:invalid-tenant"
	TypeInvalidFingerprint = "urn:submissions:problem:invalid-fingerprint"
	TypeWithdrawalClaimed  = "urn:submissions:problem:withdrawal-claimed"
	TypeKeyReused          = "urn:submissions:problem:key-reused"
	TypeKeyInFlight        = "urn:submissions:problem:key-in-flight"
	TypeAwaitingOperator   = "urn:submissions:problem:awaiting-operator"
	TypeKeyPruned          = "urn:submissions:problem:key-pruned"
	TypeNotSent            = "urn:submissions:problem:not-sent"
	TypeOutcomeUnknown     = "urn:submissions:problem:outcome-unknown"
	TypeOutcomeNotRecorded = "urn:submissions:problem:outcome-not-recorded"
	TypeStoreUnavailable   = "urn:submissions:problem:store-unavailable"
	TypeRequestEnded       = "urn:submissions:problem:request-ended"
	TypeInternal           = "urn:submissions:problem:internal"
)

// RetryAfter is the Retry-After value, in seconds, of WriteProblem's 503
// responses (a store unavailable, a request ended, a send the rail said it
// moved nothing for) and of a key in flight, unless the Problem sets its
// own.
const RetryAfter = "1"

// Problem is an RFC 9457 problem details object.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	Holder string `json:"holder,omitempty"` // the request key holding the withdrawal, on a 409 for a withdrawal claimed by another key
	// Answer is the JSON of the rail's answer that the ledger did not
	// record, on a 502 outcome-not-recorded (see ProblemForAnswer).
	Answer json.RawMessage `json:"answer,omitempty"`
	// Errors lists the fields of the request at fault, when the service
	// names them (on an invalid-fingerprint problem, say).
	Errors []FieldError `json:"errors,omitempty"`
	// RetryAfter, when positive, is the Retry-After WriteProblem writes,
	// rounded up to whole seconds, whatever the status. It is not in the
	// body.
	RetryAfter time.Duration `json:"-"`
}

// Error returns p's title and detail. It makes a *Problem an error, with
// which a Writer of InTx refuses a request: the transaction rolls back, the
// key included, and InTx writes p.
func (p *Problem) Error() string {
	if p.Detail == "" {
		return p.Title
	}
	return p.Title + ": " + p.Detail
}

// FieldError is one field of a request that is not valid, as the errors
// member of a problem lists it (the shape RFC 9457 shows).
type FieldError struct {
	Pointer string `json:"pointer"` // a JSON Pointer to the field in the request body, as a URI fragment: "#/amount"
	Detail  string `json:"detail"`  // what is wrong with it, for the client: "is missing"
}

// The problems of each class, as ProblemFor returns them.
var (
	problemInvalidKey = Problem{Type: TypeInvalidKey, Title: "Invalid idempotency key", Status: http.StatusBadRequest,
		Detail: "The request key is not valid."}
	problemInvalidTenant = Problem{Type: TypeInvalidTenant, Title: "Invalid tenant", Status: http.StatusBadRequest,
		Detail: "The tenant is not valid."}
	problemInvalidFingerprint = Problem{Type: TypeInvalidFingerprint, Title: "Invalid withdrawal", Status: http.StatusUnprocessableEntity,
		Detail: "The withdrawal's id, amount, currency or destination is not valid."}
	problemWithdrawalClaimed = Problem{Type: TypeWithdrawalClaimed, Title: "Withdrawal claimed by another key", Status: http.StatusConflict}
	problemKeyReused         = Problem{Type: TypeKeyReused, Title: "Idempotency key reused", Status: http.StatusUnprocessableEntity,
		Detail: "The request key belongs to another withdrawal."}
	problemKeyInFlight = Problem{Type: TypeKeyInFlight, Title: "Request in flight", Status: http.StatusConflict,
		Detail: "A send under this request key is running, or has not been seen to end, and this request sent nothing. Retry under the same key after Retry-After to get its outcome; never retry under a new key."}
	problemAwaitingOperator = Problem{Type: TypeAwaitingOperator, Title: "Awaiting an operator", Status: http.StatusConflict,
		Detail: "The send under this request key ended without an answer: the money may have moved. No send is running, and this request sent nothing. An operator must look at the payment rail, then resolve or release the key; until then every retry gets this answer. Once the key is resolved, a retry under it gets the outcome the operator recorded; once released, a retry under it sends. Never retry under a new key."}
	problemKeyPruned = Problem{Type: TypeKeyPruned, Title: "Request key pruned", Status: http.StatusGone,
		Detail: "The request under this key was settled, then pruned by an operator: its outcome is no longer kept, and this request sent nothing. The key and its withdrawal stay claimed for ever: the withdrawal is never sent again, under this key or any other."}
	problemNotSent = Problem{Type: TypeNotSent, Title: "Not sent", Status: http.StatusServiceUnavailable,
		Detail: "The payment rail moved nothing for this request. Retry the same request, under the same key: it sends again, or gets the outcome an operator recorded meanwhile. Never retry under a new key."}
	problemOutcomeUnknown = Problem{Type: TypeOutcomeUnknown, Title: "Outcome unknown", Status: http.StatusBadGateway,
		Detail: "The payment rail gave no answer: the money may have moved. The request key stays claimed until an operator looks at the rail, then resolves or releases it. Do not retry under a new key."}
	problemOutcomeNotRecorded = Problem{Type: TypeOutcomeNotRecorded, Title: "Outcome not recorded", Status: http.StatusBadGateway,
		Detail: "The payment rail answered, but the answer was not recorded: the money may have moved. The request key stays claimed until an operator looks at the rail, then resolves or releases it. Do not retry under a new key."}
	problemResolvedMeanwhile = Problem{Type: TypeOutcomeNotRecorded, Title: "Outcome not recorded", Status: http.StatusBadGateway,
		Detail: "The payment rail answered, but this request key was resolved otherwise (by an operator, or another part of the service) while it was answering, with an outcome other than the rail's answer: the key's recorded outcome and the rail's answer disagree, and the money may have moved. Escalate: do not act on either until an operator has looked at the rail. Never retry under a new key."}
	problemReleasedMeanwhile = Problem{Type: TypeOutcomeNotRecorded, Title: "Outcome not recorded", Status: http.StatusBadGateway,
		Detail: "The payment rail answered, but an operator released this request key while it was answering: the rail's answer was not recorded, and the key and its withdrawal are free again. The money may have moved: an operator must look at the rail before the withdrawal is sent again. Do not retry, under this key or a new one, until then."}
	problemStoreUnavailable = Problem{Type: TypeStoreUnavailable, Title: "Store unavailable", Status: http.StatusServiceUnavailable,
		Detail: "This request sent nothing. Retry the same request later."}
	problemRequestEnded = Problem{Type: TypeRequestEnded, Title: "Request ended", Status: http.StatusServiceUnavailable,
		Detail: "The request ended before it was claimed, and sent nothing. Retry the same request."}
	problemInternal = Problem{Type: TypeInternal, Title: "Internal error", Status: http.StatusInternalServerError,
		Detail: "The request failed."}
)

// answerSentence ends the detail of an outcome-not-recorded problem that
// carries the rail's answer.
const answerSentence = " The rail's answer is in this problem's answer member."

// ProblemFor returns the problem that reports err to a client, by the class
// of ledger error err is or wraps; any other error, and nil, is a 500. The
// detail is fixed per class, never err's text, but for the errors of Key
// (which say what is wrong with the field) and the holder of a
// *submissions.ConflictError. ErrNotSent comes first: it wraps the send's
// own error, which may wrap anything (a rail's timeout, another ledger's
// error) without changing what happened.
func ProblemFor(err error) Problem {
	switch {
	case errors.Is(err, submissions.ErrNotSent):
		return problemNotSent
	case errors.Is(err, submissions.ErrOutcomeNotRecorded):
		switch {
		case errors.Is(err, submissions.ErrResolvedMeanwhile):
			return problemResolvedMeanwhile
		case errors.Is(err, submissions.ErrReleasedMeanwhile):
			return problemReleasedMeanwhile
		}
		return problemOutcomeNotRecorded
	case errors.Is(err, submissions.ErrOutcomeUnknown):
		return problemOutcomeUnknown
	case errors.Is(err, submissions.ErrInvalidKey):
		p := problemInvalidKey
		if msg, ok := keyMessage(err); ok {
			p.Detail = msg + "."
		}
		return p
	case errors.Is(err, submissions.ErrInvalidTenant):
		return problemInvalidTenant
	case errors.Is(err, submissions.ErrInvalidFingerprint):
		return problemInvalidFingerprint
	case errors.Is(err, submissions.ErrIdempotencyConflict):
		if ce, ok := errors.AsType[*submissions.ConflictError](err); ok {
			p := problemWithdrawalClaimed
			p.Holder = ce.Holder
			p.Detail = "The withdrawal is claimed by request key " + ce.Holder + "."
			return p
		}
		return problemKeyReused
	case errors.Is(err, submissions.ErrPruned):
		return problemKeyPruned
	case errors.Is(err, submissions.ErrSubmissionInFlight):
		if errors.Is(err, submissions.ErrAbandoned) {
			return problemAwaitingOperator
		}
		return problemKeyInFlight
	case errors.Is(err, submissions.ErrStoreFailed):
		return problemStoreUnavailable
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return problemRequestEnded
	}
	return problemInternal
}

// ProblemForAnswer is ProblemFor(err), with answer, the rail's answer that
// came back with err, as the JSON of its answer member when err wraps
// submissions.ErrOutcomeNotRecorded, and its detail saying so. Any other
// problem is ProblemFor's, as is one whose answer cannot be encoded.
func ProblemForAnswer(err error, answer any) Problem {
	p := ProblemFor(err)
	if p.Type != TypeOutcomeNotRecorded {
		return p
	}
	if body, jerr := json.Marshal(answer); jerr == nil {
		p.Answer = body
		p.Detail += answerSentence
	}
	return p
}

// WriteProblem writes p as application/problem+json with p.Status, and a
// Retry-After of p.RetryAfter, or else of RetryAfter seconds on a 503 and on
// a key in flight. A status that is not an error (outside 400-599) is
// written as 500. An Answer that is not valid JSON is left out.
func WriteProblem(w http.ResponseWriter, p Problem) {
	if p.Status < 400 || p.Status > 599 {
		p.Status = http.StatusInternalServerError
	}
	body, err := json.Marshal(p)
	if err != nil { // only an Answer that is not JSON fails
		p.Answer = nil
		body, err = json.Marshal(p)
	}
	if err != nil { // a Problem of strings and an int always encodes
		panic(err)
	}
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	switch {
	case p.RetryAfter > 0:
		secs := p.RetryAfter / time.Second
		if p.RetryAfter%time.Second != 0 {
			secs++
		}
		h.Set("Retry-After", strconv.FormatInt(int64(secs), 10))
	case p.Status == http.StatusServiceUnavailable || p.Type == TypeKeyInFlight:
		h.Set("Retry-After", RetryAfter)
	}
	w.WriteHeader(p.Status)
	_, _ = w.Write(append(body, '\n'))
}

// WriteError writes the problem of err: WriteProblem(w, ProblemFor(err)).
func WriteError(w http.ResponseWriter, err error) {
	WriteProblem(w, ProblemFor(err))
}

// WriteJSON writes v as application/json with status, and
// "Idempotent-Replayed: true" when replayed. If v cannot be encoded, it
// writes the 500 problem instead.
func WriteJSON(w http.ResponseWriter, status int, v any, replayed bool) {
	body, err := json.Marshal(v)
	if err != nil {
		WriteProblem(w, problemInternal)
		return
	}
	writeBody(w, status, body, replayed)
}

// writeBody writes body, JSON, as WriteJSON does.
func writeBody(w http.ResponseWriter, status int, body []byte, replayed bool) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	if replayed {
		h.Set(ReplayedHeader, "true")
	}
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}
