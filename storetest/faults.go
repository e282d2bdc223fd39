package storetest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/idemledger/submissions"
)

// hooked wraps a store with hooks run before its calls; a ledger runs it as
// it runs any Store.
type hooked struct {
	submissions.Store[Withdrawal]
	beforeClaim, beforeRelease func()
	afterSettle                func() // run once Settle has settled
	settleErr                  error  // returned by Settle instead of settling
}

func (h *hooked) Claim(ctx context.Context, key string, fp submissions.Fingerprint, outcome *Withdrawal) (submissions.Record[Withdrawal], bool, error) {
	if h.beforeClaim != nil {
		h.beforeClaim()
	}
	return h.Store.Claim(ctx, key, fp, outcome)
}

func (h *hooked) Settle(ctx context.Context, key string, fp submissions.Token, outcome Withdrawal) (submissions.Record[Withdrawal], bool, error) {
	if h.settleErr != nil {
		return submissions.Record[Withdrawal]{}, false, h.settleErr
	}
	if h.afterSettle != nil {
		defer h.afterSettle()
	}
	return h.Store.Settle(ctx, key, fp, outcome)
}

func (h *hooked) Release(ctx context.Context, key string, token submissions.Token) (submissions.Record[Withdrawal], bool, error) {
	if h.beforeRelease != nil {
		h.beforeRelease()
	}
	return h.Store.Release(ctx, key, token)
}

// store returns a new store and a ledger on it, with its logs.
func (e env) store() (submissions.Store[Withdrawal], *submissions.Submissions[Withdrawal]) {
	st := e.newStore(e.t)
	return st, submissions.NewWithStore(st, submissions.WithLogger(quiet))
}

func testOutcomeNotRecordedWhenTheStoreFails(t *testing.T, e env) {
	st := e.newStore(t)
	lost := errors.New("connection lost")
	s := submissions.NewWithStore[Withdrawal](&hooked{Store: st, settleErr: lost}, submissions.WithLogger(quiet))
	r := &rail{}
	w := newWithdrawal("w-1")
	out, err := s.Submit(bg, "req-1", w, r.send)
	wantErr(t, err, submissions.ErrOutcomeNotRecorded)
	wantErr(t, err, lost)
	if want := w.sent("0xtx-w-1"); out != want {
		t.Fatalf("Submit: got %+v; want the rail's answer %+v", out, want)
	}
	// The key stays in flight, for this instance and any other.
	other := submissions.NewWithStore[Withdrawal](st, submissions.WithLogger(quiet))
	wantKeptClaim(t, other, &rail{}, "req-1", w)
	if err := other.Resolve(bg, "req-1", out); err != nil {
		t.Fatalf("Resolve with the answer that came back: %v", err)
	}
	wantOutcome(t, other, "req-1", out, true)
	r.wantCalls(t, 1)
}

func testOutcomeNotRecordedWhenReleasedMeanwhile(t *testing.T, e env) {
	st, s := e.store()
	r := &rail{}
	w := newWithdrawal("w-1")
	out, err := s.Submit(bg, "req-1", w, func(ctx context.Context, req Withdrawal) (Withdrawal, error) {
		// Another instance's operator releases the key under the send.
		if _, released, err := releaseThrough(ctx, st, "req-1"); err != nil || !released {
			t.Errorf("Release through the store: got %v, %v; want released", released, err)
		}
		return r.send(ctx, req)
	})
	wantErr(t, err, submissions.ErrOutcomeNotRecorded)
	if want := w.sent("0xtx-w-1"); out != want {
		t.Fatalf("Submit: got %+v; want the rail's answer %+v", out, want)
	}
	wantOutcome(t, s, "req-1", Withdrawal{}, false)
	wantHolder(t, s, "w-1", "")
}

// testOutcomeNotRecordedOnAnotherClaim: the key is released and claimed
// again for another withdrawal while the first send runs; the first send's
// outcome must not land on the second claim.
func testOutcomeNotRecordedOnAnotherClaim(t *testing.T, e env) {
	st, s := e.store()
	r := &rail{}
	w, other := newWithdrawal("w-1"), newWithdrawal("w-2")
	otherFP := submissions.Fingerprint{WithdrawalID: "w-2", Amount: "25", Currency: "USDC", Destination: "0xabc"}
	out, err := s.Submit(bg, "req-1", w, func(ctx context.Context, req Withdrawal) (Withdrawal, error) {
		if _, released, err := releaseThrough(ctx, st, "req-1"); err != nil || !released {
			t.Errorf("Release through the store: got %v, %v; want released", released, err)
		}
		if _, claimed, err := st.Claim(ctx, "req-1", otherFP, nil); err != nil || !claimed {
			t.Errorf("Claim of the key for %s through the store: got %v, %v; want claimed", other.ID, claimed, err)
		}
		return r.send(ctx, req)
	})
	wantErr(t, err, submissions.ErrOutcomeNotRecorded)
	if want := w.sent("0xtx-w-1"); out != want {
		t.Fatalf("Submit: got %+v; want the rail's answer %+v", out, want)
	}
	rec, ok, err := st.Lookup(bg, "req-1")
	if err != nil || !ok || rec.Done || rec.Fingerprint != otherFP {
		t.Fatalf("the second claim: got %+v, %v, %v; want it for %s, in flight", rec, ok, err, other.ID)
	}
}

func testResolvedMeanwhile(t *testing.T, e env) {
	for _, agree := range []bool{true, false} {
		st, s := e.store()
		w := newWithdrawal("w-1")
		resolved := w.sent("0xfound")
		out, err := s.Submit(bg, "req-1", w, func(ctx context.Context, req Withdrawal) (Withdrawal, error) {
			// Another instance's operator resolves the key under the send.
			rec, _, err := st.Lookup(ctx, "req-1")
			if err != nil {
				t.Error(err)
			}
			if _, settled, err := st.Settle(ctx, "req-1", rec.Token, resolved); err != nil || !settled {
				t.Errorf("Settle through the store: got %v, %v; want settled", settled, err)
			}
			if agree {
				return resolved, nil
			}
			return req.sent("0xrail"), nil
		})
		if agree {
			if err != nil || out != resolved {
				t.Fatalf("Submit, the same outcome resolved meanwhile: got %+v, %v; want %+v, nil", out, err, resolved)
			}
		} else {
			wantErr(t, err, submissions.ErrOutcomeNotRecorded)
			wantErr(t, err, submissions.ErrIdempotencyConflict)
			if want := w.sent("0xrail"); out != want {
				t.Fatalf("Submit: got %+v; want the rail's answer %+v", out, want)
			}
		}
		wantOutcome(t, s, "req-1", resolved, true) // the resolved outcome stands
	}
}

// testMarkComesBeforeTheClaim: a Release of a key waits while the same
// ledger claims the key, and then finds the claim's send running; a Submit of
// a key waits while the same ledger releases it. Neither can slip between the
// other's check and its change.
func testMarkComesBeforeTheClaim(t *testing.T, e env) {
	st := e.newStore(t)
	claiming, proceed := make(chan struct{}), make(chan struct{})
	var once sync.Once
	h := &hooked{Store: st, beforeClaim: func() { once.Do(func() { close(claiming); <-proceed }) }}
	s := submissions.NewWithStore[Withdrawal](h, submissions.WithLogger(quiet))
	r := &rail{}
	w := newWithdrawal("w-1")
	sending, finish := make(chan struct{}), make(chan struct{})
	submitted := make(chan error)
	go func() {
		_, err := s.Submit(bg, "req-1", w, func(ctx context.Context, req Withdrawal) (Withdrawal, error) {
			close(sending)
			<-finish
			return r.send(ctx, req)
		})
		submitted <- err
	}()
	<-claiming
	released := make(chan error)
	go func() { released <- s.Release(bg, "req-1") }()
	select {
	case err := <-released:
		t.Fatalf("Release during the claim: returned %v before the claim was made; want it to wait", err)
	case <-time.After(20 * time.Millisecond):
	}
	close(proceed)
	<-sending
	wantErr(t, <-released, submissions.ErrSubmissionInFlight)
	close(finish)
	if err := <-submitted; err != nil {
		t.Fatal(err)
	}
	r.wantCalls(t, 1)
	wantOutcome(t, s, "req-1", w.sent("0xtx-w-1"), true)

	// And the other way round.
	st = e.newStore(t)
	releasing, proceed := make(chan struct{}), make(chan struct{})
	h = &hooked{Store: st, beforeRelease: func() { close(releasing); <-proceed }}
	s = submissions.NewWithStore[Withdrawal](h, submissions.WithLogger(quiet))
	strand(t, s, "req-1", w)
	go func() { released <- s.Release(bg, "req-1") }()
	<-releasing
	go func() {
		_, err := s.Submit(bg, "req-1", w, r.send)
		submitted <- err
	}()
	select {
	case err := <-submitted:
		t.Fatalf("Submit during the release: returned %v before the release was done; want it to wait", err)
	case <-time.After(20 * time.Millisecond):
	}
	close(proceed)
	if err := <-released; err != nil {
		t.Fatalf("Release: %v", err)
	}
	if err := <-submitted; err != nil {
		t.Fatalf("Submit once the release is done: %v", err)
	}
	r.wantCalls(t, 2)
}

func testReleaseAfterTheOutcomeIsRecordedIsAConflict(t *testing.T, e env) {
	// The send has returned and its outcome is recorded, but Submit has not
	// returned yet: the key has an outcome, and a Release of it on the same
	// ledger is refused as any key with an outcome is, not as in flight.
	h := &hooked{Store: e.newStore(t)}
	s := submissions.NewWithStore[Withdrawal](h, submissions.WithLogger(quiet))
	var releaseErr error
	h.afterSettle = func() { releaseErr = s.Release(bg, "req-1") }
	r := &rail{}
	w := newWithdrawal("w-1")
	out, err := s.Submit(bg, "req-1", w, r.send)
	if err != nil {
		t.Fatalf("Submit: %v", err)
	}
	wantErr(t, releaseErr, submissions.ErrIdempotencyConflict)
	if errors.Is(releaseErr, submissions.ErrSubmissionInFlight) {
		t.Fatalf("Release of a key with an outcome: got %v; want only a conflict", releaseErr)
	}
	wantOutcome(t, s, "req-1", out, true)
	r.wantCalls(t, 1)
}

func releaseThrough(ctx context.Context, st submissions.Store[Withdrawal], key string) (submissions.Record[Withdrawal], bool, error) {
	rec, _, err := st.Lookup(ctx, key)
	if err != nil {
		return rec, false, err
	}
	return st.Release(ctx, key, rec.Token)
}
