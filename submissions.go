package submissions

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
)

// Submissions is a submission ledger: it calls a service's send function at
// most once per withdrawal, however many callers ask and under however many
// request keys. It keeps two indexes in memory behind one mutex: request key
// to record (fingerprint and, once known, outcome) and withdrawal id to the
// key that claimed it. Its guarantees hold within one process.
//
// A Submissions is safe for concurrent use by multiple goroutines; send runs
// outside its lock, so different withdrawals are sent in parallel. The ledger
// keeps the requests and outcomes it is given as they are: with a pointer or
// reference type for R, callers must not change them afterwards.
//
// The zero value is an empty ledger that logs to slog.Default(). A Submissions
// must not be copied after first use.
type Submissions[R Fingerprinter] struct {
	log *slog.Logger // nil means slog.Default()

	mu      sync.Mutex            // protects records and claims
	records map[string]*record[R] // request key -> record
	claims  claims                // withdrawal id -> request key
}

// record is what the ledger knows about one request key.
type record[R Fingerprinter] struct {
	fp      Fingerprint // canonical; set before the record is shared, never changed
	outcome R           // meaningful only when done; never changed once done
	done    bool        // the outcome is known
	sending bool        // this ledger is running the key's send
}

// New returns an empty in-memory ledger.
func New[R Fingerprinter](opts ...Option) *Submissions[R] {
	return &Submissions[R]{log: buildOptions(opts).logger}
}

// Submit sends req at most once for key and returns the outcome.
//
// The key is trimmed of surrounding white space and checked first
// (ErrInvalidKey); then a ctx already done returns ctx.Err(), and a fingerprint
// that is not valid returns ErrInvalidFingerprint, both claiming nothing. Then,
// in one step under the ledger's lock:
//
//   - a key already recorded with the same fingerprint and a known outcome
//     replays that outcome without calling send, and logs it at Info;
//   - a key recorded with another fingerprint is refused with
//     ErrIdempotencyConflict;
//   - a key recorded without a known outcome is refused with
//     ErrSubmissionInFlight;
//   - a new key for a withdrawal that another key claims is refused with a
//     *ConflictError naming the holder, and leaves no trace;
//   - otherwise the key is recorded and the withdrawal claimed for it.
//
// Having claimed, Submit calls send(ctx, req) outside the lock (a nil send
// records req itself as the outcome) and records the outcome it returns. If
// send returns an error, panics, or returns after ctx has ended, or returns an
// outcome with another fingerprint, the key stays claimed with no outcome,
// because the money may already be moving: a retry under the same key gets
// ErrSubmissionInFlight and another key a *ConflictError until Resolve or
// Release closes it. The returned error wraps send's error, or ctx's; a panic
// continues with its own value. Each of these is logged at Warn with the key
// and the withdrawal.
//
// On every refusal or failure Submit returns the zero R.
func (s *Submissions[R]) Submit(ctx context.Context, key string, req R,
	send func(ctx context.Context, req R) (R, error)) (R, error) {
	var zero R
	key, err := validKey(key)
	if err != nil {
		return zero, err
	}
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	fp := req.Fingerprint()
	if err := normalize(&fp); err != nil {
		return zero, err
	}
	rec, claimed, err := s.claim(key, &fp)
	switch {
	case err != nil:
		return zero, err
	case claimed:
		return s.send(ctx, key, rec, req, send)
	}
	s.note(ctx, slog.LevelInfo, "submission replayed", key, fp.WithdrawalID, nil)
	return rec.outcome, nil // done, so never written again
}

// claim decides between replaying (the key's record, which has an outcome),
// refusing (an error) and claiming (a new record marked as sending, and
// claimed true). The check and the claim are one step under the lock. fp has
// been normalized; its id and destination are checked here, unless they are
// those of the key's record and so known to be valid.
func (s *Submissions[R]) claim(key string, fp *Fingerprint) (rec *record[R], claimed bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, ok := s.records[key]
	if ok && rec.fp == *fp {
		if !rec.done {
			return nil, false, inFlight(key, "is claimed and its outcome is not known yet")
		}
		return rec, false, nil
	}
	// Linear in the lengths of the id and destination, as hashing and
	// comparing them in the maps already is.
	if err := checkIdentity(fp); err != nil {
		return nil, false, err
	}
	if ok {
		return nil, false, keyTaken(key)
	}
	rec = &record[R]{fp: *fp, sending: true}
	if err := s.insert(key, rec); err != nil {
		return nil, false, err
	}
	return rec, true, nil
}

// insert claims rec's withdrawal for key and records rec under key, or returns
// the *ConflictError of the claim and changes nothing. The caller holds s.mu
// and has seen that key has no record.
func (s *Submissions[R]) insert(key string, rec *record[R]) error {
	if s.records == nil {
		s.records = make(map[string]*record[R])
		s.claims = make(claims)
	}
	if err := s.claims.take(rec.fp.WithdrawalID, key); err != nil {
		return err
	}
	s.records[key] = rec
	return nil
}

// send runs the claimed key's send and settles its record: the outcome, or
// no outcome and the key left claimed.
func (s *Submissions[R]) send(ctx context.Context, key string, rec *record[R], req R,
	send func(ctx context.Context, req R) (R, error)) (R, error) {
	var zero R
	settled := false
	defer func() {
		if !settled { // send, or the outcome's Fingerprint, panicked or exited the goroutine
			s.mu.Lock()
			rec.sending = false
			s.mu.Unlock()
			s.note(ctx, slog.LevelWarn, "send did not complete; the outcome is unknown and the key stays claimed", key, rec.fp.WithdrawalID, nil)
		}
	}()
	out, err := req, error(nil)
	if send != nil {
		out, err = send(ctx, req)
	}
	if err == nil {
		err = ctx.Err() // an answer after the caller's context ended is not taken as known
	}
	mismatch := false
	if err == nil {
		got := out.Fingerprint()
		mismatch = normalize(&got) != nil || got != rec.fp // equal to the record's, so valid
	}

	s.mu.Lock()
	rec.sending = false
	if err == nil && !mismatch {
		rec.outcome, rec.done = out, true
	}
	s.mu.Unlock()
	settled = true

	switch {
	case err != nil:
		s.note(ctx, slog.LevelWarn, "send failed; the outcome is unknown and the key stays claimed", key, rec.fp.WithdrawalID, err)
		return zero, fmt.Errorf("send for request key %s failed; its outcome is unknown and the key stays claimed: %w", key, err)
	case mismatch:
		err := conflictf("send for request key %s returned an outcome for another withdrawal; the key stays claimed", key)
		s.note(ctx, slog.LevelWarn, "send returned an outcome for another withdrawal; the key stays claimed", key, rec.fp.WithdrawalID, err)
		return zero, err
	}
	return out, nil
}

// Resolve records the outcome of a key whose send ended without one: "I looked
// at the rail, here is what happened". Like Submit, it checks the key, then
// ctx, then the outcome's fingerprint (ErrInvalidFingerprint).
//
// For an in-flight key, the outcome's fingerprint must match the request's
// (ErrIdempotencyConflict otherwise), and it is recorded. While this ledger is
// still running the key's send, Resolve is refused with ErrSubmissionInFlight:
// the rail's own answer is on its way and is better evidence. For a key that
// has an outcome, the same outcome again is accepted and a different one is an
// ErrIdempotencyConflict. For an unknown key, the withdrawal's claim is checked
// first, exactly as Submit checks it: if another key holds it, Resolve returns
// a *ConflictError naming the holder and records nothing; otherwise the key is
// recorded with the outcome and claims the withdrawal.
//
// Two outcomes are the same when their encoding/json encodings are equal byte
// for byte. An outcome that encoding/json cannot encode is never the same as
// another, and the comparison's error is returned; a type whose encoding
// leaves out what differs (one with no exported fields encodes as {}) makes
// different outcomes look the same.
func (s *Submissions[R]) Resolve(ctx context.Context, key string, outcome R) error {
	key, err := validKey(key)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	fp, err := canonical(outcome.Fingerprint())
	if err != nil {
		return err
	}

	s.mu.Lock()
	rec, ok := s.records[key]
	had := false
	switch {
	case !ok:
		err = s.insert(key, &record[R]{fp: fp, outcome: outcome, done: true})
	case rec.fp != fp:
		err = keyTaken(key)
	case rec.done:
		had = true
	case rec.sending:
		err = inFlight(key, "is being sent by this ledger; resolve it once its send has returned")
	default:
		rec.outcome, rec.done = outcome, true
	}
	s.mu.Unlock()
	switch {
	case err != nil:
		return err
	case had: // done for good, so rec.outcome is not written again
		return sameOutcome(key, rec.outcome, outcome)
	}
	s.note(ctx, slog.LevelInfo, "submission resolved", key, fp.WithdrawalID, nil)
	return nil
}

// Release drops a key whose send ended without an outcome: "I looked at the
// rail, nothing was sent". The withdrawal's claim is dropped too if it still
// names key, so the same key or another one may send it again.
//
// Release of an unknown key does nothing and returns nil. It is refused with
// ErrIdempotencyConflict once the key has an outcome (that would reopen a
// withdrawal that already has an answer), and with ErrSubmissionInFlight while
// this ledger is still running the key's send.
func (s *Submissions[R]) Release(ctx context.Context, key string) error {
	key, err := validKey(key)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}

	s.mu.Lock()
	rec, ok := s.records[key]
	switch {
	case !ok:
		s.mu.Unlock()
		return nil
	case rec.done:
		s.mu.Unlock()
		return conflictf("request key %s already produced an outcome and cannot be released", key)
	case rec.sending:
		s.mu.Unlock()
		return inFlight(key, "is still being sent by this ledger and cannot be released")
	}
	delete(s.records, key)
	s.claims.drop(rec.fp.WithdrawalID, key)
	s.mu.Unlock()
	s.note(ctx, slog.LevelInfo, "submission released", key, rec.fp.WithdrawalID, nil)
	return nil
}

// Outcome returns the outcome recorded for key, with ok false when the key is
// unknown or its outcome is not known yet.
func (s *Submissions[R]) Outcome(ctx context.Context, key string) (outcome R, ok bool, err error) {
	key, err = validKey(key)
	if err != nil {
		return outcome, false, err
	}
	if err := ctx.Err(); err != nil {
		return outcome, false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if rec, found := s.records[key]; found && rec.done {
		return rec.outcome, true, nil
	}
	return outcome, false, nil
}

// ClaimedBy returns the request key that holds withdrawalID's claim, with ok
// false when no key holds it. The id is matched exactly.
func (s *Submissions[R]) ClaimedBy(ctx context.Context, withdrawalID string) (key string, ok bool, err error) {
	if err := ctx.Err(); err != nil {
		return "", false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	key, ok = s.claims.holder(withdrawalID)
	return key, ok, nil
}

// sameOutcome returns nil when prev and next, two outcomes of key, have equal
// encoding/json encodings, and an ErrIdempotencyConflict otherwise.
func sameOutcome[R any](key string, prev, next R) error {
	a, err := json.Marshal(prev)
	if err == nil {
		var b []byte
		if b, err = json.Marshal(next); err == nil && bytes.Equal(a, b) {
			return nil
		}
	}
	if err != nil {
		return conflictf("request key %s already has an outcome, and outcomes that encoding/json cannot encode cannot be compared: %w", key, err)
	}
	return conflictf("request key %s already has another outcome", key)
}

// note logs msg at level with the key and withdrawal, and err if not nil. It
// costs one call when the level is disabled.
func (s *Submissions[R]) note(ctx context.Context, level slog.Level, msg, key, withdrawalID string, err error) {
	l := s.log
	if l == nil {
		l = slog.Default()
	}
	if !l.Enabled(ctx, level) {
		return
	}
	if err != nil {
		l.LogAttrs(ctx, level, msg, slog.String("key", key), slog.String("withdrawal", withdrawalID), slog.Any("error", err))
		return
	}
	l.LogAttrs(ctx, level, msg, slog.String("key", key), slog.String("withdrawal", withdrawalID))
}
