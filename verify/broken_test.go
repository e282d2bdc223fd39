package verify

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemledger/submissions"
	"github.com/idemledger/submissions/driver"
	"github.com/idemledger/submissions/internal/figures"
)

// A checker is only worth what it catches. Each store below has a bug of a
// kind a real store could have; ledgers run on it as they run on any Store,
// and the linearizability check, on histories drawn as for the real stores,
// must find a history that is not linearizable within brokenRun.histories
// histories. The stores wrap the memory store (or, on PostgreSQL, a table of
// their own), so that no change to the root package or pgstore can break
// this test: only a weaker check can. Each is an Abandoner, as the memory
// store and pgstore are (but for the PostgreSQL one, which the sequential
// checks, the only ones that Wait, do not run), so that a Wait for a claim
// whose send ended without an answer gives it away only by what its bug
// does.

// brokenRun bounds the search for a history that catches a broken store.
var brokenRun = linConfig{histories: 2000, clients: 6, ops: 12, groups: 2}

// broken is a broken store: a Store, and an Abandoner.
type broken interface {
	driver.Store[W]
	driver.Abandoner
	driver.Answerer[W]
}

// guarded returns n ledgers on st, as n instances of a service, each with
// marks of its own, and with the faults of the Settle kinds of Send. A
// ledger waits with st's WaitClaim when st is a Waiter.
func guarded(st broken, n int) []lane {
	var store driver.Store[W] = opaque{faultyStore{st}, st, st}
	if w, ok := st.(driver.Waiter[W]); ok {
		store = waitingOpaque{opaque{faultyStore{st}, st, st}, w}
	}
	lanes := make([]lane, n)
	for i := range lanes {
		lanes[i] = lane{submissions.NewWithStore(store, quiet), i}
	}
	return lanes
}

// waitingOpaque is opaque, and a Waiter whose WaitClaim notes its reads.
type waitingOpaque struct {
	opaque
	driver.Waiter[W]
}

// WaitClaim implements driver.Waiter.
func (s waitingOpaque) WaitClaim(ctx context.Context, tenant, key string, token driver.Token) (driver.Record[W], bool, error) {
	noteRead(ctx)
	return s.Waiter.WaitClaim(ctx, tenant, key, token)
}

func TestBrokenStoresAreCaught(t *testing.T) {
	for _, v := range []struct {
		name string
		new  func() broken
		// inSequence: the sequential checks catch it too, without a
		// fuzzer's guidance; the others need calls that overlap.
		inSequence bool
	}{
		{"WithdrawalClaimNotChecked", func() broken { return newPerKeyClaims() }, true},
		{"InFlightClaimsExpire", func() broken { return expiringClaims{newMemory()} }, true},
		{"ClaimTokensIgnored", func() broken { return tokenless{newMemory()} }, false},
		{"SettleOverwritesAnOutcome", func() broken { return newOverwriting() }, false},
		{"TenantIgnored", func() broken { return tenantBlind{newMemory()} }, true},
	} {
		t.Run(v.name, func(t *testing.T) {
			caught(t, brokenRun, func(int) []lane { return guarded(v.new(), 3) })
		})
		if v.inSequence {
			t.Run(v.name+"/InSequence", func(t *testing.T) {
				caughtInSequence(t, brokenSequences, func() []lane { return guarded(v.new(), 3) })
			})
		}
	}
}

// newMemory returns an empty memory store, as a Store and an Abandoner.
func newMemory() broken {
	return submissions.NewMemoryStore[W]().(broken)
}

// brokenSequences bounds the search for a sequence that catches a broken
// store.
const brokenSequences = 2000

// caughtInSequence runs sequences of steps on the lanes newLanes gives and
// on the model, read from random bytes as FuzzOperations reads its input,
// until a result differs, and fails t if none does within tries sequences.
func caughtInSequence(t *testing.T, tries int, newLanes func() []lane) {
	seed := linSeed(t)
	rng := rand.New(rand.NewPCG(seed, 0))
	for i := range tries {
		data := make([]byte, 4*(1+rng.IntN(64)))
		for j := range data {
			data[j] = byte(rng.Uint32())
		}
		r := &runner{lanes: newLanes()}
		err := r.runAll(decodeSteps(data))
		if err != nil {
			t.Logf("sequence %d (SUBMISSIONS_LIN_SEED=%d): %v", i, seed, err)
			figures.Add(t, "caught: sequence %d of at most %d differed from the model", i, tries)
			return
		}
	}
	t.Fatalf("no sequence of %d differed from the model (SUBMISSIONS_LIN_SEED=%d)", tries, seed)
}

// caught runs histories on the lanes newLanes gives until one is not
// linearizable, and fails t if none is within c.histories.
func caught(t *testing.T, c linConfig, newLanes func(h int) []lane) {
	run := checkHistories(t, c, "", newLanes)
	require.NotNil(t, run.failure, "no history of %d was found not linearizable (SUBMISSIONS_LIN_SEED=%d)", run.histories, run.seed)
	require.True(t, run.failure.notLinearizable, "the check failed, but not by finding a history that is not linearizable: %s", run.failure)
	t.Log(run.failure)
	figures.Add(t, "caught: history %d of at most %d was not linearizable (%d operations, in %v)",
		run.failure.history, c.histories, run.ops, run.elapsed.Round(1e6))
}

// perKeyClaims has its withdrawal index keyed by request key and withdrawal
// id together, as a unique constraint on both columns would be where one on
// the withdrawal alone was meant: a second key claims a withdrawal that
// another key holds.
type perKeyClaims struct {
	st   broken              // holds each withdrawal id prefixed with its key
	mu   sync.Mutex          // protects keys
	keys map[string][]string // every key claimed in each tenant, for ClaimedBy
}

func newPerKeyClaims() *perKeyClaims {
	return &perKeyClaims{st: newMemory(), keys: map[string][]string{}}
}

func (s *perKeyClaims) Abandon(ctx context.Context, tenant, key string, token driver.Token) error {
	return s.st.Abandon(ctx, tenant, key, token)
}

func (s *perKeyClaims) AbandonAnswered(ctx context.Context, tenant, key string, token driver.Token, answer *W) error {
	return s.st.AbandonAnswered(ctx, tenant, key, token, answer)
}

// unscoped returns rec with its withdrawal id as the ledger gave it.
func unscoped(rec driver.Record[W]) driver.Record[W] {
	if _, id, ok := strings.Cut(rec.Fingerprint.WithdrawalID, "\x00"); ok {
		rec.Fingerprint.WithdrawalID = id
	}
	return rec
}

func (s *perKeyClaims) Claim(ctx context.Context, tenant, key string, fp driver.Fingerprint, outcome *W) (driver.Record[W], bool, error) {
	s.mu.Lock()
	if !slices.Contains(s.keys[tenant], key) {
		s.keys[tenant] = append(s.keys[tenant], key)
	}
	s.mu.Unlock()
	fp.WithdrawalID = key + "\x00" + fp.WithdrawalID
	rec, claimed, err := s.st.Claim(ctx, tenant, key, fp, outcome)
	return unscoped(rec), claimed, err
}

func (s *perKeyClaims) Settle(ctx context.Context, tenant, key string, token driver.Token, outcome W) (driver.Record[W], bool, error) {
	rec, settled, err := s.st.Settle(ctx, tenant, key, token, outcome)
	return unscoped(rec), settled, err
}

func (s *perKeyClaims) Release(ctx context.Context, tenant, key string, token driver.Token) (driver.Record[W], bool, error) {
	rec, released, err := s.st.Release(ctx, tenant, key, token)
	return unscoped(rec), released, err
}

func (s *perKeyClaims) Lookup(ctx context.Context, tenant, key string) (driver.Record[W], bool, error) {
	rec, ok, err := s.st.Lookup(ctx, tenant, key)
	return unscoped(rec), ok, err
}

// ClaimedBy returns the first key, in order, that claims withdrawalID.
func (s *perKeyClaims) ClaimedBy(ctx context.Context, tenant, withdrawalID string) (string, bool, error) {
	s.mu.Lock()
	keys := slices.Sorted(slices.Values(s.keys[tenant]))
	s.mu.Unlock()
	for _, k := range keys {
		if holder, ok, err := s.st.ClaimedBy(ctx, tenant, k+"\x00"+withdrawalID); err != nil || ok {
			return holder, ok, err
		}
	}
	return "", false, nil
}

// expiringClaims takes a claim in flight for an expired one, as a key cache
// with a time to live of zero would: a claim of a key in flight releases it
// and claims it anew.
type expiringClaims struct{ broken }

func (s expiringClaims) Claim(ctx context.Context, tenant, key string, fp driver.Fingerprint, outcome *W) (driver.Record[W], bool, error) {
	rec, claimed, err := s.broken.Claim(ctx, tenant, key, fp, outcome)
	if err != nil || claimed || rec.Done {
		return rec, claimed, err
	}
	if _, _, err := s.broken.Release(ctx, tenant, key, rec.Token); err != nil {
		return driver.Record[W]{}, false, err
	}
	return s.broken.Claim(ctx, tenant, key, fp, outcome)
}

// tokenless ignores claim tokens: every claim has the same one, and Settle,
// Release and Abandon act on whatever claim the key has.
type tokenless struct{ broken }

// theToken is the one token tokenless reports.
const theToken driver.Token = 1

// same returns rec with theToken, unless it is the zero Record.
func same(rec driver.Record[W], ok bool, err error) (driver.Record[W], bool, error) {
	if rec != (driver.Record[W]{}) {
		rec.Token = theToken
	}
	return rec, ok, err
}

func (s tokenless) Claim(ctx context.Context, tenant, key string, fp driver.Fingerprint, outcome *W) (driver.Record[W], bool, error) {
	return same(s.broken.Claim(ctx, tenant, key, fp, outcome))
}

func (s tokenless) Lookup(ctx context.Context, tenant, key string) (driver.Record[W], bool, error) {
	return same(s.broken.Lookup(ctx, tenant, key))
}

func (s tokenless) Settle(ctx context.Context, tenant, key string, _ driver.Token, outcome W) (driver.Record[W], bool, error) {
	cur, ok, err := s.broken.Lookup(ctx, tenant, key)
	if err != nil || !ok {
		return driver.Record[W]{}, false, err
	}
	return same(s.broken.Settle(ctx, tenant, key, cur.Token, outcome))
}

func (s tokenless) Release(ctx context.Context, tenant, key string, _ driver.Token) (driver.Record[W], bool, error) {
	cur, ok, err := s.broken.Lookup(ctx, tenant, key)
	if err != nil || !ok {
		return driver.Record[W]{}, false, err
	}
	return same(s.broken.Release(ctx, tenant, key, cur.Token))
}

func (s tokenless) Abandon(ctx context.Context, tenant, key string, _ driver.Token) error {
	cur, ok, err := s.broken.Lookup(ctx, tenant, key)
	if err != nil || !ok {
		return err
	}
	return s.broken.Abandon(ctx, tenant, key, cur.Token)
}

// overwriting lets Settle write over an outcome already recorded on the
// claim, as an UPDATE without "AND outcome IS NULL" would. Each of its calls
// is one step, under its lock.
type overwriting struct {
	mu   sync.Mutex    // makes each call one step
	st   broken        // the claims, and the outcomes first recorded
	over map[claimOf]W // outcomes written over them
}

// claimOf names one claim.
type claimOf struct {
	tenant, key string
	token       driver.Token
}

func newOverwriting() *overwriting {
	return &overwriting{st: newMemory(), over: map[claimOf]W{}}
}

func (s *overwriting) Abandon(ctx context.Context, tenant, key string, token driver.Token) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st.Abandon(ctx, tenant, key, token)
}

func (s *overwriting) AbandonAnswered(ctx context.Context, tenant, key string, token driver.Token, answer *W) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st.AbandonAnswered(ctx, tenant, key, token, answer)
}

// latest returns rec, key's record, with the outcome last written over it.
// The caller holds s.mu.
func (s *overwriting) latest(tenant, key string, rec driver.Record[W]) driver.Record[W] {
	if o, ok := s.over[claimOf{tenant, key, rec.Token}]; ok && rec.Done {
		rec.Outcome = o
	}
	return rec
}

func (s *overwriting) Settle(ctx context.Context, tenant, key string, token driver.Token, outcome W) (driver.Record[W], bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, settled, err := s.st.Settle(ctx, tenant, key, token, outcome)
	if err == nil && !settled && rec.Done && rec.Token == token {
		s.over[claimOf{tenant, key, token}] = outcome
		rec.Outcome, settled = outcome, true
	}
	return rec, settled, err
}

func (s *overwriting) Claim(ctx context.Context, tenant, key string, fp driver.Fingerprint, outcome *W) (driver.Record[W], bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, claimed, err := s.st.Claim(ctx, tenant, key, fp, outcome)
	return s.latest(tenant, key, rec), claimed, err
}

func (s *overwriting) Release(ctx context.Context, tenant, key string, token driver.Token) (driver.Record[W], bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, released, err := s.st.Release(ctx, tenant, key, token)
	return s.latest(tenant, key, rec), released, err
}

func (s *overwriting) Lookup(ctx context.Context, tenant, key string) (driver.Record[W], bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, ok, err := s.st.Lookup(ctx, tenant, key)
	return s.latest(tenant, key, rec), ok, err
}

func (s *overwriting) ClaimedBy(ctx context.Context, tenant, withdrawalID string) (string, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st.ClaimedBy(ctx, tenant, withdrawalID)
}

// tenantBlind ignores the tenant, as a table whose unique constraints leave
// it out would: every tenant works in the default one's keys and claims. It
// names the caller's tenant in a conflict, so that only what it does gives it
// away, not what it says.
type tenantBlind struct{ st broken }

func (s tenantBlind) Claim(ctx context.Context, tenant, key string, fp driver.Fingerprint, outcome *W) (driver.Record[W], bool, error) {
	rec, claimed, err := s.st.Claim(ctx, "", key, fp, outcome)
	if conflict, ok := errors.AsType[*driver.ConflictError](err); ok {
		named := *conflict
		named.Tenant = tenant
		err = &named
	}
	return rec, claimed, err
}

func (s tenantBlind) Settle(ctx context.Context, _, key string, token driver.Token, outcome W) (driver.Record[W], bool, error) {
	return s.st.Settle(ctx, "", key, token, outcome)
}

func (s tenantBlind) Release(ctx context.Context, _, key string, token driver.Token) (driver.Record[W], bool, error) {
	return s.st.Release(ctx, "", key, token)
}

func (s tenantBlind) Lookup(ctx context.Context, _, key string) (driver.Record[W], bool, error) {
	return s.st.Lookup(ctx, "", key)
}

func (s tenantBlind) Abandon(ctx context.Context, _, key string, token driver.Token) error {
	return s.st.Abandon(ctx, "", key, token)
}

func (s tenantBlind) AbandonAnswered(ctx context.Context, _, key string, token driver.Token, answer *W) error {
	return s.st.AbandonAnswered(ctx, "", key, token, answer)
}

func (s tenantBlind) ClaimedBy(ctx context.Context, _, withdrawalID string) (string, bool, error) {
	return s.st.ClaimedBy(ctx, "", withdrawalID)
}

// A Waiter with a bug is caught by Waits that begin while a key is being
// sent, and that the steps of the rail, or the send's end, must end (see
// whileSending): the histories make no Waits, and the random sequences make
// few that meet such a step.
func TestBrokenWaitersAreCaught(t *testing.T) {
	for _, v := range []struct {
		name string
		new  func() broken
	}{
		{"WaitReturnsAtOnce", func() broken { return impatient{newMemory()} }},
		{"WaitMissesARelease", func() broken { return releaseBlind{newMemory()} }},
	} {
		t.Run(v.name, func(t *testing.T) {
			for _, seq := range whileSending(guarded(v.new(), 3)) {
				r := &runner{lanes: guarded(v.new(), 3)}
				if err := r.runAll(seq.steps); err != nil {
					t.Logf("%s: %v", seq.name, err)
					return
				}
			}
			t.Fatal("every sequence of whileSending ran as the model says")
		})
	}
}

// impatient is a Waiter that does not wait: WaitClaim returns the record as
// it is, as one that reads the row before it listens for its change, and
// never listens, would.
type impatient struct{ broken }

func (s impatient) WaitClaim(ctx context.Context, tenant, key string, _ driver.Token) (driver.Record[W], bool, error) {
	return s.Lookup(ctx, tenant, key)
}

// releaseBlind is a Waiter that learns that a claim was settled, abandoned
// or claimed anew, but not that it was released, as one notified by the
// changes of a row but not by its deletion would: it waits on until the key
// is claimed again, or its ctx ends.
type releaseBlind struct{ broken }

func (s releaseBlind) WaitClaim(ctx context.Context, tenant, key string, token driver.Token) (driver.Record[W], bool, error) {
	for {
		rec, ok, err := s.Lookup(ctx, tenant, key)
		if err != nil || (ok && (rec.Token != token || rec.Done || rec.Abandoned)) {
			return rec, ok, err
		}
		select {
		case <-time.After(time.Millisecond):
		case <-ctx.Done():
			return driver.Record[W]{}, false, ctx.Err()
		}
	}
}
