package storetest

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemledger/submissions/driver"
)

func testReplayer(t *testing.T, newStores Factory) {
	replay := func(st store, tenant, key string, f driver.Fingerprint) (Withdrawal, bool) {
		out := st.(driver.Replayer[Withdrawal]).Replay(tenant, key, f)
		if out == nil {
			return Withdrawal{}, false
		}
		return *out, true
	}

	t.Run("answers for a done key with the same withdrawal, however it is spelled", func(t *testing.T) {
		a, b := newStores(t)
		w, v := withdrawal("w-1"), withdrawal("w-2")
		claimDone(t, a, "t1", "k-1", w, sent(w, "0x1"))
		rec := claim(t, b, "", "k-2", v)
		_, settled := settle(t, a, "", "k-2", rec.Token, sent(v, "0x2"))
		require.True(t, settled)
		spelled := w
		spelled.Amount, spelled.Currency = "025.000", "UsDc"
		for i, f := range []driver.Fingerprint{w.Fingerprint(), fp(w), spelled.Fingerprint()} {
			got, ok := replay(pick(i, a, b), "t1", "k-1", f)
			require.True(t, ok, "Replay of %+v", f)
			require.Equal(t, sent(w, "0x1"), got)
		}
		got, ok := replay(b, "", "k-2", v.Fingerprint())
		require.True(t, ok, "Replay of a settled key")
		require.Equal(t, sent(v, "0x2"), got)
	})

	t.Run("says nothing for a claim in flight, an unknown key, another tenant or another withdrawal", func(t *testing.T) {
		a, b := newStores(t)
		w := withdrawal("w-1")
		claim(t, a, "", "k-flight", w)
		claimDone(t, b, "", "k-1", w.withID("w-2"), sent(w.withID("w-2"), "0x2"))
		other := func(change func(*Withdrawal)) driver.Fingerprint {
			x := w.withID("w-2")
			change(&x)
			return x.Fingerprint()
		}
		for _, c := range []struct {
			tenant, key string
			fp          driver.Fingerprint
		}{
			{"", "k-flight", w.Fingerprint()},
			{"", "k-unknown", w.Fingerprint()},
			{"t1", "k-1", w.withID("w-2").Fingerprint()},
			{"", "k-1", w.Fingerprint()},
			{"", "k-1", other(func(x *Withdrawal) { x.Amount = "25.01" })},
			{"", "k-1", other(func(x *Withdrawal) { x.Currency = "EUR" })},
			{"", "k-1", other(func(x *Withdrawal) { x.Dest = "0xABC" })},
			{"", "k-1", other(func(x *Withdrawal) { x.ID = "W-2" })},
		} {
			_, ok := replay(a, c.tenant, c.key, c.fp)
			require.False(t, ok, "Replay(%q, %q, %+v)", c.tenant, c.key, c.fp)
		}
	})

	t.Run("says nothing for an invalid fingerprint, even of the same value", func(t *testing.T) {
		a, _ := newStores(t)
		w := withdrawal("w-1")
		claimDone(t, a, "", "k-1", w, sent(w, "0x1"))
		for _, amount := range []string{
			strings.Repeat("0", driver.MaxAmountLen-1) + "25", // 25, in one byte too many
			"25." + strings.Repeat("0", driver.MaxAmountLen-2),
			"", "-25", "25e0", " 25",
		} {
			f := w.Fingerprint()
			f.Amount = amount
			_, ok := replay(a, "", "k-1", f)
			require.False(t, ok, "Replay with amount %q", amount)
		}
	})

	t.Run("says nothing for a pruned key", func(t *testing.T) {
		a, b := newStores(t)
		if !isPruner(a) {
			t.Skip("the store is not a driver.Pruner")
		}
		w := withdrawal("w-1")
		claimDone(t, a, "", "k-1", w, sent(w, "0x1"))
		_, ok := replay(b, "", "k-1", w.Fingerprint())
		require.True(t, ok, "Replay before the prune")
		require.Len(t, prune(t, b, later(), 10), 1)
		_, ok = replay(a, "", "k-1", w.Fingerprint())
		require.False(t, ok, "Replay after the prune")
	})
}

func (w Withdrawal) withID(id string) Withdrawal {
	w.ID = id
	return w
}
