package submissions

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// errSending is what a backend refuses a release with while the ledger is
// running the key's send.
var errSending = errors.New("send running")

// backend is what a ledger runs on: a Store, plus the guard of rule 14 (which
// keys this ledger is sending), plus the order of its checks. memStore is one
// natively; guarded makes one of any Store.
type backend[R Fingerprinter] interface {
	// claim is Store.Claim with two more duties: it refuses a fingerprint
	// whose id or destination is not valid (checkIdentity) before creating a
	// record, and, when it claims a key in flight (outcome nil), it marks the
	// key as being sent in the same step, so that no release can come between,
	// and returns the ticket that settles the claim.
	claim(ctx context.Context, key string, fp Fingerprint, outcome *R) (Record[R], ticket[R], bool, error)
	// hold makes way for a Resolve or a Release of key: while it holds, this
	// ledger claims no key of that name to send it. A Release is refused with
	// errSending while the key is marked as being sent. The caller calls done
	// when it has finished.
	hold(key string, release bool) (done func(), err error)
	// settle is Store.Settle, for Resolve.
	settle(ctx context.Context, key string, fp Fingerprint, outcome R) (Record[R], bool, error)
	// release is Store.Release, refused with errSending while key is marked.
	release(ctx context.Context, key string) (Record[R], bool, error)
	lookup(ctx context.Context, key string) (Record[R], bool, error)
	claimedBy(ctx context.Context, withdrawalID string) (string, bool, error)
}

// A ticket settles one claim that a backend marked as being sent: with the
// send's outcome, or with none. Either way the mark is cleared. settle returns
// nil when it recorded the outcome, and otherwise the record as it stands (the
// zero Record if the key has gone): the usual answer costs no copy.
type ticket[R Fingerprinter] interface {
	settle(ctx context.Context, outcome R) (*Record[R], error)
	abandon()
}

// memStore is the embedded default Store: a key -> record map and a
// withdrawal id -> key claims map behind one mutex. It keeps the mark of rule
// 14 in the record itself.
type memStore[R Fingerprinter] struct {
	mu      sync.Mutex            // protects records and claims
	records map[string]*record[R] // request key -> record
	claims  claims                // withdrawal id -> request key
}

// record is what the memory store knows about one request key.
type record[R Fingerprinter] struct {
	store   *memStore[R] // the store it is in, so that a record is its own ticket
	fp      Fingerprint  // canonical; never changed
	outcome R            // meaningful only when done; never changed once done
	done    bool         // the outcome is known
	sending bool         // a ledger is running the key's send
	dropped bool         // released: no longer in the store
}

// NewMemoryStore returns an empty Store that keeps its state in memory, the
// one New uses. Its guarantees hold within one process.
func NewMemoryStore[R Fingerprinter]() Store[R] {
	return &memStore[R]{}
}

func (r *record[R]) snapshot() Record[R] {
	return Record[R]{Fingerprint: r.fp, Outcome: r.outcome, Done: r.done}
}

// Claim implements Store.
func (m *memStore[R]) Claim(ctx context.Context, key string, fp Fingerprint, outcome *R) (Record[R], bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	rec, claimed, err := m.take(key, &fp, outcome, false)
	if err != nil {
		return Record[R]{}, false, err
	}
	return rec.snapshot(), claimed, nil
}

func (m *memStore[R]) claim(_ context.Context, key string, fp Fingerprint, outcome *R) (Record[R], ticket[R], bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	rec, claimed, err := m.take(key, &fp, outcome, true)
	switch {
	case err != nil:
		return Record[R]{}, nil, false, err
	case claimed && outcome == nil: // not reached: Submit claims in memory through submit
		return Record[R]{}, rec, true, nil
	}
	return rec.snapshot(), nil, claimed, nil
}

// submit is claim for Submit without copying records: the claimed record
// (claimed true), or the record to replay, which is done and so is never
// written again, or the refusal.
func (m *memStore[R]) submit(key string, fp *Fingerprint) (rec *record[R], claimed bool, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if rec, claimed, err = m.take(key, fp, nil, true); err != nil || claimed {
		return rec, claimed, err
	}
	return rec, false, known(key, fp, &rec.fp, rec.done)
}

// take returns key's record, or claims key for fp when it has none: it
// checks fp's identity before it creates a record (a known key's record needs
// no check: the ledger compares it with fp), and marks a key claimed in flight
// as sending if mark. The caller holds m.mu.
func (m *memStore[R]) take(key string, fp *Fingerprint, outcome *R, mark bool) (rec *record[R], claimed bool, err error) {
	if rec, ok := m.records[key]; ok {
		return rec, false, nil
	}
	// Linear in the lengths of the id and destination, as hashing and
	// comparing them in the maps already is.
	if err := checkIdentity(fp); err != nil {
		return nil, false, err
	}
	rec = &record[R]{store: m, fp: *fp, sending: mark && outcome == nil}
	if outcome != nil {
		rec.outcome, rec.done = *outcome, true
	}
	if m.records == nil {
		m.records = make(map[string]*record[R])
		m.claims = make(claims)
	}
	if err := m.claims.take(fp.WithdrawalID, key); err != nil {
		return nil, false, err
	}
	m.records[key] = rec
	return rec, true, nil
}

// settle records the outcome of the send rec was claimed for, and clears its
// mark: a record is its own ticket.
func (r *record[R]) settle(_ context.Context, outcome R) (*Record[R], error) {
	r.store.mu.Lock()
	defer r.store.mu.Unlock()
	r.sending = false
	switch {
	case r.dropped: // released through the Store meanwhile
		return &Record[R]{}, nil
	case r.done: // resolved through another ledger on this store meanwhile
		rec := r.snapshot()
		return &rec, nil
	}
	r.outcome, r.done = outcome, true
	return nil, nil
}

func (r *record[R]) abandon() {
	r.store.mu.Lock()
	defer r.store.mu.Unlock()
	r.sending = false
}

// Settle implements Store.
func (m *memStore[R]) Settle(ctx context.Context, key string, fp Fingerprint, outcome R) (Record[R], bool, error) {
	return m.fix(key, fp, outcome)
}

func (m *memStore[R]) settle(ctx context.Context, key string, fp Fingerprint, outcome R) (Record[R], bool, error) {
	return m.Settle(ctx, key, fp, outcome)
}

// fix records outcome for key's record for fp while it has none.
func (m *memStore[R]) fix(key string, fp Fingerprint, outcome R) (Record[R], bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	rec, ok := m.records[key]
	switch {
	case !ok || rec.fp != fp:
		return Record[R]{}, false, nil
	case rec.done:
		return rec.snapshot(), false, nil
	}
	rec.outcome, rec.done = outcome, true
	return rec.snapshot(), true, nil
}

// hold has nothing to do: the memory store checks its marks in the same step
// as each change.
func (m *memStore[R]) hold(string, bool) (func(), error) { return func() {}, nil }

// Release implements Store.
func (m *memStore[R]) Release(ctx context.Context, key string) (Record[R], bool, error) {
	return m.drop(key, false)
}

func (m *memStore[R]) release(_ context.Context, key string) (Record[R], bool, error) {
	return m.drop(key, true)
}

// drop deletes key's record if it is in flight, and if guard, not marked.
func (m *memStore[R]) drop(key string, guard bool) (Record[R], bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	rec, ok := m.records[key]
	switch {
	case !ok:
		return Record[R]{}, false, nil
	case rec.done:
		return rec.snapshot(), false, nil
	case guard && rec.sending:
		return rec.snapshot(), false, errSending
	}
	delete(m.records, key)
	m.claims.drop(rec.fp.WithdrawalID, key)
	rec.dropped = true
	return rec.snapshot(), true, nil
}

// Lookup implements Store.
func (m *memStore[R]) Lookup(ctx context.Context, key string) (Record[R], bool, error) {
	return m.lookup(ctx, key)
}

func (m *memStore[R]) lookup(_ context.Context, key string) (Record[R], bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	rec, ok := m.records[key]
	if !ok {
		return Record[R]{}, false, nil
	}
	return rec.snapshot(), true, nil
}

// ClaimedBy implements Store.
func (m *memStore[R]) ClaimedBy(ctx context.Context, withdrawalID string) (string, bool, error) {
	return m.claimedBy(ctx, withdrawalID)
}

func (m *memStore[R]) claimedBy(_ context.Context, withdrawalID string) (string, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	key, ok := m.claims.holder(withdrawalID)
	return key, ok, nil
}

// guarded runs a ledger on any Store: it checks identities before claiming,
// and keeps the marks of rule 14 itself, with what it needs to keep them
// exact. A claim waits while this ledger releases or resolves the key, and a
// release waits while it claims the key, then is refused while it sends it:
// so nothing it releases or resolves is a claim made meanwhile, and no claim
// slips between a release's check and its delete. The store's calls run
// outside g.mu, so a slow one holds up only its own key.
type guarded[R Fingerprinter] struct {
	store Store[R]

	mu      sync.Mutex        // protects busy
	changed sync.Cond         // on mu: a use of some key ended
	busy    map[string]keyUse // keys this ledger is claiming, sending, releasing or resolving
}

// keyUse counts what a ledger is doing with a key.
type keyUse struct {
	claims int // Store.Claim calls running for a send
	sends  int // claimed sends running
	fixes  int // releases and resolves running
}

// set stores key's counts; the caller holds g.mu.
func (g *guarded[R]) set(key string, u keyUse) {
	if u == (keyUse{}) {
		delete(g.busy, key)
	} else {
		g.busy[key] = u
	}
}

// wait waits on g.changed; the caller holds g.mu.
func (g *guarded[R]) wait() {
	if g.changed.L == nil {
		g.changed.L = &g.mu
	}
	g.changed.Wait()
}

// claim counts an in-flight claim before asking the store, once no release
// or resolve of the key runs here, and turns it into a send when the store
// claims.
func (g *guarded[R]) claim(ctx context.Context, key string, fp Fingerprint, outcome *R) (rec Record[R], t ticket[R], claimed bool, err error) {
	if err := checkIdentity(&fp); err != nil {
		return Record[R]{}, nil, false, err
	}
	if outcome == nil {
		g.mu.Lock()
		for g.busy[key].fixes > 0 {
			g.wait()
		}
		u := g.busy[key]
		u.claims++
		g.set(key, u)
		g.mu.Unlock()
		defer g.claimed(key, &t) // also when the store panics
	}
	rec, claimed, err = g.store.Claim(ctx, key, fp, outcome)
	var conflict *ConflictError
	switch {
	case err != nil && !errors.As(err, &conflict) && outcome != nil:
		return rec, nil, false, fmt.Errorf("request key %s: the store failed while recording the outcome, which may or may not have been recorded (Resolve again to know): %w", key, err)
	case err != nil && !errors.As(err, &conflict):
		// The claim may have been written before the store failed to answer
		// (a connection lost after the commit): nothing was sent either way.
		return rec, nil, false, fmt.Errorf("request key %s: the store failed while claiming it, so nothing was sent; the claim may have been written (a retry then finds the key in flight, and Release frees it): %w", key, err)
	case err != nil || !claimed || outcome != nil:
		return rec, nil, claimed, err
	}
	return rec, &guardTicket[R]{g: g, key: key, fp: fp}, true, nil
}

// claimed ends the count of a claim, and starts that of a send if the claim
// handed out a ticket.
func (g *guarded[R]) claimed(key string, t *ticket[R]) {
	g.mu.Lock()
	defer g.mu.Unlock()
	u := g.busy[key]
	u.claims--
	if *t != nil {
		u.sends++
	}
	g.set(key, u)
	g.changed.Broadcast()
}

// guardTicket settles a claim made through a guarded store.
type guardTicket[R Fingerprinter] struct {
	g   *guarded[R]
	key string
	fp  Fingerprint
}

func (t *guardTicket[R]) settle(ctx context.Context, outcome R) (*Record[R], error) {
	defer t.abandon()
	rec, recorded, err := t.g.store.Settle(ctx, t.key, t.fp, outcome)
	if recorded || err != nil {
		return nil, err
	}
	return &rec, nil
}

func (t *guardTicket[R]) abandon() {
	t.g.mu.Lock()
	defer t.g.mu.Unlock()
	u := t.g.busy[t.key]
	u.sends--
	t.g.set(t.key, u)
}

func (g *guarded[R]) hold(key string, release bool) (func(), error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for release && g.busy[key].claims > 0 {
		g.wait()
	}
	u := g.busy[key]
	if release && u.sends > 0 {
		return nil, errSending
	}
	u.fixes++
	g.set(key, u)
	return func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		u := g.busy[key]
		u.fixes--
		g.set(key, u)
		g.changed.Broadcast()
	}, nil
}

// settle and release run inside hold.
func (g *guarded[R]) settle(ctx context.Context, key string, fp Fingerprint, outcome R) (Record[R], bool, error) {
	return g.store.Settle(ctx, key, fp, outcome)
}

func (g *guarded[R]) release(ctx context.Context, key string) (Record[R], bool, error) {
	return g.store.Release(ctx, key)
}

func (g *guarded[R]) lookup(ctx context.Context, key string) (Record[R], bool, error) {
	return g.store.Lookup(ctx, key)
}

func (g *guarded[R]) claimedBy(ctx context.Context, withdrawalID string) (string, bool, error) {
	return g.store.ClaimedBy(ctx, withdrawalID)
}
