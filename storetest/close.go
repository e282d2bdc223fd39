package storetest

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

func testSettle(t *testing.T, newStores Factory) {
	t.Run("a claim in flight is settled with the outcome, seen through either handle", func(t *testing.T) {
		a, b := newStores(t)
		w := withdrawal("w-1")
		rec := claim(t, a, "", "k-1", w)
		got, settled := settle(t, b, "", "k-1", rec.Token, sent(w, "0x1"))
		require.True(t, settled)
		require.Equal(t, done(w, sent(w, "0x1"), rec.Token), got)
		requireRecord(t, a, "", "k-1", got)
		requireHolder(t, a, "", "w-1", "k-1")
	})

	t.Run("a done claim is not settled again: its record comes back, settled false", func(t *testing.T) {
		a, b := newStores(t)
		w, v := withdrawal("w-1"), withdrawal("w-2")
		rec := claim(t, a, "", "k-1", w)
		first, settled := settle(t, a, "", "k-1", rec.Token, sent(w, "0x1"))
		require.True(t, settled)
		fin := claimDone(t, b, "", "k-2", v, sent(v, "0x2"))
		for i := range 2 {
			got, settled := settle(t, pick(i, a, b), "", "k-1", rec.Token, sent(w, "0xother"))
			require.False(t, settled)
			require.Equal(t, first, got)
			got, settled = settle(t, pick(i, a, b), "", "k-2", fin.Token, sent(v, "0xother"))
			require.False(t, settled)
			require.Equal(t, fin, got)
		}
		requireRecord(t, b, "", "k-1", first)
		requireRecord(t, a, "", "k-2", fin)
	})

	t.Run("an old token, after release and claim again, settles nothing: the zero Record comes back", func(t *testing.T) {
		a, b := newStores(t)
		old := claim(t, a, "", "k-1", withdrawal("w-1"))
		_, released := release(t, a, "", "k-1", old.Token)
		require.True(t, released)
		cur := claim(t, b, "", "k-1", withdrawal("w-2"))
		for i := range 2 {
			got, settled := settle(t, pick(i, a, b), "", "k-1", old.Token, sent(withdrawal("w-1"), "0xlate"))
			require.False(t, settled)
			require.Zero(t, got)
		}
		requireRecord(t, a, "", "k-1", cur)
	})

	t.Run("a key with no record settles nothing: the zero Record comes back", func(t *testing.T) {
		a, b := newStores(t)
		rec := claim(t, a, "", "k-1", withdrawal("w-1"))
		_, released := release(t, a, "", "k-1", rec.Token)
		require.True(t, released)
		for _, key := range []string{"k-1", "k-unknown"} {
			got, settled := settle(t, b, "", key, rec.Token, sent(withdrawal("w-1"), "0x1"))
			require.False(t, settled, key)
			require.Zero(t, got, key)
			requireNoRecord(t, a, "", key)
		}
	})

	t.Run("tenants apart: settling a key in one tenant leaves the same key in another in flight", func(t *testing.T) {
		a, b := newStores(t)
		w := withdrawal("w-1")
		def, one := claim(t, a, "", "k-1", w), claim(t, b, "t1", "k-1", w)
		_, settled := settle(t, a, "t1", "k-1", one.Token, sent(w, "0x1"))
		require.True(t, settled)
		requireRecord(t, b, "", "k-1", def)
		got, settled := settle(t, b, "t2", "k-1", def.Token, sent(w, "0x2"))
		require.False(t, settled)
		require.Zero(t, got)
		requireNoRecord(t, a, "t2", "k-1")
	})

	t.Run("racing settles of one claim through a and b: one settles, the others get its record", func(t *testing.T) {
		a, b := newStores(t)
		const n = 8
		w := withdrawal("w-1")
		rec := claim(t, a, "", "k-1", w)
		recs, settled, errs := make([]record, n), make([]bool, n), make([]error, n)
		together(n, func(i int) {
			recs[i], settled[i], errs[i] = pick(i, a, b).Settle(bg, "", "k-1", rec.Token, sent(w, fmt.Sprint("0x", i)))
		})
		winner := onlyWinner(t, settled, errs)
		require.Equal(t, done(w, sent(w, fmt.Sprint("0x", winner)), rec.Token), recs[winner])
		for i := range n {
			require.Equal(t, recs[winner], recs[i], "racer %d's record", i)
		}
		requireRecord(t, b, "", "k-1", recs[winner])
	})
}

func testRelease(t *testing.T, newStores Factory) {
	t.Run("a claim in flight is released: the deleted record comes back, and the key and withdrawal are free", func(t *testing.T) {
		a, b := newStores(t)
		w := withdrawal("w-1")
		rec := claim(t, a, "", "k-1", w)
		got, released := release(t, b, "", "k-1", rec.Token)
		require.True(t, released)
		require.Equal(t, rec, got)
		requireNoRecord(t, a, "", "k-1")
		requireHolder(t, a, "", "w-1", "")
		claim(t, b, "", "k-2", w)                          // the withdrawal, for another key
		again := claim(t, a, "", "k-1", withdrawal("w-2")) // the key, for another withdrawal
		require.NotEqual(t, rec.Token, again.Token)
	})

	t.Run("a done claim is not released: its record comes back, released false", func(t *testing.T) {
		a, b := newStores(t)
		w, v := withdrawal("w-1"), withdrawal("w-2")
		rec := claim(t, a, "", "k-1", w)
		first, settled := settle(t, a, "", "k-1", rec.Token, sent(w, "0x1"))
		require.True(t, settled)
		fin := claimDone(t, b, "", "k-2", v, sent(v, "0x2"))
		for i := range 2 {
			got, released := release(t, pick(i, a, b), "", "k-1", rec.Token)
			require.False(t, released)
			require.Equal(t, first, got)
			got, released = release(t, pick(i, a, b), "", "k-2", fin.Token)
			require.False(t, released)
			require.Equal(t, fin, got)
		}
		requireRecord(t, b, "", "k-1", first)
		requireHolder(t, a, "", "w-2", "k-2")
	})

	t.Run("a released claim, or a key with no record, releases nothing: the zero Record comes back", func(t *testing.T) {
		a, b := newStores(t)
		rec := claim(t, a, "", "k-1", withdrawal("w-1"))
		_, released := release(t, a, "", "k-1", rec.Token)
		require.True(t, released)
		for _, key := range []string{"k-1", "k-unknown"} {
			got, released := release(t, b, "", key, rec.Token)
			require.False(t, released, key)
			require.Zero(t, got, key)
		}
	})

	t.Run("an old token, after release and claim again, releases nothing: the zero Record comes back", func(t *testing.T) {
		a, b := newStores(t)
		old := claim(t, a, "", "k-1", withdrawal("w-1"))
		_, released := release(t, b, "", "k-1", old.Token)
		require.True(t, released)
		cur := claim(t, b, "", "k-1", withdrawal("w-1"))
		for i := range 2 {
			got, released := release(t, pick(i, a, b), "", "k-1", old.Token)
			require.False(t, released)
			require.Zero(t, got)
		}
		requireRecord(t, a, "", "k-1", cur)
		requireHolder(t, a, "", "w-1", "k-1")
	})

	t.Run("tenants apart: releasing a key in one tenant leaves the same key in another", func(t *testing.T) {
		a, b := newStores(t)
		w := withdrawal("w-1")
		def, one := claim(t, a, "", "k-1", w), claim(t, b, "t1", "k-1", w)
		_, released := release(t, b, "t1", "k-1", one.Token)
		require.True(t, released)
		requireRecord(t, a, "", "k-1", def)
		requireHolder(t, a, "", "w-1", "k-1")
		got, released := release(t, a, "t2", "k-1", def.Token)
		require.False(t, released)
		require.Zero(t, got)
	})

	t.Run("racing Settle through a and Release through b of one claim: exactly one wins", func(t *testing.T) {
		a, b := newStores(t)
		for round := range 8 {
			key, w := fmt.Sprint("k-", round), withdrawal(fmt.Sprint("w-", round))
			rec := claim(t, a, "", key, w)
			var srec, rrec record
			var settled, released bool
			var serr, rerr error
			together(2, func(i int) {
				if i == 0 {
					srec, settled, serr = a.Settle(bg, "", key, rec.Token, sent(w, "0x1"))
				} else {
					rrec, released, rerr = b.Release(bg, "", key, rec.Token)
				}
			})
			require.NoError(t, serr)
			require.NoError(t, rerr)
			require.NotEqual(t, settled, released, "round %d: settled %v, released %v", round, settled, released)
			if settled {
				require.Equal(t, done(w, sent(w, "0x1"), rec.Token), srec)
				require.Equal(t, srec, rrec, "the Release that lost returns the settled record")
				requireRecord(t, b, "", key, srec)
			} else {
				require.Equal(t, rec, rrec)
				require.Zero(t, srec, "the Settle that lost returns the zero Record")
				requireNoRecord(t, a, "", key)
			}
		}
	})
}
