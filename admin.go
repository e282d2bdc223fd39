package submissions

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Admin is the operator's side of a ledger: calls across tenants (listing
// the keys in flight, reconciling them with the rail), and actions on one
// listed claim by its token, so that an action meant for a claim never lands
// on a later claim of the same key. Its listing and reconciliation need a
// Store that is a Lister, as the memory store and pgstore are.
//
// An Admin is safe for concurrent use, and several Admins, on one ledger or
// on ledgers sharing a store, may act on the same claims at once: an action
// on a claim that another has closed meanwhile changes nothing.
type Admin[R Fingerprinter] struct {
	sh *shared[R]
}

// Admin returns the operator's side of the ledger. A tenant's view returns
// the whole ledger's: Admin works across tenants.
func (s *Submissions[R]) Admin() *Admin[R] {
	return &Admin[R]{sh: s.state()}
}

// Claim is a key in flight, as Admin lists it.
type Claim struct {
	Tenant      string      // "" for the default tenant
	Key         string      // the request key
	Fingerprint Fingerprint // the request, canonical
	ClaimedAt   time.Time   // when the store made the claim, by its clock
	Token       Token       // the claim's token, which Admin's actions match
	Sending     bool        // this ledger is running its send right now
	Abandoned   bool        // a send of it ended without an answer (Record.Abandoned), when the store knows it
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
	lq := ListQuery{Tenants: q.Tenants, After: q.After, Limit: q.Limit}
	if q.OlderThan > 0 {
		lq.ClaimedBefore = time.Now().Add(-q.OlderThan)
	}
	return a.list(ctx, lq)
}

// list checks q, bounds its limit, and lists the claims it selects.
func (a *Admin[R]) list(ctx context.Context, q ListQuery) ([]Claim, error) {
	for _, tenant := range q.Tenants {
		if err := ValidateTenant(tenant); err != nil {
			return nil, err
		}
	}
	switch {
	case q.Limit <= 0:
		q.Limit = DefaultListLimit
	case q.Limit > MaxListLimit:
		q.Limit = MaxListLimit
	}
	claims, err := a.sh.be.listInFlight(ctx, q)
	switch {
	case errors.Is(err, errNotLister):
		return nil, fmt.Errorf("%w: the store cannot list its claims in flight (it is not a Lister)", ErrNotSupported)
	case err != nil:
		return nil, fmt.Errorf("%w: list the claims in flight: %w", ErrStoreFailed, err)
	}
	return claims, nil
}

// checkClaim returns c's key, trimmed, or the error of an invalid tenant or
// key, or of a ctx that has ended.
func checkClaim(ctx context.Context, c *Claim) (string, error) {
	if err := ValidateTenant(c.Tenant); err != nil {
		return "", err
	}
	key, err := validKey(c.Key)
	if err != nil {
		return "", err
	}
	return key, ctx.Err()
}

// ResolveClaim records outcome on the claim c, a claim listed by InFlight,
// as Resolve does on a key: "I looked at the rail, here is what happened".
// It acts only on c's token in c's tenant. The outcome's fingerprint must be
// the claim's. It returns nil when the outcome is recorded, or was already;
// ErrIdempotencyConflict when the claim has another outcome or withdrawal;
// ErrClaimChanged when the claim is gone (released, and perhaps claimed
// again: the new claim is left as it is); ErrStoreFailed when the store
// fails (the outcome may or may not stand: ResolveClaim again to know); and
// the refusals of Resolve for an invalid tenant, key or outcome.
func (a *Admin[R]) ResolveClaim(ctx context.Context, c Claim, outcome R) error {
	key, err := checkClaim(ctx, &c)
	if err != nil {
		return err
	}
	sh := a.sh
	if sh.nilable && isNil(outcome) {
		return errNilRequest(outcome)
	}
	fp := outcome.Fingerprint()
	if err := normalize(&fp); err != nil {
		return err
	}
	rec, ok, err := sh.be.Lookup(ctx, c.Tenant, key)
	switch {
	case err != nil:
		return fromStore(key, "lookup", err)
	case !ok || rec.Token != c.Token:
		return claimChanged(key)
	case rec.Pruned:
		return prunedKey(key)
	case differing(&fp, &rec.Fingerprint) != 0:
		return keyTaken(key)
	case !rec.Done:
		var settled bool
		if rec, settled, err = sh.be.Settle(ctx, c.Tenant, key, c.Token, outcome); err != nil {
			return fromStore(key, "record", err)
		}
		if settled {
			sh.report(ctx, c.Tenant, EventResolved, key, fp.WithdrawalID, 0, nil)
			return nil
		}
		if !rec.Done { // released meanwhile
			return claimChanged(key)
		}
	}
	return sameAsRecorded(key, rec.Outcome, outcome)
}

// ReleaseClaim drops the claim c, a claim listed by InFlight, as Release
// does a key: "I looked at the rail, nothing was sent". It acts only on c's
// token in c's tenant. It returns nil when the claim is released;
// ErrSubmissionInFlight while this ledger is running its send;
// ErrIdempotencyConflict when the claim has an outcome; ErrClaimChanged when
// the claim is gone (released, and perhaps claimed again: the new claim is
// left as it is); ctx's error when ctx ends while it waits for this ledger's
// claim of the key to come back from the store; ErrStoreFailed when the
// store fails (the release may or may not stand: ReleaseClaim again to
// know); and ErrInvalidTenant or ErrInvalidKey for an invalid claim.
func (a *Admin[R]) ReleaseClaim(ctx context.Context, c Claim) error {
	key, err := checkClaim(ctx, &c)
	if err != nil {
		return err
	}
	rec, released, err := a.sh.be.releaseClaim(ctx, c.Tenant, key, c.Token)
	switch {
	case errors.Is(err, errSending):
		return inFlight(key)
	case errors.Is(err, errWaitEnded):
		return fmt.Errorf("request key %s: %w", key, err)
	case err != nil:
		return fromStore(key, "release", err)
	case released:
		a.sh.report(ctx, c.Tenant, EventReleased, key, rec.Fingerprint.WithdrawalID, 0, nil)
		return nil
	case rec.Pruned:
		return prunedKey(key)
	case rec.Done:
		return hasOutcome(key, "an outcome")
	}
	return claimChanged(key)
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
type Finding[R Fingerprinter] struct {
	Verdict Verdict
	Outcome R // what the rail shows, for VerdictSent
}

// RailCheck asks the rail what happened to a claim's request, and answers
// with the rail's evidence only: VerdictNotSent only when the rail affirms
// that the request was not sent and can no longer be, and VerdictUnknown
// whenever it cannot tell. An error leaves the claim as it is. It is the
// service's, and it must be safe for concurrent use when Reconcile runs from
// several goroutines or instances.
type RailCheck[R Fingerprinter] func(ctx context.Context, c Claim) (Finding[R], error)

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
	// Skipped are the claims this ledger is sending, left alone unchecked.
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
// (ResolveClaim), VerdictNotSent releases it (ReleaseClaim), VerdictUnknown
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
	q := ListQuery{ClaimedBefore: time.Now().Add(-max(olderThan, 0)), Limit: reconcilePage}
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
		q.After = &page[len(page)-1]
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
		case errors.Is(err, ErrSubmissionInFlight): // its send started meanwhile
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
// ErrPruned (see the README for the horizon to choose). Each pruned record is
// reported to the observer as EventPruned.
//
// It returns ErrNotSupported when the store is not a Pruner; ctx's error,
// with the count so far, when ctx ends; ErrStoreFailed, with the count so
// far, when the store fails. Prunes may run at once, from several
// goroutines or instances, and with every other call.
func (a *Admin[R]) Prune(ctx context.Context, before time.Time, batch int) (int, error) {
	p := a.sh.pruner()
	if p == nil {
		return 0, fmt.Errorf("%w: the store cannot prune (it is not a Pruner)", ErrNotSupported)
	}
	if batch <= 0 {
		batch = DefaultPruneBatch
	}
	total := 0
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		pruned, err := p.Prune(ctx, before, batch)
		if err != nil {
			if cerr := ctx.Err(); cerr != nil {
				return total, cerr
			}
			return total, fmt.Errorf("%w: prune: %w", ErrStoreFailed, err)
		}
		total += len(pruned)
		for _, r := range pruned {
			a.sh.report(ctx, r.Tenant, EventPruned, r.Key, r.WithdrawalID, 0, nil)
		}
		if len(pruned) < batch {
			return total, nil
		}
	}
}

// pruner returns the ledger's Store as a Pruner, or nil when it is not one.
func (sh *shared[R]) pruner() Pruner {
	if sh.mem != nil {
		return sh.mem
	}
	if g, ok := sh.be.(*guard[R]); ok {
		if p, ok := g.Store.(Pruner); ok {
			return p
		}
	}
	return nil
}
