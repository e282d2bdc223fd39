package submissions

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"
)

type payout struct{ ID, TxHash string }

func (p payout) Fingerprint() Fingerprint {
	return Fingerprint{WithdrawalID: p.ID, Amount: "10", Currency: "EUR", Destination: "DE89"}
}

// TestGuardGivesBackEveryCount takes keys through every step of a ledger on a
// Store of another type than its own, whose counts of claims, sends, releases
// and resolves the ledger keeps itself: a failed send, the release that
// reopens the key, a second send, a resolve under a fresh key, a release that
// is refused. A count that is not given back would make a later claim or
// release wait forever, or refuse it; so every step must answer within a
// deadline, and nothing may stay counted once the keys are done with.
func TestGuardGivesBackEveryCount(t *testing.T) {
	type other struct{ Store[payout] }
	s := NewWithStore[payout](other{NewMemoryStore[payout]()}, WithLogger(slog.New(slog.DiscardHandler)))
	done := make(chan error, 1)
	go func() { done <- everyStep(context.Background(), s) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a step is still waiting after 5s")
	}
	g := s.be.(*guarded[payout])
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.busy) != 0 {
		t.Fatalf("keys still counted once every call has returned: %v; want none", g.busy)
	}
}

func everyStep(ctx context.Context, s *Submissions[payout]) error {
	req := payout{ID: "w-1"}
	timeout := func(context.Context, payout) (payout, error) { return payout{}, errors.New("rail timed out") }
	if _, err := s.Submit(ctx, "req-1", req, timeout); err == nil {
		return errors.New("Submit with a failing send: got nil error")
	}
	if err := s.Release(ctx, "req-1"); err != nil {
		return fmt.Errorf("Release after the failed send: %w", err)
	}
	sent := payout{ID: "w-1", TxHash: "0xtx"}
	if out, err := s.Submit(ctx, "req-1", req, func(context.Context, payout) (payout, error) { return sent, nil }); err != nil || out != sent {
		return fmt.Errorf("Submit after the release: got %+v, %v; want %+v", out, err, sent)
	}
	found := payout{ID: "w-2", TxHash: "0xfound"}
	if err := s.Resolve(ctx, "req-2", found); err != nil {
		return fmt.Errorf("Resolve under a fresh key: %w", err)
	}
	if out, err := s.Submit(ctx, "req-2", payout{ID: "w-2"}, nil); err != nil || out != found {
		return fmt.Errorf("Submit after the resolve: got %+v, %v; want %+v", out, err, found)
	}
	if err := s.Release(ctx, "req-1"); !errors.Is(err, ErrIdempotencyConflict) {
		return fmt.Errorf("Release of a key with an outcome: got %v; want ErrIdempotencyConflict", err)
	}
	return nil
}
