package submissions

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type transfer struct{ ID, TxHash string }

func (p transfer) Fingerprint() Fingerprint {
	return Fingerprint{WithdrawalID: p.ID, Amount: "10", Currency: "EUR", Destination: "DE89"}
}

// panicsOnce is a Store whose call named call panics once armed.
type panicsOnce struct {
	Store[transfer]
	call  string
	armed bool
}

func (p *panicsOnce) Settle(ctx context.Context, tenant, key string, token Token, outcome transfer) (Record[transfer], bool, error) {
	if p.call == "Settle" && p.armed {
		p.armed = false
		panic("store bug")
	}
	return p.Store.Settle(ctx, tenant, key, token, outcome)
}

// TestGuardForgetsEveryMark takes keys through every step of a ledger on a
// Store of another type than its own, whose marks the guard keeps: a failed
// send, a panicking one, the release that reopens the key, a second send, a
// resolve under a fresh key, refusals, a store that panics. A mark that is not forgotten would
// make a later release refuse, or wait until its context ends; so every
// step must answer within a deadline, and no mark may be left once the keys
// are done with.
func TestGuardForgetsEveryMark(t *testing.T) {
	st := &panicsOnce{Store: NewMemoryStore[transfer](), call: "Settle"}
	s := NewWithStore[transfer](st, WithLogger(slog.New(slog.DiscardHandler)))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req := transfer{ID: "w-1"}
	timeout := func(context.Context, transfer) (transfer, error) { return transfer{}, errors.New("rail timed out") }
	_, err := s.Submit(ctx, "req-1", req, timeout)
	require.ErrorIs(t, err, ErrOutcomeUnknown)
	require.NoError(t, s.Release(ctx, "req-1"), "Release after the failed send")
	require.Panics(t, func() {
		_, _ = s.Submit(ctx, "req-1", req, func(context.Context, transfer) (transfer, error) { panic("rail bug") })
	})
	require.NoError(t, s.Release(ctx, "req-1"), "Release after the panic")
	sent := transfer{ID: "w-1", TxHash: "0xtx"}
	out, err := s.Submit(ctx, "req-1", req, func(context.Context, transfer) (transfer, error) { return sent, nil })
	require.NoError(t, err)
	require.Equal(t, sent, out)
	found := transfer{ID: "w-2", TxHash: "0xfound"}
	require.NoError(t, s.Resolve(ctx, "req-2", found), "Resolve under a fresh key")
	out, err = s.Submit(ctx, "req-2", transfer{ID: "w-2"}, nil)
	require.NoError(t, err)
	require.Equal(t, found, out)
	require.ErrorIs(t, s.Release(ctx, "req-1"), ErrIdempotencyConflict)
	_, err = s.Submit(ctx, "req-3", req, nil)
	require.ErrorIs(t, err, ErrIdempotencyConflict)

	// A Settle that panics, once: the key stays in flight, and nobody sends
	// it any more, so it may be released.
	st.armed = true
	require.Panics(t, func() { _, _ = s.Submit(ctx, "req-4", transfer{ID: "w-4"}, nil) })
	require.NoError(t, s.Release(ctx, "req-4"), "Release after the store panicked")

	g := s.state().be.(*guard[transfer])
	g.mu.Lock()
	defer g.mu.Unlock()
	assert.Empty(t, g.claiming, "keys still being claimed once every call has returned")
	assert.Empty(t, g.sending, "claims still being sent once every call has returned")
}
