package storetest

import (
	"cmp"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemledger/submissions/driver"
)

// list lists through st's ListInFlight, and stops t on an error or a
// listing out of order.
func list(t *testing.T, st store, q driver.ListQuery) []driver.InFlight {
	t.Helper()
	claims, err := st.(driver.Lister).ListInFlight(bg, q)
	require.NoError(t, err, "ListInFlight(%+v)", q)
	require.LessOrEqual(t, len(claims), q.Limit, "ListInFlight(%+v): more than Limit", q)
	for i := 1; i < len(claims); i++ {
		require.Negative(t, order(claims[i-1], claims[i]), "ListInFlight(%+v): claims %d and %d out of order", q, i-1, i)
	}
	return claims
}

// order compares two claims in the listing's order: ClaimedAt, then Tenant,
// then Key, compared byte by byte.
func order(x, y driver.InFlight) int {
	return cmp.Or(x.ClaimedAt.Compare(y.ClaimedAt), strings.Compare(x.Tenant, y.Tenant), strings.Compare(x.Key, y.Key))
}

// keysOf returns the tenant/key of each claim.
func keysOf(claims []driver.InFlight) []string {
	var keys []string // nil for none
	for _, c := range claims {
		keys = append(keys, c.Tenant+"/"+c.Key)
	}
	return keys
}

func testLister(t *testing.T, newStores Factory) {
	t.Run("claims in flight are listed whole, in order of ClaimedAt, Tenant and Key, through either handle", func(t *testing.T) {
		a, b := newStores(t)
		start := time.Now()
		want := map[string]driver.InFlight{}
		for i, c := range [][2]string{{"", "k-b"}, {"t1", "k-a"}, {"T1", "\u00e9"}, {"t1", "Z"}, {"", "a"}} {
			w := withdrawal(fmt.Sprint("w-", i))
			rec := claim(t, pick(i, a, b), c[0], c[1], w)
			want[c[0]+"/"+c[1]] = driver.InFlight{Tenant: c[0], Key: c[1], Fingerprint: fp(w), Token: rec.Token}
		}
		for i := range 2 {
			got := list(t, pick(i, a, b), driver.ListQuery{Limit: 100})
			require.Len(t, got, len(want))
			for _, c := range got {
				require.WithinDuration(t, start, c.ClaimedAt, time.Hour, "ClaimedAt, by the store's clock")
				at := c.ClaimedAt
				c.ClaimedAt = time.Time{}
				require.Equal(t, want[c.Tenant+"/"+c.Key], c, "claimed at %v", at)
			}
		}
	})

	t.Run("After: the listing goes on after a claim, by ClaimedAt, then Tenant and Key compared byte by byte", func(t *testing.T) {
		a, _ := newStores(t)
		claim(t, a, "tb", "kb-\u00e9", withdrawal("w-1"))
		x := list(t, a, driver.ListQuery{Limit: 10})[0]
		at, us := x.ClaimedAt, time.Microsecond
		for _, c := range []struct {
			after  driver.InFlight
			listed bool
		}{
			{x, false},
			{driver.InFlight{ClaimedAt: at.Add(-us), Tenant: "zz", Key: "zz"}, true},
			{driver.InFlight{ClaimedAt: at.Add(us)}, false},
			{driver.InFlight{ClaimedAt: at, Tenant: "ta", Key: "zz"}, true},
			{driver.InFlight{ClaimedAt: at, Tenant: "tB", Key: "zz"}, true}, // 'B' < 'b'
			{driver.InFlight{ClaimedAt: at, Tenant: "tc"}, false},
			{driver.InFlight{ClaimedAt: at, Tenant: "tb", Key: "kb-f"}, true},       // 'f' < 0xC3, the first byte of é
			{driver.InFlight{ClaimedAt: at, Tenant: "tb", Key: "kb-\u00ff"}, false}, // ÿ is C3 BF, é C3 A9
			{driver.InFlight{ClaimedAt: at, Tenant: "tb", Key: "kb-e\u0301"}, true},
		} {
			got := list(t, a, driver.ListQuery{After: &c.after, Limit: 10})
			require.Equal(t, c.listed, len(got) == 1, "After %q/%q at ClaimedAt%+v: %v", c.after.Tenant, c.after.Key, c.after.ClaimedAt.Sub(at), keysOf(got))
		}
	})

	t.Run("Limit: at most Limit claims, the first in order", func(t *testing.T) {
		a, b := newStores(t)
		for i := range 5 {
			claim(t, pick(i, a, b), fmt.Sprint("t", i%2), fmt.Sprint("k-", i), withdrawal(fmt.Sprint("w-", i)))
		}
		all := list(t, a, driver.ListQuery{Limit: 100})
		require.Len(t, all, 5)
		for _, limit := range []int{1, 2, 5} {
			require.Equal(t, keysOf(all[:limit]), keysOf(list(t, b, driver.ListQuery{Limit: limit})), "Limit %d", limit)
		}
	})

	t.Run("ClaimedBefore selects the claims made strictly before it", func(t *testing.T) {
		a, b := newStores(t)
		for i := range 4 {
			claim(t, pick(i, a, b), "", fmt.Sprint("k-", i), withdrawal(fmt.Sprint("w-", i)))
		}
		all := list(t, a, driver.ListQuery{Limit: 100})
		require.Len(t, all, 4)
		for _, c := range all {
			for _, before := range []time.Time{c.ClaimedAt, c.ClaimedAt.Add(time.Microsecond)} {
				var want []string
				for _, d := range all {
					if d.ClaimedAt.Before(before) {
						want = append(want, d.Tenant+"/"+d.Key)
					}
				}
				got := list(t, b, driver.ListQuery{ClaimedBefore: before, Limit: 100})
				require.Equal(t, want, keysOf(got), "ClaimedBefore %v", before)
			}
		}
		// Centuries away: before, or after, every claim.
		require.Empty(t, list(t, b, driver.ListQuery{ClaimedBefore: time.Date(1500, 1, 1, 0, 0, 0, 0, time.UTC), Limit: 100}), "ClaimedBefore year 1500")
		require.Equal(t, keysOf(all), keysOf(list(t, b, driver.ListQuery{ClaimedBefore: time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC), Limit: 100})), "ClaimedBefore year 2300")
	})

	t.Run("Tenants: nil selects every tenant's claims, an empty slice none, a tenant named twice once", func(t *testing.T) {
		a, b := newStores(t)
		for i, tenant := range []string{"", "t1", "t2", "t1"} {
			claim(t, pick(i, a, b), tenant, fmt.Sprint("k-", i), withdrawal(fmt.Sprint("w-", i)))
		}
		all := keysOf(list(t, a, driver.ListQuery{Limit: 100}))
		require.ElementsMatch(t, []string{"/k-0", "t1/k-1", "t2/k-2", "t1/k-3"}, all)
		for _, c := range []struct {
			tenants []string
			want    []string
		}{
			{[]string{}, nil},
			{[]string{""}, []string{"/k-0"}},
			{[]string{"t1"}, []string{"t1/k-1", "t1/k-3"}},
			{[]string{"t1", "t1"}, []string{"t1/k-1", "t1/k-3"}},
			{[]string{"t2", "", "t2"}, []string{"/k-0", "t2/k-2"}},
			{[]string{"T1", "t9"}, nil},
		} {
			got := keysOf(list(t, b, driver.ListQuery{Tenants: c.tenants, Limit: 100}))
			require.ElementsMatch(t, c.want, got, "Tenants %q", c.tenants)
		}
	})

	t.Run("done records are never listed: made done, settled or released", func(t *testing.T) {
		a, b := newStores(t)
		w := withdrawal("w-d")
		claimDone(t, a, "", "k-done", w, sent(w, "0x1"))
		s := claim(t, b, "", "k-settled", withdrawal("w-s"))
		_, settled := settle(t, a, "", "k-settled", s.Token, sent(withdrawal("w-s"), "0x2"))
		require.True(t, settled)
		r := claim(t, a, "t1", "k-released", withdrawal("w-r"))
		_, released := release(t, b, "t1", "k-released", r.Token)
		require.True(t, released)
		claim(t, a, "", "k-in-flight", withdrawal("w-f"))
		require.Equal(t, []string{"/k-in-flight"}, keysOf(list(t, b, driver.ListQuery{Limit: 100})))
	})

	t.Run("Abandoned is the claim's Record.Abandoned", func(t *testing.T) {
		a, b := newStores(t)
		if !isAbandoner(a) {
			t.Skip("the store is not a driver.Abandoner")
		}
		rec := claim(t, a, "", "k-1", withdrawal("w-1"))
		claim(t, a, "", "k-2", withdrawal("w-2"))
		require.NoError(t, b.(driver.Abandoner).Abandon(bg, "", "k-1", rec.Token))
		got := list(t, a, driver.ListQuery{Limit: 100})
		require.Equal(t, []string{"/k-1", "/k-2"}, keysOf(got))
		require.True(t, got[0].Abandoned, "k-1 abandoned")
		require.False(t, got[1].Abandoned, "k-2 abandoned")
	})

	t.Run("values at every limit are listed exactly", func(t *testing.T) {
		a, b := newStores(t)
		for i, v := range limitValues() {
			rec := claim(t, pick(i, a, b), v.tenant, v.key, v.w)
			got := list(t, pick(i+1, a, b), driver.ListQuery{Tenants: []string{v.tenant}, Limit: 10})
			require.Len(t, got, 1)
			got[0].ClaimedAt = time.Time{}
			require.Equal(t, driver.InFlight{Tenant: v.tenant, Key: v.key, Fingerprint: fp(v.w), Token: rec.Token}, got[0])
		}
	})

	t.Run("a walk of pages lists each claim that stands through it exactly once, while others are made and closed", func(t *testing.T) {
		a, b := newStores(t)
		type held struct {
			tenant, key string
			token       driver.Token
		}
		var standing, doomed []held
		for i := range 30 {
			h := held{tenant: []string{"", "t1", "t2"}[i%3], key: fmt.Sprintf("k-%02d", i)}
			h.token = claim(t, pick(i, a, b), h.tenant, h.key, withdrawal("w-"+h.key)).Token
			if i%2 == 0 {
				standing = append(standing, h)
			} else {
				doomed = append(doomed, h)
			}
		}
		stop := make(chan struct{})
		var churned sync.WaitGroup
		var churnErr error
		churned.Add(1)
		go func() { // claims and closes other keys through b all along the walk
			defer churned.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprint("churn-", i)
				rec, _, err := b.Claim(bg, "t1", key, fp(withdrawal("w-"+key)), nil)
				if err == nil && i%2 == 0 {
					_, _, err = b.Settle(bg, "t1", key, rec.Token, withdrawal("w-"+key))
				} else if err == nil {
					_, _, err = b.Release(bg, "t1", key, rec.Token)
				}
				if err != nil {
					churnErr = err
					return
				}
			}
		}()
		seen := map[string]int{}
		var after *driver.InFlight
		for page := 0; ; page++ {
			require.Less(t, page, 200, "the walk does not end")
			got := list(t, a, driver.ListQuery{After: after, Limit: 4})
			for _, c := range got {
				require.True(t, after == nil || order(*after, c) < 0, "%s/%s listed before the page's start", c.Tenant, c.Key)
				seen[c.Tenant+"/"+c.Key]++
			}
			for range 2 { // close the oldest claims still doomed, which come before the walk's place
				if len(doomed) == 0 {
					break
				}
				d := doomed[0]
				doomed = doomed[1:]
				if len(doomed)%2 == 0 {
					_, ok := settle(t, b, d.tenant, d.key, d.token, withdrawal("w-"+d.key))
					require.True(t, ok)
				} else {
					_, ok := release(t, b, d.tenant, d.key, d.token)
					require.True(t, ok)
				}
			}
			if len(got) < 4 {
				break
			}
			last := got[len(got)-1]
			after = &last
		}
		close(stop)
		churned.Wait()
		require.NoError(t, churnErr, "the churn's calls")
		for _, h := range standing {
			require.Equal(t, 1, seen[h.tenant+"/"+h.key], "%s/%s listed", h.tenant, h.key)
		}
	})
}
