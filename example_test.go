package submissions_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemledger/submissions"
)

// Withdrawal is a payout service's own withdrawal type. Sending it changes its
// status, never its fingerprint.
type Withdrawal struct {
	ID       string
	Amount   string
	Currency string
	Address  string
	Status   string
	TxID     string
}

func (w Withdrawal) Fingerprint() submissions.Fingerprint {
	return submissions.Fingerprint{WithdrawalID: w.ID, Amount: w.Amount, Currency: w.Currency, Destination: w.Address}
}

// broadcast is the rail: each call moves money.
func broadcast(_ context.Context, w Withdrawal) (Withdrawal, error) {
	fmt.Println("rail: sending", w.ID)
	w.Status, w.TxID = "sent", "0xfeed"
	return w, nil
}

// A user taps "withdraw" twice; the client retries under the same request key.
// The second tap replays the first outcome and the rail is called once.
func Example_doubleTap() {
	ctx := context.Background()
	ledger := submissions.New[Withdrawal]()
	w := Withdrawal{ID: "wd-1", Amount: "25.00", Currency: "USDC", Address: "0xabc", Status: "approved"}

	first, _ := ledger.Submit(ctx, "tap-7f3a", w, broadcast)
	again, _ := ledger.Submit(ctx, "tap-7f3a", w, broadcast)
	fmt.Println(first.Status, first.TxID)
	fmt.Println(again.Status, again.TxID)
	// Output:
	// rail: sending wd-1
	// sent 0xfeed
	// sent 0xfeed
}

// A second client (another device, an operator's redrive) submits the same
// withdrawal under a key of its own. It is refused and told who holds the
// withdrawal, so it can report what happened instead of paying twice.
func Example_secondClient() {
	ctx := context.Background()
	ledger := submissions.New[Withdrawal]()
	w := Withdrawal{ID: "wd-1", Amount: "25.00", Currency: "USDC", Address: "0xabc", Status: "approved"}
	_, _ = ledger.Submit(ctx, "phone-1", w, broadcast)

	_, err := ledger.Submit(ctx, "laptop-9", w, broadcast)
	fmt.Println(errors.Is(err, submissions.ErrIdempotencyConflict))
	var conflict *submissions.ConflictError
	if errors.As(err, &conflict) {
		outcome, _, _ := ledger.Outcome(ctx, conflict.Holder)
		fmt.Println("held by", conflict.Holder, "->", outcome.Status, outcome.TxID)
	}
	// Output:
	// rail: sending wd-1
	// true
	// held by phone-1 -> sent 0xfeed
}

// The rail times out: the money may or may not have moved, so the key stays
// claimed. Retries are refused until an operator looks at the rail, finds the
// transaction and resolves the key with it.
func Example_railTimeout() {
	ctx := context.Background()
	ledger := submissions.New[Withdrawal]()
	w := Withdrawal{ID: "wd-1", Amount: "25.00", Currency: "USDC", Address: "0xabc", Status: "approved"}
	timeout := func(context.Context, Withdrawal) (Withdrawal, error) {
		return Withdrawal{}, errors.New("rail: no answer in 30s")
	}

	_, err := ledger.Submit(ctx, "req-1", w, timeout)
	fmt.Println(err)
	_, err = ledger.Submit(ctx, "req-1", w, broadcast)
	fmt.Println(errors.Is(err, submissions.ErrSubmissionInFlight))

	found := w
	found.Status, found.TxID = "sent", "0xbeef" // what the operator saw on chain
	if err := ledger.Resolve(ctx, "req-1", found); err != nil {
		fmt.Println(err)
	}
	got, _ := ledger.Submit(ctx, "req-1", w, broadcast)
	fmt.Println(got.Status, got.TxID)
	// Output:
	// outcome unknown: request key req-1: rail: no answer in 30s
	// true
	// sent 0xbeef
}

// The rail refused the transaction before it left: the operator releases the
// key, and the withdrawal can be sent again, once.
func Example_release() {
	ctx := context.Background()
	ledger := submissions.New[Withdrawal]()
	w := Withdrawal{ID: "wd-1", Amount: "25.00", Currency: "USDC", Address: "0xabc", Status: "approved"}
	rejected := func(context.Context, Withdrawal) (Withdrawal, error) {
		return Withdrawal{}, errors.New("rail: connection reset")
	}
	_, _ = ledger.Submit(ctx, "req-1", w, rejected)

	holder, _, _ := ledger.ClaimedBy(ctx, "wd-1")
	fmt.Println("claimed by", holder)
	if err := ledger.Release(ctx, "req-1"); err != nil {
		fmt.Println(err)
	}
	_, claimed, _ := ledger.ClaimedBy(ctx, "wd-1")
	fmt.Println("claimed:", claimed)

	got, _ := ledger.Submit(ctx, "req-1", w, broadcast)
	fmt.Println(got.Status)
	fmt.Println(ledger.Release(ctx, "req-1"))
	// Output:
	// claimed by req-1
	// claimed: false
	// rail: sending wd-1
	// sent
	// idempotency conflict: request key req-1 has an outcome
}

// A caller tells what to do from an error's class, never from its text:
// refused (nothing sent), failed before sending, or money may have moved.
func Example_errorClasses() {
	ctx := context.Background()
	ledger := submissions.New[Withdrawal]()
	w := Withdrawal{ID: "wd-1", Amount: "25.00", Currency: "USDC", Address: "0xabc", Status: "approved"}
	wrongAnswer := func(_ context.Context, w Withdrawal) (Withdrawal, error) {
		w.Amount, w.TxID = "2500", "0xf00" // the rail answered for another amount
		return w, nil
	}
	for _, call := range []func() (Withdrawal, error){
		func() (Withdrawal, error) { return ledger.Submit(ctx, "req-1", w, wrongAnswer) },
		func() (Withdrawal, error) { return ledger.Submit(ctx, "req-1", w, broadcast) },
		func() (Withdrawal, error) { return ledger.Submit(ctx, "req-2", w, broadcast) },
	} {
		out, err := call()
		switch {
		case errors.Is(err, submissions.ErrOutcomeNotRecorded), errors.Is(err, submissions.ErrOutcomeUnknown):
			fmt.Println("money may have moved, escalate:", err, "| the rail said", out.TxID)
		case errors.Is(err, submissions.ErrStoreFailed):
			fmt.Println("nothing sent, retry later:", err)
		case err != nil:
			fmt.Println("refused, nothing sent:", err)
		}
	}
	// Output:
	// money may have moved, escalate: outcome not recorded: request key req-1: answer differs in Amount | the rail said 0xf00
	// refused, nothing sent: submission in flight: request key req-1: no answer of its send was recorded
	// refused, nothing sent: idempotency conflict: withdrawal wd-1 is claimed by request key req-1
}

// Two shops' clients mint the same request key for withdrawals that happen to
// share an id: each shop's view keeps its own, and neither replays the
// other's outcome.
func ExampleSubmissions_Tenant() {
	ctx := context.Background()
	ledger := submissions.New[Withdrawal]()
	w := Withdrawal{ID: "wd-1", Amount: "25.00", Currency: "USDC", Address: "0xabc", Status: "approved"}

	for _, shop := range []string{"shop-a", "shop-b"} {
		out, replayed, err := ledger.Tenant(shop).SubmitOrReplay(ctx, "tap-1", w, broadcast)
		fmt.Println(shop, out.Status, replayed, err)
	}
	out, replayed, err := ledger.Tenant("shop-a").SubmitOrReplay(ctx, "tap-1", w, broadcast)
	fmt.Println("shop-a again:", out.Status, replayed, err)
	// Output:
	// rail: sending wd-1
	// shop-a sent false <nil>
	// rail: sending wd-1
	// shop-b sent false <nil>
	// shop-a again: sent true <nil>
}

// The rail says it moved nothing (it was down before the transfer began): the
// send wraps ErrNotSent, the claim is released at once, and a retry under the
// same key sends.
func Example_notSent() {
	ctx := context.Background()
	ledger := submissions.New[Withdrawal]()
	w := Withdrawal{ID: "wd-1", Amount: "25.00", Currency: "USDC", Address: "0xabc", Status: "approved"}
	unavailable := func(context.Context, Withdrawal) (Withdrawal, error) {
		return Withdrawal{}, fmt.Errorf("rail: 503 before the transfer: %w", submissions.ErrNotSent)
	}

	_, err := ledger.Submit(ctx, "req-1", w, unavailable)
	fmt.Println(err)
	_, claimed, _ := ledger.ClaimedBy(ctx, "wd-1")
	fmt.Println("claimed:", claimed)
	got, err := ledger.Submit(ctx, "req-1", w, broadcast)
	fmt.Println(got.Status, err)
	// Output:
	// request key req-1: claim released: rail: 503 before the transfer: not sent
	// claimed: false
	// rail: sending wd-1
	// sent <nil>
}

// A rail that deduplicates on an idempotency key of its own gets RailKey: the
// same for every send of the withdrawal, whatever request key claimed it.
func ExampleRailKey() {
	ctx := context.Background()
	ledger := submissions.New[Withdrawal]()
	w := Withdrawal{ID: "wd-1", Amount: "25.00", Currency: "USDC", Address: "0xabc", Status: "approved"}
	_, _ = ledger.Submit(ctx, "req-1", w, func(ctx context.Context, w Withdrawal) (Withdrawal, error) {
		key, _ := submissions.RailKeyFromContext(ctx)
		fmt.Println("Idempotency-Key:", key)
		return broadcast(ctx, w)
	})
	fmt.Println(submissions.RailKey("", "wd-1"))
	fmt.Println(submissions.RailKey("shop-2", "wd-1"))
	// Output:
	// Idempotency-Key: 4d7f4bf7-5be5-8373-bf64-8e37d39bf4de
	// rail: sending wd-1
	// 4d7f4bf7-5be5-8373-bf64-8e37d39bf4de
	// eb4f8233-6252-8c74-bd0d-a6aeb1eb8bba
}
