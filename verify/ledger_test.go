package verify

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/idemledger/submissions"
	"github.com/idemledger/submissions/admin"
	"github.com/idemledger/submissions/driver"
)

// This file calls real ledgers and reads what they return as Model says it.
// The sequential checks (rapid, the fuzzer) run steps with run; the
// linearizability checks record concurrent histories with the same calls.

func TestMain(m *testing.M) {
	runFailoverChild() // the test binary as a process of TestFailover
	goleak.VerifyTestMain(m)
}

var (
	bg         = context.Background()
	quiet      = submissions.WithLogger(slog.New(slog.DiscardHandler))
	errRail    = errors.New("rail timed out")
	errNotSent = fmt.Errorf("rail busy: %w", submissions.ErrNotSent)
)

// railBug is the value a rail that panics panics with.
const railBug = "rail bug"

// lane is one ledger of a run. marks is the number its operations carry as
// Op.Ledger: ledgers on the memory store itself share its marks, and one
// number; a ledger on any other Store has its own.
type lane struct {
	s     *submissions.Submissions[W]
	marks int
}

// view returns s working in tenant, reached one of three ways by way: the
// default tenant as the ledger itself (then Tenant otherwise); Tenant; or
// Tenant of a view of another tenant, which names a tenant of the same ledger.
func view(s *submissions.Submissions[W], way int, tenant string) *submissions.Submissions[W] {
	switch {
	case way%3 == 0 && tenant == "":
		return s
	case way%3 == 2:
		return s.Tenant("elsewhere").Tenant(tenant)
	}
	return s.Tenant(tenant)
}

// memoryLanes returns three ledgers that share one memory store: two on the
// store with all its abilities (a driver.Tracker: they share its marks) and
// one through the Store interface (see opaque), all three with the faults of
// the Settle kinds of Send.
func memoryLanes() []lane {
	st := submissions.NewMemoryStore[W]()
	native := newFaultyMemory(st.(memory))
	return []lane{
		{submissions.NewWithStore[W](native, quiet), 0},
		{submissions.NewWithStore[W](native, quiet), 0}, // shares the store's marks
		{submissions.NewWithStore[W](opaque{faultyStore{st}, st.(driver.Abandoner), st.(driver.Answerer[W])}, quiet), 1},
	}
}

// rail returns the send function of a Submit of op: nil for SendNil. It
// calls during first, if not nil: what else happens while the rail works.
// cancel ends the Submit's context, for SendLate.
func rail(op Op, cancel context.CancelFunc, during func()) func(context.Context, W) (W, error) {
	if op.Send == SendNil {
		return nil
	}
	return func(_ context.Context, w W) (W, error) {
		if during != nil {
			during()
		}
		switch op.Send {
		case SendFail:
			return W{}, errRail
		case SendPanic:
			panic(railBug)
		case SendWrong:
			return Wrong(w), nil
		case SendLate:
			cancel()
		case SendBoth:
			return Sent(w, op.Key), errRail
		case SendNotSent:
			return W{}, errNotSent
		}
		return Sent(w, op.Key), nil
	}
}

// submit runs a Submit of op on s with send, and says what came back. The
// rail's panic, raised again by Submit, is SendPanicked, and the store's, as
// it recorded the answer, StorePanicked; any other panic goes on. The
// store's Settle plays op.Send (see injectSettleFault).
func submit(ctx context.Context, s *submissions.Submissions[W], op Op, send func(context.Context, W) (W, error)) (res Result, err error) {
	defer func() {
		switch p := recover(); p {
		case nil:
		case railBug:
			res, err = Result{Err: SendPanicked}, nil
		case storeBug:
			res, err = Result{Err: StorePanicked}, nil
		default:
			panic(p)
		}
	}()
	out, err := s.Submit(withSettleFault(ctx, op.Send), op.Key, op.W, send)
	return submitted(out, err), err
}

// submitted says what a Submit's return means: the outcome goes with it when
// it came from the rail (no error, or ErrOutcomeNotRecorded), and must be the
// zero W otherwise.
func submitted(out W, err error) Result {
	res := classify(err)
	switch {
	case res.Err == None || res.Err == NotRecorded:
		res.Outcome = out
	case out != W{}:
		res = Result{Err: Unexpected}
	}
	return res
}

// waitLimit bounds a Wait of a sequential run, which returns at once: no
// send of its key runs. A Wait that reaches it fails the run (its ctx's
// error is of no class).
const waitLimit = 2 * time.Second

// single runs an operation other than Submit.
func single(s *submissions.Submissions[W], op Op) (res Result, err error) {
	switch op.Kind {
	case Wait:
		ctx, cancel := context.WithTimeout(bg, waitLimit)
		defer cancel()
		out, err := s.Wait(ctx, op.Key)
		return waited(out, err), err
	case Resolve:
		err = s.Resolve(bg, op.Key, op.W)
	case Release:
		if op.Force { // on whatever claim the key has, as the model's Release: decided again if it changed meanwhile
			r := s.Admin().Release(bg, admin.Target{Tenant: op.Tenant, Key: op.Key, Force: true})
			for r.Rule == admin.RuleClaimChanged {
				r = s.Admin().Release(bg, admin.Target{Tenant: op.Tenant, Key: op.Key, Force: true})
			}
			if err = r.Err; r.Rule == admin.RuleUnknownKey {
				err = nil // the model's: nothing to release
			}
		} else {
			err = s.Release(bg, op.Key)
		}
	case Outcome:
		res.Outcome, res.OK, err = s.Outcome(bg, op.Key)
	case ClaimedBy:
		res.Holder, res.OK, err = s.ClaimedBy(bg, op.W.ID)
	case Prune:
		_, err = s.Admin().WithMinRetention(0).Prune(bg, time.Now(), 0)
	default:
		panic(fmt.Sprintf("single: %v", op.Kind))
	}
	if err != nil {
		return classify(err), err
	}
	return res, nil
}

// classes are the sentinel errors of the ledger: an error wraps exactly one.
var classes = []error{
	submissions.ErrOutcomeNotRecorded, submissions.ErrOutcomeUnknown, submissions.ErrIdempotencyConflict,
	submissions.ErrSubmissionInFlight, submissions.ErrStoreFailed, submissions.ErrInvalidKey, submissions.ErrInvalidFingerprint,
	submissions.ErrInvalidTenant, submissions.ErrPruned, submissions.ErrUnknownKey, submissions.ErrNotSent,
}

// classify says what an error means, as Model says it. An error no rule
// gives is Unexpected, which no model step produces: a store failure, an
// error of no class or of two, ErrOutcomeUnknown without the rail's error.
func classify(err error) Result {
	if err == nil {
		return Result{}
	}
	if classesOf(err) != 1 {
		return Result{Err: Unexpected}
	}
	var conflict *submissions.ConflictError
	switch {
	case errors.Is(err, submissions.ErrOutcomeNotRecorded) && !errors.Is(err, errRail):
		return Result{Err: NotRecorded}
	case errors.Is(err, submissions.ErrOutcomeUnknown) && errors.Is(err, errRail):
		return Result{Err: OutcomeUnknown}
	case errors.As(err, &conflict):
		return Result{Err: Conflict, Holder: conflict.Holder, Tenant: conflict.Tenant, Pruned: conflict.Pruned}
	case errors.Is(err, submissions.ErrIdempotencyConflict):
		return Result{Err: Idempotency}
	case errors.Is(err, submissions.ErrSubmissionInFlight):
		return Result{Err: InFlight}
	case errors.Is(err, submissions.ErrInvalidTenant):
		return Result{Err: InvalidTenant}
	case errors.Is(err, submissions.ErrPruned):
		return Result{Err: Pruned}
	case errors.Is(err, submissions.ErrUnknownKey):
		return Result{Err: UnknownKey}
	case errors.Is(err, submissions.ErrNotSent) && errors.Is(err, errNotSent):
		return Result{Err: NotSent}
	}
	return Result{Err: Unexpected}
}

// classesOf counts the classes err is of.
func classesOf(err error) int {
	n := 0
	for _, class := range classes {
		if errors.Is(err, class) {
			n++
		}
	}
	if ce, ok := errors.AsType[*submissions.ConflictError](err); ok && ce.Pruned {
		n-- // a conflict with a pruned holder is ErrPruned too
	}
	return n
}

// waited says what a Wait's return means: the outcome without an error, and
// otherwise the zero W with an error as classify reads it, but that Wait's
// ErrOutcomeUnknown carries no rail's error (the send it reports ended
// before, and its error went to the send's caller).
func waited(out W, err error) Result {
	switch {
	case err == nil:
		return Result{Outcome: out}
	case out != W{}:
		return Result{Err: Unexpected}
	case errors.Is(err, submissions.ErrOutcomeUnknown) && !errors.Is(err, errRail) && classesOf(err) == 1:
		return Result{Err: OutcomeUnknown}
	case errors.Is(err, submissions.ErrOutcomeUnknown):
		return Result{Err: Unexpected}
	}
	return classify(err)
}

// pendingLimit bounds a Wait that blocks (see Model.Blocks): it must return
// soon after the step that ends its block, and its ctx ends at this limit
// (an error of no class) if it does not.
const pendingLimit = 5 * time.Second

// step is one operation of a sequential run, on lanes[lane]. A Submit's
// during are the operations its rail makes while it works, each one whole
// but a Wait that blocks (see pending).
type step struct {
	op     Op
	lane   int
	during []step
}

// runner runs steps on real ledgers and on a model, one at a time, and stops
// at the first result that differs.
type runner struct {
	lanes   []lane
	model   Model
	claims  int             // the last Op.ClaimID given
	tenants map[string]bool // the tenants steps ran in
	depth   int             // the runs under way: 1 for a step, 2 for a step of its rail
	pending []*pending      // the Waits that block, in the order they began
	blocked int             // how many Waits blocked
}

// pending is a Wait that a rail began while its key's claim was being sent:
// it runs on, and blocks, until a step ends its block (the Settle of the
// send, or a Resolve or Release through any ledger that may make one), and
// must then return what the model's Wait returns in the state that step
// left. Until then it must not return at all.
type pending struct {
	op       Op
	cancel   context.CancelFunc
	done     chan waitResult // the Wait's return, sent once
	received bool            // done was read
}

// waitResult is what a Wait returned.
type waitResult struct {
	res Result
	err error
}

// run runs st, and the steps of its rail while its Submit sends, and returns
// an error that says where the ledger and the model first differ. After each
// step it checks the Waits that block; when the first step returns, none may
// block any more, and none runs on.
func (r *runner) run(st step) (err error) {
	r.depth++
	defer func() {
		r.depth--
		if err == nil {
			err = r.checkPending()
		}
		if r.depth == 0 {
			if perr := r.endPending(); err == nil {
				err = perr
			}
		}
	}()
	return r.runStep(st)
}

// runStep runs st, as run does, but for the Waits that block.
func (r *runner) runStep(st step) error {
	l := r.lanes[st.lane]
	s := view(l.s, st.lane, st.op.Tenant)
	op := st.op
	op.Ledger = l.marks
	if r.tenants == nil {
		r.tenants = map[string]bool{"": true}
	}
	r.tenants[op.Tenant] = true
	if op.Kind == Wait && r.model.Blocks(op) {
		r.begin(s, op)
		return nil
	}
	if op.Kind != Submit {
		got, err := single(s, op)
		return r.compare(op, got, r.model.Apply(op), err)
	}
	r.claims++
	op.ClaimID = r.claims
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	if op.Send == SendNil { // no rail: one step
		got, err := submit(ctx, s, op, nil)
		return r.compare(op, got, r.model.Apply(op), err)
	}
	claimOp, settleOp := op, op
	claimOp.Kind, settleOp.Kind = Claim, Settle
	claimed := r.model.Apply(claimOp)
	var sent bool
	var during error
	got, err := submit(ctx, s, op, rail(op, cancel, func() {
		sent = true
		if !claimed.Claimed {
			return // reported below
		}
		for _, inner := range st.during {
			if during = r.run(inner); during != nil {
				return
			}
		}
	}))
	switch {
	case sent != claimed.Claimed:
		return fmt.Errorf("%s: send called %v; the model answers %s; the ledger answered %s (%v)",
			describeCall(op), sent, describeResult(claimOp, claimed), describeResult(op, got), err)
	case during != nil:
		return fmt.Errorf("while %s sent: %w", describeCall(op), during)
	case !sent:
		return r.compare(op, got, claimed, err)
	}
	return r.compare(settleOp, got, r.model.Apply(settleOp), err)
}

// begin begins op, a Wait that blocks, on s, to run on until checkPending
// finds its block ended. It returns once the Wait has read its key in the
// store (see noteRead), or returned.
func (r *runner) begin(s *submissions.Submissions[W], op Op) {
	ctx, cancel := context.WithTimeout(bg, pendingLimit)
	read, returned := make(chan struct{}), make(chan struct{})
	ctx = withNoteRead(ctx, sync.OnceFunc(func() { close(read) }))
	p := &pending{op: op, cancel: cancel, done: make(chan waitResult, 1)}
	r.blocked++
	go func() {
		defer close(returned)
		out, err := s.Wait(ctx, op.Key)
		p.done <- waitResult{waited(out, err), err}
	}()
	r.pending = append(r.pending, p)
	select {
	case <-read:
	case <-returned:
	}
}

// checkPending checks the Waits that block: one whose block has not ended
// must not have returned; one whose block has ended must return what the
// model's Wait returns now, and no longer blocks.
func (r *runner) checkPending() error {
	blocked := r.pending[:0]
	var err error
	for _, p := range r.pending {
		switch {
		case err != nil:
		case r.model.Blocks(p.op):
			select {
			case got := <-p.done:
				p.received = true
				err = fmt.Errorf("%s returned %s (%v) while its key's claim was being sent: it must block",
					describeCall(p.op), describeResult(p.op, got.res), got.err)
			default:
			}
		default:
			got := <-p.done
			p.received = true
			p.cancel()
			if err = r.compare(p.op, got.res, r.model.Apply(p.op), got.err); err != nil {
				err = fmt.Errorf("begun while its key's claim was being sent, %w", err)
			}
			continue
		}
		blocked = append(blocked, p)
	}
	r.pending = blocked
	return err
}

// endPending ends the Waits that still block, which none may when no send
// runs, and waits for them to return.
func (r *runner) endPending() error {
	var err error
	if len(r.pending) > 0 {
		err = fmt.Errorf("%s still blocks, and no send runs", describeCall(r.pending[0].op))
	}
	for _, p := range r.pending {
		p.cancel()
		if !p.received {
			<-p.done
		}
	}
	r.pending = nil
	return err
}

func (r *runner) compare(op Op, got, want Result, err error) error {
	switch {
	case got.Err == Unexpected:
		return fmt.Errorf("%s returned an error no rule gives: %v", describeCall(op), err)
	case got != want:
		return fmt.Errorf("%s: got %s (%v); want %s", describeCall(op), describeResult(op, got), err, describeResult(op, want))
	}
	return nil
}

// runAll runs steps, then finish.
func (r *runner) runAll(steps []step) error {
	for _, st := range steps {
		if err := r.run(st); err != nil {
			return err
		}
	}
	return r.finish()
}

// finish compares what every ledger reads of every key and withdrawal in
// the world with the model, in the default tenant and every tenant a step
// ran in.
func (r *runner) finish() error {
	tenants := slices.Sorted(maps.Keys(r.tenants))
	if len(tenants) == 0 {
		tenants = []string{""}
	}
	for i := range r.lanes {
		for _, tenant := range tenants {
			for _, key := range keys {
				if err := r.run(step{op: Op{Kind: Outcome, Tenant: tenant, Key: key}, lane: i}); err != nil {
					return fmt.Errorf("at the end: %w", err)
				}
			}
			for _, id := range ids {
				if err := r.run(step{op: Op{Kind: ClaimedBy, Tenant: tenant, W: W{ID: id}}, lane: i}); err != nil {
					return fmt.Errorf("at the end: %w", err)
				}
			}
		}
	}
	return nil
}

// The small world the sequential checks draw from: few keys and
// withdrawals, so that operations meet; amounts and currencies spelled
// several ways. Every tenant draws from the same keys and withdrawals, so
// that the same key and the same withdrawal are used in several tenants.
var (
	// tenants are where most operations run; otherTenants are valid too,
	// and distinct from them (an id is exact, up to 64 bytes); badTenants
	// are refused.
	tenants      = []string{"", "t1"}
	otherTenants = []string{"t1 ", strings.Repeat("t", 64), "tenant-é"}
	badTenants   = []string{strings.Repeat("t", 65), "t1\x00", "t1\xff"}

	keys     = []string{"k1", "k2", "k3", "k4"}
	ids      = []string{"w1", "w2", "w3"}
	amounts  = []string{"25.00", "25", "025.0", "26"}
	currency = []string{"USDC", "usdc", "EUR"}
	dests    = []string{"d1", "d2"}
)

// resolution returns the outcome a Resolve of w under key reports, by n: no
// transaction id, one of another send, or the one a rail gives under key.
func resolution(w W, key string, n int) W {
	switch n % 3 {
	case 1:
		w.TxHash = "tx-a"
	case 2:
		w = Sent(w, key)
	}
	return w
}

func TestClassify(t *testing.T) {
	wrap := func(errs ...error) error {
		format := strings.Repeat("%w: ", len(errs)-1) + "%w"
		args := make([]any, len(errs))
		for i, e := range errs {
			args[i] = e
		}
		return fmt.Errorf(format, args...)
	}
	for _, tc := range []struct {
		name string
		err  error
		want Result
	}{
		{"nil", nil, Result{}},
		{"a conflict names its holder", &submissions.ConflictError{Holder: "k1", Key: "k2", WithdrawalID: "w1"}, Result{Err: Conflict, Holder: "k1"}},
		{"and its tenant", &submissions.ConflictError{Tenant: "t1", Holder: "k1", Key: "k2", WithdrawalID: "w1"}, Result{Err: Conflict, Holder: "k1", Tenant: "t1"}},
		{"and a pruned holder", &submissions.ConflictError{Holder: "k1", Key: "k2", WithdrawalID: "w1", Pruned: true}, Result{Err: Conflict, Holder: "k1", Pruned: true}},
		{"pruned", wrap(submissions.ErrPruned), Result{Err: Pruned}},
		{"an invalid tenant", wrap(submissions.ErrInvalidTenant), Result{Err: InvalidTenant}},
		{"an invalid tenant and key", wrap(submissions.ErrInvalidTenant, submissions.ErrInvalidKey), Result{Err: Unexpected}},
		{"idempotency", wrap(submissions.ErrIdempotencyConflict), Result{Err: Idempotency}},
		{"in flight", wrap(submissions.ErrSubmissionInFlight), Result{Err: InFlight}},
		{"outcome unknown with the rail's error", wrap(submissions.ErrOutcomeUnknown, errRail), Result{Err: OutcomeUnknown}},
		{"not recorded", wrap(submissions.ErrOutcomeNotRecorded, context.Canceled), Result{Err: NotRecorded}},
		{"outcome unknown without the rail's error", wrap(submissions.ErrOutcomeUnknown), Result{Err: Unexpected}},
		{"not recorded with the rail's error", wrap(submissions.ErrOutcomeNotRecorded, errRail), Result{Err: Unexpected}},
		{"not recorded as a conflict", wrap(submissions.ErrOutcomeNotRecorded, submissions.ErrIdempotencyConflict), Result{Err: Unexpected}},
		{"not recorded as a store failure", wrap(submissions.ErrOutcomeNotRecorded, submissions.ErrStoreFailed), Result{Err: Unexpected}},
		{"a store failure", wrap(submissions.ErrStoreFailed, errors.New("connection reset")), Result{Err: Unexpected}},
		{"an invalid key", wrap(submissions.ErrInvalidKey), Result{Err: Unexpected}},
		{"no class", context.DeadlineExceeded, Result{Err: Unexpected}},
		{"an unknown key", wrap(submissions.ErrUnknownKey), Result{Err: UnknownKey}},
	} {
		assert.Equal(t, tc.want, classify(tc.err), tc.name)
	}
	assert.Equal(t, Result{Err: Unexpected}, submitted(w1, wrap(submissions.ErrSubmissionInFlight)), "a refusal that returns an outcome")
	assert.Equal(t, Result{Err: NotRecorded, Outcome: w1}, submitted(w1, wrap(submissions.ErrOutcomeNotRecorded)))

	assert.Equal(t, Result{Outcome: w1}, waited(w1, nil), "Wait's outcome")
	assert.Equal(t, Result{Err: OutcomeUnknown}, waited(W{}, wrap(submissions.ErrOutcomeUnknown)), "Wait's outcome unknown")
	assert.Equal(t, Result{Err: Unexpected}, waited(W{}, wrap(submissions.ErrOutcomeUnknown, errRail)), "Wait's outcome unknown with a rail's error")
	assert.Equal(t, Result{Err: Unexpected}, waited(W{}, wrap(submissions.ErrOutcomeUnknown, submissions.ErrStoreFailed)), "Wait's outcome unknown as a store failure")
	assert.Equal(t, Result{Err: UnknownKey}, waited(W{}, wrap(submissions.ErrUnknownKey)), "Wait's unknown key")
	assert.Equal(t, Result{Err: Pruned}, waited(W{}, wrap(submissions.ErrPruned)), "Wait's pruned key")
	assert.Equal(t, Result{Err: Unexpected}, waited(W{}, context.DeadlineExceeded), "Wait that reached its deadline")
	assert.Equal(t, Result{Err: Unexpected}, waited(w1, wrap(submissions.ErrUnknownKey)), "a Wait's error with an outcome")
}

func TestWaitAfterEverySend(t *testing.T) {
	waitAfterEverySend(t, func(*testing.T) []lane { return memoryLanes() })
}

// waitAfterEverySend runs, on the three ledgers newLanes gives, a Submit of
// each send on each ledger, then a Wait for its key on each ledger, and again
// after a Release of the key, and after a Resolve and a Prune.
func waitAfterEverySend(t *testing.T, newLanes func(*testing.T) []lane) {
	for send := SendOK; send <= lastSend; send++ {
		for sender := range 3 {
			t.Run(fmt.Sprintf("%s@%d", sendNames[send], sender), func(t *testing.T) {
				r := &runner{lanes: newLanes(t)}
				steps := []step{{op: Op{Kind: Submit, Key: "k1", W: w1, Send: send}, lane: sender}}
				for lane := range 3 {
					steps = append(steps, step{op: Op{Kind: Wait, Key: "k1"}, lane: lane})
				}
				steps = append(steps, step{op: Op{Kind: Release, Key: "k1"}, lane: sender})
				for lane := range 3 {
					steps = append(steps, step{op: Op{Kind: Wait, Key: "k1"}, lane: lane})
				}
				steps = append(steps, step{op: Op{Kind: Resolve, Key: "k1", W: Sent(w1, "k1")}, lane: sender}, step{op: Op{Kind: Prune}})
				for lane := range 3 {
					steps = append(steps, step{op: Op{Kind: Wait, Key: "k1"}, lane: lane})
				}
				require.NoError(t, r.runAll(steps))
			})
		}
	}
}

func TestWaitWhileSending(t *testing.T) {
	waitWhileSending(t, func(*testing.T) []lane { return memoryLanes() })
}

// waitWhileSending runs, on the ledgers newLanes gives, the sequences of
// whileSending, and checks that each of their Waits begun while the key was
// being sent blocked.
func waitWhileSending(t *testing.T, newLanes func(*testing.T) []lane) {
	for _, seq := range whileSending(newLanes(t)) {
		t.Run(seq.name, func(t *testing.T) {
			r := &runner{lanes: newLanes(t)}
			require.NoError(t, r.runAll(seq.steps))
			assert.Equal(t, seq.blocked, r.blocked, "the Waits that blocked")
		})
	}
}

// sequence is a named sequence of steps, with how many of its Waits block.
type sequence struct {
	name    string
	steps   []step
	blocked int
}

// whileSending returns sequences that begin a Wait for a key on every lane
// while a Submit on each lane in turn sends it, and end their block: by a
// Resolve through another ledger; by a Release through a ledger with other
// marks, when there is one; or by the end of the send, whatever it was, a
// Release through the sender's ledger being refused meanwhile. A Wait begun
// after the block ended returns at once.
func whileSending(lanes []lane) []sequence {
	waits := func() []step {
		var ws []step
		for l := range lanes {
			ws = append(ws, step{op: Op{Kind: Wait, Key: "k1"}, lane: l})
		}
		return ws
	}
	submit := func(sender int, send Send, during ...step) []step {
		return []step{{op: Op{Kind: Submit, Key: "k1", W: w1, Send: send}, lane: sender, during: during}}
	}
	var seqs []sequence
	for sender := range lanes {
		other := slices.IndexFunc(lanes, func(l lane) bool { return l.marks != lanes[sender].marks })
		resolve := step{op: Op{Kind: Resolve, Key: "k1", W: resolution(w1, "k1", 1)}, lane: (sender + 1) % len(lanes)}
		seqs = append(seqs, sequence{fmt.Sprintf("ResolvedElsewhere@%d", sender),
			submit(sender, SendOK, slices.Concat(waits(), []step{resolve}, waits())...), len(lanes)})
		if other >= 0 {
			release := step{op: Op{Kind: Release, Key: "k1", Force: true}, lane: other} // an operator who has looked at the rail
			seqs = append(seqs, sequence{fmt.Sprintf("ReleasedElsewhere@%d", sender),
				submit(sender, SendOK, slices.Concat(waits(), []step{release}, waits())...), len(lanes)})
		}
		for _, send := range []Send{SendOK, SendFail, SendWrong, SettleFails, SettleFailsAfter, SettlePanics} {
			refused := step{op: Op{Kind: Release, Key: "k1"}, lane: sender}
			seqs = append(seqs, sequence{fmt.Sprintf("SendEnded/%s@%d", sendNames[send], sender),
				slices.Concat(submit(sender, send, slices.Concat(waits(), []step{refused})...), waits()), len(lanes)})
		}
	}
	return seqs
}
