// Package driver is the contract between a submissions ledger and the Store
// that keeps its state, for those who write a Store: the calls a Store
// answers, each in one atomic step, and the optional abilities a Store may
// add, each a small interface of its own. Services do not import it; they
// call package submissions, which runs every Store through one engine.
//
// A Store reports what is there; the ledger holds the policy (validation,
// comparing fingerprints and outcomes, what errors mean), and a Store never
// calls back into it. The storetest package is the suite that checks a
// Store against this contract; the memory store (submissions.NewMemoryStore)
// and pgstore pass it. The ledger's errors are defined here too, one value
// each, which package submissions returns as its own.
//
// The optional interfaces:
//
//   - Lister lists the claims in flight, for an operator.
//   - Waiter waits for a claim to close, for Wait without polling.
//   - Abandoner records that a claim's send ended without an answer, so that
//     a Wait anywhere learns it; an Answerer, that it got an answer that
//     was not recorded, with the answer.
//   - Pruner turns settled records into tombstones.
//   - Tracker keeps, with each claim, the mark of a send running under it,
//     in the same step as the claim: a Store in one process can, and saves
//     the ledger its own bookkeeping of sends.
//   - Replayer reads a done record from memory, so that a replay is one
//     map lookup.
//
// Tracker and Replayer are what only a store in the ledger's own memory can
// do; the memory store is one, pgstore is neither. Each pays for itself:
// BenchmarkSubmitFreshBareStore and BenchmarkSubmitReplayBareStore (see
// docs/benchmarks.md) run the memory store with and without them.
package driver

import (
	"context"
	"time"
)

// A Token names one claim of a request key. A store gives every claim it
// makes a token that no earlier claim of the same key had, so that a key
// released and claimed again is a new claim; the zero Token is no claim.
type Token uint64

// Record is what a Store holds for one request key: one claim.
type Record[R any] struct {
	// Fingerprint is the withdrawal the key was claimed for, in the
	// canonical form the ledger passed to Claim.
	Fingerprint Fingerprint
	// Outcome is the key's outcome; meaningful only when Done.
	Outcome R
	// Done reports that the outcome is known. A record without one is in
	// flight: its send may or may not have moved money.
	Done bool
	// Token names the claim.
	Token Token
	// Pruned reports a tombstone: the record was settled and then pruned
	// (see Pruner). Only Fingerprint.WithdrawalID and Token are kept; Done
	// is true and Outcome is the zero R. The key and the withdrawal stay
	// claimed for ever, so that neither is ever sent again.
	Pruned bool
	// Abandoned reports a claim in flight whose send ended without a
	// recorded answer (see Abandoner). The claim stays in flight, to be
	// resolved or released; a done record is never Abandoned.
	Abandoned bool
	// Answered reports an Abandoned claim whose send got an answer from
	// the rail that could not be recorded as its outcome (see Answerer):
	// money moved, so the claim is never released, only resolved.
	Answered bool
	// Answer is that answer, when the store kept it; nil otherwise.
	Answer *R
}

// Store holds a ledger's two indexes, request key to Record and withdrawal
// id to the key that claims it, both per tenant, and makes each decision the
// ledger needs in one atomic step: a check and the change it allows are never
// a read followed by a separate write. Records and claims are 1:1: a key
// claims exactly the withdrawal of its record, and both go together. Every
// method takes the tenant it works in ("" is the default tenant) and reads and
// changes only that tenant's keys and claims: the same key or withdrawal id in
// two tenants are unrelated.
//
// The ledger validates keys, tenants and fingerprints before it calls a
// Store. An error other than Claim's *ConflictError means the store could not
// answer, and says nothing about the state.
type Store[R any] interface {
	// Claim records key for fp under a new token and claims fp.WithdrawalID
	// for key, in one atomic step, and returns the new record with claimed
	// true. The record is in flight when outcome is nil, and done with
	// *outcome otherwise. If key has a record, Claim changes nothing and
	// returns that record, whatever its fingerprint, with claimed false. If
	// another key claims fp.WithdrawalID, it changes nothing and returns a
	// *ConflictError with Tenant, Holder, Key and WithdrawalID set, and
	// Pruned when the holder's record is a tombstone. A tombstone is a
	// record like any other here: Claim of its key returns it.
	Claim(ctx context.Context, tenant, key string, fp Fingerprint, outcome *R) (rec Record[R], claimed bool, err error)

	// Settle records outcome on key's claim token, if that claim is in
	// flight, and returns the record with settled true. If the claim is done,
	// it changes nothing and returns the record with settled false. If key
	// has no record, or a record of another claim, it changes nothing and
	// returns the zero Record with settled false. A tombstone of the claim
	// is done: it is returned with settled false.
	Settle(ctx context.Context, tenant, key string, token Token, outcome R) (rec Record[R], settled bool, err error)

	// Release deletes key's claim token, with the claim on its withdrawal,
	// if that claim is in flight and not Answered, and returns the deleted
	// record with released true. If the claim is done or Answered, it
	// changes nothing and returns the record with released false. If key has no record, or a record of
	// another claim, it changes nothing and returns the zero Record with
	// released false. A tombstone of the claim is done: it is returned with
	// released false.
	Release(ctx context.Context, tenant, key string, token Token) (rec Record[R], released bool, err error)

	// Lookup returns key's record, with ok false when key has none.
	Lookup(ctx context.Context, tenant, key string) (rec Record[R], ok bool, err error)

	// ClaimedBy returns the key that claims withdrawalID, with ok false when
	// no key does. A tombstone's key claims its withdrawal.
	ClaimedBy(ctx context.Context, tenant, withdrawalID string) (key string, ok bool, err error)
}

// InFlight is a claim in flight, as a Lister lists it.
type InFlight struct {
	Tenant      string      // "" for the default tenant
	Key         string      // the request key
	Fingerprint Fingerprint // canonical, as the ledger passed it to Claim
	ClaimedAt   time.Time   // when the store made the claim, by its clock
	Token       Token       // the claim's token
	Abandoned   bool        // the claim's Record.Abandoned
	Answered    bool        // the claim's Record.Answered
}

// ListQuery selects claims in flight for Lister.ListInFlight.
type ListQuery struct {
	// ClaimedBefore selects claims made before this time (strictly); the
	// zero Time selects every claim.
	ClaimedBefore time.Time
	// Tenants selects the claims of these tenants only; nil selects every
	// tenant's, and an empty, non-nil slice none.
	Tenants []string
	// After selects the claims that come after this one in the listing's
	// order: its ClaimedAt, Tenant and Key. Nil starts from the oldest.
	After *InFlight
	// Limit is the most claims to return, at least 1.
	Limit int
}

// A Lister is a Store that can list its claims in flight, across tenants,
// for an operator. A Store that is not one works for every other call.
type Lister interface {
	// ListInFlight returns the claims in flight that q selects, in every
	// tenant or in q.Tenants, ordered by ClaimedAt, then Tenant, then Key
	// (both compared byte by byte), at most q.Limit of them. A claim is in
	// flight from its Claim until it is settled or released; a done record
	// (one that Claim made with an outcome) is never listed.
	//
	// A claim that stands throughout a walk of pages, each started After the
	// last claim of the one before, is listed exactly once; a claim made or
	// closed during the walk may or may not be.
	ListInFlight(ctx context.Context, q ListQuery) ([]InFlight, error)
}

// A Waiter is a Store that can wait for a claim to close. A Store that is
// not one is polled with Lookup instead.
type Waiter[R any] interface {
	// WaitClaim blocks until key's claim token is no longer in flight, or
	// is abandoned, and returns key's record then, with ok false when key
	// has none: the claim was settled (the record of token, Done), released
	// (no record, or the record of a later claim) or abandoned (the record
	// of token, in flight and Abandoned). It returns at once when the claim
	// is in none of those states when called, and ctx's error when ctx ends
	// first. A claim settled, released or abandoned through any Store on the
	// same state ends the wait.
	WaitClaim(ctx context.Context, tenant, key string, token Token) (rec Record[R], ok bool, err error)
}

// An Abandoner is a Store that can record that a claim's send ended without
// an answer, so that a wait anywhere, in this process or another, learns it
// instead of waiting until its ctx ends. A ledger calls it when a send it
// ran ends without settling its claim (an error, a panic, an answer that is
// not recorded, a Settle that failed).
type Abandoner interface {
	// Abandon marks key's claim token, if it is in flight, as Abandoned.
	// The claim stays in flight, and nothing else changes: it is settled or
	// released as any other. A claim that is done or gone changes nothing,
	// and is no error. The ledger calls it best effort: its error is not
	// reported to the send's caller.
	Abandon(ctx context.Context, tenant, key string, token Token) error
}

// An Answerer is an Abandoner that can also record that a claim's send got
// an answer that could not be recorded as its outcome (it was for another
// withdrawal, or the Settle failed), and keep that answer, so that an
// operator anywhere sees that money moved and can resolve the claim with
// it. The memory store and pgstore are Answerers.
type Answerer[R any] interface {
	// AbandonAnswered is Abandon of key's claim token that also marks the
	// claim Answered and keeps *answer with it, or no answer when answer is
	// nil. A claim that is done or gone changes nothing, and is no error.
	AbandonAnswered(ctx context.Context, tenant, key string, token Token, answer *R) error
}

// PrunedRecord is a record that a Pruner has turned into a tombstone.
type PrunedRecord struct {
	Tenant       string // "" for the default tenant
	Key          string
	WithdrawalID string
}

// A Pruner is a Store that can prune settled records. A Store that is not
// one works for every other call.
type Pruner interface {
	// Prune turns at most limit done records, settled (or recorded done by
	// Claim) before before by the store's clock, into tombstones, oldest
	// first, across tenants, and returns them. A tombstone keeps the key,
	// its withdrawal id and its claim of the withdrawal, and drops the rest
	// of the fingerprint and the outcome (see Record.Pruned). A record in
	// flight is never pruned, nor is a tombstone pruned again or removed.
	// Several Prunes may run at once, with every other call: each record is
	// pruned by one of them.
	Prune(ctx context.Context, before time.Time, limit int) ([]PrunedRecord, error)
}

// A Tracker is a Store that keeps, with each claim, the mark of a send
// running under it, set in the same atomic step as the claim. Every ledger
// on the Store then knows every send of every ledger on it: a Release never
// frees a claim whose send is running, and a Wait learns at once that a send
// ended. A ledger on a Store that is not a Tracker keeps the marks of its own
// sends in its memory instead, and waits, before it answers, for the claims
// of a key it has under way in the Store.
type Tracker[R any] interface {
	// ClaimSend is Claim of key for fp in flight, for a send. When it
	// claims, it returns the new record with the claim's Send, the claim
	// marked as being sent before any other call can see it. Otherwise it
	// returns key's record, or Claim's *ConflictError, with a nil Send.
	ClaimSend(ctx context.Context, tenant, key string, fp Fingerprint) (rec Record[R], s Send[R], err error)

	// Sending returns a channel that is closed when the send running under
	// key's claim token ends, or nil when no send runs under it.
	Sending(ctx context.Context, tenant, key string, token Token) (<-chan struct{}, error)
}

// A Send is one claim being sent, made by Tracker.ClaimSend. The ledger ends
// it with Settle, Release, Abandon or AbandonAnswered, and calls Abandon (or
// AbandonAnswered, once send has answered) after a Settle or Release that
// failed or panicked; a call after the one that ended the send
// changes nothing, except that Abandon after a failed Settle or Release
// marks a claim still in flight.
type Send[R any] interface {
	// Settle is Store.Settle of the claim, and ends the send when it
	// answers; after an error or a panic the send runs on, and the ledger
	// calls Settle again or abandons it: no call sees the claim neither
	// sending nor abandoned.
	Settle(ctx context.Context, outcome R) (rec Record[R], settled bool, err error)

	// Release is Store.Release of the claim, for a send that moved nothing
	// (the rail said so), and ends the send in the same step, even when it
	// fails or panics: no call sees the claim both released and being sent.
	Release(ctx context.Context) (rec Record[R], released bool, err error)

	// Abandon ends the send without an outcome and marks the claim, if it
	// is still in flight, Abandoned, as Abandoner.Abandon does.
	Abandon(ctx context.Context) error

	// AbandonAnswered is Abandon that also marks the claim Answered, with
	// answer kept when it is not nil, as Answerer.AbandonAnswered does.
	AbandonAnswered(ctx context.Context, answer *R) error
}

// A Replayer is a Store that can read a done record from memory, at the
// cost of a map lookup: the ledger reads it first on every submit, and
// when the retry is for the record's withdrawal replays its outcome having
// checked nothing else (the key was valid when claimed); otherwise it goes
// on as without it. It must be quick: it runs on every submit.
type Replayer[R any] interface {
	// Replay returns pointers to the fingerprint, canonical, and the
	// outcome of tenant's record of key when key, exactly as given, has a
	// done record; and nils otherwise. What they point to never changes,
	// and the caller does not change it.
	Replay(tenant, key string) (fp *Fingerprint, outcome *R)
}
