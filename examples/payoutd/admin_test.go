package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// inFlight returns GET /admin/inflight with query q.
func inFlight(t *testing.T, a *api, q string) []claimView {
	t.Helper()
	res := do(t, "GET", a.url+"/admin/inflight"+q, "-", "-", "")
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	require.Equal(t, "application/json", res.header.Get("Content-Type"))
	var claims []claimView
	require.NoError(t, json.Unmarshal(res.body, &claims), "%s", res.body)
	return claims
}

// stuck creates a withdrawal in tenant and submits it under key to a rail
// that refuses it, which leaves the key in flight; it returns the id.
func stuck(t *testing.T, a *api, f *fates, tenant, key string) string {
	t.Helper()
	id := create(t, a, tenant)
	f.set(id, refuse)
	res := do(t, "POST", a.url+"/withdrawals/"+id+"/submit", tenant, key, "")
	require.Equal(t, http.StatusBadGateway, res.status, "%s", res.body)
	return id
}

func TestAdminEndpoints(t *testing.T) {
	forEachStore(t, func(t *testing.T, db string) {
		var f fates
		r := newRail(0, 0, 0)
		r.decide = f.decide
		a := serve(t, db, r, 10*time.Second)
		id1 := stuck(t, a, &f, "", "k1")
		time.Sleep(5 * time.Millisecond) // the claims in order
		id2 := stuck(t, a, &f, "acme", "k2")

		t.Run("list", func(t *testing.T) {
			claims := inFlight(t, a, "")
			require.Len(t, claims, 2)
			assert.Equal(t, "", claims[0].Tenant)
			assert.Equal(t, "k1", claims[0].Key)
			assert.Equal(t, id1, claims[0].WithdrawalID)
			assert.Equal(t, "25", claims[0].Amount)
			assert.Equal(t, "USDC", claims[0].Currency)
			assert.Equal(t, "0xdest", claims[0].Destination)
			assert.NotZero(t, claims[0].Token)
			assert.False(t, claims[0].Sending)
			assert.WithinDuration(t, time.Now(), claims[0].ClaimedAt, time.Minute)
			assert.Equal(t, "acme", claims[1].Tenant)
			assert.Equal(t, id2, claims[1].WithdrawalID)

			claims = inFlight(t, a, "?tenant=acme")
			require.Len(t, claims, 1)
			assert.Equal(t, "k2", claims[0].Key)
			claims = inFlight(t, a, "?tenant=")
			require.Len(t, claims, 1)
			assert.Equal(t, "k1", claims[0].Key)
			assert.Empty(t, inFlight(t, a, "?older_than=1h"))
			assert.Len(t, inFlight(t, a, "?older_than=1ms&limit=1"), 1)

			for _, q := range []string{"?older_than=soon", "?older_than=-1m", "?limit=0", "?limit=1001", "?tenant=%00"} {
				res := do(t, "GET", a.url+"/admin/inflight"+q, "-", "-", "")
				assert.Equal(t, http.StatusBadRequest, res.status, "%s: %s", q, res.body)
				res.problem(t)
			}
		})

		t.Run("resolve", func(t *testing.T) {
			sent := Withdrawal{ID: id1, Amount: "25.00", Currency: "USDC", Destination: "0xdest", State: stateSent, Tx: "tx_seen_by_the_operator"}
			body, err := json.Marshal(sent)
			require.NoError(t, err)

			other := sent
			other.ID = id2
			wrong, err := json.Marshal(other)
			require.NoError(t, err)
			res := do(t, "POST", a.url+"/admin/claims/k1/resolve", "-", "-", string(wrong))
			assert.Equal(t, http.StatusConflict, res.status, "another withdrawal: %s", res.body)
			assert.Contains(t, res.problem(t)["detail"], "belongs to another withdrawal")

			res = do(t, "POST", a.url+"/admin/claims/k1/resolve", "-", "-", string(body))
			require.Equal(t, http.StatusOK, res.status, "%s", res.body)
			var got struct {
				Resolved claimView  `json:"resolved"`
				Outcome  Withdrawal `json:"outcome"`
			}
			require.NoError(t, json.Unmarshal(res.body, &got))
			assert.Equal(t, "k1", got.Resolved.Key)
			assert.Equal(t, sent, got.Outcome)

			res = do(t, "POST", a.url+"/withdrawals/"+id1+"/submit", "-", "k1", "")
			require.Equal(t, http.StatusCreated, res.status, "%s", res.body)
			assert.Equal(t, "true", res.header.Get("Idempotent-Replayed"))
			assert.JSONEq(t, string(body), string(res.body), "a retry replays the operator's outcome")
			assert.Zero(t, r.Sends()[id1], "nothing sent")

			res = do(t, "POST", a.url+"/admin/claims/k1/resolve", "-", "-", string(body))
			assert.Equal(t, http.StatusNotFound, res.status, "no claim in flight any more: %s", res.body)
			res.problem(t)
		})

		t.Run("release", func(t *testing.T) {
			res := do(t, "POST", a.url+"/admin/claims/k2/release", "-", "-", "")
			assert.Equal(t, http.StatusNotFound, res.status, "another tenant's key: %s", res.body)

			token := inFlight(t, a, "?tenant=acme")[0].Token
			res = do(t, "POST", a.url+fmt.Sprintf("/admin/claims/k2/release?token=%d", token+1), "acme", "-", "")
			assert.Equal(t, http.StatusConflict, res.status, "another token: %s", res.body)
			assert.Contains(t, res.problem(t)["detail"], "claim changed")

			res = do(t, "POST", a.url+fmt.Sprintf("/admin/claims/k2/release?token=%d", token), "acme", "-", "")
			require.Equal(t, http.StatusOK, res.status, "%s", res.body)
			var got struct {
				Released claimView `json:"released"`
			}
			require.NoError(t, json.Unmarshal(res.body, &got))
			assert.Equal(t, token, got.Released.Token)

			f.set(id2, answer)
			res = do(t, "POST", a.url+"/withdrawals/"+id2+"/submit", "acme", "k2-again", "")
			require.Equal(t, http.StatusCreated, res.status, "the withdrawal is free again: %s", res.body)
			assert.Equal(t, 1, r.Sends()[id2])
			assert.Empty(t, inFlight(t, a, ""))
		})

		t.Run("a claim taken again is left alone", func(t *testing.T) {
			id := stuck(t, a, &f, "", "k3")
			old := inFlight(t, a, "")[0].Token
			res := do(t, "POST", a.url+"/admin/claims/k3/release", "-", "-", "")
			require.Equal(t, http.StatusOK, res.status, "%s", res.body)
			res = do(t, "POST", a.url+"/withdrawals/"+id+"/submit", "-", "k3", "")
			require.Equal(t, http.StatusBadGateway, res.status, "claimed again: %s", res.body)

			res = do(t, "POST", a.url+fmt.Sprintf("/admin/claims/k3/resolve?token=%d", old), "-", "-",
				fmt.Sprintf(`{"id":%q,"amount":"25.00","currency":"USDC","destination":"0xdest","state":"sent","tx":"tx_1"}`, id))
			assert.Equal(t, http.StatusConflict, res.status, "%s", res.body)
			res = do(t, "POST", a.url+fmt.Sprintf("/admin/claims/k3/release?token=%d", old), "-", "-", "")
			assert.Equal(t, http.StatusConflict, res.status, "%s", res.body)
			claims := inFlight(t, a, "")
			require.Len(t, claims, 1, "the new claim stands")
			assert.NotEqual(t, old, claims[0].Token)
		})
	})
}

func TestAdminPrune(t *testing.T) {
	forEachStore(t, func(t *testing.T, db string) {
		r := newRail(0, 0, 0)
		a := serve(t, db, r, 10*time.Second)
		id := create(t, a, "acme")
		res := do(t, "POST", a.url+"/withdrawals/"+id+"/submit", "acme", "k1", "")
		require.Equal(t, http.StatusCreated, res.status, "%s", res.body)

		res = do(t, "POST", a.url+"/admin/prune?before=1h", "-", "-", "")
		require.Equal(t, http.StatusOK, res.status, "%s", res.body)
		assert.Contains(t, string(res.body), `"pruned":0`, "nothing settled an hour ago")
		res = do(t, "POST", a.url+"/admin/prune?before="+time.Now().Add(time.Minute).UTC().Format(time.RFC3339), "-", "-", "")
		require.Equal(t, http.StatusOK, res.status, "%s", res.body)
		assert.Contains(t, string(res.body), `"pruned":1`)

		res = do(t, "POST", a.url+"/withdrawals/"+id+"/submit", "acme", "k1", "")
		assert.Equal(t, http.StatusGone, res.status, "a retry of the pruned key: %s", res.body)
		res = do(t, "POST", a.url+"/withdrawals/"+id+"/submit", "acme", "k2", "")
		assert.Equal(t, http.StatusConflict, res.status, "another key for the pruned withdrawal: %s", res.body)
		assert.Contains(t, string(res.body), `"holder":"k1"`)
		assert.Equal(t, map[string]int{id: 1}, r.Sends(), "sent once")

		for _, q := range []string{"", "?before=yesterday", "?before=-1h"} {
			res = do(t, "POST", a.url+"/admin/prune"+q, "-", "-", "")
			assert.Equal(t, http.StatusBadRequest, res.status, "%q: %s", q, res.body)
		}
	})
}
