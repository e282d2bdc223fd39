package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemledger/submissions"
	"github.com/idemledger/submissions/admin"
	"github.com/idemledger/submissions/driver"
	"github.com/idemledger/submissions/pgstore"
	"github.com/idemledger/submissions/pgstore/ctl"
)

// An operator's doors to one ledger: the library (package admin, with
// payoutd's outcome rule), payoutd's admin API, and `payoutd ctl` on the
// same database. Each action below runs through each door, on a key set up
// the same way in a tenant of the door's own, and every door must decide
// the same and say the same words (but where the send runs: a door in
// another process cannot see it). Two more doors decide by the same
// function and render less: the service's own Resolve and Release (Force
// and ClaimUnknown for a resolve, no Force for a release, the current
// claim: serviceOK says whether each returns nil), and submissionsctl,
// which runs none of payoutd's hooks and so refuses every action on its
// table, changing nothing.

// doorAnswer is what an operator's action got at one door.
type doorAnswer struct {
	ok      bool   // the ledger is as asked
	code    int    // the HTTP status or the exit code; 0 for the library
	message string // the result's message
}

// doorSetup is where a door's case is set up: the door's tenant, its view
// of the server's ledger, and the ledger's store.
type doorSetup struct {
	tenant string
	s      *submissions.Submissions[Withdrawal]
	store  *pgstore.Store[Withdrawal]
}

// doorCase is one action, its setup, and the answer every door must give.
type doorCase struct {
	name   string
	action string // "resolve" or "release"
	// setup brings key of w to the state the action finds, through s, the
	// door's tenant's view of the server's ledger; it returns the key's
	// claim token (0 for none).
	setup   func(t *testing.T, d doorSetup, key string, w Withdrawal) driver.Token
	outcome func(w Withdrawal) Withdrawal // resolve's outcome
	key     string                        // the key acted on, if not the case's own
	noKey   bool                          // the key acted on is "" (an empty path segment over HTTP)
	token   func(driver.Token) driver.Token
	force   bool

	ok      bool
	status  int    // HTTP
	exit    int    // the command line
	message string // a regular expression; KEY is the key, TENANT the door's tenant
	// elsewhere is message at a door in another process (payoutd ctl),
	// when it differs.
	elsewhere string
	// serviceOK: the service's own Resolve or Release returns nil.
	serviceOK bool
}

// sentNow is w as the rail shows it sent, under tx.
func sentNow(tx string) func(Withdrawal) Withdrawal {
	return func(w Withdrawal) Withdrawal {
		w.State, w.Tx = stateSent, tx
		return w
	}
}

var errNoAnswer = errors.New("rail: no answer")

// abandoned leaves key claimed by a send that ended without an answer.
func abandoned(t *testing.T, d doorSetup, key string, w Withdrawal) driver.Token {
	t.Helper()
	_, err := d.s.Submit(context.Background(), key, w, func(context.Context, Withdrawal) (Withdrawal, error) { return Withdrawal{}, errNoAnswer })
	require.ErrorIs(t, err, submissions.ErrOutcomeUnknown)
	return tokenOf(t, d.s, key)
}

// settled leaves key done, sent under tx_first.
func settled(t *testing.T, d doorSetup, key string, w Withdrawal) driver.Token {
	t.Helper()
	_, err := d.s.Submit(context.Background(), key, w, func(_ context.Context, w Withdrawal) (Withdrawal, error) {
		return sentNow("tx_first")(w), nil
	})
	require.NoError(t, err)
	return 0
}

// resolvedFirst leaves key abandoned, then resolved by an operator with
// tx_first.
func resolvedFirst(t *testing.T, d doorSetup, key string, w Withdrawal) driver.Token {
	t.Helper()
	token := abandoned(t, d, key, w)
	require.NoError(t, d.s.Resolve(context.Background(), key, sentNow("tx_first")(w)))
	return token
}

// running leaves key claimed by a send that runs until the test ends.
func running(t *testing.T, d doorSetup, key string, w Withdrawal) driver.Token {
	t.Helper()
	started, finish, done := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		_, _ = d.s.Submit(context.Background(), key, w, func(_ context.Context, w Withdrawal) (Withdrawal, error) {
			close(started)
			<-finish
			return sentNow("tx_rail")(w), nil
		})
	}()
	t.Cleanup(func() { close(finish); <-done })
	<-started
	return tokenOf(t, d.s, key)
}

// answered leaves key claimed by a send whose answer, for another amount,
// was not recorded: the claim is marked answered.
func answered(t *testing.T, d doorSetup, key string, w Withdrawal) driver.Token {
	t.Helper()
	_, err := d.s.Submit(context.Background(), key, w, func(_ context.Context, w Withdrawal) (Withdrawal, error) {
		w = sentNow("tx_odd")(w)
		w.Amount = "26"
		return w, nil
	})
	require.ErrorIs(t, err, submissions.ErrOutcomeNotRecorded)
	return tokenOf(t, d.s, key)
}

// tokenOf returns the token of key's claim in flight in s's tenant.
func tokenOf(t *testing.T, s *submissions.Submissions[Withdrawal], key string) driver.Token {
	t.Helper()
	claims, err := s.Admin().InFlight(context.Background(), admin.InFlightQuery{Limit: admin.MaxListLimit})
	require.NoError(t, err)
	for _, c := range claims {
		if c.Key == key {
			return c.Token
		}
	}
	t.Fatalf("request key %s is not in flight", key)
	return 0
}

var doorCases = []doorCase{
	{name: "resolve", serviceOK: true, action: "resolve", setup: abandoned, outcome: sentNow("tx_op"),
		ok: true, status: 200, exit: 0, message: `^resolved request key KEY in TENANT \(token N\): its retries get this outcome$`},
	{name: "resolve again", serviceOK: true, action: "resolve", setup: resolvedFirst, outcome: sentNow("tx_first"),
		ok: true, status: 200, exit: 0, message: `^request key KEY in TENANT already has this outcome: nothing changed$`},
	{name: "resolve with another outcome", action: "resolve", setup: resolvedFirst, outcome: sentNow("tx_other"),
		status: 409, exit: 1, message: `^request key KEY has another outcome: nothing changed \(an outcome is never replaced\)$`},
	{name: "resolve with a changed field", action: "resolve", setup: abandoned,
		outcome: func(w Withdrawal) Withdrawal { w = sentNow("tx_op")(w); w.Amount = "26"; return w },
		status:  409, exit: 1, message: `^the outcome differs from the claim's withdrawal: amount "26" is not the claim's "25": nothing changed$`},
	{name: "resolve with another withdrawal", action: "resolve", setup: abandoned,
		outcome: func(w Withdrawal) Withdrawal { w = sentNow("tx_op")(w); w.ID = "wd_other"; return w },
		status:  409, exit: 1, message: `^the outcome is for withdrawal "wd_other", not the claim's "wd_\w+": nothing changed$`},
	{name: "resolve with an invalid outcome", action: "resolve", setup: abandoned,
		outcome: func(w Withdrawal) Withdrawal { w.State = stateApproved; return w },
		status:  422, exit: 1, message: `^the outcome is not valid: state "approved" is not an outcome: "sent" \(with tx\) or "failed" \(with failure_reason\): nothing changed$`},
	{name: "resolve sent without its tx", action: "resolve", setup: abandoned,
		outcome: func(w Withdrawal) Withdrawal { w.State = stateSent; return w },
		status:  422, exit: 1, message: `^the outcome is not valid: state "sent" without its tx: nothing changed$`},
	{name: "resolve of a running send", serviceOK: true, action: "resolve", setup: running, outcome: sentNow("tx_op"),
		status: 409, exit: 1, message: `^request key KEY's send is running in this process: resolving it now records your outcome while the rail may still answer otherwise; nothing changed$`,
		elsewhere: `^request key KEY's send is not known to have ended \(it may be running elsewhere: in another process, or under another ledger\): resolving it now records your outcome while the rail may still answer otherwise; nothing changed$`},
	{name: "resolve of a running send, forced", serviceOK: true, action: "resolve", setup: running, outcome: sentNow("tx_op"), force: true,
		ok: true, status: 200, exit: 0, message: `^resolved request key KEY in TENANT \(token N\): its retries get this outcome`},
	{name: "resolve of an unknown key", serviceOK: true, action: "resolve", setup: func(*testing.T, doorSetup, string, Withdrawal) driver.Token { return 0 },
		outcome: sentNow("tx_op"), status: 404, exit: 1, message: `^request key KEY has no record in TENANT \(never claimed there, or released\): nothing changed$`},
	{name: "resolve with a wrong token", serviceOK: true, action: "resolve", setup: abandoned, outcome: sentNow("tx_op"),
		token:  func(tok driver.Token) driver.Token { return tok + 7 },
		status: 409, exit: 1, message: `^request key KEY's claim is token N, not N: nothing changed$`},
	{name: "release", serviceOK: true, action: "release", setup: abandoned,
		ok: true, status: 200, exit: 0, message: `^released request key KEY in TENANT \(token N\): withdrawal wd_\w+ may be sent again$`},
	{name: "release of a done key", action: "release", setup: settled,
		status: 409, exit: 1, message: `^request key KEY has an outcome, so its withdrawal was settled: a key with an outcome is never released; nothing changed$`},
	{name: "release of a pruned key", action: "release", setup: func(t *testing.T, d doorSetup, key string, w Withdrawal) driver.Token {
		settled(t, d, key, w)
		time.Sleep(2 * time.Millisecond)
		n, err := d.s.Admin().WithMinRetention(0).Prune(context.Background(), time.Now(), 0)
		require.NoError(t, err)
		require.Positive(t, n)
		return 0
	}, status: 410, exit: 1, message: `^request key KEY was settled, then pruned: its outcome is no longer kept, and it is never resolved or released; nothing changed$`},
	{name: "release with a wrong token", serviceOK: true, action: "release", setup: abandoned,
		token:  func(tok driver.Token) driver.Token { return tok + 7 },
		status: 409, exit: 1, message: `^request key KEY's claim is token N, not N: nothing changed$`},
	{name: "release of an empty key", action: "release", key: " ", setup: abandoned,
		status: 400, exit: 1, message: `^the request key is not valid: invalid request key: empty: nothing changed$`},
	{name: "release of no key", action: "release", noKey: true, setup: abandoned,
		status: 400, exit: 1, message: `^the request key is not valid: invalid request key: empty: nothing changed$`},
	{name: "resolve of no key", action: "resolve", noKey: true, setup: abandoned, outcome: sentNow("tx_op"),
		status: 400, exit: 1, message: `^the request key is not valid: invalid request key: empty: nothing changed$`},
	{name: "release of an unknown key", serviceOK: true, action: "release", setup: func(*testing.T, doorSetup, string, Withdrawal) driver.Token { return 0 },
		status: 404, exit: 1, message: `^request key KEY has no record in TENANT \(never claimed there, or released\): nothing changed$`},
	{name: "release of a send not known to have ended", action: "release", setup: claimOnly, status: 409, exit: 1, message: `^request key KEY's send is not known to have ended \(it may be running elsewhere: in another process, or under another ledger\): releasing it could send the withdrawal twice; nothing changed$`},
	{name: "release of an answered claim, forced", action: "release", force: true, setup: answered,
		status: 409, exit: 1, message: `^request key KEY's send got an answer from the rail that was not recorded: money moved, so the claim is never released, with force or without; nothing changed$`},
	{name: "release of a send not known to have ended, forced", action: "release", force: true, setup: claimOnly, ok: true, status: 200, exit: 0, message: `^released request key KEY in TENANT \(token N\): withdrawal wd_\w+ may be sent again$`},
}

// claimOnly leaves key claimed as a process that stopped mid-send leaves
// it: in flight, no send running here, none known to have ended. It claims
// through the store, as the ledger of that process did.
func claimOnly(t *testing.T, d doorSetup, key string, w Withdrawal) driver.Token {
	t.Helper()
	fp, err := w.Fingerprint().Canonical()
	require.NoError(t, err)
	rec, claimed, err := d.store.Claim(context.Background(), d.tenant, key, fp, nil)
	require.NoError(t, err)
	require.True(t, claimed)
	return rec.Token
}

func TestOperatorDoorsDecideAndSayAlike(t *testing.T) {
	db := testDatabase(t)
	a := serve(t, db, newRail(0, 0, 0, 0, 0), 10*time.Second)
	store := a.srv.store.(*pgstore.Store[Withdrawal]) // the server's: with its hooks, as every payoutd's
	pool := testPool(t, db)
	doors := []struct {
		name string
		act  func(t *testing.T, c doorCase, tenant, key string, token driver.Token, out Withdrawal) doorAnswer
	}{
		{"library", func(t *testing.T, c doorCase, tenant, key string, token driver.Token, out Withdrawal) doorAnswer {
			target := admin.Target{Tenant: tenant, Key: key, Token: token, Force: c.force}
			var res admin.Result
			if c.action == "resolve" {
				res = a.srv.admin().Resolve(context.Background(), target, out)
			} else {
				res = a.srv.admin().Release(context.Background(), target)
			}
			return doorAnswer{ok: res.OK(), message: res.Message}
		}},
		{"http", func(t *testing.T, c doorCase, tenant, key string, token driver.Token, out Withdrawal) doorAnswer {
			q := url.Values{}
			if token != 0 {
				q.Set("token", strconv.FormatUint(uint64(token), 10))
			}
			if c.force {
				q.Set("force", "true")
			}
			body := ""
			if c.action == "resolve" {
				raw, err := json.Marshal(out)
				require.NoError(t, err)
				body = string(raw)
			}
			res := do(t, "POST", a.url+"/admin/claims/"+url.PathEscape(key)+"/"+c.action+"?"+q.Encode(), tenant, "-", body)
			var v map[string]any
			require.NoError(t, json.Unmarshal(res.body, &v), "%s", res.body)
			if res.status != http.StatusOK {
				p := res.problem(t)
				assert.Equal(t, p["message"], p["detail"], "the problem's detail is the result's message")
				assert.Equal(t, "refused", p["decision"])
			}
			msg, _ := v["message"].(string)
			return doorAnswer{ok: res.status == http.StatusOK, code: res.status, message: msg}
		}},
		{"service", func(t *testing.T, c doorCase, tenant, key string, _ driver.Token, out Withdrawal) doorAnswer {
			s := a.srv.ledger.Tenant(tenant)
			var err error
			if c.action == "resolve" {
				err = s.Resolve(context.Background(), key, out)
			} else {
				err = s.Release(context.Background(), key)
			}
			if err != nil {
				requireRefused(t, err)
				return doorAnswer{message: err.Error()}
			}
			return doorAnswer{ok: true}
		}},
		{"submissionsctl", func(t *testing.T, c doorCase, tenant, key string, token driver.Token, out Withdrawal) doorAnswer {
			args := ctlArgs(t, c, db, tenant, key, token, out)
			var stdout, stderr bytes.Buffer
			code := ctl.Run(context.Background(), args, strings.NewReader(""), &stdout, &stderr)
			return doorAnswer{ok: code == 0, code: code, message: strings.TrimSpace(stderr.String())}
		}},
		{"command line", func(t *testing.T, c doorCase, tenant, key string, token driver.Token, out Withdrawal) doorAnswer {
			args := ctlArgs(t, c, db, tenant, key, token, out)
			var stdout, stderr bytes.Buffer
			code := runCtl(context.Background(), args, strings.NewReader(""), &stdout, &stderr)
			if code == 0 {
				lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
				assert.Empty(t, stderr.String())
				return doorAnswer{ok: true, code: code, message: lines[len(lines)-1]}
			}
			msg, ok := strings.CutPrefix(strings.TrimSuffix(stderr.String(), "\n"), "payoutd ctl: ")
			require.True(t, ok, "stderr: %q", stderr.String())
			msg, _, _ = strings.Cut(msg, "; next: ")
			return doorAnswer{code: code, message: msg}
		}},
	}
	tokens := regexp.MustCompile(`token \d+`)
	for i, c := range doorCases {
		t.Run(c.name, func(t *testing.T) {
			said := map[string]string{}
			for _, d := range doors {
				tenant := fmt.Sprintf("t%d-%s", i, strings.ReplaceAll(d.name, " ", "-"))
				s := a.srv.ledger.Tenant(tenant)
				key := "pay-7"
				id := "wd_7_" + strings.ReplaceAll(tenant, "-", "_") // ids are global
				w := Withdrawal{ID: id, Amount: "25.00", Currency: "EUR", Destination: "DE89", State: stateApproved}
				require.NoError(t, a.srv.withdrawals.create(t.Context(), tenant, w))
				cur := c.setup(t, doorSetup{tenant: tenant, s: s, store: store}, key, w)
				agree(t, pool, tenant, w.ID)
				if c.key != "" {
					key = c.key
				}
				if c.noKey {
					key = ""
				}
				token := driver.Token(0)
				if c.token != nil {
					token = c.token(cur)
				}
				var out Withdrawal
				if c.outcome != nil {
					out = c.outcome(w)
				}
				before := agree(t, pool, tenant, w.ID)
				got := d.act(t, c, tenant, key, token, out)
				state := agree(t, pool, tenant, w.ID)
				switch d.name {
				case "service":
					assert.Equal(t, c.serviceOK, got.ok, "%s: done: %s", d.name, got.message)
				case "submissionsctl":
					assert.Equal(t, 1, got.code, "%s: exit code", d.name)
					assert.Contains(t, got.message, "is changed with a service's hooks, which this command does not run: run payoutd ctl instead (nothing changed)", d.name)
					assert.Equal(t, before, state, "%s: nothing changed", d.name)
					continue
				default:
					assert.Equal(t, c.ok, got.ok, "%s: done", d.name)
				}
				if got.ok && c.action == "release" && cur != 0 {
					assert.Equal(t, stateApproved, state, "%s: released, approved again", d.name)
				}
				if got.ok && c.action == "resolve" {
					assert.Equal(t, out.State, state, "%s: resolved, in the outcome's state", d.name)
				}
				switch d.name {
				case "http":
					assert.Equal(t, c.status, got.code, "%s: status", d.name)
				case "command line":
					assert.Equal(t, c.exit, got.code, "%s: exit code", d.name)
				}
				if d.name == "service" {
					continue
				}
				message := c.message
				if d.name == "command line" && c.elsewhere != "" {
					message = c.elsewhere
				}
				want := strings.NewReplacer("KEY", regexp.QuoteMeta(strings.TrimSpace(key)), "TENANT", `tenant "`+tenant+`"`, "token N", `token \d+`, "not N", `not \d+`).Replace(message)
				assert.Regexp(t, want, got.message, "%s: words", d.name)
				said[d.name] = strings.ReplaceAll(strings.ReplaceAll(tokens.ReplaceAllString(got.message, "token N"), w.ID, "WD"), tenant, "TENANT")
			}
			assert.Equal(t, said["library"], said["http"], "the library and the admin API say the same")
			if c.elsewhere == "" {
				assert.Equal(t, said["library"], said["command line"], "the library and the command line say the same")
			}
		})
	}
}

// TestOperatorDoorsListAlike: the keys in flight that each filter selects
// are the same at every door, and a listing that selects none says what it
// selected.
func TestOperatorDoorsListAlike(t *testing.T) {
	db := testDatabase(t)
	a := serve(t, db, newRail(0, 0, 0, 0, 0), 10*time.Second)
	for i, tenant := range []string{"", "acme", "acme"} {
		w := Withdrawal{ID: fmt.Sprintf("wd_%d", i), Amount: "25", Currency: "EUR", Destination: "DE89", State: stateApproved}
		require.NoError(t, a.srv.withdrawals.create(t.Context(), tenant, w))
		abandoned(t, doorSetup{tenant: tenant, s: a.srv.ledger.Tenant(tenant)}, fmt.Sprintf("k%d", i), w)
	}
	type listed struct{ Tenant, Key, Send string }
	for _, c := range []struct {
		name   string
		query  admin.InFlightQuery
		params url.Values
		args   []string
		want   []listed
		empty  string
	}{
		{"every tenant", admin.InFlightQuery{}, url.Values{}, nil,
			[]listed{{"", "k0", admin.SendEnded}, {"acme", "k1", admin.SendEnded}, {"acme", "k2", admin.SendEnded}}, ""},
		{"one tenant", admin.InFlightQuery{Tenants: []string{"acme"}}, url.Values{"tenant": {"acme"}}, []string{"--tenant", "acme"},
			[]listed{{"acme", "k1", admin.SendEnded}, {"acme", "k2", admin.SendEnded}}, ""},
		{"a tenant with none", admin.InFlightQuery{Tenants: []string{"nobody"}}, url.Values{"tenant": {"nobody"}}, []string{"--tenant", "nobody"},
			nil, `no keys in flight in tenant "nobody"`},
		{"older than all", admin.InFlightQuery{OlderThan: time.Hour}, url.Values{"older_than": {"1h"}}, []string{"--older-than", "1h"},
			nil, "no keys in flight claimed at least 1h0m0s ago"},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.query.Limit = admin.MaxListLimit
			claims, err := a.srv.admin().InFlight(context.Background(), c.query)
			require.NoError(t, err)
			var lib []listed
			for _, cl := range claims {
				lib = append(lib, listed{cl.Tenant, cl.Key, cl.Send()})
			}
			assert.Equal(t, c.want, lib, "library")

			var api []listed
			for _, v := range inFlight(t, a, "?"+c.params.Encode()) {
				api = append(api, listed{v.Tenant, v.Key, v.Send})
			}
			assert.Equal(t, c.want, api, "admin API")

			var stdout, stderr bytes.Buffer
			code := runCtl(context.Background(), append([]string{"--database-url", db, "inflight", "--json"}, c.args...), strings.NewReader(""), &stdout, &stderr)
			require.Equal(t, 0, code, stderr.String())
			var cli []listed
			dec := json.NewDecoder(&stdout)
			for dec.More() {
				var v struct{ Tenant, Key, Send string }
				require.NoError(t, dec.Decode(&v))
				cli = append(cli, listed{v.Tenant, v.Key, v.Send})
			}
			assert.Equal(t, c.want, cli, "command line")

			stdout.Reset()
			code = runCtl(context.Background(), append([]string{"--database-url", db, "inflight"}, c.args...), strings.NewReader(""), &stdout, &stderr)
			require.Equal(t, 0, code, stderr.String())
			if c.empty != "" {
				assert.Equal(t, c.empty+"\n", stdout.String(), "the command line says what it selected")
				assert.Equal(t, c.empty, c.query.EmptyText(), "in the library's words")
			} else {
				assert.Contains(t, stdout.String(), fmt.Sprintf("%d keys in flight", len(c.want)))
			}
		})
	}
}

// ctlArgs are the command line of c's action at a ctl door.
func ctlArgs(t *testing.T, c doorCase, db, tenant, key string, token driver.Token, out Withdrawal) []string {
	t.Helper()
	args := []string{"--database-url", db, "--tenant", tenant, c.action, key, "--yes"}
	if c.action == "resolve" {
		raw, err := json.Marshal(out)
		require.NoError(t, err)
		file := filepath.Join(t.TempDir(), "outcome.json")
		require.NoError(t, os.WriteFile(file, raw, 0o600))
		args = []string{"--database-url", db, "--tenant", tenant, c.action, key, "--outcome-file", file}
	}
	if token != 0 {
		args = append(args, "--token", strconv.FormatUint(uint64(token), 10))
	}
	if c.force {
		args = append(args, "--force")
	}
	return args
}

// requireRefused stops t unless err says that this call sent nothing and
// changed nothing: a refusal, not a failure.
func requireRefused(t *testing.T, err error) {
	t.Helper()
	for _, failed := range []error{submissions.ErrStoreFailed, submissions.ErrOutcomeUnknown, submissions.ErrOutcomeNotRecorded} {
		require.NotErrorIs(t, err, failed)
	}
}
