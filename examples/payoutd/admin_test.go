package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemledger/submissions"
	"github.com/idemledger/submissions/idemhttp"
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
// that fails it without saying whether money moved, which leaves the key in
// flight; it returns the id.
func stuck(t *testing.T, a *api, f *fates, tenant, key string) string {
	t.Helper()
	id := create(t, a, tenant)
	f.set(id, fail)
	res := do(t, "POST", a.url+"/withdrawals/"+id+"/submit", tenant, key, "")
	require.Equal(t, http.StatusBadGateway, res.status, "%s", res.body)
	return id
}

func TestAdminEndpoints(t *testing.T) {
	forEachStore(t, func(t *testing.T, db string) {
		var f fates
		r := newRail(0, 0, 0, 0, 0)
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
			require.NotNil(t, claims[0].ClaimedAt)
			assert.WithinDuration(t, time.Now(), *claims[0].ClaimedAt, time.Minute)
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

			for q, typ := range map[string]string{"?older_than=soon": typeMalformed, "?older_than=-1m": typeMalformed,
				"?limit=0": typeMalformed, "?limit=1001": typeMalformed, "?tenant=%00": idemhttp.TypeInvalidTenant} {
				do(t, "GET", a.url+"/admin/inflight"+q, "-", "-", "").problemOf(t, http.StatusBadRequest, typ)
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
			p := res.problemOf(t, http.StatusConflict, "urn:payoutd:problem:other-withdrawal")
			assert.Equal(t, fmt.Sprintf("the outcome is for withdrawal %q, not the claim's %q: nothing changed", id2, id1), p["detail"])
			assert.Equal(t, "refused", p["decision"])
			assert.NotEmpty(t, p["next"], "what to do next")

			// Refused like a client's request, and the claim stays in flight.
			for _, c := range []struct {
				name, body, typ, inDetail string
			}{
				{"no state", fmt.Sprintf(`{"id":%q,"amount":"25.00","currency":"USDC","destination":"0xdest","tx":"tx_1"}`, id1),
					typeInvalidOutcome, `state "" is not an outcome`},
				{"approved", fmt.Sprintf(`{"id":%q,"amount":"25.00","currency":"USDC","destination":"0xdest","state":"approved"}`, id1),
					typeInvalidOutcome, `state "approved" is not an outcome`},
				{"in flight", fmt.Sprintf(`{"id":%q,"amount":"25.00","currency":"USDC","destination":"0xdest","state":"in_flight","tx":"tx_1"}`, id1),
					typeInvalidOutcome, `state "in_flight" is not an outcome`},
				{"sent without tx", fmt.Sprintf(`{"id":%q,"amount":"25.00","currency":"USDC","destination":"0xdest","state":"sent"}`, id1),
					typeInvalidOutcome, "without its tx"},
				{"failed without reason", fmt.Sprintf(`{"id":%q,"amount":"25.00","currency":"USDC","destination":"0xdest","state":"failed"}`, id1),
					typeInvalidOutcome, "without its failure_reason"},
				{"invalid amount", fmt.Sprintf(`{"id":%q,"amount":"-25","currency":"USDC","destination":"0xdest","state":"sent","tx":"tx_1"}`, id1),
					typeInvalidOutcome, "the outcome is not valid: invalid fingerprint: Amount: "},
				{"no id", `{"amount":"25.00","currency":"USDC","destination":"0xdest","state":"sent","tx":"tx_1"}`,
					typeInvalidOutcome, "the outcome is not valid: invalid fingerprint: WithdrawalID: "},
				{"amount a JSON number", fmt.Sprintf(`{"id":%q,"amount":25,"currency":"USDC","destination":"0xdest","state":"sent","tx":"tx_1"}`, id1),
					idemhttp.TypeInvalidFingerprint, "amount: not a JSON string"},
				{"malformed", `{"id":`, typeMalformed, "Malformed JSON"},
			} {
				res := do(t, "POST", a.url+"/admin/claims/k1/resolve", "-", "-", c.body)
				p := res.problemOf(t, map[string]int{typeInvalidOutcome: 422, idemhttp.TypeInvalidFingerprint: 422, typeMalformed: 400}[c.typ], c.typ)
				assert.Contains(t, p["detail"], c.inDetail, c.name)
			}
			require.Len(t, inFlight(t, a, "?tenant="), 1, "every refusal left the claim in flight")

			res = do(t, "POST", a.url+"/admin/claims/k1/resolve", "-", "-", string(body))
			require.Equal(t, http.StatusOK, res.status, "%s", res.body)
			var got resultView
			require.NoError(t, json.Unmarshal(res.body, &got))
			assert.Equal(t, "changed", got.Decision)
			require.NotNil(t, got.Claim)
			assert.Equal(t, "k1", got.Claim.Key)
			assert.Regexp(t, `^resolved request key k1 in the default tenant \(token \d+\): its retries get this outcome$`, got.Message)
			require.NotNil(t, got.Outcome)
			assert.Equal(t, sent, *got.Outcome)

			res = do(t, "POST", a.url+"/withdrawals/"+id1+"/submit", "-", "k1", "")
			require.Equal(t, http.StatusCreated, res.status, "%s", res.body)
			assert.Equal(t, "true", res.header.Get("Idempotent-Replayed"))
			assert.JSONEq(t, string(body), string(res.body), "a retry replays the operator's outcome")
			assert.Zero(t, r.Sends()[id1], "nothing sent")

			res = do(t, "POST", a.url+"/admin/claims/k1/resolve", "-", "-", string(body))
			require.Equal(t, http.StatusOK, res.status, "the same outcome again: %s", res.body)
			require.NoError(t, json.Unmarshal(res.body, &got))
			assert.Equal(t, "unchanged", got.Decision)
			assert.Equal(t, "request key k1 in the default tenant already has this outcome: nothing changed", got.Message)

			sent.Tx = "tx_other"
			another, err := json.Marshal(sent)
			require.NoError(t, err)
			res = do(t, "POST", a.url+"/admin/claims/k1/resolve", "-", "-", string(another))
			p = res.problemOf(t, http.StatusConflict, "urn:payoutd:problem:another-outcome")
			assert.Equal(t, "request key k1 has another outcome: nothing changed (an outcome is never replaced)", p["detail"],
				"another outcome of a done key reaches its 409")
		})

		t.Run("release", func(t *testing.T) {
			res := do(t, "POST", a.url+"/admin/claims/k2/release", "-", "-", "")
			assert.Equal(t, http.StatusNotFound, res.status, "another tenant's key: %s", res.body)
			assert.Contains(t, string(res.body), `"rule":"unknown-key"`)
			assert.Contains(t, string(res.body), "request key k2 has no record in the default tenant (never claimed there, or released): nothing changed")
			assert.Len(t, inFlight(t, a, "?tenant=acme"), 1, "the other tenant's claim stands")

			token := inFlight(t, a, "?tenant=acme")[0].Token
			res = do(t, "POST", a.url+fmt.Sprintf("/admin/claims/k2/release?token=%d", token+1), "acme", "-", "")
			assert.Equal(t, fmt.Sprintf("request key k2's claim is token %d, not %d: nothing changed", token, token+1),
				res.problemOf(t, http.StatusConflict, "urn:payoutd:problem:token-differs")["detail"])

			res = do(t, "POST", a.url+fmt.Sprintf("/admin/claims/k2/release?token=%d", token), "acme", "-", "")
			require.Equal(t, http.StatusOK, res.status, "%s", res.body)
			var got resultView
			require.NoError(t, json.Unmarshal(res.body, &got))
			require.NotNil(t, got.Claim)
			assert.Equal(t, token, got.Claim.Token)
			assert.Equal(t, "changed", got.Decision)

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
		r := newRail(0, 0, 0, 0, 0)
		a := serve(t, db, r, 10*time.Second)
		id := create(t, a, "acme")
		res := do(t, "POST", a.url+"/withdrawals/"+id+"/submit", "acme", "k1", "")
		require.Equal(t, http.StatusCreated, res.status, "%s", res.body)
		prune := func(q string) response { return do(t, "POST", a.url+"/admin/prune"+q, "-", "-", "") }
		future := url.QueryEscape(time.Now().Add(time.Minute).UTC().Format(time.RFC3339))

		t.Run("refusals", func(t *testing.T) {
			for q, c := range map[string]struct {
				inDetail string
				advice   bool // force=true would prune
			}{
				"?before=1h":                        {"later than the minimum retention, 24h0m0s, ago", true},
				"?before=1h&force=false":            {"later than the minimum retention, 24h0m0s, ago", true},
				"?before=" + future:                 {"in the future", false},
				"?before=" + future + "&force=true": {"in the future", false},
			} {
				p := prune(q).problemOf(t, http.StatusUnprocessableEntity, typeHorizonTooRecent)
				assert.Contains(t, p["detail"], c.inDetail, q)
				assert.Contains(t, p["detail"], "nothing pruned", q)
				if c.advice {
					assert.Contains(t, p["detail"], "force=true prunes within the minimum retention", q)
				} else {
					assert.NotContains(t, p["detail"], "force=true", "%s: no advice that would not help", q)
				}
			}
			for _, q := range []string{"", "?before=yesterday", "?before=-1h", "?before=48h&force=yes"} {
				prune(q).problemOf(t, http.StatusBadRequest, typeMalformed)
			}
			res := do(t, "POST", a.url+"/withdrawals/"+id+"/submit", "acme", "k1", "")
			assert.Equal(t, http.StatusCreated, res.status, "nothing pruned: %s", res.body)
		})

		res = prune("?before=48h")
		require.Equal(t, http.StatusOK, res.status, "%s", res.body)
		assert.Contains(t, string(res.body), `"pruned":0`, "nothing settled two days ago")
		res = prune("?force=true&before=" + url.QueryEscape(time.Now().UTC().Format(time.RFC3339Nano)))
		require.Equal(t, http.StatusOK, res.status, "%s", res.body)
		assert.Contains(t, string(res.body), `"pruned":1`)

		res = do(t, "POST", a.url+"/withdrawals/"+id+"/submit", "acme", "k1", "")
		p := res.problemOf(t, http.StatusGone, idemhttp.TypeKeyPruned)
		assert.Contains(t, p["detail"], "no longer kept")
		assert.NotContains(t, strings.ToLower(p["detail"].(string)), "nothing was sent")
		res = do(t, "POST", a.url+"/withdrawals/"+id+"/submit", "acme", "k2", "")
		assert.Equal(t, "k1", res.problemOf(t, http.StatusConflict, idemhttp.TypeWithdrawalClaimed)["holder"])
		assert.Equal(t, map[string]int{id: 1}, r.Sends(), "sent once")
	})
}

// GET of a withdrawal whose outcome the ledger pruned answers from payoutd's
// own store: sent with its tx, failed with its reason, or resolved by an
// operator; a retry of the pruned key stays 410.
func TestGetAfterPrune(t *testing.T) {
	forEachStore(t, func(t *testing.T, db string) {
		var f fates
		r := newRail(0, 0, 0, 0, 0)
		r.decide = f.decide
		a := serve(t, db, r, 10*time.Second)

		sent := create(t, a, "")
		res := do(t, "POST", a.url+"/withdrawals/"+sent+"/submit", "-", "k-sent", "")
		require.Equal(t, http.StatusCreated, res.status, "%s", res.body)
		wantSent := res.withdrawal(t).Withdrawal

		declined := create(t, a, "")
		f.set(declined, decline)
		res = do(t, "POST", a.url+"/withdrawals/"+declined+"/submit", "-", "k-declined", "")
		require.Equal(t, http.StatusCreated, res.status, "%s", res.body)
		wantDeclined := res.withdrawal(t).Withdrawal
		require.Equal(t, stateFailed, wantDeclined.State)

		resolved := stuck(t, a, &f, "", "k-resolved")
		wantResolved := Withdrawal{ID: resolved, Amount: "25.00", Currency: "USDC", Destination: "0xdest", State: stateSent, Tx: "tx_seen_by_the_operator"}
		spelled := wantResolved
		spelled.Amount, spelled.Currency = "25.0", "usdc" // the same withdrawal, as an operator may type it
		body, err := json.Marshal(spelled)
		require.NoError(t, err)
		res = do(t, "POST", a.url+"/admin/claims/k-resolved/resolve", "-", "-", string(body))
		require.Equal(t, http.StatusOK, res.status, "%s", res.body)
		assert.Equal(t, wantResolved, do(t, "GET", a.url+"/withdrawals/"+resolved, "-", "-", "").withdrawal(t).Withdrawal,
			"the withdrawal as created, with the operator's outcome: before the prune as after it")

		// Resolved past payoutd's API, through the library: in memory kept
		// once a GET reads it, and unknown if the ledger prunes it first; on
		// PostgreSQL stored by the Resolve's own transaction (the hooks).
		ledger := a.srv.ledger.Tenant("")
		outside := create(t, a, "")
		wantOutside := Withdrawal{ID: outside, Amount: "25.00", Currency: "USDC", Destination: "0xdest", State: stateSent, Tx: "tx_outside"}
		require.NoError(t, ledger.Resolve(t.Context(), "k-outside", wantOutside))
		assert.Equal(t, wantOutside, do(t, "GET", a.url+"/withdrawals/"+outside, "-", "-", "").withdrawal(t).Withdrawal)
		unread := create(t, a, "")
		require.NoError(t, ledger.Resolve(t.Context(), "k-unread", Withdrawal{ID: unread, Amount: "25.00", Currency: "USDC",
			Destination: "0xdest", State: stateSent, Tx: "tx_unread"}))

		res = do(t, "POST", a.url+"/admin/prune?force=true&before="+url.QueryEscape(time.Now().UTC().Format(time.RFC3339Nano)), "-", "-", "")
		require.Equal(t, http.StatusOK, res.status, "%s", res.body)
		require.Contains(t, string(res.body), `"pruned":5`)

		wantUnread := Withdrawal{ID: unread, Amount: "25.00", Currency: "USDC", Destination: "0xdest", State: stateUnknown}
		if db != "" { // the Resolve's transaction stored its state: never unknown
			wantUnread.State, wantUnread.Tx = stateSent, "tx_unread"
		}
		for key, want := range map[string]Withdrawal{"k-sent": wantSent, "k-declined": wantDeclined, "k-resolved": wantResolved,
			"k-outside": wantOutside, "k-unread": wantUnread} {
			got := do(t, "GET", a.url+"/withdrawals/"+want.ID, "-", "-", "").withdrawal(t)
			assert.Equal(t, want, got.Withdrawal, key)
			assert.Equal(t, ptr(key), got.ClaimedBy, key)

			res := do(t, "POST", a.url+"/withdrawals/"+want.ID+"/submit", "-", key, "")
			res.problemOf(t, http.StatusGone, idemhttp.TypeKeyPruned)
		}
		assert.Equal(t, map[string]int{sent: 1}, r.Sends())
	})
}

// An operator who releases the key of a withdrawal whose money moved is
// wrong, but the rail deduplicates on the ledger's rail key: the retry, under
// the same key or a new one, gets the first transfer back, and the money
// moved once.
func TestWrongReleaseMovesMoneyOnce(t *testing.T) {
	forEachStore(t, func(t *testing.T, db string) {
		var f fates
		r := newRail(0, 0, 0, 0, 0)
		r.decide = f.decide
		a := serve(t, db, r, 200*time.Millisecond)

		for _, c := range []struct{ name, key, retry string }{{"the same key", "a1", "a1"}, {"a new key", "b1", "b2"}} {
			t.Run(c.name, func(t *testing.T) {
				id := create(t, a, "acme")
				f.set(id, hang) // moves the money, never answers
				res := do(t, "POST", a.url+"/withdrawals/"+id+"/submit", "acme", c.key, "")
				res.problemOf(t, http.StatusBadGateway, idemhttp.TypeOutcomeUnknown)
				require.Equal(t, 1, r.Sends()[id], "the money moved")

				res = do(t, "POST", a.url+"/admin/claims/"+c.key+"/release", "acme", "-", "")
				require.Equal(t, http.StatusOK, res.status, "the operator's mistake: %s", res.body)

				f.set(id, answer)
				res = do(t, "POST", a.url+"/withdrawals/"+id+"/submit", "acme", c.retry, "")
				require.Equal(t, http.StatusCreated, res.status, "%s", res.body)
				w := res.withdrawal(t)
				assert.Equal(t, stateSent, w.State)
				r.mu.Lock()
				first := r.transfers[submissions.RailKey("acme", id)]
				r.mu.Unlock()
				assert.Equal(t, first.Tx, w.Tx, "the first transfer")
				assert.Equal(t, 1, r.Sends()[id], "the money moved once")
				assert.Equal(t, 1, railSends(t, a.url)[id])
			})
		}
	})
}

// A query parameter that a door does not take, misspelled or repeated, is a
// 400 that names it, and the request changes nothing: ?tokn=999 does not
// release the current claim, older-than=10h does not list every key, and a
// create does not create.
func TestUnknownQueryParametersAreRefused(t *testing.T) {
	forEachStore(t, func(t *testing.T, db string) {
		var f fates
		r := newRail(0, 0, 0, 0, 0)
		r.decide = f.decide
		a := serve(t, db, r, 10*time.Second)
		id := create(t, a, "")
		res := do(t, "POST", a.url+"/withdrawals/"+id+"/submit", "-", "k1", "")
		require.Equal(t, http.StatusCreated, res.status, "%s", res.body)
		stuck := create(t, a, "")
		f.set(stuck, fail)
		res = do(t, "POST", a.url+"/withdrawals/"+stuck+"/submit", "-", "k2", "")
		require.Equal(t, http.StatusBadGateway, res.status, "%s", res.body)
		for _, c := range []struct{ method, path, name string }{
			{"POST", "/admin/claims/k2/release?tokn=999", `"tokn" (known here: token, force)`},
			{"POST", "/admin/claims/k2/release?forse=true", `"forse"`},
			{"POST", "/admin/claims/k2/release?token=1&token=2", `"token" is repeated`},
			{"POST", "/admin/claims/k2/resolve?forse=true", `"forse"`},
			{"GET", "/admin/inflight?older-than=10h", `"older-than" (known here: older_than, tenant, limit)`},
			{"POST", "/admin/prune?befor=720h", `"befor"`},
			{"POST", "/withdrawals?amount=5", `Unknown query parameter "amount"; this request changed nothing.`},
			{"GET", "/withdrawals/" + id + "?x=1", `"x"`},
			{"POST", "/withdrawals/" + id + "/submit?x=1", `"x"`},
			{"POST", "/admin/claims/k1/release?%zz", "not valid URL encoding"},
		} {
			res := do(t, c.method, a.url+c.path, "-", "-", `{"amount":"25.00","currency":"USDC","destination":"0xdest"}`)
			p := res.problemOf(t, http.StatusBadRequest, typeMalformed)
			assert.Contains(t, p["detail"], c.name, "%s %s", c.method, c.path)
		}
		claims := inFlight(t, a, "")
		require.Len(t, claims, 1, "k2 stays claimed")
		assert.Equal(t, "k2", claims[0].Key)
	})
}

// The log line after a submit whose outcome was not recorded tells the
// operator what is left to do with the key: nothing to resolve when it was
// released or resolved meanwhile, never a release when the rail answered.
func TestUnrecordedAdviceFitsTheKeysState(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("%w: %w", submissions.ErrOutcomeNotRecorded, submissions.ErrReleasedMeanwhile), "after the key was released"},
		{fmt.Errorf("%w: %w", submissions.ErrOutcomeNotRecorded, submissions.ErrResolvedMeanwhile), "otherwise than the outcome recorded meanwhile"},
		{submissions.ErrOutcomeNotRecorded, "do not release the key"},
		{submissions.ErrOutcomeUnknown, "resolve or release the key"},
	} {
		assert.Contains(t, unrecordedAdvice(c.err), c.want, "%v", c.err)
	}
	assert.NotContains(t, unrecordedAdvice(fmt.Errorf("%w: %w", submissions.ErrOutcomeNotRecorded, submissions.ErrReleasedMeanwhile)), "resolve")
}
