package ledgertest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemledger/submissions"
	"github.com/idemledger/submissions/admin"
	"github.com/idemledger/submissions/driver"
	"github.com/idemledger/submissions/internal/figures"
)

// Fault injection: every operation of the ledger is run once without faults
// to count its store calls, then again from the same starting state with one
// fault at each of those calls in turn, of each kind. After every fault the
// test checks that the rail moved money at most once, that money that moved
// is still claimed, and that the error's class says what is known; then it
// recovers the way an operator would, checks that the withdrawal ends sent
// exactly once with the rail's answer recorded, and that the ledger's own
// bookkeeping is whole.

// faultKind is a way a store call fails.
type faultKind int

const (
	// faultError: the call never reaches the store (a refused connection).
	faultError faultKind = iota
	// faultTimeout: the call runs under a deadline that has already passed.
	// A store that honours it fails having done nothing; one that does not
	// (the memory store) acts, and the reply comes too late: the caller gets
	// context.DeadlineExceeded either way.
	faultTimeout
	// faultCancel: the caller's context is cancelled as the call starts, and
	// stays cancelled for the rest of the operation. As with a timeout, the
	// store may or may not act; the caller gets context.Canceled.
	faultCancel
	// faultReplyLost: the call runs and takes effect, then its reply is lost
	// (the connection drops after the commit): the caller gets an error.
	faultReplyLost
	// faultPanic: the call panics before it reaches the store.
	faultPanic
	// faultPanicAfter: the call takes effect, then panics (a codec that
	// panics decoding the reply, say).
	faultPanicAfter
	faultKinds
)

// errPanic is the value an injected panic panics with.
var errPanic = errors.New("storetest: injected panic")

var (
	errInjected = errors.New("storetest: injected store failure (connection refused)")
	errLost     = errors.New("storetest: injected lost reply (connection reset)")
)

func (k faultKind) String() string {
	return [...]string{"error", "timeout", "cancelled", "reply lost", "panic", "panic after acting"}[k]
}

// target is the error the operation's error must wrap after a fault of k,
// or the value it panics with.
func (k faultKind) target() error {
	return [...]error{errInjected, context.DeadlineExceeded, context.Canceled, errLost, errPanic, errPanic}[k]
}

func (k faultKind) panics() bool { return k == faultPanic || k == faultPanicAfter }

// injector wraps a store: it counts the calls made through it and fails the
// one numbered at (from 1), once. A ledger runs it as it runs any Store.
type injector struct {
	store driver.Store[Withdrawal]

	mu       sync.Mutex
	calls    int                // store calls since the count was reset
	detached bool               // the faulted call's context was one the cancellation of its caller's did not reach
	at       int                // the call to fail; 0: none
	kind     faultKind          // how it fails
	cancel   context.CancelFunc // cancels the operation's context, for faultCancel
	fired    string             // the method that failed, once it has
	acted    bool               // the failed call ran in the store, which answered
}

// arm resets the count and fails call at (0: none) with kind.
func (f *injector) arm(at int, kind faultKind, cancel context.CancelFunc) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls, f.at, f.kind, f.cancel, f.fired, f.acted, f.detached = 0, at, kind, cancel, "", false, false
}

// count returns the calls made since arm, the method faulted ("" if none),
// and whether the faulted call acted in the store.
func (f *injector) count() (calls int, fired string, acted bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls, f.fired, f.acted
}

// inject runs one store call, call, through f: as it is, or with the fault.
func inject[T any](ctx context.Context, f *injector, method string, call func(context.Context) (T, error)) (T, error) {
	f.mu.Lock()
	f.calls++
	n := f.calls
	fault := n == f.at
	kind, cancel := f.kind, f.cancel
	if fault {
		f.fired = method
	}
	f.mu.Unlock()
	if !fault {
		return call(ctx)
	}
	var zero T
	var err error
	prefix := fmt.Sprintf("storetest: %s at store call %d (%s)", kind, n, method)
	switch kind {
	case faultError:
		return zero, fmt.Errorf("%s: %w", prefix, errInjected)
	case faultTimeout:
		expired, stop := context.WithDeadline(ctx, time.Now().Add(-time.Second))
		defer stop()
		_, err = call(expired)
		f.setActed(!errors.Is(err, expired.Err()))
		return zero, ended(prefix, err, expired.Err())
	case faultCancel:
		cancel()
		if ctx.Err() == nil {
			// The ledger made the call on a context of its own, which
			// outlives its caller's: it runs as without the fault.
			f.mu.Lock()
			f.detached = true
			f.mu.Unlock()
			return call(ctx)
		}
		_, err = call(ctx)
		f.setActed(!errors.Is(err, ctx.Err()))
		return zero, ended(prefix, err, ctx.Err())
	case faultPanic:
		panic(errPanic)
	case faultPanicAfter:
		_, _ = call(ctx)
		f.setActed(true)
		panic(errPanic)
	case faultReplyLost:
		_, err = call(ctx)
		f.setActed(true)
		return zero, fmt.Errorf("%s: %s, and its reply was lost: %w", prefix, answered(err), errLost)
	}
	panic(fmt.Sprintf("storetest: fault kind %d", kind))
}

func (f *injector) setActed(acted bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.acted = acted
}

// ended is the error of a call made with an ended context, whose own error
// was err: it wraps ctxErr alone, whether the store noticed the context
// (err wraps ctxErr) or answered, its answer coming too late to be read.
func ended(prefix string, err, ctxErr error) error {
	switch {
	case ctxErr == nil:
		panic(prefix + ": the context has not ended")
	case errors.Is(err, ctxErr):
		return fmt.Errorf("%s: %w", prefix, err)
	}
	return fmt.Errorf("%s: %s after the context ended: %w", prefix, answered(err), ctxErr)
}

// answered says how a store answered: with err, or without an error.
func answered(err error) string {
	if err == nil {
		return "the store acted"
	}
	return fmt.Sprintf("the store answered %q", err)
}

type reply struct {
	rec driver.Record[Withdrawal]
	ok  bool
}

func (f *injector) Claim(ctx context.Context, tenant, key string, fp submissions.Fingerprint, outcome *Withdrawal) (driver.Record[Withdrawal], bool, error) {
	r, err := inject(ctx, f, "Claim", func(ctx context.Context) (reply, error) {
		rec, ok, err := f.store.Claim(ctx, tenant, key, fp, outcome)
		return reply{rec, ok}, err
	})
	return r.rec, r.ok, err
}

func (f *injector) Settle(ctx context.Context, tenant, key string, token driver.Token, outcome Withdrawal) (driver.Record[Withdrawal], bool, error) {
	r, err := inject(ctx, f, "Settle", func(ctx context.Context) (reply, error) {
		rec, ok, err := f.store.Settle(ctx, tenant, key, token, outcome)
		return reply{rec, ok}, err
	})
	return r.rec, r.ok, err
}

func (f *injector) Release(ctx context.Context, tenant, key string, token driver.Token) (driver.Record[Withdrawal], bool, error) {
	r, err := inject(ctx, f, "Release", func(ctx context.Context) (reply, error) {
		rec, ok, err := f.store.Release(ctx, tenant, key, token)
		return reply{rec, ok}, err
	})
	return r.rec, r.ok, err
}

func (f *injector) Lookup(ctx context.Context, tenant, key string) (driver.Record[Withdrawal], bool, error) {
	r, err := inject(ctx, f, "Lookup", func(ctx context.Context) (reply, error) {
		rec, ok, err := f.store.Lookup(ctx, tenant, key)
		return reply{rec, ok}, err
	})
	return r.rec, r.ok, err
}

func (f *injector) ClaimedBy(ctx context.Context, tenant, withdrawalID string) (string, bool, error) {
	type holder struct {
		key string
		ok  bool
	}
	r, err := inject(ctx, f, "ClaimedBy", func(ctx context.Context) (holder, error) {
		key, ok, err := f.store.ClaimedBy(ctx, tenant, withdrawalID)
		return holder{key, ok}, err
	})
	return r.key, r.ok, err
}

// result is what an operation returned.
type result struct {
	out      Withdrawal // Submit's outcome, Outcome's outcome
	ok       bool       // Outcome's and ClaimedBy's ok
	holder   string     // ClaimedBy's key
	err      error
	panicked any // what the operation panicked with, if it did
}

// opKind says what an operation is, for its checks and its recovery.
type opKind int

const (
	opSubmit opKind = iota
	opResolve
	opRelease
	opRead
)

// injectCase is an operation of the ledger from a starting state.
type injectCase struct {
	name  string
	kind  opKind
	key   string                                               // the request key it uses, "" for none
	start func(t *testing.T, s *ledger, r *rail)               // brings the store to the starting state
	op    func(ctx context.Context, s *ledger, r *rail) result // the operation
	want  func(t *testing.T, res result)                       // checks its answer without faults
}

type ledger = submissions.Submissions[Withdrawal]

var (
	injW      = newWithdrawal("w-1")
	injAnswer = sentTx(injW, "0xtx-w-1") // what the rail answers for injW
)

// Starting states. The rail's count says whether money moved.
func startEmpty(*testing.T, *ledger, *rail) {}

func startDone(t *testing.T, s *ledger, r *rail) {
	t.Helper()
	_, err := s.Submit(bg, "req-1", injW, r.send)
	require.NoError(t, err, "start: Submit")
}

// startInFlightSent: the rail moved the money, then the send failed.
func startInFlightSent(t *testing.T, s *ledger, r *rail) {
	t.Helper()
	_, err := s.Submit(bg, "req-1", injW, func(ctx context.Context, w Withdrawal) (Withdrawal, error) {
		_, _ = r.send(ctx, w)
		return Withdrawal{}, errRail
	})
	require.ErrorIs(t, err, errRail)
}

// startInFlightUnsent: the send failed before the rail moved anything.
func startInFlightUnsent(t *testing.T, s *ledger, _ *rail) {
	t.Helper()
	strand(t, s, "req-1", injW)
}

// startSentOutside: the rail moved the money, and the ledger has no record
// (sent before the ledger was in place, say): an operator resolves it.
func startSentOutside(_ *testing.T, _ *ledger, r *rail) {
	_, _ = r.send(bg, injW)
}

func submitOp(key string) func(context.Context, *ledger, *rail) result {
	return func(ctx context.Context, s *ledger, r *rail) result {
		out, err := s.Submit(ctx, key, injW, r.send)
		return result{out: out, err: err}
	}
}

func resolveOp(ctx context.Context, s *ledger, _ *rail) result {
	return result{err: s.Resolve(ctx, "req-1", injAnswer)}
}

func releaseOp(ctx context.Context, s *ledger, _ *rail) result {
	return result{err: s.Release(ctx, "req-1")}
}

func outcomeOp(ctx context.Context, s *ledger, _ *rail) result {
	out, ok, err := s.Outcome(ctx, "req-1")
	return result{out: out, ok: ok, err: err}
}

func claimedByOp(ctx context.Context, s *ledger, _ *rail) result {
	holder, ok, err := s.ClaimedBy(ctx, injW.ID)
	return result{ok: ok, holder: holder, err: err}
}

func wantAnswer(t *testing.T, res result) {
	require.NoError(t, res.err)
	require.Equal(t, injAnswer, res.out)
}

func wantNil(t *testing.T, res result) { require.NoError(t, res.err) }

func wantIs(target error) func(*testing.T, result) {
	return func(t *testing.T, res result) { requireRefusal(t, res.err, target) }
}

func wantHeldByReq1(t *testing.T, res result) {
	requireConflict(t, res.err, "req-1")
	require.Zero(t, res.out)
}

var injectCases = []injectCase{
	{"SubmitFreshKey", opSubmit, "req-1", startEmpty, submitOp("req-1"), wantAnswer},
	{"SubmitReplayOfADoneKey", opSubmit, "req-1", startDone, submitOp("req-1"), wantAnswer},
	{"SubmitSecondKeyForADoneWithdrawal", opSubmit, "req-2", startDone, submitOp("req-2"), wantHeldByReq1},
	{"SubmitSecondKeyForAnInFlightWithdrawal", opSubmit, "req-2", startInFlightSent, submitOp("req-2"), wantHeldByReq1},
	{"SubmitInFlightKey", opSubmit, "req-1", startInFlightSent, submitOp("req-1"), wantIs(submissions.ErrSubmissionInFlight)},
	{"SubmitNotSent", opSubmit, "req-1", startEmpty, func(ctx context.Context, s *ledger, _ *rail) result {
		out, err := s.Submit(ctx, "req-1", injW, func(context.Context, Withdrawal) (Withdrawal, error) { return Withdrawal{}, errBusy })
		return result{out: out, err: err}
	}, func(t *testing.T, res result) { requireNotSent(t, res.err) }},
	{"ResolveInFlightKey", opResolve, "req-1", startInFlightSent, resolveOp, wantNil},
	{"ResolveFreshKey", opResolve, "req-1", startSentOutside, resolveOp, wantNil},
	{"ResolveDoneKey", opResolve, "req-1", startDone, resolveOp, wantNil},
	{"ReleaseInFlightKey", opRelease, "req-1", startInFlightUnsent, releaseOp, wantNil},
	{"ReleaseDoneKey", opRelease, "req-1", startDone, releaseOp, wantIs(submissions.ErrIdempotencyConflict)},
	{"Outcome", opRead, "req-1", startDone, outcomeOp, func(t *testing.T, res result) {
		require.NoError(t, res.err)
		require.True(t, res.ok)
		require.Equal(t, injAnswer, res.out)
	}},
	{"ClaimedBy", opRead, "", startDone, claimedByOp, func(t *testing.T, res result) {
		require.NoError(t, res.err)
		require.True(t, res.ok)
		require.Equal(t, "req-1", res.holder)
	}},
}

// faultTests is the fault injection group of the suite.
var faultTests = []test{
	{"FaultAtEveryStoreCall", testFaultAtEveryStoreCall},
}

// injectTally counts what the test did.
type injectTally struct {
	faults, positions, ops, acted, panics int
}

func testFaultAtEveryStoreCall(t *testing.T, newStore Factory) {
	var tally injectTally
	for _, c := range injectCases {
		t.Run(c.name, func(t *testing.T) {
			// Without faults: count the operation's store calls.
			f, s, r := injectSetUp(t, newStore, c)
			f.arm(0, 0, nil)
			res := run(bg, c, s, r)
			calls, _, _ := f.count()
			c.want(t, res)
			require.NotZero(t, calls, "without faults: the operation's store calls")
			tally.ops++
			tally.positions += calls
			for at := 1; at <= calls; at++ {
				for kind := range faultKinds {
					t.Run(fmt.Sprintf("call%d-%s", at, strings.ReplaceAll(kind.String(), " ", "-")), func(t *testing.T) {
						acted := injectOne(t, newStore, c, at, kind)
						tally.faults++
						if acted {
							tally.acted++
						}
						if kind.panics() {
							tally.panics++
						}
					})
				}
			}
		})
	}
	if t.Failed() {
		return
	}
	figures.Add(t, "inject: %d faults (%d of them panics) at %d positions over %d operations (%d after the store had acted); no second send, no lost claim, every error of the class that says what is known, the ledger whole after each",
		tally.faults, tally.panics, tally.positions, tally.ops, tally.acted)
}

// run runs c's operation, and recovers what it panics with into the result.
func run(ctx context.Context, c injectCase, s *ledger, r *rail) (res result) {
	defer func() {
		if p := recover(); p != nil {
			res = result{panicked: p}
		}
	}()
	return c.op(ctx, s, r)
}

// injectSetUp returns a new store behind an injector, a ledger on it, and a
// rail, in c's starting state.
func injectSetUp(t *testing.T, newStore Factory, c injectCase) (*injector, *ledger, *rail) {
	t.Helper()
	f := &injector{store: newStore(t)}
	s := submissions.NewWithStore[Withdrawal](f, submissions.WithLogger(quiet))
	r := &rail{}
	c.start(t, s, r)
	return f, s, r
}

// snapshot is what the store holds about the test's keys and withdrawal.
type snapshot struct {
	recs   map[string]driver.Record[Withdrawal] // by key, if recorded
	holder string                               // of injW, "" if none
}

func snapshotOf(t *testing.T, st driver.Store[Withdrawal]) snapshot {
	t.Helper()
	snap := snapshot{recs: map[string]driver.Record[Withdrawal]{}}
	for _, key := range []string{"req-1", "req-2"} {
		rec, ok, err := st.Lookup(bg, "", key)
		require.NoError(t, err, "Lookup(%s) through the store", key)
		if ok {
			snap.recs[key] = rec
		}
	}
	holder, ok, err := st.ClaimedBy(bg, "", injW.ID)
	require.NoError(t, err, "ClaimedBy(%s) through the store", injW.ID)
	if ok {
		snap.holder = holder
	}
	return snap
}

// injectOne runs c with a fault of kind at store call at, checks what it did
// and what it said, and recovers. It returns whether the faulted call acted
// in the store.
func injectOne(t *testing.T, newStore Factory, c injectCase, at int, kind faultKind) (acted bool) {
	f, s, r := injectSetUp(t, newStore, c)
	sentBefore := r.calls.Load()
	before := snapshotOf(t, f.store)

	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	f.arm(at, kind, cancel)
	res := run(ctx, c, s, r)
	_, fired, acted := f.count()
	f.mu.Lock()
	detached := f.detached
	f.mu.Unlock()
	f.arm(0, 0, nil)
	require.NotEmpty(t, fired, "the fault at store call %d fired", at)
	after := snapshotOf(t, f.store)
	sent := r.calls.Load() - sentBefore // by the faulted operation
	t.Logf("%s at %s: got %+v, %v, panic %v; the rail moved money %d time(s) before, %d during", kind, fired, res.out, res.err, res.panicked, sentBefore, sent)

	// No second send.
	require.LessOrEqual(t, r.calls.Load(), int64(1), "the rail's sends of %s", injW.ID)
	// No lost claim: a withdrawal whose money moved keeps the claim it had,
	// and one sent by the operation is claimed by its key; a recorded outcome
	// is the rail's answer.
	want := ""
	switch {
	case sent > 0:
		want = c.key
	case r.calls.Load() > 0:
		want = before.holder
	}
	if want != "" {
		require.Equal(t, want, after.holder, "the rail moved money for %s: its holder", injW.ID)
		require.Contains(t, after.recs, want, "the rail moved money for %s: its holder's record", injW.ID)
		require.Equal(t, injW.ID, after.recs[want].Fingerprint.WithdrawalID)
	}
	for key, rec := range after.recs {
		if rec.Done {
			require.Equal(t, injAnswer, rec.Outcome, "%s's outcome is the rail's answer", key)
		}
	}

	// The error's class tells what is known.
	switch {
	case kind.panics():
		require.Equal(t, errPanic, res.panicked, "a store call's panic goes on out of the ledger, with its own value")
	case detached, kind == faultCancel && fired == "Settle" && res.err == nil && res.panicked == nil:
		// A Settle cancelled with its ctx is made again past it: the rail
		// answered, and the answer is recorded.
		c.want(t, res)
	default:
		requireTrueError(t, c, res, kind, fired, sent)
	}

	injectRecover(t, s, r, c)
	requireLedgerWhole(t, s)
	return acted
}

// requireTrueError checks the error of an operation whose store call at
// fired failed with a fault of kind, the rail having moved money sent times
// during it.
func requireTrueError(t *testing.T, c injectCase, res result, kind faultKind, fired string, sent int64) {
	t.Helper()
	err := res.err
	require.Error(t, err, "a fault at %s", fired)
	require.ErrorIs(t, err, kind.target(), "a fault at %s: the store's error is wrapped", fired)
	for _, refusal := range []error{submissions.ErrIdempotencyConflict, submissions.ErrSubmissionInFlight,
		submissions.ErrInvalidKey, submissions.ErrInvalidFingerprint, submissions.ErrOutcomeUnknown} {
		require.NotErrorIs(t, err, refusal, "a fault at %s: the store gave no answer of the ledger's own", fired)
	}
	if c.kind == opSubmit && sent > 0 {
		// The rail answered: money moved; the answer comes back unrecorded,
		// and the error does not say nothing was sent, nor that the store's
		// write did not stand.
		require.ErrorIs(t, err, submissions.ErrOutcomeNotRecorded, "Submit after the rail answered")
		require.NotErrorIs(t, err, submissions.ErrStoreFailed, "Submit after the rail answered")
		require.Equal(t, injAnswer, res.out, "Submit after the rail answered: its answer comes back")
		require.Contains(t, err.Error(), "may or may not", "the store may have written the answer before it failed")
		return
	}
	// Nothing was sent by this call.
	require.ErrorIs(t, err, submissions.ErrStoreFailed, "a %s whose store failed", c.name)
	require.NotErrorIs(t, err, submissions.ErrOutcomeNotRecorded)
	require.Zero(t, res.out)
}

// injectRecover retries c without faults and closes what is left open the
// way an operator would, then checks that the withdrawal was sent once with
// the rail's answer recorded.
func injectRecover(t *testing.T, s *ledger, r *rail, c injectCase) {
	t.Helper()
	switch {
	case c.kind == opSubmit && c.key == "req-1":
		// The retry below is the same Submit.
	case c.kind == opRelease && c.name == "ReleaseInFlightKey":
		require.NoError(t, s.Release(bg, "req-1"), "recovery: Release again")
		// Nothing was sent, and nothing is recorded.
		r.requireSends(t, 0)
		requireOutcome(t, s, "req-1", Withdrawal{}, false)
		requireHolder(t, s, injW.ID, "")
	default:
		c.want(t, run(bg, c, s, r))
	}
	// The client's Submit under the first key; a key in flight is resolved
	// with the rail's answer if the rail moved money, and released otherwise.
	out, err := s.Submit(bg, "req-1", injW, r.send)
	if errors.Is(err, submissions.ErrSubmissionInFlight) {
		if r.calls.Load() > 0 {
			err = s.Resolve(bg, "req-1", injAnswer)
		} else { // as an operator who has looked at the rail: the claim's send is not known to have ended
			err = s.Admin().Release(bg, admin.Target{Key: "req-1", Force: true}).Err
		}
		require.NoError(t, err, "recovery: closing the key in flight")
		out, err = s.Submit(bg, "req-1", injW, r.send)
	}
	require.NoError(t, err, "recovery: Submit")
	require.Equal(t, injAnswer, out, "recovery: Submit")
	r.requireSends(t, 1)
	requireOutcome(t, s, "req-1", injAnswer, true)
	requireHolder(t, s, injW.ID, "req-1")
	requireOutcome(t, s, "req-2", Withdrawal{}, false)
}

// requireLedgerWhole checks that s's own bookkeeping is as it should be: a
// Release is refused while s sends a key, a second key cannot claim that
// withdrawal, and the key closes when its send returns.
func requireLedgerWhole(t *testing.T, s *ledger) {
	t.Helper()
	probe := newWithdrawal("w-probe")
	r := &rail{}
	started, finish := make(chan struct{}), make(chan struct{})
	done := make(chan error)
	go func() {
		_, err := s.Submit(bg, "probe-1", probe, r.blocking(started, finish))
		done <- err
	}()
	<-started
	requireRefusal(t, s.Release(bg, "probe-1"), submissions.ErrSubmissionInFlight)
	_, err := s.Submit(bg, "probe-2", probe, r.send)
	requireConflict(t, err, "probe-1")
	close(finish)
	require.NoError(t, <-done, "the probe's Submit")
	requireRefusal(t, s.Release(bg, "probe-1"), submissions.ErrIdempotencyConflict)
	r.requireSends(t, 1)
}
