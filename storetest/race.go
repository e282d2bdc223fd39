package storetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemledger/submissions"
)

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
			if released {
				t.Fatalf("%d of %d calls still running", n-len(errs), n)
			}
			// More than one call is blocked in send: let them all go, and
			// let the counts show it.
			release()
		}
	}
	return errs
}

func testConcurrentTapsOfOneKeySendOnce(t *testing.T, e env) {
	for round := range 10 {
		s, _ := e.ledger()
		r := &rail{}
		w := newWithdrawal(fmt.Sprint("w-", round))
		var outcomes atomic.Int64
		errs := together(t, taps, func(_ int, hold <-chan struct{}) error {
			out, err := s.Submit(bg, "req-1", w, func(ctx context.Context, req Withdrawal) (Withdrawal, error) {
				<-hold // slow: the rail answers after every other tap has returned
				return r.send(ctx, req)
			})
			if err == nil {
				if out != w.sent("0xtx-"+w.ID) {
					return fmt.Errorf("outcome: got %+v; want %+v", out, w.sent("0xtx-"+w.ID))
				}
				outcomes.Add(1)
			}
			return err
		})
		r.wantCalls(t, 1)
		inFlight := 0
		for _, err := range errs {
			switch {
			case err == nil:
			case errors.Is(err, submissions.ErrSubmissionInFlight):
				inFlight++
			default:
				t.Fatalf("round %d: got %v; want the outcome or ErrSubmissionInFlight", round, err)
			}
		}
		if outcomes.Load() != 1 || inFlight != taps-1 {
			t.Fatalf("round %d: got %d outcomes and %d in flight; want 1 and %d", round, outcomes.Load(), inFlight, taps-1)
		}
	}
}

func testConcurrentKeysForOneWithdrawalSendOnce(t *testing.T, e env) {
	for round := range 10 {
		s, _ := e.ledger()
		r := &rail{}
		w := newWithdrawal("w-1")
		errs := together(t, taps, func(i int, hold <-chan struct{}) error {
			_, err := s.Submit(bg, fmt.Sprint("req-", i), w, func(ctx context.Context, req Withdrawal) (Withdrawal, error) {
				<-hold
				return r.send(ctx, req)
			})
			return err
		})
		r.wantCalls(t, 1)
		holder, ok, err := s.ClaimedBy(bg, "w-1")
		if err != nil || !ok {
			t.Fatalf("ClaimedBy: got %q, %v, %v; want a holder", holder, ok, err)
		}
		wins := 0
		for _, err := range errs {
			if err == nil {
				wins++
				continue
			}
			wantConflict(t, err, holder)
		}
		if wins != 1 {
			t.Fatalf("round %d: winners: got %d; want 1", round, wins)
		}
		if _, ok, _ := s.Outcome(bg, holder); !ok {
			t.Fatalf("round %d: Outcome(%s): got none; want the winner's", round, holder)
		}
	}
}

// TestStress interleaves every operation over few withdrawals and keys, with
// sends that succeed, fail and panic, and checks the invariants as it goes.
// Each round starts from an empty ledger, where the races are.
func testStress(t *testing.T, e env) {
	const rounds = 150
	var sends, ops int64
	for round := range rounds {
		s, o := stressRound(t, e, uint64(round))
		sends += s
		ops += o
	}
	if sends < rounds {
		t.Fatalf("the stress run made %d sends in %d rounds; want at least one a round", sends, rounds)
	}
	t.Logf("%d sends over %d operations in %d rounds", sends, ops, rounds)
}

func stressRound(t *testing.T, e env, seed uint64) (sends, ops int64) {
	const (
		workers     = 8
		perWorker   = 40
		withdrawals = 4
		keys        = 8
		rigged      = "rail client bug"
	)
	s, _ := e.ledger()
	var (
		sending   [withdrawals]atomic.Int32 // sends running now, per withdrawal
		delivered [withdrawals]atomic.Int32 // sends that returned an outcome
		calls     atomic.Int64
	)
	send := func(rng *rand.Rand, i int) func(context.Context, Withdrawal) (Withdrawal, error) {
		fate := rng.IntN(10)
		return func(_ context.Context, req Withdrawal) (Withdrawal, error) {
			calls.Add(1)
			if n := sending[i].Add(1); n != 1 {
				t.Errorf("sends of %s running at once: got %d; want 1", req.ID, n)
			}
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
			return req.sent("0xtx"), nil
		}
	}
	// checkOutcome: a key with an outcome holds its withdrawal's claim for good.
	checkOutcome := func(key string) {
		out, ok, err := s.Outcome(bg, key)
		if err != nil || !ok {
			return
		}
		if holder, _, _ := s.ClaimedBy(bg, out.ID); holder != key {
			t.Errorf("Outcome(%s) is for %s: ClaimedBy got %q; want %s", key, out.ID, holder, key)
		}
	}
	isOneOf := func(err error, targets ...error) bool {
		for _, target := range targets {
			if errors.Is(err, target) {
				return true
			}
		}
		return err == nil
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
						if err == nil && out.Fingerprint() != req.Fingerprint() {
							t.Errorf("Submit(%s, %s): got an outcome for %s; want one for %s", key, req.ID, out.ID, req.ID)
						}
						if !isOneOf(err, errRail, submissions.ErrIdempotencyConflict, submissions.ErrSubmissionInFlight) {
							t.Errorf("Submit: unexpected error %v", err)
						}
					}()
				case op < 6:
					if err := s.Resolve(bg, key, req.sent("0xresolved")); !isOneOf(err, submissions.ErrIdempotencyConflict, submissions.ErrSubmissionInFlight) {
						t.Errorf("Resolve: unexpected error %v", err)
					}
				case op < 8:
					if err := s.Release(bg, key); !isOneOf(err, submissions.ErrIdempotencyConflict, submissions.ErrSubmissionInFlight) {
						t.Errorf("Release: unexpected error %v", err)
					}
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
		if n := delivered[i].Load(); n > 1 {
			t.Errorf("withdrawal w-%d was delivered by %d sends; want at most 1", i, n)
		}
	}
	for k := range keys {
		checkOutcome(fmt.Sprint("req-", k))
	}
	return calls.Load(), workers * perWorker
}
