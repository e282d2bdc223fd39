package storetest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemledger/submissions/driver"
)

func testLookup(t *testing.T, newStores Factory) {
	t.Run("a key with no record: ok false", func(t *testing.T) {
		a, b := newStores(t)
		requireNoRecord(t, a, "", "k-1")
		requireNoRecord(t, b, "t-never", "k-1")
		rec := claim(t, a, "", "k-1", withdrawal("w-1"))
		_, released := release(t, b, "", "k-1", rec.Token)
		require.True(t, released)
		requireNoRecord(t, a, "", "k-1")
	})

	t.Run("the record of a claim in flight and of a done one, through either handle", func(t *testing.T) {
		a, b := newStores(t)
		w, v := withdrawal("w-1"), withdrawal("w-2")
		rec := claim(t, a, "", "k-1", w)
		fin := claimDone(t, b, "", "k-2", v, sent(v, "0x2"))
		for i := range 2 {
			requireRecord(t, pick(i, a, b), "", "k-1", rec)
			requireRecord(t, pick(i, a, b), "", "k-2", fin)
		}
	})

	t.Run("tenants apart: a key's record in one tenant is not another's", func(t *testing.T) {
		a, b := newStores(t)
		w := withdrawal("w-1")
		one := claim(t, a, "t1", "k-1", w)
		requireNoRecord(t, b, "", "k-1")
		requireNoRecord(t, b, "T1", "k-1")
		two := claimDone(t, b, "t2", "k-1", w, sent(w, "0x2"))
		requireRecord(t, a, "t1", "k-1", one)
		requireRecord(t, a, "t2", "k-1", two)
	})
}

func testClaimedBy(t *testing.T, newStores Factory) {
	t.Run("a withdrawal no key claims: ok false", func(t *testing.T) {
		a, b := newStores(t)
		requireHolder(t, a, "", "w-1", "")
		claim(t, b, "", "k-1", withdrawal("w-1"))
		requireHolder(t, a, "", "w-2", "")
		requireHolder(t, a, "", "W-1", "")
	})

	t.Run("the key that claims a withdrawal, in flight or done, through either handle; none once released", func(t *testing.T) {
		a, b := newStores(t)
		w, v := withdrawal("w-1"), withdrawal("w-2")
		rec := claim(t, a, "", "k-1", w)
		claimDone(t, b, "", "k-2", v, sent(v, "0x2"))
		for i := range 2 {
			requireHolder(t, pick(i, a, b), "", "w-1", "k-1")
			requireHolder(t, pick(i, a, b), "", "w-2", "k-2")
		}
		_, released := release(t, b, "", "k-1", rec.Token)
		require.True(t, released)
		requireHolder(t, a, "", "w-1", "")
	})

	t.Run("tenants apart: a withdrawal claimed in one tenant is not in another", func(t *testing.T) {
		a, b := newStores(t)
		claim(t, a, "t1", "k-1", withdrawal("w-1"))
		requireHolder(t, b, "", "w-1", "")
		requireHolder(t, b, "t2", "w-1", "")
		claim(t, b, "t2", "k-2", withdrawal("w-1"))
		requireHolder(t, a, "t1", "w-1", "k-1")
		requireHolder(t, a, "t2", "w-1", "k-2")
	})
}

// testCancelled calls each method with a context already cancelled: the
// store answers or errors, promptly, and an answer it gives is right.
func testCancelled(t *testing.T, newStores Factory) {
	w := withdrawal("w-1")
	for _, c := range []struct {
		name string
		is   func(store) bool // nil for a Store method
		// call makes the call with ctx, on a store where k-1 holds w-1 in
		// flight under held, and returns its error and a check of its answer.
		call func(ctx context.Context, st store, held record) (func(t *testing.T), error)
	}{
		{"Store.Claim", nil, func(ctx context.Context, st store, _ record) (func(*testing.T), error) {
			rec, claimed, err := st.Claim(ctx, "", "k-2", fp(withdrawal("w-2")), nil)
			return func(t *testing.T) {
				require.True(t, claimed)
				requireRecord(t, st, "", "k-2", rec)
			}, err
		}},
		{"Store.Settle", nil, func(ctx context.Context, st store, held record) (func(*testing.T), error) {
			rec, settled, err := st.Settle(ctx, "", "k-1", held.Token, sent(w, "0x1"))
			return func(t *testing.T) {
				require.True(t, settled)
				require.Equal(t, done(w, sent(w, "0x1"), held.Token), rec)
			}, err
		}},
		{"Store.Release", nil, func(ctx context.Context, st store, held record) (func(*testing.T), error) {
			rec, released, err := st.Release(ctx, "", "k-1", held.Token)
			return func(t *testing.T) {
				require.True(t, released)
				require.Equal(t, held, rec)
			}, err
		}},
		{"Store.Lookup", nil, func(ctx context.Context, st store, held record) (func(*testing.T), error) {
			rec, ok, err := st.Lookup(ctx, "", "k-1")
			return func(t *testing.T) {
				require.True(t, ok)
				require.Equal(t, held, rec)
			}, err
		}},
		{"Store.ClaimedBy", nil, func(ctx context.Context, st store, _ record) (func(*testing.T), error) {
			key, ok, err := st.ClaimedBy(ctx, "", "w-1")
			return func(t *testing.T) {
				require.True(t, ok)
				require.Equal(t, "k-1", key)
			}, err
		}},
		{"Lister.ListInFlight", isLister, func(ctx context.Context, st store, held record) (func(*testing.T), error) {
			claims, err := st.(driver.Lister).ListInFlight(ctx, driver.ListQuery{Limit: 10})
			return func(t *testing.T) {
				require.Len(t, claims, 1)
				require.Equal(t, held.Token, claims[0].Token)
			}, err
		}},
		{"Abandoner.Abandon", isAbandoner, func(ctx context.Context, st store, held record) (func(*testing.T), error) {
			err := st.(driver.Abandoner).Abandon(ctx, "", "k-1", held.Token)
			return func(t *testing.T) {
				held.Abandoned = true
				requireRecord(t, st, "", "k-1", held)
			}, err
		}},
		{"Pruner.Prune", isPruner, func(ctx context.Context, st store, _ record) (func(*testing.T), error) {
			pruned, err := st.(driver.Pruner).Prune(ctx, time.Now().Add(time.Hour), 10)
			return func(t *testing.T) { require.Empty(t, pruned, "the claim in flight") }, err
		}},
		{"Tracker.ClaimSend", isTracker, func(ctx context.Context, st store, _ record) (func(*testing.T), error) {
			rec, s, err := st.(driver.Tracker[Withdrawal]).ClaimSend(ctx, "", "k-2", fp(withdrawal("w-2")))
			return func(t *testing.T) {
				require.NotNil(t, s)
				requireRecord(t, st, "", "k-2", rec)
			}, err
		}},
	} {
		t.Run(c.name+" answers or errors promptly", func(t *testing.T) {
			a, _ := newStores(t)
			if iface, _, _ := strings.Cut(c.name, "."); c.is != nil && !c.is(a) {
				t.Skipf("the store is not a driver.%s", iface)
			}
			held := claim(t, a, "", "k-1", w)
			ctx, cancel := context.WithCancel(bg)
			cancel()
			type answer struct {
				err   error
				check func(*testing.T)
			}
			answered := make(chan answer, 1)
			go func() {
				check, err := c.call(ctx, a, held)
				answered <- answer{err, check}
			}()
			select {
			case got := <-answered:
				if got.err != nil {
					t.Logf("%s with a cancelled ctx: %v", c.name, got.err)
					return
				}
				got.check(t)
			case <-time.After(prompt):
				t.Fatalf("%s with a cancelled ctx has not returned after %v", c.name, prompt)
			}
		})
	}
}
