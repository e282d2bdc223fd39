package submissions

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
)

// Submissions is a submission ledger: it calls a service's send function at
// most once per withdrawal, however many callers ask and under however many
// request keys. It keeps two indexes, request key to record (fingerprint and,
// once known, outcome) and withdrawal id to the key that claimed it, in a
// Store: in memory by default (New), where its guarantees hold within one
// process, or in a shared database (NewWithStore), where they hold across the
// instances that share it.
//
// A Submissions is safe for concurrent use by multiple goroutines; send runs
// outside any lock, so different withdrawals are sent in parallel. The ledger
// keeps the requests and outcomes it is given as they are: with a pointer or
// reference type for R, callers must not change them afterwards.
//
// The zero value is an empty in-memory ledger that logs to slog.Default(). A
// Submissions must not be copied after first use.
type Submissions[R Fingerprinter] struct {
	log *slog.Logger // nil means slog.Default()

	once sync.Once  // sets be for the zero value
	be   backend[R] // where the state lives
}

// New returns an empty in-memory ledger.
func New[R Fingerprinter](opts ...Option) *Submissions[R] {
	return NewWithStore(NewMemoryStore[R](), opts...)
}

// NewWithStore returns a ledger whose state lives in store. Several ledgers,
// in several processes, may share one store: the store's atomic decisions
// keep a withdrawal to one send among all of them. It panics if store is nil.
func NewWithStore[R Fingerprinter](store Store[R], opts ...Option) *Submissions[R] {
	s := &Submissions[R]{log: buildOptions(opts).logger}
	switch st := store.(type) {
	case nil:
		panic("submissions: NewWithStore with a nil Store")
	case *memStore[R]:
		s.be = st
	default:
		s.be = &guarded[R]{store: st, busy: make(map[string]keyUse)}
	}
	return s
}

func (s *Submissions[R]) backend() backend[R] {
	s.once.Do(func() {
		if s.be == nil {
			s.be = &memStore[R]{}
		}
	})
	return s.be
}

// Submit sends req at most once for key and returns the outcome.
//
// The key is trimmed of surrounding white space and checked first
// (ErrInvalidKey); then a ctx already done returns ctx.Err(), and a fingerprint
// that is not valid returns ErrInvalidFingerprint, both claiming nothing. Then,
// in one atomic step of the store:
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
// Having claimed, Submit calls send(ctx, req) outside any lock (a nil send
// records req itself as the outcome) and records the outcome it returns. If
// send returns an error, panics, or returns after ctx has ended, or returns an
// outcome with another fingerprint, the key stays claimed with no outcome,
// because the money may already be moving: a retry under the same key gets
// ErrSubmissionInFlight and another key a *ConflictError until Resolve or
// Release closes it. The returned error wraps send's error, or is an
// ErrIdempotencyConflict for an outcome of another withdrawal; a panic
// continues with its own value. Each of these is logged at Warn with the key
// and the withdrawal.
//
// Whenever send returned an outcome that is not recorded, Submit returns that
// outcome with an error wrapping ErrOutcomeNotRecorded: when ctx had ended by
// then (the error wraps ctx's too), when the store failed to record it (a lost
// connection, say: the store may have written it before failing to answer,
// and resolving the key with it is accepted either way), when the key was
// released meanwhile, or when the key was resolved meanwhile with another
// outcome, which stands. On every other refusal or failure Submit returns the
// zero R; a store that fails while claiming means nothing was sent, though
// the claim may have been written (a retry then finds the key in flight).
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
	var t ticket[R]
	be := s.backend()
	if m, ok := be.(*memStore[R]); ok {
		// In memory the store decides without copying records, which would
		// be most of the cost of a replay.
		rec, claimed, err := m.submit(key, &fp)
		switch {
		case err != nil:
			return zero, err
		case !claimed:
			s.note(ctx, slog.LevelInfo, "submission replayed", key, fp.WithdrawalID, nil)
			return rec.outcome, nil // done, so never written again
		}
		t = rec
	} else {
		rec, tk, claimed, err := be.claim(ctx, key, fp, nil)
		switch {
		case err != nil:
			return zero, err
		case !claimed:
			if err := known(key, &fp, &rec.Fingerprint, rec.Done); err != nil {
				return zero, err
			}
			s.note(ctx, slog.LevelInfo, "submission replayed", key, fp.WithdrawalID, nil)
			return rec.Outcome, nil
		}
		t = tk
	}
	return s.send(ctx, t, key, fp, req, send)
}

// known checks a request for fp against the record its key already has, made
// for recorded and with its outcome known when done. Another fingerprint is
// ErrInvalidFingerprint if fp's id or destination is not valid (a claim checks
// them only before creating a record), and ErrIdempotencyConflict otherwise;
// the same one without an outcome is ErrSubmissionInFlight.
func known(key string, fp, recorded *Fingerprint, done bool) error {
	switch {
	case *recorded != *fp:
		if err := checkIdentity(fp); err != nil {
			return err
		}
		return keyTaken(key)
	case !done:
		return inFlight(key, "is claimed and its outcome is not known yet")
	}
	return nil
}

// send runs the claimed key's send and settles its record: the outcome, or
// no outcome and the key left claimed.
func (s *Submissions[R]) send(ctx context.Context, t ticket[R], key string, fp Fingerprint, req R,
	send func(ctx context.Context, req R) (R, error)) (R, error) {
	var zero R
	settled := false
	defer func() {
		if !settled { // send, or the outcome's Fingerprint, panicked or exited the goroutine
			t.abandon()
			s.note(ctx, slog.LevelWarn, "send did not complete; the outcome is unknown and the key stays claimed", key, fp.WithdrawalID, nil)
		}
	}()
	out, err := req, error(nil)
	if send != nil {
		out, err = send(ctx, req)
	}
	if err == nil && ctx.Err() != nil {
		// An answer after the caller's context ended is not taken as known:
		// it comes back, unrecorded, and the key stays in flight.
		t.abandon()
		settled = true
		err = fmt.Errorf("%w: request key %s: send returned after its context ended, and the key stays claimed: %w", ErrOutcomeNotRecorded, key, ctx.Err())
		s.note(ctx, slog.LevelWarn, "send returned after its context ended; the outcome is not recorded and the key stays claimed", key, fp.WithdrawalID, err)
		return out, err
	}
	if err == nil {
		got := out.Fingerprint()
		if normalize(&got) != nil || got != fp { // equal to the record's, so valid
			err = conflictf("send for request key %s returned an outcome for another withdrawal; the key stays claimed", key)
		}
	}
	if err != nil {
		t.abandon()
		settled = true
		s.note(ctx, slog.LevelWarn, "send failed; the outcome is unknown and the key stays claimed", key, fp.WithdrawalID, err)
		if errors.Is(err, ErrIdempotencyConflict) {
			return zero, err
		}
		return zero, fmt.Errorf("send for request key %s failed; its outcome is unknown and the key stays claimed: %w", key, err)
	}

	rec, err := t.settle(ctx, out)
	settled = true
	switch {
	case err == nil && rec == nil:
		return out, nil
	case err != nil:
		err = fmt.Errorf("%w: request key %s: the store failed while recording it, so it may or may not have been recorded; resolve the key with this outcome: %w", ErrOutcomeNotRecorded, key, err)
	case rec.Done: // resolved elsewhere while send ran
		if err = sameOutcome(key, rec.Outcome, out); err == nil {
			return out, nil
		}
		err = fmt.Errorf("%w: request key %s was resolved with another outcome while its send ran, and that one stands: %w", ErrOutcomeNotRecorded, key, err)
	default:
		err = fmt.Errorf("%w: request key %s was released while its send ran", ErrOutcomeNotRecorded, key)
	}
	s.note(ctx, slog.LevelWarn, "send returned an outcome that could not be recorded; the money may have moved", key, fp.WithdrawalID, err)
	return out, err
}

// Resolve records the outcome of a key whose send ended without one: "I looked
// at the rail, here is what happened". Like Submit, it checks the key, then
// ctx, then the outcome's fingerprint (ErrInvalidFingerprint).
//
// For an in-flight key, the outcome's fingerprint must match the request's
// (ErrIdempotencyConflict otherwise), and it is recorded, even while this
// ledger is still running the key's send: when that send returns an outcome
// that is not the same, Submit returns it with ErrOutcomeNotRecorded and the
// resolved one stands. For a key that has an outcome, the same outcome again
// is accepted and a different one is an ErrIdempotencyConflict. For an unknown
// key, the withdrawal's claim is checked first, exactly as Submit checks it:
// if another key holds it, Resolve returns a *ConflictError naming the holder
// and records nothing; otherwise the key is recorded with the outcome and
// claims the withdrawal. A Resolve that races a Release of the same key may
// find it gone, record nothing, and return ErrSubmissionInFlight.
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
	fp := outcome.Fingerprint()
	if err := normalize(&fp); err != nil {
		return err
	}
	be := s.backend()
	done, err := be.hold(key, false)
	if err != nil {
		return err
	}
	defer done()
	rec, _, claimed, err := be.claim(ctx, key, fp, &outcome)
	switch {
	case err != nil:
		return err
	case claimed:
		s.note(ctx, slog.LevelInfo, "submission resolved", key, fp.WithdrawalID, nil)
		return nil
	}
	if err := known(key, &fp, &rec.Fingerprint, true); err != nil {
		return err
	}
	if !rec.Done {
		var recorded bool
		if rec, recorded, err = be.settle(ctx, key, fp, outcome); err != nil {
			return err
		}
		if recorded {
			s.note(ctx, slog.LevelInfo, "submission resolved", key, fp.WithdrawalID, nil)
			return nil
		}
		if !rec.Done {
			return inFlight(key, "was released while it was being resolved; nothing was recorded")
		}
	}
	return sameOutcome(key, rec.Outcome, outcome)
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
	be := s.backend()
	done, err := be.hold(key, true)
	if err != nil {
		// The send may have recorded its outcome already, its Submit not
		// having returned yet: then the key is refused as any key with an
		// outcome is.
		if rec, found, err := be.lookup(ctx, key); err == nil && found && rec.Done {
			return conflictf("request key %s already produced an outcome and cannot be released", key)
		}
		return inFlight(key, "is still being sent by this ledger and cannot be released")
	}
	defer done()
	rec, released, err := be.release(ctx, key)
	switch {
	case errors.Is(err, errSending):
		return inFlight(key, "is still being sent by this ledger and cannot be released")
	case err != nil:
		return err
	case released:
		s.note(ctx, slog.LevelInfo, "submission released", key, rec.Fingerprint.WithdrawalID, nil)
	case rec.Done:
		return conflictf("request key %s already produced an outcome and cannot be released", key)
	}
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
	rec, found, err := s.backend().lookup(ctx, key)
	if err != nil || !found || !rec.Done {
		return outcome, false, err
	}
	return rec.Outcome, true, nil
}

// ClaimedBy returns the request key that holds withdrawalID's claim, with ok
// false when no key holds it. The id is matched exactly; an id that no valid
// fingerprint can carry (empty, not UTF-8, with a NUL byte) is held by no key.
func (s *Submissions[R]) ClaimedBy(ctx context.Context, withdrawalID string) (key string, ok bool, err error) {
	if err := ctx.Err(); err != nil {
		return "", false, err
	}
	if checkText("withdrawal id", withdrawalID) != nil {
		return "", false, nil
	}
	return s.backend().claimedBy(ctx, withdrawalID)
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
