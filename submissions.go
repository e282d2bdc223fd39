package submissions

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"
)

// Submissions is a submission ledger: it calls a service's send function at
// most once per withdrawal, however many callers ask and under however many
// request keys. Its state lives in a Store: in memory (New), where its
// guarantees hold within one process, or in a shared database
// (NewWithStore), where they hold across the instances that share it.
//
// A Submissions is safe for concurrent use; send runs outside any lock, so
// different withdrawals are sent in parallel. The ledger keeps the requests
// and outcomes it is given as they are: with a pointer type for R, callers
// must not change them afterwards. The zero value is an empty in-memory
// ledger that logs to slog.Default(). A Submissions must not be copied after
// first use.
type Submissions[R Fingerprinter] struct {
	shared    atomic.Pointer[shared[R]] // set when made, or by the zero value's first call
	tenant    string                    // the tenant this ledger or view works in; "" is the default
	tenantErr error                     // why tenant is not valid, or nil
}

// shared is what a ledger and its tenants' views have in common.
type shared[R Fingerprinter] struct {
	log      *slog.Logger // nil means slog.Default()
	observer Observer     // nil for none
	be       backend[R]   // where the state lives
	mem      *memStore[R] // be, when it is the memory store, for its fast replay
	nilable  bool         // R is a type with a nil value, such as a pointer
}

// New returns an empty in-memory ledger.
func New[R Fingerprinter](opts ...Option) *Submissions[R] {
	return NewWithStore(NewMemoryStore[R](), opts...)
}

// NewWithStore returns a ledger whose state lives in store. Ledgers in
// several processes may share one store: its atomic decisions keep each
// withdrawal to one send among all of them. It panics if store is nil.
func NewWithStore[R Fingerprinter](store Store[R], opts ...Option) *Submissions[R] {
	if store == nil {
		panic("submissions: NewWithStore with a nil Store")
	}
	s := &Submissions[R]{}
	s.shared.Store(newShared(store, buildOptions(opts)))
	return s
}

func newShared[R Fingerprinter](store Store[R], o options) *shared[R] {
	sh := &shared[R]{log: o.logger, observer: o.observer, nilable: nilable[R]()}
	if m, ok := store.(*memStore[R]); ok {
		sh.be, sh.mem = m, m
	} else {
		sh.be = newGuard(store)
	}
	return sh
}

// Tenant returns a view of the ledger that works in the tenant id: keys and
// withdrawal claims of one tenant never meet another's, and every method of
// the view reads and changes only its own tenant's. Tenant("") is the
// default tenant, the one a ledger works in before Tenant is called; a
// view's Tenant names a tenant of the same ledger. Making a view costs one
// small allocation. An id is exact (no trimming): over MaxTenantLen bytes,
// not valid UTF-8 or with a NUL byte, every method of the view returns
// ErrInvalidTenant.
func (s *Submissions[R]) Tenant(id string) *Submissions[R] {
	v := &Submissions[R]{tenant: id, tenantErr: ValidateTenant(id)}
	v.shared.Store(s.state())
	return v
}

// ValidateTenant returns nil if id is a valid tenant id ("" included), and
// otherwise the error wrapping ErrInvalidTenant that every method of its view
// returns: the check Tenant makes, for a service to run where the id comes in.
func ValidateTenant(id string) error {
	if id != "" && !validText(id, MaxTenantLen) {
		return fmt.Errorf("%w: %s", ErrInvalidTenant, textProblem(id, MaxTenantLen))
	}
	return nil
}

// state returns what the ledger shares with its views; a zero value gets an
// empty memory store on its first call.
func (s *Submissions[R]) state() *shared[R] {
	if sh := s.shared.Load(); sh != nil {
		return sh
	}
	return s.start()
}

// start gives a zero value its empty memory store, unless a call of another
// goroutine has, and returns what the ledger shares.
func (s *Submissions[R]) start() *shared[R] {
	s.shared.CompareAndSwap(nil, newShared[R](&memStore[R]{}, options{}))
	return s.shared.Load()
}

// errNilRequest is the error of a nil request or outcome, which has no
// fingerprint.
func errNilRequest(v any) error {
	return fmt.Errorf("%w: nil %T", ErrInvalidFingerprint, v)
}

// Submit sends req at most once for key and returns the outcome. A key
// already done with the same withdrawal replays its outcome without calling
// send. Otherwise, once the key and the withdrawal are claimed, Submit calls
// send(ctx, req) outside any lock (a nil send takes req as the outcome), and
// records and returns its answer.
//
// Before the claim it returns, having sent nothing, ErrInvalidKey,
// ctx.Err(), ErrInvalidFingerprint, ErrIdempotencyConflict (a *ConflictError
// for a withdrawal claimed by another key), ErrSubmissionInFlight or
// ErrPruned (the key, or the key that claims the withdrawal, was pruned: a
// *ConflictError with Pruned set for the latter) or ErrStoreFailed. After
// send: ErrOutcomeUnknown with the zero R when send gave no answer (a panic
// goes on with its own value), or the answer with
// ErrOutcomeNotRecorded when it could not be recorded. Either way the key
// stays claimed, unless it was released or resolved while send ran, until
// Resolve or Release closes it.
func (s *Submissions[R]) Submit(ctx context.Context, key string, req R,
	send func(ctx context.Context, req R) (R, error)) (R, error) {
	out, _, err := s.SubmitOrReplay(ctx, key, req, send)
	return out, err
}

// SubmitOrReplay is Submit, and also reports whether the outcome was
// replayed: recorded before this call, by an earlier send or a Resolve,
// rather than answered by this call's send. It is false whenever err is not
// nil.
func (s *Submissions[R]) SubmitOrReplay(ctx context.Context, key string, req R,
	send func(ctx context.Context, req R) (R, error)) (R, bool, error) {
	var zero R
	if s.tenantErr != nil {
		return zero, false, s.tenantErr
	}
	sh := s.state()
	var given Fingerprint
	read := sh.mem != nil && !(sh.nilable && isNil(req))
	if read {
		// The memory store holds keys as validKey returns them: a key it
		// holds as given is valid and trimmed, and only ctx remains to check.
		given = req.Fingerprint()
		if out, ok := sh.mem.replay(s.tenant, key, &given); ok {
			if err := ctx.Err(); err != nil {
				return zero, false, err
			}
			s.report(ctx, sh, EventReplayed, key, given.WithdrawalID, 0, nil)
			return *out, true, nil
		}
	}
	key, err := validKey(key)
	if err != nil {
		return zero, false, err
	}
	if err := ctx.Err(); err != nil {
		return zero, false, err
	}
	if sh.nilable && isNil(req) {
		return zero, false, errNilRequest(req)
	}
	if !read {
		given = req.Fingerprint()
	}
	fp := given
	if err := normalize(&fp); err != nil {
		return zero, false, err
	}
	held, outcome, sending, err := sh.be.claimToSend(ctx, s.tenant, key, fp, given.Amount, given.Currency)
	switch {
	case errors.Is(err, errTombstone):
		err = prunedKey(key)
		s.report(ctx, sh, EventConflict, key, fp.WithdrawalID, 0, err)
		return zero, false, err
	case err != nil:
		err = fromStore(key, "claim", err)
		if errors.Is(err, ErrIdempotencyConflict) {
			s.report(ctx, sh, EventConflict, key, fp.WithdrawalID, 0, err)
		}
		return zero, false, err
	case sending != nil:
		out, err := s.sendAndRecord(ctx, sh, sending, key, &fp, &given, &req, send)
		return out, false, err
	case differing(&fp, held) != 0:
		err = keyTaken(key)
		s.report(ctx, sh, EventConflict, key, fp.WithdrawalID, 0, err)
		return zero, false, err
	case outcome == nil:
		err = inFlight(key)
		s.report(ctx, sh, EventInFlight, key, fp.WithdrawalID, 0, err)
		return zero, false, err
	}
	s.report(ctx, sh, EventReplayed, key, fp.WithdrawalID, 0, nil)
	return *outcome, true, nil
}

// sendAndRecord calls send for the claim sending, and ends the claim's
// send: with the answer recorded, or with none, the key left claimed.
func (s *Submissions[R]) sendAndRecord(ctx context.Context, sh *shared[R], sending sending[R], key string, fp, given *Fingerprint, req *R,
	send func(ctx context.Context, req R) (R, error)) (R, error) {
	var zero R
	var start time.Time // when send started, timed for an observer only
	took := func() time.Duration {
		if sh.observer == nil {
			return 0
		}
		return time.Since(start)
	}
	// If this function does not return (send, the answer's Fingerprint or
	// the store panicked, or send exited its goroutine), the claim's send
	// ends with no outcome, and the log says what was under way.
	ended, under := false, "send did not return"
	defer func() {
		if !ended {
			sending.abandon(ctx)
			s.report(ctx, sh, EventOutcomeUnknown, key, fp.WithdrawalID, took(),
				fmt.Errorf("%w: request key %s: %s", ErrOutcomeUnknown, key, under))
		}
	}()
	under = "the observer panicked, and send was not called"
	s.report(ctx, sh, EventClaimed, key, fp.WithdrawalID, 0, nil)
	under = "send did not return"
	if sh.observer != nil {
		start = time.Now()
	}
	out, err := *req, error(nil)
	if send != nil {
		out, err = send(ctx, *req)
	}
	if err == nil && sh.nilable && isNil(out) {
		err = errNilAnswer
	}
	if err != nil {
		ended = true
		sending.abandon(ctx)
		err = fmt.Errorf("%w: request key %s: %w", ErrOutcomeUnknown, key, err)
		s.report(ctx, sh, EventOutcomeUnknown, key, fp.WithdrawalID, took(), err)
		return zero, err
	}

	// An answer: it is recorded only if it is for the request's withdrawal
	// and came while the caller still waited.
	var why error
	fields := 0
	under = "the answer's Fingerprint panicked"
	if got := out.Fingerprint(); got != *given { // an answer that repeats the request's fingerprint is its withdrawal
		fields = differing(fp, &got)
	}
	switch cerr := ctx.Err(); {
	case fields != 0 && cerr != nil:
		why = fmt.Errorf("answer differs in %s, and the context ended: %w", fieldNames(fields), cerr)
	case fields != 0:
		why = fmt.Errorf("answer differs in %s", fieldNames(fields))
	case cerr != nil:
		why = fmt.Errorf("context ended while send ran: %w", cerr)
	}
	var standing *R
	var settled bool
	under = "the store panicked while recording the answer"
	if why != nil {
		sending.abandon(ctx)
	} else {
		standing, settled, err = sending.settle(ctx, out)
	}
	ended = true
	switch {
	case why != nil:
	case errors.Is(err, errTombstone):
		why = errors.New("resolved and pruned while send ran")
	case err != nil:
		why = fmt.Errorf("the store failed, and the answer may or may not stand: %w", err)
	case settled:
		s.report(ctx, sh, EventSent, key, fp.WithdrawalID, took(), nil)
		return out, nil
	case standing == nil:
		why = errors.New("released while send ran")
	default: // resolved while send ran
		same, serr := sameOutcome(*standing, out)
		switch {
		case serr != nil:
			why = fmt.Errorf("resolved while send ran, with an outcome that cannot be compared: %w", serr)
		case !same:
			why = errors.New("resolved with another outcome while send ran")
		default:
			s.report(ctx, sh, EventSent, key, fp.WithdrawalID, took(), nil)
			return out, nil
		}
	}
	err = fmt.Errorf("%w: request key %s: %w", ErrOutcomeNotRecorded, key, why)
	s.report(ctx, sh, EventNotRecorded, key, fp.WithdrawalID, took(), err)
	return out, err
}

// errNilAnswer is the error of a send that answered with a nil pointer.
var errNilAnswer = errors.New("send answered nil")

// Resolve records the outcome of a key whose send ended without one: "I
// looked at the rail, here is what happened". The outcome's fingerprint must
// be the key's request's. It returns nil when the outcome is recorded, or was
// already; ErrIdempotencyConflict when the key has another outcome or
// withdrawal, or, for an unknown key, when another key claims the withdrawal
// (a *ConflictError); ErrPruned when the key, or the key that claims the
// withdrawal, was pruned; and otherwise the refusals of Submit before its claim.
// An unknown key is recorded with the outcome and claims the withdrawal. A
// key released while Resolve ran gets ErrSubmissionInFlight, nothing
// recorded; a Resolve again finds it unknown, or claimed anew.
//
// Two outcomes are the same when their encoding/json encodings hold equal
// JSON values (see the README).
func (s *Submissions[R]) Resolve(ctx context.Context, key string, outcome R) error {
	if s.tenantErr != nil {
		return s.tenantErr
	}
	key, err := validKey(key)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	sh := s.state()
	be := sh.be
	if sh.nilable && isNil(outcome) {
		return errNilRequest(outcome)
	}
	fp := outcome.Fingerprint()
	if err := normalize(&fp); err != nil {
		return err
	}
	rec, claimed, err := be.Claim(ctx, s.tenant, key, fp, &outcome)
	switch {
	case err != nil:
		return fromStore(key, "record", err)
	case claimed:
		s.report(ctx, sh, EventResolved, key, fp.WithdrawalID, 0, nil)
		return nil
	case rec.Pruned:
		return prunedKey(key)
	case differing(&fp, &rec.Fingerprint) != 0:
		return keyTaken(key)
	case !rec.Done:
		var settled bool
		if rec, settled, err = be.Settle(ctx, s.tenant, key, rec.Token, outcome); err != nil {
			return fromStore(key, "record", err)
		}
		if settled {
			s.report(ctx, sh, EventResolved, key, fp.WithdrawalID, 0, nil)
			return nil
		}
		if !rec.Done { // released meanwhile
			return fmt.Errorf("%w: request key %s was released while it was resolved", ErrSubmissionInFlight, key)
		}
	}
	return sameAsRecorded(key, rec.Outcome, outcome)
}

// Release drops a key whose send ended without an outcome: "I looked at the
// rail, nothing was sent". The withdrawal is free again, for this key or
// another. It returns nil, also for an unknown key; ErrIdempotencyConflict
// when the key has an outcome; ErrSubmissionInFlight while this ledger is
// running the key's send; ErrPruned when the key's record was pruned; ctx's
// error when ctx ends while it waits for this ledger's claim of the key to
// come back from the store; ErrStoreFailed when the store fails (the release
// may or may not stand: Release again to know).
func (s *Submissions[R]) Release(ctx context.Context, key string) error {
	if s.tenantErr != nil {
		return s.tenantErr
	}
	key, err := validKey(key)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	rec, released, err := s.state().be.releaseIdle(ctx, s.tenant, key)
	switch {
	case errors.Is(err, errSending):
		return inFlight(key)
	case errors.Is(err, errWaitEnded):
		return fmt.Errorf("request key %s: %w", key, err)
	case err != nil:
		return fromStore(key, "release", err)
	case released:
		s.report(ctx, s.state(), EventReleased, key, rec.Fingerprint.WithdrawalID, 0, nil)
	case rec.Pruned:
		return prunedKey(key)
	case rec.Done:
		return hasOutcome(key, "an outcome")
	}
	return nil
}

// Outcome returns the outcome recorded for key, with ok false when the key is
// unknown or its outcome is not known yet, and an error wrapping ErrPruned
// when the key's record was pruned: its outcome is gone.
func (s *Submissions[R]) Outcome(ctx context.Context, key string) (outcome R, ok bool, err error) {
	if s.tenantErr != nil {
		return outcome, false, s.tenantErr
	}
	key, err = validKey(key)
	if err != nil {
		return outcome, false, err
	}
	if err := ctx.Err(); err != nil {
		return outcome, false, err
	}
	rec, found, err := s.state().be.Lookup(ctx, s.tenant, key)
	switch {
	case err != nil:
		return outcome, false, fromStore(key, "lookup", err)
	case found && rec.Pruned:
		return outcome, false, prunedKey(key)
	case !found || !rec.Done:
		return outcome, false, nil
	}
	return rec.Outcome, true, nil
}

// ClaimedBy returns the request key that holds withdrawalID's claim, with ok
// false when no key holds it. A pruned key holds its withdrawal for ever.
// The id is matched exactly; an id that no valid fingerprint can carry is
// held by no key.
func (s *Submissions[R]) ClaimedBy(ctx context.Context, withdrawalID string) (key string, ok bool, err error) {
	if s.tenantErr != nil {
		return "", false, s.tenantErr
	}
	if err := ctx.Err(); err != nil {
		return "", false, err
	}
	if !validText(withdrawalID, MaxWithdrawalIDLen) {
		return "", false, nil
	}
	key, ok, err = s.state().be.ClaimedBy(ctx, s.tenant, withdrawalID)
	if err != nil {
		return "", false, fmt.Errorf("%w: withdrawal %s: %w", ErrStoreFailed, withdrawalID, err)
	}
	return key, ok, nil
}

// sameAsRecorded returns nil when outcome is the same as recorded, key's
// outcome, and otherwise the ErrIdempotencyConflict of a Resolve that
// contradicts it.
func sameAsRecorded[R Fingerprinter](key string, recorded, outcome R) error {
	same, err := sameOutcome(recorded, outcome)
	switch {
	case err != nil:
		return fmt.Errorf("%w: request key %s: the outcomes cannot be compared: %w", ErrIdempotencyConflict, key, err)
	case !same:
		return hasOutcome(key, "another outcome")
	}
	return nil
}
