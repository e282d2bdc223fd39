package submissions

import (
	"cmp"
	"context"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/idemledger/submissions/driver"
)

// memStore is the embedded default Store: per tenant, request key -> claim
// and withdrawal id -> key, all behind one mutex. It is a driver.Tracker:
// each claim carries the mark of a send running under it, set and checked in
// the same step as every change; and a driver.Replayer, a Waiter, a Lister,
// a Pruner and an Abandoner.
type memStore[R any] struct {
	mu      sync.Mutex                  // protects everything below, every space and every entry
	def     space[R]                    // the default tenant's
	tenants map[string]*space[R]        // every other tenant's, made by its first claim
	tokens  driver.Token                // the last token given
	settled []*entry[R]                 // the done claims not pruned yet, in the order they were done
	waiting map[*entry[R]]chan struct{} // claims in flight that a wait waits for: each closed when the claim changes
}

// space is one tenant's keys and claims in the memory store.
type space[R any] struct {
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
	token        driver.Token
}

// tombRecord returns the tombstone t as a Record.
func tombRecord[R any](t tombstone) driver.Record[R] {
	return driver.Record[R]{Fingerprint: Fingerprint{WithdrawalID: t.withdrawalID}, Done: true, Token: t.token, Pruned: true}
}

// entry is one claim in the memory store, and its own driver.Send. Its
// fields are a Record's, laid out to fit a smaller allocation: a fresh submit
// makes one.
type entry[R any] struct {
	space    *space[R]
	key      string
	fp       Fingerprint  // canonical
	outcome  R            // never changes once done
	token    driver.Token // never changes
	at       int64        // when claimed, and once done when done, in nanoseconds since the Unix epoch
	done     bool
	sending  bool // a ledger is running the claim's send
	released bool // released: no longer in the store
	pruned   bool // pruned: a tombstone holds its key
	// abandoned: a send of the claim ended without a recorded answer
	abandoned bool
	answered  bool // abandoned, with an answer that was not recorded
	answer    *R   // that answer, when kept
}

// NewMemoryStore returns an empty Store that keeps its state in memory, the
// one New uses. Its guarantees hold within one process. Every ledger on it
// knows the sends of every other (it is a driver.Tracker), and it has every
// other optional ability of package driver.
func NewMemoryStore[R Fingerprinter]() driver.Store[R] {
	return &memStore[R]{}
}

// record returns e as a Record. The caller holds the lock.
func (e *entry[R]) record() driver.Record[R] {
	rec := driver.Record[R]{Fingerprint: e.fp, Outcome: e.outcome, Done: e.done, Token: e.token, Abandoned: e.abandoned && !e.done}
	if rec.Abandoned && e.answered {
		rec.Answered = true
		if e.answer != nil {
			answer := *e.answer // the caller's own copy
			rec.Answer = &answer
		}
	}
	return rec
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

// lookup returns tenant's record of key, a tombstone's included, with the
// claim's entry when it has one. The caller holds m.mu.
func (m *memStore[R]) lookup(tenant, key string) (*entry[R], driver.Record[R], bool) {
	sp := m.space(tenant)
	if sp == nil {
		return nil, driver.Record[R]{}, false
	}
	if e, ok := sp.keys[key]; ok {
		return e, e.record(), true
	}
	if t, ok := sp.pruned[key]; ok {
		return nil, tombRecord[R](t), true
	}
	return nil, driver.Record[R]{}, false
}

// Claim implements driver.Store.
func (m *memStore[R]) Claim(_ context.Context, tenant, key string, fp Fingerprint, outcome *R) (driver.Record[R], bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, rec, ok := m.lookup(tenant, key); ok {
		return rec, false, nil
	}
	e, err := m.claim(tenant, key, &fp, outcome)
	if err != nil {
		return driver.Record[R]{}, false, err
	}
	return e.record(), true, nil
}

// ClaimSend implements driver.Tracker: Claim, with the new claim marked as
// being sent in the same step.
func (m *memStore[R]) ClaimSend(_ context.Context, tenant, key string, fp Fingerprint) (driver.Record[R], driver.Send[R], error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, rec, ok := m.lookup(tenant, key); ok {
		return rec, nil, nil
	}
	e, err := m.claim(tenant, key, &fp, nil)
	if err != nil {
		return driver.Record[R]{}, nil, err
	}
	e.sending = true
	return e.record(), e, nil
}

// claim makes tenant's claim of key for fp under a new token, and claims its
// withdrawal; or it returns a *ConflictError. The caller holds m.mu and has
// found no record of key.
func (m *memStore[R]) claim(tenant, key string, fp *Fingerprint, outcome *R) (*entry[R], error) {
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
	if outcome != nil {
		e.outcome, e.done = *outcome, true
		m.settled = append(m.settled, e)
	}
	sp.keys[key] = e
	return e, nil
}

// Replay implements driver.Replayer: tenant's record of key, held as given
// and done. Keys are held trimmed and valid, so a key found as given is one.
func (m *memStore[R]) Replay(tenant, key string) (*Fingerprint, *R) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.find(tenant, key)
	if !ok || !e.done {
		return nil, nil
	}
	return &e.fp, &e.outcome // neither changes once done
}

// Settle implements driver.Store.
func (m *memStore[R]) Settle(_ context.Context, tenant, key string, token driver.Token, outcome R) (driver.Record[R], bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.find(tenant, key)
	if !ok || e.token != token {
		return m.tombOf(tenant, key, token), false, nil
	}
	settled := e.settleOnce(outcome)
	return e.record(), settled, nil
}

// Settle implements driver.Send: Store.Settle of e, which ends its send.
func (e *entry[R]) Settle(_ context.Context, outcome R) (driver.Record[R], bool, error) {
	m := e.space.store
	m.mu.Lock()
	defer m.mu.Unlock()
	if rec, gone := e.endSend(); gone {
		return rec, false, nil
	}
	settled := e.settleOnce(outcome)
	return e.record(), settled, nil
}

// endSend ends e's send, and returns, when e is no longer in the store as a
// claim (released, or pruned), what the store holds of it: nothing, or its
// tombstone. The caller holds the lock.
func (e *entry[R]) endSend() (rec driver.Record[R], gone bool) {
	e.sending = false
	e.wake()
	switch {
	case e.released:
		return driver.Record[R]{}, true
	case e.pruned:
		return tombRecord[R](tombstone{e.fp.WithdrawalID, e.token}), true
	}
	return driver.Record[R]{}, false
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
func (m *memStore[R]) tombOf(tenant, key string, token driver.Token) driver.Record[R] {
	if sp := m.space(tenant); sp != nil {
		if t, ok := sp.pruned[key]; ok && t.token == token {
			return tombRecord[R](t)
		}
	}
	return driver.Record[R]{}
}

// Abandon implements driver.Send: e's send ends, and e, if in flight, is
// abandoned.
func (e *entry[R]) Abandon(context.Context) error {
	m := e.space.store
	m.mu.Lock()
	defer m.mu.Unlock()
	e.sending = false
	e.abandoned = true
	e.wake()
	return nil
}

// AbandonAnswered implements driver.Send: e's send ends, and e, if in
// flight, is abandoned with answer.
func (e *entry[R]) AbandonAnswered(_ context.Context, answer *R) error {
	m := e.space.store
	m.mu.Lock()
	defer m.mu.Unlock()
	e.sending = false
	e.answerWith(answer)
	return nil
}

// answerWith marks e, if in flight, abandoned with an answer, kept when not
// nil. The caller holds the lock.
func (e *entry[R]) answerWith(answer *R) {
	if e.done || e.released || e.pruned {
		return
	}
	e.abandoned, e.answered, e.answer = true, true, answer
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

// changed returns the channel closed when e next changes. The caller holds
// the lock.
func (m *memStore[R]) changed(e *entry[R]) <-chan struct{} {
	ch, ok := m.waiting[e]
	if !ok {
		if m.waiting == nil {
			m.waiting = make(map[*entry[R]]chan struct{})
		}
		ch = make(chan struct{})
		m.waiting[e] = ch
	}
	return ch
}

// Sending implements driver.Tracker.
func (m *memStore[R]) Sending(_ context.Context, tenant, key string, token driver.Token) (<-chan struct{}, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.find(tenant, key)
	if !ok || e.token != token || !e.sending {
		return nil, nil
	}
	return m.changed(e), nil
}

// WaitClaim implements driver.Waiter.
func (m *memStore[R]) WaitClaim(ctx context.Context, tenant, key string, token driver.Token) (driver.Record[R], bool, error) {
	for {
		m.mu.Lock()
		e, rec, ok := m.lookup(tenant, key)
		if e == nil || rec.Token != token || rec.Done || rec.Abandoned {
			m.mu.Unlock()
			return rec, ok, nil
		}
		ch := m.changed(e)
		m.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return driver.Record[R]{}, false, ctx.Err()
		}
	}
}

// Release implements driver.Store.
func (m *memStore[R]) Release(_ context.Context, tenant, key string, token driver.Token) (driver.Record[R], bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.find(tenant, key)
	if !ok || e.token != token {
		return m.tombOf(tenant, key, token), false, nil
	}
	if e.done || e.answered {
		return e.record(), false, nil
	}
	e.drop()
	return e.record(), true, nil
}

// drop deletes e, a claim in flight, with its claim of the withdrawal. The
// caller holds the lock.
func (e *entry[R]) drop() {
	delete(e.space.keys, e.key)
	e.space.claims.release(e.fp.WithdrawalID, e.key)
	e.released = true
	e.wake()
}

// Release implements driver.Send: e's send ends, and e, if in flight, is
// released, in one step.
func (e *entry[R]) Release(context.Context) (driver.Record[R], bool, error) {
	m := e.space.store
	m.mu.Lock()
	defer m.mu.Unlock()
	if rec, gone := e.endSend(); gone {
		return rec, false, nil
	}
	if e.done {
		return e.record(), false, nil
	}
	e.drop()
	return e.record(), true, nil
}

// Abandon implements driver.Abandoner, for a ledger that runs the memory
// store through another Store that wraps it.
func (m *memStore[R]) Abandon(_ context.Context, tenant, key string, token driver.Token) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.find(tenant, key); ok && e.token == token && !e.done {
		e.abandoned = true
		e.wake()
	}
	return nil
}

// AbandonAnswered implements driver.Answerer, for a ledger that runs the
// memory store through another Store that wraps it.
func (m *memStore[R]) AbandonAnswered(_ context.Context, tenant, key string, token driver.Token, answer *R) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.find(tenant, key); ok && e.token == token {
		e.answerWith(answer)
	}
	return nil
}

// Lookup implements driver.Store.
func (m *memStore[R]) Lookup(_ context.Context, tenant, key string) (driver.Record[R], bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, rec, ok := m.lookup(tenant, key)
	return rec, ok, nil
}

// ClaimedBy implements driver.Store.
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

// ListInFlight implements driver.Lister. It looks at every claim of the
// tenants selected, under the store's lock, and sorts those it selects: a
// cost in proportion to the keys held, which is fine in memory.
func (m *memStore[R]) ListInFlight(_ context.Context, q driver.ListQuery) ([]driver.InFlight, error) {
	type found struct {
		tenant, key string
		e           *entry[R]
	}
	var before, afterAt int64
	if !q.ClaimedBefore.IsZero() {
		before = nanos(q.ClaimedBefore)
	}
	if q.After != nil {
		afterAt = nanos(q.After.ClaimedAt)
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
	claims := make([]driver.InFlight, len(all))
	for i, f := range all {
		claims[i] = driver.InFlight{Tenant: f.tenant, Key: f.key, Fingerprint: f.e.fp,
			ClaimedAt: time.Unix(0, f.e.at), Token: f.e.token, Abandoned: f.e.abandoned, Answered: f.e.answered}
	}
	return claims, nil
}

// Prune implements driver.Pruner. The done claims are kept in the order they
// were done, so a Prune looks at the claims it prunes and one more, under the
// store's lock: its cost is in proportion to limit, whatever the store holds.
// A claim's time is when it was done by the wall clock; should the clock
// step back, a claim done after the step waits for the next Prune past it.
// Each pruned claim's entry goes; its tombstone keeps the key, the
// withdrawal id and the token.
func (m *memStore[R]) Prune(_ context.Context, before time.Time, limit int) ([]driver.PrunedRecord, error) {
	at := nanos(before)
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for n < len(m.settled) && n < limit && m.settled[n].at < at {
		n++
	}
	if n == 0 {
		return nil, nil
	}
	pruned := make([]driver.PrunedRecord, n)
	for i, e := range m.settled[:n] {
		sp := e.space
		if sp.pruned == nil {
			sp.pruned = make(map[string]tombstone)
		}
		delete(sp.keys, e.key)
		sp.pruned[e.key] = tombstone{withdrawalID: e.fp.WithdrawalID, token: e.token}
		e.pruned = true
		e.wake()
		pruned[i] = driver.PrunedRecord{Tenant: sp.tenant, Key: e.key, WithdrawalID: e.fp.WithdrawalID}
		m.settled[i] = nil
	}
	m.settled = m.settled[n:]
	return pruned, nil
}

// nanos returns t in nanoseconds since the Unix epoch, the store's times, as
// a bound: a time before (or after) the years those can hold, about 1678 to
// 2262, is before (or after) every time of the store.
func nanos(t time.Time) int64 {
	switch {
	case t.Before(time.Unix(0, math.MinInt64)):
		return math.MinInt64
	case t.After(time.Unix(0, math.MaxInt64)):
		return math.MaxInt64
	}
	return t.UnixNano()
}
