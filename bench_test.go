package submissions_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"testing"

	"github.com/idemledger/submissions"
)

// Each benchmark family runs the ledger beside its floor, the least its design
// must do, in the same run; scripts/bench prints the ratios. The ledgers log
// to a discarding handler, as a service that keeps Info off would.

// batch is how many fresh submits one ledger takes before the benchmark starts
// a new one, in the ledger and its floor alike, so that memory stays bounded
// whatever b.N is.
const batch = 1 << 14

func freshInputs() ([]string, []withdrawal) {
	keys, reqs := make([]string, batch), make([]withdrawal, batch)
	for i := range batch {
		keys[i] = fmt.Sprintf("req-%08d", i)
		reqs[i] = newWithdrawal(fmt.Sprintf("w-%08d", i))
	}
	return keys, reqs
}

func echo(_ context.Context, w withdrawal) (withdrawal, error) { return w, nil }

func quietLedger() *submissions.Submissions[withdrawal] {
	return submissions.New[withdrawal](submissions.WithLogger(slog.New(slog.DiscardHandler)))
}

func BenchmarkSubmitFresh(b *testing.B) {
	keys, reqs := freshInputs()
	b.Run("ledger", func(b *testing.B) {
		b.ReportAllocs()
		runtime.GC() // start from the same heap as the floor
		var s *submissions.Submissions[withdrawal]
		i := 0
		for b.Loop() {
			if i == 0 {
				s = quietLedger()
			}
			if _, err := s.Submit(bg, keys[i], reqs[i], echo); err != nil {
				b.Fatal(err)
			}
			i = (i + 1) % batch
		}
	})
	b.Run("floor", func(b *testing.B) {
		b.ReportAllocs()
		runtime.GC()
		var f *floor
		i := 0
		for b.Loop() {
			if i == 0 {
				f = newFloor()
			}
			if _, err := f.submit(bg, keys[i], reqs[i], echo); err != nil {
				b.Fatal(err)
			}
			i = (i + 1) % batch
		}
	})
}

func BenchmarkSubmitReplay(b *testing.B) {
	w := newWithdrawal("w-1")
	b.Run("ledger", func(b *testing.B) {
		b.ReportAllocs()
		s := quietLedger()
		if _, err := s.Submit(bg, "req-1", w, echo); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if _, err := s.Submit(bg, "req-1", w, echo); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("floor", func(b *testing.B) {
		b.ReportAllocs()
		f := newFloor()
		if _, err := f.submit(bg, "req-1", w, echo); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if _, ok := f.replay("req-1"); !ok {
				b.Fatal("no outcome to replay")
			}
		}
	})
}

// floor is the least a fresh submit must do in this design: lock, check both
// maps, insert both, unlock; call send; lock, store the outcome, unlock. A
// replay's floor is a locked map lookup. It validates nothing and logs nothing.
type floor struct {
	mu      sync.Mutex
	records map[string]*floorRecord
	claims  map[string]string
}

type floorRecord struct {
	fp   submissions.Fingerprint
	out  withdrawal
	done bool
}

var errTaken = errors.New("taken")

func newFloor() *floor {
	return &floor{records: make(map[string]*floorRecord), claims: make(map[string]string)}
}

func (f *floor) submit(ctx context.Context, key string, req withdrawal,
	send func(context.Context, withdrawal) (withdrawal, error)) (withdrawal, error) {
	fp := req.Fingerprint()
	f.mu.Lock()
	_, known := f.records[key]
	_, claimed := f.claims[fp.WithdrawalID]
	if known || claimed {
		f.mu.Unlock()
		return withdrawal{}, errTaken
	}
	r := &floorRecord{fp: fp}
	f.records[key] = r
	f.claims[fp.WithdrawalID] = key
	f.mu.Unlock()
	out, err := send(ctx, req)
	if err != nil {
		return withdrawal{}, err
	}
	f.mu.Lock()
	r.out, r.done = out, true
	f.mu.Unlock()
	return out, nil
}

func (f *floor) replay(key string) (withdrawal, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.records[key]
	if !ok || !r.done {
		return withdrawal{}, false
	}
	return r.out, true
}
