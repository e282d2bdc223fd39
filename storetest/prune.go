package storetest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemledger/submissions/driver"
)

func prune(t *testing.T, st store, before time.Time, limit int) []driver.PrunedRecord {
	t.Helper()
	pruned, err := st.(driver.Pruner).Prune(bg, before, limit)
	require.NoError(t, err, "Prune(%v, %d)", before, limit)
	return pruned
}

// later is a time after every settle of a test, by any clock near ours.
func later() time.Time { return time.Now().Add(time.Hour) }

// settled claims key for w and settles it, through st, and returns its
// token.
func settled(t *testing.T, st store, tenant, key string, w Withdrawal) driver.Token {
	t.Helper()
	rec := claim(t, st, tenant, key, w)
	_, ok := settle(t, st, tenant, key, rec.Token, sent(w, "0x"+key))
	require.True(t, ok)
	return rec.Token
}

func testPruner(t *testing.T, newStores Factory) {
	t.Run("done records become tombstones that keep the key, the withdrawal id and the token", func(t *testing.T) {
		a, b := newStores(t)
		w := withdrawal("w-2")
		one := settled(t, a, "", "k-1", withdrawal("w-1"))
		two := claimDone(t, b, "t1", "k-2", w, sent(w, "0x2")).Token
		pruned := prune(t, b, later(), 100)
		require.ElementsMatch(t, []driver.PrunedRecord{{Tenant: "", Key: "k-1", WithdrawalID: "w-1"}, {Tenant: "t1", Key: "k-2", WithdrawalID: "w-2"}}, pruned)
		requireRecord(t, a, "", "k-1", tombstone("w-1", one))
		requireRecord(t, a, "t1", "k-2", tombstone("w-2", two))
		requireHolder(t, b, "", "w-1", "k-1")
		requireHolder(t, b, "t1", "w-2", "k-2")
		require.Empty(t, prune(t, a, later(), 100), "a tombstone is not pruned again")
		requireRecord(t, b, "", "k-1", tombstone("w-1", one))
	})

	t.Run("a record in flight is never pruned, abandoned or not", func(t *testing.T) {
		a, b := newStores(t)
		rec := claim(t, a, "", "k-1", withdrawal("w-1"))
		gone := claim(t, a, "", "k-2", withdrawal("w-2"))
		if isAbandoner(a) {
			abandon(t, b, "", "k-2", gone.Token)
			gone.Abandoned = true
		}
		require.Empty(t, prune(t, b, later(), 100))
		requireRecord(t, a, "", "k-1", rec)
		requireRecord(t, a, "", "k-2", gone)
	})

	t.Run("only records done before before are pruned", func(t *testing.T) {
		a, b := newStores(t)
		w := withdrawal("w-1")
		tok := settled(t, a, "", "k-1", w)
		require.Empty(t, prune(t, b, time.Now().Add(-time.Hour), 100))
		requireRecord(t, a, "", "k-1", done(w, sent(w, "0xk-1"), tok))
	})

	t.Run("a horizon centuries away is before, or after, every record", func(t *testing.T) {
		a, b := newStores(t)
		w := withdrawal("w-1")
		tok := settled(t, a, "", "k-1", w)
		stuck := claim(t, a, "t1", "k-2", withdrawal("w-2"))
		require.Empty(t, prune(t, b, time.Date(1500, 1, 1, 0, 0, 0, 0, time.UTC), 100), "year 1500")
		requireRecord(t, a, "", "k-1", done(w, sent(w, "0xk-1"), tok))
		pruned := prune(t, b, time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC), 100)
		require.Equal(t, []driver.PrunedRecord{{Tenant: "", Key: "k-1", WithdrawalID: "w-1"}}, pruned, "year 2300")
		requireRecord(t, a, "", "k-1", tombstone("w-1", tok))
		requireRecord(t, a, "t1", "k-2", stuck)
	})

	t.Run("at most limit records, the oldest first", func(t *testing.T) {
		a, b := newStores(t)
		for i := range 5 {
			settled(t, pick(i, a, b), fmt.Sprint("t", i%2), fmt.Sprint("k-", i), withdrawal(fmt.Sprint("w-", i)))
		}
		for i, want := range [][]string{{"k-0", "k-1"}, {"k-2", "k-3"}, {"k-4"}, nil} {
			var keys []string
			for _, p := range prune(t, pick(i, a, b), later(), 2) {
				keys = append(keys, p.Key)
			}
			require.ElementsMatch(t, want, keys, "Prune #%d", i)
		}
	})

	t.Run("Claim of a pruned key returns its tombstone; another key for its withdrawal gets a ConflictError with Pruned", func(t *testing.T) {
		a, b := newStores(t)
		tok := settled(t, a, "t1", "k-1", withdrawal("w-1"))
		require.Len(t, prune(t, b, later(), 100), 1)
		for i, w := range []Withdrawal{withdrawal("w-1"), withdrawal("w-2")} {
			rec, claimed, err := pick(i, a, b).Claim(bg, "t1", "k-1", fp(w), nil)
			require.NoError(t, err)
			require.False(t, claimed)
			require.Equal(t, tombstone("w-1", tok), rec)
		}
		_, claimed, err := b.Claim(bg, "t1", "k-2", fp(withdrawal("w-1")), nil)
		require.False(t, claimed)
		requireConflict(t, err, driver.ConflictError{Tenant: "t1", Holder: "k-1", Key: "k-2", WithdrawalID: "w-1", Pruned: true})
		requireNoRecord(t, a, "t1", "k-2")
	})

	t.Run("Settle and Release of a tombstone's token return it, false", func(t *testing.T) {
		a, b := newStores(t)
		w := withdrawal("w-1")
		tok := settled(t, a, "", "k-1", w)
		require.Len(t, prune(t, a, later(), 100), 1)
		for i := range 2 {
			got, ok := settle(t, pick(i, a, b), "", "k-1", tok, sent(w, "0xlate"))
			require.False(t, ok)
			require.Equal(t, tombstone("w-1", tok), got, "Settle")
			got, ok = release(t, pick(i, a, b), "", "k-1", tok)
			require.False(t, ok)
			require.Equal(t, tombstone("w-1", tok), got, "Release")
		}
		requireRecord(t, b, "", "k-1", tombstone("w-1", tok))
	})

	t.Run("concurrent Prunes through a and b prune each record once", func(t *testing.T) {
		a, b := newStores(t)
		const n = 40
		for i := range n {
			settled(t, pick(i, a, b), fmt.Sprint("t", i%3), fmt.Sprint("k-", i), withdrawal(fmt.Sprint("w-", i)))
		}
		var mu sync.Mutex
		count := map[driver.PrunedRecord]int{}
		errs := make([]error, 8)
		together(8, func(i int) {
			for {
				pruned, err := pick(i, a, b).(driver.Pruner).Prune(bg, later(), 3)
				if err != nil || len(pruned) == 0 {
					errs[i] = err
					return
				}
				mu.Lock()
				for _, p := range pruned {
					count[p]++
				}
				mu.Unlock()
			}
		})
		for i, err := range errs {
			require.NoError(t, err, "pruner %d", i)
		}
		require.Len(t, count, n)
		for i := range n {
			p := driver.PrunedRecord{Tenant: fmt.Sprint("t", i%3), Key: fmt.Sprint("k-", i), WithdrawalID: fmt.Sprint("w-", i)}
			require.Equal(t, 1, count[p], "%+v pruned", p)
		}
	})
}
