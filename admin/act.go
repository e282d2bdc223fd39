package admin

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/idemledger/submissions/driver"
	"github.com/idemledger/submissions/internal/engine"
)

// Decision is what an operator's action did.
type Decision uint8

// The decisions of Resolve and Release.
const (
	// Changed: the ledger changed as the action asked.
	Changed Decision = iota + 1
	// Unchanged: the ledger already was as the action asked; nothing
	// changed.
	Unchanged
	// Refused: a rule refused the action (Result.Rule names it); nothing
	// changed.
	Refused
	// Failed: the store failed, or ctx ended: before the action was made
	// (the message says nothing changed), or while it was made (it may or
	// may not stand). Show the key again to know.
	Failed
)

// String returns the decision's name: "changed", "unchanged", "refused",
// "failed".
func (d Decision) String() string {
	switch d {
	case Changed:
		return "changed"
	case Unchanged:
		return "unchanged"
	case Refused:
		return "refused"
	case Failed:
		return "failed"
	}
	return "Decision(" + strconv.Itoa(int(d)) + ")"
}

// Rule names why an action was refused or failed, in a word a program can
// switch on.
type Rule string

// The rules of Resolve and Release.
const (
	RuleInvalidTenant     Rule = "invalid-tenant"      // the tenant is not valid
	RuleInvalidKey        Rule = "invalid-key"         // the key is empty, too long, or not valid text
	RuleInvalidOutcome    Rule = "invalid-outcome"     // the outcome breaks the fingerprint's rules or the service's own
	RuleUnknownKey        Rule = "unknown-key"         // the key has no record in the tenant
	RuleTokenDiffers      Rule = "token-differs"       // the key's claim has another token than the one given
	RulePruned            Rule = "pruned"              // the key was settled, then pruned
	RuleOtherWithdrawal   Rule = "other-withdrawal"    // the outcome is for another withdrawal
	RuleFieldDiffers      Rule = "field-differs"       // the outcome's amount, currency or destination is not the claim's
	RuleAnotherOutcome    Rule = "another-outcome"     // the key has another outcome
	RuleHasOutcome        Rule = "has-outcome"         // a key with an outcome is never released
	RuleAnswered          Rule = "answered"            // a claim whose send got an answer that was not recorded is never released
	RuleNoAnswer          Rule = "no-answer"           // resolve with the answer: the claim has none kept
	RuleSendRunning       Rule = "send-running"        // release: this ledger is running the claim's send
	RuleSendMayRun        Rule = "send-may-be-running" // no send of the claim is known to have ended
	RuleClaimChanged      Rule = "claim-changed"       // the claim changed while the action ran
	RuleWithdrawalClaimed Rule = "withdrawal-claimed"  // resolve of an unknown key: another key claims the withdrawal
	RuleStoreFailed       Rule = "store-failed"        // the store failed
	RuleContextEnded      Rule = "context-ended"       // ctx ended
)

// Target names the claim an operator acts on.
type Target struct {
	Tenant string // "" for the default tenant
	Key    string // the request key; trimmed of white space
	// Token is the claim's token as the operator saw it listed; 0 acts on
	// the key's claim, whatever its token.
	Token driver.Token
	// Force acts on a claim whose send may still be running: one this
	// ledger is sending (Resolve only: Release refuses it always), or one
	// no send is known to have ended (see Claim.Abandoned).
	Force bool
	// ClaimUnknown makes Resolve record a key that has no record with the
	// outcome, claiming its withdrawal if no other key holds it, as the
	// service's own Resolve does, rather than refuse it. Release ignores it.
	ClaimUnknown bool
}

// Result is what an operator's action did, for every door (a program, an
// HTTP API, a command line) to tell alike.
type Result struct {
	Action   string   // "resolve" or "release"
	Decision Decision // what it did
	Rule     Rule     // why, when Refused or Failed
	// Field names what the rule is about, when one thing: "tenant", "key",
	// "token", "outcome", "withdrawal_id", "amount", "currency",
	// "destination".
	Field string
	// Claim is the key's claim as the action found it: Tenant and Key
	// always, the rest when the key has a record.
	Claim Claim
	// State is the key's state as the action found it: "in flight",
	// "done", "pruned", or "" when it has no record.
	State   string
	Message string // what happened, one sentence
	Next    string // what the operator may do next; "" when nothing
	Err     error  // the error, when Refused or Failed
}

// OK reports whether the ledger is as the action asked: Changed or
// Unchanged.
func (r Result) OK() bool { return r.Decision == Changed || r.Decision == Unchanged }

// Resolve records outcome, the rail's answer, as the outcome of t's claim:
// "I looked at the rail, here is what happened". The outcome must pass the
// Admin's outcome check (WithOutcomeCheck) and be for the claim's
// withdrawal, field by field. A claim whose send may still be running
// needs t.Force. The same outcome again is Unchanged; another outcome is
// Refused.
func (a *Admin[R]) Resolve(ctx context.Context, t Target, outcome R) Result {
	r := Result{Action: "resolve", Claim: Claim{Tenant: t.Tenant, Key: t.Key}}
	found, ok := a.look(ctx, t, &r)
	if !ok {
		return r
	}
	if why, err := a.checkOutcome(r.Claim.Key, outcome); err != nil {
		return r.refuse(RuleInvalidOutcome, "outcome", err, fmt.Sprintf("the outcome is not valid: %s: nothing changed", why),
			"give the outcome as the rail shows it, once it is final, for the claim's withdrawal")
	}
	if !found.Found && t.ClaimUnknown {
		return a.claimUnknown(ctx, &r, outcome)
	}
	if !found.Found {
		return a.unknown(&r, t)
	}
	rec := found.Record
	switch {
	case t.Token != 0 && rec.Token != t.Token:
		return r.tokenDiffers(t.Token)
	case rec.Pruned:
		return r.pruned()
	}
	if field, msg := differs(rec.Fingerprint, outcome.Fingerprint()); field != "" {
		rule, next := RuleFieldDiffers, "give the claim's withdrawal as it was claimed, with what the rail shows"
		if field == "withdrawal_id" {
			rule, next = RuleOtherWithdrawal, "resolve the key that claims that withdrawal instead (show it)"
		}
		return r.refuse(rule, field, fmt.Errorf("%w: request key %s: %s", driver.ErrIdempotencyConflict, r.Claim.Key, msg), msg+": nothing changed", next)
	}
	if !rec.Done {
		if res, refused := mayRun(r, found, t, "resolving it now records your outcome while the rail may still answer otherwise"); refused {
			return res
		}
	}
	err := a.state().Ledger().Resolve(ctx, r.Claim.Tenant, r.Claim.Key, rec.Token, outcome)
	switch {
	case err == nil && rec.Done:
		r.Decision = Unchanged
		r.Message = fmt.Sprintf("request key %s in %s already has this outcome: nothing changed", r.Claim.Key, tenantName(r.Claim.Tenant))
		return r
	case err == nil:
		r.Decision = Changed
		r.Message = fmt.Sprintf("resolved request key %s in %s (token %d): its retries get this outcome", r.Claim.Key, tenantName(r.Claim.Tenant), rec.Token)
		if !found.Record.Abandoned {
			r.Message += "; if its send still answers, the answer is logged, not recorded"
		}
		return r
	case errors.Is(err, driver.ErrIdempotencyConflict) && rec.Done:
		return r.refuse(RuleAnotherOutcome, "outcome", err,
			fmt.Sprintf("request key %s has another outcome: nothing changed (an outcome is never replaced)", r.Claim.Key),
			"show the key for the outcome it has")
	}
	return a.after(&r, err)
}

// ResolveWithAnswer resolves t's claim with the answer its send got from
// the rail, which was not recorded then and is kept with the claim
// (Claim.Answered): "the rail answered, record what it said". It is
// Resolve with that answer, and refuses a claim without one kept
// (RuleNoAnswer).
func (a *Admin[R]) ResolveWithAnswer(ctx context.Context, t Target) Result {
	r := Result{Action: "resolve", Claim: Claim{Tenant: t.Tenant, Key: t.Key}}
	found, ok := a.look(ctx, t, &r)
	switch {
	case !ok:
		return r
	case !found.Found:
		return a.unknown(&r, t)
	case t.Token != 0 && found.Record.Token != t.Token:
		return r.tokenDiffers(t.Token)
	case found.Record.Answer == nil:
		return r.refuse(RuleNoAnswer, "outcome", fmt.Errorf("%w: request key %s has no answer of its send kept", ErrInvalidOutcome, r.Claim.Key),
			fmt.Sprintf("request key %s has no answer of its send kept (state %s, send %s): nothing changed", r.Claim.Key, r.State, r.Claim.Send()),
			"resolve it with what the rail shows")
	}
	t.Token = found.Record.Token // the claim whose answer it is
	return a.Resolve(ctx, t, *found.Record.Answer)
}

// Release drops t's claim, freeing its withdrawal to be sent again: "I
// looked at the rail, nothing was sent". A claim this ledger is sending is
// refused; a claim no send is known to have ended needs t.Force. A key
// without a record in t's tenant is refused, as Resolve refuses it
// (RuleUnknownKey): it was released already, or never claimed there.
func (a *Admin[R]) Release(ctx context.Context, t Target) Result {
	r := Result{Action: "release", Claim: Claim{Tenant: t.Tenant, Key: t.Key}}
	found, ok := a.look(ctx, t, &r)
	if !ok {
		return r
	}
	rec := found.Record
	switch {
	case !found.Found:
		return a.unknown(&r, t)
	case t.Token != 0 && rec.Token != t.Token:
		return r.tokenDiffers(t.Token)
	case rec.Pruned:
		return r.pruned()
	case rec.Done:
		return r.refuse(RuleHasOutcome, "", fmt.Errorf("%w: request key %s has an outcome", driver.ErrIdempotencyConflict, r.Claim.Key),
			fmt.Sprintf("request key %s has an outcome, so its withdrawal was settled: a key with an outcome is never released; nothing changed", r.Claim.Key),
			"show the key for its outcome")
	case rec.Answered:
		return r.refuse(RuleAnswered, "", fmt.Errorf("%w: request key %s has an answer of its send that was not recorded: %w", driver.ErrIdempotencyConflict, r.Claim.Key, engine.ErrAbandoned),
			fmt.Sprintf("request key %s's send got an answer from the rail that was not recorded: money moved, so the claim is never released, with force or without; nothing changed", r.Claim.Key),
			"resolve it with its answer (show the key), or with what the rail shows")
	case found.Sending:
		return r.refuse(RuleSendRunning, "", fmt.Errorf("%w: request key %s", engine.ErrSubmissionInFlight, r.Claim.Key),
			fmt.Sprintf("request key %s's send is running in this process: releasing it could send the withdrawal twice; nothing changed", r.Claim.Key),
			"wait for the send to end, then look at the rail")
	}
	if res, refused := mayRun(r, found, t, "releasing it could send the withdrawal twice"); refused {
		return res
	}
	err := a.state().Ledger().Release(ctx, r.Claim.Tenant, r.Claim.Key, rec.Token)
	if err == nil {
		r.Decision = Changed
		r.Message = fmt.Sprintf("released request key %s in %s (token %d): withdrawal %s may be sent again", r.Claim.Key, tenantName(r.Claim.Tenant), rec.Token, rec.Fingerprint.WithdrawalID)
		return r
	}
	return a.after(&r, err)
}

// look checks t and finds its key's record, filling r's claim; it returns
// false with r decided when the action ends there.
func (a *Admin[R]) look(ctx context.Context, t Target, r *Result) (engine.Looked[R], bool) {
	found, err := a.state().Ledger().Look(ctx, t.Tenant, t.Key)
	if found.Key != "" {
		r.Claim.Key = found.Key
	}
	switch {
	case errors.Is(err, engine.ErrInvalidTenant):
		*r = r.refuse(RuleInvalidTenant, "tenant", err, fmt.Sprintf("the tenant is not valid: %v: nothing changed", err),
			"list the keys in flight, and give a tenant as listed")
		return found, false
	case errors.Is(err, engine.ErrInvalidKey):
		*r = r.refuse(RuleInvalidKey, "key", err, fmt.Sprintf("the request key is not valid: %v: nothing changed", err),
			"list the keys in flight, and give a key as listed")
		return found, false
	case err != nil:
		*r = r.fail(err, "nothing changed")
		return found, false
	}
	if found.Found {
		rec := found.Record
		r.Claim.Fingerprint, r.Claim.Token = rec.Fingerprint, rec.Token
		r.Claim.Sending, r.Claim.Abandoned, r.Claim.Answered = found.Sending, rec.Abandoned, rec.Answered
		r.State = "in flight"
		switch {
		case rec.Pruned:
			r.State = "pruned"
		case rec.Done:
			r.State = "done"
		}
	}
	return found, true
}

// claimUnknown records outcome on a key that had no record, claiming its
// withdrawal.
func (a *Admin[R]) claimUnknown(ctx context.Context, r *Result, outcome R) Result {
	err := a.state().Ledger().Resolve(ctx, r.Claim.Tenant, r.Claim.Key, 0, outcome)
	if err == nil {
		r.Decision = Changed
		r.Message = fmt.Sprintf("recorded request key %s in %s with this outcome: its withdrawal is claimed, and its retries get the outcome", r.Claim.Key, tenantName(r.Claim.Tenant))
		return *r
	}
	return a.after(r, err)
}

// unknown decides an action on a key without a record.
func (a *Admin[R]) unknown(r *Result, t Target) Result {
	msg := fmt.Sprintf("request key %s has no record in %s (never claimed there, or released): nothing changed", r.Claim.Key, tenantName(t.Tenant))
	return r.refuse(RuleUnknownKey, "key", fmt.Errorf("%w: %s in %s", engine.ErrUnknownKey, r.Claim.Key, tenantName(t.Tenant)), msg,
		"check the key and the tenant; list the keys in flight")
}

// mayRun refuses, unless t.Force, an action on found's claim in flight
// whose send is not known to have ended: risk says what acting would risk.
// Its rule is the same whether the send runs in this ledger or may run in
// another; its words say which, as the listing does.
func mayRun[R any](r Result, found engine.Looked[R], t Target, risk string) (Result, bool) {
	if t.Force || found.Record.Abandoned && !found.Sending {
		return r, false
	}
	where, next := "is not known to have ended (it may be running elsewhere: in another process, or under another ledger)",
		"look at the rail; once it shows the transfer's final state, act again with force"
	if found.Sending {
		where, next = "is running in this process", "wait for the send to end, then look at the rail"
	}
	return r.refuse(RuleSendMayRun, "", fmt.Errorf("%w: request key %s", engine.ErrSubmissionInFlight, r.Claim.Key),
		fmt.Sprintf("request key %s's send %s: %s; nothing changed", r.Claim.Key, where, risk), next), true
}

// after decides an action whose ledger call failed with err after the look.
func (a *Admin[R]) after(r *Result, err error) Result {
	var ce *driver.ConflictError
	switch {
	case errors.As(err, &ce):
		pruned := ""
		if ce.Pruned {
			pruned = ", which was settled, then pruned"
		}
		return r.refuse(RuleWithdrawalClaimed, "withdrawal_id", err,
			fmt.Sprintf("withdrawal %s is claimed by request key %s%s, not by %s: nothing changed", ce.WithdrawalID, ce.Holder, pruned, r.Claim.Key),
			"show the key that claims the withdrawal")
	case errors.Is(err, engine.ErrClaimChanged), errors.Is(err, engine.ErrSubmissionInFlight):
		return r.refuse(RuleClaimChanged, "", err,
			fmt.Sprintf("request key %s's claim changed while the %s ran (released, resolved or claimed again): this action changed nothing", r.Claim.Key, r.Action),
			"show the key again")
	case errors.Is(err, driver.ErrIdempotencyConflict) && r.Action == "release" && errors.Is(err, engine.ErrAbandoned):
		return r.refuse(RuleAnswered, "", err,
			fmt.Sprintf("request key %s's send got an answer from the rail that was not recorded while the release ran: money moved, so the claim is never released; nothing changed", r.Claim.Key),
			"resolve it with its answer (show the key), or with what the rail shows")
	case errors.Is(err, driver.ErrIdempotencyConflict) && r.Action == "release":
		return r.refuse(RuleHasOutcome, "", err,
			fmt.Sprintf("request key %s was resolved while the release ran, so its withdrawal was settled: a key with an outcome is never released; nothing changed", r.Claim.Key),
			"show the key for its outcome")
	case errors.Is(err, driver.ErrIdempotencyConflict):
		return r.refuse(RuleAnotherOutcome, "outcome", err,
			fmt.Sprintf("request key %s was resolved with another outcome while the %s ran: nothing changed by this action", r.Claim.Key, r.Action),
			"show the key for the outcome it has")
	case errors.Is(err, driver.ErrPruned):
		return r.pruned()
	}
	return r.fail(err, "the "+r.Action+" may or may not stand")
}

// refuse returns r refused by rule.
func (r Result) refuse(rule Rule, field string, err error, msg, next string) Result {
	r.Decision, r.Rule, r.Field, r.Err, r.Message, r.Next = Refused, rule, field, err, msg, next
	return r
}

// fail returns r failed with err; stands says whether the action stands.
func (r Result) fail(err error, stands string) Result {
	r.Decision, r.Rule, r.Err = Failed, RuleStoreFailed, err
	r.Next = "show the key to know, and act again if it is still in flight"
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		r.Rule = RuleContextEnded
	}
	r.Message = fmt.Sprintf("%v: %s", err, stands)
	return r
}

func (r Result) tokenDiffers(given driver.Token) Result {
	return r.refuse(RuleTokenDiffers, "token", fmt.Errorf("%w: request key %s", engine.ErrClaimChanged, r.Claim.Key),
		fmt.Sprintf("request key %s's claim is token %d, not %d: nothing changed", r.Claim.Key, r.Claim.Token, given),
		"show the key, look at the rail for that claim, and act on the token shown")
}

func (r Result) pruned() Result {
	return r.refuse(RulePruned, "", fmt.Errorf("%w: request key %s", driver.ErrPruned, r.Claim.Key),
		fmt.Sprintf("request key %s was settled, then pruned: its outcome is no longer kept, and it is never resolved or released; nothing changed", r.Claim.Key),
		"look at the rail, or the service's own records, for what was sent")
}

// differs compares got, an outcome's fingerprint, with want, a claim's:
// the first field that differs, named as JSON names it, and a sentence
// that says how they differ; "" when they are the same withdrawal.
func differs(want, got driver.Fingerprint) (field, msg string) {
	bits := engine.Differing(&want, &got)
	if bits&engine.WithdrawalIDField != 0 {
		return "withdrawal_id", fmt.Sprintf("the outcome is for withdrawal %q, not the claim's %q", got.WithdrawalID, want.WithdrawalID)
	}
	var how []string
	for _, f := range []struct {
		bit       int
		name      string
		got, want string
	}{
		{engine.AmountField, "amount", got.Amount, want.Amount},
		{engine.CurrencyField, "currency", got.Currency, want.Currency},
		{engine.DestinationField, "destination", got.Destination, want.Destination},
	} {
		if bits&f.bit != 0 {
			if field == "" {
				field = f.name
			}
			how = append(how, fmt.Sprintf("%s %q is not the claim's %q", f.name, f.got, f.want))
		}
	}
	if field == "" {
		return "", ""
	}
	return field, "the outcome differs from the claim's withdrawal: " + strings.Join(how, ", ")
}

// tenantName names tenant in a sentence.
func tenantName(tenant string) string {
	if tenant == "" {
		return "the default tenant"
	}
	return "tenant " + strconv.Quote(tenant)
}
