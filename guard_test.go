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

type payout struct{ ID, TxHash string }

func (p payout) Fingerprint() Fingerprint {
	return Fingerprint{WithdrawalID: p.ID, Amount: "10", Currency: "EUR", Destination: "DE89"}
}

// TestGuardForgetsEveryMark takes keys through every step of a ledger on a
// Store of another type than its own, whose marks the guard keeps: a failed
// send, a panicking one, the release that reopens the key, a second send, a
// resolve under a fresh key, refusals. A mark that is not forgotten would
// make a later release refuse, or wait until its context ends; so every
// step must answer within a deadline, and no mark may be left once the keys
// are done with.
func TestGuardForgetsEveryMark(t *testing.T) {
	type other struct{ Store[payout] }
	s := NewWithStore[payout](other{NewMemoryStore[payout]()}, WithLogger(slog.New(slog.DiscardHandler)))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req := payout{ID: "w-1"}
	timeout := func(context.Context, payout) (payout, error) { return payout{}, errors.New("rail timed out") }
	_, err := s.Submit(ctx, "req-1", req, timeout)
	require.ErrorIs(t, err, ErrOutcomeUnknown)
	require.NoError(t, s.Release(ctx, "req-1"), "Release after the failed send")
	require.Panics(t, func() {
		_, _ = s.Submit(ctx, "req-1", req, func(context.Context, payout) (payout, error) { panic("rail bug") })
	})
	require.NoError(t, s.Release(ctx, "req-1"), "Release after the panic")
	sent := payout{ID: "w-1", TxHash: "0xtx"}
	out, err := s.Submit(ctx, "req-1", req, func(context.Context, payout) (payout, error) { return sent, nil })
	require.NoError(t, err)
	require.Equal(t, sent, out)
	found := payout{ID: "w-2", TxHash: "0xfound"}
	require.NoError(t, s.Resolve(ctx, "req-2", found), "Resolve under a fresh key")
	out, err = s.Submit(ctx, "req-2", payout{ID: "w-2"}, nil)
	require.NoError(t, err)
	require.Equal(t, found, out)
	require.ErrorIs(t, s.Release(ctx, "req-1"), ErrIdempotencyConflict)
	_, err = s.Submit(ctx, "req-3", req, nil)
	require.ErrorIs(t, err, ErrIdempotencyConflict)

	g := s.be.(*guard[payout])
	g.mu.Lock()
	defer g.mu.Unlock()
	assert.Empty(t, g.claiming, "keys still being claimed once every call has returned")
	assert.Empty(t, g.idle, "releases still waiting once every call has returned")
	assert.Empty(t, g.sending, "claims still being sent once every call has returned")
}

// TestSameOutcomeReadsEncodingsAsJSONValues: the encodings of two outcomes
// are compared as JSON values, so that what encoding/json writes two ways
// (bytes that are not UTF-8, and U+FFFD itself) is the same; member order
// and numbers as written are kept by encoding/json itself.
func TestSameOutcomeReadsEncodingsAsJSONValues(t *testing.T) {
	type outcome struct {
		Tx   string
		Memo any
	}
	for _, c := range []struct {
		name string
		a, b outcome
		same bool
	}{
		{"equal", outcome{"0xa", 1}, outcome{"0xa", 1}, true},
		{"invalid UTF-8 and its replacement", outcome{"0x\xff", nil}, outcome{"0x\ufffd", nil}, true},
		{"two invalid bytes and one replacement", outcome{"0x\xff\xfe", nil}, outcome{"0x\ufffd", nil}, false},
		{"maps in another order", outcome{"0xa", map[string]int{"a": 1, "b": 2}}, outcome{"0xa", map[string]int{"b": 2, "a": 1}}, true},
		{"another text", outcome{"0xa", nil}, outcome{"0xb", nil}, false},
		{"a number and its text", outcome{"0xa", 1}, outcome{"0xa", "1"}, false},
	} {
		same, err := sameOutcome(c.a, c.b)
		require.NoError(t, err, c.name)
		assert.Equal(t, c.same, same, c.name)
	}
	_, err := sameOutcome(outcome{Memo: make(chan int)}, outcome{})
	require.Error(t, err, "an outcome encoding/json cannot encode")
}

func TestDifferingNamesTheFields(t *testing.T) {
	want := Fingerprint{WithdrawalID: "w-1", Amount: "25", Currency: "USDC", Destination: "d"}
	for _, c := range []struct {
		got    Fingerprint
		fields string
	}{
		{Fingerprint{WithdrawalID: "w-1", Amount: "25.00", Currency: "usdc", Destination: "d"}, ""},
		{Fingerprint{WithdrawalID: "w-2", Amount: "25", Currency: "USDC", Destination: "d"}, "WithdrawalID"},
		{Fingerprint{WithdrawalID: "w-1", Amount: "2.5", Currency: "USDC", Destination: "d"}, "Amount"},
		{Fingerprint{WithdrawalID: "w-1", Amount: "", Currency: "USDC", Destination: "d"}, "Amount"},
		{Fingerprint{WithdrawalID: "w-1", Amount: "25", Currency: "US-C", Destination: "d"}, "Currency"},
		{Fingerprint{WithdrawalID: "w-1", Amount: "25", Currency: "USDC", Destination: "D"}, "Destination"},
		{Fingerprint{}, "WithdrawalID, Amount, Currency, Destination"},
	} {
		assert.Equal(t, c.fields, fieldNames(differing(&want, &c.got)), "%+v", c.got)
	}
}
