package submissions

import (
	"context"
	"errors"
)

// backend is what a ledger runs on: a Store, plus the two steps that must
// know which claims the ledger is sending, so that a Release never frees a
// claim whose send is running. The memory store is a backend itself and keeps
// those marks in its records, in the same step as each change; guard makes a
// backend of any other Store and keeps them in the ledger's memory.
//
// The memory store has one more step, its fast path, which the ledger calls
// directly: replay, which answers a retry repeated byte for byte before the
// fingerprint is checked again.
type backend[R Fingerprinter] interface {
	Store[R]

	// claimToSend is Claim of an in-flight record for a send. If the key
	// has a claim, it returns the claim's fingerprint as recorded (its
	// amount and currency perhaps as its request spelled them) and its
	// outcome once done (nil while in flight); neither changes. Otherwise it
	// claims the key for fp, whose amount and currency the request spelled
	// as amount and currency, and returns the sending that ends the claim's
	// send; the claim is marked as being sent before anything can see it.
	// If key's record is a tombstone, it returns errTombstone.
	claimToSend(ctx context.Context, tenant, key string, fp Fingerprint, amount, currency string) (held *Fingerprint, outcome *R, s sending[R], err error)

	// releaseIdle is Release of key's claim, whatever its token, unless the
	// ledger is sending it, when it returns errSending.
	releaseIdle(ctx context.Context, tenant, key string) (rec Record[R], released bool, err error)

	// releaseClaim is Release of key's claim token, unless the ledger is
	// sending it, when it returns errSending.
	releaseClaim(ctx context.Context, tenant, key string, token Token) (rec Record[R], released bool, err error)

	// waitKey waits for key's claim to have an outcome, which it returns;
	// errNoOutcome when the ledger knows that no send of the claim runs, or
	// its send ended without an outcome; errNotClaimed for a key without a
	// claim, errReleased for a claim released while it waited,
	// errWaitPruned for a pruned key; ctx's error
	// when ctx ends first.
	waitKey(ctx context.Context, tenant, key string) (R, error)

	// listInFlight is Lister.ListInFlight, with Sending set for the claims
	// the ledger is sending; errNotLister when the Store is not a Lister.
	listInFlight(ctx context.Context, q ListQuery) ([]Claim, error)
}

// A sending is one claim being sent, ended by settle or abandon: the ledger
// calls one of them once, and abandon again if settle panicked. Either clears
// the claim's mark, even if the store fails or panics; a call after the first
// changes nothing (an abandon after a settle records nothing).
type sending[R Fingerprinter] interface {
	// settle records outcome on the claim as Store.Settle does. When it
	// settles nothing, standing is the outcome the claim has (which never
	// changes), or nil when the claim is gone. If the claim was resolved
	// and then pruned meanwhile, it returns errTombstone.
	settle(ctx context.Context, outcome R) (standing *R, settled bool, err error)
	// abandon records no outcome: the claim stays in flight, and its
	// record is Abandoned. Its store's failure or panic is contained: the
	// send's caller learns nothing of it.
	abandon(ctx context.Context)
}

// errSending is the refusal of releaseIdle and releaseClaim of a claim the
// ledger is sending.
var errSending = errors.New("send running")

// waitKey's answers other than an outcome or ctx's error.
var (
	errNoOutcome  = errors.New("no send of the claim is running")
	errNotClaimed = errors.New("not claimed")
	errReleased   = errors.New("released while waited for")
	errWaitPruned = errors.New("pruned")
)

// errNotLister is listInFlight's error on a Store that is not a Lister.
var errNotLister = errors.New("the store is not a Lister")

// errTombstone is claimToSend's refusal of a key whose record was pruned.
var errTombstone = errors.New("request key pruned")
