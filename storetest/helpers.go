package storetest

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemledger/submissions/driver"
)

type (
	store  = driver.Store[Withdrawal]
	record = driver.Record[Withdrawal]
)

var bg = context.Background()

// prompt is how soon a call that must not wait answers, and a wait ends
// after what ends it.
const prompt = time.Second

// withdrawal returns an approved withdrawal with id, its amount and currency
// spelled as a service may ("25.00", "usdc"), not in canonical form.
func withdrawal(id string) Withdrawal {
	return Withdrawal{ID: id, Amount: "25.00", Currency: "usdc", Dest: "0xabc", State: "approved"}
}

// sent returns w sent under transaction tx: the outcome of its send.
func sent(w Withdrawal, tx string) Withdrawal {
	w.State, w.TxHash = "sent", tx
	return w
}

// fp returns w's fingerprint in canonical form, as a ledger passes it to a
// Store.
func fp(w Withdrawal) driver.Fingerprint {
	f, err := w.Fingerprint().Canonical()
	if err != nil {
		panic("storetest: an invalid withdrawal: " + err.Error())
	}
	return f
}

// inFlight, done and tombstone are the records a store must hold.
func inFlight(w Withdrawal, token driver.Token) record {
	return record{Fingerprint: fp(w), Token: token}
}

func done(w, outcome Withdrawal, token driver.Token) record {
	return record{Fingerprint: fp(w), Outcome: outcome, Done: true, Token: token}
}

func tombstone(id string, token driver.Token) record {
	return record{Fingerprint: driver.Fingerprint{WithdrawalID: id}, Done: true, Token: token, Pruned: true}
}

// pick returns a for even i and b for odd i: half the calls through each.
func pick(i int, a, b store) store {
	if i%2 == 0 {
		return a
	}
	return b
}

// claim claims key for w in flight through st, and stops t unless it is a
// new claim under a non-zero token with w's fingerprint.
func claim(t *testing.T, st store, tenant, key string, w Withdrawal) record {
	t.Helper()
	rec, claimed, err := st.Claim(bg, tenant, key, fp(w), nil)
	require.NoError(t, err, "Claim(%q, %q)", tenant, key)
	require.True(t, claimed, "Claim(%q, %q) claimed", tenant, key)
	require.NotZero(t, rec.Token, "Claim(%q, %q) token", tenant, key)
	require.Equal(t, inFlight(w, rec.Token), rec, "Claim(%q, %q) record", tenant, key)
	return rec
}

// claimDone claims key for w done with outcome through st, and stops t
// unless it is a new claim with that outcome.
func claimDone(t *testing.T, st store, tenant, key string, w, outcome Withdrawal) record {
	t.Helper()
	rec, claimed, err := st.Claim(bg, tenant, key, fp(w), &outcome)
	require.NoError(t, err, "Claim(%q, %q, outcome)", tenant, key)
	require.True(t, claimed, "Claim(%q, %q, outcome) claimed", tenant, key)
	require.NotZero(t, rec.Token, "Claim(%q, %q, outcome) token", tenant, key)
	require.Equal(t, done(w, outcome, rec.Token), rec, "Claim(%q, %q, outcome) record", tenant, key)
	return rec
}

func settle(t *testing.T, st store, tenant, key string, token driver.Token, outcome Withdrawal) (record, bool) {
	t.Helper()
	rec, settled, err := st.Settle(bg, tenant, key, token, outcome)
	require.NoError(t, err, "Settle(%q, %q, %d)", tenant, key, token)
	return rec, settled
}

func release(t *testing.T, st store, tenant, key string, token driver.Token) (record, bool) {
	t.Helper()
	rec, released, err := st.Release(bg, tenant, key, token)
	require.NoError(t, err, "Release(%q, %q, %d)", tenant, key, token)
	return rec, released
}

// requireRecord stops t unless key's record, looked up through st, is want.
func requireRecord(t *testing.T, st store, tenant, key string, want record) {
	t.Helper()
	rec, ok, err := st.Lookup(bg, tenant, key)
	require.NoError(t, err, "Lookup(%q, %q)", tenant, key)
	require.True(t, ok, "Lookup(%q, %q) found", tenant, key)
	require.Equal(t, want, rec, "Lookup(%q, %q)", tenant, key)
}

// requireNoRecord stops t unless key has no record, through st.
func requireNoRecord(t *testing.T, st store, tenant, key string) {
	t.Helper()
	rec, ok, err := st.Lookup(bg, tenant, key)
	require.NoError(t, err, "Lookup(%q, %q)", tenant, key)
	require.False(t, ok, "Lookup(%q, %q) found %+v", tenant, key, rec)
}

// requireHolder stops t unless id is claimed by holder through st, or by no
// key when holder is "".
func requireHolder(t *testing.T, st store, tenant, id, holder string) {
	t.Helper()
	key, ok, err := st.ClaimedBy(bg, tenant, id)
	require.NoError(t, err, "ClaimedBy(%q, %q)", tenant, id)
	require.Equal(t, holder != "", ok, "ClaimedBy(%q, %q) found", tenant, id)
	require.Equal(t, holder, key, "ClaimedBy(%q, %q)", tenant, id)
}

// requireConflict stops t unless err is a *driver.ConflictError equal to
// want, which errors.Is reads as ErrIdempotencyConflict, and as ErrPruned
// exactly when want.Pruned.
func requireConflict(t *testing.T, err error, want driver.ConflictError) {
	t.Helper()
	var ce *driver.ConflictError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, want, *ce, "the ConflictError")
	require.ErrorIs(t, err, driver.ErrIdempotencyConflict)
	require.Equal(t, want.Pruned, errors.Is(err, driver.ErrPruned), "errors.Is(err, ErrPruned)")
}

// together runs f(i) for i < n on n goroutines released at once, and waits
// for them all.
func together(n int, f func(i int)) {
	var ready, finished sync.WaitGroup
	start := make(chan struct{})
	ready.Add(n)
	finished.Add(n)
	for i := range n {
		go func() {
			defer finished.Done()
			ready.Done()
			<-start
			f(i)
		}()
	}
	ready.Wait()
	close(start)
	finished.Wait()
}

// atLimit returns valid UTF-8 of exactly n bytes: lead, then runes in turn
// while they fit, then ASCII padding.
func atLimit(n int, lead string, runes ...string) string {
	var b strings.Builder
	b.WriteString(lead)
	for i := 0; b.Len()+len(runes[i%len(runes)]) <= n; i++ {
		b.WriteString(runes[i%len(runes)])
	}
	b.WriteString(strings.Repeat("x", n-b.Len()))
	return b.String()
}
