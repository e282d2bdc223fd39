package submissions_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemledger/submissions"
	"github.com/idemledger/submissions/driver"
	"github.com/idemledger/submissions/internal/ledgertest"
)

// The rules of the ledger are tested by internal/ledgertest, against the
// memory store as New uses it here, and again behind the bare Store
// interface in internal/engine's tests. This file has the tests of what is
// the root package's alone.

var (
	bg    = context.Background()
	quiet = submissions.WithLogger(slog.New(slog.DiscardHandler))
)

type withdrawal = ledgertest.Withdrawal

// opaque hides a store's type: the ledger runs it as it runs any Store (a
// Lister, a Pruner and an Abandoner, as the memory store is).
type opaque struct {
	driver.Store[withdrawal]
	driver.Lister
	driver.Pruner
	driver.Abandoner
}

func memory(*testing.T) driver.Store[withdrawal] {
	return submissions.NewMemoryStore[withdrawal]()
}

func TestMemoryStore(t *testing.T) {
	ledgertest.Run(t, memory)
}

func newWithdrawal(id string) withdrawal {
	return withdrawal{ID: id, Amount: "25.00", Currency: "USDC", Dest: "0xabc", State: "approved"}
}

// ledgers returns a ledger of each kind: in memory, and on a store it runs
// through the Store interface.
func ledgers[R submissions.Fingerprinter]() map[string]*submissions.Submissions[R] {
	return map[string]*submissions.Submissions[R]{
		"memory":               submissions.New[R](quiet),
		"behind the interface": submissions.NewWithStore[R](struct{ driver.Store[R] }{submissions.NewMemoryStore[R]()}, quiet),
	}
}

func TestZeroValueLedgerWorks(t *testing.T) {
	var s submissions.Submissions[withdrawal]
	sends := 0
	send := func(_ context.Context, w withdrawal) (withdrawal, error) { sends++; return w, nil }
	w := newWithdrawal("w-1")
	require.NoError(t, s.Release(bg, "req-1"), "Release on the zero value")
	for range 2 {
		_, err := s.Submit(bg, "req-1", w, send)
		require.NoError(t, err)
	}
	_, err := s.Submit(bg, "req-2", w, send)
	var conflict *submissions.ConflictError
	require.ErrorAs(t, err, &conflict)
	require.Equal(t, "req-1", conflict.Holder)
	require.Equal(t, 1, sends)

	var fresh submissions.Submissions[withdrawal]
	require.NoError(t, fresh.Resolve(bg, "req-1", w), "Resolve on the zero value")
	holder, _, err := fresh.ClaimedBy(bg, "w-1")
	require.NoError(t, err)
	require.Equal(t, "req-1", holder)
}

func TestDefaultLoggerIsSlogDefault(t *testing.T) {
	prev := slog.Default()
	defer slog.SetDefault(prev)
	var logs bytes.Buffer
	slog.SetDefault(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))

	var zero submissions.Submissions[withdrawal]
	for name, s := range map[string]*submissions.Submissions[withdrawal]{
		"New":                  submissions.New[withdrawal](),
		"WithLogger(nil)":      submissions.New[withdrawal](submissions.WithLogger(nil), nil),
		"the zero Submissions": &zero,
	} {
		key := "req-" + strings.ReplaceAll(name, " ", "-")
		for range 2 {
			_, err := s.Submit(bg, key, newWithdrawal("w-"+key), nil)
			require.NoError(t, err)
		}
		assert.Equal(t, 1, strings.Count(logs.String(), `msg="submission replayed" key=`+key+" "),
			"%s: replays logged to slog.Default()\n%s", name, logs.String())
	}
}

func TestNewWithStoreRefusesNil(t *testing.T) {
	require.PanicsWithValue(t, "submissions: NewWithStore with a nil Store", func() {
		submissions.NewWithStore[withdrawal](nil)
	})
}

// payout is a withdrawal type used through a pointer, whose nil value has no
// fingerprint.
type payout struct {
	ID, TxHash string
}

func (p *payout) Fingerprint() submissions.Fingerprint {
	return submissions.Fingerprint{WithdrawalID: p.ID, Amount: "10", Currency: "EUR", Destination: "DE89"}
}

// TestNilIsNeitherARequestNorAnAnswer: with a pointer type for R, a nil
// request or outcome is refused as an invalid fingerprint, and a send that
// answers nil gave no answer: the outcome is unknown, and the key stays
// claimed. None of them panics inside the ledger.
func TestNilIsNeitherARequestNorAnAnswer(t *testing.T) {
	for name, s := range ledgers[*payout]() {
		t.Run(name, func(t *testing.T) {
			sends := 0
			nilAnswer := func(context.Context, *payout) (*payout, error) { sends++; return nil, nil }
			_, err := s.Submit(bg, "req-0", nil, nilAnswer)
			require.ErrorIs(t, err, submissions.ErrInvalidFingerprint)
			require.ErrorIs(t, s.Resolve(bg, "req-0", nil), submissions.ErrInvalidFingerprint)
			require.Zero(t, sends)

			out, err := s.Submit(bg, "req-1", &payout{ID: "w-1"}, nilAnswer)
			require.ErrorIs(t, err, submissions.ErrOutcomeUnknown)
			require.Nil(t, out)
			require.Equal(t, 1, sends)
			_, err = s.Submit(bg, "req-1", &payout{ID: "w-1"}, nilAnswer)
			require.ErrorIs(t, err, submissions.ErrSubmissionInFlight)
			_, err = s.Submit(bg, "req-2", &payout{ID: "w-1"}, nilAnswer)
			require.ErrorIs(t, err, submissions.ErrIdempotencyConflict)
			require.Equal(t, 1, sends)
			found := &payout{ID: "w-1", TxHash: "0xfound"}
			require.NoError(t, s.Resolve(bg, "req-1", found))
			got, err := s.Submit(bg, "req-1", &payout{ID: "w-1"}, nilAnswer)
			require.NoError(t, err)
			require.Equal(t, found, got)
		})
	}
}

// account is a withdrawal type that is an interface, whose zero value is nil.
type account interface{ submissions.Fingerprinter }

func TestNilInterfaceIsNoRequest(t *testing.T) {
	for name, s := range ledgers[account]() {
		t.Run(name, func(t *testing.T) {
			_, err := s.Submit(bg, "req-1", nil, nil)
			require.ErrorIs(t, err, submissions.ErrInvalidFingerprint)
			require.ErrorIs(t, s.Resolve(bg, "req-1", nil), submissions.ErrInvalidFingerprint)
			out, err := s.Submit(bg, "req-2", &payout{ID: "w-2"}, func(context.Context, account) (account, error) { return nil, nil })
			require.ErrorIs(t, err, submissions.ErrOutcomeUnknown)
			require.Nil(t, out)
			// An interface holding a nil pointer is no request or answer either.
			_, err = s.Submit(bg, "req-3", (*payout)(nil), nil)
			require.ErrorIs(t, err, submissions.ErrInvalidFingerprint)
			require.ErrorIs(t, s.Resolve(bg, "req-3", (*payout)(nil)), submissions.ErrInvalidFingerprint)
			_, err = s.Submit(bg, "req-4", &payout{ID: "w-4"}, func(context.Context, account) (account, error) { return (*payout)(nil), nil })
			require.ErrorIs(t, err, submissions.ErrOutcomeUnknown)
		})
	}
}

type receipt struct {
	ID     string `json:"id"`
	TxHash string `json:"tx_hash"`
	Fee    json.Number
	seen   int
}

func (r receipt) Fingerprint() submissions.Fingerprint {
	return submissions.Fingerprint{WithdrawalID: r.ID, Amount: "1", Currency: "BTC", Destination: "bc1q"}
}

func TestSameOutcomeMeansEqualJSON(t *testing.T) {
	s := submissions.New[receipt](quiet)
	require.NoError(t, s.Resolve(bg, "req-1", receipt{ID: "w-1", TxHash: "0xa", Fee: "0.10"}))
	require.NoError(t, s.Resolve(bg, "req-1", receipt{ID: "w-1", TxHash: "0xa", Fee: "0.10"}))
	err := s.Resolve(bg, "req-1", receipt{ID: "w-1", TxHash: "0xa", Fee: "0.1"})
	require.ErrorIs(t, err, submissions.ErrIdempotencyConflict, "numbers compare as written")
	require.ErrorIs(t, s.Resolve(bg, "req-1", receipt{ID: "w-1", TxHash: "0xb", Fee: "0.10"}), submissions.ErrIdempotencyConflict)
	err = s.Resolve(bg, "req-2", receipt{ID: "w-2", TxHash: "0xa", Fee: "0.10", seen: 2})
	require.ErrorIs(t, err, submissions.ErrOutcomeNotRecorded, "an unexported field that JSON would leave out")
	assert.ErrorContains(t, err, "seen is not zero")
}

type unencodable struct {
	ID string
	Ch chan int
}

func (u unencodable) Fingerprint() submissions.Fingerprint {
	return submissions.Fingerprint{WithdrawalID: u.ID, Amount: "1", Currency: "BTC", Destination: "bc1q"}
}

// TestOutcomesThatCannotBeEncodedAreNotRecorded: an outcome that JSON
// cannot write is recorded by no store, from the rail or from Resolve.
func TestOutcomesThatCannotBeEncodedAreNotRecorded(t *testing.T) {
	s := submissions.New[unencodable](quiet)
	err := s.Resolve(bg, "req-1", unencodable{ID: "w-1"})
	require.ErrorIs(t, err, submissions.ErrOutcomeNotRecorded)
	assert.ErrorContains(t, err, "request key req-1: the outcome's Ch is a chan, which JSON cannot write")
	_, ok, err := s.ClaimedBy(bg, "w-1")
	require.NoError(t, err)
	assert.False(t, ok, "Resolve wrote nothing")

	u := unencodable{ID: "w-3", Ch: make(chan int)}
	sends := 0
	send := func(_ context.Context, req unencodable) (unencodable, error) { sends++; return req, nil }
	out, err := s.Submit(bg, "req-3", u, send)
	require.ErrorIs(t, err, submissions.ErrOutcomeNotRecorded)
	require.Equal(t, u, out, "the rail's answer is the caller's")
	_, err = s.Submit(bg, "req-3", u, send)
	require.ErrorIs(t, err, submissions.ErrAbandoned, "the key waits for an operator")
	assert.Equal(t, 1, sends)
}

// selfEncoded encodes itself, and fails to.
type selfEncoded struct{ ID string }

func (e selfEncoded) Fingerprint() submissions.Fingerprint {
	return submissions.Fingerprint{WithdrawalID: e.ID, Amount: "1", Currency: "BTC", Destination: "bc1q"}
}

func (selfEncoded) MarshalJSON() ([]byte, error) { return nil, errors.New("cannot") }

// TestOutcomesThatCannotBeComparedAreNeverTheSame: a type with its own
// MarshalJSON is taken as it gives itself back; one whose encoding fails
// cannot be compared, so it is never the same outcome.
func TestOutcomesThatCannotBeComparedAreNeverTheSame(t *testing.T) {
	s := submissions.New[selfEncoded](quiet)
	u := selfEncoded{ID: "w-1"}
	require.NoError(t, s.Resolve(bg, "req-1", u))
	err := s.Resolve(bg, "req-1", u)
	require.ErrorIs(t, err, submissions.ErrIdempotencyConflict)
	assert.ErrorContains(t, err, "cannot")

	// Resolved while its send runs, such an outcome cannot be compared with
	// the rail's answer, which comes back unrecorded.
	u2 := selfEncoded{ID: "w-2"}
	out, err := s.Submit(bg, "req-2", u2, func(_ context.Context, req selfEncoded) (selfEncoded, error) {
		require.NoError(t, s.Resolve(bg, "req-2", req))
		return req, nil
	})
	require.ErrorIs(t, err, submissions.ErrOutcomeNotRecorded)
	assert.ErrorContains(t, err, "cannot be compared")
	require.Equal(t, u2, out)
}

// TestErrorStringsAreShortAndStable holds the texts callers may see in
// logs: each names the key, the class, and what happened, in a line.
func TestErrorStringsAreShortAndStable(t *testing.T) {
	s := submissions.New[withdrawal](quiet)
	w := newWithdrawal("w-1")
	_, err := s.Submit(bg, "req-1", w, nil)
	require.NoError(t, err)
	_, reused := s.Submit(bg, "req-1", newWithdrawal("w-2"), nil)
	_, second := s.Submit(bg, "req-2", w, nil)
	_, emptyKey := s.Submit(bg, " ", w, nil)
	_, longKey := s.Submit(bg, strings.Repeat("k", driver.MaxKeyLen+1), w, nil)
	_, binaryKey := s.Submit(bg, "k\xff", w, nil)
	_, nulKey := s.Submit(bg, "k\x00", w, nil)
	_, nulKeyAtTheLimit := s.Submit(bg, strings.Repeat("k", driver.MaxKeyLen-1)+"\x00", w, nil)
	_, longID := s.Submit(bg, "req-9", withdrawal{ID: strings.Repeat("i", 256), Amount: "1", Currency: "EUR", Dest: "d"}, nil)
	_, invalidAmount := s.Submit(bg, "req-3", withdrawal{ID: "w-3", Amount: "1e3", Currency: "EUR", Dest: "d"}, nil)
	_, unknown := s.Submit(bg, "req-4", newWithdrawal("w-4"), func(context.Context, withdrawal) (withdrawal, error) {
		return withdrawal{}, errors.New("rail timed out")
	})
	_, inFlight := s.Submit(bg, "req-4", newWithdrawal("w-4"), nil)
	_, notRecorded := s.Submit(bg, "req-5", newWithdrawal("w-5"), func(_ context.Context, w withdrawal) (withdrawal, error) {
		w.Amount = "26"
		return w, nil
	})
	for _, c := range []struct {
		err  error
		want string
	}{
		{reused, "idempotency conflict: request key req-1 belongs to another withdrawal"},
		{second, "idempotency conflict: withdrawal w-1 is claimed by request key req-1"},
		{emptyKey, "invalid request key: empty"},
		{longKey, "invalid request key: longer than 255 bytes"},
		{binaryKey, "invalid request key: not valid UTF-8"},
		{nulKey, "invalid request key: has a NUL byte"},
		{nulKeyAtTheLimit, "invalid request key: has a NUL byte"},
		{longID, "invalid fingerprint: WithdrawalID: longer than 255 bytes"},
		{invalidAmount, "invalid fingerprint: Amount: not a positive decimal of at most 100 bytes"},
		{unknown, "outcome unknown: request key req-4: rail timed out"},
		{inFlight, "submission in flight: request key req-4: no answer of its send was recorded"},
		{notRecorded, "outcome not recorded: request key req-5: answer differs in Amount"},
		{s.Release(bg, "req-1"), "idempotency conflict: request key req-1 has an outcome"},
		{s.Resolve(bg, "req-1", withdrawal{ID: "w-1", Amount: "25", Currency: "USDC", Dest: "0xabc", TxHash: "0xother"}), "idempotency conflict: request key req-1 has another outcome"},
	} {
		assert.EqualError(t, c.err, c.want)
	}
}

// TestReplayDoesNotAllocate: in memory a replay allocates nothing, whether
// it repeats the first request byte for byte or spells it another way. (A
// replay whose currency is in lower case, unlike its first request's, or
// whose amount starts with a point, costs one allocation for the canonical
// form.)
func TestReplayDoesNotAllocate(t *testing.T) {
	s := submissions.New[withdrawal](quiet)
	for i, c := range []struct {
		first   withdrawal
		replays []string // amounts, in currency USDC
	}{
		{withdrawal{ID: "w-1", Amount: "025.50", Currency: "usdc", Dest: "0xabc"}, []string{"025.50", "25.5", "25.50", "0025.500"}},
		{withdrawal{ID: "w-2", Amount: ".5", Currency: "USDC", Dest: "0xabc"}, []string{"0.5", "0.50"}},
	} {
		key := fmt.Sprint("req-", i)
		_, err := s.Submit(bg, key, c.first, nil)
		require.NoError(t, err)
		for _, amount := range c.replays {
			w := c.first
			w.Amount, w.Currency = amount, "USDC"
			allocs := testing.AllocsPerRun(100, func() {
				_, err := s.Submit(bg, key, w, nil)
				require.NoError(t, err)
			})
			assert.Zero(t, allocs, "allocations per replay of amount %q after %q", amount, c.first.Amount)
		}
	}
	w := withdrawal{ID: "w-1", Amount: "025.50", Currency: "usdc", Dest: "0xabc"}
	allocs := testing.AllocsPerRun(100, func() {
		_, err := s.Submit(bg, "req-0", w, nil)
		require.NoError(t, err)
	})
	assert.Zero(t, allocs, "allocations per replay repeated byte for byte")
}
