package submissions_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemledger/submissions"
	"github.com/idemledger/submissions/admin"
	"github.com/idemledger/submissions/driver"
)

// The rules of Admin are storetest's; these are its bounds, which are the
// root package's alone.

// listingLedgers returns a ledger of each kind on a Lister: in memory, and
// on a store it runs through the Store and Lister interfaces.
func listingLedgers() map[string]*submissions.Submissions[withdrawal] {
	st := submissions.NewMemoryStore[withdrawal]()
	return map[string]*submissions.Submissions[withdrawal]{
		"memory":               submissions.New[withdrawal](quiet),
		"behind the interface": submissions.NewWithStore[withdrawal](opaque{st, st.(driver.Lister), st.(driver.Pruner), st.(driver.Abandoner)}, quiet),
	}
}

// strandAll leaves n keys of s in flight, "req-0" to "req-<n-1>".
func strandAll(t *testing.T, s *submissions.Submissions[withdrawal], n int) {
	t.Helper()
	rail := errors.New("rail timed out")
	for i := range n {
		_, err := s.Submit(bg, fmt.Sprint("req-", i), newWithdrawal(fmt.Sprint("w-", i)), func(context.Context, withdrawal) (withdrawal, error) {
			return withdrawal{}, rail
		})
		require.ErrorIs(t, err, submissions.ErrOutcomeUnknown)
	}
}

func TestInFlightPageSizes(t *testing.T) {
	for name, s := range listingLedgers() {
		t.Run(name, func(t *testing.T) {
			strandAll(t, s, admin.MaxListLimit+1)
			a := s.Admin()
			for limit, want := range map[int]int{0: admin.DefaultListLimit, -1: admin.DefaultListLimit, 1: 1,
				admin.MaxListLimit: admin.MaxListLimit, admin.MaxListLimit + 1: admin.MaxListLimit} {
				claims, err := a.InFlight(bg, admin.InFlightQuery{Limit: limit})
				require.NoError(t, err)
				assert.Len(t, claims, want, "Limit %d", limit)
			}
		})
	}
}

// TestReconcileWalksEveryPage: Reconcile lists a page at a time, and checks
// every claim once, oldest first, however many pages they take.
func TestReconcileWalksEveryPage(t *testing.T) {
	for name, s := range listingLedgers() {
		t.Run(name, func(t *testing.T) {
			const n = 2*admin.DefaultListLimit + 7
			strandAll(t, s, n)
			want, err := s.Admin().InFlight(bg, admin.InFlightQuery{Limit: admin.MaxListLimit})
			require.NoError(t, err)
			require.Len(t, want, n)
			var checked []admin.Claim
			rep, err := s.Admin().Reconcile(bg, 0, func(_ context.Context, c admin.Claim) (admin.Finding[withdrawal], error) {
				checked = append(checked, c)
				return admin.Finding[withdrawal]{Verdict: admin.VerdictNotSent}, nil
			})
			require.NoError(t, err)
			assert.Equal(t, want, checked, "every claim checked once, oldest first")
			assert.Equal(t, want, rep.Released)
			left, err := s.Admin().InFlight(bg, admin.InFlightQuery{})
			require.NoError(t, err)
			assert.Empty(t, left)
		})
	}
}

func TestReconcileRefusesANilCheck(t *testing.T) {
	_, err := submissions.New[withdrawal](quiet).Admin().Reconcile(bg, 0, nil)
	require.EqualError(t, err, "submissions: Reconcile with a nil RailCheck")
}

// TestAdminCallsWithAContextDone: a ctx done before the call is its error,
// and nothing is read or changed.
func TestAdminCallsWithAContextDone(t *testing.T) {
	s := submissions.New[withdrawal](quiet)
	strandAll(t, s, 1)
	claims, err := s.Admin().InFlight(bg, admin.InFlightQuery{})
	require.NoError(t, err)
	require.Len(t, claims, 1)
	ctx, cancel := context.WithCancel(bg)
	cancel()
	a := s.Admin()
	_, err = a.InFlight(ctx, admin.InFlightQuery{})
	assert.ErrorIs(t, err, context.Canceled)
	_, err = a.Reconcile(ctx, 0, func(context.Context, admin.Claim) (admin.Finding[withdrawal], error) {
		panic("checked")
	})
	assert.ErrorIs(t, err, context.Canceled)
	assert.ErrorIs(t, a.ResolveClaim(ctx, claims[0], newWithdrawal("w-0")), context.Canceled)
	assert.ErrorIs(t, a.ReleaseClaim(ctx, claims[0]), context.Canceled)
	_, err = s.Submit(bg, "req-0", newWithdrawal("w-0"), nil)
	assert.ErrorIs(t, err, submissions.ErrSubmissionInFlight, "still in flight")
}

// TestReconcileCheckFailsAsItsContextEnds: a check that fails because ctx
// ended is not a claim's failure: Reconcile returns ctx's error, and the
// claim is in no list.
func TestReconcileCheckFailsAsItsContextEnds(t *testing.T) {
	s := submissions.New[withdrawal](quiet)
	strandAll(t, s, 2)
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	rep, err := s.Admin().Reconcile(ctx, 0, func(ctx context.Context, _ admin.Claim) (admin.Finding[withdrawal], error) {
		cancel()
		return admin.Finding[withdrawal]{}, ctx.Err()
	})
	require.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, admin.ReconcileReport{}, rep)
}

func TestVerdictNames(t *testing.T) {
	for v, want := range map[admin.Verdict]string{
		admin.VerdictUnknown: "unknown", admin.VerdictSent: "sent", admin.VerdictNotSent: "not sent", 9: "Verdict(9)",
	} {
		assert.Equal(t, want, v.String())
	}
}

func TestClaimErrorNamesTheKey(t *testing.T) {
	cause := errors.New("rail unreachable")
	err := error(admin.ClaimError{Claim: admin.Claim{Key: "req-1"}, Err: cause})
	assert.EqualError(t, err, "request key req-1: rail unreachable")
	assert.ErrorIs(t, err, cause)
}

// TestInFlightClaimTimes: ClaimedAt is the time of the claim, by the
// ledger's clock in memory.
func TestInFlightClaimTimes(t *testing.T) {
	s := submissions.New[withdrawal](quiet)
	before := time.Now()
	strandAll(t, s, 1)
	after := time.Now()
	claims, err := s.Admin().InFlight(bg, admin.InFlightQuery{})
	require.NoError(t, err)
	require.Len(t, claims, 1)
	assert.False(t, claims[0].ClaimedAt.Before(before.Round(0)), "claimed at %v, before %v", claims[0].ClaimedAt, before)
	assert.False(t, claims[0].ClaimedAt.After(after.Round(0)), "claimed at %v, after %v", claims[0].ClaimedAt, after)
}

// TestPruneRefusesARecentHorizon: Prune refuses, pruning nothing, a horizon
// in the future whatever the minimum retention, and one later than the
// minimum retention ago (a day, or WithMinRetention's; 0 or less for none).
func TestPruneRefusesARecentHorizon(t *testing.T) {
	for name, s := range listingLedgers() {
		t.Run(name, func(t *testing.T) {
			w := newWithdrawal("w-1")
			_, err := s.Submit(bg, "req-1", w, nil)
			require.NoError(t, err)
			kept := func(msg string) {
				t.Helper()
				_, ok, err := s.Outcome(bg, "req-1")
				require.NoError(t, err, msg)
				require.True(t, ok, msg)
			}
			refused := func(a *admin.Admin[withdrawal], before time.Time, want string) {
				t.Helper()
				n, err := a.Prune(bg, before, 0)
				require.ErrorIs(t, err, admin.ErrHorizonTooRecent)
				assert.Regexp(t, "^prune horizon too recent: "+want+"$", err.Error())
				assert.Zero(t, n)
				kept(want)
			}
			time.Sleep(time.Millisecond) // the record settled before now
			future := time.Date(2099, 1, 1, 0, 0, 0, 0, time.FixedZone("CET", 3600))
			for _, d := range []time.Duration{admin.DefaultMinRetention, time.Hour, 0, -time.Hour} {
				refused(s.Admin().WithMinRetention(d), future, `2098-12-31T23:00:00Z is in the future`)
			}
			refused(s.Admin(), future, `2098-12-31T23:00:00Z is in the future`)
			refused(s.Admin(), time.Now(), `\S+Z is later than the minimum retention, 24h0m0s, ago`)
			refused(s.Admin().WithMinRetention(time.Hour), time.Now().Add(-59*time.Minute), `\S+Z is later than the minimum retention, 1h0m0s, ago`)

			n, err := s.Admin().WithMinRetention(time.Hour).Prune(bg, time.Now().Add(-time.Hour), 0)
			require.NoError(t, err, "a horizon as old as the minimum")
			assert.Zero(t, n, "nothing settled an hour ago")

			a := s.Admin()
			none := a.WithMinRetention(-time.Hour) // less than 0 is 0
			// WithMinRetention returns a copy: a keeps its minimum.
			refused(a, time.Now(), `\S+ is later than the minimum retention, 24h0m0s, ago`)
			n, err = none.Prune(bg, time.Now(), 0)
			require.NoError(t, err)
			assert.Equal(t, 1, n)
			_, _, err = s.Outcome(bg, "req-1")
			require.ErrorIs(t, err, submissions.ErrPruned)
		})
	}
}

// TestClaimActionsCheckInTheDocumentedOrder: an action on a listed claim
// checks its tenant, then its key, then its token, before anything else.
func TestClaimActionsCheckInTheDocumentedOrder(t *testing.T) {
	ops := submissions.New[withdrawal](quiet).Admin()
	w := newWithdrawal("w-1")
	for _, c := range []struct {
		claim admin.Claim
		want  error
	}{
		{admin.Claim{}, submissions.ErrInvalidKey},
		{admin.Claim{Key: "  ", Token: 1}, submissions.ErrInvalidKey},
		{admin.Claim{Tenant: "a\x00", Key: ""}, submissions.ErrInvalidTenant},
		{admin.Claim{Key: "req-1"}, admin.ErrClaimChanged},
	} {
		assert.ErrorIs(t, ops.ReleaseClaim(bg, c.claim), c.want, "release %+v", c.claim)
		assert.ErrorIs(t, ops.ResolveClaim(bg, c.claim, w), c.want, "resolve %+v", c.claim)
	}
}
