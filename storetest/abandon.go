package storetest

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemledger/submissions/driver"
)

func abandon(t *testing.T, st store, tenant, key string, token driver.Token) {
	t.Helper()
	require.NoError(t, st.(driver.Abandoner).Abandon(bg, tenant, key, token), "Abandon(%q, %q, %d)", tenant, key, token)
}

func testAbandoner(t *testing.T, newStores Factory) {
	t.Run("marks a claim in flight Abandoned, and changes nothing else", func(t *testing.T) {
		a, b := newStores(t)
		rec := claim(t, a, "", "k-1", withdrawal("w-1"))
		abandon(t, b, "", "k-1", rec.Token)
		rec.Abandoned = true
		requireRecord(t, a, "", "k-1", rec)
		requireHolder(t, a, "", "w-1", "k-1")
		abandon(t, a, "", "k-1", rec.Token) // again
		requireRecord(t, b, "", "k-1", rec)
	})

	t.Run("a claim done or gone changes nothing, and is no error", func(t *testing.T) {
		a, b := newStores(t)
		w, v := withdrawal("w-1"), withdrawal("w-2")
		fin := claimDone(t, a, "", "k-done", w, sent(w, "0x1"))
		s := claim(t, b, "", "k-settled", v)
		settled, _ := settle(t, a, "", "k-settled", s.Token, sent(v, "0x2"))
		old := claim(t, a, "", "k-again", withdrawal("w-3"))
		_, released := release(t, b, "", "k-again", old.Token)
		require.True(t, released)
		abandon(t, a, "", "k-again", old.Token) // released
		requireNoRecord(t, b, "", "k-again")
		again := claim(t, b, "", "k-again", withdrawal("w-3"))
		abandon(t, b, "", "k-done", fin.Token)
		abandon(t, a, "", "k-settled", s.Token)
		abandon(t, b, "", "k-again", old.Token) // an old token
		abandon(t, a, "", "k-unknown", 1)
		requireRecord(t, a, "", "k-done", fin)
		requireRecord(t, b, "", "k-settled", settled)
		requireRecord(t, a, "", "k-again", again)
		requireNoRecord(t, b, "", "k-unknown")
	})

	t.Run("an abandoned claim can still be settled, and is then not Abandoned", func(t *testing.T) {
		a, b := newStores(t)
		w := withdrawal("w-1")
		rec := claim(t, a, "", "k-1", w)
		abandon(t, a, "", "k-1", rec.Token)
		got, settled := settle(t, b, "", "k-1", rec.Token, sent(w, "0x1"))
		require.True(t, settled)
		require.Equal(t, done(w, sent(w, "0x1"), rec.Token), got)
		requireRecord(t, a, "", "k-1", got)
	})

	t.Run("an abandoned claim can still be released: its withdrawal is free, and the deleted record is Abandoned", func(t *testing.T) {
		a, b := newStores(t)
		w := withdrawal("w-1")
		rec := claim(t, a, "", "k-1", w)
		abandon(t, a, "", "k-1", rec.Token)
		got, released := release(t, b, "", "k-1", rec.Token)
		require.True(t, released)
		requireNoRecord(t, a, "", "k-1")
		claim(t, a, "", "k-2", w) // a new claim, not Abandoned
		rec.Abandoned = true
		require.Equal(t, rec, got, "Release returns the deleted record, Abandoned as it was")
	})

	t.Run("tenants apart: abandoning a key in one tenant leaves the same key in another", func(t *testing.T) {
		a, b := newStores(t)
		w := withdrawal("w-1")
		def, one := claim(t, a, "", "k-1", w), claim(t, b, "t1", "k-1", w)
		abandon(t, a, "t1", "k-1", one.Token)
		abandon(t, a, "t2", "k-1", def.Token)
		requireRecord(t, b, "", "k-1", def)
		one.Abandoned = true
		requireRecord(t, b, "t1", "k-1", one)
	})
}

func answer(t *testing.T, st store, tenant, key string, token driver.Token, a *Withdrawal) {
	t.Helper()
	require.NoError(t, st.(driver.Answerer[Withdrawal]).AbandonAnswered(bg, tenant, key, token, a), "AbandonAnswered(%q, %q, %d)", tenant, key, token)
}

func testAnswerer(t *testing.T, newStores Factory) {
	t.Run("marks a claim in flight Abandoned and Answered, with the answer kept, and it is never released", func(t *testing.T) {
		a, b := newStores(t)
		w := withdrawal("w-1")
		rec := claim(t, a, "", "k-1", w)
		given := sent(w, "0x1")
		answer(t, b, "", "k-1", rec.Token, &given)
		rec.Abandoned, rec.Answered, rec.Answer = true, true, &given
		requireRecord(t, a, "", "k-1", rec)
		got, released := release(t, b, "", "k-1", rec.Token)
		require.False(t, released, "Release of an answered claim")
		require.Equal(t, rec, got, "Release of an answered claim returns its record")
		requireHolder(t, a, "", "w-1", "k-1")
		settled, ok := settle(t, b, "", "k-1", rec.Token, given)
		require.True(t, ok, "an answered claim is settled as any other")
		require.Equal(t, done(w, given, rec.Token), settled)
	})
	t.Run("an answer not kept marks it Answered all the same; a claim done or gone changes nothing", func(t *testing.T) {
		a, b := newStores(t)
		w := withdrawal("w-1")
		rec := claim(t, a, "", "k-1", w)
		answer(t, a, "", "k-1", rec.Token, nil)
		rec.Abandoned, rec.Answered = true, true
		requireRecord(t, b, "", "k-1", rec)
		v := withdrawal("w-2")
		fin := claimDone(t, a, "", "k-done", v, sent(v, "0x2"))
		given := sent(v, "0x3")
		answer(t, b, "", "k-done", fin.Token, &given)
		answer(t, b, "", "k-unknown", 1, &given)
		requireRecord(t, a, "", "k-done", fin)
		requireNoRecord(t, a, "", "k-unknown")
	})
}
