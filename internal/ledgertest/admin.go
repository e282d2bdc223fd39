package ledgertest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemledger/submissions"
	"github.com/idemledger/submissions/admin"
	"github.com/idemledger/submissions/driver"
	"github.com/idemledger/submissions/observe"
)

// Admin: the keys in flight listed across tenants, actions on one listed
// claim by its token, and reconciliation from a rail's evidence. A store
// that is not a driver.Lister skips the listing tests and must give
// ErrNotSupported.
var adminTests = []test{
	{"ListsTheKeysInFlightOldestFirst", testListsTheKeysInFlightOldestFirst},
	{"ListsInPagesWhileClaimsComeAndGo", testListsInPagesWhileClaimsComeAndGo},
	{"ListsByAge", testListsByAge},
	{"ListsByTenant", testListsByTenant},
	{"ListsSendingOnlyOnTheLedgerSending", testListsSendingOnlyOnTheLedgerSending},
	{"ResolveClaimRecordsOnTheListedClaim", testResolveClaimRecordsOnTheListedClaim},
	{"ReleaseClaimFreesTheListedClaim", testReleaseClaimFreesTheListedClaim},
	{"ActionsOnAClaimReleasedAndClaimedAgainChangeNothing", testActionsOnAClaimReleasedAndClaimedAgainChangeNothing},
	{"ReconcileActsOnTheRailsVerdicts", testReconcileActsOnTheRailsVerdicts},
	{"ReconcileLeavesYoungerClaimsAlone", testReconcileLeavesYoungerClaimsAlone},
	{"ReconcileStopsWhenItsContextEnds", testReconcileStopsWhenItsContextEnds},
	{"ReconcileLeavesAClaimTakenMeanwhileAlone", testReconcileLeavesAClaimTakenMeanwhileAlone},
	{"ConcurrentReconcilersCloseEachClaimOnce", testConcurrentReconcilersCloseEachClaimOnce},
	{"AStoreThatCannotListSaysSo", testAStoreThatCannotListSaysSo},
}

// lister is a store seen through the Store and Lister interfaces only, so
// that a ledger on it runs it as it runs any store (a second instance).
type lister struct {
	driver.Store[Withdrawal]
	driver.Lister
}

// adminFixture is a fixture whose store is a Lister (the test skips
// otherwise), with an observer of its ledger.
type adminFixture struct {
	*fixture
	admin  *admin.Admin[Withdrawal]
	events *events
}

func setUpAdmin(t *testing.T, newStore Factory) *adminFixture {
	t.Helper()
	st := newStore(t)
	if _, ok := st.(driver.Lister); !ok {
		t.Skipf("%T is not a driver.Lister", st)
	}
	f := setUpOn(t, st)
	ev := &events{}
	f.s = submissions.NewWithStore(st, submissions.WithLogger(slog.New(f.logs)), submissions.WithObserver(ev))
	return &adminFixture{fixture: f, admin: f.s.Admin(), events: ev}
}

// elsewhere returns another instance on the same store, with an observer of
// its own.
func (f *adminFixture) elsewhere() (*submissions.Submissions[Withdrawal], *events) {
	ev := &events{}
	return submissions.NewWithStore[Withdrawal](lister{f.store, f.store.(driver.Lister)},
		submissions.WithLogger(quiet), submissions.WithObserver(ev)), ev
}

// events is an Observer that counts what it is told by kind and key.
type events struct {
	mu     sync.Mutex
	counts map[string]int // kind/tenant/key
}

func (o *events) Observe(_ context.Context, e observe.Event) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.counts == nil {
		o.counts = make(map[string]int)
	}
	o.counts[fmt.Sprintf("%v/%s/%s", e.Kind, e.Tenant, e.Key)]++
}

// count returns how many events of kind about tenant's key o was told of.
func (o *events) count(kind observe.EventKind, tenant, key string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.counts[fmt.Sprintf("%v/%s/%s", kind, tenant, key)]
}

// inFlight lists every claim in flight, stopping t on an error.
func inFlight(t *testing.T, a *admin.Admin[Withdrawal], q admin.InFlightQuery) []admin.Claim {
	t.Helper()
	claims, err := a.InFlight(bg, q)
	require.NoError(t, err, "InFlight")
	return claims
}

// names returns each claim's tenant and key, as "tenant/key".
func names[C admin.Claim | driver.InFlight](claims []C) []string {
	var out []string
	for _, c := range claims {
		switch c := any(c).(type) {
		case admin.Claim:
			out = append(out, c.Tenant+"/"+c.Key)
		case driver.InFlight:
			out = append(out, c.Tenant+"/"+c.Key)
		}
	}
	return out
}

// requireOrdered stops t unless claims are in the listing's order, each
// strictly after the one before.
func requireOrdered(t *testing.T, claims []admin.Claim) {
	t.Helper()
	for i := 1; i < len(claims); i++ {
		a, b := claims[i-1], claims[i]
		order := a.ClaimedAt.Compare(b.ClaimedAt)
		if order == 0 {
			order = compareStrings(a.Tenant, b.Tenant)
		}
		if order == 0 {
			order = compareStrings(a.Key, b.Key)
		}
		require.Negative(t, order, "claim %d (%s/%s at %v) is not after claim %d (%s/%s at %v)",
			i, b.Tenant, b.Key, b.ClaimedAt, i-1, a.Tenant, a.Key, a.ClaimedAt)
	}
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// claimOf returns the listed claim of tenant's key, stopping t if there is
// none.
func claimOf(t *testing.T, a *admin.Admin[Withdrawal], tenant, key string) admin.Claim {
	t.Helper()
	for _, c := range inFlight(t, a, admin.InFlightQuery{Limit: admin.MaxListLimit}) {
		if c.Tenant == tenant && c.Key == key {
			return c
		}
	}
	require.Failf(t, "not listed", "%s/%s is not listed in flight", tenant, key)
	return admin.Claim{}
}

func testListsTheKeysInFlightOldestFirst(t *testing.T, newStore Factory) {
	f := setUpAdmin(t, newStore)
	start := time.Now()
	var want []string
	for i, tenant := range []string{"zeta", "", "acme", "acme", longTenant, ""} {
		key := fmt.Sprint("req-", i)
		strand(t, f.s.Tenant(tenant), key, newWithdrawal(fmt.Sprint("w-", i)))
		want = append(want, tenant+"/"+key)
	}
	// Done, resolved and released keys are not in flight.
	_, err := f.s.Tenant("acme").Submit(bg, "sent", newWithdrawal("w-sent"), f.rail.send)
	require.NoError(t, err)
	require.NoError(t, f.s.Resolve(bg, "resolved-unknown", newWithdrawal("w-resolved-unknown")))
	strand(t, f.s.Tenant("zeta"), "resolved", newWithdrawal("w-resolved"))
	require.NoError(t, f.s.Tenant("zeta").Resolve(bg, "resolved", newWithdrawal("w-resolved")))
	strand(t, f.s, "released", newWithdrawal("w-released"))
	require.NoError(t, f.s.Release(bg, "released"))

	for _, a := range []*admin.Admin[Withdrawal]{f.admin, f.s.Tenant("acme").Admin()} {
		claims := inFlight(t, a, admin.InFlightQuery{})
		require.ElementsMatch(t, want, names(claims), "the keys in flight, of every tenant")
		requireOrdered(t, claims)
		for _, c := range claims {
			rec, ok, err := f.store.Lookup(bg, c.Tenant, c.Key)
			require.NoError(t, err)
			require.True(t, ok)
			assert.Equal(t, rec.Token, c.Token, "%s/%s: token", c.Tenant, c.Key)
			assert.Equal(t, rec.Fingerprint, c.Fingerprint, "%s/%s: fingerprint, canonical", c.Tenant, c.Key)
			assert.WithinDuration(t, start, c.ClaimedAt, time.Minute, "%s/%s: claimed at", c.Tenant, c.Key)
			assert.False(t, c.Sending, "%s/%s: sending", c.Tenant, c.Key)
		}
	}
}

func testListsInPagesWhileClaimsComeAndGo(t *testing.T, newStore Factory) {
	f := setUpAdmin(t, newStore)
	tenants := []string{"", "acme", "globex"}
	stand := map[string]bool{} // claims that stand throughout the walk
	var gone []string          // claims released before the walk reaches them
	for i := range 12 {
		tenant, key := tenants[i%3], fmt.Sprint("req-", i)
		strand(t, f.s.Tenant(tenant), key, newWithdrawal(fmt.Sprint("w-", i)))
		stand[tenant+"/"+key] = true
	}
	seen := map[string]int{}
	var walk []admin.Claim
	var after *admin.Claim
	for page := 0; ; page++ {
		require.Less(t, page, 20, "the walk does not end")
		claims := inFlight(t, f.admin, admin.InFlightQuery{After: after, Limit: 3})
		require.LessOrEqual(t, len(claims), 3, "page %d", page)
		for _, c := range claims {
			seen[c.Tenant+"/"+c.Key+"/"+fmt.Sprint(c.Token)]++
			require.NotContains(t, gone, c.Tenant+"/"+c.Key, "page %d lists a claim released before it", page)
		}
		walk = append(walk, claims...)
		if len(claims) < 3 {
			break
		}
		after = &claims[len(claims)-1]
		// Meanwhile: one claim not listed yet is released, one listed is
		// released, and a new one is made.
		if page < 3 {
			listed, late := fmt.Sprint("req-", 3*page), fmt.Sprint("req-", 11-page)
			for _, key := range []string{listed, late} {
				tenant := tenants[keyNumber(key)%3]
				if !slices.Contains(names(walk), tenant+"/"+key) {
					gone = append(gone, tenant+"/"+key)
				}
				require.NoError(t, f.s.Tenant(tenant).Release(bg, key))
				delete(stand, tenant+"/"+key)
			}
			strand(t, f.s.Tenant("acme"), fmt.Sprint("new-", page), newWithdrawal(fmt.Sprint("w-new-", page)))
		}
	}
	requireOrdered(t, walk)
	for name, n := range seen {
		require.Equal(t, 1, n, "%s listed %d times", name, n)
	}
	for name := range stand {
		require.Contains(t, names(walk), name, "a claim that stood throughout the walk")
	}
	require.NotEmpty(t, gone, "the test released claims the walk had not reached")
}

// keyNumber returns the number at the end of a key "req-N".
func keyNumber(key string) int {
	var n int
	_, _ = fmt.Sscanf(key, "req-%d", &n)
	return n
}

func testListsByAge(t *testing.T, newStore Factory) {
	f := setUpAdmin(t, newStore)
	strand(t, f.s, "old", newWithdrawal("w-old"))
	old := claimOf(t, f.admin, "", "old")
	// Wait, on the clock, until the old claim is a second old.
	time.Sleep(time.Second - time.Since(old.ClaimedAt))
	strand(t, f.s.Tenant("acme"), "young", newWithdrawal("w-young"))
	young := claimOf(t, f.admin, "acme", "young")
	require.True(t, old.ClaimedAt.Before(young.ClaimedAt))

	require.Equal(t, []string{"/old", "acme/young"}, names(inFlight(t, f.admin, admin.InFlightQuery{})), "every claim")
	require.Equal(t, []string{"/old"}, names(inFlight(t, f.admin, admin.InFlightQuery{OlderThan: 500 * time.Millisecond})),
		"claims at least 500ms old (the young one was made less than 500ms before the listing)")
	require.Empty(t, inFlight(t, f.admin, admin.InFlightQuery{OlderThan: time.Hour}), "claims an hour old")

	// The store's bound is exact, and exclusive.
	l := f.store.(driver.Lister)
	for _, c := range []struct {
		before time.Time
		want   []string
	}{
		{young.ClaimedAt, []string{"/old"}},
		{old.ClaimedAt, nil},
		{young.ClaimedAt.Add(time.Microsecond), []string{"/old", "acme/young"}},
	} {
		claims, err := l.ListInFlight(bg, driver.ListQuery{ClaimedBefore: c.before, Limit: 10})
		require.NoError(t, err)
		require.Equal(t, c.want, names(claims), "claimed before %v", c.before)
	}
}

func testListsByTenant(t *testing.T, newStore Factory) {
	f := setUpAdmin(t, newStore)
	for i, tenant := range []string{"", "acme", "globex", "acme"} {
		strand(t, f.s.Tenant(tenant), fmt.Sprint("req-", i), newWithdrawal(fmt.Sprint("w-", i%3))) // the same ids in each tenant
	}
	for _, c := range []struct {
		tenants []string
		want    []string
	}{
		{nil, []string{"/req-0", "acme/req-1", "globex/req-2", "acme/req-3"}},
		{[]string{"acme"}, []string{"acme/req-1", "acme/req-3"}},
		{[]string{"globex", "", "globex"}, []string{"/req-0", "globex/req-2"}},
		{[]string{"nobody"}, nil},
		{[]string{}, nil},
	} {
		claims := inFlight(t, f.admin, admin.InFlightQuery{Tenants: c.tenants})
		require.ElementsMatch(t, c.want, names(claims), "tenants %q", c.tenants)
		requireOrdered(t, claims)
	}
	_, err := f.admin.InFlight(bg, admin.InFlightQuery{Tenants: []string{"acme", "bad\x00"}})
	requireRefusal(t, err, submissions.ErrInvalidTenant)
}

func testListsSendingOnlyOnTheLedgerSending(t *testing.T, newStore Factory) {
	f := setUpAdmin(t, newStore)
	elsewhere, _ := f.elsewhere()
	strand(t, f.s, "stranded", newWithdrawal("w-stranded"))
	started, finish := make(chan struct{}), make(chan struct{})
	done := make(chan error)
	go func() {
		_, err := f.s.Tenant("acme").Submit(bg, "sending", f.w, f.rail.blocking(started, finish))
		done <- err
	}()
	<-started
	sending := func(a *admin.Admin[Withdrawal]) map[string]bool {
		out := map[string]bool{}
		for _, c := range inFlight(t, a, admin.InFlightQuery{}) {
			out[c.Tenant+"/"+c.Key] = c.Sending
		}
		return out
	}
	require.Equal(t, map[string]bool{"/stranded": false, "acme/sending": true}, sending(f.admin), "on the ledger sending")
	require.Equal(t, map[string]bool{"/stranded": false, "acme/sending": false}, sending(elsewhere.Admin()), "on another instance")
	close(finish)
	require.NoError(t, <-done)
	require.Equal(t, map[string]bool{"/stranded": false}, sending(f.admin), "once sent, the key is not in flight")
}

func testResolveClaimRecordsOnTheListedClaim(t *testing.T, newStore Factory) {
	f := setUpAdmin(t, newStore)
	acme := f.s.Tenant("acme")
	strand(t, acme, "req-1", f.w)
	c := claimOf(t, f.admin, "acme", "req-1")
	found := sentTx(f.w, "0xfound")

	other := sentTx(newWithdrawal("w-2"), "0xfound")
	requireRefusal(t, f.admin.ResolveClaim(bg, c, other), submissions.ErrIdempotencyConflict)
	requireKeptClaim(t, acme, "req-1", f.w)

	require.NoError(t, f.admin.ResolveClaim(bg, c, found))
	require.Equal(t, 1, f.events.count(observe.EventResolved, "acme", "req-1"), "EventResolved")
	out, replayed, err := acme.SubmitOrReplay(bg, "req-1", f.w, f.rail.send)
	require.NoError(t, err)
	require.True(t, replayed)
	require.Equal(t, found, out, "a retry replays the outcome found")
	f.rail.requireSends(t, 0)
	requireOutcome(t, f.s, "req-1", Withdrawal{}, false) // the default tenant has no such key

	require.NoError(t, f.admin.ResolveClaim(bg, c, found), "the same outcome again")
	require.Equal(t, 1, f.events.count(observe.EventResolved, "acme", "req-1"), "EventResolved once")
	requireRefusal(t, f.admin.ResolveClaim(bg, c, sentTx(f.w, "0xother")), submissions.ErrIdempotencyConflict)
	requireRefusal(t, f.admin.ReleaseClaim(bg, c), submissions.ErrIdempotencyConflict)
	requireOutcome(t, acme, "req-1", found, true)

	bad := c
	bad.Tenant = "bad\xff"
	requireRefusal(t, f.admin.ResolveClaim(bg, bad, found), submissions.ErrInvalidTenant)
	bad = c
	bad.Key = " "
	requireRefusal(t, f.admin.ResolveClaim(bg, bad, found), submissions.ErrInvalidKey)
	requireRefusal(t, f.admin.ReleaseClaim(bg, bad), submissions.ErrInvalidKey)
}

func testReleaseClaimFreesTheListedClaim(t *testing.T, newStore Factory) {
	f := setUpAdmin(t, newStore)
	started, finish := make(chan struct{}), make(chan struct{})
	done := make(chan error)
	go func() {
		_, err := f.s.Tenant("acme").Submit(bg, "req-1", f.w, func(context.Context, Withdrawal) (Withdrawal, error) {
			close(started)
			<-finish
			return Withdrawal{}, errRail
		})
		done <- err
	}()
	<-started
	c := claimOf(t, f.admin, "acme", "req-1")
	requireRefusal(t, f.admin.ReleaseClaim(bg, c), submissions.ErrSubmissionInFlight)
	close(finish)
	require.ErrorIs(t, <-done, submissions.ErrOutcomeUnknown)

	require.NoError(t, f.admin.ReleaseClaim(bg, c))
	require.Equal(t, 1, f.events.count(observe.EventReleased, "acme", "req-1"), "EventReleased")
	requireHolder(t, f.s.Tenant("acme"), f.w.ID, "")
	require.ErrorIs(t, f.admin.ReleaseClaim(bg, c), admin.ErrClaimChanged, "a claim released already")
	require.Equal(t, 1, f.events.count(observe.EventReleased, "acme", "req-1"), "EventReleased once")
	_, err := f.s.Tenant("acme").Submit(bg, "req-2", f.w, f.rail.send)
	require.NoError(t, err, "the withdrawal is free again")
	f.rail.requireSends(t, 1)
}

func testActionsOnAClaimReleasedAndClaimedAgainChangeNothing(t *testing.T, newStore Factory) {
	f := setUpAdmin(t, newStore)
	strand(t, f.s, "req-1", f.w)
	first := claimOf(t, f.admin, "", "req-1")
	require.NoError(t, f.s.Release(bg, "req-1"))
	strand(t, f.s, "req-1", f.w)
	again := claimOf(t, f.admin, "", "req-1")
	require.NotEqual(t, first.Token, again.Token, "a new claim, a new token")

	for name, err := range map[string]error{
		"ResolveClaim": f.admin.ResolveClaim(bg, first, sentTx(f.w, "0xfound")),
		"ReleaseClaim": f.admin.ReleaseClaim(bg, first),
	} {
		requireRefusal(t, err, admin.ErrClaimChanged)
		assert.NotErrorIs(t, err, submissions.ErrSubmissionInFlight, name)
		assert.Contains(t, err.Error(), "req-1", name)
	}
	requireKeptClaim(t, f.s, "req-1", f.w)
	require.Equal(t, again.Token, claimOf(t, f.admin, "", "req-1").Token, "the new claim is untouched")
	require.Zero(t, f.events.count(observe.EventResolved, "", "req-1"))
}

// verdicts is a RailCheck that answers by key and counts its calls by key.
type verdicts struct {
	mu    sync.Mutex
	by    map[string]func(c admin.Claim) (admin.Finding[Withdrawal], error)
	calls map[string]int
}

func (v *verdicts) check(_ context.Context, c admin.Claim) (admin.Finding[Withdrawal], error) {
	v.mu.Lock()
	if v.calls == nil {
		v.calls = map[string]int{}
	}
	v.calls[c.Key]++
	answer := v.by[c.Key]
	v.mu.Unlock()
	if answer == nil {
		return admin.Finding[Withdrawal]{}, nil
	}
	return answer(c)
}

func (v *verdicts) called(key string) int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.calls[key]
}

func sentAs(w Withdrawal) func(admin.Claim) (admin.Finding[Withdrawal], error) {
	return func(admin.Claim) (admin.Finding[Withdrawal], error) {
		return admin.Finding[Withdrawal]{Verdict: admin.VerdictSent, Outcome: w}, nil
	}
}

func notSent(admin.Claim) (admin.Finding[Withdrawal], error) {
	return admin.Finding[Withdrawal]{Verdict: admin.VerdictNotSent}, nil
}

var errCheck = errors.New("rail unreachable")

func testReconcileActsOnTheRailsVerdicts(t *testing.T, newStore Factory) {
	f := setUpAdmin(t, newStore)
	ws := map[string]Withdrawal{}
	for _, key := range []string{"sent", "not-sent", "unknown", "check-fails", "sent-elsewhere", "odd-verdict"} {
		ws[key] = newWithdrawal("w-" + key)
		strand(t, f.s.Tenant("acme"), key, ws[key])
	}
	started, finish := make(chan struct{}), make(chan struct{})
	done := make(chan error)
	go func() {
		_, err := f.s.Submit(bg, "sending", newWithdrawal("w-sending"), f.rail.blocking(started, finish))
		done <- err
	}()
	<-started
	found := sentTx(ws["sent"], "0xfound")
	v := &verdicts{by: map[string]func(admin.Claim) (admin.Finding[Withdrawal], error){
		"sent":     sentAs(found),
		"not-sent": notSent,
		"check-fails": func(admin.Claim) (admin.Finding[Withdrawal], error) {
			return admin.Finding[Withdrawal]{}, errCheck
		},
		"sent-elsewhere": sentAs(sentTx(newWithdrawal("w-other"), "0xother")),
		"odd-verdict": func(admin.Claim) (admin.Finding[Withdrawal], error) {
			return admin.Finding[Withdrawal]{Verdict: 7}, nil
		},
		"sending": notSent,
	}}
	rep, err := f.admin.Reconcile(bg, 0, v.check)
	require.NoError(t, err)
	close(finish)
	require.NoError(t, <-done)

	assert.Equal(t, []string{"acme/sent"}, names(rep.Resolved), "resolved")
	assert.Equal(t, []string{"acme/not-sent"}, names(rep.Released), "released")
	assert.Equal(t, []string{"acme/unknown"}, names(rep.Unknown), "unknown")
	assert.Equal(t, []string{"/sending"}, names(rep.Skipped), "skipped")
	assert.Zero(t, v.called("sending"), "a claim this ledger is sending is not checked")
	failed := map[string]error{}
	for _, fe := range rep.Failed {
		failed[fe.Claim.Tenant+"/"+fe.Claim.Key] = fe
	}
	require.Len(t, failed, 3, "failed: %v", rep.Failed)
	assert.ErrorIs(t, failed["acme/check-fails"], errCheck)
	assert.ErrorIs(t, failed["acme/sent-elsewhere"], submissions.ErrIdempotencyConflict)
	assert.ErrorContains(t, failed["acme/odd-verdict"], "not a verdict")

	acme := f.s.Tenant("acme")
	out, replayed, err := acme.SubmitOrReplay(bg, "sent", ws["sent"], f.rail.send)
	require.NoError(t, err)
	assert.True(t, replayed)
	assert.Equal(t, found, out, "a retry of the resolved key replays the outcome found")
	f.rail.requireSends(t, 1) // the blocking send's
	_, err = acme.Submit(bg, "not-sent-2", ws["not-sent"], f.rail.send)
	require.NoError(t, err, "the released withdrawal is free again")
	f.rail.requireSends(t, 2)
	for _, key := range []string{"unknown", "check-fails", "sent-elsewhere", "odd-verdict"} {
		requireKeptClaim(t, acme, key, ws[key])
	}
	assert.Equal(t, 1, f.events.count(observe.EventResolved, "acme", "sent"))
	assert.Equal(t, 1, f.events.count(observe.EventReleased, "acme", "not-sent"))
}

func testReconcileLeavesYoungerClaimsAlone(t *testing.T, newStore Factory) {
	f := setUpAdmin(t, newStore)
	strand(t, f.s, "req-1", f.w)
	v := &verdicts{by: map[string]func(admin.Claim) (admin.Finding[Withdrawal], error){"req-1": notSent}}
	rep, err := f.admin.Reconcile(bg, time.Hour, v.check)
	require.NoError(t, err)
	require.Equal(t, admin.ReconcileReport{}, rep)
	require.Zero(t, v.called("req-1"))
	requireKeptClaim(t, f.s, "req-1", f.w)
}

func testReconcileStopsWhenItsContextEnds(t *testing.T, newStore Factory) {
	f := setUpAdmin(t, newStore)
	for i := range 3 {
		strand(t, f.s, fmt.Sprint("req-", i), newWithdrawal(fmt.Sprint("w-", i)))
	}
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	calls := 0
	rep, err := f.admin.Reconcile(ctx, 0, func(context.Context, admin.Claim) (admin.Finding[Withdrawal], error) {
		calls++
		if calls == 2 {
			cancel()
		}
		return admin.Finding[Withdrawal]{}, nil
	})
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, 2, calls, "no check after ctx ended")
	require.Equal(t, []string{"/req-0", "/req-1"}, names(rep.Unknown), "the report so far")
}

// testReconcileLeavesAClaimTakenMeanwhileAlone: while the rail is checked, the
// claim is released (by an operator, or another reconciler) and its key
// claimed again. Whatever the verdict, the new claim is untouched.
func testReconcileLeavesAClaimTakenMeanwhileAlone(t *testing.T, newStore Factory) {
	for _, verdict := range []admin.Verdict{admin.VerdictSent, admin.VerdictNotSent} {
		t.Run(verdict.String(), func(t *testing.T) {
			f := setUpAdmin(t, newStore)
			strand(t, f.s, "req-1", f.w)
			rep, err := f.admin.Reconcile(bg, 0, func(ctx context.Context, c admin.Claim) (admin.Finding[Withdrawal], error) {
				require.NoError(t, f.s.Release(ctx, "req-1"))
				strand(t, f.s, "req-1", f.w)
				return admin.Finding[Withdrawal]{Verdict: verdict, Outcome: sentTx(f.w, "0xfound")}, nil
			})
			require.NoError(t, err)
			requireKeptClaim(t, f.s, "req-1", f.w)
			require.Zero(t, f.events.count(observe.EventResolved, "", "req-1"))
			require.Equal(t, 1, f.events.count(observe.EventReleased, "", "req-1"), "the test's own Release")
			if verdict == admin.VerdictNotSent {
				// The claim checked is released, as the rail says: counted so.
				require.Equal(t, []string{"/req-1"}, names(rep.Released))
				require.Empty(t, rep.Failed)
				return
			}
			// Sent, but released meanwhile: an operator must look.
			require.Empty(t, rep.Resolved)
			require.Len(t, rep.Failed, 1)
			require.ErrorIs(t, rep.Failed[0], admin.ErrClaimChanged)
		})
	}
}

// testConcurrentReconcilersCloseEachClaimOnce: reconcilers on two ledgers
// sharing the store, released together, while each released key is claimed
// again as soon as it is free. Every claim is closed once, as the rail says
// (it knows nothing yet of the claims made again), and the claims made again
// stay in flight.
func testConcurrentReconcilersCloseEachClaimOnce(t *testing.T, newStore Factory) {
	const keys, reconcilers = 16, 4
	f := setUpAdmin(t, newStore)
	elsewhere, elsewhereEvents := f.elsewhere()
	admins := []*admin.Admin[Withdrawal]{f.admin, elsewhere.Admin()}
	v := &verdicts{by: map[string]func(admin.Claim) (admin.Finding[Withdrawal], error){}}
	for i := range keys {
		key, w := fmt.Sprint("req-", i), newWithdrawal(fmt.Sprint("w-", i))
		strand(t, f.s, key, w)
		answer, token := notSent, claimOf(t, f.admin, "", key).Token
		if i%2 == 0 {
			answer = sentAs(sentTx(w, "0xfound-"+w.ID))
		}
		v.by[key] = func(c admin.Claim) (admin.Finding[Withdrawal], error) {
			if c.Token != token {
				return admin.Finding[Withdrawal]{}, nil // a claim made again: its send is not on the rail yet
			}
			runtime.Gosched() // as a rail takes its time: let the others act meanwhile
			return answer(c)
		}
	}
	reports := make([]admin.ReconcileReport, reconcilers)
	// Each odd key is claimed again as soon as it is free, until it is.
	reclaim := func(i int) error {
		key, w := fmt.Sprint("req-", i), newWithdrawal(fmt.Sprint("w-", i))
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); runtime.Gosched() {
			_, err := f.s.Submit(bg, key, w, failing)
			switch {
			case errors.Is(err, submissions.ErrOutcomeUnknown):
				return nil
			case !errors.Is(err, submissions.ErrSubmissionInFlight):
				return fmt.Errorf("claim %s again: %w", key, err)
			}
		}
		return fmt.Errorf("%s was never released", key)
	}
	errs := together(t, reconcilers+keys/2, func(i int, _ <-chan struct{}) error {
		if i >= reconcilers {
			return reclaim(2*(i-reconcilers) + 1)
		}
		var err error
		reports[i], err = admins[i%2].Reconcile(bg, 0, v.check)
		return err
	})
	for _, err := range errs {
		require.NoError(t, err)
	}
	for _, rep := range reports {
		require.Empty(t, rep.Failed)
		for _, c := range rep.Unknown {
			require.Equal(t, 1, keyNumber(c.Key)%2, "only a claim made again is unknown")
		}
	}
	for i := range keys {
		key, w := fmt.Sprint("req-", i), newWithdrawal(fmt.Sprint("w-", i))
		resolved := f.events.count(observe.EventResolved, "", key) + elsewhereEvents.count(observe.EventResolved, "", key)
		released := f.events.count(observe.EventReleased, "", key) + elsewhereEvents.count(observe.EventReleased, "", key)
		if i%2 == 0 {
			require.Equal(t, 1, resolved, "%s resolved once", key)
			require.Zero(t, released, key)
			out, replayed, err := f.s.SubmitOrReplay(bg, key, w, f.rail.send)
			require.NoError(t, err)
			require.True(t, replayed)
			require.Equal(t, sentTx(w, "0xfound-"+w.ID), out)
			continue
		}
		require.Equal(t, 1, released, "%s released once", key)
		require.Zero(t, resolved, key)
		requireKeptClaim(t, f.s, key, w) // claimed again, and left so
	}
	f.rail.requireSends(t, 0)
}

func testAStoreThatCannotListSaysSo(t *testing.T, newStore Factory) {
	st := struct{ driver.Store[Withdrawal] }{newStore(t)}
	f := setUpOn(t, st)
	strand(t, f.s, "req-1", f.w)
	a := f.s.Admin()
	_, err := a.InFlight(bg, admin.InFlightQuery{})
	requireRefusal(t, err, admin.ErrNotSupported)
	called := false
	_, err = a.Reconcile(bg, 0, func(context.Context, admin.Claim) (admin.Finding[Withdrawal], error) {
		called = true
		return admin.Finding[Withdrawal]{}, nil
	})
	requireRefusal(t, err, admin.ErrNotSupported)
	require.False(t, called)
	requireKeptClaim(t, f.s, "req-1", f.w)

	// A claim known otherwise can still be acted on by its token.
	rec, ok, err := st.Lookup(bg, "", "req-1")
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, a.ReleaseClaim(bg, admin.Claim{Key: "req-1", Token: rec.Token}))
	requireHolder(t, f.s, f.w.ID, "")
}
