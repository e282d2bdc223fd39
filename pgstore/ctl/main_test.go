package ctl

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemledger/submissions"
	"github.com/idemledger/submissions/admin"
	"github.com/idemledger/submissions/internal/testdb"
	"github.com/idemledger/submissions/pgstore"
)

// testURL returns the test database's URL. Without one it skips the test;
// with CI=true a missing database fails it instead.
func testURL(t *testing.T) string {
	t.Helper()
	return testdb.URL(t)
}

// payout is a service's withdrawal: the request and the outcome.
type payout struct {
	ID          string `json:"id"`
	Amount      string `json:"amount"`
	Currency    string `json:"currency"`
	Destination string `json:"destination"`
	State       string `json:"state"`
	Tx          string `json:"tx,omitempty"`
}

func (p payout) Fingerprint() submissions.Fingerprint {
	return submissions.Fingerprint{WithdrawalID: p.ID, Amount: p.Amount, Currency: p.Currency, Destination: p.Destination}
}

func newPayout(id string) payout {
	return payout{ID: id, Amount: "25.00", Currency: "EUR", Destination: "DE89370400440532013000", State: "approved"}
}

// fixture is a service's ledger on its own table, and submissionsctl's
// command line for that table.
type fixture struct {
	url, table string
	pool       *pgxpool.Pool
	ledger     *submissions.Submissions[payout]
}

func setup(t *testing.T) *fixture {
	t.Helper()
	url := testURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	table := "ctl_" + strings.ToLower(rand.Text()[:12])
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), "DROP TABLE IF EXISTS "+table)
	})
	store, err := pgstore.New[payout](pool, pgstore.WithTable(table))
	require.NoError(t, err)
	f := &fixture{url: url, table: table, pool: pool, ledger: submissions.NewWithStore[payout](store, submissions.WithLogger(slog.New(slog.DiscardHandler)))}
	code, stdout, stderr := f.ctl(t, "", "migrate")
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, "created table "+table+"\n", stdout)
	return f
}

// ctl runs submissionsctl in process on f's table and returns its exit code
// and output.
func (f *fixture) ctl(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	return f.ctlFrom(t, strings.NewReader(stdin), args...)
}

func (f *fixture) ctlFrom(t *testing.T, stdin io.Reader, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	args = append([]string{"--database-url", f.url, "--table", f.table}, args...)
	code := Run(context.Background(), args, stdin, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

var errRail = errors.New("rail: no answer")

// leaveInFlight submits p under key in tenant with a send that ends without
// an answer, and returns the withdrawal.
func (f *fixture) leaveInFlight(t *testing.T, tenant, key string, p payout) payout {
	t.Helper()
	_, err := f.ledger.Tenant(tenant).Submit(context.Background(), key, p, func(context.Context, payout) (payout, error) {
		return payout{}, errRail
	})
	require.ErrorIs(t, err, submissions.ErrOutcomeUnknown)
	return p
}

// send submits p under key in tenant and reports whether send was called.
func (f *fixture) send(t *testing.T, tenant, key string, p payout) (payout, bool, error) {
	t.Helper()
	called := false
	out, err := f.ledger.Tenant(tenant).Submit(context.Background(), key, p, func(_ context.Context, p payout) (payout, error) {
		called = true
		p.State, p.Tx = "sent", "tx_"+p.ID
		return p, nil
	})
	return out, called, err
}

func randomID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return "wd_" + hex.EncodeToString(b)
}

func (f *fixture) token(t *testing.T, tenant, key string) uint64 {
	t.Helper()
	code, stdout, stderr := f.ctl(t, "", "show", key, "--tenant", tenant, "--json")
	require.Equal(t, exitOK, code, stderr)
	var rec recordJSON
	require.NoError(t, json.Unmarshal([]byte(stdout), &rec))
	return rec.Token
}

// TestMigrate: migrate says "created" when it made the table (in setup),
// "updated" when it added a part the table lacked, and "up to date" only
// when nothing was needed.
func TestMigrate(t *testing.T) {
	f := setup(t) // the first migrate: created
	for range 2 {
		code, stdout, stderr := f.ctl(t, "", "migrate")
		require.Equal(t, exitOK, code, stderr)
		assert.Equal(t, "table "+f.table+" is up to date: nothing changed\n", stdout)
		assert.Empty(t, stderr)
	}
	_, err := f.pool.Exec(context.Background(), "DROP INDEX "+f.table+"_prunable")
	require.NoError(t, err)
	code, stdout, stderr := f.ctl(t, "", "migrate")
	require.Equal(t, exitOK, code, stderr)
	assert.Equal(t, "updated table "+f.table+": it is up to date now\n", stdout)
	_, called, err := f.send(t, "", "k1", newPayout(randomID()))
	require.NoError(t, err)
	assert.True(t, called, "the table works")
}

func TestInFlight(t *testing.T) {
	f := setup(t)
	a := f.leaveInFlight(t, "", "key-a", newPayout(randomID()))
	time.Sleep(10 * time.Millisecond) // the claims in order
	b := f.leaveInFlight(t, "acme", "key b", newPayout(randomID()))
	_, _, err := f.send(t, "", "key-done", newPayout(randomID()))
	require.NoError(t, err)

	t.Run("table", func(t *testing.T) {
		code, stdout, stderr := f.ctl(t, "", "inflight")
		require.Equal(t, exitOK, code, stderr)
		lines := strings.Split(strings.TrimSpace(stdout), "\n")
		require.Len(t, lines, 4, stdout)
		assert.Regexp(t, `^TENANT\s+KEY\s+WITHDRAWAL\s+AMOUNT\s+CURRENCY\s+DESTINATION\s+CLAIMED AT\s+AGE\s+TOKEN\s+SEND$`, lines[0])
		assert.Regexp(t, `^""\s+key-a\s+`+a.ID+`\s+25\s+EUR\s+DE89370400440532013000\s+\d{4}-\d\d-\d\dT\S+\s+\d+s\s+\d+\s+ended without a recorded answer$`, lines[1])
		assert.Regexp(t, `^acme\s+"key b"\s+`+b.ID+`\s`, lines[2])
		assert.Equal(t, "2 keys in flight", lines[3])
		assert.NotContains(t, stdout, "key-done")
	})

	t.Run("json", func(t *testing.T) {
		code, stdout, stderr := f.ctl(t, "", "inflight", "--json")
		require.Equal(t, exitOK, code, stderr)
		var got []claimJSON
		dec := json.NewDecoder(strings.NewReader(stdout))
		for dec.More() {
			var c claimJSON
			require.NoError(t, dec.Decode(&c))
			got = append(got, c)
		}
		require.Len(t, got, 2)
		assert.Equal(t, "", got[0].Tenant)
		assert.Equal(t, "key-a", got[0].Key)
		assert.Equal(t, a.ID, got[0].WithdrawalID)
		assert.Equal(t, "25", got[0].Amount, "canonical")
		assert.Equal(t, "EUR", got[0].Currency)
		assert.Equal(t, a.Destination, got[0].Destination)
		assert.WithinDuration(t, time.Now(), got[0].ClaimedAt, time.Minute)
		assert.Equal(t, f.token(t, "", "key-a"), got[0].Token)
		assert.True(t, got[0].Abandoned, "its send ended without an answer")
		assert.Equal(t, "ended without a recorded answer", got[0].Send)
		assert.Equal(t, "acme", got[1].Tenant)
		assert.Equal(t, "key b", got[1].Key)
	})

	t.Run("tenant", func(t *testing.T) {
		code, stdout, stderr := f.ctl(t, "", "inflight", "--json", "--tenant", "acme")
		require.Equal(t, exitOK, code, stderr)
		assert.Equal(t, 1, strings.Count(stdout, "\n"), stdout)
		assert.Contains(t, stdout, b.ID)

		code, stdout, stderr = f.ctl(t, "", "--tenant", "", "inflight", "--json")
		require.Equal(t, exitOK, code, stderr)
		assert.Equal(t, 1, strings.Count(stdout, "\n"), stdout)
		assert.Contains(t, stdout, a.ID, "--tenant '' is the default tenant")

		code, stdout, stderr = f.ctl(t, "", "inflight", "--tenant", "nobody")
		require.Equal(t, exitOK, code, stderr)
		assert.Equal(t, "no keys in flight in tenant \"nobody\"\n", stdout, "says what it selected")
	})

	t.Run("older than", func(t *testing.T) {
		code, stdout, stderr := f.ctl(t, "", "inflight", "--older-than", "1h")
		require.Equal(t, exitOK, code, stderr)
		assert.Equal(t, "no keys in flight claimed at least 1h0m0s ago\n", stdout, "says what it selected: younger keys are in flight")

		time.Sleep(50 * time.Millisecond)
		code, stdout, stderr = f.ctl(t, "", "inflight", "--older-than", "20ms", "--json")
		require.Equal(t, exitOK, code, stderr)
		assert.Equal(t, 2, strings.Count(stdout, "\n"), stdout)
	})

	t.Run("limit", func(t *testing.T) {
		code, stdout, stderr := f.ctl(t, "", "inflight", "--limit", "1", "--json")
		require.Equal(t, exitOK, code, stderr)
		assert.Equal(t, 1, strings.Count(stdout, "\n"), stdout)
		assert.Contains(t, stdout, a.ID, "the oldest")
		assert.Equal(t, "1 shown, more in flight\n", stderr, "on stderr: stdout stays JSON")

		code, stdout, stderr = f.ctl(t, "", "inflight", "--limit", "1")
		require.Equal(t, exitOK, code, stderr)
		lines := strings.Split(strings.TrimSpace(stdout), "\n")
		require.Len(t, lines, 3, stdout)
		assert.Contains(t, lines[1], a.ID)
		assert.Equal(t, "1 shown, more in flight", lines[2], "never \"1 key in flight\" when there are 2")
		for _, limit := range []string{"2", "3"} {
			code, stdout, stderr = f.ctl(t, "", "inflight", "--limit", limit)
			require.Equal(t, exitOK, code, stderr)
			assert.True(t, strings.HasSuffix(stdout, "\n2 keys in flight\n"), "--limit %s: %s", limit, stdout)
			code, _, stderr = f.ctl(t, "", "inflight", "--limit", limit, "--json")
			require.Equal(t, exitOK, code, stderr)
			assert.Empty(t, stderr, "--limit %s: nothing left out", limit)
		}
	})
}

func TestShow(t *testing.T) {
	f := setup(t)
	a := f.leaveInFlight(t, "acme", "k1", newPayout(randomID()))
	b := newPayout(randomID())
	sent, _, err := f.send(t, "", "k2", b)
	require.NoError(t, err)

	t.Run("in flight", func(t *testing.T) {
		code, stdout, stderr := f.ctl(t, "", "show", "k1", "--tenant", "acme")
		require.Equal(t, exitOK, code, stderr)
		assert.Regexp(t, `tenant:\s+acme\n`, stdout)
		assert.Regexp(t, `request key:\s+k1\n`, stdout)
		assert.Regexp(t, `state:\s+in flight\n`, stdout)
		assert.Regexp(t, `withdrawal:\s+`+a.ID+`\n`, stdout)
		assert.Regexp(t, `amount:\s+25 EUR\n`, stdout)
		assert.Regexp(t, `token:\s+\d+\n`, stdout)
		assert.Regexp(t, `claimed at:\s+\S+ \(\d+s ago\)\n`, stdout)
		assert.NotContains(t, stdout, "outcome")
		assert.NotContains(t, stdout, "settled at")
	})

	t.Run("done", func(t *testing.T) {
		code, stdout, stderr := f.ctl(t, "", "show", "  k2 ")
		require.Equal(t, exitOK, code, stderr)
		assert.Regexp(t, `state:\s+done\n`, stdout)
		assert.Regexp(t, `settled at:\s+\S+\n`, stdout)
		assert.Contains(t, stdout, "outcome:\n  {\n    \"id\": \""+b.ID+"\",\n")
		assert.Contains(t, stdout, `"tx": "tx_`+b.ID+`"`)

		code, stdout, stderr = f.ctl(t, "", "show", "k2", "--json")
		require.Equal(t, exitOK, code, stderr)
		var rec recordJSON
		require.NoError(t, json.Unmarshal([]byte(stdout), &rec))
		assert.Equal(t, "done", rec.State)
		assert.NotNil(t, rec.SettledAt)
		want, err := json.Marshal(sent)
		require.NoError(t, err)
		assert.JSONEq(t, string(want), string(rec.Outcome))
	})

	t.Run("unknown", func(t *testing.T) {
		code, stdout, stderr := f.ctl(t, "", "show", "k1") // another tenant's
		assert.Equal(t, exitFailed, code)
		assert.Empty(t, stdout)
		assert.Equal(t, "submissionsctl: request key k1: not found in tenant \"\"\n", stderr)
	})
}

// writeOutcome writes v's JSON to a file and returns its name.
func writeOutcome(t *testing.T, v any) string {
	t.Helper()
	raw, err := json.MarshalIndent(v, "", "  ")
	require.NoError(t, err)
	name := filepath.Join(t.TempDir(), "outcome.json")
	require.NoError(t, os.WriteFile(name, raw, 0o600))
	return name
}

func TestResolve(t *testing.T) {
	f := setup(t)
	p := f.leaveInFlight(t, "acme", "k1", newPayout(randomID()))
	found := p
	found.State, found.Tx = "sent", "tx_seen_on_the_rail"
	file := writeOutcome(t, found)

	code, stdout, stderr := f.ctl(t, "", "resolve", "k1", "--tenant", "acme", "--outcome-file", file)
	require.Equal(t, exitOK, code, stderr)
	assert.Empty(t, stderr)
	assert.Regexp(t, `state:\s+in flight\n`, stdout, "the claim, shown")
	assert.Regexp(t, `resolved request key k1 in tenant \"acme\" \(token \d+\): its retries get this outcome\n$`, stdout)

	out, called, err := f.send(t, "acme", "k1", p)
	require.NoError(t, err)
	assert.False(t, called, "a retry replays the outcome")
	assert.Equal(t, found, out)

	t.Run("again", func(t *testing.T) {
		code, stdout, stderr := f.ctl(t, "", "--tenant", "acme", "resolve", "k1", "--outcome-file", file)
		require.Equal(t, exitOK, code, stderr)
		assert.Contains(t, stdout, "request key k1 in tenant \"acme\" already has this outcome: nothing changed\n")
	})

	t.Run("another outcome", func(t *testing.T) {
		other := found
		other.Tx = "tx_other"
		code, _, stderr := f.ctl(t, "", "--tenant", "acme", "resolve", "k1", "--outcome-file", writeOutcome(t, other))
		assert.Equal(t, exitFailed, code)
		assert.Equal(t, "submissionsctl: request key k1 has another outcome: nothing changed (an outcome is never replaced); next: show the key for the outcome it has\n", stderr)
	})

	t.Run("from stdin, spelled otherwise", func(t *testing.T) {
		q := f.leaveInFlight(t, "", "k2", newPayout(randomID()))
		body := `{"ID":"` + q.ID + `","amount":"025.0","currency":"eur","destination":"` + q.Destination + `","state":"sent"}`
		code, _, stderr := f.ctl(t, body, "resolve", "k2", "--outcome-file", "-")
		require.Equal(t, exitOK, code, stderr)
		assert.Empty(t, stderr)
		out, called, err := f.send(t, "", "k2", q)
		require.NoError(t, err)
		assert.False(t, called)
		assert.Equal(t, payout{ID: q.ID, Amount: "025.0", Currency: "eur", Destination: q.Destination, State: "sent"}, out,
			"exactly what the file held")
	})

	t.Run("bad files", func(t *testing.T) {
		f.leaveInFlight(t, "", "k3", newPayout(randomID()))
		for _, body := range []string{"", "{", "null", "not json"} {
			code, _, stderr := f.ctl(t, body, "resolve", "k3", "--outcome-file", "-")
			assert.Equal(t, exitFailed, code, "%q", body)
			assert.Regexp(t, `^submissionsctl: outcome file -: (not JSON|null is no outcome)\n$`, stderr)
		}
		code, _, stderr := f.ctl(t, "", "resolve", "k3", "--outcome-file", filepath.Join(t.TempDir(), "missing.json"))
		assert.Equal(t, exitFailed, code)
		assert.Contains(t, stderr, "submissionsctl: outcome file: open ")
		code, _, stderr = f.ctl(t, "", "resolve", "nokey", "--outcome-file", file)
		assert.Equal(t, exitFailed, code)
		assert.Equal(t, "submissionsctl: request key nokey has no record in the default tenant (never claimed there, or released): nothing changed; next: check the key and the tenant; list the keys in flight\n", stderr)
	})
}

// TestResolveRefusesAnotherWithdrawal: resolve writes nothing (exit 1) when
// the outcome file's withdrawal is not the claim's, compared as the ledger
// compares fingerprints, or when it lacks a field: it names the field, and
// the flag that names the field. The flags fit the service's own names.
func TestResolveRefusesAnotherWithdrawal(t *testing.T) {
	f := setup(t)
	p := f.leaveInFlight(t, "acme", "k1", newPayout(randomID()))
	other := newPayout(randomID())
	withFields := func(change func(m map[string]any)) string {
		m := map[string]any{"id": p.ID, "amount": p.Amount, "currency": p.Currency, "destination": p.Destination, "state": "sent", "tx": "tx_1"}
		change(m)
		raw, err := json.Marshal(m)
		require.NoError(t, err)
		return string(raw)
	}
	for _, tc := range []struct {
		name, body string
		flags      []string
		want       string
	}{
		{"another withdrawal", writeOutcome(t, other), nil,
			`the outcome is for withdrawal "` + other.ID + `", not the claim's "` + p.ID + `": nothing changed; next: .+`},
		{"another amount, currency and destination", withFields(func(m map[string]any) {
			m["amount"], m["currency"], m["destination"] = "25.01", "USD", "de89370400440532013000"
		}), nil, `the outcome differs from the claim's withdrawal: amount "25.01" is not the claim's "25", currency "USD" is not the claim's "EUR", ` +
			`destination "de89370400440532013000" is not the claim's "DE89370400440532013000": nothing changed; next: .+`},
		{"no id", `{"state":"sent"}`, nil, `the outcome has no member "id" \(--id-field names it\)`},
		{"no amount", withFields(func(m map[string]any) { delete(m, "amount") }), nil, `the outcome has no member "amount" \(--amount-field names it\)`},
		{"no currency by its flag's name", writeOutcome(t, p), []string{"--currency-field", "ccy"}, `the outcome has no member "ccy" \(--currency-field names it\)`},
		{"no destination by its flag's name", writeOutcome(t, p), []string{"--destination-field", "iban"}, `the outcome has no member "iban" \(--destination-field names it\)`},
		{"two ids", withFields(func(m map[string]any) { m["ID"] = other.ID }), nil,
			`the outcome has 2 members named "id" regardless of case: \["ID" "id"\] \(--id-field names it\)`},
		{"not a string", withFields(func(m map[string]any) { m["id"] = []string{p.ID} }), nil, `the outcome's "id" is neither a string nor a number \(--id-field names it\)`},
		{"not a valid withdrawal", withFields(func(m map[string]any) { m["amount"] = "-25" }), nil,
			`the outcome is not valid: invalid fingerprint: Amount: not a positive decimal of at most 100 bytes: nothing changed; next: .+`},
		{"not an object", `[{"id":"` + p.ID + `"}]`, nil, `the outcome is not a JSON object`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := tc.body
			if !strings.HasPrefix(file, "/") { // JSON, not a file's name
				file = "-"
			}
			args := append([]string{"resolve", "k1", "--tenant", "acme", "--outcome-file", file}, tc.flags...)
			code, stdout, stderr := f.ctl(t, tc.body, args...)
			assert.Equal(t, exitFailed, code)
			assert.Regexp(t, `state:\s+in flight\n`, stdout, "the claim, shown")
			assert.NotContains(t, stdout, "resolved")
			if strings.Contains(tc.want, "; next: ") { // the ledger's decision
				assert.Regexp(t, `^submissionsctl: `+tc.want+`\n$`, stderr)
			} else { // the file's members, read by the command line
				assert.Regexp(t, `^submissionsctl: outcome file `+regexp.QuoteMeta(file)+`: `+tc.want+`: nothing written\n$`, stderr)
			}
			_, called, err := f.send(t, "acme", "k1", p)
			require.ErrorIs(t, err, submissions.ErrSubmissionInFlight, "nothing written: still in flight")
			assert.False(t, called)
		})
	}

	t.Run("the service's names, by the flags", func(t *testing.T) {
		body := `{"withdrawal":"` + p.ID + `","sum":25,"ccy":"EUR","iban":"` + p.Destination + `","state":"sent"}`
		code, stdout, stderr := f.ctl(t, body, "resolve", "k1", "--tenant", "acme", "--outcome-file", "-",
			"--id-field", "withdrawal", "--amount-field", "sum", "--currency-field", "ccy", "--destination-field", "iban")
		require.Equal(t, exitOK, code, stderr)
		assert.Contains(t, stdout, "resolved request key k1")
	})
}

// reclaim releases key in tenant and leaves it in flight again, under a new
// claim of the same withdrawal.
func (f *fixture) reclaim(t *testing.T, tenant, key string, p payout) {
	t.Helper()
	require.NoError(t, f.ledger.Tenant(tenant).Release(context.Background(), key))
	f.leaveInFlight(t, tenant, key, p)
}

func TestResolveActsOnTheClaimItShows(t *testing.T) {
	f := setup(t)
	p := f.leaveInFlight(t, "", "k1", newPayout(randomID()))
	old := f.token(t, "", "k1")
	sent := p
	sent.State, sent.Tx = "sent", "tx_1"
	file := writeOutcome(t, sent)

	t.Run("claimed again between the look and the action", func(t *testing.T) {
		testHookAfterLookup = func() { f.reclaim(t, "", "k1", p) }
		defer func() { testHookAfterLookup = nil }()
		code, stdout, stderr := f.ctl(t, "", "resolve", "k1", "--outcome-file", file)
		assert.Equal(t, exitFailed, code)
		assert.Contains(t, stdout, "token:")
		assert.Regexp(t, `^submissionsctl: request key k1's claim is token \d+, not \d+: nothing changed; next: show the key, look at the rail for that claim, and act on the token shown\n$`, stderr,
			"acts on the claim it showed, not on the new one")
	})
	now := f.token(t, "", "k1")
	require.NotEqual(t, old, now)

	t.Run("an old token", func(t *testing.T) {
		code, stdout, stderr := f.ctl(t, "", "resolve", "k1", "--outcome-file", file, "--token", jsonNumber(old))
		assert.Equal(t, exitFailed, code)
		assert.Regexp(t, `state:\s+in flight\n`, stdout, "the claim, shown")
		assert.Regexp(t, `^submissionsctl: request key k1's claim is token \d+, not \d+: nothing changed; next: .+\n$`, stderr)
	})

	code, stdout, _ := f.ctl(t, "", "show", "k1")
	require.Equal(t, exitOK, code)
	assert.Regexp(t, `state:\s+in flight\n`, stdout, "the new claim is left as it is")

	code, _, stderr := f.ctl(t, "", "resolve", "k1", "--outcome-file", file, "--token", jsonNumber(now))
	require.Equal(t, exitOK, code, stderr)
}

func jsonNumber(n uint64) string {
	b, _ := json.Marshal(n)
	return string(b)
}

func TestRelease(t *testing.T) {
	f := setup(t)

	t.Run("declined", func(t *testing.T) {
		p := f.leaveInFlight(t, "acme", "k1", newPayout(randomID()))
		for _, answer := range []string{"n\n", "\n", "", "no\n", "maybe\n"} {
			code, stdout, stderr := f.ctl(t, answer, "release", "k1", "--tenant", "acme")
			assert.Equal(t, exitDeclined, code, "%q", answer)
			assert.Regexp(t, `state:\s+in flight\n`, stdout)
			assert.Equal(t, `release request key k1 of withdrawal `+p.ID+` in tenant "acme"? [y/N] submissionsctl: declined: nothing changed`+"\n", stderr)
		}
		_, _, err := f.send(t, "acme", "k1", p)
		assert.ErrorIs(t, err, submissions.ErrSubmissionInFlight, "still in flight")
	})

	t.Run("confirmed", func(t *testing.T) {
		for i, answer := range []string{"y\n", "YES\n", "y"} {
			key := fmt.Sprintf("k2-%d", i)
			p := f.leaveInFlight(t, "acme", key, newPayout(randomID()))
			code, stdout, stderr := f.ctl(t, answer, "release", key, "--tenant", "acme")
			require.Equal(t, exitOK, code, stderr)
			assert.Regexp(t, `released request key `+key+` in tenant "acme" \(token \d+\): withdrawal `+p.ID+` may be sent again\n$`, stdout)
			_, called, err := f.send(t, "acme", key+"-new", p)
			require.NoError(t, err)
			assert.True(t, called, "a new submit under another key sends the withdrawal")
		}
	})

	t.Run("yes", func(t *testing.T) {
		p := f.leaveInFlight(t, "", "k3", newPayout(randomID()))
		code, stdout, stderr := f.ctl(t, "", "release", "--yes", "k3")
		require.Equal(t, exitOK, code, stderr)
		assert.Empty(t, stderr, "no question")
		assert.Contains(t, stdout, "released request key k3")
		_, called, err := f.send(t, "", "k3", p)
		require.NoError(t, err)
		assert.True(t, called, "the key is free too")
	})

	t.Run("done key", func(t *testing.T) {
		_, _, err := f.send(t, "", "k4", newPayout(randomID()))
		require.NoError(t, err)
		code, stdout, stderr := f.ctl(t, "", "release", "k4")
		assert.Equal(t, exitFailed, code)
		assert.Empty(t, stdout)
		assert.Equal(t, "submissionsctl: request key k4 has an outcome, so its withdrawal was settled: a key with an outcome is never released; nothing changed; next: show the key for its outcome\n", stderr)
	})

	t.Run("claimed again while the operator answers", func(t *testing.T) {
		p := f.leaveInFlight(t, "", "k5", newPayout(randomID()))
		old := f.token(t, "", "k5")
		answer := &onRead{do: func() { f.reclaim(t, "", "k5", p) }, r: strings.NewReader("y\n")}
		code, _, stderr := f.ctlFrom(t, answer, "release", "k5")
		assert.Equal(t, exitFailed, code)
		assert.Regexp(t, `submissionsctl: request key k5's claim is token \d+, not \d+: nothing changed; next: .+\n$`, stderr,
			"releases the claim confirmed, not the new one")
		now := f.token(t, "", "k5")
		assert.NotEqual(t, old, now)

		code, _, stderr = f.ctl(t, "", "release", "k5", "--yes", "--token", jsonNumber(old))
		assert.Equal(t, exitFailed, code)
		assert.Contains(t, stderr, fmt.Sprintf("claim is token %d, not %d: nothing changed", now, old))
		_, _, err := f.send(t, "", "k5", p)
		assert.ErrorIs(t, err, submissions.ErrSubmissionInFlight, "the new claim is left as it is")
	})

	t.Run("unknown key", func(t *testing.T) {
		code, stdout, stderr := f.ctl(t, "", "release", "nokey", "--yes")
		assert.Equal(t, exitFailed, code, "refused, as resolve refuses it")
		assert.Empty(t, stdout)
		assert.Equal(t, "submissionsctl: request key nokey has no record in the default tenant (never claimed there, or released): nothing changed; next: check the key and the tenant; list the keys in flight\n", stderr)
	})
}

// onRead runs do before its first read.
type onRead struct {
	do   func()
	done bool
	r    io.Reader
}

func (o *onRead) Read(p []byte) (int, error) {
	if !o.done {
		o.done = true
		o.do()
	}
	return o.r.Read(p)
}

func TestUsage(t *testing.T) {
	t.Setenv("DATABASE_URL", "postgres://nobody@127.0.0.1:1/none") // never reached
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "no command"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"--nope", "inflight"}, "flag provided but not defined: -nope"},
		{[]string{"inflight", "--nope"}, "inflight: flag provided but not defined: -nope"},
		{[]string{"inflight", "extra"}, `inflight: unexpected argument "extra"`},
		{[]string{"inflight", "--older-than", "soon"}, `inflight: invalid value "soon" for flag -older-than`},
		{[]string{"inflight", "--older-than", "-1m"}, "inflight: --older-than and --limit must not be negative"},
		{[]string{"show"}, "show: expected KEY, got 0 arguments"},
		{[]string{"show", "a", "b"}, "show: expected KEY, got 2 arguments"},
		{[]string{"resolve", "k"}, "resolve: --outcome-file is required"},
		{[]string{"release"}, "release: expected KEY, got 0 arguments"},
		{[]string{"show", "k", "--table", "No-Such"}, `--table: pgstore: table name "No-Such"`},
		{[]string{"show", "k", "--tenant", "bad\x00"}, "--tenant: invalid tenant"},
		{[]string{"show", "k", "--database-url", "::not a url"}, "database URL: "},
	} {
		var stdout, stderr bytes.Buffer
		code := Run(context.Background(), tc.args, strings.NewReader(""), &stdout, &stderr)
		assert.Equal(t, exitUsage, code, "%q", tc.args)
		assert.Empty(t, stdout.String(), "%q", tc.args)
		assert.True(t, strings.HasPrefix(stderr.String(), "submissionsctl: "+tc.want), "%q: %s", tc.args, stderr.String())
		assert.Equal(t, 1, strings.Count(stderr.String(), "\n"), "one line: %q", stderr.String())
	}

	t.Run("help", func(t *testing.T) {
		for _, args := range [][]string{{"-h"}, {"help"}, {"release", "-h"}, {"--help"}} {
			var stdout, stderr bytes.Buffer
			code := Run(context.Background(), args, strings.NewReader(""), &stdout, &stderr)
			assert.Equal(t, exitOK, code, "%q", args)
			assert.Contains(t, stdout.String(), "Exit codes:\n  0  done: changed, or already as asked", "%q", args)
			assert.Empty(t, stderr.String())
		}
	})

	t.Run("no database URL", func(t *testing.T) {
		t.Setenv("DATABASE_URL", "")
		var stdout, stderr bytes.Buffer
		code := Run(context.Background(), []string{"inflight"}, strings.NewReader(""), &stdout, &stderr)
		assert.Equal(t, exitUsage, code)
		assert.Equal(t, "submissionsctl: no database: give --database-url or set DATABASE_URL (see submissionsctl -h)\n", stderr.String())
	})
}

func TestDatabaseUnreachable(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := Run(context.Background(), []string{"--database-url", "postgres://nobody@127.0.0.1:1/none?connect_timeout=2", "inflight"},
		strings.NewReader(""), &stdout, &stderr)
	assert.Equal(t, exitFailed, code)
	assert.True(t, strings.HasPrefix(stderr.String(), "submissionsctl: database: "), stderr.String())
	assert.Equal(t, 1, strings.Count(stderr.String(), "\n"))
}

func TestMissingTable(t *testing.T) {
	url := testURL(t)
	var stdout, stderr bytes.Buffer
	code := Run(context.Background(), []string{"--database-url", url, "--table", "ctl_never_made", "show", "k"},
		strings.NewReader(""), &stdout, &stderr)
	assert.Equal(t, exitFailed, code)
	assert.Contains(t, stderr.String(), "call Migrate")
}

func TestDatabaseURLFromEnvironment(t *testing.T) {
	f := setup(t)
	f.leaveInFlight(t, "", "k1", newPayout(randomID()))
	t.Setenv("DATABASE_URL", f.url)
	var stdout, stderr bytes.Buffer
	code := Run(context.Background(), []string{"--table", f.table, "inflight", "--json"}, strings.NewReader(""), &stdout, &stderr)
	require.Equal(t, exitOK, code, stderr.String())
	assert.Contains(t, stdout.String(), `"key":"k1"`)
}

// TestBinary runs the built command: its exit codes are the process's.
func TestBinary(t *testing.T) {
	f := setup(t)
	p := f.leaveInFlight(t, "", "k1", newPayout(randomID()))
	bin := filepath.Join(t.TempDir(), "submissionsctl")
	build := exec.Command("go", "build", "-o", bin, "../cmd/submissionsctl")
	build.Env = append(os.Environ(), "GOWORK=off")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)

	cmd := func(stdin string, args ...string) (int, string, string) {
		c := exec.Command(bin, args...)
		c.Env = append(os.Environ(), "DATABASE_URL="+f.url)
		c.Stdin = strings.NewReader(stdin)
		var stdout, stderr bytes.Buffer
		c.Stdout, c.Stderr = &stdout, &stderr
		err := c.Run()
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return exit.ExitCode(), stdout.String(), stderr.String()
		}
		require.NoError(t, err)
		return 0, stdout.String(), stderr.String()
	}
	code, stdout, stderr := cmd("", "--table", f.table, "inflight")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, p.ID)
	code, _, _ = cmd("n\n", "--table", f.table, "release", "k1")
	assert.Equal(t, 3, code)
	code, _, stderr = cmd("", "--table", f.table, "release")
	assert.Equal(t, 2, code, stderr)
	code, _, stderr = cmd("", "--table", f.table, "show", "nokey")
	assert.Equal(t, 1, code, stderr)
	code, stdout, stderr = cmd("y\n", "--table", f.table, "release", "k1")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "released request key k1")
}

// settledAgo moves the time key in tenant was settled back by d, as if it
// were settled d ago.
func (f *fixture) settledAgo(t *testing.T, tenant, key string, d time.Duration) {
	t.Helper()
	tag, err := f.pool.Exec(context.Background(), `UPDATE `+f.table+` SET settled_at = now() - $3::interval WHERE tenant = $1 AND request_key = $2`,
		tenant, key, d.String())
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())
}

func TestPrune(t *testing.T) {
	f := setup(t)
	old := newPayout(randomID())
	_, called, err := f.send(t, "acme", "k1", old)
	require.NoError(t, err)
	require.True(t, called)
	f.settledAgo(t, "acme", "k1", 48*time.Hour)
	recent := newPayout(randomID())
	_, _, err = f.send(t, "acme", "k4", recent)
	require.NoError(t, err)
	stuck := f.leaveInFlight(t, "acme", "k2", newPayout(randomID()))

	code, stdout, stderr := f.ctl(t, "", "prune", "--before", "72h")
	require.Equal(t, exitOK, code, stderr)
	assert.Regexp(t, `^pruned 0 records settled before `, stdout, "nothing settled three days ago")
	assert.Empty(t, stderr)

	code, stdout, stderr = f.ctl(t, "", "prune", "--before", "24h", "--batch", "1")
	require.Equal(t, exitOK, code, stderr)
	assert.Regexp(t, `^pruned 1 record settled before `, stdout, "the key settled two days ago; never the one in flight")
	assert.Empty(t, stderr, "no warning at the minimum retention")

	_, called, err = f.send(t, "acme", "k1", old)
	require.ErrorIs(t, err, submissions.ErrPruned, "a retry of the pruned key")
	assert.False(t, called)
	_, called, err = f.send(t, "acme", "k3", old)
	require.ErrorIs(t, err, submissions.ErrPruned, "another key for the pruned withdrawal")
	assert.False(t, called)
	code, _, stderr = f.ctl(t, "", "--tenant", "acme", "show", "k2")
	require.Equal(t, exitOK, code, stderr)
	_, called, err = f.send(t, "acme", "k2", stuck)
	require.ErrorIs(t, err, submissions.ErrSubmissionInFlight, "the key in flight is kept")
	assert.False(t, called)

	// kept stops t unless k4 still replays its outcome.
	kept := func(msg string) {
		t.Helper()
		out, called, err := f.send(t, "acme", "k4", recent)
		require.NoError(t, err, msg)
		assert.False(t, called, msg)
		assert.Equal(t, "sent", out.State, msg)
	}
	const risk = "a client retrying a pruned key gets 410/ErrPruned instead of its outcome; the key and withdrawal stay claimed for ever"
	time.Sleep(20 * time.Millisecond) // k4 settled before "10ms" ago, by the database's clock too
	future := time.Now().Add(time.Minute).UTC().Format(time.RFC3339)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--before", "10ms"}, `prune horizon too recent: \S+ is later than the minimum retention, 24h0m0s, ago: nothing pruned: ` + risk +
			`; give an older --before, or a lower --min-retention, or --force`},
		{[]string{"--before", "23h"}, `prune horizon too recent: \S+ is later than the minimum retention, 24h0m0s, ago: nothing pruned: `},
		{[]string{"--before", "10ms", "--min-retention", "1h"}, `prune horizon too recent: \S+ is later than the minimum retention, 1h0m0s, ago: nothing pruned: `},
		{[]string{"--before", future}, `prune horizon too recent: ` + future + ` is in the future: nothing pruned \(not even --force prunes after now\)`},
		{[]string{"--before", future, "--force"}, `prune horizon too recent: ` + future + ` is in the future: nothing pruned \(not even --force prunes after now\)`},
		{[]string{"--before", future, "--min-retention", "0s"}, `prune horizon too recent: ` + future + ` is in the future: `},
	} {
		code, stdout, stderr := f.ctl(t, "", append([]string{"prune"}, tc.args...)...)
		assert.Equal(t, exitFailed, code, "%q", tc.args)
		assert.Empty(t, stdout, "%q", tc.args)
		assert.Regexp(t, "^submissionsctl: "+tc.want, stderr, "%q", tc.args)
		assert.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %q", stderr)
		kept(fmt.Sprintf("%q", tc.args))
	}

	code, stdout, stderr = f.ctl(t, "", "prune", "--before", "1h", "--min-retention", "30m")
	require.Equal(t, exitOK, code, stderr)
	assert.Regexp(t, `^pruned 0 records settled before `, stdout, "k4 settled less than an hour ago")
	assert.Empty(t, stderr, "no warning when nothing was pruned")
	kept("--min-retention 30m")

	code, stdout, stderr = f.ctl(t, "", "prune", "--before", "10ms", "--force")
	require.Equal(t, exitOK, code, stderr)
	assert.Regexp(t, `^pruned 1 record settled before `, stdout)
	assert.Equal(t, "submissionsctl: warning: pruned with a horizon less than 24h0m0s ago: "+risk+"\n", stderr,
		"below the default minimum, what it risks")
	_, called, err = f.send(t, "acme", "k4", recent)
	require.ErrorIs(t, err, submissions.ErrPruned, "pruned by --force")
	assert.False(t, called)

	for _, args := range [][]string{{"prune"}, {"prune", "--before", "yesterday"}, {"prune", "--before", "-1h"}, {"prune", "--before", "1h", "--batch", "0"},
		{"prune", "--before", "48h", "--min-retention", "-1h"}, {"prune", "--before", "48h", "--min-retention", "a day"}} {
		code, _, stderr := f.ctl(t, "", args...)
		assert.Equal(t, exitUsage, code, "%q", args)
		assert.Regexp(t, `^submissionsctl: prune: `, stderr)
	}
}

// TestActionThatFailsExitsFour: a resolve or release whose store fails is
// admin's Failed, exit code 4, not a refusal's 1; a lookup that fails stops
// the command before it acts.
func TestActionThatFailsExitsFour(t *testing.T) {
	var stdout, stderr bytes.Buffer
	err := resultError{admin.Result{Decision: admin.Failed, Message: "store failed: boom: the release may or may not stand", Next: "show the key"}}
	assert.Equal(t, exitFailedAction, report(err, options{name: "submissionsctl"}, &stderr))
	assert.Equal(t, "submissionsctl: store failed: boom: the release may or may not stand; next: show the key\n", stderr.String())
	stderr.Reset()
	assert.Equal(t, exitFailed, report(resultError{admin.Result{Decision: admin.Refused, Message: "no"}}, options{name: "x"}, &stderr))
	assert.Empty(t, stdout.String())

	f := setup(t)
	f.leaveInFlight(t, "", "k1", newPayout(randomID()))
	code, out, errOut := f.ctl(t, "", "--table", "ctl_never_made_"+randomID(), "release", "k1", "--yes")
	assert.Equal(t, exitFailed, code, "the lookup failed: nothing was done unseen")
	assert.Empty(t, out)
	assert.NotContains(t, errOut, "released")
}
