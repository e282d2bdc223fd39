package submissions

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/idemledger/submissions/admin"
	"github.com/idemledger/submissions/driver"
	"github.com/idemledger/submissions/internal/engine"
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
	l      atomic.Pointer[engine.Ledger[R]] // set when made, or by the zero value's first call
	tenant string                           // the tenant this ledger or view works in; "" is the default
}

// New returns an empty in-memory ledger.
func New[R Fingerprinter](opts ...Option) *Submissions[R] {
	return NewWithStore(NewMemoryStore[R](), opts...)
}

// NewWithStore returns a ledger whose state lives in store, such as the
// PostgreSQL store of the pgstore module. Ledgers in several processes may
// share one store: its atomic decisions keep each withdrawal to one send
// among all of them. It panics if store is nil, or if WithOutcomeCheck is
// given a check of another type than R.
func NewWithStore[R Fingerprinter](store driver.Store[R], opts ...Option) *Submissions[R] {
	if store == nil {
		panic("submissions: NewWithStore with a nil Store")
	}
	o := buildOptions(opts)
	l := engine.New(store, o.logger, o.observer)
	if o.check != nil {
		check, ok := o.check.(func(R) error)
		if !ok {
			panic(fmt.Sprintf("submissions: WithOutcomeCheck of %T for a ledger of %T outcomes", o.check, *new(R)))
		}
		l.SetCheck(check)
	}
	s := &Submissions[R]{}
	s.l.Store(l)
	return s
}

// Tenant returns a view of the ledger that works in the tenant id: keys and
// withdrawal claims of one tenant never meet another's, and every method of
// the view reads and changes only its own tenant's. Tenant("") is the
// default tenant, the one a ledger works in before Tenant is called; a
// view's Tenant names a tenant of the same ledger. Making a view costs one
// small allocation. An id is exact (no trimming): over 64 bytes, not valid
// UTF-8 or with a NUL byte, every method of the view returns
// ErrInvalidTenant.
func (s *Submissions[R]) Tenant(id string) *Submissions[R] {
	v := &Submissions[R]{tenant: id}
	v.l.Store(s.ledger())
	return v
}

// RailKey returns the key to give a payment rail that deduplicates requests
// by an idempotency key of its own: a UUID (RFC 9562, version 8) made from
// tenant and withdrawalID only, the same on every claim of the withdrawal,
// in every process and release. Even a send after an operator's mistaken
// Release then reaches the rail under the key of the first, and a rail that
// deduplicates moves no money twice. See docs/rules.md for when a rail needs
// a fresh key.
func RailKey(tenant, withdrawalID string) string {
	return engine.RailKey(tenant, withdrawalID)
}

// RailKeyFromContext returns, inside a send, the RailKey of the withdrawal
// being sent in its tenant; ok is false for a ctx that is not, or does not
// derive from, a send's.
func RailKeyFromContext(ctx context.Context) (key string, ok bool) {
	return engine.RailKeyFromContext(ctx)
}

// ValidateTenant returns nil if id is a valid tenant id ("" included), and
// otherwise the error wrapping ErrInvalidTenant that every method of its view
// returns: the check Tenant makes, for a service to run where the id comes in.
func ValidateTenant(id string) error {
	return engine.ValidateTenant(id)
}

// Admin returns the operator's side of the ledger (see package admin): it
// works across tenants, so a tenant's view returns the whole ledger's.
func (s *Submissions[R]) Admin() *admin.Admin[R] {
	return (*admin.Admin[R])(engine.NewAdminState(s.ledger(), admin.DefaultMinRetention))
}

// ledger returns the engine the ledger shares with its views; a zero value
// gets an empty memory store on its first call.
func (s *Submissions[R]) ledger() *engine.Ledger[R] {
	if l := s.l.Load(); l != nil {
		return l
	}
	return s.start()
}

// start gives a zero value its empty memory store, unless a call of another
// goroutine has, and returns the engine.
func (s *Submissions[R]) start() *engine.Ledger[R] {
	s.l.CompareAndSwap(nil, engine.New[R](&memStore[R]{}, nil, nil))
	return s.l.Load()
}

// Submit sends req at most once for key and returns the outcome. A key
// already done with the same withdrawal replays its outcome without calling
// send. Otherwise, once the key and the withdrawal are claimed, Submit calls
// send(ctx, req) outside any lock (a nil send takes req as the outcome), and
// records and returns its answer. Send finds the withdrawal's RailKey in its
// ctx (RailKeyFromContext).
//
// Before the claim it returns, having sent nothing, ErrInvalidKey,
// ctx.Err(), ErrInvalidFingerprint, ErrIdempotencyConflict (a *ConflictError
// for a withdrawal claimed by another key), ErrSubmissionInFlight or
// ErrPruned (the key, or the key that claims the withdrawal, was pruned: a
// *ConflictError with Pruned set for the latter) or ErrStoreFailed. After
// send: ErrNotSent when send's error wraps it, or when ctx ended as the
// key was claimed and send was not called (the claim is released), or
// else ErrOutcomeUnknown with the zero R when send gave no answer (a panic
// goes on with its own value), or the answer with ErrOutcomeNotRecorded when
// it could not be recorded. After these two the key stays claimed, unless it
// was released or resolved while send ran, until Resolve or Release closes
// it.
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
	return s.ledger().Submit(ctx, s.tenant, key, req, send)
}

// Resolve records the outcome of a key whose send ended without one: "I
// looked at the rail, here is what happened". It decides as
// Admin().Resolve does (WithOutcomeCheck's rule included) with Force (the service's own Resolve is the rail's
// word) and ClaimUnknown, and returns that Result's Err: nil when the
// outcome is recorded, or was already; ErrIdempotencyConflict when the key
// has another outcome or withdrawal (naming the fields that differ), or,
// for an unknown key, when another key claims the withdrawal (a
// *ConflictError); ErrPruned when the key was pruned;
// ErrOutcomeNotRecorded (and admin.ErrInvalidOutcome), writing nothing, for
// an outcome that no store could give back as it is (see docs/rules.md);
// admin.ErrClaimChanged when the key was released or claimed anew while
// Resolve ran, each time it was decided (a claim that changes is decided
// again as it is then, a few times); and otherwise the refusals of Submit
// before its claim. An unknown key is recorded with the
// outcome and claims the withdrawal.
//
// Two outcomes are the same when their encoding/json encodings hold equal
// JSON values (see docs/rules.md).
func (s *Submissions[R]) Resolve(ctx context.Context, key string, outcome R) error {
	a, t := s.Admin(), admin.Target{Tenant: s.tenant, Key: key, Force: true, ClaimUnknown: true}
	return again(func() admin.Result { return a.Resolve(ctx, t, outcome) })
}

// Release drops a key whose send ended without an outcome: "I looked at the
// rail, nothing was sent". The withdrawal is free again, for this key or
// another. It decides as Admin().Release does without Force, and returns
// that Result's Err: nil, also for an unknown key (which the Admin
// refuses, RuleUnknownKey); ErrIdempotencyConflict when the key has an
// outcome, or an answer of its send that was not recorded (wrapping
// ErrAbandoned: money moved, and no door releases it); ErrSubmissionInFlight while a send of the
// claim is running in this ledger, or is not known to have ended (it may
// run in another process: an operator who has looked at the rail releases
// it with Admin().Release and Force); ErrPruned when the key's record was
// pruned; ctx's error when ctx ends while it waits for this ledger's claim
// of the key to come back from the store; ErrStoreFailed when the store
// fails (the release may or may not stand: Release again to know). A claim
// that changes while Release runs is decided again as it is then; after a
// few times, admin.ErrClaimChanged.
func (s *Submissions[R]) Release(ctx context.Context, key string) error {
	a, t := s.Admin(), admin.Target{Tenant: s.tenant, Key: key}
	return again(func() admin.Result {
		r := a.Release(ctx, t)
		if r.Rule == admin.RuleUnknownKey { // refused at an operator's door; here, nothing to release
			r.Err = nil
		}
		return r
	})
}

// again runs an action on a key's claim, whatever its token, and runs it
// again while it finds the claim changed as it acted (released, or claimed
// anew), a few times, so that it is decided on the claim as it is then; it
// returns the last Result's error.
func again(act func() admin.Result) error {
	r := act()
	for range 3 {
		if r.Rule != admin.RuleClaimChanged {
			break
		}
		r = act()
	}
	return r.Err
}

// Outcome returns the outcome recorded for key, with ok false when the key is
// unknown or its outcome is not known yet, and an error wrapping ErrPruned
// when the key's record was pruned: its outcome is gone.
func (s *Submissions[R]) Outcome(ctx context.Context, key string) (outcome R, ok bool, err error) {
	return s.ledger().Outcome(ctx, s.tenant, key)
}

// Wait blocks until key has an outcome and returns it, at once if it has
// one already. It returns an error wrapping ErrOutcomeUnknown when the key's
// send ends, or had ended, without an outcome; ErrUnknownKey for a key
// without a claim, or one released while Wait waited; ErrPruned for a key
// whose record was pruned; ctx's error when ctx ends first; ErrStoreFailed
// when the store fails; and ErrInvalidTenant or ErrInvalidKey before
// anything else. Wait sends nothing and changes nothing.
//
// It learns that a send ended without an answer from the send itself, in
// this ledger; from the store, when a ledger anywhere recorded it there (a
// driver.Abandoner, as the memory store and pgstore are); and from the
// memory store for every ledger on it. A claim in flight is otherwise waited
// for until it is settled, released or abandoned, whichever ledger closes
// it (see docs/rules.md).
func (s *Submissions[R]) Wait(ctx context.Context, key string) (R, error) {
	return s.ledger().Wait(ctx, s.tenant, key)
}
