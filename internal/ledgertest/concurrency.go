package ledgertest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemledger/submissions"
	"github.com/idemledger/submissions/admin"
)

// Concurrency: every rule holds under any interleaving, shown with goroutines
// released together and the rail's sends counted.
var concurrencyTests = []test{
	{"ConcurrentTapsOfOneKeySendOnce", testConcurrentTapsOfOneKeySendOnce},
	{"ConcurrentKeysForOneWithdrawalSendOnce", testConcurrentKeysForOneWithdrawalSendOnce},
	{"ConcurrentInstancesSendOnce", testConcurrentInstancesSendOnce},
	{"Stress", testStress},
}

const taps = 64

// together runs f(i) for i in [0, n) on n goroutines released at once, and
// returns their results in the order they finished. f must not block on a
// result of another call; send functions that should wait for the others get
// the channel hold, closed when every other call has returned.
func together(t *testing.T, n int, f func(i int, hold <-chan struct{}) error) []error {
	t.Helper()
	var ready sync.WaitGroup
	start, hold := make(chan struct{}), make(chan struct{})
	results := make(chan error, n)
	ready.Add(n)
	for i := range n {
		go func() {
			ready.Done()
			<-start
			results <- f(i, hold)
		}()
	}
	ready.Wait()
	close(start)
	var errs []error
	released := false
	release := func() {
		if !released {
			close(hold)
			released = true
		}
	}
	for len(errs) < n {
		select {
		case err := <-results:
			errs = append(errs, err)
			if len(errs) == n-1 {
				release()
			}
		case <-time.After(5 * time.Second):
			require.False(t, released, "%d of %d calls still running 5s after the rail was released", n-len(errs), n)
			// More than one call is blocked in send: let them all go, and
			// let the counts show it.
			release()
		}
	}
	return errs
}

func testConcurrentTapsOfOneKeySendOnce(t *testing.T, newStore Factory) {
	for round := range 10 {
		f := setUp(t, newStore)
		w := newWithdrawal(fmt.Sprint("w-", round))
		want := sentTx(w, "0xtx-"+w.ID)
		var outcomes atomic.Int64
		errs := together(t, taps, func(_ int, hold <-chan struct{}) error {
			out, err := f.s.Submit(bg, "req-1", w, func(ctx context.Context, req Withdrawal) (Withdrawal, error) {
				<-hold // slow: the rail answers after every other tap has returned
				return f.rail.send(ctx, req)
			})
			if err == nil {
				if out != want {
					return fmt.Errorf("outcome: got %+v; want %+v", out, want)
				}
				outcomes.Add(1)
			}
			return err
		})
		f.rail.requireSends(t, 1)
		inFlight := 0
		for _, err := range errs {
			if err != nil {
				requireRefusal(t, err, submissions.ErrSubmissionInFlight)
				inFlight++
			}
		}
		require.Equal(t, int64(1), outcomes.Load(), "round %d: taps that got the outcome", round)
		require.Equal(t, taps-1, inFlight, "round %d: taps refused as in flight", round)
	}
}

func testConcurrentKeysForOneWithdrawalSendOnce(t *testing.T, newStore Factory) {
	for round := range 10 {
		f := setUp(t, newStore)
		errs := together(t, taps, func(i int, hold <-chan struct{}) error {
			_, err := f.s.Submit(bg, fmt.Sprint("req-", i), f.w, func(ctx context.Context, req Withdrawal) (Withdrawal, error) {
				<-hold
				return f.rail.send(ctx, req)
			})
			return err
		})
		f.rail.requireSends(t, 1)
		holder, ok, err := f.s.ClaimedBy(bg, "w-1")
		require.NoError(t, err)
		require.True(t, ok, "round %d: the withdrawal has a holder", round)
		wins := 0
		for _, err := range errs {
			if err == nil {
				wins++
				continue
			}
			requireConflict(t, err, holder)
		}
		require.Equal(t, 1, wins, "round %d: winners", round)
		_, ok, err = f.s.Outcome(bg, holder)
		require.NoError(t, err)
		require.True(t, ok, "round %d: the winner's outcome is recorded", round)
	}
}

// testConcurrentInstancesSendOnce: several ledgers on one store, as
// instances of a service share a database, each with taps of a key of its
// own and of a shared key for the same withdrawals, released together.
func testConcurrentInstancesSendOnce(t *testing.T, newStore Factory) {
	const instances, withdrawals = 4, 8
	f := setUp(t, newStore)
	ledgers := []*submissions.Submissions[Withdrawal]{f.s}
	for len(ledgers) < instances {
		ledgers = append(ledgers, f.elsewhere())
	}
	var sends [withdrawals]atomic.Int64
	errs := together(t, instances*withdrawals*2, func(i int, _ <-chan struct{}) error {
		s, n := ledgers[i%instances], (i/instances)%withdrawals
		w := newWithdrawal(fmt.Sprint("w-", n))
		key := fmt.Sprint("shared-", n)
		if i/(instances*withdrawals) == 1 {
			key = fmt.Sprintf("own-%d-%d", i%instances, n)
		}
		_, err := s.Submit(bg, key, w, func(ctx context.Context, req Withdrawal) (Withdrawal, error) {
			sends[n].Add(1)
			return f.rail.send(ctx, req)
		})
		return err
	})
	for n := range sends {
		require.Equal(t, int64(1), sends[n].Load(), "sends of w-%d", n)
	}
	for _, err := range errs {
		switch {
		case err == nil:
		case errors.Is(err, submissions.ErrSubmissionInFlight): // a shared key whose send runs elsewhere
			requireRefusal(t, err, submissions.ErrSubmissionInFlight)
		default:
			requireRefusal(t, err, submissions.ErrIdempotencyConflict)
		}
	}
}

// testStress interleaves every operation over few withdrawals and keys, with
// sends that succeed, fail and panic, and checks the invariants as it goes.
// Each round starts from an empty ledger, where the races are.
func testStress(t *testing.T, newStore Factory) {
	const rounds = 150
	var sends, ops int64
	for round := range rounds {
		s, o := stressRound(t, newStore, uint64(round))
		sends += s
		ops += o
	}
	require.GreaterOrEqual(t, sends, int64(rounds), "the stress run makes at least one send a round")
	t.Logf("%d sends over %d operations in %d rounds", sends, ops, rounds)
}

func stressRound(t *testing.T, newStore Factory, seed uint64) (sends, ops int64) {
	const (
		workers     = 8
		perWorker   = 40
		withdrawals = 4
		keys        = 8
		rigged      = "rail client bug"
	)
	f := setUp(t, newStore)
	s := f.s
	var (
		sending   [withdrawals]atomic.Int32 // sends running now, per withdrawal
		delivered [withdrawals]atomic.Int32 // sends that returned an outcome
		calls     atomic.Int64
	)
	send := func(rng *rand.Rand, i int) func(context.Context, Withdrawal) (Withdrawal, error) {
		fate := rng.IntN(10)
		return func(_ context.Context, req Withdrawal) (Withdrawal, error) {
			calls.Add(1)
			assert.Equal(t, int32(1), sending[i].Add(1), "sends of %s running at once", req.ID)
			defer sending[i].Add(-1)
			if fate%2 == 0 {
				time.Sleep(time.Duration(fate) * 10 * time.Microsecond)
			}
			switch {
			case fate < 3:
				return Withdrawal{}, errRail
			case fate < 4:
				panic(rigged)
			}
			delivered[i].Add(1)
			return sentTx(req, "0xtx"), nil
		}
	}
	// checkOutcome: a key with an outcome holds its withdrawal's claim for good.
	checkOutcome := func(key string) {
		out, ok, err := s.Outcome(bg, key)
		if err != nil || !ok {
			return
		}
		holder, _, _ := s.ClaimedBy(bg, out.ID)
		assert.Equal(t, key, holder, "Outcome(%s) is for %s: its holder", key, out.ID)
	}
	expected := func(op string, err error, allowed ...error) {
		if err == nil {
			return
		}
		assert.True(t, slices.ContainsFunc(allowed, func(target error) bool { return errors.Is(err, target) }),
			"%s: unexpected error %v", op, err)
	}

	var ready, wg sync.WaitGroup
	start := make(chan struct{})
	for g := range workers {
		ready.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(g)))
			ready.Done()
			<-start
			for range perWorker {
				key := fmt.Sprint("req-", rng.IntN(keys))
				i := rng.IntN(withdrawals)
				req := newWithdrawal(fmt.Sprint("w-", i))
				switch op := rng.IntN(10); {
				case op < 5:
					func() {
						defer func() {
							if p := recover(); p != nil && p != rigged {
								panic(p)
							}
						}()
						out, err := s.Submit(bg, key, req, send(rng, i))
						if err == nil {
							assert.Equal(t, req.Fingerprint(), out.Fingerprint(), "Submit(%s, %s): the outcome's withdrawal", key, req.ID)
						}
						// Resolves with another outcome while a send runs leave its answer unrecorded.
						expected("Submit", err, submissions.ErrOutcomeUnknown, submissions.ErrIdempotencyConflict,
							submissions.ErrSubmissionInFlight, submissions.ErrOutcomeNotRecorded)
					}()
				case op < 6:
					expected("Resolve", s.Resolve(bg, key, sentTx(req, "0xresolved")),
						submissions.ErrIdempotencyConflict, submissions.ErrSubmissionInFlight, admin.ErrClaimChanged)
				case op < 8:
					expected("Release", s.Release(bg, key), submissions.ErrIdempotencyConflict, submissions.ErrSubmissionInFlight, admin.ErrClaimChanged)
				default:
					checkOutcome(key)
				}
			}
		}()
	}
	ready.Wait()
	close(start)
	wg.Wait()

	for i := range withdrawals {
		assert.LessOrEqual(t, delivered[i].Load(), int32(1), "sends that delivered w-%d", i)
	}
	for k := range keys {
		checkOutcome(fmt.Sprint("req-", k))
	}
	return calls.Load(), workers * perWorker
}
