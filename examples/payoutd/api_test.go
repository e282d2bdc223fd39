package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemledger/submissions/idemhttp"
)

// TestDoubleTapWaitsForTheOutcome: with -wait, the taps that find the key in
// flight wait for the send's outcome and get it as a replay: every tap a 201
// with the same body, one send.
func TestDoubleTapWaitsForTheOutcome(t *testing.T) {
	forEachStore(t, func(t *testing.T, db string) {
		a := serveWaiting(t, db, newRail(50*time.Millisecond, 0, 0, 0, 0), 10*time.Second, 10*time.Second)
		ids := []string{create(t, a, ""), create(t, a, "")}
		got := taps(t, []string{a.url}, "", keyPer("tap-"), ids, 32)
		for _, id := range ids {
			checkTaps(t, id, got[id])
			for _, res := range got[id] {
				assert.Equal(t, http.StatusCreated, res.status, "every tap waits for the outcome: %s", res.body)
			}
			assert.Equal(t, 1, a.rail.Sends()[id])
		}
	})
}

func TestDoubleTapSendsOnce(t *testing.T) {
	forEachStore(t, func(t *testing.T, db string) {
		a := serve(t, db, newRail(50*time.Millisecond, 0, 0, 0, 0), 10*time.Second)
		ids := []string{create(t, a, ""), create(t, a, ""), create(t, a, "")}

		got := taps(t, []string{a.url}, "", keyPer("tap-"), ids, 32)

		want := map[string]int{}
		conflicts := 0
		for _, id := range ids {
			want[id] = 1
			sent := checkTaps(t, id, got[id])
			for _, res := range got[id] {
				if res.status == http.StatusConflict {
					conflicts++
				}
			}

			res := do(t, "POST", a.url+"/withdrawals/"+id+"/submit", "-", "tap-"+id, "")
			assert.Equal(t, http.StatusCreated, res.status)
			assert.Equal(t, "true", res.header.Get("Idempotent-Replayed"))
			assert.Equal(t, string(sent), string(res.body), "a replay after the taps")

			w := do(t, "GET", a.url+"/withdrawals/"+id, "-", "-", "").withdrawal(t)
			assert.Equal(t, ptr("tap-"+id), w.ClaimedBy)
			body, err := json.Marshal(w.Withdrawal)
			require.NoError(t, err)
			assert.JSONEq(t, string(sent), string(body), "GET shows the withdrawal as sent")
		}
		assert.Equal(t, want, a.rail.Sends(), "the rail's own count")
		assert.Equal(t, want, railSends(t, a.url), "GET /rail/sends")
		assert.Positive(t, conflicts, "without -wait, taps during the send get 409")
	})
}

func TestSecondKeyGetsHolder(t *testing.T) {
	forEachStore(t, func(t *testing.T, db string) {
		a := serve(t, db, newRail(50*time.Millisecond, 0, 0, 0, 0), 10*time.Second)

		t.Run("after the send", func(t *testing.T) {
			id := create(t, a, "")
			res := do(t, "POST", a.url+"/withdrawals/"+id+"/submit", "-", "key-a", "")
			require.Equal(t, http.StatusCreated, res.status, "%s", res.body)

			res = do(t, "POST", a.url+"/withdrawals/"+id+"/submit", "-", "key-b", "")
			require.Equal(t, http.StatusConflict, res.status, "%s", res.body)
			p := res.problem(t)
			assert.Equal(t, "key-a", p["holder"])
			assert.Equal(t, 1, a.rail.Sends()[id])
		})

		t.Run("at once", func(t *testing.T) {
			id := create(t, a, "")
			got := taps(t, []string{a.url}, "", func(_ string, i int) string { return fmt.Sprintf("key-%d", i) }, []string{id}, 32)

			var winners []string
			var holders []any
			for _, res := range got[id] {
				switch res.status {
				case http.StatusCreated:
					assert.Empty(t, res.header.Values("Idempotent-Replayed"))
					winners = append(winners, res.key)
				case http.StatusConflict:
					holders = append(holders, res.problem(t)["holder"])
				default:
					t.Errorf("status %d: %s", res.status, res.body)
				}
			}
			require.Len(t, winners, 1, "one key sends")
			assert.Len(t, holders, 31)
			for _, h := range holders {
				assert.Equal(t, winners[0], h, "every other key is told the holder")
			}
			assert.Equal(t, 1, a.rail.Sends()[id])
			w := do(t, "GET", a.url+"/withdrawals/"+id, "-", "-", "").withdrawal(t)
			assert.Equal(t, ptr(winners[0]), w.ClaimedBy)
		})
	})
}

func TestKeyReusedForAnotherWithdrawal(t *testing.T) {
	forEachStore(t, func(t *testing.T, db string) {
		a := serve(t, db, newRail(0, 0, 0, 0, 0), 10*time.Second)
		first, second := create(t, a, ""), create(t, a, "")
		res := do(t, "POST", a.url+"/withdrawals/"+first+"/submit", "-", "k", "")
		require.Equal(t, http.StatusCreated, res.status, "%s", res.body)

		res = do(t, "POST", a.url+"/withdrawals/"+second+"/submit", "-", "k", "")
		require.Equal(t, http.StatusUnprocessableEntity, res.status, "%s", res.body)
		p := res.problem(t)
		assert.NotContains(t, p, "holder")

		w := do(t, "GET", a.url+"/withdrawals/"+second, "-", "-", "").withdrawal(t)
		assert.Equal(t, stateApproved, w.State)
		assert.Nil(t, w.ClaimedBy)
		assert.Contains(t, string(do(t, "GET", a.url+"/withdrawals/"+second, "-", "-", "").body), `"claimed_by":null`)
		assert.Equal(t, map[string]int{first: 1}, railSends(t, a.url))
	})
}

func TestTenantsAreApart(t *testing.T) {
	forEachStore(t, func(t *testing.T, db string) {
		a := serve(t, db, newRail(20*time.Millisecond, 0, 0, 0, 0), 10*time.Second)
		tenants := []string{"acme", "globex", ""} // "" is the default tenant
		ids := map[string]string{}
		for _, tenant := range tenants {
			ids[tenant] = create(t, a, tenant)
		}

		// The same key in every tenant: each tenant's withdrawal is sent,
		// once; none replays another tenant's outcome.
		want := map[string]int{}
		for _, tenant := range tenants {
			id := ids[tenant]
			got := taps(t, []string{a.url}, tenant, sameKey("k1"), []string{id}, 8)
			checkTaps(t, id, got[id])
			want[id] = 1
		}
		assert.Equal(t, want, railSends(t, a.url))

		for _, owner := range tenants {
			id := ids[owner]
			w := do(t, "GET", a.url+"/withdrawals/"+id, owner, "-", "").withdrawal(t)
			assert.Equal(t, stateSent, w.State)
			assert.Equal(t, ptr("k1"), w.ClaimedBy)
			for _, other := range tenants {
				if other == owner {
					continue
				}
				res := do(t, "GET", a.url+"/withdrawals/"+id, other, "-", "")
				assert.Equal(t, http.StatusNotFound, res.status, "tenant %q reads %q's withdrawal: %s", other, owner, res.body)
				res.problem(t)
				for _, key := range []string{"k1", "k2"} {
					res := do(t, "POST", a.url+"/withdrawals/"+id+"/submit", other, key, "")
					assert.Equal(t, http.StatusNotFound, res.status, "tenant %q submits %q's withdrawal: %s", other, owner, res.body)
					res.problem(t)
				}
			}
		}
		res := do(t, "GET", a.url+"/withdrawals/"+ids[""], "-", "-", "")
		assert.Equal(t, http.StatusOK, res.status, "no X-Tenant header is the default tenant")
		assert.Equal(t, want, railSends(t, a.url))
	})
}

func TestRailWithoutAnswer(t *testing.T) {
	forEachStore(t, func(t *testing.T, db string) {
		var f fates
		r := newRail(0, 0, 0, 0, 0)
		r.decide = f.decide
		const sendTimeout = 300 * time.Millisecond
		a := serve(t, db, r, sendTimeout)

		for _, c := range []struct {
			name  string
			fate  fate
			sends int // what the rail moved
		}{
			{"timeout", hang, 1},
			{"failure", fail, 0},
		} {
			t.Run(c.name, func(t *testing.T) {
				id := create(t, a, "")
				f.set(id, c.fate)
				start := time.Now()
				res := do(t, "POST", a.url+"/withdrawals/"+id+"/submit", "-", "k-"+c.name, "")
				require.Equal(t, http.StatusBadGateway, res.status, "%s", res.body)
				res.problem(t)
				if c.fate == hang {
					assert.GreaterOrEqual(t, time.Since(start), sendTimeout, "the send ran until its timeout")
				}

				w := do(t, "GET", a.url+"/withdrawals/"+id, "-", "-", "").withdrawal(t)
				assert.Equal(t, stateAwaitingOperator, w.State, "the key stays claimed, without an outcome, and no send runs")
				assert.Equal(t, ptr("k-"+c.name), w.ClaimedBy)
				assert.Empty(t, w.Tx)

				res = do(t, "POST", a.url+"/withdrawals/"+id+"/submit", "-", "k-"+c.name, "")
				p := res.problemOf(t, http.StatusConflict, idemhttp.TypeAwaitingOperator)
				assert.NotContains(t, p, "holder")
				assert.Contains(t, p["detail"], "ended without an answer")
				assert.Empty(t, res.header.Values("Retry-After"), "no point coming back before an operator acts")
				res = do(t, "POST", a.url+"/withdrawals/"+id+"/submit", "-", "k-other", "")
				assert.Equal(t, http.StatusConflict, res.status, "another key: %s", res.body)
				assert.Equal(t, "k-"+c.name, res.problem(t)["holder"])

				assert.Equal(t, c.sends, railSends(t, a.url)[id], "money moved")
			})
		}
	})
}

// A repeat of a key whose send runs is told so, and when to come back: the
// rail's latency, in whole seconds; GET shows the withdrawal in flight.
func TestSendRunning(t *testing.T) {
	forEachStore(t, func(t *testing.T, db string) {
		r := newRail(1100*time.Millisecond, 0, 0, 0, 0)
		started := make(chan struct{})
		r.decide = func(Withdrawal) fate {
			close(started)
			return answer
		}
		a := serve(t, db, r, 10*time.Second)
		id := create(t, a, "")
		first := make(chan response, 1)
		go func() {
			res, err := request(nil, "POST", a.url+"/withdrawals/"+id+"/submit", "-", "k1", "")
			if err != nil {
				res.body = []byte(err.Error())
			}
			first <- res
		}()
		<-started

		w := do(t, "GET", a.url+"/withdrawals/"+id, "-", "-", "").withdrawal(t)
		assert.Equal(t, stateInFlight, w.State)
		assert.Equal(t, ptr("k1"), w.ClaimedBy)
		res := do(t, "POST", a.url+"/withdrawals/"+id+"/submit", "-", "k1", "")
		p := res.problemOf(t, http.StatusConflict, idemhttp.TypeKeyInFlight)
		assert.Contains(t, p["detail"], "is running")
		assert.Equal(t, []string{"2"}, res.header.Values("Retry-After"), "the rail's latency, 1.1s, in whole seconds")

		res = <-first
		require.Equal(t, http.StatusCreated, res.status, "%s", res.body)
		assert.Equal(t, stateSent, do(t, "GET", a.url+"/withdrawals/"+id, "-", "-", "").withdrawal(t).State)
		assert.Equal(t, map[string]int{id: 1}, railSends(t, a.url))
	})
}

func TestRetryAfterOfASendRunning(t *testing.T) {
	for _, c := range []struct {
		latency, sendTimeout, want time.Duration
	}{
		{0, 10 * time.Second, 0}, // idemhttp's one second
		{50 * time.Millisecond, 10 * time.Second, 50 * time.Millisecond},
		{2 * time.Second, 10 * time.Second, 2 * time.Second},
		{time.Minute, 10 * time.Second, 10 * time.Second}, // by then the send has ended
	} {
		assert.Equal(t, c.want, config{Rail: newRail(c.latency, 0, 0, 0, 0), SendTimeout: c.sendTimeout}.retryAfter())
	}
}

func TestClientHangingUpDoesNotCutTheSend(t *testing.T) {
	forEachStore(t, func(t *testing.T, db string) {
		a := serve(t, db, newRail(300*time.Millisecond, 0, 0, 0, 0), 10*time.Second)
		id := create(t, a, "")
		tr := &http.Transport{DisableKeepAlives: true}
		defer tr.CloseIdleConnections()
		client := &http.Client{Transport: tr, Timeout: 50 * time.Millisecond}
		_, err := request(client, "POST", a.url+"/withdrawals/"+id+"/submit", "-", "k", "")
		require.Error(t, err, "the client gives up before the rail answers")

		require.EventuallyWithT(t, func(c *assert.CollectT) {
			res, err := request(nil, "GET", a.url+"/withdrawals/"+id, "-", "-", "")
			require.NoError(c, err)
			var w Withdrawal
			require.NoError(c, json.Unmarshal(res.body, &w))
			assert.Equal(c, stateSent, w.State, "the send goes on and its answer is recorded")
		}, 5*time.Second, 20*time.Millisecond)
		res := do(t, "POST", a.url+"/withdrawals/"+id+"/submit", "-", "k", "")
		assert.Equal(t, http.StatusCreated, res.status)
		assert.Equal(t, "true", res.header.Get("Idempotent-Replayed"))
		assert.Equal(t, map[string]int{id: 1}, railSends(t, a.url))
	})
}

func TestRefusals(t *testing.T) {
	forEachStore(t, func(t *testing.T, db string) {
		a := serve(t, db, newRail(0, 0, 0, 0, 0), 10*time.Second)
		id := create(t, a, "")
		valid := `{"amount":"25.00","currency":"USDC","destination":"0xdest"}`
		long := strings.Repeat("t", 65)

		large := strings.Repeat("x", maxBody)
		const (
			mustAmount   = `must be a positive decimal such as "25.00": digits with at most one point, no sign or exponent, at most 100 characters`
			mustCurrency = `must be 2 to 12 ASCII letters or digits, such as "USDC"`
		)
		for _, c := range []struct {
			name                  string
			method, path, tenant  string
			key, body             string
			status                int
			problemType, inDetail string
			faults                map[string]string // the errors member: pointer -> detail
		}{
			{"malformed JSON", "POST", "/withdrawals", "-", "-", `{"amount":`, 400, typeMalformed, "Malformed JSON: the body ends inside the JSON object.", nil},
			{"bad JSON", "POST", "/withdrawals", "-", "-", `{"amount" 1}`, 400, typeMalformed, "Malformed JSON at byte 11: a JSON object is expected.", nil},
			{"not an object", "POST", "/withdrawals", "-", "-", `[1]`, 400, typeMalformed, "Malformed JSON: a JSON object is expected.", nil},
			{"empty body", "POST", "/withdrawals", "-", "-", ``, 400, typeMalformed, "empty", nil},
			{"two objects", "POST", "/withdrawals", "-", "-", valid + valid, 400, typeMalformed, "after the JSON object", nil},
			{"body too large", "POST", "/withdrawals", "-", "-", `{"destination":"` + large + `"}`, 413, typeBodyTooLarge, "over 16384 bytes", nil},
			{"submit, body too large", "POST", "/withdrawals/" + id + "/submit", "-", "k", large + "x", 413, typeBodyTooLarge, "over 16384 bytes", nil},
			{"get, body too large", "GET", "/withdrawals/" + id, "-", "-", large + "x", 413, typeBodyTooLarge, "over 16384 bytes", nil},
			{"negative amount", "POST", "/withdrawals", "-", "-", `{"amount":"-5","currency":"USDC","destination":"0xdest"}`, 422,
				idemhttp.TypeInvalidFingerprint, "", map[string]string{"#/amount": mustAmount}},
			{"amount not a number", "POST", "/withdrawals", "-", "-", `{"amount":"abc","currency":"USDC","destination":"0xdest"}`, 422,
				idemhttp.TypeInvalidFingerprint, "", map[string]string{"#/amount": mustAmount}},
			{"zero amount", "POST", "/withdrawals", "-", "-", `{"amount":"0.00","currency":"USDC","destination":"0xdest"}`, 422,
				idemhttp.TypeInvalidFingerprint, "", map[string]string{"#/amount": mustAmount}},
			{"amount a JSON number", "POST", "/withdrawals", "-", "-", `{"amount":25,"currency":"USDC","destination":"0xdest"}`, 422,
				idemhttp.TypeInvalidFingerprint, "", map[string]string{"#/amount": "is not a JSON string"}},
			{"no amount", "POST", "/withdrawals", "-", "-", `{"currency":"USDC","destination":"0xdest"}`, 422,
				idemhttp.TypeInvalidFingerprint, "", map[string]string{"#/amount": "is missing"}},
			{"bad currency", "POST", "/withdrawals", "-", "-", `{"amount":"1","currency":"U$","destination":"0xdest"}`, 422,
				idemhttp.TypeInvalidFingerprint, "", map[string]string{"#/currency": mustCurrency}},
			{"no destination", "POST", "/withdrawals", "-", "-", `{"amount":"1","currency":"USDC"}`, 422,
				idemhttp.TypeInvalidFingerprint, "", map[string]string{"#/destination": "is missing"}},
			{"empty object", "POST", "/withdrawals", "-", "-", `{}`, 422,
				idemhttp.TypeInvalidFingerprint, "", map[string]string{"#/amount": "is missing", "#/currency": "is missing", "#/destination": "is missing"}},
			{"every field wrong its own way", "POST", "/withdrawals", "-", "-", `{"amount":"-1","currency":7,"destination":null}`, 422,
				idemhttp.TypeInvalidFingerprint, "", map[string]string{"#/amount": mustAmount, "#/currency": "is not a JSON string", "#/destination": "is missing"}},
			{"destination too long", "POST", "/withdrawals", "-", "-", `{"amount":"1","currency":"usdc","destination":"` + strings.Repeat("x", 1025) + `"}`, 422,
				idemhttp.TypeInvalidFingerprint, "", map[string]string{"#/destination": "must be 1 to 1024 bytes of UTF-8, without NUL bytes"}},
			{"create, invalid tenant", "POST", "/withdrawals", long, "-", valid, 400, idemhttp.TypeInvalidTenant,
				"The X-Tenant header is not a tenant: a tenant is at most 64 bytes of UTF-8, without NUL bytes.", nil},
			{"no key", "POST", "/withdrawals/" + id + "/submit", "-", "-", "", 400, idemhttp.TypeInvalidKey, "missing", nil},
			{"blank key", "POST", "/withdrawals/" + id + "/submit", "-", "  ", "", 400, idemhttp.TypeInvalidKey, "empty", nil},
			{"malformed key", "POST", "/withdrawals/" + id + "/submit", "-", `"k`, "", 400, idemhttp.TypeInvalidKey, "malformed", nil},
			{"submit, unknown id", "POST", "/withdrawals/wd_unknown/submit", "-", "k", "", 404, typeNotFound, "wd_unknown", nil},
			{"submit, invalid tenant", "POST", "/withdrawals/" + id + "/submit", long, "k", "", 400, idemhttp.TypeInvalidTenant, "X-Tenant", nil},
			{"get, unknown id", "GET", "/withdrawals/wd_unknown", "-", "-", "", 404, typeNotFound, "wd_unknown", nil},
			{"get, invalid tenant", "GET", "/withdrawals/" + id, long, "-", "", 400, idemhttp.TypeInvalidTenant, "X-Tenant", nil},
			{"no such path", "GET", "/nowhere", "-", "-", "", 404, typeNotFound, "/nowhere", nil},
			{"no such method", "DELETE", "/withdrawals/" + id, "-", "-", "", 405, typeMethodNotAllowed, "DELETE", nil},
			{"get, no such method", "GET", "/withdrawals", "-", "-", "", 405, typeMethodNotAllowed, "GET", nil},
			{"admin, no such method", "GET", "/admin/prune", "-", "-", "", 405, typeMethodNotAllowed, "GET", nil},
		} {
			t.Run(c.name, func(t *testing.T) {
				res := do(t, c.method, a.url+c.path, c.tenant, c.key, c.body)
				p := res.problemOf(t, c.status, c.problemType)
				assert.Contains(t, p["detail"], c.inDetail)
				assert.NotEqual(t, http.StatusText(c.status), p["title"], "a title of its own")
				for _, goName := range []string{"WithdrawalID", "Amount", "Currency", "Destination"} {
					assert.NotContains(t, p["detail"], goName, "JSON names only")
				}
				for _, goText := range []string{"invalid character", "unexpected EOF", "json:", "invalid tenant", "invalid fingerprint"} {
					assert.NotContains(t, p["detail"], goText, "no error's text")
				}
				if c.faults == nil {
					assert.NotContains(t, p, "errors")
					return
				}
				assert.Equal(t, "The withdrawal's id, amount, currency or destination is not valid.", p["detail"], "idemhttp's sentence")
				faults := map[string]string{}
				for _, f := range p["errors"].([]any) {
					f := f.(map[string]any)
					faults[f["pointer"].(string)] = f["detail"].(string)
				}
				assert.Equal(t, c.faults, faults, "every field at fault, at once")
			})
		}

		t.Run("a header net/http refuses is its plain 400", func(t *testing.T) {
			conn, err := net.Dial("tcp", strings.TrimPrefix(a.url, "http://"))
			require.NoError(t, err)
			defer conn.Close()
			_, err = fmt.Fprintf(conn, "GET /withdrawals/%s HTTP/1.1\r\nHost: payoutd\r\nX-Tenant: a\x01b\r\nConnection: close\r\n\r\n", id)
			require.NoError(t, err)
			res, err := http.ReadResponse(bufio.NewReader(conn), nil)
			require.NoError(t, err)
			defer res.Body.Close()
			assert.Equal(t, http.StatusBadRequest, res.StatusCode)
			assert.Contains(t, res.Header.Get("Content-Type"), "text/plain", "not a problem: the package doc says so")
		})

		t.Run("405 keeps Allow", func(t *testing.T) {
			for path, allow := range map[string]string{"/withdrawals": "POST", "/withdrawals/" + id: "GET, HEAD", "/admin/inflight": "GET, HEAD"} {
				res := do(t, "PUT", a.url+path, "-", "-", "")
				res.problemOf(t, http.StatusMethodNotAllowed, typeMethodNotAllowed)
				assert.Equal(t, allow, res.header.Get("Allow"), path)
			}
		})

		t.Run("two tenants", func(t *testing.T) {
			req, err := http.NewRequest("GET", a.url+"/withdrawals/"+id, nil)
			require.NoError(t, err)
			req.Header.Add(tenantHeader, "")
			req.Header.Add(tenantHeader, "acme")
			tr := &http.Transport{DisableKeepAlives: true}
			defer tr.CloseIdleConnections()
			res, err := (&http.Client{Transport: tr}).Do(req)
			require.NoError(t, err)
			defer res.Body.Close()
			assert.Equal(t, http.StatusBadRequest, res.StatusCode)
			assert.Equal(t, "application/problem+json", res.Header.Get("Content-Type"))
			var p map[string]any
			require.NoError(t, json.NewDecoder(res.Body).Decode(&p))
			assert.Equal(t, "The X-Tenant header is repeated: a request names one tenant.", p["detail"])
		})

		w := do(t, "GET", a.url+"/withdrawals/"+id, "-", "-", "").withdrawal(t)
		assert.Equal(t, stateApproved, w.State, "no refusal touched the withdrawal")
		assert.Empty(t, railSends(t, a.url))
	})
}

// A refused request claims nothing: the same key with a good request then
// sends, as the package doc says.
func TestRefusalLeavesTheKeyUnused(t *testing.T) {
	forEachStore(t, func(t *testing.T, db string) {
		a := serve(t, db, newRail(0, 0, 0, 0, 0), 10*time.Second)
		held := create(t, a, "")
		require.Equal(t, http.StatusCreated, do(t, "POST", a.url+"/withdrawals/"+held+"/submit", "-", "holder", "").status)
		for _, c := range []struct {
			name         string
			status       int
			path, tenant string // {id} is a withdrawal of the default tenant's
			body         string
			then         string // the tenant of the good request
		}{
			{"400, an invalid tenant", 400, "/withdrawals/{id}/submit", strings.Repeat("t", 65), "", ""},
			{"404, no such withdrawal", 404, "/withdrawals/wd_unknown/submit", "", "", ""},
			{"404, another tenant's withdrawal", 404, "/withdrawals/{id}/submit", "acme", "", "acme"},
			{"413, a body too large", 413, "/withdrawals/{id}/submit", "", strings.Repeat("x", maxBody+1), ""},
			{"409, a withdrawal another key holds", 409, "/withdrawals/" + held + "/submit", "", "", ""},
			{"422, a create refused", 422, "/withdrawals", "", `{"amount":"-1"}`, ""},
		} {
			t.Run(c.name, func(t *testing.T) {
				id := create(t, a, "")
				key := "key-" + id
				res := do(t, "POST", a.url+strings.ReplaceAll(c.path, "{id}", id), c.tenant, key, c.body)
				require.Equal(t, c.status, res.status, "%s", res.body)
				res.problem(t)

				if c.then != "" {
					id = create(t, a, c.then)
				}
				res = do(t, "POST", a.url+"/withdrawals/"+id+"/submit", c.then, key, "")
				require.Equal(t, http.StatusCreated, res.status, "the key, unused, sends: %s", res.body)
				assert.Empty(t, res.header.Values("Idempotent-Replayed"))
				assert.Equal(t, 1, railSends(t, a.url)[id])
			})
		}
	})
}

// sameKey is the key of every tap.
func sameKey(key string) func(string, int) string {
	return func(string, int) string { return key }
}

// keyPer is the key of every tap on a withdrawal: prefix and its id.
func keyPer(prefix string) func(string, int) string {
	return func(id string, _ int) string { return prefix + id }
}

func ptr[T any](v T) *T { return &v }

// A rail that declines a transfer answers with an outcome: the withdrawal is
// failed, recorded, and every retry of the key replays it; nothing moved.
func TestRailDeclines(t *testing.T) {
	forEachStore(t, func(t *testing.T, db string) {
		var f fates
		r := newRail(0, 0, 0, 0, 0)
		r.decide = f.decide
		a := serve(t, db, r, 10*time.Second)
		id := create(t, a, "")
		f.set(id, decline)

		res := do(t, "POST", a.url+"/withdrawals/"+id+"/submit", "-", "k1", "")
		require.Equal(t, http.StatusCreated, res.status, "%s", res.body)
		assert.Empty(t, res.header.Values("Idempotent-Replayed"))
		w := res.withdrawal(t)
		assert.Equal(t, Withdrawal{ID: id, Amount: "25.00", Currency: "USDC", Destination: "0xdest",
			State: stateFailed, FailureReason: declineReason}, w.Withdrawal)

		f.set(id, answer) // a retry is not sent: the decline is its outcome
		again := do(t, "POST", a.url+"/withdrawals/"+id+"/submit", "-", "k1", "")
		require.Equal(t, http.StatusCreated, again.status, "%s", again.body)
		assert.Equal(t, "true", again.header.Get("Idempotent-Replayed"))
		assert.Equal(t, string(res.body), string(again.body), "the same status and body")

		got := do(t, "GET", a.url+"/withdrawals/"+id, "-", "-", "").withdrawal(t)
		assert.Equal(t, w.Withdrawal, got.Withdrawal)
		assert.Equal(t, ptr("k1"), got.ClaimedBy)
		p := do(t, "POST", a.url+"/withdrawals/"+id+"/submit", "-", "k2", "").problemOf(t, http.StatusConflict, idemhttp.TypeWithdrawalClaimed)
		assert.Equal(t, "k1", p["holder"])
		assert.Empty(t, railSends(t, a.url), "no money moved")
	})
}

// A rail unavailable before anything moved says so: the client gets the
// not-sent problem, the claim is released, and a retry under the same key
// sends.
func TestRailUnavailable(t *testing.T) {
	forEachStore(t, func(t *testing.T, db string) {
		var f fates
		r := newRail(0, 0, 0, 0, 0)
		r.decide = f.decide
		a := serve(t, db, r, 10*time.Second)
		id := create(t, a, "")
		f.set(id, unavailable)

		res := do(t, "POST", a.url+"/withdrawals/"+id+"/submit", "-", "k1", "")
		p := res.problemOf(t, http.StatusServiceUnavailable, idemhttp.TypeNotSent)
		assert.Equal(t, "1", res.header.Get("Retry-After"))
		assert.Contains(t, p["detail"], "moved nothing for this request")
		assert.NotContains(t, string(res.body), "rail:", "the rail's error stays inside")

		w := do(t, "GET", a.url+"/withdrawals/"+id, "-", "-", "").withdrawal(t)
		assert.Equal(t, stateApproved, w.State, "nothing happened to it")
		assert.Nil(t, w.ClaimedBy, "the claim is released")
		assert.Empty(t, inFlight(t, a, ""), "nothing left for an operator")
		assert.Empty(t, railSends(t, a.url))

		f.set(id, answer)
		res = do(t, "POST", a.url+"/withdrawals/"+id+"/submit", "-", "k1", "")
		require.Equal(t, http.StatusCreated, res.status, "the retry sends: %s", res.body)
		assert.Empty(t, res.header.Values("Idempotent-Replayed"))
		assert.Equal(t, stateSent, res.withdrawal(t).State)
		assert.Equal(t, map[string]int{id: 1}, railSends(t, a.url))
	})
}

// Replays are routine: at the default level, Info, they log nothing.
func TestReplaysAreQuiet(t *testing.T) {
	var logs lockedBuffer
	a := serveConfig(t, "", config{Rail: newRail(0, 0, 0, 0, 0), SendTimeout: 10 * time.Second,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	id := create(t, a, "")
	for range 3 {
		res := do(t, "POST", a.url+"/withdrawals/"+id+"/submit", "-", "k1", "")
		require.Equal(t, http.StatusCreated, res.status, "%s", res.body)
	}
	assert.NotContains(t, logs.String(), "k1", "no line about the key")
}
