package ledgertest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemledger/submissions"
	"github.com/idemledger/submissions/driver"
)

// Tenants: keys and withdrawal claims are per tenant. The same key and the
// same withdrawal id are used in every tenant of these tests, so that any
// operation that reached across tenants would show.
var tenantTests = []test{
	{"SameKeyInTwoTenantsSendsInEach", testSameKeyInTwoTenantsSendsInEach},
	{"SameWithdrawalInTwoTenantsIsClaimedInEach", testSameWithdrawalInTwoTenantsIsClaimedInEach},
	{"ResolveStaysInItsTenant", testResolveStaysInItsTenant},
	{"ReleaseStaysInItsTenant", testReleaseStaysInItsTenant},
	{"TenantIDsAreExact", testTenantIDsAreExact},
	{"InvalidTenantIsRefusedByEveryMethod", testInvalidTenantIsRefusedByEveryMethod},
	{"TenantNamesATenantAbsolutely", testTenantNamesATenantAbsolutely},
	{"InstancesShareTenants", testInstancesShareTenants},
	{"ConcurrentTenantsOnOneKeyAndWithdrawal", testConcurrentTenantsOnOneKeyAndWithdrawal},
}

// longTenant is a valid tenant id of MaxTenantLen bytes, in multibyte UTF-8.
var longTenant = strings.Repeat("é", driver.MaxTenantLen/2)

// sentIn returns a send that answers as the rail does, with the tenant in the
// transaction, so that an outcome replayed into another tenant would show.
func (r *rail) sentIn(tenant string) func(context.Context, Withdrawal) (Withdrawal, error) {
	return func(_ context.Context, w Withdrawal) (Withdrawal, error) {
		r.calls.Add(1)
		return sentTx(w, "0xtx-"+tenant+"-"+w.ID), nil
	}
}

// testSameKeyInTwoTenantsSendsInEach: a key done in one tenant is unknown in
// the others, so the same request there is sent, not replayed, and every
// tenant reads its own outcome.
func testSameKeyInTwoTenantsSendsInEach(t *testing.T, newStore Factory) {
	f := setUp(t, newStore)
	tenants := []string{"", "acme", longTenant}
	for i, tenant := range tenants {
		out, replayed, err := f.s.Tenant(tenant).SubmitOrReplay(bg, "req-1", f.w, f.rail.sentIn(tenant))
		require.NoError(t, err, "tenant %q", tenant)
		require.False(t, replayed, "tenant %q: the first submit of the key in this tenant", tenant)
		require.Equal(t, sentTx(f.w, "0xtx-"+tenant+"-w-1"), out, "tenant %q", tenant)
		f.rail.requireSends(t, int64(i+1))
	}
	for _, tenant := range tenants {
		v := f.s.Tenant(tenant)
		want := sentTx(f.w, "0xtx-"+tenant+"-w-1")
		out, replayed, err := v.SubmitOrReplay(bg, "req-1", f.w, f.rail.sentIn(tenant))
		require.NoError(t, err, "tenant %q", tenant)
		require.True(t, replayed, "tenant %q: a retry replays", tenant)
		require.Equal(t, want, out, "tenant %q replays its own outcome", tenant)
		requireOutcome(t, v, "req-1", want, true)
		requireHolder(t, v, "w-1", "req-1")
	}
	f.rail.requireSends(t, int64(len(tenants)))

	// A key done in one tenant may be used for another withdrawal in the next.
	out, err := f.s.Tenant("other").Submit(bg, "req-1", newWithdrawal("w-2"), f.rail.send)
	require.NoError(t, err, "the key for another withdrawal in a fourth tenant")
	require.Equal(t, "w-2", out.ID)
}

// testSameWithdrawalInTwoTenantsIsClaimedInEach: a withdrawal id claimed in
// one tenant is free in another, and a conflict names a holder of the
// caller's own tenant only.
func testSameWithdrawalInTwoTenantsIsClaimedInEach(t *testing.T, newStore Factory) {
	f := setUp(t, newStore)
	acme, globex := f.s.Tenant("acme"), f.s.Tenant("globex")
	_, err := acme.Submit(bg, "req-a", f.w, f.rail.send)
	require.NoError(t, err)
	_, err = globex.Submit(bg, "req-g", f.w, f.rail.send)
	require.NoError(t, err, "the same withdrawal id under another key in another tenant")
	f.rail.requireSends(t, 2)
	requireHolder(t, acme, "w-1", "req-a")
	requireHolder(t, globex, "w-1", "req-g")
	requireHolder(t, f.s, "w-1", "")

	_, err = acme.Submit(bg, "req-x", f.w, f.rail.send)
	ce := requireConflict(t, err, "req-a")
	assert.Equal(t, "acme", ce.Tenant, "ConflictError.Tenant")
	assert.Equal(t, "req-x", ce.Key, "ConflictError.Key")
	_, err = globex.Submit(bg, "req-x", f.w, f.rail.send)
	ce = requireConflict(t, err, "req-g")
	assert.Equal(t, "globex", ce.Tenant, "ConflictError.Tenant")
	f.rail.requireSends(t, 2)

	// Resolve's claim check stays in its tenant too: a key new in a third
	// tenant resolves the withdrawal there.
	require.NoError(t, f.s.Tenant("initech").Resolve(bg, "req-a", sentTx(f.w, "0xtx-found")))
	requireOutcome(t, f.s.Tenant("initech"), "req-a", sentTx(f.w, "0xtx-found"), true)
	requireOutcome(t, acme, "req-a", sentTx(f.w, "0xtx-w-1"), true)
}

// testResolveStaysInItsTenant: a key in flight in two tenants, resolved in
// one, stays in flight in the other.
func testResolveStaysInItsTenant(t *testing.T, newStore Factory) {
	f := setUp(t, newStore)
	acme, globex := f.s.Tenant("acme"), f.s.Tenant("globex")
	strand(t, acme, "req-1", f.w)
	strand(t, globex, "req-1", f.w)

	require.NoError(t, globex.Resolve(bg, "req-1", sentTx(f.w, "0xtx-globex")))
	requireOutcome(t, globex, "req-1", sentTx(f.w, "0xtx-globex"), true)
	requireKeptClaim(t, acme, "req-1", f.w)

	// A different outcome in acme is acme's own: accepted there, and the
	// outcome in globex is unchanged.
	require.NoError(t, acme.Resolve(bg, "req-1", sentTx(f.w, "0xtx-acme")))
	requireOutcome(t, acme, "req-1", sentTx(f.w, "0xtx-acme"), true)
	requireOutcome(t, globex, "req-1", sentTx(f.w, "0xtx-globex"), true)
	requireRefusal(t, globex.Resolve(bg, "req-1", sentTx(f.w, "0xtx-acme")), submissions.ErrIdempotencyConflict)
	requireOutcome(t, f.s, "req-1", Withdrawal{}, false)
}

// testReleaseStaysInItsTenant: releasing a key in one tenant drops neither
// the key nor the withdrawal's claim in another, and a refused Release
// refuses for its own tenant's reason.
func testReleaseStaysInItsTenant(t *testing.T, newStore Factory) {
	f := setUp(t, newStore)
	acme, globex := f.s.Tenant("acme"), f.s.Tenant("globex")
	strand(t, acme, "req-1", f.w)
	_, err := globex.Submit(bg, "req-1", f.w, f.rail.send)
	require.NoError(t, err)

	requireRefusal(t, globex.Release(bg, "req-1"), submissions.ErrIdempotencyConflict)
	require.NoError(t, acme.Release(bg, "req-1"), "the key in flight in acme")
	requireHolder(t, acme, "w-1", "")
	requireHolder(t, globex, "w-1", "req-1")
	requireOutcome(t, globex, "req-1", sentTx(f.w, "0xtx-w-1"), true)

	// Releasing a key that only another tenant has is a no-op.
	require.NoError(t, f.s.Release(bg, "req-1"), "the key is unknown in the default tenant")
	requireHolder(t, globex, "w-1", "req-1")

	// acme's withdrawal is free again there, for another key.
	_, err = acme.Submit(bg, "req-2", f.w, f.rail.send)
	require.NoError(t, err)
	f.rail.requireSends(t, 2)
}

// testTenantIDsAreExact: tenant ids are not trimmed or folded; ids that
// differ in any byte are different tenants.
func testTenantIDsAreExact(t *testing.T, newStore Factory) {
	f := setUp(t, newStore)
	tenants := []string{"acme", " acme", "acme ", "ACME", "acmé", longTenant}
	for _, tenant := range tenants {
		_, err := f.s.Tenant(tenant).Submit(bg, "req-1", f.w, f.rail.sentIn(tenant))
		require.NoError(t, err, "tenant %q", tenant)
	}
	f.rail.requireSends(t, int64(len(tenants)))
	for _, tenant := range tenants {
		requireOutcome(t, f.s.Tenant(tenant), "req-1", sentTx(f.w, "0xtx-"+tenant+"-w-1"), true)
	}
}

// testInvalidTenantIsRefusedByEveryMethod: a view of an invalid tenant
// refuses every call, before the key is looked at, and nothing reaches the
// store.
func testInvalidTenantIsRefusedByEveryMethod(t *testing.T, newStore Factory) {
	for name, tenant := range map[string]string{
		"too long":      longTenant + "x",
		"invalid UTF-8": "acme\xff",
		"NUL":           "ac\x00me",
	} {
		t.Run(name, func(t *testing.T) {
			calls := 0
			st := &hooked{Store: newStore(t), before: func(string) error { calls++; return nil }}
			f := setUpOn(t, st)
			v := f.s.Tenant(tenant)
			for _, key := range []string{"req-1", "", "   "} { // the tenant is checked before the key
				_, err := v.Submit(bg, key, f.w, f.rail.send)
				requireRefusal(t, err, submissions.ErrInvalidTenant)
				_, replayed, err := v.SubmitOrReplay(bg, key, f.w, f.rail.send)
				requireRefusal(t, err, submissions.ErrInvalidTenant)
				require.False(t, replayed)
				requireRefusal(t, v.Resolve(bg, key, sentTx(f.w, "0xtx")), submissions.ErrInvalidTenant)
				requireRefusal(t, v.Release(bg, key), submissions.ErrInvalidTenant)
				_, ok, err := v.Outcome(bg, key)
				requireRefusal(t, err, submissions.ErrInvalidTenant)
				require.False(t, ok)
			}
			_, ok, err := v.ClaimedBy(bg, "w-1")
			requireRefusal(t, err, submissions.ErrInvalidTenant)
			require.False(t, ok)
			f.rail.requireSends(t, 0)
			require.Zero(t, calls, "store calls")
			requireHolder(t, f.s, "w-1", "")
		})
	}
}

// testTenantNamesATenantAbsolutely: a view's Tenant is a view of the whole
// ledger, not of the view's tenant.
func testTenantNamesATenantAbsolutely(t *testing.T, newStore Factory) {
	f := setUp(t, newStore)
	_, err := f.s.Tenant("acme").Tenant("globex").Submit(bg, "req-1", f.w, f.rail.send)
	require.NoError(t, err)
	requireHolder(t, f.s.Tenant("globex"), "w-1", "req-1")
	requireHolder(t, f.s.Tenant("acme"), "w-1", "")
	requireHolder(t, f.s.Tenant("globex").Tenant(""), "w-1", "")
	requireHolder(t, f.s.Tenant("acme\xff").Tenant("globex"), "w-1", "req-1")
}

// testInstancesShareTenants: two ledgers on one store see each tenant's keys
// the same way.
func testInstancesShareTenants(t *testing.T, newStore Factory) {
	f := setUp(t, newStore)
	elsewhere := f.elsewhere()
	_, err := f.s.Tenant("acme").Submit(bg, "req-1", f.w, f.rail.sentIn("acme"))
	require.NoError(t, err)
	out, replayed, err := elsewhere.Tenant("acme").SubmitOrReplay(bg, "req-1", f.w, f.rail.sentIn("acme"))
	require.NoError(t, err)
	require.True(t, replayed, "the other instance replays in the same tenant")
	require.Equal(t, sentTx(f.w, "0xtx-acme-w-1"), out)
	out, replayed, err = elsewhere.Tenant("globex").SubmitOrReplay(bg, "req-1", f.w, f.rail.sentIn("globex"))
	require.NoError(t, err)
	require.False(t, replayed, "the other instance sends in another tenant")
	require.Equal(t, sentTx(f.w, "0xtx-globex-w-1"), out)
	f.rail.requireSends(t, 2)
}

// testConcurrentTenantsOnOneKeyAndWithdrawal: taps of one key, and of
// second keys, for one withdrawal id in several tenants at once, through two
// instances: one send in each tenant, and every caller sees only its own
// tenant's outcome and holder.
func testConcurrentTenantsOnOneKeyAndWithdrawal(t *testing.T, newStore Factory) {
	tenants := []string{"", "acme", "globex", longTenant}
	const tapsPerTenant = 16
	for round := range 5 {
		f := setUp(t, newStore)
		instances := []*submissions.Submissions[Withdrawal]{f.s, f.elsewhere()}
		sends := make([]atomic.Int64, len(tenants))
		// Each tenant's send answers once every call that does not send has
		// returned (or after a while, if more calls send than tenants).
		n := len(tenants) * tapsPerTenant
		var returned atomic.Int64
		others := make(chan struct{})
		errs := together(t, n, func(i int, _ <-chan struct{}) error {
			err := tapInTenants(i, tenants, instances, f.w, sends, others)
			if returned.Add(1) == int64(n-len(tenants)) {
				close(others)
			}
			return err
		})
		for _, err := range errs {
			if err != nil {
				require.Condition(t, func() bool {
					return errors.Is(err, submissions.ErrSubmissionInFlight) || errors.Is(err, submissions.ErrIdempotencyConflict)
				}, "round %d: %v", round, err)
			}
		}
		for n, tenant := range tenants {
			require.Equal(t, int64(1), sends[n].Load(), "round %d: sends in tenant %q", round, tenant)
			v := f.s.Tenant(tenant)
			holder, ok, err := v.ClaimedBy(bg, "w-1")
			require.NoError(t, err)
			require.True(t, ok, "round %d: tenant %q has a holder", round, tenant)
			requireOutcome(t, v, holder, sentTx(f.w, "0xtx-"+tenant), true)
		}
	}
}

// tapInTenants is tap i of testConcurrentTenantsOnOneKeyAndWithdrawal: in
// tenant i%len(tenants), through one of instances, of key req-1 or, one tap
// in four, of a second key. Its send counts in sends and answers once others
// is closed. It returns an error for an outcome or conflict of another
// tenant, and the ledger's error otherwise.
func tapInTenants(i int, tenants []string, instances []*submissions.Submissions[Withdrawal], w Withdrawal, sends []atomic.Int64, others <-chan struct{}) error {
	n, tap := i%len(tenants), i/len(tenants)
	tenant := tenants[n]
	key := "req-1"
	if tap%4 == 3 {
		key = fmt.Sprint("req-", tap) // a second key for the same withdrawal
	}
	v := instances[tap%2].Tenant(tenant)
	out, err := v.Submit(bg, key, w, func(_ context.Context, w Withdrawal) (Withdrawal, error) {
		select {
		case <-others:
		case <-time.After(5 * time.Second):
		}
		sends[n].Add(1)
		return sentTx(w, "0xtx-"+tenant), nil
	})
	switch {
	case err == nil && out != sentTx(w, "0xtx-"+tenant):
		return fmt.Errorf("tenant %q got %+v", tenant, out)
	case err == nil:
		return nil
	}
	if ce, ok := errors.AsType[*submissions.ConflictError](err); ok && ce.Tenant != tenant {
		return fmt.Errorf("tenant %q: conflict in tenant %q: %v", tenant, ce.Tenant, err) // not wrapped: no refusal
	}
	return fmt.Errorf("tenant %q: %w", tenant, err)
}
