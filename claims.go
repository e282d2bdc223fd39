package submissions

import "context"

// claims maps a withdrawal id to the request key that claimed it, in one
// tenant of the memory store. It is the
// index that makes a withdrawal exclusive: the records of the memory store
// make a key idempotent, claims refuses a second key for the same money.
//
// claims is not safe for concurrent use; the memory store guards it with its
// mutex, in the same critical section as its records, so that checking a
// claim and making it are one step.
type claims map[string]string

// holder returns the key that claims withdrawalID, if any.
func (c claims) holder(withdrawalID string) (string, bool) {
	key, ok := c[withdrawalID]
	return key, ok
}

// claim records key as the holder of withdrawalID, unless a key already
// holds it, in which case it returns a *ConflictError naming the holder (in
// tenant, the claims' tenant) and changes nothing.
func (c claims) claim(tenant, withdrawalID, key string) error {
	if holder, ok := c[withdrawalID]; ok {
		return &ConflictError{Tenant: tenant, Holder: holder, Key: key, WithdrawalID: withdrawalID}
	}
	c[withdrawalID] = key
	return nil
}

// release removes the claim on withdrawalID only if it names key, so that a
// late release cannot evict a claim that has moved to another key.
func (c claims) release(withdrawalID, key string) {
	if c[withdrawalID] == key {
		delete(c, withdrawalID)
	}
}

// ClaimedBy returns the request key that holds withdrawalID's claim, with ok
// false when no key holds it. A pruned key holds its withdrawal for ever.
// The id is matched exactly; an id that no valid fingerprint can carry is
// held by no key.
func (s *Submissions[R]) ClaimedBy(ctx context.Context, withdrawalID string) (key string, ok bool, err error) {
	return s.ledger().ClaimedBy(ctx, s.tenant, withdrawalID)
}
