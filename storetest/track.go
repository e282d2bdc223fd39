package storetest

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemledger/submissions/driver"
)

func claimSend(t *testing.T, st store, tenant, key string, w Withdrawal) (record, driver.Send[Withdrawal]) {
	t.Helper()
	rec, s, err := st.(driver.Tracker[Withdrawal]).ClaimSend(bg, tenant, key, fp(w))
	require.NoError(t, err, "ClaimSend(%q, %q)", tenant, key)
	require.NotNil(t, s, "ClaimSend(%q, %q): no Send", tenant, key)
	require.NotZero(t, rec.Token)
	require.Equal(t, inFlight(w, rec.Token), rec, "ClaimSend(%q, %q)", tenant, key)
	return rec, s
}

func sending(t *testing.T, st store, tenant, key string, token driver.Token) <-chan struct{} {
	t.Helper()
	ch, err := st.(driver.Tracker[Withdrawal]).Sending(bg, tenant, key, token)
	require.NoError(t, err, "Sending(%q, %q, %d)", tenant, key, token)
	return ch
}

// requireRunning stops t unless the send's channel is open.
func requireRunning(t *testing.T, ch <-chan struct{}) {
	t.Helper()
	require.NotNil(t, ch, "Sending: no send runs")
	select {
	case <-ch:
		t.Fatal("Sending: the channel is closed, but the send runs")
	default:
	}
}

// requireEnded stops t unless the send's channel is closed.
func requireEnded(t *testing.T, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	default:
		t.Fatal("Sending: the channel is open, but the send ended")
	}
}

func testTracker(t *testing.T, newStores Factory) {
	t.Run("ClaimSend claims in flight with a Send, Sending until Send.Settle", func(t *testing.T) {
		a, b := newStores(t)
		w := withdrawal("w-1")
		rec, s := claimSend(t, a, "t1", "k-1", w)
		requireRecord(t, b, "t1", "k-1", rec)
		requireHolder(t, b, "t1", "w-1", "k-1")
		ch := sending(t, b, "t1", "k-1", rec.Token)
		requireRunning(t, ch)
		got, settled, err := s.Settle(bg, sent(w, "0x1"))
		require.NoError(t, err)
		require.True(t, settled)
		require.Equal(t, done(w, sent(w, "0x1"), rec.Token), got)
		requireEnded(t, ch)
		require.Nil(t, sending(t, a, "t1", "k-1", rec.Token))
		requireRecord(t, b, "t1", "k-1", got)
		require.NoError(t, s.Abandon(bg), "Send.Abandon after a Settle that succeeded")
		requireRecord(t, a, "t1", "k-1", got)
	})

	t.Run("Send.Abandon ends the send and marks the claim Abandoned, still in flight", func(t *testing.T) {
		a, b := newStores(t)
		w := withdrawal("w-1")
		rec, s := claimSend(t, a, "", "k-1", w)
		ch := sending(t, b, "", "k-1", rec.Token)
		requireRunning(t, ch)
		require.NoError(t, s.Abandon(bg))
		requireEnded(t, ch)
		require.Nil(t, sending(t, b, "", "k-1", rec.Token))
		rec.Abandoned = true
		requireRecord(t, b, "", "k-1", rec)
		got, settled := settle(t, b, "", "k-1", rec.Token, sent(w, "0x1"))
		require.True(t, settled, "Settle of an abandoned claim")
		require.Equal(t, done(w, sent(w, "0x1"), rec.Token), got)
	})

	t.Run("Send.Release ends the send and releases the claim and its withdrawal in one step", func(t *testing.T) {
		a, b := newStores(t)
		w := withdrawal("w-1")
		rec, s := claimSend(t, a, "t1", "k-1", w)
		ch := sending(t, b, "t1", "k-1", rec.Token)
		requireRunning(t, ch)
		got, released, err := s.Release(bg)
		require.NoError(t, err)
		require.True(t, released)
		require.Equal(t, rec, got, "the released record")
		requireEnded(t, ch)
		require.Nil(t, sending(t, b, "t1", "k-1", rec.Token))
		requireNoRecord(t, b, "t1", "k-1")
		requireHolder(t, b, "t1", "w-1", "")
		_, again, err := s.Release(bg)
		require.NoError(t, err, "Send.Release after the send ended")
		require.False(t, again, "Send.Release after the send ended")
		next, _ := claimSend(t, b, "t1", "k-2", w)
		require.NotEqual(t, rec.Token, next.Token)
	})

	t.Run("Send.Release leaves a claim settled or released and claimed again meanwhile", func(t *testing.T) {
		a, b := newStores(t)
		w := withdrawal("w-1")
		rec, s := claimSend(t, a, "", "k-1", w)
		fin, settled := settle(t, b, "", "k-1", rec.Token, sent(w, "0x1"))
		require.True(t, settled)
		got, released, err := s.Release(bg)
		require.NoError(t, err)
		require.False(t, released, "Send.Release of a settled claim")
		require.Equal(t, fin, got)
		requireRecord(t, b, "", "k-1", fin)
		require.Nil(t, sending(t, b, "", "k-1", rec.Token))

		rec, s = claimSend(t, a, "", "k-2", withdrawal("w-2"))
		_, ok := release(t, b, "", "k-2", rec.Token)
		require.True(t, ok)
		again := claim(t, b, "", "k-2", withdrawal("w-2"))
		got, released, err = s.Release(bg)
		require.NoError(t, err)
		require.False(t, released, "Send.Release of a claim released and claimed again")
		require.Equal(t, record{}, got, "Send.Release of a claim released and claimed again")
		requireRecord(t, a, "", "k-2", again)
		requireHolder(t, a, "", "w-2", "k-2")
	})

	t.Run("ClaimSend of a held key returns its record and no Send", func(t *testing.T) {
		a, b := newStores(t)
		w := withdrawal("w-1")
		plain := claim(t, a, "", "k-plain", withdrawal("w-plain"))
		fin := claimDone(t, a, "", "k-done", w, sent(w, "0x1"))
		sendRec, _ := claimSend(t, b, "", "k-send", withdrawal("w-send"))
		for i, c := range []struct {
			key  string
			want record
		}{{"k-plain", plain}, {"k-done", fin}, {"k-send", sendRec}} {
			rec, s, err := pick(i, a, b).(driver.Tracker[Withdrawal]).ClaimSend(bg, "", c.key, fp(withdrawal("w-other")))
			require.NoError(t, err, c.key)
			require.Nil(t, s, c.key)
			require.Equal(t, c.want, rec, c.key)
		}
		requireRunning(t, sending(t, a, "", "k-send", sendRec.Token))
	})

	t.Run("ClaimSend of a claimed withdrawal returns the ConflictError and no Send", func(t *testing.T) {
		a, b := newStores(t)
		claim(t, a, "t1", "k-1", withdrawal("w-1"))
		_, s, err := b.(driver.Tracker[Withdrawal]).ClaimSend(bg, "t1", "k-2", fp(withdrawal("w-1")))
		require.Nil(t, s)
		requireConflict(t, err, driver.ConflictError{Tenant: "t1", Holder: "k-1", Key: "k-2", WithdrawalID: "w-1"})
		requireNoRecord(t, a, "t1", "k-2")
	})

	t.Run("Sending is nil when no send runs under the claim", func(t *testing.T) {
		a, b := newStores(t)
		plain := claim(t, a, "", "k-1", withdrawal("w-1"))
		rec, _ := claimSend(t, b, "t1", "k-1", withdrawal("w-1"))
		require.Nil(t, sending(t, b, "", "k-1", plain.Token), "a claim of Claim")
		require.Nil(t, sending(t, a, "", "k-unknown", plain.Token), "an unknown key")
		require.Nil(t, sending(t, a, "t2", "k-1", rec.Token), "another tenant")
		require.Nil(t, sending(t, a, "t1", "k-1", rec.Token+1), "another token")
	})

	t.Run("racing ClaimSends of one key through a and b: one gets a Send", func(t *testing.T) {
		a, b := newStores(t)
		const n = 16
		recs, sends, errs := make([]record, n), make([]driver.Send[Withdrawal], n), make([]error, n)
		together(n, func(i int) {
			recs[i], sends[i], errs[i] = pick(i, a, b).(driver.Tracker[Withdrawal]).ClaimSend(bg, "", "k-1", fp(withdrawal(strings.Repeat("w", i+1))))
		})
		got := make([]bool, n)
		for i := range n {
			got[i] = sends[i] != nil
		}
		winner := onlyWinner(t, got, errs)
		for i := range n {
			require.Equal(t, recs[winner], recs[i], "racer %d's record", i)
		}
		requireRunning(t, sending(t, b, "", "k-1", recs[winner].Token))
		require.NoError(t, sends[winner].Abandon(bg))
	})
}
