package submissions

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"
)

// memStore is the embedded default Store: per tenant, request key -> claim
// and withdrawal id -> key, all behind one mutex. It is a backend itself: each
// claim carries the mark of a send running under it, set and checked in the
// same step as every change, so a ledger on it needs no guard.
type memStore[R Fingerprinter] struct {
	mu      sync.Mutex                  // protects everything below, every space and every entry
	def     space[R]                    // the default tenant's
	tenants map[string]*space[R]        // every other tenant's, made by its first claim
	tokens  Token                       // the last token given
	settled []*entry[R]                 // the done claims not pruned yet, in the order they were done
	waiting map[*entry[R]]chan struct{} // claims being sent that a wait waits for: each closed when its send ends, or the claim closes
}

// space is one tenant's keys and claims in the memory store.
type space[R Fingerprinter] struct {
	store  *memStore[R]
	tenant string
	keys   map[string]*entry[R] // request key -> its claim
	claims claims               // withdrawal id -> request key, tombstones' included
	pruned map[string]tombstone // request key -> its tombstone
}

// tombstone is what the memory store keeps of a pruned claim, besides its
// claim of the withdrawal.
type tombstone struct {
	withdrawalID string
	token        Token
}

// record returns the tombstone as a Record.
func tombRecord[R Fingerprinter](t tombstone) Record[R] {
	return Record[R]{Fingerprint: Fingerprint{WithdrawalID: t.withdrawalID}, Done: true, Token: t.token, Pruned: true}
}

// entry is one claim in the memory store, and its own sending. Its fields
// are a Record's, laid out to fit a smaller allocation: a fresh submit makes
// one.
type entry[R Fingerprinter] struct {
	space *space[R]
	key   string
	// fp is the claim's fingerprint with its Amount and Currency as the
	// claiming request spelled them, for replay; record() returns it
	// canonical. An amount that starts with a point is kept canonical, as its
	// canonical form is a new string.
	fp       Fingerprint
	outcome  R     // never changes once done
	token    Token // never changes
	at       int64 // when claimed, and once done when done, in nanoseconds since the Unix epoch
	done     bool
	sending  bool // a ledger is running the claim's send
	released bool // released: no longer in the store
	pruned   bool // pruned: a tombstone holds its key
	// abandoned: a send of the claim ended without an answer
	abandoned bool
}

// NewMemoryStore returns an empty Store that keeps its state in memory, the
// one New uses. Its guarantees hold within one process. It is a Lister, a
// Pruner and an Abandoner.
func NewMemoryStore[R Fingerprinter]() Store[R] {
	return &memStore[R]{}
}

// record returns e as a Record, its amount and currency in canonical form.
// The caller holds the lock.
func (e *entry[R]) record() Record[R] {
	fp := e.fp
	if amount, ok := canonicalAmount(fp.Amount); ok {
		fp.Amount = amount
	}
	if currency, ok := canonicalCurrency(fp.Currency); ok {
		fp.Currency = currency
	}
	return Record[R]{Fingerprint: fp, Outcome: e.outcome, Done: e.done, Token: e.token, Abandoned: e.abandoned && !e.done}
}

// space returns tenant's space, or nil if the tenant has never claimed a
// key. The caller holds m.mu.
func (m *memStore[R]) space(tenant string) *space[R] {
	if tenant == "" {
		return &m.def
	}
	return m.tenants[tenant]
}

// find returns tenant's claim of key, if any. The caller holds m.mu.
func (m *memStore[R]) find(tenant, key string) (*entry[R], bool) {
	sp := m.space(tenant)
	if sp == nil {
		return nil, false
	}
	e, ok := sp.keys[key]
	return e, ok
}

// tomb returns tenant's tombstone of key, if any. The caller holds m.mu.
func (m *memStore[R]) tomb(tenant, key string) (tombstone, bool) {
	sp := m.space(tenant)
	if sp == nil {
		return tombstone{}, false
	}
	t, ok := sp.pruned[key]
	return t, ok
}

// Claim implements Store.
func (m *memStore[R]) Claim(_ context.Context, tenant, key string, fp Fingerprint, outcome *R) (Record[R], bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.find(tenant, key); ok {
		return e.record(), false, nil
	}
	if t, ok := m.tomb(tenant, key); ok {
		return tombRecord[R](t), false, nil
	}
	e, err := m.claim(tenant, key, &fp, fp.Amount, fp.Currency, outcome)
	if err != nil {
		return Record[R]{}, false, err
	}
	return e.record(), true, nil
}

// replay returns tenant's outcome of key if key is done and was claimed for
// a request whose fingerprint, as given, was *given: a retry repeated byte
// for byte, which is valid and the same withdrawal without another look. The
// outcome never changes. It is the ledger's fast path in memory: a false
// answer says nothing, and the ledger goes on to claimToSend.
func (m *memStore[R]) replay(tenant, key string, given *Fingerprint) (*R, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.find(tenant, key)
	if !ok || !e.done || e.fp != *given {
		return nil, false
	}
	return &e.outcome, true
}

func (m *memStore[R]) claimToSend(_ context.Context, tenant, key string, fp Fingerprint, amount, currency string) (*Fingerprint, *R, sending[R], error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.find(tenant, key); ok {
		if e.done {
			return &e.fp, &e.outcome, nil, nil
		}
		return &e.fp, nil, nil, nil
	}
	if _, ok := m.tomb(tenant, key); ok {
		return nil, nil, nil, errTombstone
	}
	e, err := m.claim(tenant, key, &fp, amount, currency, nil)
	if err != nil {
		return nil, nil, nil, err
	}
	e.sending = true
	return nil, nil, e, nil
}

// claim makes tenant's claim of key for fp, whose amount and currency the
// request spelled as amount and currency, under a new token, and claims its
// withdrawal; or it returns a *ConflictError. The caller holds m.mu and has
// found no claim of key.
func (m *memStore[R]) claim(tenant, key string, fp *Fingerprint, amount, currency string, outcome *R) (*entry[R], error) {
	sp := m.space(tenant)
	if sp == nil {
		if m.tenants == nil {
			m.tenants = make(map[string]*space[R])
		}
		sp = &space[R]{tenant: tenant}
		m.tenants[tenant] = sp
	}
	if sp.keys == nil {
		sp.store, sp.keys, sp.claims = m, make(map[string]*entry[R]), make(claims)
	}
	if err := sp.claims.claim(tenant, fp.WithdrawalID, key); err != nil {
		if ce, ok := err.(*ConflictError); ok {
			_, ce.Pruned = sp.pruned[ce.Holder]
		}
		return nil, err
	}
	m.tokens++
	e := &entry[R]{space: sp, key: key, fp: *fp, token: m.tokens, at: time.Now().UnixNano()}
	if amount[0] != '.' {
		e.fp.Amount = amount
	}
	e.fp.Currency = currency
	if outcome != nil {
		e.outcome, e.done = *outcome, true
		m.settled = append(m.settled, e)
	}
	sp.keys[key] = e
	return e, nil
}

// Settle implements Store.
func (m *memStore[R]) Settle(_ context.Context, tenant, key string, token Token, outcome R) (Record[R], bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.find(tenant, key)
	if !ok || e.token != token {
		return m.tombOf(tenant, key, token), false, nil
	}
	settled := e.settleOnce(outcome)
	return e.record(), settled, nil
}

func (e *entry[R]) settle(_ context.Context, outcome R) (*R, bool, error) {
	e.space.store.mu.Lock()
	defer e.space.store.mu.Unlock()
	e.sending = false
	e.wake()
	switch {
	case e.released:
		return nil, false, nil
	case e.pruned:
		return nil, false, errTombstone
	case !e.settleOnce(outcome): // resolved meanwhile: never changes again
		return &e.outcome, false, nil
	}
	return nil, true, nil
}

// settleOnce records outcome on e unless e has one, and reports whether it
// did; e joins the settled claims. The caller holds the lock.
func (e *entry[R]) settleOnce(outcome R) bool {
	if e.done {
		return false
	}
	e.outcome, e.done, e.at = outcome, true, time.Now().UnixNano()
	m := e.space.store
	m.settled = append(m.settled, e)
	e.wake()
	return true
}

// tombOf returns tenant's tombstone of key as a Record if it is of the
// claim token, and otherwise the zero Record. The caller holds the lock.
func (m *memStore[R]) tombOf(tenant, key string, token Token) Record[R] {
	if t, ok := m.tomb(tenant, key); ok && t.token == token {
		return tombRecord[R](t)
	}
	return Record[R]{}
}

func (e *entry[R]) abandon(context.Context) {
	e.space.store.mu.Lock()
	defer e.space.store.mu.Unlock()
	e.sending = false
	e.abandoned = true
	e.wake()
}

// wake ends the waits for e, if there are any. The caller holds the lock.
func (e *entry[R]) wake() {
	m := e.space.store
	if len(m.waiting) == 0 { // the fresh path: nobody waits
		return
	}
	if ch, ok := m.waiting[e]; ok {
		close(ch)
		delete(m.waiting, e)
	}
}

// waitKey waits for tenant's claim of key: its outcome once it has one;
// errNoOutcome when no send of it is running, or its send ends without an
// outcome; errNotClaimed for an unknown key, errReleased for one released
// while it waited; ctx's error when ctx ends first.
func (m *memStore[R]) waitKey(ctx context.Context, tenant, key string) (R, error) {
	var zero R
	m.mu.Lock()
	e, ok := m.find(tenant, key)
	switch {
	case !ok:
		_, pruned := m.tomb(tenant, key)
		m.mu.Unlock()
		if pruned {
			return zero, errWaitPruned
		}
		return zero, errNotClaimed
	case e.pruned:
		m.mu.Unlock()
		return zero, errWaitPruned
	case e.done:
		m.mu.Unlock()
		return e.outcome, nil
	case !e.sending:
		m.mu.Unlock()
		return zero, errNoOutcome
	}
	ch, ok := m.waiting[e]
	if !ok {
		if m.waiting == nil {
			m.waiting = make(map[*entry[R]]chan struct{})
		}
		ch = make(chan struct{})
		m.waiting[e] = ch
	}
	m.mu.Unlock()
	select {
	case <-ch:
	case <-ctx.Done():
		return zero, ctx.Err()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case e.pruned:
		return zero, errWaitPruned
	case e.done:
		return e.outcome, nil
	case e.released:
		return zero, errReleased
	}
	return zero, errNoOutcome
}

// Release implements Store.
func (m *memStore[R]) Release(_ context.Context, tenant, key string, token Token) (Record[R], bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.find(tenant, key)
	if !ok || e.token != token {
		return m.tombOf(tenant, key, token), false, nil
	}
	return e.release(key)
}

func (m *memStore[R]) releaseIdle(_ context.Context, tenant, key string) (Record[R], bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.find(tenant, key)
	switch {
	case !ok:
		if t, ok := m.tomb(tenant, key); ok {
			return tombRecord[R](t), false, nil
		}
		return Record[R]{}, false, nil
	case e.sending && !e.done:
		return e.record(), false, errSending
	}
	return e.release(key)
}

func (m *memStore[R]) releaseClaim(_ context.Context, tenant, key string, token Token) (Record[R], bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.find(tenant, key)
	switch {
	case !ok || e.token != token:
		return m.tombOf(tenant, key, token), false, nil
	case e.sending && !e.done:
		return Record[R]{}, false, errSending
	}
	return e.release(key)
}

// release deletes e, key's claim, with its withdrawal's claim, unless e has
// an outcome. The caller holds the lock.
func (e *entry[R]) release(key string) (Record[R], bool, error) {
	if e.done {
		return e.record(), false, nil
	}
	delete(e.space.keys, key)
	e.space.claims.release(e.fp.WithdrawalID, key)
	e.released = true
	e.wake()
	return e.record(), true, nil
}

// Abandon implements Abandoner, for a ledger that runs the memory store
// through the Store interface: the sends of a ledger on the memory store
// itself are known to it without one.
func (m *memStore[R]) Abandon(_ context.Context, tenant, key string, token Token) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.find(tenant, key); ok && e.token == token && !e.done {
		e.abandoned = true
		e.wake()
	}
	return nil
}

// Lookup implements Store.
func (m *memStore[R]) Lookup(_ context.Context, tenant, key string) (Record[R], bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.find(tenant, key); ok {
		return e.record(), true, nil
	}
	if t, ok := m.tomb(tenant, key); ok {
		return tombRecord[R](t), true, nil
	}
	return Record[R]{}, false, nil
}

// ClaimedBy implements Store.
func (m *memStore[R]) ClaimedBy(_ context.Context, tenant, withdrawalID string) (string, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var key string
	var ok bool
	if sp := m.space(tenant); sp != nil {
		key, ok = sp.claims.holder(withdrawalID)
	}
	return key, ok, nil
}

// ListInFlight implements Lister. It looks at every claim of the tenants
// selected, under the store's lock, and sorts those it selects: a cost in
// proportion to the keys held, which is fine in memory. Sending is true for a
// claim whose send a ledger on this store is running.
func (m *memStore[R]) ListInFlight(_ context.Context, q ListQuery) ([]Claim, error) {
	type found struct {
		tenant, key string
		e           *entry[R]
	}
	var before, afterAt int64
	if !q.ClaimedBefore.IsZero() {
		before = q.ClaimedBefore.UnixNano()
	}
	if q.After != nil {
		afterAt = q.After.ClaimedAt.UnixNano()
	}
	// order compares two claims in the listing's order.
	order := func(at int64, tenant, key string, bat int64, btenant, bkey string) int {
		return cmp.Or(cmp.Compare(at, bat), cmp.Compare(tenant, btenant), cmp.Compare(key, bkey))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var all []found
	scan := func(tenant string, sp *space[R]) {
		if sp == nil {
			return
		}
		for key, e := range sp.keys {
			switch {
			case e.done:
			case before != 0 && e.at >= before:
			case q.After != nil && order(e.at, tenant, key, afterAt, q.After.Tenant, q.After.Key) <= 0:
			default:
				all = append(all, found{tenant, key, e})
			}
		}
	}
	if q.Tenants == nil {
		scan("", &m.def)
		for tenant, sp := range m.tenants {
			scan(tenant, sp)
		}
	} else {
		for i, tenant := range q.Tenants {
			if !slices.Contains(q.Tenants[:i], tenant) {
				scan(tenant, m.space(tenant))
			}
		}
	}
	slices.SortFunc(all, func(a, b found) int {
		return order(a.e.at, a.tenant, a.key, b.e.at, b.tenant, b.key)
	})
	all = all[:min(len(all), max(q.Limit, 0))]
	claims := make([]Claim, len(all))
	for i, f := range all {
		claims[i] = Claim{Tenant: f.tenant, Key: f.key, Fingerprint: f.e.record().Fingerprint,
			ClaimedAt: time.Unix(0, f.e.at), Token: f.e.token, Sending: f.e.sending, Abandoned: f.e.abandoned}
	}
	return claims, nil
}

func (m *memStore[R]) listInFlight(ctx context.Context, q ListQuery) ([]Claim, error) {
	return m.ListInFlight(ctx, q)
}

// Prune implements Pruner. The done claims are kept in the order they were
// done, so a Prune looks at the claims it prunes and one more, under the
// store's lock: its cost is in proportion to limit, whatever the store holds.
// A claim's time is when it was done by the wall clock; should the clock
// step back, a claim done after the step waits for the next Prune past it.
// Each pruned claim's entry goes; its tombstone keeps the key, the
// withdrawal id and the token.
func (m *memStore[R]) Prune(_ context.Context, before time.Time, limit int) ([]PrunedRecord, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	at := before.UnixNano()
	n := 0
	for n < len(m.settled) && n < limit && m.settled[n].at < at {
		n++
	}
	if n == 0 {
		return nil, nil
	}
	pruned := make([]PrunedRecord, n)
	for i, e := range m.settled[:n] {
		sp := e.space
		if sp.pruned == nil {
			sp.pruned = make(map[string]tombstone)
		}
		delete(sp.keys, e.key)
		sp.pruned[e.key] = tombstone{withdrawalID: e.fp.WithdrawalID, token: e.token}
		e.pruned = true
		pruned[i] = PrunedRecord{Tenant: sp.tenant, Key: e.key, WithdrawalID: e.fp.WithdrawalID}
		m.settled[i] = nil
	}
	m.settled = m.settled[n:]
	return pruned, nil
}
