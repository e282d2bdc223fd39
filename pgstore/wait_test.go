package pgstore

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemledger/submissions"
	"github.com/idemledger/submissions/driver"
)

// waited is what a WaitClaim returned.
type waited struct {
	rec driver.Record[w]
	ok  bool
	err error
}

// goWaitClaim runs st.waitClaim on a goroutine and returns the channel of its
// result.
func goWaitClaim(ctx context.Context, st *Store[w], key string, token driver.Token, poll time.Duration) <-chan waited {
	done := make(chan waited, 1)
	go func() {
		rec, ok, err := st.waitClaim(ctx, "", key, token, poll)
		done <- waited{rec, ok, err}
	}()
	return done
}

// requireGivenBack stops t unless every connection of pool is back in it,
// none listening. A connection closed instead of given back leaves the pool
// a moment later (the pool destroys it on a goroutine of its own): it has ten
// seconds to.
func requireGivenBack(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	require.Eventually(t, func() bool { return pool.Stat().AcquiredConns() == 0 }, 10*time.Second, 5*time.Millisecond,
		"connections still taken")
	conns := pool.AcquireAllIdle(bg)
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	for _, c := range conns {
		var n int
		require.NoError(t, c.QueryRow(bg, `SELECT count(*) FROM pg_listening_channels()`).Scan(&n))
		assert.Zero(t, n, "a connection given back still listens")
		require.NoError(t, c.QueryRow(bg, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()`).Scan(&n))
		assert.Zero(t, n, "a connection given back still holds a waiter's lock")
	}
}

// TestWaitClaimHearsAnotherPool: a claim settled or released through a Store
// on another pool (another instance) ends a WaitClaim by its notification,
// long before the WaitClaim would read the row again.
func TestWaitClaimHearsAnotherPool(t *testing.T) {
	poolA, poolB := testPool(t, 4), testPool(t, 4)
	a := newTestStore[w](t, poolA)
	b, err := New[w](poolB, WithTable(a.names.base))
	require.NoError(t, err)

	for _, settle := range []bool{true, false} {
		key := "req-" + map[bool]string{true: "settled", false: "released"}[settle]
		x := newW("w-" + key)
		rec, claimed, err := a.Claim(bg, "", key, x.Fingerprint(), nil)
		require.NoError(t, err)
		require.True(t, claimed)
		done := goWaitClaim(bg, b, key, rec.Token, time.Hour)
		requireLocked(t, poolA, a, key, 1)
		start := time.Now()
		if settle {
			_, ok, err := a.Settle(bg, "", key, rec.Token, sent(x, "0x1"))
			require.NoError(t, err)
			require.True(t, ok)
		} else {
			_, ok, err := a.Release(bg, "", key, rec.Token)
			require.NoError(t, err)
			require.True(t, ok)
		}
		got := <-done
		require.NoError(t, got.err)
		assert.Less(t, time.Since(start), 10*time.Second)
		assert.Equal(t, settle, got.ok, "the key has a record")
		if settle {
			assert.True(t, got.rec.Done)
			assert.Equal(t, sent(x, "0x1"), got.rec.Outcome)
		}
	}
	requireGivenBack(t, poolB)
}

// TestWaitClaimReadsAgainWhenANotificationIsLost: an outcome written without
// a notification (one lost) is found by the WaitClaim's next read.
func TestWaitClaimReadsAgainWhenANotificationIsLost(t *testing.T) {
	pool := testPool(t, 4)
	st := newTestStore[w](t, pool)
	x := newW("w-1")
	rec, _, err := st.Claim(bg, "", "req-1", x.Fingerprint(), nil)
	require.NoError(t, err)
	done := goWaitClaim(bg, st, "req-1", rec.Token, 50*time.Millisecond)
	requireLocked(t, pool, st, "req-1", 1)
	encoded, err := st.encode("req-1", sent(x, "0x1"))
	require.NoError(t, err)
	_, err = pool.Exec(bg, `UPDATE `+st.names.table+` SET outcome = $1, settled_at = now() WHERE request_key = 'req-1'`, encoded)
	require.NoError(t, err)
	got := <-done
	require.NoError(t, got.err)
	require.True(t, got.ok)
	assert.Equal(t, sent(x, "0x1"), got.rec.Outcome)
	requireGivenBack(t, pool)
}

// TestWaitClaimHoldsNoConnectionOfThePool: a WaitClaim ends with its ctx,
// and at once for a claim that is not in flight; the Waits of a key through
// a Store whose pool has one connection leave it free for the Resolve that
// ends them (a Wait that held it would keep the Resolve from being recorded
// until the Waits' contexts ended); and the pool's connections never listen
// nor hold a waiter's lock.
func TestWaitClaimHoldsNoConnectionOfThePool(t *testing.T) {
	pool, observer := testPool(t, 1), testPool(t, 1)
	st := newTestStore[w](t, pool)
	x := newW("w-1")
	// Claimed as a ledger claims, with the canonical fingerprint, since a
	// ledger resolves the claim below.
	fp, err := x.Fingerprint().Canonical()
	require.NoError(t, err)
	rec, _, err := st.Claim(bg, "", "req-1", fp, nil)
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(bg)
	done := goWaitClaim(ctx, st, "req-1", rec.Token, time.Hour)
	requireLocked(t, observer, st, "req-1", 1)
	cancel()
	select {
	case got := <-done:
		require.ErrorIs(t, got.err, context.Canceled)
	case <-time.After(soon):
		require.FailNow(t, "a WaitClaim did not end with its ctx")
	}
	requireGivenBack(t, pool)

	_, _, err = st.WaitClaim(bg, "", "req-1", rec.Token+1)
	require.NoError(t, err, "another claim's token: not in flight")
	_, ok, err := st.WaitClaim(bg, "", "req-unknown", 1)
	require.NoError(t, err)
	require.False(t, ok)

	ledger := submissions.NewWithStore[w](st, submissions.WithLogger(quiet))
	elsewhere := submissions.NewWithStore[w](struct {
		driver.Store[w]
		driver.Waiter[w]
	}{st, st}, submissions.WithLogger(quiet))
	waits := make(chan error, 4)
	for range cap(waits) {
		go func() {
			ctx, cancel := context.WithTimeout(bg, time.Minute)
			defer cancel()
			_, err := elsewhere.Wait(ctx, "req-1")
			waits <- err
		}()
	}
	requireLocked(t, observer, st, "req-1", 1)
	rctx, cancel := context.WithTimeout(bg, soon)
	defer cancel()
	require.NoError(t, ledger.Resolve(rctx, "req-1", sent(x, "0x1")), "Resolve while the Waits wait")
	for range cap(waits) {
		select {
		case err := <-waits:
			require.NoError(t, err)
		case <-time.After(soon):
			require.FailNow(t, "a Wait did not end after the Resolve")
		}
	}
	requireGivenBack(t, pool)
}

var _ driver.Abandoner = (*Store[w])(nil)

// TestWaitClaimHearsAnAbandon: a claim abandoned through a Store on another
// pool (its send ended without an answer in another instance) ends a
// WaitClaim, by its notification long before the WaitClaim would read the
// row again, and by that read when no notification comes; the record is
// Abandoned, in flight, until the claim is settled.
func TestWaitClaimHearsAnAbandon(t *testing.T) {
	poolA, poolB := testPool(t, 4), testPool(t, 4)
	a := newTestStore[w](t, poolA)
	b, err := New[w](poolB, WithTable(a.names.base))
	require.NoError(t, err)

	for _, notified := range []bool{true, false} {
		key := "req-" + map[bool]string{true: "notified", false: "polled"}[notified]
		x := newW("w-" + key)
		rec, claimed, err := a.Claim(bg, "", key, x.Fingerprint(), nil)
		require.NoError(t, err)
		require.True(t, claimed)
		require.False(t, rec.Abandoned)
		poll := time.Hour
		if !notified {
			poll = 50 * time.Millisecond
		}
		done := goWaitClaim(bg, b, key, rec.Token, poll)
		requireLocked(t, poolA, a, key, 1)
		start := time.Now()
		if notified {
			require.NoError(t, a.Abandon(bg, "", key, rec.Token))
		} else { // the row changed without a notification (one lost)
			_, err := poolA.Exec(bg, `UPDATE `+a.names.table+` SET abandoned_at = now() WHERE request_key = $1`, key)
			require.NoError(t, err)
		}
		got := <-done
		require.NoError(t, got.err)
		assert.Less(t, time.Since(start), 10*time.Second)
		require.True(t, got.ok)
		assert.True(t, got.rec.Abandoned, "abandoned")
		assert.False(t, got.rec.Done, "and in flight")
		assert.Equal(t, rec.Token, got.rec.Token)

		again, ok, err := b.WaitClaim(bg, "", key, rec.Token)
		require.NoError(t, err, "a WaitClaim of an abandoned claim returns at once")
		require.True(t, ok)
		assert.True(t, again.Abandoned)
	}
	requireGivenBack(t, poolB)

	// Settled after all: done, no longer Abandoned; an Abandon of a done
	// claim, or of another claim's token, changes nothing.
	rec, ok, err := a.Lookup(bg, "", "req-notified")
	require.NoError(t, err)
	require.True(t, ok)
	_, settled, err := b.Settle(bg, "", "req-notified", rec.Token, sent(newW("w-req-notified"), "0x1"))
	require.NoError(t, err)
	require.True(t, settled, "an abandoned claim is settled as any other")
	require.NoError(t, a.Abandon(bg, "", "req-notified", rec.Token))
	require.NoError(t, a.Abandon(bg, "", "req-notified", rec.Token+100))
	require.NoError(t, a.Abandon(bg, "", "req-unknown", 1))
	done, ok, err := a.Lookup(bg, "", "req-notified")
	require.NoError(t, err)
	require.True(t, ok)
	assert.True(t, done.Done)
	assert.False(t, done.Abandoned, "a done record is never Abandoned")

	fresh, claimed, err := a.Claim(bg, "", "req-fresh", newW("w-fresh").Fingerprint(), nil)
	require.NoError(t, err)
	require.True(t, claimed)
	require.NoError(t, a.Abandon(bg, "", "req-fresh", fresh.Token+100))
	got, _, err := a.Lookup(bg, "", "req-fresh")
	require.NoError(t, err)
	assert.False(t, got.Abandoned, "another token's Abandon changes nothing")
}
