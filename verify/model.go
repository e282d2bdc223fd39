// Package verify holds the ledger's semantics in executable form: Model is a
// small, sequential, obviously-correct ledger, the rules of DESIGN.md as a
// pure function of state and operation. The tests of this module check the
// real ledger, on every store, against it.
package verify

import (
	"math/big"
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

// The operations of the ledger.
const (
	Submit Kind = iota
	Resolve
	Release
	Outcome
	ClaimedBy
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
)

// Op is one call on a ledger.
type Op struct {
	Kind Kind
	Key  string // Submit, Resolve, Release, Outcome
	W    W      // Submit: the request; Resolve: the outcome; ClaimedBy: W.ID
	Send Send   // Submit
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
)

// Result is what a call returned.
type Result struct {
	Err     Err
	Holder  string // Conflict: the holding key; ClaimedBy: the key
	OK      bool   // Outcome, ClaimedBy
	Outcome W      // Submit, Outcome
}

// Sent is the outcome SendOK returns for w under key.
func Sent(w W, key string) W {
	w.TxHash = "tx-" + key
	return w
}

// Model is the ledger's semantics: a map from key to record and one from
// withdrawal id to key, changed one operation at a time. Its zero value is an
// empty ledger.
type Model struct {
	records map[string]entry
	claims  map[string]string
}

type entry struct {
	fp      W // the request that claimed the key
	outcome W
	done    bool
}

// Apply applies op and returns its result.
func (m *Model) Apply(op Op) Result {
	if m.records == nil {
		m.records, m.claims = map[string]entry{}, map[string]string{}
	}
	switch op.Kind {
	case Submit:
		return m.submit(op)
	case Resolve:
		return m.resolve(op)
	case Release:
		return m.release(op.Key)
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

func (m *Model) submit(op Op) Result {
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
	m.records[op.Key] = entry{fp: op.W} // rule 4: claim, then send
	m.claims[op.W.ID] = op.Key
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
	}
	m.records[op.Key] = entry{fp: op.W, outcome: out, done: true}
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
		m.records[op.Key] = entry{fp: r.fp, outcome: op.W, done: true}
		return Result{}
	}
	if holder, ok := m.claims[op.W.ID]; ok { // rule 13
		return Result{Err: Conflict, Holder: holder}
	}
	m.records[op.Key] = entry{fp: op.W, outcome: op.W, done: true}
	m.claims[op.W.ID] = op.Key
	return Result{}
}

func (m *Model) release(key string) Result { // rule 14
	r, ok := m.records[key]
	switch {
	case !ok:
		return Result{}
	case r.done:
		return Result{Err: Idempotency}
	}
	delete(m.records, key)
	if m.claims[r.fp.ID] == key {
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
