package submissions

import "context"

// Record is what a Store holds for one request key.
type Record[R Fingerprinter] struct {
	// Fingerprint is the withdrawal the key was claimed for, in the canonical
	// form the ledger passed to Claim.
	Fingerprint Fingerprint
	// Outcome is the key's outcome; meaningful only when Done.
	Outcome R
	// Done reports that the outcome is known. A record without one is in
	// flight: its send may or may not have moved money.
	Done bool
}

// Store holds a ledger's two indexes, request key to Record and withdrawal id
// to the key that claims it, and makes each decision the ledger needs in one
// atomic step: a check and the change it allows are never a read followed by
// a separate write. Records and claims are 1:1: a key claims exactly the
// withdrawal of its record.
//
// Policy stays in the ledger: it validates keys and fingerprints before
// calling a store, compares fingerprints and outcomes, and turns what a store
// reports into errors. A store reports what is there; errors other than the
// ones named below mean the store could not answer (a lost connection, say),
// and say nothing about the state. The conformance suite a Store must pass is
// the storetest package.
type Store[R Fingerprinter] interface {
	// Claim records key for fp and claims fp.WithdrawalID for key, in one
	// atomic step. The record is in flight when outcome is nil, and done with
	// *outcome otherwise.
	//
	// If key already has a record, Claim changes nothing and returns that
	// record with claimed false, whatever its fingerprint. If another key
	// claims fp.WithdrawalID, it changes nothing and returns a *ConflictError
	// with Holder, Key and WithdrawalID set. Otherwise it returns the new
	// record with claimed true.
	Claim(ctx context.Context, key string, fp Fingerprint, outcome *R) (rec Record[R], claimed bool, err error)

	// Settle records outcome for key, if key has a record for fp that is in
	// flight, and returns the record with settled true.
	//
	// If key's record for fp already has an outcome, Settle changes nothing
	// and returns it with settled false. If key has no record, or one for
	// another fingerprint (it was released and claimed again meanwhile), it
	// changes nothing and returns the zero Record with settled false. A
	// record released and claimed again for the same fingerprint is settled
	// as if it were the same claim: a Store keeps no claim identity.
	Settle(ctx context.Context, key string, fp Fingerprint, outcome R) (rec Record[R], settled bool, err error)

	// Release deletes key's record if it is in flight, with the claim on its
	// withdrawal if that claim still names key, and returns the deleted
	// record with released true.
	//
	// If key's record has an outcome, Release changes nothing and returns it
	// with released false. If key has no record, it returns the zero Record
	// with released false.
	Release(ctx context.Context, key string) (rec Record[R], released bool, err error)

	// Lookup returns key's record, with ok false when key has none.
	Lookup(ctx context.Context, key string) (rec Record[R], ok bool, err error)

	// ClaimedBy returns the key that claims withdrawalID, with ok false when
	// no key does.
	ClaimedBy(ctx context.Context, withdrawalID string) (key string, ok bool, err error)
}
