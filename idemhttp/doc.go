// Package idemhttp puts a submissions ledger behind HTTP: it reads the
// Idempotency-Key field of a request, runs the ledger, and writes the
// outcome as JSON or the error as an RFC 9457 problem (application/problem+json).
//
// # Responses
//
// Submit writes the outcome with the status its caller chooses, the same
// status and body for the first send and for every replay; a replay also
// carries "Idempotent-Replayed: true". ProblemFor maps the ledger's errors,
// found with errors.Is and errors.As, in this order:
//
//	error                         status  type (urn:submissions:problem:...)
//	ErrNotSent                    503     not-sent, Retry-After: 1
//	ErrOutcomeNotRecorded         502     outcome-not-recorded (with answer, from Submit)
//	ErrOutcomeUnknown             502     outcome-unknown
//	ErrInvalidKey (and Key's)     400     invalid-key
//	ErrInvalidTenant              400     invalid-tenant
//	ErrInvalidFingerprint         422     invalid-fingerprint
//	*ConflictError                409     withdrawal-claimed, with holder
//	ErrIdempotencyConflict        422     key-reused
//	ErrPruned                     410     key-pruned
//	ErrSubmissionInFlight and ErrAbandoned
//	                              409     awaiting-operator, no Retry-After
//	ErrSubmissionInFlight         409     key-in-flight, Retry-After: 1 (or the service's)
//	ErrStoreFailed                503     store-unavailable, Retry-After: 1
//	context.Canceled, .DeadlineExceeded
//	                              503     request-ended, Retry-After: 1
//	anything else                 500     internal
//
// ErrNotSent comes first because it wraps the send's own error, whatever
// that wraps: the rail said it moved nothing, the claim is released, and a
// retry under the same key may send again. A 502 means the money may have
// moved, and a client must not retry under a new key: the request key stays
// claimed until an operator looks at the rail and resolves or releases it,
// unless an operator resolved or released it while the rail answered (the
// detail of outcome-not-recorded says which). An answer not recorded is
// never dropped at the door: Submit puts its JSON in the problem's answer
// member (ProblemForAnswer). A 409 key-in-flight is a send that runs (or
// has not been seen to end): its Retry-After says when to come back, one
// second unless the service says better (SubmitOptions.RetryAfter, from its
// rail's time to answer). A 409 awaiting-operator is a send that ended
// without an answer: no send runs, nothing changes until an operator acts,
// so it has no Retry-After; it is a 409, as a key in flight is, so that a
// client that reads only the status still keeps to the key, and neither
// the client nor anything between retries it as it would a 5xx. A 410
// means the key's outcome was pruned: the key and its withdrawal stay
// claimed for ever.
//
// The detail of a problem is a fixed sentence per type (outcome-not-recorded
// has one for each of its three cases), never an error's text, so nothing
// internal leaks; the exceptions are the errors of Key, which say what is
// wrong with the field, and withdrawal-claimed, which names the holding key
// (also in the holder member). A service that checks a request itself may
// list the fields at fault in the errors member, each with a JSON Pointer and
// what is wrong with it (Problem.Errors), under the fixed detail of its type.
//
// # Keys
//
// The Idempotency-Key field is one field line whose value, without the
// spaces and tabs around it, is either
//
//   - an RFC 8941 sf-string: a quote, then characters 0x20-0x7E with a quote
//     or backslash only as \" or \\, then the closing quote, ending the
//     value; the key is what is between the quotes, unescaped; or
//   - a bare key, as most clients send it: one or more of the RFC 9110 tchar
//     characters (letters, digits and !#$%&'*+-.^_`|~), ":" and "/", taken
//     as it is.
//
// Spaces at either end of a key are dropped, as the ledger drops them, so
// " k " and "k" are one key. The key must be 1 to driver.MaxKeyLen bytes,
// and the field value at most MaxFieldLen bytes. Everything else is refused
// with an error wrapping submissions.ErrInvalidKey: no field
// (ErrKeyMissing), more than one field line (ErrKeyRepeated), a comma outside
// the string (ErrKeyList), an empty value or key (ErrKeyEmpty), too long
// (ErrKeyTooLong), and ErrKeyMalformed for an unterminated string, a bad
// escape, a control or non-ASCII character, or anything after the key. RFC
// 8941 parameters (";name=value") are refused too: the draft defines none,
// and ignoring them would make the bare keys "a;b" and "a;c" one key.
//
// # In one transaction
//
// InTx is a handler for a service whose work is a write in its own
// database: the writes, the request's key and the response commit in one
// transaction (pgstore.Submit runs it), and a retry gets the kept status
// and body. A retry that comes while the first request's transaction is
// still open waits for it to end, as long as its own request lasts.
//
// # Example
//
//	func withdraw(w http.ResponseWriter, r *http.Request) {
//		wd, err := loadApprovedWithdrawal(r) // the service's own withdrawal
//		if err != nil {
//			idemhttp.WriteError(w, err)
//			return
//		}
//		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 30*time.Second)
//		defer cancel()
//		if _, err := idemhttp.Submit(ctx, w, r, ledger, http.StatusCreated, wd, send); err != nil {
//			alertIfMoneyMayHaveMoved(err)
//		}
//	}
package idemhttp
