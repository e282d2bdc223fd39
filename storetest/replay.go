package storetest

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemledger/submissions/driver"
)

func testReplayer(t *testing.T, newStores Factory) {
	replay := func(st store, tenant, key string) (driver.Fingerprint, Withdrawal, bool) {
		f, out := st.(driver.Replayer[Withdrawal]).Replay(tenant, key)
		if f == nil || out == nil {
			require.True(t, f == nil && out == nil, "Replay(%q, %q) returned one nil of two", tenant, key)
			return driver.Fingerprint{}, Withdrawal{}, false
		}
		return *f, *out, true
	}

	t.Run("reads a done key's fingerprint, canonical, and outcome", func(t *testing.T) {
		a, b := newStores(t)
		w, v := withdrawal("w-1"), withdrawal("w-2")
		spelled := w
		spelled.Amount, spelled.Currency = "025.000", "UsDc"
		claimDone(t, a, "t1", "k-1", spelled, sent(w, "0x1"))
		rec := claim(t, b, "", "k-2", v)
		_, settled := settle(t, a, "", "k-2", rec.Token, sent(v, "0x2"))
		require.True(t, settled)
		for i := range 2 {
			f, got, ok := replay(pick(i, a, b), "t1", "k-1")
			require.True(t, ok, "Replay of a key claimed done")
			require.Equal(t, fp(w), f)
			require.Equal(t, sent(w, "0x1"), got)
		}
		f, got, ok := replay(b, "", "k-2")
		require.True(t, ok, "Replay of a settled key")
		require.Equal(t, fp(v), f)
		require.Equal(t, sent(v, "0x2"), got)
	})

	t.Run("says nothing for a claim in flight, an unknown key, another tenant or a key not as held", func(t *testing.T) {
		a, b := newStores(t)
		w := withdrawal("w-1")
		claim(t, a, "", "k-flight", w)
		claimDone(t, b, "", "k-1", w.withID("w-2"), sent(w.withID("w-2"), "0x2"))
		for _, c := range []struct{ tenant, key string }{
			{"", "k-flight"}, {"", "k-unknown"}, {"t1", "k-1"}, {"", " k-1"}, {"", "K-1"},
		} {
			_, _, ok := replay(a, c.tenant, c.key)
			require.False(t, ok, "Replay(%q, %q)", c.tenant, c.key)
		}
	})

	t.Run("says nothing for a pruned key", func(t *testing.T) {
		a, b := newStores(t)
		if !isPruner(a) {
			t.Skip("the store is not a driver.Pruner")
		}
		w := withdrawal("w-1")
		claimDone(t, a, "", "k-1", w, sent(w, "0x1"))
		_, _, ok := replay(b, "", "k-1")
		require.True(t, ok, "Replay before the prune")
		require.Len(t, prune(t, b, later(), 10), 1)
		_, _, ok = replay(a, "", "k-1")
		require.False(t, ok, "Replay after the prune")
	})
}

func (w Withdrawal) withID(id string) Withdrawal {
	w.ID = id
	return w
}
