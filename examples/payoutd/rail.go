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
)

// A fate is what the fake rail does with one send.
type fate int

const (
	answer fate = iota // moves the money and answers after the latency
	refuse             // moves nothing and answers with an error after the latency
	hang               // moves the money and never answers: the send's context ends it
)

// errRefused is the rail's answer to a send it refused: no money moved.
var errRefused = errors.New("rail: transfer refused")

// rail is a fake payment rail. It counts its own money movements, per
// withdrawal, whatever the caller hears back.
type rail struct {
	latency time.Duration
	decide  func(Withdrawal) fate // what to do with each send; set before the first

	mu    sync.Mutex     // protects sends
	sends map[string]int // withdrawal id -> money movements
}

// newRail returns a rail that answers after latency, refuses a share
// failShare of the sends and leaves a share timeoutShare of them without an
// answer, at random.
func newRail(latency time.Duration, failShare, timeoutShare float64) *rail {
	return &rail{latency: latency, decide: func(Withdrawal) fate {
		switch x := mathrand.Float64(); {
		case x < failShare:
			return refuse
		case x < failShare+timeoutShare:
			return hang
		}
		return answer
	}}
}

// Send transfers w's amount to its destination and returns w as sent, with
// the rail's reference in Tx. An error means the caller does not know
// whether money moved: a refusal moved none, a send that ran out of time did.
func (r *rail) Send(ctx context.Context, w Withdrawal) (Withdrawal, error) {
	f := r.decide(w)
	if f != refuse {
		r.mu.Lock()
		if r.sends == nil {
			r.sends = make(map[string]int)
		}
		r.sends[w.ID]++
		r.mu.Unlock()
	}
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
	if f == refuse {
		return Withdrawal{}, errRefused
	}
	w.State, w.Tx = stateSent, "tx_"+randomHex(12)
	return w, nil
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
