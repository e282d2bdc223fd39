// Package verify holds the ledger's semantics in executable form: Model is a
// small, sequential, obviously correct ledger, the rules of the README as a
// pure function of state and operation. The tests of this module check the
// real ledger, on every store, against it.
package verify

import (
	"fmt"
	"maps"
	"math/big"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/idemledger/submissions"
)

// W is the withdrawal the checks submit.
type W struct {
	ID, Amount, Currency, Dest, TxHash string
}

// Fingerprint implements submissions.Fingerprinter.
func (w W) Fingerprint() submissions.Fingerprint {
	return submissions.Fingerprint{WithdrawalID: w.ID, Amount: w.Amount, Currency: w.Currency, Destination: w.Dest}
}

// Kind is what an operation does.
type Kind int

// The operations of the ledger, and the two halves of a Submit that sends.
const (
	Submit Kind = iota
	Resolve
	Release
	Outcome
	ClaimedBy
	// Claim is a Submit up to the moment it calls send, or to its return if
	// it does not: one atomic step of the store, which replays, refuses or
	// claims.
	Claim
	// Settle is a Submit that claimed, from send's return to its own: one
	// atomic step that records the rail's answer on the Submit's claim, or
	// records nothing.
	Settle
	// Prune is Admin.Prune with a horizon after every record: every done
	// record of every tenant becomes a tombstone, which keeps its key and
	// its claim of the withdrawal and drops the rest.
	Prune
	// Wait is Submissions.Wait, at a moment when no send of the key's claim
	// runs: the outcome of a done key; OutcomeUnknown for a key in flight,
	// whose sends have all ended without an answer (abandoned, whatever
	// ended them: the rail, or the store that failed to record its answer);
	// UnknownKey for a key without a claim (never claimed, or released);
	// Pruned for a tombstone. A Wait for a claim being sent, by any ledger,
	// blocks (see Blocks) until the claim is settled, resolved or released,
	// through any ledger, or its send ends: Apply panics on one.
	Wait
)

// Send is what the rail does when a Submit calls it, and, for the Settle
// kinds, what the store does when the ledger records the rail's answer.
type Send int

// What a rail, and then the store, can do.
const (
	SendOK      Send = iota // returns the request, sent, with a transaction id
	SendNil                 // no send function: the request itself is the outcome
	SendFail                // returns an error
	SendPanic               // panics
	SendWrong               // returns the outcome of another withdrawal
	SendLate                // returns as SendOK does, after the caller's context ended
	SendBoth                // returns SendOK's answer together with an error
	SendNotSent             // returns an error wrapping ErrNotSent: the rail moved nothing
	// The Settle kinds: the rail answers as SendOK does, and the store,
	// as the ledger records the answer (the stores of the checks play
	// these faults when the Submit's ctx asks for them)
	SettleFails       // fails, having recorded nothing
	SettleFailsAfter  // records the answer, then fails: its reply is lost
	SettlePanics      // panics, having recorded nothing
	SettlePanicsAfter // records the answer, then panics
)

// lastSend is the last Send.
const lastSend = SettlePanicsAfter

// Op is one call on a ledger.
type Op struct {
	Kind Kind
	// Tenant is the tenant the call works in: the ledger runs it through
	// Tenant(Tenant). Every tenant has keys and claims of its own.
	Tenant string
	Key    string // Submit, Resolve, Release, Outcome, Claim, Settle, Wait
	W      W      // Submit, Claim, Settle: the request; Resolve: the outcome; ClaimedBy: W.ID
	Send   Send   // Submit, Settle
	// Force makes a Release the operator's, with force (admin.Target.Force):
	// a claim that no send is known to have ended is released, unless the
	// op's own ledger is sending it. Without it, a Release refuses a claim
	// that any ledger is sending.
	Force bool

	// Ledger names the ledger an operation runs on, as far as its marks go:
	// a ledger refuses to release a key while it is sending the key's
	// current claim. Ledgers that share the memory store natively share its
	// marks, and so share one number; a ledger on any other Store keeps
	// marks of its own and has a number of its own.
	Ledger int
	// ClaimID names a Submit's claim, for its Settle: an outcome is recorded
	// only on the claim its send ran under. The checks number claims from 1;
	// Apply's Submit, which claims and settles in one step, may leave it 0.
	ClaimID int
}

// Err is what an error means to the caller.
type Err int

// The errors a call can end with.
const (
	None           Err = iota
	Conflict           // *submissions.ConflictError: another key holds the withdrawal
	Idempotency        // submissions.ErrIdempotencyConflict otherwise
	InFlight           // submissions.ErrSubmissionInFlight
	OutcomeUnknown     // submissions.ErrOutcomeUnknown: the rail gave no answer
	SendPanicked       // the rail's panic, raised again by Submit
	StorePanicked      // the store's panic as it recorded the answer, raised again by Submit
	NotRecorded        // submissions.ErrOutcomeNotRecorded, with the rail's answer
	InvalidTenant      // submissions.ErrInvalidTenant
	Pruned             // submissions.ErrPruned: the key's record was pruned
	UnknownKey         // submissions.ErrUnknownKey: Wait's key has no claim
	NotSent            // submissions.ErrNotSent, with the rail's error: the claim was released, unless closed meanwhile
	Unexpected         // any other error, ErrStoreFailed included: no rule gives one here
)

// Result is what a call returned.
type Result struct {
	Err     Err
	Holder  string // Conflict: the holding key; ClaimedBy: the key
	Tenant  string // Conflict: the tenant the error names
	OK      bool   // Outcome, ClaimedBy
	Outcome W      // Submit, Claim (a replay), Outcome, Settle, Wait; with NotRecorded, the rail's answer
	Claimed bool   // Claim: the key was claimed, and send is called next
	Pruned  bool   // Conflict: the holder's record was pruned (the error is also ErrPruned)
}

// Sent is the outcome SendOK returns for w under key.
func Sent(w W, key string) W {
	w.TxHash = "tx-" + key
	return w
}

// Wrong is the answer SendWrong returns for w: another withdrawal's.
func Wrong(w W) W {
	w.ID += "x"
	return w
}

// Model is the ledger's semantics: per tenant, a map from key to record and
// one from withdrawal id to key, changed one operation at a time, and the
// marks of the claims that ledgers are sending. Its zero value is an empty
// ledger.
type Model struct {
	records map[name]entry  // a tenant's key -> its record
	claims  map[name]string // a tenant's withdrawal id -> the key that claims it
	marks   map[mark]bool
}

// name is a key or a withdrawal id in a tenant.
type name struct {
	tenant, id string
}

// ValidTenant reports whether a tenant id is one a ledger works in: the
// default tenant "", or at most 64 bytes of valid UTF-8 without NUL, taken
// exactly as given.
func ValidTenant(tenant string) bool {
	return len(tenant) <= 64 && utf8.ValidString(tenant) && !strings.Contains(tenant, "\x00")
}

// mark says that a ledger is sending a claim. Claims are numbered across
// tenants, so a mark needs no tenant.
type mark struct {
	ledger, claim int
}

// entry is a key's record: one claim.
type entry struct {
	fp      W // the request that claimed the key
	outcome W
	done    bool
	pruned  bool // a tombstone: done, its fingerprint (but its id) and outcome dropped
	claim   int  // the Submit's claim that made the record (Op.ClaimID); resolved for a Resolve
	// answered: in flight, and a send of it got an answer that was not
	// recorded: money moved, so it is never released
	answered bool
}

// resolved is the claim of a record that a Resolve made: no Submit's.
const resolved = -1

func (m *Model) init() {
	if m.records == nil {
		m.records, m.claims, m.marks = map[name]entry{}, map[name]string{}, map[mark]bool{}
	}
}

// Apply applies op and returns its result. A Submit is a Claim and, if it
// claimed, a Settle, with nothing between. Whatever its kind but Prune (which
// works across tenants), an operation in a tenant that is not valid changes
// nothing and is refused.
func (m *Model) Apply(op Op) Result {
	m.init()
	if op.Kind == Prune { // across tenants: op.Tenant is not looked at
		m.prune()
		return Result{}
	}
	if !ValidTenant(op.Tenant) {
		return Result{Err: InvalidTenant}
	}
	switch op.Kind {
	case Submit:
		if res := m.claim(op); !res.Claimed {
			return res
		}
		return m.settle(op)
	case Claim:
		return m.claim(op)
	case Settle:
		return m.settle(op)
	case Resolve:
		return m.resolve(op)
	case Release:
		return m.release(op)
	case Outcome:
		r, ok := m.records[keyOf(op)]
		if ok && r.pruned {
			return Result{Err: Pruned}
		}
		if !ok || !r.done {
			return Result{}
		}
		return Result{OK: true, Outcome: r.outcome}
	case ClaimedBy:
		key, ok := m.claims[withdrawalOf(op)]
		return Result{OK: ok, Holder: key}
	case Wait:
		return m.wait(op)
	}
	panic("verify: unknown operation")
}

// Step reports whether a ledger in state m may answer op with got, and the
// state it is in then; m is not changed. It is Apply, with the one answer
// the rules leave open: a Resolve that races a Release of the same key (an
// operator's, or that of a send that moved nothing) may
// find the key in flight, then released, record nothing and answer
// InFlight. Step cannot see the race; the check of a history that uses this
// allowance must see that a Release of the key overlapped the Resolve. A
// Wait that blocks in m (see Blocks) takes effect in no such state: Step
// answers false, and a history must place it later.
func (m *Model) Step(op Op, got Result) (bool, *Model) {
	if op.Kind == Wait && m.Blocks(op) {
		return false, nil
	}
	next := m.Clone()
	if next.Apply(op) == got {
		return true, next
	}
	if r, ok := m.records[keyOf(op)]; ok && op.Kind == Resolve && got == (Result{Err: InFlight}) &&
		!r.done && SameWithdrawal(r.fp, op.W) {
		return true, m
	}
	return false, nil
}

// Clone returns a copy of m that shares nothing with it.
func (m *Model) Clone() *Model {
	c := &Model{}
	c.init()
	maps.Copy(c.records, m.records)
	maps.Copy(c.claims, m.claims)
	maps.Copy(c.marks, m.marks)
	return c
}

// Equal reports whether m and o are in the same state.
func (m *Model) Equal(o *Model) bool {
	return maps.Equal(m.records, o.records) && maps.Equal(m.claims, o.claims) && maps.Equal(m.marks, o.marks)
}

// String describes m in a canonical form: two models are in the same state
// exactly when their strings are equal.
func (m *Model) String() string {
	var lines []string
	for k, r := range m.records {
		state := "in flight"
		if r.pruned {
			state = "pruned"
		} else if r.done {
			state = fmt.Sprintf("done %+v", r.outcome)
		}
		lines = append(lines, fmt.Sprintf("tenant %q key %s: %+v claim %d %s", k.tenant, k.id, r.fp, r.claim, state))
	}
	for id, k := range m.claims {
		lines = append(lines, fmt.Sprintf("tenant %q withdrawal %s: %s", id.tenant, id.id, k))
	}
	for mk := range m.marks {
		lines = append(lines, fmt.Sprintf("ledger %d sends claim %d", mk.ledger, mk.claim))
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// keyOf names op's key in op's tenant.
func keyOf(op Op) name { return name{op.Tenant, op.Key} }

// withdrawalOf names op's withdrawal in op's tenant.
func withdrawalOf(op Op) name { return name{op.Tenant, op.W.ID} }

// prune makes a tombstone of every done record.
func (m *Model) prune() {
	for k, r := range m.records {
		if r.done && !r.pruned {
			m.records[k] = entry{fp: W{ID: r.fp.ID}, done: true, pruned: true, claim: r.claim}
		}
	}
}

// holderOf is the refusal of op's withdrawal, claimed by another key.
func (m *Model) holderOf(op Op, holder string) Result {
	return Result{Err: Conflict, Holder: holder, Tenant: op.Tenant, Pruned: m.records[name{op.Tenant, holder}].pruned}
}

func (m *Model) claim(op Op) Result {
	if r, ok := m.records[keyOf(op)]; ok { // rules 5, 6, 7
		switch {
		case r.pruned:
			return Result{Err: Pruned}
		case !SameWithdrawal(r.fp, op.W):
			return Result{Err: Idempotency}
		case !r.done:
			return Result{Err: InFlight}
		}
		return Result{Outcome: r.outcome}
	}
	if holder, ok := m.claims[withdrawalOf(op)]; ok { // rule 8
		return m.holderOf(op, holder)
	}
	// Rule 4: claim, and mark the claim as being sent by this ledger.
	m.records[keyOf(op)] = entry{fp: op.W, claim: op.ClaimID}
	m.claims[withdrawalOf(op)] = op.Key
	m.marks[mark{op.Ledger, op.ClaimID}] = true
	return Result{Claimed: true}
}

// settle ends the send of op's claim: its mark is cleared, and the rail's
// answer recorded if it is one and the claim still stands without an outcome
// (rules 9, 10, 11a). A claim left in flight is abandoned: no send of it
// runs, so a Wait for it answers OutcomeUnknown. A Settle the store fails,
// or panics in, is NotRecorded (or StorePanicked) whatever it recorded:
// nothing, or, for the After kinds, what SendOK's Settle records.
func (m *Model) settle(op Op) Result {
	delete(m.marks, mark{op.Ledger, op.ClaimID})
	var answer W
	switch op.Send {
	case SettleFails:
		m.answer(op)
		return Result{Err: NotRecorded, Outcome: Sent(op.W, op.Key)}
	case SettlePanics:
		m.answer(op)
		return Result{Err: StorePanicked}
	case SettleFailsAfter, SettlePanicsAfter:
		recorded := op
		recorded.Send = SendOK
		m.settle(recorded)
		if op.Send == SettlePanicsAfter {
			return Result{Err: StorePanicked}
		}
		return Result{Err: NotRecorded, Outcome: Sent(op.W, op.Key)}
	case SendOK:
		answer = Sent(op.W, op.Key)
	case SendNil:
		answer = op.W
	case SendFail, SendBoth:
		return Result{Err: OutcomeUnknown}
	case SendNotSent: // rule 9a: the claim goes, if it is still the send's and in flight
		if r, ok := m.records[keyOf(op)]; ok && r.claim == op.ClaimID && !r.done {
			delete(m.records, keyOf(op))
			delete(m.claims, name{op.Tenant, r.fp.ID})
		}
		return Result{Err: NotSent}
	case SendPanic:
		return Result{Err: SendPanicked}
	case SendWrong:
		m.answer(op)
		return Result{Err: NotRecorded, Outcome: Wrong(op.W)}
	case SendLate: // an answer after the caller's ctx ended is recorded all the same
		answer = Sent(op.W, op.Key)
	}
	r, ok := m.records[keyOf(op)]
	switch {
	case !ok || r.claim != op.ClaimID: // released meanwhile, perhaps claimed again
		return Result{Err: NotRecorded, Outcome: answer}
	case r.pruned: // resolved and pruned meanwhile: nothing to compare with
		return Result{Err: NotRecorded, Outcome: answer}
	case !r.done:
		r.outcome, r.done = answer, true
		m.records[keyOf(op)] = r
	case r.outcome != answer: // resolved meanwhile, otherwise
		return Result{Err: NotRecorded, Outcome: answer}
	}
	return Result{Outcome: answer}
}

// answer marks op's claim answered, if it is still the send's and in flight.
func (m *Model) answer(op Op) {
	if r, ok := m.records[keyOf(op)]; ok && r.claim == op.ClaimID && !r.done {
		r.answered = true
		m.records[keyOf(op)] = r
	}
}

func (m *Model) resolve(op Op) Result {
	if r, ok := m.records[keyOf(op)]; ok { // rule 12
		switch {
		case r.pruned:
			return Result{Err: Pruned}
		case !SameWithdrawal(r.fp, op.W):
			return Result{Err: Idempotency}
		case r.done && r.outcome != op.W:
			return Result{Err: Idempotency}
		}
		r.outcome, r.done = op.W, true
		m.records[keyOf(op)] = r
		return Result{}
	}
	if holder, ok := m.claims[withdrawalOf(op)]; ok { // rule 13
		return m.holderOf(op, holder)
	}
	m.records[keyOf(op)] = entry{fp: op.W, outcome: op.W, done: true, claim: resolved}
	m.claims[withdrawalOf(op)] = op.Key
	return Result{}
}

// Blocks reports whether op, a Wait, blocks in m: its key's claim is in
// flight and a ledger is sending it. It blocks until a step makes that
// false: the send's Settle, or a Resolve or Release of the key through any
// ledger that may make one; Apply of the Wait then says what it returns.
func (m *Model) Blocks(op Op) bool {
	r, ok := m.records[keyOf(op)]
	if op.Kind != Wait || !ValidTenant(op.Tenant) || !ok || r.done {
		return false
	}
	return m.sending(r.claim)
}

// sending reports whether a ledger is sending claim.
func (m *Model) sending(claim int) bool {
	for mk := range m.marks {
		if mk.claim == claim {
			return true
		}
	}
	return false
}

// wait is a Wait that returns at once: no send of the key's claim runs.
func (m *Model) wait(op Op) Result {
	r, ok := m.records[keyOf(op)]
	switch {
	case !ok:
		return Result{Err: UnknownKey}
	case r.pruned:
		return Result{Err: Pruned}
	case r.done:
		return Result{Outcome: r.outcome}
	}
	if m.Blocks(op) {
		panic("verify: a Wait for a claim being sent blocks: Apply it once Blocks is false")
	}
	return Result{Err: OutcomeUnknown} // every send of it ended without an answer: abandoned
}

func (m *Model) release(op Op) Result { // rule 14
	r, ok := m.records[keyOf(op)]
	switch {
	case !ok:
		return Result{}
	case r.pruned:
		return Result{Err: Pruned}
	case r.done, r.answered: // an answered claim is never released, force or not
		return Result{Err: Idempotency}
	case m.marks[mark{op.Ledger, r.claim}]:
		return Result{Err: InFlight} // this ledger is sending the key's claim
	case !op.Force && m.sending(r.claim):
		return Result{Err: InFlight} // a ledger is sending the key's claim: no send of it is known to have ended
	}
	delete(m.records, keyOf(op))
	delete(m.claims, name{op.Tenant, r.fp.ID})
	return Result{}
}

// SameWithdrawal reports whether a and b have the same fingerprint by rule 3:
// amounts by value, currencies without case, ids and destinations exactly.
func SameWithdrawal(a, b W) bool {
	return a.ID == b.ID && a.Dest == b.Dest && strings.EqualFold(a.Currency, b.Currency) && value(a.Amount).Cmp(value(b.Amount)) == 0
}

func value(amount string) *big.Rat {
	if strings.HasSuffix(amount, ".") {
		amount += "0"
	}
	r, ok := new(big.Rat).SetString(amount)
	if !ok {
		panic("verify: amount " + amount + " is not a decimal")
	}
	return r
}
