package ledgertest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemledger/submissions"
	"github.com/idemledger/submissions/admin"
	"github.com/idemledger/submissions/driver"
)

// Operator actions: admin's Resolve and Release decide every action on a
// key, and say what they did: changed, unchanged, refused by a named rule,
// or failed; the words are the same on every store.
var operateTests = []test{
	{"ActionsDecideAndSay", testActionsDecideAndSay},
	{"ForcedResolveOfARunningSendLogsTheRailsAnswer", testForcedResolveOfARunningSendLogsTheRailsAnswer},
	{"AnOutcomeCheckRefusesEverywhere", testAnOutcomeCheckRefusesEverywhere},
	{"ActionsWhenTheStoreFails", testActionsWhenTheStoreFails},
	{"ReleaseOfARunningSendIsRefusedEvenForced", testReleaseOfARunningSendIsRefusedEvenForced},
	{"ActionsRacedBetweenTheLookAndTheAct", testActionsRacedBetweenTheLookAndTheAct},
}

// operate is one operator action and what it must do.
type operate struct {
	name  string
	setup func(t *testing.T, f *fixture) driver.Token // the key's state; its claim's token
	// act runs the action with admin a on target tg.
	act      func(a *admin.Admin[Withdrawal], tg admin.Target, f *fixture) admin.Result
	key      string // acted on instead of req-1, if not ""
	tenant   string
	token    func(driver.Token) driver.Token
	force    bool
	decision admin.Decision
	rule     admin.Rule
	field    string
	err      error  // what Result.Err wraps
	message  string // a regular expression; TOKEN is the claim's token
	state    string // Result.State
	after    func(t *testing.T, f *fixture)
}

func abandonedKey(t *testing.T, f *fixture) driver.Token {
	t.Helper()
	_, err := f.s.Submit(bg, "req-1", f.w, failing)
	require.ErrorIs(t, err, submissions.ErrOutcomeUnknown)
	rec, ok, err := f.store.Lookup(bg, "", "req-1")
	require.NoError(t, err)
	require.True(t, ok)
	require.True(t, rec.Abandoned)
	return rec.Token
}

func doneKey(t *testing.T, f *fixture) driver.Token {
	t.Helper()
	_, err := f.s.Submit(bg, "req-1", f.w, f.rail.send)
	require.NoError(t, err)
	return 0
}

func resolvedKey(t *testing.T, f *fixture) driver.Token {
	t.Helper()
	token := abandonedKey(t, f)
	require.NoError(t, f.s.Resolve(bg, "req-1", sentTx(f.w, "0xfirst")))
	return token
}

// claimedOnly claims req-1 through the store alone, as the ledger of a
// process that stopped mid-send leaves it: no send runs, none is known to
// have ended.
func claimedOnly(t *testing.T, f *fixture) driver.Token {
	t.Helper()
	fp, err := f.w.Fingerprint().Canonical()
	require.NoError(t, err)
	rec, claimed, err := f.store.Claim(bg, "", "req-1", fp, nil)
	require.NoError(t, err)
	require.True(t, claimed)
	return rec.Token
}

func none(*testing.T, *fixture) driver.Token { return 0 }

func resolveWith(out func(Withdrawal) Withdrawal) func(*admin.Admin[Withdrawal], admin.Target, *fixture) admin.Result {
	return func(a *admin.Admin[Withdrawal], tg admin.Target, f *fixture) admin.Result {
		return a.Resolve(bg, tg, out(f.w))
	}
}

func release(a *admin.Admin[Withdrawal], tg admin.Target, _ *fixture) admin.Result {
	return a.Release(bg, tg)
}

func sentWith(tx string) func(Withdrawal) Withdrawal {
	return func(w Withdrawal) Withdrawal { return sentTx(w, tx) }
}

var operations = []operate{
	{name: "resolve an abandoned claim", setup: abandonedKey, act: resolveWith(sentWith("0xop")),
		decision: admin.Changed, state: "in flight", message: `^resolved request key req-1 in the default tenant \(token TOKEN\): its retries get this outcome$`,
		after: func(t *testing.T, f *fixture) { requireOutcome(t, f.s, "req-1", sentTx(f.w, "0xop"), true) }},
	{name: "resolve again", setup: resolvedKey, act: resolveWith(sentWith("0xfirst")),
		decision: admin.Unchanged, state: "done", message: `^request key req-1 in the default tenant already has this outcome: nothing changed$`},
	{name: "resolve with another outcome", setup: resolvedKey, act: resolveWith(sentWith("0xother")),
		decision: admin.Refused, rule: admin.RuleAnotherOutcome, field: "outcome", err: submissions.ErrIdempotencyConflict, state: "done",
		message: `^request key req-1 has another outcome: nothing changed \(an outcome is never replaced\)$`,
		after:   func(t *testing.T, f *fixture) { requireOutcome(t, f.s, "req-1", sentTx(f.w, "0xfirst"), true) }},
	{name: "resolve with a changed amount", setup: abandonedKey,
		act:      resolveWith(func(w Withdrawal) Withdrawal { w.Amount = "26"; return sentTx(w, "0xop") }),
		decision: admin.Refused, rule: admin.RuleFieldDiffers, field: "amount", err: submissions.ErrIdempotencyConflict, state: "in flight",
		message: `^the outcome differs from the claim's withdrawal: amount "26" is not the claim's "25": nothing changed$`},
	{name: "resolve with changed currency and destination", setup: abandonedKey,
		act:      resolveWith(func(w Withdrawal) Withdrawal { w.Currency, w.Dest = "EUR", "0xdef"; return sentTx(w, "0xop") }),
		decision: admin.Refused, rule: admin.RuleFieldDiffers, field: "currency", err: submissions.ErrIdempotencyConflict, state: "in flight",
		message: `^the outcome differs from the claim's withdrawal: currency "EUR" is not the claim's "USDC", destination "0xdef" is not the claim's "0xabc": nothing changed$`},
	{name: "resolve with the amount spelled otherwise", setup: abandonedKey,
		act:      resolveWith(func(w Withdrawal) Withdrawal { w.Amount, w.Currency = "025.0", "usdc"; return sentTx(w, "0xop") }),
		decision: admin.Changed, state: "in flight", message: `^resolved request key req-1 `},
	{name: "resolve with another withdrawal", setup: abandonedKey,
		act:      resolveWith(func(w Withdrawal) Withdrawal { w.ID = "w-2"; return sentTx(w, "0xop") }),
		decision: admin.Refused, rule: admin.RuleOtherWithdrawal, field: "withdrawal_id", err: submissions.ErrIdempotencyConflict, state: "in flight",
		message: `^the outcome is for withdrawal "w-2", not the claim's "w-1": nothing changed$`},
	{name: "resolve with an invalid outcome", setup: abandonedKey,
		act:      resolveWith(func(w Withdrawal) Withdrawal { w.Amount = "-1"; return w }),
		decision: admin.Refused, rule: admin.RuleInvalidOutcome, field: "outcome", err: submissions.ErrInvalidFingerprint, state: "in flight",
		message: `^the outcome is not valid: invalid fingerprint: Amount: .+: nothing changed$`},
	{name: "resolve a claim no send is known to have ended", setup: claimedOnly, act: resolveWith(sentWith("0xop")),
		decision: admin.Refused, rule: admin.RuleSendMayRun, err: submissions.ErrSubmissionInFlight, state: "in flight",
		message: `^request key req-1's send is not known to have ended \(it may be running elsewhere: in another process, or under another ledger\): resolving it now records your outcome while the rail may still answer otherwise; nothing changed$`},
	{name: "resolve it forced", setup: claimedOnly, act: resolveWith(sentWith("0xop")), force: true,
		decision: admin.Changed, state: "in flight",
		message: `^resolved request key req-1 in the default tenant \(token TOKEN\): its retries get this outcome; if its send still answers, the answer is logged, not recorded$`},
	{name: "resolve an unknown key", setup: none, act: resolveWith(sentWith("0xop")),
		decision: admin.Refused, rule: admin.RuleUnknownKey, field: "key", err: submissions.ErrUnknownKey,
		message: `^request key req-1 has no record in the default tenant \(never claimed there, or released\): nothing changed$`,
		after:   func(t *testing.T, f *fixture) { requireOutcome(t, f.s, "req-1", Withdrawal{}, false) }},
	{name: "resolve with a wrong token", setup: abandonedKey, act: resolveWith(sentWith("0xop")),
		token:    func(tok driver.Token) driver.Token { return tok + 9 },
		decision: admin.Refused, rule: admin.RuleTokenDiffers, field: "token", err: admin.ErrClaimChanged, state: "in flight",
		message: `^request key req-1's claim is token TOKEN, not \d+: nothing changed$`},
	{name: "resolve with the right token", setup: abandonedKey, act: resolveWith(sentWith("0xop")),
		token:    func(tok driver.Token) driver.Token { return tok },
		decision: admin.Changed, state: "in flight", message: `^resolved request key req-1 in the default tenant \(token TOKEN\)`},
	{name: "resolve a pruned key", setup: prunedKey, act: resolveWith(sentWith("0xop")),
		decision: admin.Refused, rule: admin.RulePruned, err: submissions.ErrPruned, state: "pruned",
		message: `^request key req-1 was settled, then pruned: its outcome is no longer kept, and it is never resolved or released; nothing changed$`},
	{name: "resolve an empty key", setup: none, act: resolveWith(sentWith("0xop")), key: "  ",
		decision: admin.Refused, rule: admin.RuleInvalidKey, field: "key", err: submissions.ErrInvalidKey,
		message: `^the request key is not valid: invalid request key: empty: nothing changed$`},
	{name: "release an abandoned claim", setup: abandonedKey, act: release,
		decision: admin.Changed, state: "in flight", message: `^released request key req-1 in the default tenant \(token TOKEN\): withdrawal w-1 may be sent again$`,
		after: func(t *testing.T, f *fixture) { requireHolder(t, f.s, "w-1", "") }},
	{name: "release a done key", setup: doneKey, act: release,
		decision: admin.Refused, rule: admin.RuleHasOutcome, err: submissions.ErrIdempotencyConflict, state: "done",
		message: `^request key req-1 has an outcome, so its withdrawal was settled: a key with an outcome is never released; nothing changed$`},
	{name: "release a pruned key", setup: prunedKey, act: release,
		decision: admin.Refused, rule: admin.RulePruned, err: submissions.ErrPruned, state: "pruned",
		message: `^request key req-1 was settled, then pruned: `},
	{name: "release with a wrong token", setup: abandonedKey, act: release,
		token:    func(tok driver.Token) driver.Token { return tok + 9 },
		decision: admin.Refused, rule: admin.RuleTokenDiffers, field: "token", err: admin.ErrClaimChanged, state: "in flight",
		message: `^request key req-1's claim is token TOKEN, not \d+: nothing changed$`,
		after:   func(t *testing.T, f *fixture) { requireHolder(t, f.s, "w-1", "req-1") }},
	{name: "release an empty key", setup: none, act: release, key: " \t",
		decision: admin.Refused, rule: admin.RuleInvalidKey, field: "key", err: submissions.ErrInvalidKey,
		message: `^the request key is not valid: invalid request key: empty: nothing changed$`},
	{name: "release in an invalid tenant", setup: abandonedKey, act: release, tenant: "a\x00b",
		decision: admin.Refused, rule: admin.RuleInvalidTenant, field: "tenant", err: submissions.ErrInvalidTenant,
		message: `^the tenant is not valid: invalid tenant: has a NUL byte: nothing changed$`,
		after:   func(t *testing.T, f *fixture) { requireHolder(t, f.s, "w-1", "req-1") }},
	{name: "resolve in another tenant", setup: abandonedKey, act: resolveWith(sentWith("0xop")), tenant: "acme",
		decision: admin.Refused, rule: admin.RuleUnknownKey, field: "key", err: submissions.ErrUnknownKey,
		message: `^request key req-1 has no record in tenant "acme" \(never claimed there, or released\): nothing changed$`},
	{name: "release in another tenant", setup: abandonedKey, act: release, tenant: "acme",
		decision: admin.Refused, rule: admin.RuleUnknownKey, field: "key", err: submissions.ErrUnknownKey,
		message: `^request key req-1 has no record in tenant "acme" \(never claimed there, or released\): nothing changed$`,
		after:   func(t *testing.T, f *fixture) { requireHolder(t, f.s, "w-1", "req-1") }},
	{name: "release an unknown key", setup: none, act: release,
		decision: admin.Refused, rule: admin.RuleUnknownKey, field: "key", err: submissions.ErrUnknownKey,
		message: `^request key req-1 has no record in the default tenant \(never claimed there, or released\): nothing changed$`},
	{name: "release a claim no send is known to have ended", setup: claimedOnly, act: release,
		decision: admin.Refused, rule: admin.RuleSendMayRun, err: submissions.ErrSubmissionInFlight, state: "in flight",
		message: `^request key req-1's send is not known to have ended \(it may be running elsewhere: in another process, or under another ledger\): releasing it could send the withdrawal twice; nothing changed$`,
		after:   func(t *testing.T, f *fixture) { requireHolder(t, f.s, "w-1", "req-1") }},
	{name: "release it forced", setup: claimedOnly, act: release, force: true,
		decision: admin.Changed, state: "in flight", message: `^released request key req-1 in the default tenant \(token TOKEN\)`},
}

func prunedKey(t *testing.T, f *fixture) driver.Token {
	t.Helper()
	doneKey(t, f)
	time.Sleep(2 * time.Millisecond) // settled before the horizon, by any clock
	if _, ok := f.store.(driver.Pruner); !ok {
		t.Skipf("%T is not a driver.Pruner", f.store)
	}
	n, err := f.s.Admin().WithMinRetention(0).Prune(bg, time.Now(), 0)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	return 0
}

func testActionsDecideAndSay(t *testing.T, newStore Factory) {
	for _, c := range operations {
		t.Run(c.name, func(t *testing.T) {
			f := setUp(t, newStore)
			token := c.setup(t, f)
			tg := admin.Target{Tenant: c.tenant, Key: "req-1", Force: c.force}
			if c.key != "" {
				tg.Key = c.key
			}
			if c.token != nil {
				tg.Token = c.token(token)
			}
			sends := f.rail.calls.Load()
			res := c.act(f.s.Admin(), tg, f)
			assert.Equal(t, c.decision.String(), res.Decision.String(), "decision: %s", res.Message)
			assert.Equal(t, c.rule, res.Rule)
			assert.Equal(t, c.field, res.Field)
			assert.Equal(t, c.state, res.State)
			want := regexp.MustCompile(regexp.QuoteMeta("TOKEN")).ReplaceAllString(c.message, fmt.Sprint(token))
			assert.Regexp(t, want, res.Message)
			assert.Equal(t, c.decision == admin.Changed || c.decision == admin.Unchanged, res.OK())
			if c.err != nil {
				assert.ErrorIs(t, res.Err, c.err)
				assert.NotEmpty(t, res.Next, "a refusal says what to do next")
			} else {
				assert.NoError(t, res.Err)
			}
			assert.Equal(t, c.decision == admin.Refused, res.Decision == admin.Refused && res.Err != nil)
			if c.after != nil {
				c.after(t, f)
			}
			assert.Equal(t, sends, f.rail.calls.Load(), "an operator's action sends nothing")
		})
	}
}

// A send that runs while an operator resolves its claim with force: the
// operator's outcome is the key's, and the rail's answer, another, comes
// back to its caller not recorded, is logged at Error in full, and the claim
// is not touched again.
func testForcedResolveOfARunningSendLogsTheRailsAnswer(t *testing.T, newStore Factory) {
	f := setUp(t, newStore)
	started, finish := make(chan struct{}), make(chan struct{})
	type result struct {
		out Withdrawal
		err error
	}
	done := make(chan result)
	go func() {
		out, err := f.s.Submit(bg, "req-1", f.w, func(ctx context.Context, w Withdrawal) (Withdrawal, error) {
			close(started)
			<-finish
			return sentTx(w, "0xrail"), nil
		})
		done <- result{out, err}
	}()
	<-started
	res := f.s.Admin().Resolve(bg, admin.Target{Key: "req-1"}, sentTx(f.w, "0xop"))
	require.Equal(t, admin.Refused, res.Decision, res.Message)
	assert.Equal(t, admin.RuleSendMayRun, res.Rule)
	claims, err := f.s.Admin().InFlight(bg, admin.InFlightQuery{})
	if !errors.Is(err, admin.ErrNotSupported) {
		require.NoError(t, err)
		require.Len(t, claims, 1)
		assert.True(t, claims[0].Sending, "listed as sending")
		assert.Equal(t, admin.SendRunning, claims[0].Send())
	}

	res = f.s.Admin().Resolve(bg, admin.Target{Key: "req-1", Force: true}, sentTx(f.w, "0xop"))
	require.Equal(t, admin.Changed, res.Decision, res.Message)
	assert.True(t, res.Claim.Sending, "the claim was sending when resolved")
	close(finish)
	got := <-done
	require.ErrorIs(t, got.err, submissions.ErrOutcomeNotRecorded)
	require.ErrorIs(t, got.err, submissions.ErrResolvedMeanwhile)
	assert.Equal(t, sentTx(f.w, "0xrail"), got.out, "the rail's answer comes back to its caller")
	f.logs.requireAnswerLogged(t, slog.LevelError, "req-1", "w-1", "0xrail")
	requireOutcome(t, f.s, "req-1", sentTx(f.w, "0xop"), true)
}

// An Admin with an outcome check refuses, with the check's words, what the
// check refuses, through Resolve and ResolveClaim alike.
func testAnOutcomeCheckRefusesEverywhere(t *testing.T, newStore Factory) {
	f := setUp(t, newStore)
	token := abandonedKey(t, f)
	errNoTx := errors.New(`state "sent" without its tx`)
	a := f.s.Admin().WithOutcomeCheck(func(w Withdrawal) error {
		if w.State == "sent" && w.TxHash == "" {
			return errNoTx
		}
		return nil
	})
	res := a.Resolve(bg, admin.Target{Key: "req-1"}, sentTx(f.w, ""))
	assert.Equal(t, admin.Refused, res.Decision)
	assert.Equal(t, admin.RuleInvalidOutcome, res.Rule)
	assert.ErrorIs(t, res.Err, admin.ErrInvalidOutcome)
	assert.ErrorIs(t, res.Err, errNoTx)
	assert.Equal(t, `the outcome is not valid: state "sent" without its tx: nothing changed`, res.Message)
	err := a.ResolveClaim(bg, admin.Claim{Key: "req-1", Token: token}, sentTx(f.w, ""))
	assert.ErrorIs(t, err, admin.ErrInvalidOutcome)
	requireOutcome(t, f.s, "req-1", Withdrawal{}, false)
	assert.Equal(t, admin.Changed, f.s.Admin().Resolve(bg, admin.Target{Key: "req-1"}, sentTx(f.w, "")).Decision,
		"the check is the copy's alone")
	res = a.Resolve(bg, admin.Target{Key: "req-1"}, sentTx(f.w, ""))
	assert.Equal(t, admin.Refused, res.Decision, "checked before anything else")
}

// A store that fails: the action failed, it may or may not stand, and the
// operator is told to look.
func testActionsWhenTheStoreFails(t *testing.T, newStore Factory) {
	f := setUp(t, newStore)
	abandonedKey(t, f)
	s := submissions.NewWithStore[Withdrawal](failingLookups{f.store}, submissions.WithLogger(quiet))
	for _, res := range []admin.Result{
		s.Admin().Resolve(bg, admin.Target{Key: "req-1"}, sentTx(f.w, "0xop")),
		s.Admin().Release(bg, admin.Target{Key: "req-1"}),
	} {
		assert.Equal(t, admin.Failed, res.Decision)
		assert.Equal(t, admin.RuleStoreFailed, res.Rule)
		assert.ErrorIs(t, res.Err, submissions.ErrStoreFailed)
		assert.Contains(t, res.Message, "nothing changed")
		assert.NotEmpty(t, res.Next)
	}
	ctx, cancel := context.WithCancel(bg)
	cancel()
	res := f.s.Admin().Release(ctx, admin.Target{Key: "req-1"})
	assert.Equal(t, admin.Failed, res.Decision)
	assert.Equal(t, admin.RuleContextEnded, res.Rule)
	assert.ErrorIs(t, res.Err, context.Canceled)
	requireKeptClaim(t, f.s, "req-1", f.w)
}

// failingLookups is a store whose Lookup fails.
type failingLookups struct{ driver.Store[Withdrawal] }

func (failingLookups) Lookup(context.Context, string, string) (driver.Record[Withdrawal], bool, error) {
	return driver.Record[Withdrawal]{}, false, errors.New("connection refused")
}

// A release of a claim this ledger is sending is refused, with force too:
// it could send the withdrawal twice.
func testReleaseOfARunningSendIsRefusedEvenForced(t *testing.T, newStore Factory) {
	f := setUp(t, newStore)
	started, finish, done := make(chan struct{}), make(chan struct{}), make(chan error)
	go func() {
		_, err := f.s.Submit(bg, "req-1", f.w, func(ctx context.Context, w Withdrawal) (Withdrawal, error) {
			close(started)
			<-finish
			return f.rail.send(ctx, w)
		})
		done <- err
	}()
	<-started
	for _, force := range []bool{false, true} {
		res := f.s.Admin().Release(bg, admin.Target{Key: "req-1", Force: force})
		assert.Equal(t, admin.Refused, res.Decision, "force %v", force)
		assert.Equal(t, admin.RuleSendRunning, res.Rule, "force %v", force)
		assert.ErrorIs(t, res.Err, submissions.ErrSubmissionInFlight)
		assert.Equal(t, "request key req-1's send is running in this process: releasing it could send the withdrawal twice; nothing changed", res.Message)
	}
	close(finish)
	require.NoError(t, <-done, "the send's answer is recorded: nothing was released")
	f.rail.requireSends(t, 1)
}

// lookHook is a store that runs a hook once, right after its next Lookup:
// another instance acting between an operator's look and act.
type lookHook struct {
	driver.Store[Withdrawal]
	hook func()
}

func (s *lookHook) Lookup(ctx context.Context, tenant, key string) (driver.Record[Withdrawal], bool, error) {
	rec, ok, err := s.Store.Lookup(ctx, tenant, key)
	if h := s.hook; h != nil {
		s.hook = nil
		h()
	}
	return rec, ok, err
}

// Another instance closes or changes the claim between an action's look and
// its act: the action changes nothing, and says what happened.
func testActionsRacedBetweenTheLookAndTheAct(t *testing.T, newStore Factory) {
	for _, c := range []struct {
		name    string
		meddle  func(s *submissions.Submissions[Withdrawal], w Withdrawal)
		act     func(a *admin.Admin[Withdrawal], w Withdrawal) admin.Result
		rule    admin.Rule
		message string
	}{
		{"release raced by a resolve",
			func(s *submissions.Submissions[Withdrawal], w Withdrawal) {
				require.NoError(t, s.Resolve(bg, "req-1", sentTx(w, "0xother")))
			},
			func(a *admin.Admin[Withdrawal], _ Withdrawal) admin.Result {
				return a.Release(bg, admin.Target{Key: "req-1"})
			},
			admin.RuleHasOutcome, "request key req-1 was resolved while the release ran, so its withdrawal was settled: a key with an outcome is never released; nothing changed"},
		{"resolve raced by another outcome",
			func(s *submissions.Submissions[Withdrawal], w Withdrawal) {
				require.NoError(t, s.Resolve(bg, "req-1", sentTx(w, "0xother")))
			},
			func(a *admin.Admin[Withdrawal], w Withdrawal) admin.Result {
				return a.Resolve(bg, admin.Target{Key: "req-1"}, sentTx(w, "0xop"))
			},
			admin.RuleAnotherOutcome, "request key req-1 was resolved with another outcome while the resolve ran: nothing changed by this action"},
		{"resolve raced by a release",
			func(s *submissions.Submissions[Withdrawal], _ Withdrawal) { require.NoError(t, s.Release(bg, "req-1")) },
			func(a *admin.Admin[Withdrawal], w Withdrawal) admin.Result {
				return a.Resolve(bg, admin.Target{Key: "req-1"}, sentTx(w, "0xop"))
			},
			admin.RuleClaimChanged, "request key req-1's claim changed while the resolve ran (released, resolved or claimed again): this action changed nothing"},
		{"release raced by a release and a new claim",
			func(s *submissions.Submissions[Withdrawal], w Withdrawal) {
				require.NoError(t, s.Release(bg, "req-1"))
				_, err := s.Submit(bg, "req-1", w, failing)
				require.ErrorIs(t, err, submissions.ErrOutcomeUnknown)
			},
			func(a *admin.Admin[Withdrawal], _ Withdrawal) admin.Result {
				return a.Release(bg, admin.Target{Key: "req-1"})
			},
			admin.RuleClaimChanged, "request key req-1's claim changed while the release ran (released, resolved or claimed again): this action changed nothing"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := setUp(t, newStore)
			abandonedKey(t, f)
			other := submissions.NewWithStore[Withdrawal](f.store, submissions.WithLogger(quiet))
			hooked := &lookHook{Store: f.store}
			s := submissions.NewWithStore[Withdrawal](hooked, submissions.WithLogger(quiet))
			hooked.hook = func() { c.meddle(other, f.w) }
			res := c.act(s.Admin(), f.w)
			assert.Equal(t, admin.Refused, res.Decision, res.Message)
			assert.Equal(t, c.rule, res.Rule)
			assert.Equal(t, c.message, res.Message)
			assert.NotEmpty(t, res.Next)
		})
	}
}
