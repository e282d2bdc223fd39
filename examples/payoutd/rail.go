package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mathrand "math/rand/v2"
	"sync"
	"time"

	"github.com/idemledger/submissions"
)

// A fate is what the fake rail does with one send it has not seen before.
type fate int

const (
	answer      fate = iota // moves the money and answers after the latency
	decline                 // moves nothing and answers after the latency: the transfer failed, an outcome it keeps
	unavailable             // moves nothing and says so after the latency: not sent, a retry may send
	fail                    // moves nothing and answers with an error that does not say so
	hang                    // moves the money and never answers: the send's context ends it
)

// The rail's errors: errUnavailable wraps submissions.ErrNotSent.
var (
	errUnavailable = fmt.Errorf("rail: unavailable, transfer not started: %w", submissions.ErrNotSent)
	errFailed      = errors.New("rail: internal error")
)

// declineReason is the failure reason of a declined transfer.
const declineReason = "declined by the rail"

// rail is a fake payment rail. Like most payment service providers it
// deduplicates on an idempotency key of its own, the ledger's rail key: a
// send with a key it has taken a transfer under gets that transfer back,
// answered or declined, and moves no money. It counts its own money
// movements, per withdrawal, whatever the caller hears back.
type rail struct {
	latency time.Duration
	decide  func(Withdrawal) fate // what to do with each new send; set before the first

	mu        sync.Mutex            // protects the fields below
	sends     map[string]int        // withdrawal id -> money movements
	transfers map[string]Withdrawal // rail key -> the transfer taken under it
}

// newRail returns a rail that answers after latency, declines a share
// declineShare of the new sends, is unavailable for a share
// unavailableShare, fails a share failShare and leaves a share timeoutShare
// without an answer, at random.
func newRail(latency time.Duration, declineShare, unavailableShare, failShare, timeoutShare float64) *rail {
	return &rail{latency: latency, decide: func(Withdrawal) fate {
		x := mathrand.Float64()
		for _, f := range []struct {
			share float64
			fate  fate
		}{{declineShare, decline}, {unavailableShare, unavailable}, {failShare, fail}, {timeoutShare, hang}} {
			if x < f.share {
				return f.fate
			}
			x -= f.share
		}
		return answer
	}}
}

// Send transfers w's amount to its destination under the rail key in ctx
// and returns w as sent, with the rail's reference in Tx, or as failed, with
// a failure reason, when the rail declines it. A key the rail has taken a
// transfer under gets that transfer again. An error wrapping
// submissions.ErrNotSent means nothing moved; any other error means the
// caller does not know whether money moved: a failure moved none, a send
// that ran out of time did.
func (r *rail) Send(ctx context.Context, w Withdrawal) (Withdrawal, error) {
	key, _ := submissions.RailKeyFromContext(ctx) // "": no deduplication
	r.mu.Lock()
	out, seen := r.transfers[key]
	f := answer
	if !seen {
		f = r.decide(w)
		out = w
		switch f {
		case answer, hang:
			out.State, out.Tx = stateSent, "tx_"+randomHex(12)
			if r.sends == nil {
				r.sends = make(map[string]int)
			}
			r.sends[w.ID]++
		case decline:
			out.State, out.FailureReason = stateFailed, declineReason
		}
		if key != "" && f != unavailable && f != fail { // a transfer taken: the key's answer from now on
			if r.transfers == nil {
				r.transfers = make(map[string]Withdrawal)
			}
			r.transfers[key] = out
		}
	}
	r.mu.Unlock()

	var wait <-chan time.Time // nil, for a send that never answers
	if f != hang {
		t := time.NewTimer(r.latency)
		defer t.Stop()
		wait = t.C
	}
	select {
	case <-wait:
	case <-ctx.Done():
		return Withdrawal{}, fmt.Errorf("rail: no answer: %w", ctx.Err())
	}
	switch f {
	case unavailable:
		return Withdrawal{}, errUnavailable
	case fail:
		return Withdrawal{}, errFailed
	}
	return out, nil
}

// Sends returns the rail's money movements per withdrawal id.
func (r *rail) Sends() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	sends := make(map[string]int, len(r.sends))
	for id, n := range r.sends {
		sends[id] = n
	}
	return sends
}

// randomHex returns n random bytes in hex.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails
	return hex.EncodeToString(b)
}
