package storetest

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/idemledger/submissions"
)

// Withdrawal is the type the suite submits, as a payout service would have
// it: its fingerprint stays the same as it moves from approved to sent. A
// store under test must keep its outcomes whole (all fields are exported and
// encode to JSON).
type Withdrawal struct {
	ID       string
	Amount   string
	Currency string
	Dest     string
	State    string
	TxHash   string
}

// Fingerprint returns the withdrawal's identity: id, amount, currency and
// destination.
func (w Withdrawal) Fingerprint() submissions.Fingerprint {
	return submissions.Fingerprint{WithdrawalID: w.ID, Amount: w.Amount, Currency: w.Currency, Destination: w.Dest}
}

func (w Withdrawal) sent(tx string) Withdrawal {
	w.State, w.TxHash = "sent", tx
	return w
}

func newWithdrawal(id string) Withdrawal {
	return Withdrawal{ID: id, Amount: "25.00", Currency: "USDC", Dest: "0xabc", State: "approved"}
}

// rail is a fake payment rail that counts its sends.
type rail struct {
	calls atomic.Int64
}

func (r *rail) send(_ context.Context, w Withdrawal) (Withdrawal, error) {
	r.calls.Add(1)
	return w.sent("0xtx-" + w.ID), nil
}

func (r *rail) wantCalls(t *testing.T, want int64) {
	t.Helper()
	if got := r.calls.Load(); got != want {
		t.Fatalf("rail calls: got %d; want %d", got, want)
	}
}

// errRail is what a failing send returns.
var errRail = errors.New("rail timed out")

func failing(context.Context, Withdrawal) (Withdrawal, error) { return Withdrawal{}, errRail }

// strand submits w under key with a failing send, which leaves the key
// claimed with no outcome.
func strand(t *testing.T, s *submissions.Submissions[Withdrawal], key string, w Withdrawal) {
	t.Helper()
	_, err := s.Submit(bg, key, w, failing)
	wantErr(t, err, errRail)
}

// logs is a slog.Handler that keeps what it is given.
type logs struct {
	mu      sync.Mutex
	entries []entry
}

type entry struct {
	level slog.Level
	msg   string
	attrs map[string]string
}

func (l *logs) Enabled(context.Context, slog.Level) bool { return true }
func (l *logs) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logs) WithGroup(string) slog.Handler            { return l }
func (l *logs) Handle(_ context.Context, r slog.Record) error {
	e := entry{level: r.Level, msg: r.Message, attrs: map[string]string{}}
	r.Attrs(func(a slog.Attr) bool {
		e.attrs[a.Key] = a.Value.String()
		return true
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	l.entries = append(l.entries, e)
	return nil
}

// find returns the entries at level whose attributes include all of attrs.
func (l *logs) find(level slog.Level, attrs map[string]string) []entry {
	l.mu.Lock()
	defer l.mu.Unlock()
	var found []entry
next:
	for _, e := range l.entries {
		if e.level != level {
			continue
		}
		for k, v := range attrs {
			if e.attrs[k] != v {
				continue next
			}
		}
		found = append(found, e)
	}
	return found
}

func wantErr(t *testing.T, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("error: got %v; want %v", err, target)
	}
}

func wantConflict(t *testing.T, err error, holder string) *submissions.ConflictError {
	t.Helper()
	var ce *submissions.ConflictError
	if !errors.As(err, &ce) {
		t.Fatalf("error: got %v; want a *ConflictError", err)
	}
	if ce.Holder != holder {
		t.Fatalf("Holder: got %q; want %q", ce.Holder, holder)
	}
	if !errors.Is(err, submissions.ErrIdempotencyConflict) {
		t.Fatalf("errors.Is(%v, ErrIdempotencyConflict): got false; want true", err)
	}
	if !strings.Contains(err.Error(), holder) {
		t.Fatalf("error: got %q; want it to name the holder %q", err, holder)
	}
	return ce
}

func wantOutcome(t *testing.T, s *submissions.Submissions[Withdrawal], key string, want Withdrawal, wantOK bool) {
	t.Helper()
	got, ok, err := s.Outcome(context.Background(), key)
	if err != nil {
		t.Fatalf("Outcome(%q): %v", key, err)
	}
	if ok != wantOK || got != want {
		t.Fatalf("Outcome(%q): got %+v, %v; want %+v, %v", key, got, ok, want, wantOK)
	}
}

func wantHolder(t *testing.T, s *submissions.Submissions[Withdrawal], id, want string) {
	t.Helper()
	got, ok, err := s.ClaimedBy(context.Background(), id)
	if err != nil {
		t.Fatalf("ClaimedBy(%q): %v", id, err)
	}
	if ok != (want != "") || got != want {
		t.Fatalf("ClaimedBy(%q): got %q, %v; want %q", id, got, ok, want)
	}
}
