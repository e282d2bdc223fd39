package ledgertest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemledger/submissions"
	"github.com/idemledger/submissions/admin"
	"github.com/idemledger/submissions/driver"
	"github.com/idemledger/submissions/observe"
)

// Retention: settled records pruned before a horizon become tombstones that
// keep their key and withdrawal claimed, so that a pruned withdrawal is never
// sent again; records in flight are never pruned. A store that is not a
// driver.Pruner skips these tests, but the one of ErrNotSupported.
var retentionTests = []test{
	{"PruneTakesSettledRecordsBeforeTheHorizonOldestFirst", testPruneHorizonAndOrder},
	{"PruneNeverTakesAKeyInFlight", testPruneNeverInFlight},
	{"PrunedKeyIsNeverSentAgain", testPrunedKeyNeverSent},
	{"PrunedKeyAcrossInstances", testPrunedKeyAcrossInstances},
	{"PruneStaysInItsTenant", testPruneTenants},
	{"AdminPruneInBatches", testAdminPruneBatches},
	{"PruneWhileSubmitting", testPruneWhileSubmitting},
	{"ResolvedAndPrunedWhileSending", testResolvedAndPrunedWhileSending},
	{"PruneNotSupported", testPruneNotSupported},
}

// far is a horizon after every record a test settles.
func far() time.Time { return time.Now().Add(time.Hour) }

// adminPrune is Admin.Prune of s with no minimum retention and a horizon of
// now, after every record settled so far by the store's clock as well as
// the test's, give or take a few milliseconds between them: it waits that
// long first.
func adminPrune(ctx context.Context, s *submissions.Submissions[Withdrawal], batch int) (int, error) {
	time.Sleep(20 * time.Millisecond)
	return s.Admin().WithMinRetention(0).Prune(ctx, time.Now(), batch)
}

// pruner returns st as a Pruner, or skips t when it is not one.
func pruner(t *testing.T, st driver.Store[Withdrawal]) driver.Pruner {
	t.Helper()
	p, ok := st.(driver.Pruner)
	if !ok {
		t.Skip("the store is not a driver.Pruner")
	}
	return p
}

// horizon returns a time after everything done so far and before everything
// done after it returns, by the store's clock as well as the test's, give or
// take a few milliseconds between them.
func horizon() time.Time {
	time.Sleep(20 * time.Millisecond)
	h := time.Now()
	time.Sleep(20 * time.Millisecond)
	return h
}

// prunedKeys returns the keys of pruned, in order.
func prunedKeys(pruned []driver.PrunedRecord) []string {
	keys := make([]string, len(pruned))
	for i, p := range pruned {
		keys[i] = p.Key
	}
	return keys
}

// requirePruned stops t unless key, done for w, was pruned: every call on
// the key, or on w under another key, is refused with ErrPruned, nothing is
// sent, and the key still claims w.
func requirePruned(t *testing.T, s *submissions.Submissions[Withdrawal], key string, w Withdrawal) {
	t.Helper()
	r := &rail{}
	_, err := s.Submit(bg, key, w, r.send)
	requireRefusal(t, err, submissions.ErrPruned)
	require.Contains(t, err.Error(), key)
	_, replayed, err := s.SubmitOrReplay(bg, key, w, r.send)
	requireRefusal(t, err, submissions.ErrPruned)
	require.False(t, replayed)
	_, err = s.Submit(bg, key, newWithdrawal("other-"+w.ID), r.send)
	requireRefusal(t, err, submissions.ErrPruned)

	_, err = s.Submit(bg, "second-"+key, w, r.send)
	requireRefusal(t, err, submissions.ErrPruned)
	ce := requireConflict(t, err, key)
	require.True(t, ce.Pruned, "ConflictError.Pruned")
	require.Equal(t, "second-"+key, ce.Key)

	requireRefusal(t, s.Resolve(bg, key, sentTx(w, "0xtx-"+w.ID)), submissions.ErrPruned)
	err = s.Resolve(bg, "second-"+key, sentTx(w, "0xtx-"+w.ID))
	requireRefusal(t, err, submissions.ErrPruned)
	requireConflict(t, err, key)
	requireRefusal(t, s.Release(bg, key), submissions.ErrPruned)
	out, err := s.Wait(bg, key)
	requireRefusal(t, err, submissions.ErrPruned)
	require.Equal(t, Withdrawal{}, out)

	out, ok, err := s.Outcome(bg, key)
	requireRefusal(t, err, submissions.ErrPruned)
	require.False(t, ok)
	require.Equal(t, Withdrawal{}, out)
	requireHolder(t, s, w.ID, key)
	_, ok, err = s.Outcome(bg, "second-"+key)
	require.NoError(t, err)
	require.False(t, ok, "the refused key left no trace")
	r.requireSends(t, 0)
}

func testPruneHorizonAndOrder(t *testing.T, newStore Factory) {
	f := setUp(t, newStore)
	p := pruner(t, f.store)
	var ws []Withdrawal
	for i := range 5 {
		w := newWithdrawal(fmt.Sprintf("w-%d", i))
		ws = append(ws, w)
		_, err := f.s.Submit(bg, fmt.Sprintf("k-%d", i), w, f.rail.send)
		require.NoError(t, err)
		time.Sleep(2 * time.Millisecond) // each settled at its own time
	}
	h := horizon()
	late := newWithdrawal("w-late")
	_, err := f.s.Submit(bg, "k-late", late, f.rail.send)
	require.NoError(t, err)
	strand(t, f.s, "k-flight", newWithdrawal("w-flight"))

	pruned, err := p.Prune(bg, h, 2)
	require.NoError(t, err)
	require.Equal(t, []string{"k-0", "k-1"}, prunedKeys(pruned), "the oldest, at most limit")
	require.Equal(t, driver.PrunedRecord{Key: "k-0", WithdrawalID: "w-0"}, pruned[0])
	pruned, err = p.Prune(bg, h, 10)
	require.NoError(t, err)
	require.Equal(t, []string{"k-2", "k-3", "k-4"}, prunedKeys(pruned))
	pruned, err = p.Prune(bg, h, 10)
	require.NoError(t, err)
	require.Empty(t, pruned, "a tombstone is not pruned again; the record after the horizon stays")
	pruned, err = p.Prune(bg, h, 0)
	require.NoError(t, err)
	require.Empty(t, pruned)

	for i, w := range ws {
		requirePruned(t, f.s, fmt.Sprintf("k-%d", i), w)
	}
	rec, ok, err := f.store.Lookup(bg, "", "k-0")
	require.NoError(t, err)
	require.True(t, ok)
	require.True(t, rec.Pruned)
	require.True(t, rec.Done, "a tombstone is never in flight")
	require.Equal(t, "w-0", rec.Fingerprint.WithdrawalID)
	require.Equal(t, Withdrawal{}, rec.Outcome, "the outcome is dropped")

	out, replayed, err := f.s.SubmitOrReplay(bg, "k-late", late, f.rail.send)
	require.NoError(t, err)
	require.True(t, replayed, "settled after the horizon: kept")
	require.Equal(t, sentTx(late, "0xtx-w-late"), out)
	requireKeptClaim(t, f.s, "k-flight", newWithdrawal("w-flight"))
	f.rail.requireSends(t, 6)
}

func testPruneNeverInFlight(t *testing.T, newStore Factory) {
	f := setUp(t, newStore)
	p := pruner(t, f.store)
	stranded := newWithdrawal("w-stranded")
	strand(t, f.s, "k-stranded", stranded)
	sending := newWithdrawal("w-sending")
	started, finish := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := f.s.Submit(bg, "k-sending", sending, f.rail.blocking(started, finish))
		done <- err
	}()
	<-started

	pruned, err := p.Prune(bg, far(), 100)
	require.NoError(t, err)
	require.Empty(t, pruned, "keys in flight, stranded or being sent, are never pruned")
	n, err := adminPrune(bg, f.s, 0)
	require.NoError(t, err)
	require.Zero(t, n)
	claims, err := f.s.Admin().InFlight(bg, admin.InFlightQuery{})
	if !errors.Is(err, admin.ErrNotSupported) {
		require.NoError(t, err)
		require.Len(t, claims, 2)
	}

	close(finish)
	require.NoError(t, <-done, "the send under way settles after the prune")
	requireOutcome(t, f.s, "k-sending", sentTx(sending, "0xtx-w-sending"), true)
	requireKeptClaim(t, f.s, "k-stranded", stranded)

	// Resolved, the stranded key is settled, and prunable.
	require.NoError(t, f.s.Resolve(bg, "k-stranded", sentTx(stranded, "0xtx-checked")))
	pruned, err = p.Prune(bg, far(), 100)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"k-sending", "k-stranded"}, prunedKeys(pruned))
	requirePruned(t, f.s, "k-stranded", stranded)
	requirePruned(t, f.s, "k-sending", sending)
	claims, err = f.s.Admin().InFlight(bg, admin.InFlightQuery{})
	if !errors.Is(err, admin.ErrNotSupported) {
		require.NoError(t, err)
		require.Empty(t, claims, "a tombstone is never listed in flight")
	}
	f.rail.requireSends(t, 1)
}

func testPrunedKeyNeverSent(t *testing.T, newStore Factory) {
	f := setUp(t, newStore)
	pruner(t, f.store)
	_, err := f.s.Submit(bg, "k-1", f.w, f.rail.send)
	require.NoError(t, err)
	resolved := newWithdrawal("w-resolved")
	require.NoError(t, f.s.Resolve(bg, "k-resolved", sentTx(resolved, "0xtx-r")), "a key recorded done by Resolve")
	n, err := adminPrune(bg, f.s, 0)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	requirePruned(t, f.s, "k-1", f.w)
	requirePruned(t, f.s, "k-resolved", resolved)
	_, err = f.s.Submit(bg, "  k-1 ", f.w, f.rail.send)
	requireRefusal(t, err, submissions.ErrPruned)

	// An operator action on the pruned claim is refused too.
	rec, ok, err := f.store.Lookup(bg, "", "k-1")
	require.NoError(t, err)
	require.True(t, ok)
	c := admin.Claim{Key: "k-1", Token: rec.Token, Fingerprint: f.w.Fingerprint()}
	requireRefusal(t, f.s.Admin().ReleaseClaim(bg, c), submissions.ErrPruned)
	requireRefusal(t, f.s.Admin().ResolveClaim(bg, c, sentTx(f.w, "0xtx-w-1")), submissions.ErrPruned)
	f.rail.requireSends(t, 1)
	requireHolder(t, f.s, f.w.ID, "k-1")
}

func testPrunedKeyAcrossInstances(t *testing.T, newStore Factory) {
	st := newStore(t)
	p := pruner(t, st)
	a := submissions.NewWithStore(st, submissions.WithLogger(quiet))
	b := submissions.NewWithStore(st, submissions.WithLogger(quiet))
	r := &rail{}
	w := newWithdrawal("w-1")
	_, err := a.Submit(bg, "k-1", w, r.send)
	require.NoError(t, err)
	_, err = b.Submit(bg, "k-1", w, r.send)
	require.NoError(t, err, "a replay on the other instance, which has now seen the key")
	_, err = p.Prune(bg, far(), 10)
	require.NoError(t, err)
	requirePruned(t, a, "k-1", w)
	requirePruned(t, b, "k-1", w)
	r.requireSends(t, 1)
}

func testPruneTenants(t *testing.T, newStore Factory) {
	st := newStore(t)
	p := pruner(t, st)
	s := submissions.NewWithStore(st, submissions.WithLogger(quiet))
	r := &rail{}
	w := newWithdrawal("w-1")
	_, err := s.Tenant("a").Submit(bg, "k-1", w, r.send)
	require.NoError(t, err)
	h := horizon()
	for _, tenant := range []string{"", "b"} {
		_, err = s.Tenant(tenant).Submit(bg, "k-1", w, r.send)
		require.NoError(t, err)
	}
	pruned, err := p.Prune(bg, h, 10)
	require.NoError(t, err)
	require.Equal(t, []driver.PrunedRecord{{Tenant: "a", Key: "k-1", WithdrawalID: "w-1"}}, pruned)
	requirePruned(t, s.Tenant("a"), "k-1", w)
	for _, tenant := range []string{"", "b"} {
		out, replayed, err := s.Tenant(tenant).SubmitOrReplay(bg, "k-1", w, r.send)
		require.NoError(t, err, "tenant %q", tenant)
		require.True(t, replayed)
		require.Equal(t, sentTx(w, "0xtx-w-1"), out)
	}
	// A fresh key in another tenant is free to claim the same withdrawal id.
	_, err = s.Tenant("c").Submit(bg, "k-2", w, r.send)
	require.NoError(t, err)
	r.requireSends(t, 4)
}

// kindEvents is an Observer that keeps the events of one kind.
type kindEvents struct {
	kind observe.EventKind
	mu   sync.Mutex
	got  []observe.Event
}

func (e *kindEvents) Observe(_ context.Context, ev observe.Event) {
	if ev.Kind != e.kind {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.got = append(e.got, ev)
}

func testAdminPruneBatches(t *testing.T, newStore Factory) {
	st := newStore(t)
	pruner(t, st)
	obs := &kindEvents{kind: observe.EventPruned}
	s := submissions.NewWithStore(st, submissions.WithLogger(quiet), submissions.WithObserver(obs))
	r := &rail{}
	for i := range 7 {
		_, err := s.Tenant("t").Submit(bg, fmt.Sprintf("k-%d", i), newWithdrawal(fmt.Sprintf("w-%d", i)), r.send)
		require.NoError(t, err)
	}
	strand(t, s, "k-flight", newWithdrawal("w-flight"))
	n, err := adminPrune(bg, s, 3)
	require.NoError(t, err)
	require.Equal(t, 7, n, "batches of 3 until one prunes fewer")
	require.Len(t, obs.got, 7)
	var keys []string
	for _, ev := range obs.got {
		require.Equal(t, "t", ev.Tenant)
		require.Equal(t, "w-"+ev.Key[len("k-"):], ev.WithdrawalID)
		keys = append(keys, ev.Key)
	}
	slices.Sort(keys)
	require.Equal(t, []string{"k-0", "k-1", "k-2", "k-3", "k-4", "k-5", "k-6"}, keys)
	n, err = adminPrune(bg, s, 3)
	require.NoError(t, err)
	require.Zero(t, n)

	ctx, cancel := context.WithCancel(bg)
	cancel()
	n, err = adminPrune(ctx, s, 3)
	require.ErrorIs(t, err, context.Canceled)
	require.Zero(t, n)
	requireKeptClaim(t, s, "k-flight", newWithdrawal("w-flight"))
}

// testPruneWhileSubmitting prunes, from two pruners at once, while many
// goroutines submit fresh keys, retries and second keys for the same
// withdrawals: no withdrawal is sent twice, and no answer of a send is lost
// to a prune.
func testPruneWhileSubmitting(t *testing.T, newStore Factory) {
	st := newStore(t)
	pruner(t, st)
	a := submissions.NewWithStore(st, submissions.WithLogger(quiet))
	b := submissions.NewWithStore(st, submissions.WithLogger(quiet))
	const withdrawals, callers, pruners = 24, 6, 2
	var sends [withdrawals]atomic.Int64
	send := func(_ context.Context, w Withdrawal) (Withdrawal, error) {
		var i int
		_, err := fmt.Sscanf(w.ID, "w-%d", &i)
		if err != nil {
			return Withdrawal{}, err
		}
		sends[i].Add(1)
		return sentTx(w, "0xtx-"+w.ID), nil
	}
	var stop atomic.Bool
	var pruned atomic.Int64
	var left atomic.Int64 // submitters not done yet
	left.Store(withdrawals * callers)
	errs := together(t, withdrawals*callers+pruners, func(i int, _ <-chan struct{}) error {
		if i >= withdrawals*callers { // a pruner, until the submitters are done
			for !stop.Load() {
				n, err := a.Admin().WithMinRetention(0).Prune(bg, time.Now(), 4)
				if err != nil {
					return err
				}
				pruned.Add(int64(n))
			}
			return nil
		}
		wi, c := i%withdrawals, i/withdrawals
		defer func() {
			if left.Add(-1) == 0 {
				stop.Store(true)
			}
		}()
		ledger := a
		if c%2 == 1 {
			ledger = b
		}
		key := fmt.Sprintf("k-%d", wi)
		if c >= callers-2 {
			key = fmt.Sprintf("k-%d-%d", wi, c) // a second key for the withdrawal
		}
		_, err := ledger.Submit(bg, key, newWithdrawal(fmt.Sprintf("w-%d", wi)), send)
		switch {
		case err == nil, errors.Is(err, submissions.ErrSubmissionInFlight),
			errors.Is(err, submissions.ErrIdempotencyConflict), errors.Is(err, submissions.ErrPruned):
			return nil
		}
		return err
	})
	stop.Store(true)
	for _, err := range errs {
		require.NoError(t, err, "only refusals: no answer lost to a prune")
	}
	for i := range withdrawals {
		require.LessOrEqual(t, sends[i].Load(), int64(1), "withdrawal w-%d sent at most once", i)
	}

	// Everything settled is pruned now; nothing is sent again, under any key.
	n, err := adminPrune(bg, a, 0)
	require.NoError(t, err)
	var total int64
	for i := range withdrawals {
		total += sends[i].Load()
	}
	require.Equal(t, total, pruned.Load()+int64(n), "every settled record pruned exactly once")
	for wi := range withdrawals {
		w := newWithdrawal(fmt.Sprintf("w-%d", wi))
		for _, key := range []string{fmt.Sprintf("k-%d", wi), fmt.Sprintf("k-%d-%d", wi, callers-1), "fresh"} {
			_, err := b.Submit(bg, key, w, send)
			if sends[wi].Load() == 1 {
				requireRefusal(t, err, submissions.ErrPruned)
			}
		}
		require.LessOrEqual(t, sends[wi].Load(), int64(1), "withdrawal w-%d sent at most once", wi)
	}
}

// testResolvedAndPrunedWhileSending: a key resolved while its send runs, and
// pruned before the send answers: the answer comes back unrecorded (the
// outcome it would be compared with is gone), and the key stays pruned.
func testResolvedAndPrunedWhileSending(t *testing.T, newStore Factory) {
	f := setUp(t, newStore)
	pruner(t, f.store)
	started, finish := make(chan struct{}), make(chan struct{})
	type result struct {
		out Withdrawal
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := f.s.Submit(bg, "k-1", f.w, f.rail.blocking(started, finish))
		done <- result{out, err}
	}()
	<-started
	require.NoError(t, f.s.Resolve(bg, "k-1", sentTx(f.w, "0xtx-w-1")))
	n, err := adminPrune(bg, f.s, 0)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	close(finish)
	r := <-done
	require.ErrorIs(t, r.err, submissions.ErrOutcomeNotRecorded)
	require.Equal(t, sentTx(f.w, "0xtx-w-1"), r.out, "the answer comes back")
	requirePruned(t, f.s, "k-1", f.w)
	f.rail.requireSends(t, 1)
}

// plain is a Store with none of the optional abilities.
type plain struct{ driver.Store[Withdrawal] }

func testPruneNotSupported(t *testing.T, newStore Factory) {
	s := submissions.NewWithStore[Withdrawal](plain{newStore(t)}, submissions.WithLogger(quiet))
	n, err := adminPrune(bg, s, 0)
	require.ErrorIs(t, err, admin.ErrNotSupported)
	require.Zero(t, n)
	assert.NotErrorIs(t, err, submissions.ErrStoreFailed)
}
