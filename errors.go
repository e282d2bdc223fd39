package submissions

import "github.com/idemledger/submissions/driver"

// The errors of a ledger, in three classes by what the caller may do next.
// Refused, nothing sent by this call: ErrInvalidTenant, ErrInvalidKey,
// ErrInvalidFingerprint, ErrIdempotencyConflict (and *ConflictError),
// ErrSubmissionInFlight, ErrPruned, ErrNotSent, and for Wait ErrUnknownKey. Failed
// before sending: ErrStoreFailed. Money may have moved: ErrOutcomeUnknown
// and ErrOutcomeNotRecorded.
var (
	// ErrInvalidKey: the request key is empty after trimming white space,
	// longer than 255 bytes, not valid UTF-8, or holds a NUL byte. Nothing
	// was read, claimed or sent.
	ErrInvalidKey = driver.ErrInvalidKey

	// ErrInvalidTenant: a tenant id given to Tenant is longer than 64
	// bytes, not valid UTF-8, or holds a NUL byte. Every method of that
	// view returns it; nothing was read, claimed or sent.
	ErrInvalidTenant = driver.ErrInvalidTenant

	// ErrInvalidFingerprint: a Fingerprint breaks the rules documented on
	// Fingerprint, or the request or outcome is a nil pointer. Nothing was
	// claimed or sent.
	ErrInvalidFingerprint = driver.ErrInvalidFingerprint

	// ErrIdempotencyConflict: the call contradicts what the ledger holds: a
	// request key reused for another withdrawal, a withdrawal claimed by
	// another key (a *ConflictError), an outcome other than the one recorded,
	// or a Release of a key that has an outcome. This call sent nothing;
	// retrying it gets the same answer.
	ErrIdempotencyConflict = driver.ErrIdempotencyConflict

	// ErrSubmissionInFlight: the request key is claimed and its outcome is
	// not known: its send is running, or ended without a recorded answer.
	// This call sent nothing. Retry later, or Wait for the outcome; an
	// operator closes a key left in flight with Resolve or Release.
	ErrSubmissionInFlight = driver.ErrSubmissionInFlight

	// ErrAbandoned: wrapped together with ErrSubmissionInFlight when the
	// key's send ended without a recorded answer (ErrOutcomeUnknown or
	// ErrOutcomeNotRecorded to its caller). No send runs under the claim
	// and none will: the key stays in flight until an operator looks at the
	// rail, then resolves or releases it. This call sent nothing; retrying
	// sooner gets the same answer.
	ErrAbandoned = driver.ErrAbandoned

	// ErrUnknownKey: Wait's key has no claim: it was never claimed, or it
	// was released (before or while Wait waited). This call sent nothing. A
	// Submit under the key claims it afresh.
	ErrUnknownKey = driver.ErrUnknownKey

	// ErrPruned: the request key's record, or the record of the key that
	// claims the withdrawal, was settled and then pruned by an operator: its
	// outcome is no longer kept, and the key and the withdrawal stay claimed
	// for ever. This call sent nothing, and no call ever will for them: a
	// Submit of the key, or of another key for the withdrawal (a
	// *ConflictError with Pruned set), is refused, as are Resolve and
	// Release of the key, and Outcome cannot replay it. Look at the rail, or
	// the service's own records, for what was sent.
	ErrPruned = driver.ErrPruned

	// ErrStoreFailed: the store failed or could not be reached, and this call
	// sent nothing. A write it was making may or may not stand: a Submit
	// retried may find its key in flight, claimed by this call under a reply
	// the store lost (an operator may Release it: this call sent nothing),
	// and a Resolve or Release retried tells which.
	ErrStoreFailed = driver.ErrStoreFailed

	// ErrNotSent: send returned an error wrapping it, the rail's word that
	// nothing moved (a transient failure before the transfer began, not a
	// refusal the rail keeps: that is an outcome, to return as one), or
	// the context ended as the key was claimed, and send was not called
	// (the error wraps the context's). The claim was released in the same
	// step that ended the send, unless it was resolved or released
	// otherwise while send ran (the error says which), and the error wraps
	// send's too. A retry under the same key may send again.
	ErrNotSent = driver.ErrNotSent

	// ErrOutcomeUnknown: send ended without an answer (an error, or a nil
	// answer; a send that panics panics on, with the same meaning), so the
	// money may have moved. The key stays claimed: do not retry under a new
	// key; an operator looks at the rail, then calls Resolve with what was
	// sent, or Release if nothing was.
	ErrOutcomeUnknown = driver.ErrOutcomeUnknown

	// ErrOutcomeNotRecorded: send answered, Submit returns the answer with
	// this error, and the answer was not recorded (a key still claimed is
	// then marked answered, on a store that records it, and no door releases
	// it): it is for another withdrawal (the error names the fields that differ), no
	// store could give it back as it is (text that is not UTF-8, say: see
	// docs/rules.md), the store failed while recording it (it may stand all
	// the same; a store that was only unavailable, during a failover say,
	// is tried again until the context ends, and an answer is recorded
	// within 100 ms past the context's end), or the key was released or
	// resolved otherwise while send ran. Resolve returns it, writing nothing, for an outcome that no store
	// could give back as it is. The money may have
	// moved: escalate, never retry under a new key. An answer of the
	// request's own withdrawal may be recorded with Resolve, unless the key
	// was released or resolved meanwhile.
	ErrOutcomeNotRecorded = driver.ErrOutcomeNotRecorded

	// ErrResolvedMeanwhile: wrapped with ErrOutcomeNotRecorded when the
	// key's claim was resolved otherwise (an operator, a reconciler, the
	// service's own Resolve) with another outcome while send ran, and
	// perhaps pruned since: the key's outcome and the rail's answer
	// disagree. The answer, returned with the error, is logged at Error and
	// given to the observer. Wrapped with ErrNotSent instead when send said
	// it moved nothing: then there is no answer to keep.
	ErrResolvedMeanwhile = driver.ErrResolvedMeanwhile

	// ErrReleasedMeanwhile: wrapped with ErrOutcomeNotRecorded when the
	// key's claim was released while send ran: the key and the withdrawal
	// are free, though the rail answered. The answer, returned with the
	// error, is logged at Error and given to the observer: an operator must
	// see it before the withdrawal is sent again. Wrapped with ErrNotSent
	// instead when send said it moved nothing: then there is no answer.
	ErrReleasedMeanwhile = driver.ErrReleasedMeanwhile
)

// ConflictError reports that a withdrawal is already claimed by another
// request key, and names that key (Holder), so that the refused caller can
// look the withdrawal up (Outcome(ctx, Holder)) instead of guessing. Its
// fields are Tenant, Holder, Key (the key refused), WithdrawalID and Pruned
// (the holder's record was pruned).
//
// errors.Is(err, ErrIdempotencyConflict) is true for a *ConflictError, and
// errors.Is(err, ErrPruned) too when Pruned is set.
type ConflictError = driver.ConflictError
