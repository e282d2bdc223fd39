// Package admin is the operator's door of a submissions ledger, and the one
// home of an operator's decisions: it lists the keys in flight across
// tenants, resolves or releases one key's claim (Resolve, Release), deciding
// every case and saying what it did in an admin.Result (changed; unchanged;
// refused, by which rule, and what to do next; failed), reconciles the keys
// in flight with the rail's evidence, and prunes settled records. An HTTP
// API or a command line renders a Result, and adds no decision of its own,
// so that every door decides and says the same. A service gets one from its
// ledger, with its own rules for an outcome:
//
//	ops := ledger.Admin().WithOutcomeCheck(checkOutcome)
//	claims, err := ops.InFlight(ctx, admin.InFlightQuery{OlderThan: time.Hour})
//	res := ops.Resolve(ctx, admin.Target{Tenant: "acme", Key: "pay-7"}, outcome)
//
// Its errors are package submissions' (ErrIdempotencyConflict,
// ErrSubmissionInFlight, ErrPruned, ErrStoreFailed...), and four of its
// own: ErrClaimChanged, ErrNotSupported, ErrHorizonTooRecent and
// ErrInvalidOutcome.
package admin

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/idemledger/submissions/driver"
	"github.com/idemledger/submissions/internal/engine"
)

// The errors of Admin's own calls; its other errors are package
// submissions'.
var (
	// ErrClaimChanged: an action names a claim (its tenant, key and token)
	// that is no longer in the store: it was released, and the key may have
	// been claimed again under another token. Nothing was changed, and no
	// other claim of the key was touched. List the claims in flight again,
	// and look at the rail for the claim that holds the key now.
	ErrClaimChanged = driver.ErrClaimChanged

	// ErrNotSupported: the ledger's Store lacks the optional ability the
	// call needs, a driver.Lister for InFlight and Reconcile, a
	// driver.Pruner for Prune. Nothing was read or changed.
	ErrNotSupported = driver.ErrNotSupported

	// ErrHorizonTooRecent: Prune was given a horizon in the future, or
	// later than now minus the Admin's minimum retention. Nothing was
	// pruned. A client that retries a pruned key gets ErrPruned instead of
	// its outcome, so a horizon younger than the clients' retry window
	// takes outcomes that they still ask for.
	ErrHorizonTooRecent = errors.New("prune horizon too recent")

	// ErrInvalidOutcome: an outcome given to Resolve, ResolveClaim or
	// Reconcile was refused by the Admin's outcome check
	// (WithOutcomeCheck), or is one that no store would give back as it is
	// (see docs/rules.md). Nothing was changed.
	ErrInvalidOutcome = errors.New("invalid outcome")
)

// DefaultMinRetention is the minimum retention of the Admin that
// submissions.Submissions.Admin returns: Prune refuses a horizon later than
// this long ago.
const DefaultMinRetention = 24 * time.Hour

// Admin is the operator's side of a ledger: calls across tenants (listing
// the keys in flight, reconciling them with the rail), and actions on one
// listed claim by its token, so that an action meant for a claim never lands
// on a later claim of the same key. Its listing and reconciliation need a
// Store that is a Lister, as the memory store and pgstore are.
//
// An Admin is safe for concurrent use, and several Admins, on one ledger or
// on ledgers sharing a store, may act on the same claims at once: an action
// on a claim that another has closed meanwhile changes nothing.
//
// A ledger's Admin method returns its Admin; an Admin made otherwise (its
// zero value) acts on no ledger and panics when used.
type Admin[R driver.Fingerprinter] engine.AdminState[R]

// state returns what a holds.
func (a *Admin[R]) state() *engine.AdminState[R] { return (*engine.AdminState[R])(a) }

// WithMinRetention returns a copy of a whose Prune refuses a horizon later
// than d ago; 0 or less allows any horizon up to now. a is unchanged. Go
// below DefaultMinRetention only knowing that a client retrying a key
// settled since the horizon gets ErrPruned instead of its outcome.
func (a *Admin[R]) WithMinRetention(d time.Duration) *Admin[R] {
	return (*Admin[R])(a.state().WithMinRetention(d))
}

// WithOutcomeCheck returns a copy of a whose Resolve, ResolveClaim and
// Reconcile refuse an outcome for which check returns an error (the
// service's own rules: say, a "sent" without its transaction), as they
// refuse an invalid fingerprint; nil checks nothing more. It adds to the
// ledger's own rule (submissions.WithOutcomeCheck), which runs first. a is
// unchanged.
func (a *Admin[R]) WithOutcomeCheck(check func(outcome R) error) *Admin[R] {
	return (*Admin[R])(a.state().WithCheck(check))
}

// checkOutcome returns the error of an outcome for key that is no outcome
// (nil, of an invalid fingerprint, one that no store would give back as it
// is, or one refused by the Admin's check), with why, in the words of the
// check that refused it.
func (a *Admin[R]) checkOutcome(key string, outcome R) (why string, err error) {
	if _, err := a.state().Ledger().Fingerprint(outcome); err != nil {
		return err.Error(), err
	}
	if err := a.state().Ledger().Exactly(outcome); err != nil {
		return err.Error(), fmt.Errorf("%w: %w: request key %s: %w", ErrInvalidOutcome, engine.ErrOutcomeNotRecorded, key, err)
	}
	if check := a.state().Check(); check != nil {
		if err := check(outcome); err != nil {
			return err.Error(), fmt.Errorf("%w: request key %s: %w", ErrInvalidOutcome, key, err)
		}
	}
	return "", nil
}

// Claim is a key in flight, as Admin lists it.
type Claim struct {
	Tenant      string             // "" for the default tenant
	Key         string             // the request key
	Fingerprint driver.Fingerprint // the request, canonical
	ClaimedAt   time.Time          // when the store made the claim, by its clock
	Token       driver.Token       // the claim's token, which Admin's actions match
	Sending     bool               // this ledger is running its send right now
	Abandoned   bool               // a send of it ended without a recorded answer (driver.Record.Abandoned)
	Answered    bool               // that send got an answer that was not recorded: money moved (driver.Record.Answered)
}

// InFlightQuery selects the keys in flight that Admin.InFlight lists.
type InFlightQuery struct {
	// OlderThan selects the claims made at least this long ago, by the
	// ledger's clock; 0 or less selects every claim.
	OlderThan time.Duration
	// Tenants selects these tenants' claims only; nil selects every
	// tenant's, and an empty, non-nil slice none.
	Tenants []string
	// After selects the page after this claim, the last of the previous
	// page; nil selects the first page.
	After *Claim
	// Limit is the most claims to return: 0 or less for DefaultListLimit,
	// and at most MaxListLimit.
	Limit int
}

// EmptyText is the sentence a listing of q with no claims shows: "no keys in
// flight", and what q selects when it selects less than every claim.
func (q InFlightQuery) EmptyText() string {
	var b strings.Builder
	b.WriteString("no keys in flight")
	if q.OlderThan > 0 {
		fmt.Fprintf(&b, " claimed at least %v ago", q.OlderThan)
	}
	switch {
	case q.Tenants == nil:
	case len(q.Tenants) == 0:
		b.WriteString(" in no tenant")
	case len(q.Tenants) == 1:
		b.WriteString(" in " + tenantName(q.Tenants[0]))
	default:
		fmt.Fprintf(&b, " in %d tenants", len(q.Tenants))
	}
	if q.After != nil {
		b.WriteString(" after the last one listed")
	}
	return b.String()
}

// The states of a claim's send, as Claim.Send names them.
const (
	SendRunning  = "running"                           // this ledger is running it
	SendEnded    = "ended without a recorded answer"   // it ended without a recorded answer (Abandoned)
	SendAnswered = "answered, the answer not recorded" // it got an answer that was not recorded (Answered): money moved
	SendUnknown  = "not known to have ended"
)

// Send names the state of c's send for an operator: SendRunning,
// SendAnswered, SendEnded, or SendUnknown when none is known here (a send
// may run in another process, or its process stopped mid-send).
func (c Claim) Send() string {
	switch {
	case c.Sending:
		return SendRunning
	case c.Answered:
		return SendAnswered
	case c.Abandoned:
		return SendEnded
	}
	return SendUnknown
}

// The page sizes of Admin.InFlight.
const (
	DefaultListLimit = 100
	MaxListLimit     = 1000
)

// InFlight returns the keys in flight that q selects, oldest first: ordered
// by ClaimedAt, then Tenant, then Key (compared byte by byte). A claim that
// stands while the pages are walked, each After the last claim of the one
// before, is listed exactly once. It returns ErrInvalidTenant for an invalid
// tenant in q.Tenants, ErrNotSupported when the store is not a Lister, and
// ErrStoreFailed when the store fails.
func (a *Admin[R]) InFlight(ctx context.Context, q InFlightQuery) ([]Claim, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	lq := driver.ListQuery{Tenants: q.Tenants, Limit: q.Limit}
	if q.After != nil {
		lq.After = &driver.InFlight{Tenant: q.After.Tenant, Key: q.After.Key, ClaimedAt: q.After.ClaimedAt}
	}
	if q.OlderThan > 0 {
		lq.ClaimedBefore = time.Now().Add(-q.OlderThan)
	}
	return a.list(ctx, lq)
}

// list checks q, bounds its limit, and lists the claims it selects.
func (a *Admin[R]) list(ctx context.Context, q driver.ListQuery) ([]Claim, error) {
	switch {
	case q.Limit <= 0:
		q.Limit = DefaultListLimit
	case q.Limit > MaxListLimit:
		q.Limit = MaxListLimit
	}
	listed, err := a.state().Ledger().List(ctx, q)
	if err != nil {
		return nil, err
	}
	claims := make([]Claim, len(listed))
	for i, c := range listed {
		claims[i] = Claim{Tenant: c.Tenant, Key: c.Key, Fingerprint: c.Fingerprint, ClaimedAt: c.ClaimedAt,
			Token: c.Token, Sending: c.Sending, Abandoned: c.Abandoned, Answered: c.Answered}
	}
	return claims, nil
}

// ResolveClaim records outcome on the claim c, a claim listed by InFlight,
// as Resolve does on a key: "I looked at the rail, here is what happened".
// Unlike Admin.Resolve it needs no force for a claim whose send may run: it
// is the path of a program that has looked at the rail (Reconcile's).
// It acts only on c's token in c's tenant. The outcome's fingerprint must be
// the claim's. It returns nil when the outcome is recorded, or was already;
// ErrIdempotencyConflict when the claim has another outcome or withdrawal;
// ErrClaimChanged when the claim is gone (released, and perhaps claimed
// again: the new claim is left as it is); ErrStoreFailed when the store
// fails (the outcome may or may not stand: ResolveClaim again to know); and
// the refusals of Resolve for an invalid tenant, key or outcome.
func (a *Admin[R]) ResolveClaim(ctx context.Context, c Claim, outcome R) error {
	if err := check(c); err != nil {
		return err
	}
	if _, err := a.checkOutcome(c.Key, outcome); err != nil {
		return err
	}
	return a.state().Ledger().Resolve(ctx, c.Tenant, c.Key, c.Token, outcome)
}

// ReleaseClaim drops the claim c, a claim listed by InFlight, as Release
// does a key without Force: "I looked at the rail, nothing was sent". It
// acts only on c's token in c's tenant. It returns nil when the claim is
// released; ErrSubmissionInFlight while a send of the claim runs in this
// ledger, or is not known to have ended (it may run in another process,
// and reach the rail after the look: Release with Force, once the rail
// shows that it cannot); ErrIdempotencyConflict when the claim has an
// outcome; ErrClaimChanged when the claim is gone (released, and perhaps
// claimed again: the new claim is left as it is); ctx's error when ctx ends
// while it waits for this ledger's claim of the key to come back from the
// store; ErrStoreFailed when the store fails (the release may or may not
// stand: ReleaseClaim again to know); and ErrInvalidTenant or ErrInvalidKey
// for an invalid claim.
func (a *Admin[R]) ReleaseClaim(ctx context.Context, c Claim) error {
	if err := check(c); err != nil {
		return err
	}
	r := a.Release(ctx, Target{Tenant: c.Tenant, Key: c.Key, Token: c.Token})
	if r.Rule == RuleUnknownKey { // no record: the claim is gone
		return fmt.Errorf("%w: request key %s: the claim is no longer in the store under its token", ErrClaimChanged, r.Claim.Key)
	}
	return r.Err
}

// check returns the error of a claim whose tenant or key is invalid, or
// that names no claim (the zero Token), in that order.
func check(c Claim) error {
	if err := engine.ValidateTenant(c.Tenant); err != nil {
		return err
	}
	if _, err := engine.ValidateKey(c.Key); err != nil {
		return err
	}
	if c.Token == 0 {
		return fmt.Errorf("%w: request key %s: the claim has no token", ErrClaimChanged, c.Key)
	}
	return nil
}

// Verdict is what a RailCheck found on the rail about a claim's request.
type Verdict uint8

// The verdicts of a RailCheck.
const (
	// VerdictUnknown: the rail cannot tell yet; the claim is left in flight.
	VerdictUnknown Verdict = iota
	// VerdictSent: the rail has the request; Finding.Outcome is what it
	// shows, and the claim is resolved with it.
	VerdictSent
	// VerdictNotSent: the rail affirms that the request was not sent and
	// can no longer be (it refuses it from now on, or it has expired there);
	// the claim is released, and the withdrawal may be sent again.
	VerdictNotSent
)

// String returns the verdict's name: "unknown", "sent", "not sent".
func (v Verdict) String() string {
	switch v {
	case VerdictUnknown:
		return "unknown"
	case VerdictSent:
		return "sent"
	case VerdictNotSent:
		return "not sent"
	}
	return fmt.Sprintf("Verdict(%d)", uint8(v))
}

// Finding is a RailCheck's answer about one claim.
type Finding[R driver.Fingerprinter] struct {
	Verdict Verdict
	Outcome R // what the rail shows, for VerdictSent
}

// RailCheck asks the rail what happened to a claim's request, and answers
// with the rail's evidence only: VerdictNotSent only when the rail affirms
// that the request was not sent and can no longer be, and VerdictUnknown
// whenever it cannot tell. An error leaves the claim as it is. It is the
// service's, and it must be safe for concurrent use when Reconcile runs from
// several goroutines or instances.
type RailCheck[R driver.Fingerprinter] func(ctx context.Context, c Claim) (Finding[R], error)

// ReconcileReport is what Reconcile did, claim by claim, each list oldest
// first.
type ReconcileReport struct {
	// Resolved are the claims the rail found sent, now resolved with the
	// outcome it shows: by this call, or already, with the same outcome, by
	// another reconciler or operator.
	Resolved []Claim
	// Released are the claims the rail affirmed not sent, now released: by
	// this call, or already by another reconciler or operator (the claim was
	// gone when this call acted; a later claim of the key was left alone).
	Released []Claim
	// Unknown are the claims the rail could not tell about, left in flight.
	Unknown []Claim
	// Skipped are the claims left in flight for their send may still run:
	// those this ledger is sending, unchecked, and those the rail found not
	// sent whose send is not known to have ended (Claim.Send): a send still
	// under way may reach the rail after the check. An operator who knows
	// otherwise releases them with Release and Force.
	Skipped []Claim
	// Failed are the claims whose check failed, or whose action was refused
	// or failed, each with its error; the rail's finding contradicted
	// another's action (resolved with another outcome, released although
	// sent) is here too.
	Failed []ClaimError
}

// ClaimError is a claim Reconcile could not close, and why.
type ClaimError struct {
	Claim Claim
	Err   error
}

// Error names the claim's key and gives its error.
func (e ClaimError) Error() string {
	return fmt.Sprintf("request key %s: %v", e.Claim.Key, e.Err)
}

// Unwrap returns the claim's error.
func (e ClaimError) Unwrap() error { return e.Err }

// reconcilePage is how many claims Reconcile lists at a time.
const reconcilePage = DefaultListLimit

// Reconcile closes the keys in flight claimed at least olderThan ago (by the
// ledger's clock, when Reconcile starts) from the rail's evidence: it walks
// them oldest first, skips the claims this ledger is sending, and asks check
// about each other. VerdictSent resolves the claim with the outcome found
// (ResolveClaim), VerdictNotSent releases it (ReleaseClaim) when its send is
// known to have ended, and skips it otherwise, VerdictUnknown
// leaves it in flight; every claim is in the report. Every action is on the
// listed claim's token, so Reconcile is safe from several goroutines and
// instances at once and while sends run: what another has closed meanwhile
// is left as it is. Claims made after Reconcile starts are left for the next
// run.
//
// It returns the report and nil once every claim is walked, whatever each
// claim's fate; ctx's error with the report so far when ctx ends;
// ErrNotSupported when the store is not a Lister; ErrStoreFailed, with the
// report so far, when listing fails.
func (a *Admin[R]) Reconcile(ctx context.Context, olderThan time.Duration, check RailCheck[R]) (ReconcileReport, error) {
	var rep ReconcileReport
	if check == nil {
		return rep, errors.New("submissions: Reconcile with a nil RailCheck")
	}
	if err := ctx.Err(); err != nil {
		return rep, err
	}
	q := driver.ListQuery{ClaimedBefore: time.Now().Add(-max(olderThan, 0)), Limit: reconcilePage}
	for {
		page, err := a.list(ctx, q)
		if err != nil {
			if cerr := ctx.Err(); cerr != nil {
				return rep, cerr
			}
			return rep, err
		}
		for _, c := range page {
			if err := ctx.Err(); err != nil {
				return rep, err
			}
			if c.Sending {
				rep.Skipped = append(rep.Skipped, c)
				continue
			}
			f, err := check(ctx, c)
			if err != nil {
				if cerr := ctx.Err(); cerr != nil {
					return rep, cerr
				}
				rep.Failed = append(rep.Failed, ClaimError{c, fmt.Errorf("rail check: %w", err)})
				continue
			}
			a.act(ctx, c, f, &rep)
		}
		if len(page) < q.Limit {
			return rep, nil
		}
		last := page[len(page)-1]
		q.After = &driver.InFlight{Tenant: last.Tenant, Key: last.Key, ClaimedAt: last.ClaimedAt}
	}
}

// act closes c as f says, and reports it in rep.
func (a *Admin[R]) act(ctx context.Context, c Claim, f Finding[R], rep *ReconcileReport) {
	var err error
	switch f.Verdict {
	case VerdictUnknown:
		rep.Unknown = append(rep.Unknown, c)
		return
	case VerdictSent:
		if err = a.ResolveClaim(ctx, c, f.Outcome); err == nil {
			rep.Resolved = append(rep.Resolved, c)
			return
		}
	case VerdictNotSent:
		err = a.ReleaseClaim(ctx, c)
		switch {
		case err == nil, errors.Is(err, ErrClaimChanged):
			rep.Released = append(rep.Released, c)
			return
		case errors.Is(err, engine.ErrSubmissionInFlight): // its send may still run
			rep.Skipped = append(rep.Skipped, c)
			return
		}
	default:
		err = fmt.Errorf("rail check: %v is not a verdict", f.Verdict)
	}
	rep.Failed = append(rep.Failed, ClaimError{c, err})
}

// DefaultPruneBatch is the batch of Admin.Prune when it is given none.
const DefaultPruneBatch = 1000

// Prune turns the records settled before before (by the store's clock) into
// tombstones, oldest first, in batches of at most batch records (0 or less
// for DefaultPruneBatch), until a batch prunes fewer than batch or ctx ends,
// and returns how many it pruned. A record in flight is never pruned. A
// tombstone keeps the request key and its claim of the withdrawal, so that
// neither is ever sent again; its fingerprint and outcome are dropped: a
// later call on the key, or on the withdrawal under another key, gets
// ErrPruned instead of the outcome (see docs/operations.md for the horizon
// to choose). Each pruned record is reported to the observer as
// EventPruned.
//
// It refuses, pruning nothing, a horizon in the future or later than now
// minus the minimum retention (DefaultMinRetention, or WithMinRetention's),
// with an error wrapping ErrHorizonTooRecent that names both. It returns
// ErrNotSupported when the store is not a Pruner; ctx's error, with the
// count so far, when ctx ends; ErrStoreFailed, with the count so far, when
// the store fails. Prunes may run at once, from several goroutines or
// instances, and with every other call.
func (a *Admin[R]) Prune(ctx context.Context, before time.Time, batch int) (int, error) {
	now := time.Now()
	switch {
	case before.After(now):
		return 0, fmt.Errorf("%w: %s is in the future", ErrHorizonTooRecent, before.UTC().Format(time.RFC3339Nano))
	case before.After(now.Add(-a.state().MinRetention())):
		return 0, fmt.Errorf("%w: %s is later than the minimum retention, %v, ago", ErrHorizonTooRecent,
			before.UTC().Format(time.RFC3339Nano), a.state().MinRetention())
	}
	if batch <= 0 {
		batch = DefaultPruneBatch
	}
	return a.state().Ledger().Prune(ctx, before, batch)
}
