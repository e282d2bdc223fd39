// Package verify holds the ledger's semantics in executable form: Model is a
// small, sequential, obviously-correct ledger, the rules of the README as a
// pure function of state and operation. The tests of this module check the
// real ledger, on every store, against it.
package verify

import (
	"fmt"
	"math/big"
	"slices"
	"strings"

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
	// atomic step that records the rail's answer, or leaves the key claimed.
	Settle
)

// Send is what the rail does when a Submit calls it.
type Send int

// What a rail can do.
const (
	SendOK    Send = iota // returns the request, sent, with a transaction id
	SendNil               // no send function: the request itself is the outcome
	SendFail              // returns an error
	SendPanic             // panics
	SendWrong             // returns the outcome of another withdrawal
	SendLate              // returns as SendOK does, after the caller's context ended
)

// Op is one call on a ledger.
type Op struct {
	Kind Kind
	Key  string // Submit, Resolve, Release, Outcome, Claim, Settle
	W    W      // Submit, Claim, Settle: the request; Resolve: the outcome; ClaimedBy: W.ID
	Send Send   // Submit, Settle

	// Several ledgers may share a store, as instances share a database. A
	// ledger refuses to release a key while it is sending it itself (rule
	// 14). Ledger names the ledger an operation runs on; Native says that it
	// keeps those marks in the store's own records and settles a claim by
	// its identity (the memory store, which all native ledgers on it share),
	// rather than marks of its own and a settle by key and fingerprint (any
	// other Store, through its Store methods). ClaimID numbers a Submit's
	// claim for its Settle; 0 is no claim. Their zero values are one ledger
	// on a store other than memory, which is all Apply's callers need.
	Ledger  int
	Native  bool
	ClaimID int
}

// Err is what an error means to the caller.
type Err int

// The errors a call can end with.
const (
	None         Err = iota
	Conflict         // *submissions.ConflictError: another key holds the withdrawal
	Idempotency      // submissions.ErrIdempotencyConflict otherwise
	InFlight         // submissions.ErrSubmissionInFlight
	SendFailed       // the rail's error
	SendPanicked     // the rail's panic
	NotRecorded      // submissions.ErrOutcomeNotRecorded, with the rail's answer
	Unexpected       // any other error: no ledger that follows the rules returns one here
)

// Result is what a call returned.
type Result struct {
	Err     Err
	Holder  string // Conflict: the holding key; ClaimedBy: the key
	OK      bool   // Outcome, ClaimedBy
	Outcome W      // Submit, Claim (a replay), Outcome, Settle; with NotRecorded, the rail's answer
	Claimed bool   // Claim: the key was claimed, and send is called next
}

// Sent is the outcome SendOK returns for w under key.
func Sent(w W, key string) W {
	w.TxHash = "tx-" + key
	return w
}

// Model is the ledger's semantics: a map from key to record and one from
// withdrawal id to key, changed one operation at a time, and the sends that
// ledgers are running. Its zero value is an empty ledger.
type Model struct {
	records map[string]entry
	claims  map[string]string
	sending map[mark]int // non-native ledgers' running sends, by ledger and key
}

// mark names a key that a ledger is sending.
type mark struct {
	ledger int
	key    string
}

type entry struct {
	fp      W // the request that claimed the key
	outcome W
	done    bool
	claim   int  // the claim that made the record (Op.Claim), 0 for a Resolve
	sending bool // a native ledger is running its send
}

func (m *Model) init() {
	if m.records == nil {
		m.records, m.claims, m.sending = map[string]entry{}, map[string]string{}, map[mark]int{}
	}
}

// Apply applies op and returns its result. A Submit is a Claim and, if it
// claimed, a Settle, with nothing between.
func (m *Model) Apply(op Op) Result {
	m.init()
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
		r, ok := m.records[op.Key]
		if !ok || !r.done {
			return Result{}
		}
		return Result{OK: true, Outcome: r.outcome}
	case ClaimedBy:
		key, ok := m.claims[op.W.ID]
		return Result{OK: ok, Holder: key}
	}
	panic("verify: unknown operation")
}

// Step reports whether a ledger in state m may answer op with got, and the
// state it is in then; m is not changed. It is Apply, with the one answer
// the rules leave open: a Resolve that races a Release of the same key may
// find the key in flight, then gone, record nothing and answer InFlight.
// Step cannot see the race; the check of a history that uses this allowance
// must see that a Release of the key overlapped the Resolve.
func (m *Model) Step(op Op, got Result) (bool, *Model) {
	next := m.Clone()
	if next.Apply(op) == got {
		return true, next
	}
	if r, ok := m.records[op.Key]; ok && op.Kind == Resolve && got == (Result{Err: InFlight}) &&
		!r.done && SameWithdrawal(r.fp, op.W) {
		return true, m
	}
	return false, nil
}

// Clone returns a copy of m that shares nothing with it.
func (m *Model) Clone() *Model {
	c := &Model{}
	c.init()
	for k, v := range m.records {
		c.records[k] = v
	}
	for k, v := range m.claims {
		c.claims[k] = v
	}
	for k, v := range m.sending {
		c.sending[k] = v
	}
	return c
}

// String describes m in a canonical form: two models are in the same state
// when their strings are equal.
func (m *Model) String() string {
	var lines []string
	for k, r := range m.records {
		state := "in flight"
		if r.done {
			state = fmt.Sprintf("done %+v", r.outcome)
		}
		lines = append(lines, fmt.Sprintf("key %s: %+v claim %d %s sending %v", k, r.fp, r.claim, state, r.sending))
	}
	for id, k := range m.claims {
		lines = append(lines, fmt.Sprintf("withdrawal %s: %s", id, k))
	}
	for mk, n := range m.sending {
		lines = append(lines, fmt.Sprintf("ledger %d sends %s: %d", mk.ledger, mk.key, n))
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

func (m *Model) claim(op Op) Result {
	if r, ok := m.records[op.Key]; ok { // rules 5, 6, 7
		switch {
		case !SameWithdrawal(r.fp, op.W):
			return Result{Err: Idempotency}
		case !r.done:
			return Result{Err: InFlight}
		}
		return Result{Outcome: r.outcome}
	}
	if holder, ok := m.claims[op.W.ID]; ok { // rule 8
		return Result{Err: Conflict, Holder: holder}
	}
	// Rule 4: claim, and mark the key as being sent.
	m.records[op.Key] = entry{fp: op.W, claim: op.ClaimID, sending: op.Native}
	m.claims[op.W.ID] = op.Key
	if !op.Native {
		m.sending[mark{op.Ledger, op.Key}]++
	}
	return Result{Claimed: true}
}

// settle ends the send of op's claim: the mark is cleared, and the rail's
// answer recorded if the claim still stands without an outcome.
func (m *Model) settle(op Op) Result {
	r, ok := m.records[op.Key]
	// A native ledger's claim is its record; any other ledger's is the key's
	// record for the same withdrawal, whoever claimed it.
	mine := ok && (op.Native && r.claim == op.ClaimID || !op.Native && SameWithdrawal(r.fp, op.W))
	if op.Native && mine {
		r.sending = false
		m.records[op.Key] = r
	}
	if !op.Native {
		mk := mark{op.Ledger, op.Key}
		if m.sending[mk]--; m.sending[mk] == 0 {
			delete(m.sending, mk)
		}
	}
	var out W
	switch op.Send {
	case SendOK:
		out = Sent(op.W, op.Key)
	case SendNil:
		out = op.W
	case SendFail: // rule 9: the key stays claimed
		return Result{Err: SendFailed}
	case SendPanic:
		return Result{Err: SendPanicked}
	case SendWrong: // rule 10
		return Result{Err: Idempotency}
	case SendLate: // rule 9: not taken as known, and the key stays claimed
		return Result{Err: NotRecorded, Outcome: Sent(op.W, op.Key)}
	}
	switch {
	case !mine: // released meanwhile
		return Result{Err: NotRecorded, Outcome: out}
	case r.done && r.outcome != out: // resolved meanwhile, otherwise
		return Result{Err: NotRecorded, Outcome: out}
	case !r.done:
		r.outcome, r.done = out, true
		m.records[op.Key] = r
	}
	return Result{Outcome: out}
}

func (m *Model) resolve(op Op) Result {
	if r, ok := m.records[op.Key]; ok { // rule 12
		switch {
		case !SameWithdrawal(r.fp, op.W):
			return Result{Err: Idempotency}
		case r.done && r.outcome != op.W:
			return Result{Err: Idempotency}
		}
		r.outcome, r.done = op.W, true
		m.records[op.Key] = r
		return Result{}
	}
	if holder, ok := m.claims[op.W.ID]; ok { // rule 13
		return Result{Err: Conflict, Holder: holder}
	}
	m.records[op.Key] = entry{fp: op.W, outcome: op.W, done: true}
	m.claims[op.W.ID] = op.Key
	return Result{}
}

func (m *Model) release(op Op) Result { // rule 14
	r, ok := m.records[op.Key]
	if !op.Native && m.sending[mark{op.Ledger, op.Key}] > 0 && (!ok || !r.done) {
		return Result{Err: InFlight} // this ledger is sending it
	}
	switch {
	case !ok:
		return Result{}
	case r.done:
		return Result{Err: Idempotency}
	case r.sending && op.Native:
		return Result{Err: InFlight} // a ledger sharing the store's marks is sending it
	}
	delete(m.records, op.Key)
	if m.claims[r.fp.ID] == op.Key {
		delete(m.claims, r.fp.ID)
	}
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
