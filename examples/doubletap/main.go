// Command doubletap is a simulated payout service in front of a fake rail. It
// fires a double tap, eight concurrent taps, a second client under a new key,
// and a rail timeout closed by an operator's Resolve, then prints what each
// caller got and how many times the rail moved money.
//
//	go run ./examples/doubletap
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/idemledger/submissions"
)

// Withdrawal is the service's own withdrawal type.
type Withdrawal struct {
	ID       string
	Amount   string
	Currency string
	Address  string
	Status   string
	TxID     string
}

// Fingerprint is what the ledger compares; sending changes Status and TxID only.
func (w Withdrawal) Fingerprint() submissions.Fingerprint {
	return submissions.Fingerprint{WithdrawalID: w.ID, Amount: w.Amount, Currency: w.Currency, Destination: w.Address}
}

// Rail is a fake payment rail. Every call to Send moves money; a slow rail
// may move it and still answer too late.
type Rail struct {
	Latency time.Duration

	mu    sync.Mutex          // protects sends
	sends map[string][]string // withdrawal id -> transaction ids
}

// Send moves the money, then takes Latency to answer. If ctx ends first, the
// transfer has happened but the caller only sees ctx's error.
func (r *Rail) Send(ctx context.Context, w Withdrawal) (Withdrawal, error) {
	r.mu.Lock()
	if r.sends == nil {
		r.sends = make(map[string][]string)
	}
	tx := fmt.Sprintf("0x%s-%d", w.ID, len(r.sends[w.ID])+1)
	r.sends[w.ID] = append(r.sends[w.ID], tx)
	r.mu.Unlock()

	select {
	case <-time.After(r.Latency):
		w.Status, w.TxID = "sent", tx
		return w, nil
	case <-ctx.Done():
		return Withdrawal{}, fmt.Errorf("rail: no answer: %w", ctx.Err())
	}
}

// Lookup is what an operator does on the rail's explorer: the transactions
// sent for a withdrawal.
func (r *Rail) Lookup(id string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.sends[id]...)
}

// Calls returns the number of transfers per withdrawal id.
func (r *Rail) Calls() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	calls := make(map[string]int, len(r.sends))
	for id, txs := range r.sends {
		calls[id] = len(txs)
	}
	return calls
}

func main() {
	if _, err := run(context.Background(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "doubletap:", err)
		os.Exit(1)
	}
}

// run plays the scenes and returns the rail's transfer counts.
func run(ctx context.Context, out io.Writer) (map[string]int, error) {
	rail := &Rail{Latency: 20 * time.Millisecond}
	// The ledger's warnings go into the report, where they happen.
	logs := slog.NewTextHandler(out, &slog.HandlerOptions{
		Level: slog.LevelWarn,
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	})
	ledger := submissions.New[Withdrawal](submissions.WithLogger(slog.New(logs)))
	wd := func(id, amount string) Withdrawal {
		return Withdrawal{ID: id, Amount: amount, Currency: "USDC", Address: "0x9f2c", Status: "approved"}
	}

	fmt.Fprintln(out, "1. Double tap: two requests under key tap-1 for wd-1, at once")
	for _, got := range taps(ctx, ledger, rail, 2, func(int) string { return "tap-1" }, wd("wd-1", "25.00")) {
		fmt.Fprintln(out, "   ", got)
	}
	got, err := ledger.Submit(ctx, "tap-1", wd("wd-1", "25.0"), rail.Send)
	fmt.Fprintln(out, "    the client's retry, amount written 25.0:", describe(got, err))

	fmt.Fprintln(out, "2. Eight taps under key tap-2 for wd-2, at once")
	for _, got := range summarize(taps(ctx, ledger, rail, 8, func(int) string { return "tap-2" }, wd("wd-2", "100"))) {
		fmt.Fprintln(out, "   ", got)
	}

	fmt.Fprintln(out, "3. A second client submits wd-1 under its own key laptop-1")
	_, err = ledger.Submit(ctx, "laptop-1", wd("wd-1", "25.00"), rail.Send)
	var conflict *submissions.ConflictError
	if !errors.As(err, &conflict) {
		return nil, fmt.Errorf("second client: got %v; want a *ConflictError", err)
	}
	fmt.Fprintln(out, "    refused:", err)
	held, _, _ := ledger.Outcome(ctx, conflict.Holder)
	fmt.Fprintf(out, "    it looks up %s instead: %s %s\n", conflict.Holder, held.Status, held.TxID)

	fmt.Fprintln(out, "4. The rail is slow for wd-3: the caller gives up after 5ms")
	short, cancel := context.WithTimeout(ctx, 5*time.Millisecond)
	_, err = ledger.Submit(short, "req-3", wd("wd-3", "7.5"), rail.Send)
	cancel()
	fmt.Fprintln(out, "    caller:", err)
	_, err = ledger.Submit(ctx, "req-3", wd("wd-3", "7.5"), rail.Send)
	fmt.Fprintln(out, "    its retry:", err)
	_, err = ledger.Submit(ctx, "redrive-3", wd("wd-3", "7.5"), rail.Send)
	fmt.Fprintln(out, "    an operator's redrive under a new key:", err)
	txs := rail.Lookup("wd-3")
	if len(txs) != 1 {
		return nil, fmt.Errorf("rail shows %d transfers for wd-3; want 1", len(txs))
	}
	found := wd("wd-3", "7.5")
	found.Status, found.TxID = "sent", txs[0]
	if err := ledger.Resolve(ctx, "req-3", found); err != nil {
		return nil, fmt.Errorf("resolve: %w", err)
	}
	fmt.Fprintln(out, "    the operator finds", txs[0], "on the rail and resolves req-3 with it")
	got, err = ledger.Submit(ctx, "req-3", wd("wd-3", "7.50"), rail.Send)
	fmt.Fprintln(out, "    the retry now:", describe(got, err))

	calls := rail.Calls()
	fmt.Fprintln(out, "Rail transfers per withdrawal:")
	ids := make([]string, 0, len(calls))
	for id := range calls {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		fmt.Fprintf(out, "    %s: %d\n", id, calls[id])
	}
	return calls, nil
}

// taps submits w under key(i) for i in [0, n) from n goroutines released
// together, and describes what each caller got.
func taps(ctx context.Context, ledger *submissions.Submissions[Withdrawal], rail *Rail, n int, key func(int) string, w Withdrawal) []string {
	got := make([]string, n)
	start := make(chan struct{})
	var ready, done sync.WaitGroup
	for i := range n {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			ready.Done()
			<-start
			out, err := ledger.Submit(ctx, key(i), w, rail.Send)
			got[i] = fmt.Sprintf("caller %d: %s", i+1, describe(out, err))
		}()
	}
	ready.Wait()
	close(start)
	done.Wait()
	return got
}

// describe says in a few words what a caller got.
func describe(out Withdrawal, err error) string {
	switch {
	case errors.Is(err, submissions.ErrSubmissionInFlight):
		return "in flight, try again later"
	case err != nil:
		return "error: " + err.Error()
	}
	return out.Status + " " + out.TxID
}

// summarize counts identical descriptions, dropping the caller numbers.
func summarize(lines []string) []string {
	counts := map[string]int{}
	for _, l := range lines {
		_, what, _ := strings.Cut(l, ": ")
		counts[what]++
	}
	var out []string
	for what, n := range counts {
		out = append(out, fmt.Sprintf("%d caller(s): %s", n, what))
	}
	sort.Strings(out)
	return out
}
