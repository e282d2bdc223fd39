package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemledger/submissions"
	"github.com/idemledger/submissions/idemhttp"
	"github.com/idemledger/submissions/pgstore"
	"github.com/idemledger/submissions/pgstore/ctl"
)

// agree checks that tenant's withdrawal id in payoutd_withdrawals and the
// ledger's claim of it agree, read in one statement, and returns the
// stored state: "approved" without a claim, "sending" exactly while a claim
// is in flight, and once the claim has an outcome the outcome's state, tx
// and failure reason ("sent" or "failed" for a tombstone).
func agree(t *testing.T, pool *pgxpool.Pool, tenant, id string) string {
	t.Helper()
	states := agreeAll(t, pool, `WHERE w.tenant = $1 AND w.id = $2`, tenant, id)
	require.Len(t, states, 1, "withdrawal %s of tenant %q", id, tenant)
	return states[id]
}

// agreeAll is agree for each withdrawal that where selects (w is
// payoutd_withdrawals, l the ledger's table), all read in one statement;
// it returns their stored states by id.
func agreeAll(t *testing.T, pool *pgxpool.Pool, where string, args ...any) map[string]string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT w.tenant, w.id, w.state, w.tx, w.failure_reason,
	l.request_key IS NOT NULL, l.outcome IS NULL, l.pruned_at IS NOT NULL, l.outcome
FROM payoutd_withdrawals w LEFT JOIN submissions l ON l.tenant = w.tenant AND l.withdrawal_id = w.id `+where, args...)
	require.NoError(t, err)
	defer rows.Close()
	states := map[string]string{}
	for rows.Next() {
		var (
			tenant, id, state, tx, reason string
			claimed, inFlight, pruned     bool
			outcome                       []byte
		)
		require.NoError(t, rows.Scan(&tenant, &id, &state, &tx, &reason, &claimed, &inFlight, &pruned, &outcome))
		states[id] = state
		switch {
		case !claimed:
			assert.Equal(t, stateApproved, state, "withdrawal %s of tenant %q: no claim", id, tenant)
		case inFlight:
			assert.Equal(t, stateSending, state, "withdrawal %s of tenant %q: a claim in flight", id, tenant)
		case pruned:
			assert.Contains(t, []string{stateSent, stateFailed}, state, "withdrawal %s of tenant %q: a pruned outcome", id, tenant)
		default:
			var out Withdrawal
			require.NoError(t, json.Unmarshal(outcome, &out))
			assert.Equal(t, []string{out.State, out.Tx, out.FailureReason}, []string{state, tx, reason},
				"withdrawal %s of tenant %q: the outcome's state, tx and failure reason", id, tenant)
		}
	}
	require.NoError(t, rows.Err())
	return states
}

// TestStatesMoveWithTheClaims: on PostgreSQL a withdrawal's stored state
// moves with its key's claim at every door: a send (sent, declined, not
// sent, without an answer), and an operator's resolve and release through
// the admin API and through `payoutd ctl`. GET never shows "sending".
func TestStatesMoveWithTheClaims(t *testing.T) {
	db := testDatabase(t)
	pool := testPool(t, db)
	var f fates
	r := newRail(0, 0, 0, 0, 0)
	r.decide = f.decide
	a := serve(t, db, r, 300*time.Millisecond)
	ctl := func(t *testing.T, stdin string, args ...string) {
		t.Helper()
		var stdout, stderr bytes.Buffer
		code := runCtl(context.Background(), append([]string{"--database-url", db}, args...), strings.NewReader(stdin), &stdout, &stderr)
		require.Equal(t, 0, code, "payoutd ctl %q: %s%s", args, stdout.String(), stderr.String())
	}
	// send submits id under key and checks the status and the states.
	send := func(t *testing.T, id, key string, status int, state, shown string) response {
		t.Helper()
		res := do(t, "POST", a.url+"/withdrawals/"+id+"/submit", "-", key, "")
		require.Equal(t, status, res.status, "%s", res.body)
		assert.Equal(t, state, agree(t, pool, "", id))
		assert.Equal(t, shown, do(t, "GET", a.url+"/withdrawals/"+id, "-", "-", "").withdrawal(t).State)
		return res
	}
	// stuckOn leaves id's key claimed by a send the rail failed.
	stuckOn := func(t *testing.T, key string) string {
		t.Helper()
		id := create(t, a, "")
		assert.Equal(t, stateApproved, agree(t, pool, "", id))
		f.set(id, fail)
		send(t, id, key, http.StatusBadGateway, stateSending, stateAwaitingOperator)
		f.set(id, answer)
		return id
	}
	sentJSON := func(t *testing.T, id, tx string) string {
		t.Helper()
		b, err := json.Marshal(Withdrawal{ID: id, Amount: "25.00", Currency: "USDC", Destination: "0xdest", State: stateSent, Tx: tx})
		require.NoError(t, err)
		return string(b)
	}

	t.Run("sent", func(t *testing.T) {
		id := create(t, a, "")
		res := send(t, id, "k-sent", http.StatusCreated, stateSent, stateSent)
		assert.Equal(t, res.withdrawal(t).Tx, do(t, "GET", a.url+"/withdrawals/"+id, "-", "-", "").withdrawal(t).Tx)
	})
	t.Run("declined", func(t *testing.T) {
		id := create(t, a, "")
		f.set(id, decline)
		send(t, id, "k-declined", http.StatusCreated, stateFailed, stateFailed)
	})
	t.Run("not sent, then sent", func(t *testing.T) {
		id := create(t, a, "")
		f.set(id, unavailable)
		send(t, id, "k-unavailable", http.StatusServiceUnavailable, stateApproved, stateApproved)
		f.set(id, answer)
		send(t, id, "k-unavailable", http.StatusCreated, stateSent, stateSent)
	})
	t.Run("no answer in time", func(t *testing.T) {
		id := create(t, a, "")
		f.set(id, hang)
		send(t, id, "k-hang", http.StatusBadGateway, stateSending, stateAwaitingOperator)
	})
	t.Run("a send running", func(t *testing.T) {
		started, finish := make(chan struct{}), make(chan struct{})
		id := create(t, a, "")
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = a.srv.ledger.Submit(context.Background(), "k-running", Withdrawal{ID: id, Amount: "25.00", Currency: "USDC", Destination: "0xdest"},
				func(_ context.Context, w Withdrawal) (Withdrawal, error) {
					close(started)
					<-finish
					w.State, w.Tx = stateSent, "tx_running"
					return w, nil
				})
		}()
		<-started
		assert.Equal(t, stateSending, agree(t, pool, "", id), "claimed, its send running")
		assert.Equal(t, stateInFlight, do(t, "GET", a.url+"/withdrawals/"+id, "-", "-", "").withdrawal(t).State)
		close(finish)
		<-done
		assert.Equal(t, stateSent, agree(t, pool, "", id))
	})
	t.Run("resolved through the admin API", func(t *testing.T) {
		id := stuckOn(t, "k-api-resolve")
		res := do(t, "POST", a.url+"/admin/claims/k-api-resolve/resolve", "-", "-", sentJSON(t, id, "tx_api"))
		require.Equal(t, http.StatusOK, res.status, "%s", res.body)
		assert.Equal(t, stateSent, agree(t, pool, "", id))
		got := do(t, "GET", a.url+"/withdrawals/"+id, "-", "-", "").withdrawal(t)
		assert.Equal(t, []string{stateSent, "tx_api"}, []string{got.State, got.Tx})
	})
	t.Run("released through the admin API", func(t *testing.T) {
		id := stuckOn(t, "k-api-release")
		res := do(t, "POST", a.url+"/admin/claims/k-api-release/release", "-", "-", "")
		require.Equal(t, http.StatusOK, res.status, "%s", res.body)
		assert.Equal(t, stateApproved, agree(t, pool, "", id))
		send(t, id, "k-api-release", http.StatusCreated, stateSent, stateSent)
	})
	t.Run("resolved through payoutd ctl", func(t *testing.T) {
		id := stuckOn(t, "k-ctl-resolve")
		file := filepath.Join(t.TempDir(), "sent.json")
		require.NoError(t, os.WriteFile(file, []byte(sentJSON(t, id, "tx_ctl")), 0o600))
		ctl(t, "", "resolve", "k-ctl-resolve", "--outcome-file", file)
		assert.Equal(t, stateSent, agree(t, pool, "", id))
		got := do(t, "GET", a.url+"/withdrawals/"+id, "-", "-", "").withdrawal(t)
		assert.Equal(t, []string{stateSent, "tx_ctl"}, []string{got.State, got.Tx})
	})
	t.Run("released through payoutd ctl", func(t *testing.T) {
		id := stuckOn(t, "k-ctl-release")
		ctl(t, "y\n", "release", "k-ctl-release")
		assert.Equal(t, stateApproved, agree(t, pool, "", id))
		send(t, id, "k-ctl-release", http.StatusCreated, stateSent, stateSent)
	})
	t.Run("a withdrawal out of step is not claimed", func(t *testing.T) {
		id := create(t, a, "")
		_, err := pool.Exec(t.Context(), `UPDATE payoutd_withdrawals SET state = 'sent', tx = 'tx_elsewhere' WHERE id = $1`, id)
		require.NoError(t, err)
		res := do(t, "POST", a.url+"/withdrawals/"+id+"/submit", "-", "k-out-of-step", "")
		res.problemOf(t, http.StatusServiceUnavailable, idemhttp.TypeStoreUnavailable)
		_, claimed, err := a.srv.ledger.ClaimedBy(t.Context(), id)
		require.NoError(t, err)
		assert.False(t, claimed, "the claim rolled back with the hook")
		assert.Zero(t, r.Sends()[id], "nothing sent")
		_, err = pool.Exec(t.Context(), `UPDATE payoutd_withdrawals SET state = 'approved', tx = '' WHERE id = $1`, id)
		require.NoError(t, err)
	})
	states := agreeAll(t, pool, "")
	assert.Len(t, states, 10)
	for id, state := range states {
		assert.Contains(t, []string{stateApproved, stateSending, stateSent, stateFailed}, state, "withdrawal %s: a stored state", id)
	}
}

// mustStore is a Store on pool's ledger table without payoutd's hooks: an
// older payoutd's, or submissionsctl's.
func mustStore(t *testing.T, pool *pgxpool.Pool) *pgstore.Store[Withdrawal] {
	t.Helper()
	store, err := pgstore.New[Withdrawal](pool)
	require.NoError(t, err)
	return store
}

// A payoutd from before the states moved with the claims left a withdrawal
// approved while its key's claim is in flight, and another approved with
// an outcome: the next payoutd's start brings both in line.
func TestStatesFromBefore(t *testing.T) {
	db := testDatabase(t)
	pool := testPool(t, db)
	a := serve(t, db, newRail(0, 0, 0, 0, 0), 10*time.Second)
	inFlight, done := create(t, a, ""), create(t, a, "acme")

	// What the older payoutd did: claims and outcomes without the hooks.
	old := submissions.NewWithStore[Withdrawal](mustStore(t, pool))
	_, err := old.Submit(t.Context(), "k-old", Withdrawal{ID: inFlight, Amount: "25.00", Currency: "USDC", Destination: "0xdest"},
		func(context.Context, Withdrawal) (Withdrawal, error) { return Withdrawal{}, errNoAnswer })
	require.ErrorIs(t, err, submissions.ErrOutcomeUnknown)
	_, err = old.Tenant("acme").Submit(t.Context(), "k-old", Withdrawal{ID: done, Amount: "25.00", Currency: "USDC", Destination: "0xdest"},
		func(_ context.Context, w Withdrawal) (Withdrawal, error) { return sentNow("tx_old")(w), nil })
	require.NoError(t, err)
	var state string
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT string_agg(state, ',') FROM payoutd_withdrawals`).Scan(&state))
	require.Equal(t, "approved,approved", state, "out of step")

	serve(t, db, newRail(0, 0, 0, 0, 0), 10*time.Second) // a start
	assert.Equal(t, stateSending, agree(t, pool, "", inFlight))
	assert.Equal(t, stateSent, agree(t, pool, "acme", done))
	res := do(t, "POST", a.url+"/admin/claims/k-old/release?force=true", "-", "-", "")
	require.Equal(t, http.StatusOK, res.status, "the hooks take over: %s", res.body)
	assert.Equal(t, stateApproved, agree(t, pool, "", inFlight))
}

// payoutd's start records on the ledger's table that payoutd ctl changes
// it: submissionsctl (ctl without payoutd's hooks) refuses to release or
// resolve there, and says what to run, and the key stays claimed, its
// withdrawal sending; payoutd ctl releases it, and the withdrawal is
// approved again.
func TestSubmissionsctlRefusesPayoutdsTable(t *testing.T) {
	db := testDatabase(t)
	pool := testPool(t, db)
	a := serve(t, db, newRail(0, 0, 0, 0, 0), 10*time.Second)
	command, hooked, err := mustStore(t, pool).HookedBy(t.Context())
	require.NoError(t, err)
	require.True(t, hooked)
	require.Equal(t, "payoutd ctl", command)

	id := create(t, a, "")
	old := submissions.NewWithStore[Withdrawal](mustStore(t, pool))
	_, err = old.Submit(t.Context(), "k-1", Withdrawal{ID: id, Amount: "25.00", Currency: "USDC", Destination: "0xdest"},
		func(context.Context, Withdrawal) (Withdrawal, error) { return Withdrawal{}, errNoAnswer })
	require.ErrorIs(t, err, submissions.ErrOutcomeUnknown)
	serve(t, db, newRail(0, 0, 0, 0, 0), 10*time.Second) // a start brings the row in line with the claim
	require.Equal(t, stateSending, agree(t, pool, "", id))

	var stdout, stderr bytes.Buffer
	code := ctl.Run(t.Context(), []string{"--database-url", db, "release", "k-1", "--yes", "--force"}, strings.NewReader(""), &stdout, &stderr)
	require.Equal(t, 1, code, "submissionsctl: %s", stderr.String())
	assert.Contains(t, stderr.String(), "run payoutd ctl instead (nothing changed)")
	assert.Equal(t, stateSending, agree(t, pool, "", id), "nothing changed")

	stdout.Reset()
	stderr.Reset()
	code = runCtl(t.Context(), []string{"--database-url", db, "release", "k-1", "--yes", "--force"}, strings.NewReader(""), &stdout, &stderr)
	require.Equal(t, 0, code, "payoutd ctl: %s", stderr.String())
	assert.Equal(t, stateApproved, agree(t, pool, "", id))
}

// payoutd doctor finds the withdrawal that a release past payoutd's hooks
// left sending with no claim (every submit of it refused), says what to do,
// and exits 1; once the row is repaired it finds nothing, and exits 0. It
// changes nothing itself.
func TestDoctorFindsAWithdrawalStrandedInSending(t *testing.T) {
	db := testDatabase(t)
	pool := testPool(t, db)
	a := serve(t, db, newRail(0, 0, 0, 0, 0), 10*time.Second)
	doctor := func() (int, string, string) {
		var stdout, stderr bytes.Buffer
		code := runDoctor(t.Context(), []string{"--database-url", db}, &stdout, &stderr)
		return code, stdout.String(), stderr.String()
	}
	code, stdout, stderr := doctor()
	require.Equal(t, doctorAgree, code, stderr)
	assert.Equal(t, "every withdrawal's state agrees with the ledger\n", stdout)

	id := create(t, a, "acme")
	failed := newRail(0, 0, 0, 1, 0)
	b := serve(t, db, failed, 10*time.Second)
	res := do(t, "POST", b.url+"/withdrawals/"+id+"/submit", "acme", "k-1", "")
	require.Equal(t, http.StatusBadGateway, res.status, "%s", res.body)
	require.Equal(t, stateSending, agree(t, pool, "acme", id))
	// A release past the hooks: the claim goes, the row stays sending.
	tok := tokenOf(t, submissions.NewWithStore[Withdrawal](mustStore(t, pool)).Tenant("acme"), "k-1")
	_, released, err := mustStore(t, pool).Release(t.Context(), "acme", "k-1", tok)
	require.NoError(t, err)
	require.True(t, released)

	code, stdout, stderr = doctor()
	require.Equal(t, doctorFound, code, stderr)
	assert.Equal(t, "withdrawal "+id+` in tenant "acme" is sending, but no key claims it: its claim was released past payoutd's hooks, and every submit of it is refused; look at the rail: if nothing was sent, set its state back to approved; if it was, store the rail's outcome as its state`+"\n", stdout)
	assert.Equal(t, "payoutd doctor: 1 of the withdrawals disagree with the ledger\n", stderr)
	var state string
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT state FROM payoutd_withdrawals WHERE id = $1`, id).Scan(&state))
	assert.Equal(t, stateSending, state, "the doctor changes nothing")

	_, err = pool.Exec(t.Context(), `UPDATE payoutd_withdrawals SET state = 'approved' WHERE id = $1`, id)
	require.NoError(t, err)
	code, _, stderr = doctor()
	require.Equal(t, doctorAgree, code, stderr)

	var out, errOut bytes.Buffer
	assert.Equal(t, doctorUsage, runDoctor(t.Context(), []string{"--database-url", db, "extra"}, &out, &errOut))
	assert.Equal(t, doctorReadFail, runDoctor(t.Context(), []string{"--database-url", "postgres://nobody@127.0.0.1:1/none"}, &out, &errOut))
}
