package main

import (
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A table of withdrawals made by a payoutd from before the state columns
// gets them at start: its rows read as approved, and are sent and kept as
// any other.
func TestWithdrawalsTableFromBefore(t *testing.T) {
	db := testDatabase(t)
	pool := testPool(t, db)
	_, err := pool.Exec(t.Context(), `CREATE TABLE payoutd_withdrawals (
    id          text        PRIMARY KEY,
    tenant      text        NOT NULL,
    amount      text        NOT NULL,
    currency    text        NOT NULL,
    destination text        NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
)`)
	require.NoError(t, err)
	const id = "wd_from_before"
	_, err = pool.Exec(t.Context(), `INSERT INTO payoutd_withdrawals (id, tenant, amount, currency, destination)
VALUES ($1, '', '25.00', 'USDC', '0xdest')`, id)
	require.NoError(t, err)

	a := serve(t, db, newRail(0, 0, 0, 0, 0), 10*time.Second)
	w := do(t, "GET", a.url+"/withdrawals/"+id, "-", "-", "").withdrawal(t)
	assert.Equal(t, Withdrawal{ID: id, Amount: "25.00", Currency: "USDC", Destination: "0xdest", State: stateApproved}, w.Withdrawal)

	res := do(t, "POST", a.url+"/withdrawals/"+id+"/submit", "-", "k1", "")
	require.Equal(t, http.StatusCreated, res.status, "%s", res.body)
	sent := res.withdrawal(t).Withdrawal
	res = do(t, "POST", a.url+"/admin/prune?force=true&before="+url.QueryEscape(time.Now().UTC().Format(time.RFC3339Nano)), "-", "-", "")
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	require.Contains(t, string(res.body), `"pruned":1`, "the ledger's record is gone")
	assert.Equal(t, http.StatusGone, do(t, "POST", a.url+"/withdrawals/"+id+"/submit", "-", "k1", "").status, "a retry of the pruned key")
	assert.Equal(t, sent, do(t, "GET", a.url+"/withdrawals/"+id, "-", "-", "").withdrawal(t).Withdrawal, "GET, from payoutd's own store")
}
