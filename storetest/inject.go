package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemledger/submissions"
	"github.com/idemledger/submissions/internal/figures"
)

// Fault injection: every operation of the ledger is run once without faults
// to count its store calls, then again from the same starting state with one
// fault at each of those calls in turn, of each kind. After every fault the
// test checks that the rail moved money at most once, that money that moved
// is still claimed, and that the error says what is known; then it recovers
// the way an operator would and checks that the withdrawal ends sent exactly
// once, with the rail's answer recorded.

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
	faultKinds
)

var (
	errInjected = errors.New("storetest: injected store failure (connection refused)")
	errLost     = errors.New("storetest: injected lost reply (connection reset)")
)

func (k faultKind) String() string {
	return [...]string{"error", "timeout", "cancelled", "reply lost"}[k]
}

// target is the error the operation's error must wrap after a fault of k.
func (k faultKind) target() error {
	return [...]error{errInjected, context.DeadlineExceeded, context.Canceled, errLost}[k]
}

// injector wraps a store: it counts the calls made through it and fails the
// one numbered at (from 1), once. A ledger runs it as it runs any Store.
type injector struct {
	store submissions.Store[Withdrawal]

	mu     sync.Mutex
	calls  int                // store calls since the count was reset
	at     int                // the call to fail; 0: none
	kind   faultKind          // how it fails
	cancel context.CancelFunc // cancels the operation's context, for faultCancel
	fired  string             // the method that failed, once it has
	acted  bool               // the failed call ran in the store, which answered
}

// arm resets the count and fails call at (0: none) with kind.
func (f *injector) arm(at int, kind faultKind, cancel context.CancelFunc) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls, f.at, f.kind, f.cancel, f.fired, f.acted = 0, at, kind, cancel, "", false
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
		_, err = call(ctx)
		f.setActed(!errors.Is(err, ctx.Err()))
		return zero, ended(prefix, err, ctx.Err())
	}
	_, err = call(ctx) // faultReplyLost
	f.setActed(true)
	return zero, fmt.Errorf("%s: %s, and its reply was lost: %w", prefix, answered(err), errLost)
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
	rec submissions.Record[Withdrawal]
	ok  bool
}

func (f *injector) Claim(ctx context.Context, key string, fp submissions.Fingerprint, outcome *Withdrawal) (submissions.Record[Withdrawal], bool, error) {
	r, err := inject(ctx, f, "Claim", func(ctx context.Context) (reply, error) {
		rec, ok, err := f.store.Claim(ctx, key, fp, outcome)
		return reply{rec, ok}, err
	})
	return r.rec, r.ok, err
}

func (f *injector) Settle(ctx context.Context, key string, fp submissions.Token, outcome Withdrawal) (submissions.Record[Withdrawal], bool, error) {
	r, err := inject(ctx, f, "Settle", func(ctx context.Context) (reply, error) {
		rec, ok, err := f.store.Settle(ctx, key, fp, outcome)
		return reply{rec, ok}, err
	})
	return r.rec, r.ok, err
}

func (f *injector) Release(ctx context.Context, key string, token submissions.Token) (submissions.Record[Withdrawal], bool, error) {
	r, err := inject(ctx, f, "Release", func(ctx context.Context) (reply, error) {
		rec, ok, err := f.store.Release(ctx, key, token)
		return reply{rec, ok}, err
	})
	return r.rec, r.ok, err
}

func (f *injector) Lookup(ctx context.Context, key string) (submissions.Record[Withdrawal], bool, error) {
	r, err := inject(ctx, f, "Lookup", func(ctx context.Context) (reply, error) {
		rec, ok, err := f.store.Lookup(ctx, key)
		return reply{rec, ok}, err
	})
	return r.rec, r.ok, err
}

func (f *injector) ClaimedBy(ctx context.Context, withdrawalID string) (string, bool, error) {
	type holder struct {
		key string
		ok  bool
	}
	r, err := inject(ctx, f, "ClaimedBy", func(ctx context.Context) (holder, error) {
		key, ok, err := f.store.ClaimedBy(ctx, withdrawalID)
		return holder{key, ok}, err
	})
	return r.key, r.ok, err
}

// result is what an operation returned.
type result struct {
	out    Withdrawal // Submit's outcome, Outcome's outcome
	ok     bool       // Outcome's and ClaimedBy's ok
	holder string     // ClaimedBy's key
	err    error
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
	want  func(res result) error                               // its answer without faults
}

type ledger = submissions.Submissions[Withdrawal]

var (
	injW      = newWithdrawal("w-1")
	injAnswer = injW.sent("0xtx-w-1") // what the rail answers for injW
)

// Starting states. The rail's count says whether money moved.
func startEmpty(*testing.T, *ledger, *rail) {}

func startDone(t *testing.T, s *ledger, r *rail) {
	t.Helper()
	if _, err := s.Submit(bg, "req-1", injW, r.send); err != nil {
		t.Fatalf("start: Submit: %v", err)
	}
}

// startInFlightSent: the rail moved the money, then the send failed.
func startInFlightSent(t *testing.T, s *ledger, r *rail) {
	t.Helper()
	_, err := s.Submit(bg, "req-1", injW, func(ctx context.Context, w Withdrawal) (Withdrawal, error) {
		_, _ = r.send(ctx, w)
		return Withdrawal{}, errRail
	})
	wantErr(t, err, errRail)
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

func wantAnswer(res result) error {
	if res.err != nil || res.out != injAnswer {
		return fmt.Errorf("got %+v, %v; want %+v, nil", res.out, res.err, injAnswer)
	}
	return nil
}

func wantNil(res result) error { return res.err }

func wantIs(target error) func(result) error {
	return func(res result) error {
		if !errors.Is(res.err, target) {
			return fmt.Errorf("got %v; want %v", res.err, target)
		}
		return nil
	}
}

func wantHeldByReq1(res result) error {
	var ce *submissions.ConflictError
	if !errors.As(res.err, &ce) || ce.Holder != "req-1" || res.out != (Withdrawal{}) {
		return fmt.Errorf("got %+v, %v; want a *ConflictError naming req-1", res.out, res.err)
	}
	return nil
}

var injectCases = []injectCase{
	{"SubmitFreshKey", opSubmit, "req-1", startEmpty, submitOp("req-1"), wantAnswer},
	{"SubmitReplayOfADoneKey", opSubmit, "req-1", startDone, submitOp("req-1"), wantAnswer},
	{"SubmitSecondKeyForADoneWithdrawal", opSubmit, "req-2", startDone, submitOp("req-2"), wantHeldByReq1},
	{"SubmitSecondKeyForAnInFlightWithdrawal", opSubmit, "req-2", startInFlightSent, submitOp("req-2"), wantHeldByReq1},
	{"SubmitInFlightKey", opSubmit, "req-1", startInFlightSent, submitOp("req-1"), wantIs(submissions.ErrSubmissionInFlight)},
	{"ResolveInFlightKey", opResolve, "req-1", startInFlightSent, resolveOp, wantNil},
	{"ResolveFreshKey", opResolve, "req-1", startSentOutside, resolveOp, wantNil},
	{"ResolveDoneKey", opResolve, "req-1", startDone, resolveOp, wantNil},
	{"ReleaseInFlightKey", opRelease, "req-1", startInFlightUnsent, releaseOp, wantNil},
	{"ReleaseDoneKey", opRelease, "req-1", startDone, releaseOp, wantIs(submissions.ErrIdempotencyConflict)},
	{"Outcome", opRead, "req-1", startDone, outcomeOp, func(res result) error {
		if res.err != nil || !res.ok || res.out != injAnswer {
			return fmt.Errorf("got %+v, %v, %v; want %+v, true, nil", res.out, res.ok, res.err, injAnswer)
		}
		return nil
	}},
	{"ClaimedBy", opRead, "", startDone, claimedByOp, func(res result) error {
		if res.err != nil || !res.ok || res.holder != "req-1" {
			return fmt.Errorf("got %q, %v, %v; want req-1, true, nil", res.holder, res.ok, res.err)
		}
		return nil
	}},
}

// faults is the fault injection group of the suite.
var faults = []test{
	{"FaultAtEveryStoreCall", testFaultAtEveryStoreCall},
}

// injectTally counts what the test did.
type injectTally struct {
	faults, positions, ops, acted int
}

func testFaultAtEveryStoreCall(t *testing.T, e env) {
	var tally injectTally
	for _, c := range injectCases {
		t.Run(c.name, func(t *testing.T) {
			// Without faults: count the operation's store calls.
			f, s, r := injectSetUp(t, e, c)
			f.arm(0, 0, nil)
			res := c.op(bg, s, r)
			calls, _, _ := f.count()
			if err := c.want(res); err != nil {
				t.Fatalf("without faults: %v", err)
			}
			if calls == 0 {
				t.Fatal("without faults: the operation made no store call")
			}
			tally.ops++
			tally.positions += calls
			for at := 1; at <= calls; at++ {
				for kind := range faultKinds {
					t.Run(fmt.Sprintf("call%d-%s", at, strings.ReplaceAll(kind.String(), " ", "-")), func(t *testing.T) {
						acted := injectOne(t, e, c, at, kind)
						tally.faults++
						if acted {
							tally.acted++
						}
					})
				}
			}
		})
	}
	if t.Failed() {
		return
	}
	figures.Add(t, "inject: %d faults at %d positions over %d operations (%d of them after the store had acted); no second send, no lost claim, every error true",
		tally.faults, tally.positions, tally.ops, tally.acted)
}

// injectSetUp returns a new store behind an injector, a ledger on it, and a
// rail, in c's starting state.
func injectSetUp(t *testing.T, e env, c injectCase) (*injector, *ledger, *rail) {
	t.Helper()
	f := &injector{store: e.newStore(t)}
	s := submissions.NewWithStore[Withdrawal](f, submissions.WithLogger(quiet))
	r := &rail{}
	c.start(t, s, r)
	return f, s, r
}

// snapshot is what the store holds about the test's keys and withdrawal.
type snapshot struct {
	recs   map[string]submissions.Record[Withdrawal] // by key, if recorded
	holder string                                    // of injW, "" if none
}

func take(t *testing.T, st submissions.Store[Withdrawal]) snapshot {
	t.Helper()
	snap := snapshot{recs: map[string]submissions.Record[Withdrawal]{}}
	for _, key := range []string{"req-1", "req-2"} {
		rec, ok, err := st.Lookup(bg, key)
		if err != nil {
			t.Fatalf("Lookup(%s) through the store: %v", key, err)
		}
		if ok {
			snap.recs[key] = rec
		}
	}
	holder, ok, err := st.ClaimedBy(bg, injW.ID)
	if err != nil {
		t.Fatalf("ClaimedBy(%s) through the store: %v", injW.ID, err)
	}
	if ok {
		snap.holder = holder
	}
	return snap
}

func (a snapshot) equal(b snapshot) bool {
	if a.holder != b.holder || len(a.recs) != len(b.recs) {
		return false
	}
	for k, r := range a.recs {
		if o, ok := b.recs[k]; !ok || o != r {
			return false
		}
	}
	return true
}

// injectOne runs c with a fault of kind at store call at, checks what it did
// and what it said, and recovers. It returns whether the faulted call acted in
// the store, and how many messages said more than was known.
func injectOne(t *testing.T, e env, c injectCase, at int, kind faultKind) (acted bool) {
	f, s, r := injectSetUp(t, e, c)
	before := take(t, f.store)
	sentBefore := r.calls.Load()

	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	f.arm(at, kind, cancel)
	res := c.op(ctx, s, r)
	_, fired, acted := f.count()
	f.arm(0, 0, nil)
	if fired == "" {
		t.Fatalf("the fault at store call %d never fired", at)
	}
	after := take(t, f.store)
	sent := r.calls.Load() - sentBefore // by the faulted operation
	t.Logf("%s at %s: got %+v, %v; the rail moved money %d time(s) before, %d during", kind, fired, res.out, res.err, sentBefore, sent)

	// No second send.
	if total := r.calls.Load(); total > 1 {
		t.Fatalf("the rail moved money %d times for %s", total, injW.ID)
	}
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
		rec, ok := after.recs[want]
		switch {
		case after.holder != want || !ok:
			t.Fatalf("the rail moved money for %s, claimed by %q: got holder %q and records %+v; want %q to hold it", injW.ID, want, after.holder, after.recs, want)
		case rec.Fingerprint.WithdrawalID != injW.ID:
			t.Fatalf("the holder %s's record is for %s", want, rec.Fingerprint.WithdrawalID)
		}
	}
	for key, rec := range after.recs {
		if rec.Done && rec.Outcome != injAnswer {
			t.Fatalf("%s's outcome: got %+v; want the rail's answer %+v", key, rec.Outcome, injAnswer)
		}
	}

	// The error tells what is known.
	err := res.err
	switch {
	case err == nil:
		t.Fatalf("a fault at %s: got no error", fired)
	case !errors.Is(err, kind.target()):
		t.Fatalf("a fault at %s: got %v; want it to wrap %v", fired, err, kind.target())
	case errors.Is(err, submissions.ErrIdempotencyConflict), errors.Is(err, submissions.ErrSubmissionInFlight),
		errors.Is(err, submissions.ErrInvalidKey), errors.Is(err, submissions.ErrInvalidFingerprint):
		t.Fatalf("a fault at %s: got %v; want no answer of the ledger's own: the store did not give one", fired, err)
	}
	if c.kind == opSubmit {
		notRecorded := errors.Is(err, submissions.ErrOutcomeNotRecorded)
		switch {
		case sent > 0 && (!notRecorded || res.out != injAnswer):
			t.Fatalf("Submit after the rail answered: got %+v, %v; want the rail's answer %+v with ErrOutcomeNotRecorded", res.out, err, injAnswer)
		case sent == 0 && notRecorded:
			t.Fatalf("Submit that never sent: got %v; want no ErrOutcomeNotRecorded", err)
		case sent == 0 && res.out != (Withdrawal{}):
			t.Fatalf("Submit that never sent: got %+v; want the zero Withdrawal", res.out)
		case sent == 0 && !strings.Contains(err.Error(), "nothing was sent"):
			t.Fatalf("Submit that never sent: got %q; want it to say nothing was sent", err)
		}
	} else if errors.Is(err, submissions.ErrOutcomeNotRecorded) {
		t.Fatalf("a %s: got %v; want no ErrOutcomeNotRecorded: nothing was sent", c.name, err)
	}
	if sent > 0 && strings.Contains(err.Error(), "nothing was sent") {
		t.Fatalf("the rail moved money, and the error says nothing was sent: %v", err)
	}
	// What the error says about the store must be true: after a store call
	// that failed, the ledger cannot know whether the store acted, and must
	// not say it did not. ErrOutcomeNotRecorded is taken as such a statement
	// unless the message says the outcome may have been recorded.
	var untrue []string
	changed := !before.equal(after)
	msg := err.Error()
	if strings.Contains(msg, "could not claim") && changed {
		untrue = append(untrue, "that the store could not claim the key, and it holds the claim")
	}
	if strings.Contains(msg, "nothing was recorded") && changed {
		untrue = append(untrue, "that nothing was recorded, and the store holds the record")
	}
	hedged := strings.Contains(msg, "may have been") || strings.Contains(msg, "may or may not")
	if rec := after.recs[c.key]; errors.Is(err, submissions.ErrOutcomeNotRecorded) && !hedged && rec.Done && rec.Outcome == res.out {
		untrue = append(untrue, "that the outcome is not recorded (and so that the key stays in flight), and the outcome is recorded")
	}
	if len(untrue) > 0 {
		gap := fmt.Sprintf("says more than is known: %s at %s of %s: %q says %s; the store holds %+v",
			kind, fired, c.name, msg, strings.Join(untrue, "; "), after)
		t.Error(gap)
	}

	injectRecover(t, s, r, c)
	return acted
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
		if err := s.Release(bg, "req-1"); err != nil {
			t.Fatalf("recovery: Release again: %v", err)
		}
		// Nothing was sent, and nothing is recorded.
		r.wantCalls(t, 0)
		wantOutcome(t, s, "req-1", Withdrawal{}, false)
		wantHolder(t, s, injW.ID, "")
	default:
		if err := c.want(c.op(bg, s, r)); err != nil {
			t.Fatalf("recovery: %s again: %v", c.name, err)
		}
	}
	// The client's Submit under the first key; a key in flight is resolved
	// with the rail's answer if the rail moved money, and released otherwise.
	out, err := s.Submit(bg, "req-1", injW, r.send)
	if errors.Is(err, submissions.ErrSubmissionInFlight) {
		if r.calls.Load() > 0 {
			err = s.Resolve(bg, "req-1", injAnswer)
		} else {
			err = s.Release(bg, "req-1")
		}
		if err != nil {
			t.Fatalf("recovery: closing the key in flight: %v", err)
		}
		out, err = s.Submit(bg, "req-1", injW, r.send)
	}
	if err != nil || out != injAnswer {
		t.Fatalf("recovery: Submit: got %+v, %v; want %+v, nil", out, err, injAnswer)
	}
	r.wantCalls(t, 1)
	wantOutcome(t, s, "req-1", injAnswer, true)
	wantHolder(t, s, injW.ID, "req-1")
	wantOutcome(t, s, "req-2", Withdrawal{}, false)
}
