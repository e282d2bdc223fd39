package submissions_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/idemledger/submissions"
	"github.com/idemledger/submissions/storetest"
)

// The rules of the ledger are tested by storetest, against the memory store
// as New uses it, and again behind the Store interface, as the ledger runs any
// other store. This file has the tests of what is the root package's alone.

var bg = context.Background()

type withdrawal = storetest.Withdrawal

// opaque hides a store's type: the ledger runs it as it runs any Store.
type opaque struct{ submissions.Store[withdrawal] }

func memory(*testing.T) submissions.Store[withdrawal] {
	return submissions.NewMemoryStore[withdrawal]()
}

func TestMemoryStore(t *testing.T) {
	storetest.Run(t, memory)
}

func TestMemoryStoreBehindTheStoreInterface(t *testing.T) {
	storetest.Run(t, func(t *testing.T) submissions.Store[withdrawal] { return opaque{memory(t)} })
}

func newWithdrawal(id string) withdrawal {
	return withdrawal{ID: id, Amount: "25.00", Currency: "USDC", Dest: "0xabc", State: "approved"}
}

func wantErr(t *testing.T, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("error: got %v; want %v", err, target)
	}
}

func TestZeroValueLedgerWorks(t *testing.T) {
	var s submissions.Submissions[withdrawal]
	sends := 0
	send := func(_ context.Context, w withdrawal) (withdrawal, error) { sends++; return w, nil }
	w := newWithdrawal("w-1")
	if err := s.Release(bg, "req-1"); err != nil {
		t.Fatalf("Release on the zero value: %v", err)
	}
	for range 2 {
		if _, err := s.Submit(bg, "req-1", w, send); err != nil {
			t.Fatal(err)
		}
	}
	_, err := s.Submit(bg, "req-2", w, send)
	var conflict *submissions.ConflictError
	if !errors.As(err, &conflict) || conflict.Holder != "req-1" {
		t.Fatalf("Submit under another key: got %v; want a *ConflictError naming req-1", err)
	}
	if sends != 1 {
		t.Fatalf("sends: got %d; want 1", sends)
	}

	var fresh submissions.Submissions[withdrawal]
	if err := fresh.Resolve(bg, "req-1", w); err != nil {
		t.Fatalf("Resolve on the zero value: %v", err)
	}
	if holder, _, _ := fresh.ClaimedBy(bg, "w-1"); holder != "req-1" {
		t.Fatalf("ClaimedBy after Resolve: got %q; want req-1", holder)
	}
}

func TestDefaultLoggerIsSlogDefault(t *testing.T) {
	prev := slog.Default()
	defer slog.SetDefault(prev)
	var logs bytes.Buffer
	slog.SetDefault(slog.New(slog.NewTextHandler(&logs, nil)))

	var zero submissions.Submissions[withdrawal]
	for name, s := range map[string]*submissions.Submissions[withdrawal]{
		"New":                  submissions.New[withdrawal](),
		"WithLogger(nil)":      submissions.New[withdrawal](submissions.WithLogger(nil), nil),
		"the zero Submissions": &zero,
	} {
		key := "req-" + strings.ReplaceAll(name, " ", "-")
		for range 2 {
			if _, err := s.Submit(bg, key, newWithdrawal("w-"+key), nil); err != nil {
				t.Fatal(err)
			}
		}
		if got := strings.Count(logs.String(), "msg=\"submission replayed\" key="+key+" "); got != 1 {
			t.Errorf("%s: replays logged to slog.Default(): got %d; want 1\n%s", name, got, logs.String())
		}
	}
}

func TestNewWithStoreRefusesNil(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("NewWithStore(nil): got no panic; want one")
		}
	}()
	submissions.NewWithStore[withdrawal](nil)
}

type receipt struct {
	ID     string `json:"id"`
	TxHash string `json:"tx_hash"`
	seen   int
}

func (r receipt) Fingerprint() submissions.Fingerprint {
	return submissions.Fingerprint{WithdrawalID: r.ID, Amount: "1", Currency: "BTC", Destination: "bc1q"}
}

func TestSameOutcomeMeansEqualJSON(t *testing.T) {
	s := submissions.New[receipt]()
	if err := s.Resolve(bg, "req-1", receipt{ID: "w-1", TxHash: "0xa", seen: 1}); err != nil {
		t.Fatal(err)
	}
	if err := s.Resolve(bg, "req-1", receipt{ID: "w-1", TxHash: "0xa", seen: 2}); err != nil {
		t.Fatalf("Resolve with an equal JSON encoding: %v", err)
	}
	wantErr(t, s.Resolve(bg, "req-1", receipt{ID: "w-1", TxHash: "0xb"}), submissions.ErrIdempotencyConflict)
}

type unencodable struct {
	ID string
	Ch chan int
}

func (u unencodable) Fingerprint() submissions.Fingerprint {
	return submissions.Fingerprint{WithdrawalID: u.ID, Amount: "1", Currency: "BTC", Destination: "bc1q"}
}

func TestOutcomesThatCannotBeEncodedAreNeverTheSame(t *testing.T) {
	s := submissions.New[unencodable]()
	u := unencodable{ID: "w-1"}
	if err := s.Resolve(bg, "req-1", u); err != nil {
		t.Fatal(err)
	}
	err := s.Resolve(bg, "req-1", u)
	wantErr(t, err, submissions.ErrIdempotencyConflict)
	var jerr *json.UnsupportedTypeError
	if !errors.As(err, &jerr) {
		t.Fatalf("error: got %v; want it to wrap the encoding error", err)
	}
}

func TestErrorMessages(t *testing.T) {
	err := &submissions.ConflictError{Holder: "req-1", Key: "req-2", WithdrawalID: "w-1"}
	if got, want := err.Error(), "idempotency conflict: withdrawal w-1 is claimed by request key req-1"; got != want {
		t.Fatalf("got %q; want %q", got, want)
	}
}

func TestReplayDoesNotAllocate(t *testing.T) {
	s := submissions.New[withdrawal](submissions.WithLogger(slog.New(slog.DiscardHandler)))
	first := withdrawal{ID: "w-1", Amount: "025.50", Currency: "usdc", Dest: "0xabc"}
	if _, err := s.Submit(bg, "req-1", first, nil); err != nil {
		t.Fatal(err)
	}
	for _, amount := range []string{"25.5", "25.50", "0025.500"} { // canonical, or a substring of it away
		w := first
		w.Amount, w.Currency = amount, "USDC"
		allocs := testing.AllocsPerRun(100, func() {
			if _, err := s.Submit(bg, "req-1", w, nil); err != nil {
				t.Fatal(err)
			}
		})
		if allocs != 0 {
			t.Errorf("allocations per replay of amount %q: got %v; want 0", amount, allocs)
		}
	}
}
