package verify

import (
	"cmp"
	"context"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/require"

	"github.com/idemledger/submissions/internal/figures"
)

// Linearizability: clients call several ledgers that share one store, all
// at once, and every history they make must be explainable as the model's
// operations taking effect one at a time, each somewhere between its call and
// its return. porcupine searches for that order; a history for which there is
// none is a bug, whatever the bug is.
//
// A Submit that sends is recorded as two operations, because it is two
// atomic steps with the rail between them: Claim, from its call to the moment
// send is entered, and Settle, from send's return to Submit's. A nil send has
// no moment to observe, so histories send with a function that returns the
// request (the model's SendNil); the nil send itself is checked by the rapid
// tests.
//
// Clients work in two tenants on the same keys and withdrawals, and now and
// then in another tenant or one that is refused. Tenants are independent by
// the rules, so a history is checked one tenant, and one group of keys and
// withdrawals within it, at a time: a tenant that sees another's operations
// has results its own cannot explain.

// linConfig sizes a run of histories.
type linConfig struct {
	histories int // how many
	clients   int // goroutines per history, released together
	ops       int // operations per client
	// groups is how many independent sets of keys and withdrawals a
	// history has. Every tenant uses the same sets, and the fewer they are,
	// the more often operations meet on a key or a withdrawal.
	groups int
}

// memoryRun sizes the run in memory. SUBMISSIONS_LIN_HISTORIES overrides
// the count of histories of every run but the broken stores', for a longer
// soak or a quicker look.
var memoryRun = linConfig{histories: 5000, clients: 6, ops: 12, groups: 2}

func TestLinearizableMemory(t *testing.T) {
	run := checkHistories(t, linSize(t, memoryRun), os.TempDir(), func(int) []lane { return memoryLanes() })
	require.NoError(t, run.err())
	figures.Add(t, "linearizable: %s, %d clients in 2 tenants on the same keys, on 3 ledgers sharing one memory store (2 on the store itself, 1 through the Store interface)",
		run, memoryRun.clients)
}

// linSize returns c with the count of histories SUBMISSIONS_LIN_HISTORIES
// sets, if it sets one.
func linSize(t *testing.T, c linConfig) linConfig {
	if v := os.Getenv("SUBMISSIONS_LIN_HISTORIES"); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err, "SUBMISSIONS_LIN_HISTORIES=%q: want a positive count", v)
		require.Positive(t, n, "SUBMISSIONS_LIN_HISTORIES=%q: want a positive count", v)
		c.histories = n
	}
	return c
}

// linSeed returns the seed SUBMISSIONS_LIN_SEED sets, or a new one.
func linSeed(t *testing.T) uint64 {
	v := os.Getenv("SUBMISSIONS_LIN_SEED")
	if v == "" {
		return uint64(time.Now().UnixNano())
	}
	seed, err := strconv.ParseUint(v, 10, 64)
	require.NoError(t, err, "SUBMISSIONS_LIN_SEED=%q", v)
	return seed
}

// linRun is what a run of histories did: how many it recorded and checked,
// and the first that failed, if one did.
type linRun struct {
	seed               uint64
	histories          int // recorded and checked, the failing one included
	ops, claims, sends int
	raced              int // Resolves that found their key released under them
	elapsed            time.Duration
	failure            *linFailure
}

// err returns the failure, as an error, or nil.
func (r linRun) err() error {
	if r.failure == nil {
		return nil
	}
	return r.failure
}

func (r linRun) String() string {
	return fmt.Sprintf("%d histories, %d operations (%d claims, %d sends, %d Resolves raced by a Release), in %v",
		r.histories, r.ops, r.claims, r.sends, r.raced, r.elapsed.Round(time.Millisecond))
}

// A linFailure is a history that failed the check.
type linFailure struct {
	history int
	seed    uint64
	// notLinearizable: porcupine found no order, or a Resolve answered
	// InFlight with no Release of its key beside it; otherwise an error no
	// rule gives, or porcupine did not decide in time.
	notLinearizable bool
	msg             string
}

func (f *linFailure) Error() string { return f.msg }

// checkHistories records up to c.histories histories, each on the lanes
// newLanes gives it, and checks each one. It stops at the first that fails,
// with porcupine's visualization of it written to a file in dir, unless dir
// is empty.
func checkHistories(t *testing.T, c linConfig, dir string, newLanes func(h int) []lane) linRun {
	run := linRun{seed: linSeed(t)}
	start := time.Now()
	for h := range c.histories {
		rng := rand.New(rand.NewPCG(run.seed, uint64(h)))
		history, stats := record(rng, c, fmt.Sprintf("h%d-%d", os.Getpid(), h), newLanes(h))
		run.histories, run.ops = h+1, run.ops+len(history)
		run.claims, run.sends = run.claims+stats.claims, run.sends+stats.sends
		fail := func(notLinearizable bool, format string, args ...any) linRun {
			run.elapsed = time.Since(start)
			run.failure = &linFailure{history: h, seed: run.seed, notLinearizable: notLinearizable,
				msg: fmt.Sprintf("history %d (SUBMISSIONS_LIN_SEED=%d) ", h, run.seed) + fmt.Sprintf(format, args...)}
			return run
		}
		if op, ok := unexpected(history); ok {
			return fail(false, "cannot be checked: %s returned an error no rule gives: %s",
				describeOp(op.Input.(Op), op.Output.(Result)), op.Metadata.(meta).err)
		}
		res, info := porcupine.CheckOperationsVerbose(ledgerModel, history, 20*time.Second)
		if res == porcupine.Ok {
			raced, op, ok := unraced(history)
			if ok {
				return fail(true, "is not linearizable: %s answered InFlight, and no Release of its key overlapped it\n%s",
					describeOp(op.Input.(Op), op.Output.(Result)), describeGroup(history, group(op.Input.(Op))))
			}
			run.raced += raced
			continue
		}
		var saved string
		if dir != "" {
			path := filepath.Join(dir, fmt.Sprintf("submissions-lin-%d-%d.html", run.seed, h))
			if err := porcupine.VisualizePath(ledgerModel, info, path); err != nil {
				t.Errorf("write the visualization: %v", err)
			}
			saved = "; its visualization is in " + path
		}
		if res == porcupine.Unknown {
			return fail(false, "was not decided within 20s (make histories smaller): %d operations%s", len(history), saved)
		}
		return fail(true, "is not linearizable: %d operations%s\n%s", len(history), saved, describeIllegal(history))
	}
	run.elapsed = time.Since(start)
	return run
}

type recordStats struct{ claims, sends int }

// meta is what a history keeps of an operation besides its input and
// output: the lane it ran on, and its error's text.
type meta struct {
	lane int
	err  string
}

// record runs one history: c.clients goroutines, released together, each
// calling c.ops random operations on random lanes, and returns what they saw.
func record(rng *rand.Rand, c linConfig, name string, lanes []lane) ([]porcupine.Operation, recordStats) {
	var (
		clock  atomic.Int64 // every call, return and send moment, in order
		claim  atomic.Int64 // numbers the Submits' claims
		mu     sync.Mutex
		out    []porcupine.Operation
		stats  recordStats
		start  = make(chan struct{})
		wg     sync.WaitGroup
		scheme = make([][]call, c.clients)
	)
	for i := range scheme { // drawn before the run, so that a seed replays the same calls
		for range c.ops {
			scheme[i] = append(scheme[i], drawCall(rng, c, name, len(lanes)))
		}
	}
	add := func(op porcupine.Operation) {
		mu.Lock()
		defer mu.Unlock()
		out = append(out, op)
		switch in := op.Input.(Op); {
		case in.Kind == Claim && op.Output.(Result).Claimed:
			stats.claims++
		case in.Kind == Settle:
			stats.sends++
		}
	}
	for client, calls := range scheme {
		wg.Go(func() {
			<-start
			for _, cl := range calls {
				l := lanes[cl.lane]
				cl.op.Ledger = l.marks
				if cl.op.Kind == Submit {
					cl.op.ClaimID = int(claim.Add(1))
					recordSubmit(client, l, cl, &clock, add)
					continue
				}
				begin := clock.Add(1)
				res, err := single(view(l.s, cl.lane, cl.op.Tenant), cl.op)
				add(porcupine.Operation{ClientId: client, Input: cl.op, Call: begin, Output: res, Return: clock.Add(1),
					Metadata: meta{cl.lane, errText(err)}})
			}
		})
	}
	close(start)
	wg.Wait()
	return out, stats
}

// call is one operation a client of a history will make, with how its rail
// behaves.
type call struct {
	op    Op
	lane  int
	pause int // how the rail waits: 0 not at all, 1 yields, 2 sleeps
}

// drawCall draws an operation on one of a history's groups of three keys
// and two withdrawals, in one of two tenants that share the keys and
// withdrawals (now and then in another tenant, valid or not). A key mostly
// goes with one withdrawal, as a client's retry does, and now and then with
// the other, or with another spelling of it.
func drawCall(rng *rand.Rand, c linConfig, name string, lanes int) call {
	tenant := tenants[rng.IntN(len(tenants))]
	switch rng.IntN(20) {
	case 0:
		tenant = otherTenants[rng.IntN(len(otherTenants))]
	case 1:
		tenant = badTenants[rng.IntN(len(badTenants))]
	}
	g := rng.IntN(c.groups)
	k := rng.IntN(3)
	w := k % 2
	if rng.IntN(8) == 0 {
		w = rng.IntN(2)
	}
	wd := W{
		ID:       fmt.Sprintf("%s-g%d-w%d", name, g, w),
		Amount:   []string{"25.00", "25", "25.0"}[rng.IntN(3)],
		Currency: []string{"USDC", "usdc"}[rng.IntN(2)],
		Dest:     "d1",
	}
	if rng.IntN(10) == 0 {
		wd.Dest = "d2" // another destination: another withdrawal under the same id
	}
	op := Op{Tenant: tenant, Key: fmt.Sprintf("%s-g%d-k%d", name, g, k), W: wd}
	switch r := rng.IntN(100); {
	case r < 55:
		op.Kind = Submit
		switch r := rng.IntN(100); {
		case r < 50:
			op.Send = SendOK
		case r < 60:
			op.Send = SendNil
		case r < 80:
			op.Send = SendFail
		case r < 82:
			op.Send = SendBoth
		case r < 85:
			op.Send = SendNotSent
		case r < 91:
			op.Send = SendPanic
		case r < 96:
			op.Send = SendWrong
		default:
			op.Send = SendLate
		}
		if op.Send == SendOK && rng.IntN(8) == 0 { // the rail answers, and the store fails to record it
			op.Send = SettleFails + Send(rng.IntN(4))
		}
	case r < 67:
		op.Kind = Resolve
		op.W = Sent(op.W, op.Key)
		if rng.IntN(4) == 0 {
			op.W.TxHash = "tx-elsewhere"
		}
	case r < 82:
		op.Kind = Release
		op.Force = rng.IntN(2) == 0
	case r < 91:
		op.Kind = Outcome
	default:
		op.Kind = ClaimedBy
	}
	return call{op: op, lane: rng.IntN(lanes), pause: rng.IntN(3)}
}

// recordSubmit runs a Submit and records it: as a Claim alone when it does
// not send, or as a Claim and a Settle when it does.
func recordSubmit(client int, l lane, cl call, clock *atomic.Int64, add func(porcupine.Operation)) {
	op := cl.op
	claimOp, settleOp := op, op
	claimOp.Kind, claimOp.Send = Claim, 0
	settleOp.Kind = Settle
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	send := rail(op, cancel, nil)
	if send == nil { // the request is the outcome, as with a nil send
		send = func(_ context.Context, w W) (W, error) { return w, nil }
	}
	var entered, left int64
	timed := func(ctx context.Context, w W) (W, error) {
		entered = clock.Add(1)
		switch cl.pause {
		case 1:
			runtime.Gosched()
		case 2:
			time.Sleep(time.Duration(rand.IntN(200)) * time.Microsecond)
		}
		left = clock.Add(1)
		return send(ctx, w)
	}
	begin := clock.Add(1)
	res, err := submit(ctx, view(l.s, cl.lane, op.Tenant), op, timed)
	end := clock.Add(1)
	if entered == 0 {
		add(porcupine.Operation{ClientId: client, Input: claimOp, Call: begin, Output: res, Return: end, Metadata: meta{cl.lane, errText(err)}})
		return
	}
	add(porcupine.Operation{ClientId: client, Input: claimOp, Call: begin, Output: Result{Claimed: true}, Return: entered, Metadata: meta{lane: cl.lane}})
	add(porcupine.Operation{ClientId: client, Input: settleOp, Call: left, Output: res, Return: end, Metadata: meta{cl.lane, errText(err)}})
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// ledgerModel is Model as porcupine takes it. Histories split by tenant and
// group: no operation of one touches another's keys or withdrawals.
var ledgerModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byGroup := map[string][]porcupine.Operation{}
		var order []string
		for _, op := range history {
			g := group(op.Input.(Op))
			if _, ok := byGroup[g]; !ok {
				order = append(order, g)
			}
			byGroup[g] = append(byGroup[g], op)
		}
		parts := make([][]porcupine.Operation, 0, len(order))
		for _, g := range order {
			parts = append(parts, byGroup[g])
		}
		return parts
	},
	Init: func() any { return &Model{} },
	Step: func(state, input, output any) (bool, any) {
		ok, next := state.(*Model).Step(input.(Op), output.(Result))
		return ok, next
	},
	Equal: func(a, b any) bool { return a.(*Model).Equal(b.(*Model)) },
	Hash: func(state any) uint64 {
		h := fnv.New64a()
		h.Write([]byte(state.(*Model).String()))
		return h.Sum64()
	},
	DescribeOperation: func(input, output any) string { return describeOp(input.(Op), output.(Result)) },
	DescribeState:     func(state any) string { return state.(*Model).String() },
	DescribeOperationMetadata: func(info any) string {
		m, _ := info.(meta)
		return fmt.Sprintf("lane %d %s", m.lane, m.err)
	},
}

// group names op's tenant and group: the part of its key or withdrawal id
// before the last '-'.
func group(op Op) string {
	name := op.Key
	if name == "" {
		name = op.W.ID
	}
	return describeTenant(op.Tenant) + " " + name[:strings.LastIndexByte(name, '-')]
}

// describeTenant names a tenant, quoted, and in short if it is long.
func describeTenant(tenant string) string {
	if len(tenant) > 16 {
		return fmt.Sprintf("%q…(%d bytes)", tenant[:8], len(tenant))
	}
	return strconv.Quote(tenant)
}

var kindNames = map[Kind]string{Submit: "Submit", Resolve: "Resolve", Release: "Release", Outcome: "Outcome", ClaimedBy: "ClaimedBy", Claim: "Claim", Settle: "Settle", Prune: "Prune", Wait: "Wait"}

// describeOp says what op did, in short: kind@ledger(arguments) -> result.
func describeOp(in Op, out Result) string {
	return describeCall(in) + " -> " + describeResult(in, out)
}

// short is a name without the prefix of its history and group.
func short(name string) string { return name[strings.LastIndexByte(name, '-')+1:] }

// describeCall says what op was: kind@ledger(arguments), with the tenant
// after the ledger unless it is the default.
func describeCall(in Op) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s@%d", kindNames[in.Kind], in.Ledger)
	if in.Tenant != "" {
		b.WriteString("/" + describeTenant(in.Tenant))
	}
	b.WriteString("(")
	switch in.Kind {
	case Submit, Claim, Resolve:
		fmt.Fprintf(&b, "%s %s %s %s %s %s", short(in.Key), short(in.W.ID), in.W.Amount, in.W.Currency, in.W.Dest, in.W.TxHash)
	case ClaimedBy:
		b.WriteString(short(in.W.ID))
	default:
		b.WriteString(short(in.Key))
	}
	if in.Kind == Submit || in.Kind == Claim || in.Kind == Settle {
		fmt.Fprintf(&b, " claim %d", in.ClaimID)
	}
	if in.Kind == Submit || in.Kind == Settle {
		fmt.Fprintf(&b, " %s", sendNames[in.Send])
	}
	b.WriteString(")")
	return b.String()
}

// describeResult says what out, the result of in, is.
func describeResult(in Op, out Result) string {
	var b strings.Builder
	switch {
	case out.Err != None:
		b.WriteString(errNames[out.Err])
		if out.Holder != "" {
			b.WriteString(" " + short(out.Holder))
		}
		if out.Tenant != "" {
			b.WriteString(" in " + describeTenant(out.Tenant))
		}
		if out.Outcome != (W{}) {
			fmt.Fprintf(&b, " %s %s %s %s", short(out.Outcome.ID), out.Outcome.Amount, out.Outcome.Currency, out.Outcome.TxHash)
		}
	case out.Claimed:
		b.WriteString("claimed")
	case in.Kind == ClaimedBy:
		fmt.Fprintf(&b, "%s %v", short(out.Holder), out.OK)
	case out.Outcome != (W{}):
		fmt.Fprintf(&b, "%s %s %s %s", short(out.Outcome.ID), out.Outcome.Amount, out.Outcome.Currency, out.Outcome.TxHash)
	default:
		fmt.Fprintf(&b, "ok %v", out.OK)
	}
	return b.String()
}

var (
	sendNames = map[Send]string{SendOK: "sent", SendNil: "request", SendFail: "failed", SendPanic: "panicked",
		SendWrong: "wrong", SendLate: "late", SendBoth: "answer and error", SendNotSent: "said nothing moved", SettleFails: "Settle failed",
		SettleFailsAfter: "Settle recorded, then failed", SettlePanics: "Settle panicked",
		SettlePanicsAfter: "Settle recorded, then panicked"}
	errNames = map[Err]string{Conflict: "Conflict", Idempotency: "Idempotency", InFlight: "InFlight",
		OutcomeUnknown: "OutcomeUnknown", SendPanicked: "SendPanicked", StorePanicked: "StorePanicked", NotRecorded: "NotRecorded", InvalidTenant: "InvalidTenant",
		Pruned: "Pruned", UnknownKey: "UnknownKey", NotSent: "NotSent", Unexpected: "Unexpected"}
)

// unexpected returns an operation of history that ended with an error no
// rule gives (a store failure, say).
func unexpected(history []porcupine.Operation) (porcupine.Operation, bool) {
	for _, op := range history {
		if op.Output.(Result).Err == Unexpected {
			return op, true
		}
	}
	return porcupine.Operation{}, false
}

// unraced returns a Resolve of history that answered InFlight with no
// Release of its key, in its tenant, that succeeded while it ran (an
// operator's, or a send's that moved nothing): the one answer Model.Step
// allows on faith, checked here. If there is none, it returns how many
// Resolves answered InFlight.
func unraced(history []porcupine.Operation) (raced int, _ porcupine.Operation, _ bool) {
	for _, op := range history {
		in := op.Input.(Op)
		if in.Kind != Resolve || op.Output.(Result).Err != InFlight {
			continue
		}
		overlapped := slices.ContainsFunc(history, func(r porcupine.Operation) bool {
			rin := r.Input.(Op)
			released := rin.Kind == Release && r.Output.(Result) == (Result{}) ||
				rin.Send == SendNotSent && r.Output.(Result).Err == NotSent
			return released && rin.Tenant == in.Tenant && rin.Key == in.Key && r.Call <= op.Return && op.Call <= r.Return
		})
		if !overlapped {
			return 0, op, true
		}
		raced++
	}
	return raced, porcupine.Operation{}, false
}

// describeIllegal lists the operations of the groups of history that have no
// linearization, in call order.
func describeIllegal(history []porcupine.Operation) string {
	var b strings.Builder
	for _, part := range ledgerModel.Partition(history) {
		if porcupine.CheckOperationsTimeout(ledgerModel, part, 20*time.Second) == porcupine.Ok {
			continue
		}
		b.WriteString(describeGroup(part, group(part[0].Input.(Op))))
	}
	return b.String()
}

// describeGroup lists the operations of history in group g, in call order.
func describeGroup(history []porcupine.Operation, g string) string {
	var part []porcupine.Operation
	for _, op := range history {
		if group(op.Input.(Op)) == g {
			part = append(part, op)
		}
	}
	slices.SortFunc(part, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
	var b strings.Builder
	fmt.Fprintf(&b, "group %s:\n", g)
	for _, op := range part {
		m := op.Metadata.(meta)
		fmt.Fprintf(&b, "  [%d,%d] client %d lane %d %s", op.Call, op.Return, op.ClientId, m.lane, describeOp(op.Input.(Op), op.Output.(Result)))
		if m.err != "" {
			fmt.Fprintf(&b, " (%s)", m.err)
		}
		b.WriteByte('\n')
	}
	return b.String()
}
