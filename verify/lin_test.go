package verify

import (
	"cmp"
	"context"
	"errors"
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
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemledger/submissions"
	"github.com/idemledger/submissions/internal/figures"
	"github.com/idemledger/submissions/pgstore"
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

// linConfig sizes a run of histories.
type linConfig struct {
	histories int // how many
	clients   int // goroutines per history, released together
	ops       int // operations per client
	groups    int // independent sets of keys and withdrawals per history
}

// The sizes CI runs. SUBMISSIONS_LIN_HISTORIES overrides the counts, for a
// longer soak or a quicker look.
var (
	memoryRun   = linConfig{histories: 5000, clients: 6, ops: 12, groups: 3}
	postgresRun = linConfig{histories: 1000, clients: 6, ops: 12, groups: 3}
)

// lane is one ledger of a history, as Model's operations name it.
type lane struct {
	s      *submissions.Submissions[W]
	id     int
	native bool
}

// opaque hides a store's type, so that a ledger runs it as it runs any Store:
// with marks of its own and settles by key and fingerprint.
type opaque struct{ submissions.Store[W] }

func TestLinearizableMemory(t *testing.T) {
	checkHistories(t, linSize(t, memoryRun), func(t *testing.T, h int) []lane {
		st := submissions.NewMemoryStore[W]()
		return []lane{
			{submissions.NewWithStore(st, quiet), 0, true},
			{submissions.NewWithStore(st, quiet), 1, true}, // shares the store's marks
			{submissions.NewWithStore[W](opaque{st}, quiet), 2, false},
		}
	})
}

func TestLinearizablePostgres(t *testing.T) {
	pool := testPool(t)
	// A name of this run's own, dropped first in case a killed run left it.
	table := fmt.Sprintf("lin_%d_%d", os.Getpid(), rand.Uint32())
	if _, err := pool.Exec(bg, "DROP TABLE IF EXISTS "+table); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := pool.Exec(bg, "DROP TABLE IF EXISTS "+table); err != nil {
			t.Errorf("drop %s: %v", table, err)
		}
	})
	var lanes []lane
	for i := range 3 { // three instances of a service, each with its own Store
		st, err := pgstore.New[W](pool, pgstore.WithTable(table))
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Migrate(bg); err != nil {
			t.Fatal(err)
		}
		lanes = append(lanes, lane{submissions.NewWithStore[W](st, quiet), i, false})
	}
	// One table for every history: each history's keys and withdrawals are
	// its own (they carry its number), so it starts from an empty ledger.
	checkHistories(t, linSize(t, postgresRun), func(*testing.T, int) []lane { return lanes })
}

// testPool returns a pool on the test database, closed when t ends. Without a
// database it skips t, saying how to get one; with CI=true it fails t instead.
func testPool(t *testing.T) *pgxpool.Pool {
	url := os.Getenv("SUBMISSIONS_TEST_DATABASE_URL")
	if url == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("SUBMISSIONS_TEST_DATABASE_URL is not set, and CI=true: the PostgreSQL checks must run")
		}
		t.Skip("SUBMISSIONS_TEST_DATABASE_URL is not set: skipping the PostgreSQL checks (scripts/test starts a local server when it can)")
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 16 // more than the clients: each call has a connection of its own
	pool, err := pgxpool.NewWithConfig(bg, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func linSize(t *testing.T, c linConfig) linConfig {
	if v := os.Getenv("SUBMISSIONS_LIN_HISTORIES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("SUBMISSIONS_LIN_HISTORIES=%q: want a positive count", v)
		}
		c.histories = n
	}
	return c
}

// checkHistories records c.histories histories on the lanes newLanes gives
// each, and checks every one. It stops at the first that is not linearizable,
// with porcupine's visualization of it written to a file it names.
func checkHistories(t *testing.T, c linConfig, newLanes func(t *testing.T, h int) []lane) {
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("SUBMISSIONS_LIN_SEED"); v != "" {
		var err error
		if seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("SUBMISSIONS_LIN_SEED=%q: %v", v, err)
		}
	}
	start := time.Now()
	var ops, claims, sends int
	for h := range c.histories {
		rng := rand.New(rand.NewPCG(seed, uint64(h)))
		history, stats := record(rng, c, fmt.Sprintf("h%d-%d", os.Getpid(), h), newLanes(t, h))
		ops, claims, sends = ops+len(history), claims+stats.claims, sends+stats.sends
		if op, err := unexpected(history); err != "" {
			t.Fatalf("history %d (SUBMISSIONS_LIN_SEED=%d): %s returned an error no rule gives, so the history cannot be checked: %s",
				h, seed, describeOp(op.Input.(Op), op.Output.(Result)), err)
		}
		res, info := porcupine.CheckOperationsVerbose(ledgerModel, history, 20*time.Second)
		if res == porcupine.Ok {
			if op, ok := unraced(history); ok {
				t.Fatalf("history %d (SUBMISSIONS_LIN_SEED=%d) is not linearizable: %s answered InFlight, and no Release of its key overlapped it\n%s",
					h, seed, describeOp(op.Input.(Op), op.Output.(Result)), describeGroup(history, group(op.Input.(Op))))
			}
			continue
		}
		path := filepath.Join(os.TempDir(), fmt.Sprintf("submissions-lin-%d-%d.html", seed, h))
		if err := porcupine.VisualizePath(ledgerModel, info, path); err != nil {
			t.Errorf("write the visualization: %v", err)
		}
		verdict := "not linearizable"
		if res == porcupine.Unknown {
			verdict = "not decided within 20s (treated as a failure: make histories smaller)"
		}
		t.Fatalf("history %d (SUBMISSIONS_LIN_SEED=%d) is %s: %d operations; its visualization is in %s\n%s",
			h, seed, verdict, len(history), path, describeIllegal(history))
	}
	figures.Add(t, "linearizable: %d histories, %d operations (%d claims, %d sends), %d clients on %d ledgers sharing one store, in %v",
		c.histories, ops, claims, sends, c.clients, len(newLanes(t, 0)), time.Since(start).Round(time.Millisecond))
}

type recordStats struct{ claims, sends int }

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
		scheme = make([][]step, c.clients)
	)
	for i := range scheme { // drawn before the run, so that a seed replays the same calls
		for range c.ops {
			scheme[i] = append(scheme[i], drawStep(rng, c, name, len(lanes)))
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
	for client, steps := range scheme {
		wg.Go(func() {
			<-start
			for _, st := range steps {
				l := lanes[st.lane]
				st.op.Ledger, st.op.Native = l.id, l.native
				if st.op.Kind == Submit {
					st.op.ClaimID = int(claim.Add(1))
					submit(client, l, st, &clock, add)
					continue
				}
				call := clock.Add(1)
				res, err := single(l.s, st.op)
				add(porcupine.Operation{ClientId: client, Input: st.op, Call: call, Output: res, Return: clock.Add(1), Metadata: errText(err)})
			}
		})
	}
	close(start)
	wg.Wait()
	return out, stats
}

// step is one operation a client will make, with how its send behaves.
type step struct {
	op    Op
	lane  int
	pause int // how the rail waits: 0 not at all, 1 yields, 2 sleeps
}

// drawStep draws an operation on one of a history's groups of three keys and
// two withdrawals. A key mostly goes with one withdrawal, as a client's retry
// does, and now and then with the other, or with another spelling of it.
func drawStep(rng *rand.Rand, c linConfig, name string, lanes int) step {
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
	op := Op{Key: fmt.Sprintf("%s-g%d-k%d", name, g, k), W: wd}
	switch r := rng.IntN(100); {
	case r < 55:
		op.Kind = Submit
		switch r := rng.IntN(100); {
		case r < 50:
			op.Send = SendOK
		case r < 60:
			op.Send = SendNil
		case r < 85:
			op.Send = SendFail
		case r < 91:
			op.Send = SendPanic
		case r < 96:
			op.Send = SendWrong
		default:
			op.Send = SendLate
		}
	case r < 67:
		op.Kind = Resolve
		op.W = Sent(op.W, op.Key)
		if rng.IntN(4) == 0 {
			op.W.TxHash = "tx-elsewhere"
		}
	case r < 82:
		op.Kind = Release
	case r < 91:
		op.Kind = Outcome
	default:
		op.Kind = ClaimedBy
	}
	return step{op: op, lane: rng.IntN(lanes), pause: rng.IntN(3)}
}

// submit runs a Submit and records it: as a Claim alone when it does not send,
// or as a Claim and a Settle when it does.
func submit(client int, l lane, st step, clock *atomic.Int64, add func(porcupine.Operation)) {
	op := st.op
	claimOp, settleOp := op, op
	claimOp.Kind, claimOp.Send = Claim, 0
	settleOp.Kind = Settle
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	rail := railFor(op, cancel)
	if rail == nil { // the request is the outcome, as with a nil send
		rail = func(_ context.Context, w W) (W, error) { return w, nil }
	}
	var entered, left int64
	send := func(ctx context.Context, w W) (W, error) {
		entered = clock.Add(1)
		switch st.pause {
		case 1:
			runtime.Gosched()
		case 2:
			time.Sleep(time.Duration(rand.IntN(200)) * time.Microsecond)
		}
		left = clock.Add(1)
		return rail(ctx, w)
	}
	call := clock.Add(1)
	var res Result
	var err error
	func() {
		defer railPanicked(&res)
		var got W
		got, err = l.s.Submit(ctx, op.Key, op.W, send)
		res = submitted(got, err)
	}()
	ret := clock.Add(1)
	if entered == 0 {
		add(porcupine.Operation{ClientId: client, Input: claimOp, Call: call, Output: res, Return: ret, Metadata: errText(err)})
		return
	}
	add(porcupine.Operation{ClientId: client, Input: claimOp, Call: call, Output: Result{Claimed: true}, Return: entered})
	add(porcupine.Operation{ClientId: client, Input: settleOp, Call: left, Output: res, Return: ret, Metadata: errText(err)})
}

const railBug = "rail bug"

// submitted says what a Submit's return means: the outcome goes with it when
// it came from the rail (no error, or ErrOutcomeNotRecorded).
func submitted(out W, err error) Result {
	res := classify(err)
	if res.Err == None || res.Err == NotRecorded {
		res.Outcome = out
	}
	return res
}

// single runs an operation other than Submit.
func single(s *submissions.Submissions[W], op Op) (res Result, err error) {
	switch op.Kind {
	case Resolve:
		err = s.Resolve(bg, op.Key, op.W)
	case Release:
		err = s.Release(bg, op.Key)
	case Outcome:
		res.Outcome, res.OK, err = s.Outcome(bg, op.Key)
	case ClaimedBy:
		res.Holder, res.OK, err = s.ClaimedBy(bg, op.W.ID)
	default:
		panic(fmt.Sprintf("single: %v", op.Kind))
	}
	if err != nil {
		return classify(err), err
	}
	return res, nil
}

// classify says what an error means, as Model says it. An error no rule
// gives is Unexpected, which no model step produces: the checker alone
// reports it.
func classify(err error) Result {
	var conflict *submissions.ConflictError
	switch {
	case err == nil:
		return Result{}
	case errors.Is(err, submissions.ErrOutcomeNotRecorded):
		return Result{Err: NotRecorded}
	case errors.As(err, &conflict):
		return Result{Err: Conflict, Holder: conflict.Holder}
	case errors.Is(err, submissions.ErrIdempotencyConflict):
		return Result{Err: Idempotency}
	case errors.Is(err, submissions.ErrSubmissionInFlight):
		return Result{Err: InFlight}
	case errors.Is(err, errRail):
		return Result{Err: SendFailed}
	}
	return Result{Err: Unexpected}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// ledgerModel is Model as porcupine takes it. Histories split by group: no
// operation of one group touches another's keys or withdrawals.
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
	Equal: func(a, b any) bool { return a.(*Model).String() == b.(*Model).String() },
	Hash: func(state any) uint64 {
		h := fnv.New64a()
		h.Write([]byte(state.(*Model).String()))
		return h.Sum64()
	},
	DescribeOperation: func(input, output any) string { return describeOp(input.(Op), output.(Result)) },
	DescribeState:     func(state any) string { return state.(*Model).String() },
	DescribeOperationMetadata: func(info any) string {
		s, _ := info.(string)
		return s
	},
}

// group is the part of a key or withdrawal id that names its group.
func group(op Op) string {
	name := op.Key
	if name == "" {
		name = op.W.ID
	}
	return name[:strings.LastIndexByte(name, '-')]
}

var kindNames = map[Kind]string{Submit: "Submit", Resolve: "Resolve", Release: "Release", Outcome: "Outcome", ClaimedBy: "ClaimedBy", Claim: "Claim", Settle: "Settle"}

func describeOp(in Op, out Result) string {
	short := func(name string) string { return name[strings.LastIndexByte(name, '-')+1:] }
	var b strings.Builder
	fmt.Fprintf(&b, "%s@%d(%s", kindNames[in.Kind], in.Ledger, short(in.Key))
	switch in.Kind {
	case Claim, Resolve:
		fmt.Fprintf(&b, " %s %s %s %s %s", short(in.W.ID), in.W.Amount, in.W.Currency, in.W.Dest, in.W.TxHash)
	case Settle:
		fmt.Fprintf(&b, " %s", sendNames[in.Send])
	case ClaimedBy:
		b.WriteString(short(in.W.ID))
	}
	b.WriteString(") -> ")
	switch {
	case out.Err != None:
		b.WriteString(errNames[out.Err])
		if out.Holder != "" {
			b.WriteString(" " + short(out.Holder))
		}
		if out.Outcome != (W{}) {
			b.WriteString(" " + out.Outcome.TxHash)
		}
	case in.Kind == Claim && out.Claimed:
		b.WriteString("claimed")
	case in.Kind == ClaimedBy:
		fmt.Fprintf(&b, "%s %v", short(out.Holder), out.OK)
	case out.Outcome != (W{}):
		fmt.Fprintf(&b, "%s %s %s", out.Outcome.Amount, out.Outcome.Currency, out.Outcome.TxHash)
	default:
		fmt.Fprintf(&b, "ok %v", out.OK)
	}
	return b.String()
}

var (
	sendNames = map[Send]string{SendOK: "sent", SendNil: "request", SendFail: "failed", SendPanic: "panicked", SendWrong: "wrong", SendLate: "late"}
	errNames  = map[Err]string{Conflict: "Conflict", Idempotency: "Idempotency", InFlight: "InFlight", SendFailed: "SendFailed", SendPanicked: "SendPanicked", NotRecorded: "NotRecorded", Unexpected: "Unexpected"}
)

// unexpected returns an operation of history that ended with an error no rule
// gives (a store failure, say), and the error.
func unexpected(history []porcupine.Operation) (porcupine.Operation, string) {
	for _, op := range history {
		if op.Output.(Result).Err == Unexpected {
			return op, op.Metadata.(string)
		}
	}
	return porcupine.Operation{}, ""
}

// unraced returns a Resolve of history that answered InFlight with no
// Release of its key that succeeded while it ran: the one answer Model.Step
// allows on faith, checked here.
func unraced(history []porcupine.Operation) (porcupine.Operation, bool) {
	for _, op := range history {
		in := op.Input.(Op)
		if in.Kind != Resolve || op.Output.(Result).Err != InFlight {
			continue
		}
		raced := slices.ContainsFunc(history, func(r porcupine.Operation) bool {
			rin := r.Input.(Op)
			return rin.Kind == Release && rin.Key == in.Key && r.Output.(Result) == (Result{}) &&
				r.Call <= op.Return && op.Call <= r.Return
		})
		if !raced {
			return op, true
		}
	}
	return porcupine.Operation{}, false
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
		fmt.Fprintf(&b, "  [%d,%d] client %d %s", op.Call, op.Return, op.ClientId, describeOp(op.Input.(Op), op.Output.(Result)))
		if m, _ := op.Metadata.(string); m != "" {
			fmt.Fprintf(&b, " (%s)", m)
		}
		b.WriteByte('\n')
	}
	return b.String()
}
