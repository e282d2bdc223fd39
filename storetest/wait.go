package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemledger/submissions/driver"
)

// waited is what a WaitClaim returned.
type waited struct {
	rec record
	ok  bool
	err error
}

// waitClaim waits through st for token's claim of key in the background, and
// returns the channel its answer comes on. The wait ends with t.
func waitClaim(t *testing.T, st store, tenant, key string, token driver.Token) <-chan waited {
	ctx, cancel := context.WithTimeout(bg, 30*time.Second)
	t.Cleanup(cancel)
	answer := make(chan waited, 1)
	go func() {
		rec, ok, err := st.(driver.Waiter[Withdrawal]).WaitClaim(ctx, tenant, key, token)
		answer <- waited{rec, ok, err}
	}()
	return answer
}

// requireWaiting stops t if the wait has ended within a tenth of a second.
func requireWaiting(t *testing.T, answer <-chan waited) {
	t.Helper()
	select {
	case got := <-answer:
		t.Fatalf("WaitClaim returned while the claim is in flight: %+v", got)
	case <-time.After(100 * time.Millisecond):
	}
}

// requireWaited stops t unless the wait ends within prompt with want, ok.
func requireWaited(t *testing.T, answer <-chan waited, want record, ok bool) {
	t.Helper()
	select {
	case got := <-answer:
		require.NoError(t, got.err, "WaitClaim")
		require.Equal(t, ok, got.ok, "WaitClaim found a record")
		require.Equal(t, want, got.rec, "WaitClaim")
	case <-time.After(prompt):
		t.Fatalf("WaitClaim has not returned %v after its claim was closed", prompt)
	}
}

func testWaiter(t *testing.T, newStores Factory) {
	t.Run("returns at once when the claim is not in flight", func(t *testing.T) {
		a, b := newStores(t)
		w := withdrawal("w-1")
		fin := claimDone(t, a, "", "k-done", w, sent(w, "0x1"))
		s := claim(t, b, "", "k-settled", withdrawal("w-2"))
		settledRec, _ := settle(t, a, "", "k-settled", s.Token, sent(withdrawal("w-2"), "0x2"))
		r := claim(t, a, "", "k-again", withdrawal("w-3"))
		_, released := release(t, b, "", "k-again", r.Token)
		require.True(t, released)
		requireWaited(t, waitClaim(t, a, "", "k-again", r.Token), record{}, false)
		again := claim(t, b, "", "k-again", withdrawal("w-3"))
		for i, c := range []struct {
			key   string
			token driver.Token
			want  record
			ok    bool
		}{
			{"k-done", fin.Token, fin, true},
			{"k-settled", s.Token, settledRec, true},
			{"k-unknown", 1, record{}, false},
			{"k-again", r.Token, again, true}, // the record of a later claim
		} {
			requireWaited(t, waitClaim(t, pick(i, a, b), "", c.key, c.token), c.want, c.ok)
		}
	})

	for _, c := range []struct {
		how   string
		close func(t *testing.T, b store, rec record) (want record, ok bool)
	}{
		{"Settle", func(t *testing.T, b store, rec record) (record, bool) {
			got, settled := settle(t, b, "t1", "k-1", rec.Token, sent(withdrawal("w-1"), "0x1"))
			require.True(t, settled)
			return got, true
		}},
		{"Release", func(t *testing.T, b store, rec record) (record, bool) {
			_, released := release(t, b, "t1", "k-1", rec.Token)
			require.True(t, released)
			return record{}, false
		}},
		{"Abandon", func(t *testing.T, b store, rec record) (record, bool) {
			if !isAbandoner(b) {
				t.Skip("the store is not a driver.Abandoner")
			}
			require.NoError(t, b.(driver.Abandoner).Abandon(bg, "t1", "k-1", rec.Token))
			rec.Abandoned = true
			return rec, true
		}},
	} {
		t.Run("a wait through a is ended promptly by "+c.how+" through b", func(t *testing.T) {
			a, b := newStores(t)
			rec := claim(t, a, "t1", "k-1", withdrawal("w-1"))
			answer := waitClaim(t, a, "t1", "k-1", rec.Token)
			requireWaiting(t, answer)
			want, ok := c.close(t, b, rec)
			requireWaited(t, answer, want, ok)
		})
	}

	t.Run("a wait is not ended by a change to another claim", func(t *testing.T) {
		a, b := newStores(t)
		rec := claim(t, a, "t1", "k-1", withdrawal("w-1"))
		other := claim(t, b, "", "k-1", withdrawal("w-1"))
		answer := waitClaim(t, a, "t1", "k-1", rec.Token)
		_, settled := settle(t, b, "", "k-1", other.Token, withdrawal("w-1"))
		require.True(t, settled)
		requireWaiting(t, answer)
		_, released := release(t, b, "t1", "k-1", rec.Token)
		require.True(t, released)
		requireWaited(t, answer, record{}, false)
	})

	t.Run("returns ctx's error when ctx ends first", func(t *testing.T) {
		a, _ := newStores(t)
		rec := claim(t, a, "", "k-1", withdrawal("w-1"))
		cancelled, cancel := context.WithCancel(bg)
		cancel()
		expiring, cancel := context.WithTimeout(bg, 50*time.Millisecond)
		defer cancel()
		for _, c := range []struct {
			ctx  context.Context
			want error
		}{{cancelled, context.Canceled}, {expiring, context.DeadlineExceeded}} {
			start := time.Now()
			_, _, err := a.(driver.Waiter[Withdrawal]).WaitClaim(c.ctx, "", "k-1", rec.Token)
			require.ErrorIs(t, err, c.want)
			require.Less(t, time.Since(start), prompt, "WaitClaim returned late")
		}
		requireRecord(t, a, "", "k-1", rec)
	})
}
