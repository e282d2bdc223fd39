package verify

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"testing"

	"pgregory.net/rapid"

	"github.com/idemledger/submissions"
	"github.com/idemledger/submissions/pgstore"
)

var (
	bg      = context.Background()
	quiet   = submissions.WithLogger(slog.New(slog.DiscardHandler))
	errRail = errors.New("rail timed out")
)

// The small worlds the checks draw from: few keys and withdrawals, so that
// operations meet; amounts and currencies spelled several ways.
var (
	keys     = []string{"k1", "k2", "k3", "k4"}
	ids      = []string{"w1", "w2", "w3"}
	amounts  = []string{"25.00", "25", "025.0", "26"}
	currency = []string{"USDC", "usdc", "EUR"}
	dests    = []string{"d1", "d2"}
	txs      = []string{"", "tx-a", "tx-b"}
)

func drawW(t *rapid.T) W {
	return W{
		ID:       rapid.SampledFrom(ids).Draw(t, "id"),
		Amount:   rapid.SampledFrom(amounts).Draw(t, "amount"),
		Currency: rapid.SampledFrom(currency).Draw(t, "currency"),
		Dest:     rapid.SampledFrom(dests).Draw(t, "dest"),
	}
}

func drawOp(t *rapid.T) Op {
	op := Op{Kind: Kind(rapid.IntRange(0, 4).Draw(t, "kind")), Key: rapid.SampledFrom(keys).Draw(t, "key"), W: drawW(t)}
	switch op.Kind {
	case Submit:
		op.Send = Send(rapid.IntRange(0, 5).Draw(t, "send"))
	case Resolve:
		op.W.TxHash = rapid.SampledFrom(txs).Draw(t, "tx")
	}
	return op
}

// railFor returns the send function of a Submit op: nil for SendNil. cancel
// ends the Submit's context, for SendLate.
func railFor(op Op, cancel context.CancelFunc) func(context.Context, W) (W, error) {
	switch op.Send {
	case SendNil:
		return nil
	case SendFail:
		return func(context.Context, W) (W, error) { return W{}, errRail }
	case SendPanic:
		return func(context.Context, W) (W, error) { panic(railBug) }
	case SendWrong:
		return func(_ context.Context, w W) (W, error) { w.ID += "x"; return w, nil }
	case SendLate:
		return func(_ context.Context, w W) (W, error) { cancel(); return Sent(w, op.Key), nil }
	}
	return func(_ context.Context, w W) (W, error) { return Sent(w, op.Key), nil }
}

// railPanicked, deferred, recovers the rail's panic into *res as
// SendPanicked; any other panic goes on.
func railPanicked(res *Result) {
	if p := recover(); p != nil {
		if p != railBug {
			panic(p)
		}
		*res = Result{Err: SendPanicked}
	}
}

// apply runs op on a real ledger and says what came back, as Model says it.
// An error no rule gives panics: the sequential checks have no store failures.
func apply(s *submissions.Submissions[W], op Op) (res Result) {
	defer railPanicked(&res)
	var err error
	if op.Kind == Submit {
		ctx, cancel := context.WithCancel(bg)
		defer cancel()
		res = submitted(s.Submit(ctx, op.Key, op.W, railFor(op, cancel)))
	} else {
		res, err = single(s, op)
	}
	if res.Err == Unexpected {
		panic(fmt.Sprintf("unexpected error from %+v: %v", op, err))
	}
	return res
}

// check runs random sequences of operations on ledgers from newLedger and on
// the model, and fails at the first result that differs; rapid shrinks the
// sequence to a minimal one.
func check(t *testing.T, newLedger func(t *rapid.T) *submissions.Submissions[W]) {
	rapid.Check(t, func(t *rapid.T) {
		s, m := newLedger(t), &Model{}
		for i := range rapid.IntRange(1, 40).Draw(t, "ops") {
			op := drawOp(t)
			got, want := apply(s, op), m.Apply(op)
			if got != want {
				t.Fatalf("op %d %+v: got %+v; want %+v", i, op, got, want)
			}
		}
		for _, key := range keys { // and the end states agree
			if got, want := apply(s, Op{Kind: Outcome, Key: key}), m.Apply(Op{Kind: Outcome, Key: key}); got != want {
				t.Fatalf("Outcome(%s) at the end: got %+v; want %+v", key, got, want)
			}
		}
		for _, id := range ids {
			op := Op{Kind: ClaimedBy, W: W{ID: id}}
			if got, want := apply(s, op), m.Apply(op); got != want {
				t.Fatalf("ClaimedBy(%s) at the end: got %+v; want %+v", id, got, want)
			}
		}
	})
}

func TestMemoryLedgerFollowsTheModel(t *testing.T) {
	check(t, func(*rapid.T) *submissions.Submissions[W] { return submissions.New[W](quiet) })
}

func TestPostgresLedgerFollowsTheModel(t *testing.T) {
	pool := testPool(t)
	var n atomic.Int64
	var tables []string
	defer func() {
		for _, table := range tables {
			if _, err := pool.Exec(bg, "DROP TABLE IF EXISTS "+table); err != nil {
				t.Errorf("drop %s: %v", table, err)
			}
		}
	}()
	check(t, func(t *rapid.T) *submissions.Submissions[W] {
		table := fmt.Sprintf("verify_%d_%d", os.Getpid(), n.Add(1))
		tables = append(tables, table)
		st, err := pgstore.New[W](pool, pgstore.WithTable(table))
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Migrate(bg); err != nil {
			t.Fatal(err)
		}
		return submissions.NewWithStore[W](st, quiet)
	})
}
