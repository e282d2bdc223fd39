package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mathrand "math/rand/v2"
	"os"
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
// movements, per withdrawal, whatever the caller hears back. With a log
// (openLog) its record outlives the process, as a real rail's does.
type rail struct {
	latency time.Duration
	decide  func(Withdrawal) fate // what to do with each new send; set before the first
	fault   fault                 // faultRailMoved kills the process once the money moved, before the rail answers

	mu        sync.Mutex            // protects the fields below
	sends     map[string]int        // withdrawal id -> money movements
	transfers map[string]Withdrawal // rail key -> the transfer taken under it
	log       *os.File              // the rail's record, appended; nil for none
}

// The results of a send, as the rail's log records them.
const (
	railMoved       = "moved"       // the money moved: the transfer, sent, with its tx (answered or not)
	railDeclined    = "declined"    // nothing moved: the transfer, failed, with its reason
	railRepeat      = "repeat"      // a send under a rail key the rail has a transfer under: that transfer, nothing moved
	railUnavailable = "unavailable" // nothing moved, and the rail said so
	railFailed      = "failed"      // nothing moved, and the rail did not say so
)

// A railEntry is one send, as the rail's log keeps it: a JSON object a line.
type railEntry struct {
	RailKey string `json:"rail_key"`
	Result  string `json:"result"`
	// Withdrawal is the transfer as the rail keeps it, for moved, declined
	// and repeat: an operator's outcome; the withdrawal sent, for the others.
	Withdrawal Withdrawal `json:"withdrawal"`
	At         time.Time  `json:"at"`
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

// openLog makes path the rail's record: it reads the transfers recorded
// there (by this rail in an earlier process) back, and from then on appends
// each send to it, synced to disk before the rail answers or moves on. A
// line cut short by a crash while it was written is dropped: the rail never
// took that transfer. One process at a time may use a log.
func (r *rail) openLog(path string) error {
	data, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("rail log: %w", err)
	}
	whole := bytes.LastIndexByte(data, '\n') + 1 // what ends in a line break
	r.mu.Lock()
	defer r.mu.Unlock()
	for n, line := range bytes.Split(data[:whole], []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var e railEntry
		if err := json.Unmarshal(line, &e); err != nil {
			return fmt.Errorf("rail log %s: line %d: %w", path, n+1, err)
		}
		r.take(e)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("rail log: %w", err)
	}
	if err := f.Truncate(int64(whole)); err != nil { // a torn last line
		f.Close()
		return fmt.Errorf("rail log: %w", err)
	}
	if _, err := f.Seek(0, io.SeekEnd); err != nil {
		f.Close()
		return fmt.Errorf("rail log: %w", err)
	}
	r.log = f
	return nil
}

// closeLog closes the rail's log, if it has one.
func (r *rail) closeLog() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.log == nil {
		return nil
	}
	err := r.log.Close()
	r.log = nil
	return err
}

// record appends e to the log, if the rail has one, and syncs it. r.mu is
// held.
func (r *rail) record(e railEntry) error {
	if r.log == nil {
		return nil
	}
	line, err := json.Marshal(e)
	if err != nil {
		return err
	}
	if _, err := r.log.Write(append(line, '\n')); err != nil {
		return err
	}
	return r.log.Sync()
}

// take keeps what e, a send the rail recorded, changed: a transfer taken
// under its rail key, and money moved. r.mu is held.
func (r *rail) take(e railEntry) {
	if e.Result != railMoved && e.Result != railDeclined {
		return
	}
	if e.Result == railMoved {
		if r.sends == nil {
			r.sends = make(map[string]int)
		}
		r.sends[e.Withdrawal.ID]++
	}
	if e.RailKey != "" { // a transfer taken: the key's answer from now on
		if r.transfers == nil {
			r.transfers = make(map[string]Withdrawal)
		}
		r.transfers[e.RailKey] = e.Withdrawal
	}
}

// Send transfers w's amount to its destination under the rail key in ctx
// and returns w as sent, with the rail's reference in Tx, or as failed, with
// a failure reason, when the rail declines it. A key the rail has taken a
// transfer under gets that transfer again. An error wrapping
// submissions.ErrNotSent means nothing moved; any other error means the
// caller does not know whether money moved: a failure moved none, a send
// that ran out of time did. With a log, the send is recorded there before
// anything else happens; a send the rail cannot record moves nothing, and
// says so.
func (r *rail) Send(ctx context.Context, w Withdrawal) (Withdrawal, error) {
	key, _ := submissions.RailKeyFromContext(ctx) // "": no deduplication
	r.mu.Lock()
	out, seen := r.transfers[key]
	f := answer
	e := railEntry{RailKey: key, Result: railRepeat, Withdrawal: out, At: time.Now().UTC()}
	if !seen {
		f = r.decide(w)
		out = w
		switch f {
		case answer, hang:
			out.State, out.Tx = stateSent, "tx_"+randomHex(12)
			e.Result = railMoved
		case decline:
			out.State, out.FailureReason = stateFailed, declineReason
			e.Result = railDeclined
		case unavailable:
			e.Result = railUnavailable
		case fail:
			e.Result = railFailed
		}
		e.Withdrawal = out
	}
	if err := r.record(e); err != nil {
		r.mu.Unlock()
		return Withdrawal{}, fmt.Errorf("rail: the transfer could not be recorded, and was not started (%v): %w", err, submissions.ErrNotSent)
	}
	if !seen {
		r.take(e)
	}
	r.mu.Unlock()
	if e.Result == railMoved {
		r.fault.at(faultRailMoved)
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
