package verify

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemledger/submissions"
	"github.com/idemledger/submissions/pgstore"
)

// runFailoverChild runs the test binary as one ledger process of
// TestFailover, which starts it with failoverChildVar set, and exits; it
// returns at once without the variable.
func runFailoverChild() {
	process := os.Getenv(failoverChildVar)
	if process == "" {
		return
	}
	if err := failoverChild(process); err != nil {
		failoverSay("error", strconv.Quote(err.Error()))
		os.Exit(1)
	}
	os.Exit(0)
}

// failoverMu keeps failoverSay's lines whole.
var failoverMu sync.Mutex

// failoverSay prints one line to TestFailover, which reads the process's
// standard output.
func failoverSay(fields ...string) {
	failoverMu.Lock()
	defer failoverMu.Unlock()
	fmt.Println(strings.Join(fields, " "))
}

// failoverChild is a payout service's instance: a ledger on pgstore through
// the multi-host string, whose workers submit withdrawals w-0, w-1... a block
// of failoverBlock at a time (in an order of their own) until the test says
// "stop" on standard input. The rail reports every transfer ("sent") before
// it answers. For TestFailover it also makes one send, of withdrawal
// held-<process>, held until the test says "release" (it kills the primary
// first), before "stop". For TestHA (haModeVar set) it has haWorkers
// workers, no held send, and each Submit has haTimeout to answer.
func failoverChild(process string) error {
	ha := os.Getenv(haModeVar) != ""
	workers, timeout, overall := failoverWorkers, time.Duration(0), 90*time.Second
	if ha {
		workers, timeout, overall = haWorkers, haTimeout, 5*time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), overall)
	defer cancel()
	cfg, err := pgxpool.ParseConfig(os.Getenv("SUBMISSIONS_FAILOVER_URL"))
	if err != nil {
		return err
	}
	cfg.MaxConns = int32(workers) + 2
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	st, err := pgstore.New[W](pool, pgstore.WithTable(os.Getenv(failoverTableVar)))
	if err != nil {
		return err
	}
	if err := st.Migrate(ctx); err != nil { // as every instance does at its start
		return err
	}
	ledger := submissions.NewWithStore[W](st, quiet)

	var sent atomic.Int64
	rail := func(key string, during func()) func(context.Context, W) (W, error) {
		return func(_ context.Context, x W) (W, error) {
			x.TxHash = fmt.Sprintf("0x%s-%d", process, sent.Add(1))
			failoverSay("sent", x.ID, key, x.TxHash)
			if during != nil {
				during()
			}
			return x, nil
		}
	}
	release, stop, stdinDone := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stdinDone)
		in := bufio.NewScanner(os.Stdin)
		if !ha {
			in.Scan() // "release", or the end of the input
		}
		close(release)
		in.Scan() // "stop", or the end of the input
		close(stop)
		for in.Scan() {
		}
	}()

	var wg sync.WaitGroup
	if !ha {
		wg.Go(func() {
			// The held send's caller gives up a second after its answer:
			// the ledger writes an answer again while the primary is gone
			// only while its caller's ctx lasts, and this test promotes
			// the standby once every held send's caller has its error.
			hctx, cancel := context.WithCancel(ctx)
			defer cancel()
			key := "held-" + process
			failoverSubmit(hctx, 0, ledger, key, failoverW(key), rail(key, func() {
				failoverSay("holding", key)
				<-release
				time.AfterFunc(failoverHeldFor, cancel)
			}))
		})
	}
	for g := range workers {
		wg.Go(func() {
			for b := 0; ; b++ {
				select {
				case <-stop:
					return
				default:
				}
				for _, j := range rand.Perm(failoverBlock) {
					i := b*failoverBlock + j
					key := failoverKey(i, g)
					failoverSubmit(ctx, timeout, ledger, key, failoverW(fmt.Sprint("w-", i)), rail(key, nil))
				}
			}
		})
	}
	wg.Wait()
	<-stdinDone
	return nil
}

// failoverSubmit submits x under key, again after each ErrStoreFailed (which
// sent nothing), backing off, and reports each failure and the answer, with
// when the attempt began (Unix milliseconds) and the count of failures
// before it. With a timeout, each attempt has that long, and one that
// returns later than haLate after its deadline is reported ("late").
func failoverSubmit(ctx context.Context, timeout time.Duration, ledger *submissions.Submissions[W], key string, x W, send func(context.Context, W) (W, error)) {
	pause := 5 * time.Millisecond
	for failures := 0; ; failures++ {
		attempt, cancel := ctx, context.CancelFunc(func() {})
		if timeout > 0 {
			attempt, cancel = context.WithTimeout(ctx, timeout)
		}
		began := time.Now()
		out, replayed, err := ledger.SubmitOrReplay(attempt, key, x, send)
		cancel()
		if late := time.Since(began) - timeout; timeout > 0 && late > haLate {
			failoverSay("late", key, strconv.FormatInt(late.Milliseconds(), 10), strconv.Quote(fmt.Sprint(err)))
		}
		n, at := strconv.Itoa(failures), strconv.FormatInt(began.UnixMilli(), 10)
		var conflict *submissions.ConflictError
		switch {
		case err == nil && replayed:
			failoverSay("ok", key, x.ID, out.TxHash, "replayed", at, n)
			return
		case err == nil:
			failoverSay("ok", key, x.ID, out.TxHash, "sent", at, n)
			return
		case classesOf(err) != 1:
			failoverSay("error", key, "of no class or of two:", strconv.Quote(err.Error()))
			return
		case errors.As(err, &conflict):
			failoverSay("conflict", key, x.ID, conflict.Holder, n)
			return
		case errors.Is(err, submissions.ErrSubmissionInFlight):
			failoverSay("inflight", key, x.ID, n)
			return
		case errors.Is(err, submissions.ErrOutcomeNotRecorded):
			failoverSay("cut", key, x.ID, "notrecorded", out.TxHash, n)
			return
		case errors.Is(err, submissions.ErrOutcomeUnknown):
			failoverSay("cut", key, x.ID, "unknown", "-", n)
			return
		case !errors.Is(err, submissions.ErrStoreFailed):
			failoverSay("error", key, strconv.Quote(err.Error()))
			return
		}
		failoverSay("storefailed", key)
		select {
		case <-ctx.Done():
			failoverSay("error", key, "gave up:", strconv.Quote(err.Error()))
			return
		case <-time.After(pause):
		}
		pause = min(2*pause, 200*time.Millisecond)
	}
}
