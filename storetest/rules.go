package storetest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/idemledger/submissions"
)

// Rule 1: keys are trimmed; empty, too long, invalid UTF-8 or NUL keys are
// refused by every method before anything else happens.

func testKeyIsTrimmed(t *testing.T, e env) {
	s, _ := e.ledger()
	r := &rail{}
	w := newWithdrawal("w-1")
	first, err := s.Submit(bg, "  req-1 \t\n", w, r.send)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Submit(bg, "req-1", w, r.send)
	if err != nil || got != first {
		t.Fatalf("Submit(req-1): got %+v, %v; want %+v, nil", got, err, first)
	}
	r.wantCalls(t, 1)
	wantHolder(t, s, "w-1", "req-1")
	wantOutcome(t, s, " req-1", first, true)
}

func testKeyAtLimitIsAccepted(t *testing.T, e env) {
	s, _ := e.ledger()
	key := strings.Repeat("k", submissions.MaxKeyLen)
	if _, err := s.Submit(bg, "  "+key+"  ", newWithdrawal("w-1"), nil); err != nil {
		t.Fatalf("Submit with a %d-byte key: %v", submissions.MaxKeyLen, err)
	}
	wantHolder(t, s, "w-1", key)
}

func testInvalidKeysAreRefusedByEveryMethodFirst(t *testing.T, e env) {
	keys := map[string]string{
		"empty":       "",
		"white space": " \t\n ",
		"too long":    strings.Repeat("k", submissions.MaxKeyLen+1),
		"not UTF-8":   "req-\xff",
		"NUL":         "req\x001",
	}
	done, cancel := context.WithCancel(bg)
	cancel()
	for name, key := range keys {
		t.Run(name, func(t *testing.T) {
			s, _ := e.ledger()
			r := &rail{}
			// A done context and an invalid fingerprint: the key is checked first.
			bad := Withdrawal{ID: "w-1", Amount: "-1", Currency: "USDC", Dest: "0xabc"}
			_, err := s.Submit(done, key, bad, r.send)
			wantErr(t, err, submissions.ErrInvalidKey)
			wantErr(t, s.Resolve(done, key, bad), submissions.ErrInvalidKey)
			wantErr(t, s.Release(done, key), submissions.ErrInvalidKey)
			_, _, err = s.Outcome(done, key)
			wantErr(t, err, submissions.ErrInvalidKey)
			_, err = s.Submit(bg, key, newWithdrawal("w-1"), r.send)
			wantErr(t, err, submissions.ErrInvalidKey)
			wantErr(t, s.Resolve(bg, key, newWithdrawal("w-1")), submissions.ErrInvalidKey)
			r.wantCalls(t, 0)
			wantHolder(t, s, "w-1", "")
		})
	}
}

// Rule 2: invalid fingerprints are refused, nothing claimed or sent.

func testInvalidFingerprintsAreRefused(t *testing.T, e env) {
	mod := func(f func(*Withdrawal)) Withdrawal {
		w := newWithdrawal("w-1")
		f(&w)
		return w
	}
	cases := map[string]Withdrawal{
		"empty id":              mod(func(w *Withdrawal) { w.ID = "" }),
		"id not UTF-8":          mod(func(w *Withdrawal) { w.ID = "w-\xfe" }),
		"id with NUL":           mod(func(w *Withdrawal) { w.ID = "w\x00" }),
		"empty destination":     mod(func(w *Withdrawal) { w.Dest = "" }),
		"destination not UTF-8": mod(func(w *Withdrawal) { w.Dest = "0x\xc3" }),
		"destination with NUL":  mod(func(w *Withdrawal) { w.Dest = "0x\x00ab" }),
		"empty amount":          mod(func(w *Withdrawal) { w.Amount = "" }),
		"zero amount":           mod(func(w *Withdrawal) { w.Amount = "0" }),
		"zero with decimals":    mod(func(w *Withdrawal) { w.Amount = "000.000" }),
		"negative amount":       mod(func(w *Withdrawal) { w.Amount = "-25.00" }),
		"signed amount":         mod(func(w *Withdrawal) { w.Amount = "+25.00" }),
		"exponent":              mod(func(w *Withdrawal) { w.Amount = "2.5e1" }),
		"two points":            mod(func(w *Withdrawal) { w.Amount = "2.5.0" }),
		"only a point":          mod(func(w *Withdrawal) { w.Amount = "." }),
		"spaces in amount":      mod(func(w *Withdrawal) { w.Amount = " 25" }),
		"grouped amount":        mod(func(w *Withdrawal) { w.Amount = "1,000" }),
		"non-ASCII digits":      mod(func(w *Withdrawal) { w.Amount = "٢٥" }),
		"word amount":           mod(func(w *Withdrawal) { w.Amount = "NaN" }),
		"empty currency":        mod(func(w *Withdrawal) { w.Currency = "" }),
		"one-letter currency":   mod(func(w *Withdrawal) { w.Currency = "U" }),
		"13-letter currency":    mod(func(w *Withdrawal) { w.Currency = "ABCDEFGHIJKLM" }),
		"currency with dash":    mod(func(w *Withdrawal) { w.Currency = "US-D" }),
		"currency with space":   mod(func(w *Withdrawal) { w.Currency = "US D" }),
		"non-ASCII currency":    mod(func(w *Withdrawal) { w.Currency = "ÜSD" }),
	}
	for name, w := range cases {
		t.Run(name, func(t *testing.T) {
			s, _ := e.ledger()
			r := &rail{}
			_, err := s.Submit(bg, "req-1", w, r.send)
			wantErr(t, err, submissions.ErrInvalidFingerprint)
			wantErr(t, s.Resolve(bg, "req-2", w), submissions.ErrInvalidFingerprint)
			r.wantCalls(t, 0)
			wantOutcome(t, s, "req-1", Withdrawal{}, false)
			wantOutcome(t, s, "req-2", Withdrawal{}, false)
			wantHolder(t, s, "w-1", "")
			// Nothing was recorded: the keys are free for a valid withdrawal.
			if _, err := s.Submit(bg, "req-1", newWithdrawal("w-1"), r.send); err != nil {
				t.Fatalf("Submit after the refusal: %v", err)
			}
			r.wantCalls(t, 1)
		})
	}
}

func testEdgeFingerprintsAreAccepted(t *testing.T, e env) {
	for i, f := range []struct{ amount, currency string }{
		{"0.01", "BTC"}, {".5", "ab"}, {"5.", "ABCDEFGHIJ12"}, {"1000000000000000000000000.000000000000000001", "usdt"}, {"007", "Eth2"},
	} {
		s, _ := e.ledger()
		w := Withdrawal{ID: "w-1", Amount: f.amount, Currency: f.currency, Dest: " exact dest "}
		if _, err := s.Submit(bg, fmt.Sprint("req-", i), w, nil); err != nil {
			t.Errorf("Submit(%q %q): %v", f.amount, f.currency, err)
		}
	}
}

// Rule 3: amounts compare numerically, currencies case-insensitively, ids and
// destinations exactly.

func testFingerprintsCompareByMeaning(t *testing.T, e env) {
	base := Withdrawal{ID: "w-1", Amount: "25.00", Currency: "usdc", Dest: "0xAbC"}
	with := func(amount, currency, dest string) Withdrawal {
		w := base
		w.Amount, w.Currency, w.Dest = amount, currency, dest
		return w
	}
	same := []Withdrawal{
		with("25.00", "usdc", "0xAbC"),
		with("25.0", "USDC", "0xAbC"),
		with("025", "Usdc", "0xAbC"),
		with("25", "uSdC", "0xAbC"),
		with("0025.", "USDC", "0xAbC"),
	}
	different := []Withdrawal{
		with("25.01", "USDC", "0xAbC"),
		with("250", "USDC", "0xAbC"),
		with("2.5", "USDC", "0xAbC"),
		with("25", "USDT", "0xAbC"),
		with("25", "USDC", "0xabc"),
		with("25", "USDC", "0xAbC "),
		{ID: "W-1", Amount: "25", Currency: "USDC", Dest: "0xAbC"},
	}
	s, _ := e.ledger()
	r := &rail{}
	want, err := s.Submit(bg, "req-1", base, r.send)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range same {
		got, err := s.Submit(bg, "req-1", w, r.send)
		if err != nil || got != want {
			t.Errorf("Submit(%+v): got %+v, %v; want %+v, nil", w, got, err, want)
		}
	}
	for _, w := range different {
		_, err := s.Submit(bg, "req-1", w, r.send)
		if !errors.Is(err, submissions.ErrIdempotencyConflict) {
			t.Errorf("Submit(%+v): got %v; want ErrIdempotencyConflict", w, err)
		}
	}
	r.wantCalls(t, 1)
}

func testSmallAmountsCompareNumerically(t *testing.T, e env) {
	s, _ := e.ledger()
	w := newWithdrawal("w-1")
	w.Amount = ".5"
	if _, err := s.Submit(bg, "req-1", w, nil); err != nil {
		t.Fatal(err)
	}
	for _, a := range []string{"0.5", "00.50", "0.500"} {
		w.Amount = a
		if _, err := s.Submit(bg, "req-1", w, nil); err != nil {
			t.Errorf("Submit(amount %q): got %v; want a replay", a, err)
		}
	}
	w.Amount = "5"
	_, err := s.Submit(bg, "req-1", w, nil)
	wantErr(t, err, submissions.ErrIdempotencyConflict)
}

// Rule 4: a fresh submit claims both, sends outside the lock, records.

func testFreshSubmitClaimsThenSendsThenRecords(t *testing.T, e env) {
	s, _ := e.ledger()
	w := newWithdrawal("w-1")
	type ctxKey struct{}
	ctx := context.WithValue(bg, ctxKey{}, "mine")
	calls := 0
	out, err := s.Submit(ctx, "req-1", w, func(sctx context.Context, req Withdrawal) (Withdrawal, error) {
		calls++
		if sctx.Value(ctxKey{}) != "mine" {
			t.Error("send did not get the caller's context")
		}
		if req != w {
			t.Errorf("send got %+v; want %+v", req, w)
		}
		// Both indexes are claimed before send runs.
		wantHolder(t, s, "w-1", "req-1")
		wantOutcome(t, s, "req-1", Withdrawal{}, false)
		_, err := s.Submit(bg, "req-1", w, nil)
		wantErr(t, err, submissions.ErrSubmissionInFlight)
		_, err = s.Submit(bg, "req-2", w, nil)
		wantConflict(t, err, "req-1")
		// send runs outside the lock: the ledger serves other withdrawals meanwhile.
		if _, err := s.Submit(bg, "req-3", newWithdrawal("w-3"), nil); err != nil {
			t.Errorf("Submit of another withdrawal during send: %v", err)
		}
		return req.sent("0xtx"), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if calls != 1 {
		t.Fatalf("send calls: got %d; want 1", calls)
	}
	if want := w.sent("0xtx"); out != want {
		t.Fatalf("Submit: got %+v; want %+v", out, want)
	}
	wantOutcome(t, s, "req-1", out, true)
	wantHolder(t, s, "w-1", "req-1")
}

func testNilSendRecordsTheRequest(t *testing.T, e env) {
	s, _ := e.ledger()
	w := newWithdrawal("w-1")
	out, err := s.Submit(bg, "req-1", w, nil)
	if err != nil || out != w {
		t.Fatalf("Submit: got %+v, %v; want %+v, nil", out, err, w)
	}
	wantOutcome(t, s, "req-1", w, true)
	wantHolder(t, s, "w-1", "req-1")
}

func testReplayReturnsTheStoredOutcomeWithoutSending(t *testing.T, e env) {
	s, l := e.ledger()
	r := &rail{}
	w := newWithdrawal("w-1")
	first, err := s.Submit(bg, "req-1", w, r.send)
	if err != nil {
		t.Fatal(err)
	}
	if got := l.find(slog.LevelInfo, map[string]string{"key": "req-1"}); len(got) != 0 {
		t.Fatalf("a fresh submit logged %v at Info; want no replay log", got)
	}
	for range 3 {
		got, err := s.Submit(bg, "req-1", w, func(context.Context, Withdrawal) (Withdrawal, error) {
			t.Fatal("send called on a replay")
			return Withdrawal{}, nil
		})
		if err != nil || got != first {
			t.Fatalf("replay: got %+v, %v; want %+v, nil", got, err, first)
		}
	}
	r.wantCalls(t, 1)
	if got := l.find(slog.LevelInfo, map[string]string{"key": "req-1", "withdrawal": "w-1"}); len(got) != 3 {
		t.Fatalf("replays logged at Info with the key: got %d; want 3", len(got))
	}
}

// Rule 6: a known key with another fingerprint is a conflict.

func testKeyReusedForAnotherWithdrawalIsAConflict(t *testing.T, e env) {
	for _, inFlight := range []bool{false, true} {
		t.Run(fmt.Sprint("in flight ", inFlight), func(t *testing.T) {
			s, _ := e.ledger()
			r := &rail{}
			if inFlight {
				strand(t, s, "req-1", newWithdrawal("w-1"))
			} else if _, err := s.Submit(bg, "req-1", newWithdrawal("w-1"), r.send); err != nil {
				t.Fatal(err)
			}
			_, err := s.Submit(bg, "req-1", newWithdrawal("w-2"), r.send)
			wantErr(t, err, submissions.ErrIdempotencyConflict)
			if !strings.Contains(err.Error(), "request key req-1 belongs to another withdrawal") {
				t.Fatalf("error: got %q; want it to say the key belongs to another withdrawal", err)
			}
			var ce *submissions.ConflictError
			if errors.As(err, &ce) {
				t.Fatalf("a reused key reported a withdrawal holder: %+v", ce)
			}
			wantHolder(t, s, "w-2", "")
			r.wantCalls(t, map[bool]int64{false: 1, true: 0}[inFlight])
		})
	}
}

// Rule 7: a known key without an outcome is in flight.

func testKeyWithoutOutcomeIsInFlight(t *testing.T, e env) {
	s, _ := e.ledger()
	r := &rail{}
	started, finish := make(chan struct{}), make(chan struct{})
	done := make(chan error)
	go func() {
		_, err := s.Submit(bg, "req-1", newWithdrawal("w-1"), func(ctx context.Context, w Withdrawal) (Withdrawal, error) {
			close(started)
			<-finish
			return r.send(ctx, w)
		})
		done <- err
	}()
	<-started
	_, err := s.Submit(bg, "req-1", newWithdrawal("w-1"), r.send)
	wantErr(t, err, submissions.ErrSubmissionInFlight)
	if !strings.Contains(err.Error(), "req-1") {
		t.Fatalf("error: got %q; want it to name req-1", err)
	}
	close(finish)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	r.wantCalls(t, 1)
}

// Rule 8: a new key for a claimed withdrawal is refused, naming the holder,
// and leaves no trace.

func testSecondKeyForAClaimedWithdrawalIsRefused(t *testing.T, e env) {
	s, _ := e.ledger()
	r := &rail{}
	w := newWithdrawal("w-1")
	first, err := s.Submit(bg, "req-1", w, r.send)
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Submit(bg, "req-2", w, r.send)
	ce := wantConflict(t, err, "req-1")
	if ce.Key != "req-2" || ce.WithdrawalID != "w-1" {
		t.Fatalf("ConflictError: got %+v; want Key req-2, WithdrawalID w-1", ce)
	}
	r.wantCalls(t, 1)
	// The refusal tells the loser where to look.
	holder, _, _ := s.ClaimedBy(bg, "w-1")
	wantOutcome(t, s, holder, first, true)
	// The loser left no trace: its key is unknown and free for other work.
	wantOutcome(t, s, "req-2", Withdrawal{}, false)
	if err := s.Release(bg, "req-2"); err != nil {
		t.Fatalf("Release of the loser's key: %v", err)
	}
	wantHolder(t, s, "w-1", "req-1")
	if _, err := s.Submit(bg, "req-2", newWithdrawal("w-2"), r.send); err != nil {
		t.Fatalf("Submit of another withdrawal under the loser's key: %v", err)
	}
	r.wantCalls(t, 2)
}

func testSecondKeyIsRefusedWhileTheFirstIsInFlight(t *testing.T, e env) {
	s, _ := e.ledger()
	r := &rail{}
	strand(t, s, "req-1", newWithdrawal("w-1"))
	_, err := s.Submit(bg, "req-2", newWithdrawal("w-1"), r.send)
	wantConflict(t, err, "req-1")
	r.wantCalls(t, 0)
}

// Rule 9: a send that fails, panics or sees its context end keeps the claim.

func testFailedSendKeepsTheKeyClaimed(t *testing.T, e env) {
	s, l := e.ledger()
	r := &rail{}
	w := newWithdrawal("w-1")
	out, err := s.Submit(bg, "req-1", w, failing)
	wantErr(t, err, errRail)
	if out != (Withdrawal{}) {
		t.Fatalf("Submit after a failed send: got %+v; want the zero value", out)
	}
	wantKeptClaim(t, s, r, "req-1", w)
	if got := l.find(slog.LevelWarn, map[string]string{"key": "req-1", "withdrawal": "w-1"}); len(got) != 1 {
		t.Fatalf("Warn logs naming key and withdrawal: got %d; want 1", len(got))
	}
}

// wantKeptClaim checks that key is claimed for w with no outcome: a retry is
// in flight, another key is refused, and nothing was sent.
func wantKeptClaim(t *testing.T, s *submissions.Submissions[Withdrawal], r *rail, key string, w Withdrawal) {
	t.Helper()
	_, err := s.Submit(bg, key, w, r.send)
	wantErr(t, err, submissions.ErrSubmissionInFlight)
	_, err = s.Submit(bg, "other-"+key, w, r.send)
	wantConflict(t, err, key)
	wantOutcome(t, s, key, Withdrawal{}, false)
	wantHolder(t, s, w.ID, key)
	r.wantCalls(t, 0)
}

type panicValue struct{ why string }

func testPanickingSendKeepsTheKeyClaimedAndPanicsOn(t *testing.T, e env) {
	s, l := e.ledger()
	r := &rail{}
	w := newWithdrawal("w-1")
	want := &panicValue{"rail client bug"}
	func() {
		defer func() {
			if got := recover(); got != want {
				t.Fatalf("recovered %v; want the send's own panic value %v", got, want)
			}
		}()
		_, _ = s.Submit(bg, "req-1", w, func(context.Context, Withdrawal) (Withdrawal, error) { panic(want) })
		t.Fatal("Submit returned after send panicked")
	}()
	wantKeptClaim(t, s, r, "req-1", w)
	if got := l.find(slog.LevelWarn, map[string]string{"key": "req-1", "withdrawal": "w-1"}); len(got) != 1 {
		t.Fatalf("Warn logs naming key and withdrawal: got %d; want 1", len(got))
	}
	// The ledger no longer runs that send, so the operator may release it.
	if err := s.Release(bg, "req-1"); err != nil {
		t.Fatalf("Release after the panic: %v", err)
	}
}

func testSendWhoseContextEndsKeepsTheKeyClaimed(t *testing.T, e env) {
	s, _ := e.ledger()
	r := &rail{}
	w := newWithdrawal("w-1")
	ctx, cancel := context.WithCancelCause(bg)
	timeout := errors.New("the caller's deadline passed")
	_, err := s.Submit(ctx, "req-1", w, func(ctx context.Context, _ Withdrawal) (Withdrawal, error) {
		cancel(timeout) // the caller gives up while the rail call waits
		<-ctx.Done()
		return Withdrawal{}, fmt.Errorf("rail call: %w", context.Cause(ctx))
	})
	wantErr(t, err, timeout)
	wantKeptClaim(t, s, r, "req-1", w)
}

func testAnswerAfterTheContextEndedIsNotTakenAsKnown(t *testing.T, e env) {
	s, l := e.ledger()
	r := &rail{}
	w := newWithdrawal("w-1")
	ctx, cancel := context.WithCancel(bg)
	out, err := s.Submit(ctx, "req-1", w, func(ctx context.Context, req Withdrawal) (Withdrawal, error) {
		cancel() // the caller gave up while the rail was still working
		return r.send(ctx, req)
	})
	wantErr(t, err, context.Canceled)
	wantErr(t, err, submissions.ErrOutcomeNotRecorded)
	if want := w.sent("0xtx-w-1"); out != want {
		t.Fatalf("Submit: got %+v; want the rail's answer %+v, unrecorded", out, want)
	}
	r.wantCalls(t, 1)
	sent := &rail{}
	wantKeptClaim(t, s, sent, "req-1", w)
	if got := l.find(slog.LevelWarn, map[string]string{"key": "req-1", "withdrawal": "w-1"}); len(got) != 1 {
		t.Fatalf("Warn logs naming key and withdrawal: got %d; want 1", len(got))
	}
	if err := s.Resolve(bg, "req-1", out); err != nil {
		t.Fatalf("Resolve with the answer that came back: %v", err)
	}
	wantOutcome(t, s, "req-1", out, true)
}

// Rule 10: an outcome with another fingerprint is a conflict; the key stays
// claimed.

func testOutcomeForAnotherWithdrawalKeepsTheKeyClaimed(t *testing.T, e env) {
	for name, bad := range map[string]Withdrawal{
		"another amount": {ID: "w-1", Amount: "26", Currency: "USDC", Dest: "0xabc"},
		"another id":     newWithdrawal("w-2"),
		"invalid":        {ID: "w-1", Amount: "25", Currency: "USDC"},
	} {
		t.Run(name, func(t *testing.T) {
			s, l := e.ledger()
			r := &rail{}
			w := newWithdrawal("w-1")
			_, err := s.Submit(bg, "req-1", w, func(context.Context, Withdrawal) (Withdrawal, error) { return bad, nil })
			wantErr(t, err, submissions.ErrIdempotencyConflict)
			wantKeptClaim(t, s, r, "req-1", w)
			wantHolder(t, s, "w-2", "")
			if got := l.find(slog.LevelWarn, map[string]string{"key": "req-1", "withdrawal": "w-1"}); len(got) != 1 {
				t.Fatalf("Warn logs naming key and withdrawal: got %d; want 1", len(got))
			}
		})
	}
}

// Rule 11: a context done before the claim returns its error, nothing claimed.

func testDoneContextClaimsNothing(t *testing.T, e env) {
	s, _ := e.ledger()
	r := &rail{}
	w := newWithdrawal("w-1")
	ctx, cancel := context.WithCancel(bg)
	cancel()
	_, err := s.Submit(ctx, "req-1", w, r.send)
	wantErr(t, err, context.Canceled)
	wantErr(t, s.Resolve(ctx, "req-1", w), context.Canceled)
	wantErr(t, s.Release(ctx, "req-1"), context.Canceled)
	_, _, err = s.Outcome(ctx, "req-1")
	wantErr(t, err, context.Canceled)
	_, _, err = s.ClaimedBy(ctx, "w-1")
	wantErr(t, err, context.Canceled)
	r.wantCalls(t, 0)
	wantHolder(t, s, "w-1", "")
	wantOutcome(t, s, "req-1", Withdrawal{}, false)
	// The key is free: with a live context the first submit sends.
	if _, err := s.Submit(bg, "req-1", w, r.send); err != nil {
		t.Fatal(err)
	}
	r.wantCalls(t, 1)
}

// Rule 12: Resolve closes an in-flight key; the same outcome again is
// accepted, a different one is a conflict.

func testResolveClosesAnInFlightKey(t *testing.T, e env) {
	s, l := e.ledger()
	r := &rail{}
	w := newWithdrawal("w-1")
	strand(t, s, "req-1", w)

	found := w.sent("0xfound")
	found.Amount, found.Currency = "25", "usdc" // the same withdrawal, written another way
	if err := s.Resolve(bg, " req-1 ", found); err != nil {
		t.Fatalf("Resolve: %v", err)
	}
	if got := l.find(slog.LevelInfo, map[string]string{"key": "req-1", "withdrawal": "w-1"}); len(got) != 1 || got[0].msg != "submission resolved" {
		t.Fatalf("Info logs after Resolve: got %+v; want one \"submission resolved\"", got)
	}
	got, err := s.Submit(bg, "req-1", w, r.send)
	if err != nil || got != found {
		t.Fatalf("Submit after Resolve: got %+v, %v; want %+v, nil", got, err, found)
	}
	r.wantCalls(t, 0)
	wantOutcome(t, s, "req-1", found, true)

	if err := s.Resolve(bg, "req-1", found); err != nil {
		t.Fatalf("Resolve with the same outcome again: %v", err)
	}
	other := w.sent("0xother")
	wantErr(t, s.Resolve(bg, "req-1", other), submissions.ErrIdempotencyConflict)
	wantErr(t, s.Resolve(bg, "req-1", newWithdrawal("w-2").sent("0xfound")), submissions.ErrIdempotencyConflict)
	wantOutcome(t, s, "req-1", found, true)
	wantHolder(t, s, "w-2", "")
}

func testResolveOfAnotherWithdrawalOnAnInFlightKeyIsRefused(t *testing.T, e env) {
	s, _ := e.ledger()
	strand(t, s, "req-1", newWithdrawal("w-1"))
	wantErr(t, s.Resolve(bg, "req-1", newWithdrawal("w-2")), submissions.ErrIdempotencyConflict)
	wantOutcome(t, s, "req-1", Withdrawal{}, false)
	wantHolder(t, s, "w-2", "")
	wantErr(t, s.Resolve(bg, "req-1", Withdrawal{ID: "w-1"}), submissions.ErrInvalidFingerprint)
}

func testResolveOfASentKey(t *testing.T, e env) {
	s, _ := e.ledger()
	r := &rail{}
	w := newWithdrawal("w-1")
	out, err := s.Submit(bg, "req-1", w, r.send)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Resolve(bg, "req-1", out); err != nil {
		t.Fatalf("Resolve with the recorded outcome: %v", err)
	}
	wantErr(t, s.Resolve(bg, "req-1", w), submissions.ErrIdempotencyConflict)
	wantOutcome(t, s, "req-1", out, true)
}

// receipt's unexported field is not part of its encoding/json encoding.
// unencodable cannot be encoded by encoding/json.
// testResolveDuringTheSend: an operator may resolve a key while this ledger
// still runs its send; the resolved outcome stands, and a rail that answers
// otherwise has its answer returned, unrecorded, with the error.
func testResolveDuringTheSend(t *testing.T, e env) {
	for _, agree := range []bool{true, false} {
		s, _ := e.ledger()
		w := newWithdrawal("w-1")
		resolved := w.sent("0xfound")
		out, err := s.Submit(bg, "req-1", w, func(_ context.Context, req Withdrawal) (Withdrawal, error) {
			if err := s.Resolve(bg, "req-1", resolved); err != nil {
				t.Errorf("Resolve during the send: %v", err)
			}
			if agree {
				return resolved, nil
			}
			return req.sent("0xrail"), nil
		})
		switch {
		case agree && (err != nil || out != resolved):
			t.Fatalf("Submit, the rail agreeing: got %+v, %v; want %+v, nil", out, err, resolved)
		case !agree:
			wantErr(t, err, submissions.ErrOutcomeNotRecorded)
			wantErr(t, err, submissions.ErrIdempotencyConflict)
			if want := w.sent("0xrail"); out != want {
				t.Fatalf("Submit, the rail disagreeing: got %+v; want its answer %+v", out, want)
			}
		}
		wantOutcome(t, s, "req-1", resolved, true)
	}
}

// Rule 13: Resolve under an unknown key goes through the claim check first.

func testResolveUnderAFreshKey(t *testing.T, e env) {
	s, _ := e.ledger()
	r := &rail{}
	w := newWithdrawal("w-1")
	strand(t, s, "req-1", w)

	// A callback under a fresh key cannot write onto a held withdrawal.
	err := s.Resolve(bg, "callback-1", w.sent("0xforged"))
	wantConflict(t, err, "req-1")
	wantOutcome(t, s, "callback-1", Withdrawal{}, false)
	wantHolder(t, s, "w-1", "req-1")
	_, err = s.Submit(bg, "req-1", w, r.send)
	wantErr(t, err, submissions.ErrSubmissionInFlight)

	// On a free withdrawal it records the key, with the outcome and the claim.
	w2 := newWithdrawal("w-2")
	if err := s.Resolve(bg, "callback-2", w2.sent("0xseen")); err != nil {
		t.Fatalf("Resolve under a fresh key of a free withdrawal: %v", err)
	}
	wantHolder(t, s, "w-2", "callback-2")
	got, err := s.Submit(bg, "callback-2", w2, r.send)
	if err != nil || got != w2.sent("0xseen") {
		t.Fatalf("Submit after Resolve: got %+v, %v; want the resolved outcome", got, err)
	}
	_, err = s.Submit(bg, "req-9", w2, r.send)
	wantConflict(t, err, "callback-2")
	r.wantCalls(t, 0)
}

// Rule 14: Release drops an in-flight key, but never one with an outcome, and
// never while this ledger still runs its send.

func testReleaseFreesTheKeyAndTheWithdrawal(t *testing.T, e env) {
	s, l := e.ledger()
	r := &rail{}
	w := newWithdrawal("w-1")
	strand(t, s, "req-1", w)
	if err := s.Release(bg, " req-1"); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if got := l.find(slog.LevelInfo, map[string]string{"key": "req-1", "withdrawal": "w-1"}); len(got) != 1 || got[0].msg != "submission released" {
		t.Fatalf("Info logs after Release: got %+v; want one \"submission released\"", got)
	}
	wantHolder(t, s, "w-1", "")
	wantOutcome(t, s, "req-1", Withdrawal{}, false)
	// Another key may now send it, once.
	if _, err := s.Submit(bg, "req-2", w, r.send); err != nil {
		t.Fatalf("Submit under another key after Release: %v", err)
	}
	_, err := s.Submit(bg, "req-1", w, r.send)
	wantConflict(t, err, "req-2")
	r.wantCalls(t, 1)
}

func testReleasedKeyMaySendAgain(t *testing.T, e env) {
	s, _ := e.ledger()
	r := &rail{}
	w := newWithdrawal("w-1")
	strand(t, s, "req-1", w)
	if err := s.Release(bg, "req-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Submit(bg, "req-1", w, r.send); err != nil {
		t.Fatalf("Submit after Release: %v", err)
	}
	r.wantCalls(t, 1)
}

func testReleaseOfAKeyWithAnOutcomeIsRefused(t *testing.T, e env) {
	s, _ := e.ledger()
	r := &rail{}
	w := newWithdrawal("w-1")
	out, err := s.Submit(bg, "req-1", w, r.send)
	if err != nil {
		t.Fatal(err)
	}
	wantErr(t, s.Release(bg, "req-1"), submissions.ErrIdempotencyConflict)
	wantOutcome(t, s, "req-1", out, true)
	wantHolder(t, s, "w-1", "req-1")

	// A resolved key is as closed as a sent one.
	strand(t, s, "req-2", newWithdrawal("w-2"))
	if err := s.Resolve(bg, "req-2", newWithdrawal("w-2")); err != nil {
		t.Fatal(err)
	}
	wantErr(t, s.Release(bg, "req-2"), submissions.ErrIdempotencyConflict)
	wantHolder(t, s, "w-2", "req-2")
}

func testReleaseIsRefusedWhileTheSendRuns(t *testing.T, e env) {
	for _, fail := range []bool{false, true} {
		t.Run(fmt.Sprint("send fails ", fail), func(t *testing.T) {
			s, _ := e.ledger()
			w := newWithdrawal("w-1")
			started, finish := make(chan struct{}), make(chan struct{})
			done := make(chan error)
			go func() {
				_, err := s.Submit(bg, "req-1", w, func(_ context.Context, req Withdrawal) (Withdrawal, error) {
					close(started)
					<-finish
					if fail {
						return Withdrawal{}, errRail
					}
					return req.sent("0xtx"), nil
				})
				done <- err
			}()
			<-started
			wantErr(t, s.Release(bg, "req-1"), submissions.ErrSubmissionInFlight)
			wantHolder(t, s, "w-1", "req-1")
			close(finish)
			err := <-done
			if fail {
				wantErr(t, err, errRail)
				if err := s.Release(bg, "req-1"); err != nil {
					t.Fatalf("Release once the send has failed: %v", err)
				}
				wantHolder(t, s, "w-1", "")
			} else {
				if err != nil {
					t.Fatal(err)
				}
				wantErr(t, s.Release(bg, "req-1"), submissions.ErrIdempotencyConflict)
				wantHolder(t, s, "w-1", "req-1")
			}
		})
	}
}

func testReleaseOfAnUnknownKeyDoesNothing(t *testing.T, e env) {
	s, _ := e.ledger()
	if _, err := s.Submit(bg, "req-1", newWithdrawal("w-1"), nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(bg, "req-404"); err != nil {
		t.Fatalf("Release of an unknown key: got %v; want nil", err)
	}
	wantHolder(t, s, "w-1", "req-1")
}

func testLateReleaseDoesNotEvictAMovedClaim(t *testing.T, e env) {
	s, _ := e.ledger()
	w := newWithdrawal("w-1")
	strand(t, s, "req-1", w)
	if err := s.Release(bg, "req-1"); err != nil {
		t.Fatal(err)
	}
	strand(t, s, "req-2", w)
	// The operator's second, late release of req-1 must not free req-2's
	// claim: a release names a key, never the withdrawal.
	if err := s.Release(bg, "req-1"); err != nil {
		t.Fatalf("late Release: %v", err)
	}
	wantHolder(t, s, "w-1", "req-2")
	r := &rail{}
	wantKeptClaim(t, s, r, "req-2", w)
}

// Rule 15: reads.

func testReads(t *testing.T, e env) {
	s, _ := e.ledger()
	wantOutcome(t, s, "req-1", Withdrawal{}, false)
	wantHolder(t, s, "w-1", "")
	strand(t, s, "req-1", newWithdrawal("w-1"))
	wantOutcome(t, s, "req-1", Withdrawal{}, false)
	wantHolder(t, s, "w-1", "req-1")
	wantHolder(t, s, "W-1", "")
	out, err := s.Submit(bg, "req-2", newWithdrawal("w-2"), (&rail{}).send)
	if err != nil {
		t.Fatal(err)
	}
	wantOutcome(t, s, "req-2", out, true)
	for _, id := range []string{"", " w-1", "w-\xff", "w\x00"} {
		wantHolder(t, s, id, "") // no fingerprint can carry these ids
	}
}
