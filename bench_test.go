package submissions_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/idemledger/submissions"
	"github.com/idemledger/submissions/driver"
	"github.com/idemledger/submissions/internal/engine"
)

// Each benchmark family runs the ledger and its floor, the least its design
// must do, in turns of one chunk each inside the same benchmark, so that the
// drift of a shared machine falls on both alike, and reports both times, their
// ratio and the ledger's allocations per call. scripts/bench prints the
// ratios. The ledgers log to a discarding handler, as a service that keeps
// Info off would.

// batch is how many fresh submits one ledger takes before the benchmark starts
// a new one, in the ledger and its floor alike, so that memory stays bounded
// whatever b.N is: each grows to that many records.
const (
	batch = 300_000
	chunk = 1 << 8 // calls timed together, on one side, in one turn
)

// benchInput returns the i-th request key and withdrawal, shaped like a
// payout service's: UUID keys and ids, a 42-character address.
func benchInput(i int) (string, withdrawal) {
	key := fmt.Sprintf("5f0c2a8e-%04x-4b1d-9e3a-%012x", i>>16, i)
	w := withdrawal{
		ID:       fmt.Sprintf("0b7e91d4-%04x-4c2f-8a6b-%012x", i>>16, i),
		Amount:   "25.00",
		Currency: "USDC",
		Dest:     "0x9f2c4e1b7a3d5c8e0f6a2b4d1c3e5f7a9b8c6d4e",
		State:    "approved",
	}
	return key, w
}

func echo(_ context.Context, w withdrawal) (withdrawal, error) { return w, nil }

func quietLedger() *submissions.Submissions[withdrawal] {
	return submissions.New[withdrawal](submissions.WithLogger(slog.New(slog.DiscardHandler)))
}

// paired runs ledger(n) and then floor(n) for the next chunk of call numbers
// n, in turns, one turn an iteration of b.Loop, and reports the time per call
// of both, their ratio, and the ledger's allocations per call, counted by
// testing.AllocsPerRun after the turns (counting before them slows what
// follows on some machines).
func paired(b *testing.B, ledger, floor func(n int)) {
	var ledgerTime, floorTime time.Duration
	n := 0
	for b.Loop() {
		start := time.Now()
		for i := range chunk {
			ledger(n + i)
		}
		mid := time.Now()
		for i := range chunk {
			floor(n + i)
		}
		ledgerTime += mid.Sub(start)
		floorTime += time.Since(mid)
		n += chunk
	}
	b.ReportMetric(0, "ns/op") // a turn is a chunk on each side; the per-call figures follow
	b.ReportMetric(float64(ledgerTime.Nanoseconds())/float64(n), "ledger-ns/call")
	b.ReportMetric(float64(floorTime.Nanoseconds())/float64(n), "floor-ns/call")
	b.ReportMetric(float64(ledgerTime)/float64(floorTime), "ratio")
	b.ReportMetric(testing.AllocsPerRun(chunk, func() { ledger(n); n++ }), "ledger-allocs/call")
}

func BenchmarkSubmitFresh(b *testing.B) {
	pairedFresh(b, ledgerSide(quietLedger), floorSide)
}

// A side makes a new ledger, or floor, and returns its fresh submit.
type side func() func(key string, req withdrawal) error

// pairedFresh runs paired with fresh submits on each side, each on a new
// ledger, or floor, every batch calls.
func pairedFresh(b *testing.B, ledger, floor side) {
	keys := make([]string, batch)
	reqs := make([]withdrawal, batch)
	for i := range batch {
		keys[i], reqs[i] = benchInput(i)
	}
	var l, f func(string, withdrawal) error
	run := func(s side, submit *func(string, withdrawal) error) func(n int) {
		return func(n int) {
			i := n % batch
			if i == 0 {
				*submit = s()
			}
			if err := (*submit)(keys[i], reqs[i]); err != nil {
				b.Fatal(err)
			}
		}
	}
	paired(b, run(ledger, &l), run(floor, &f))
}

// ledgerSide is the side of ledgers that newLedger makes.
func ledgerSide(newLedger func() *submissions.Submissions[withdrawal]) side {
	return func() func(string, withdrawal) error {
		s := newLedger()
		return func(key string, req withdrawal) error {
			_, err := s.Submit(bg, key, req, echo)
			return err
		}
	}
}

// floorSide is the side of the floor.
func floorSide() func(string, withdrawal) error {
	f := newFloor()
	return func(key string, req withdrawal) error {
		_, err := f.submit(bg, key, req, echo)
		return err
	}
}

// BenchmarkSubmitFreshFeatures is the cost of the features a fresh submit
// carries besides the floor's work (see featured), beside the floor.
func BenchmarkSubmitFreshFeatures(b *testing.B) {
	pairedFresh(b, func() func(string, withdrawal) error {
		s := newFeatured()
		return func(key string, req withdrawal) error {
			_, err := s.submit(bg, key, req, echo)
			return err
		}
	}, floorSide)
}

// BenchmarkSubmitFreshChecks is the cost of the checks a fresh submit makes
// besides the floor's work, done the least way, beside the floor: the key
// (trimmed, not empty, not too long, UTF-8 without NUL), the request's
// fingerprint in canonical form, and the answer's text (valid UTF-8, so
// that every store gives it back as it is).
func BenchmarkSubmitFreshChecks(b *testing.B) {
	pairedFresh(b, func() func(string, withdrawal) error {
		s := newFloor()
		return func(key string, req withdrawal) error {
			if _, err := engine.ValidateKey(key); err != nil {
				return err
			}
			if _, err := req.Fingerprint().Canonical(); err != nil {
				return err
			}
			_, err := s.submit(bg, key, req, func(ctx context.Context, w withdrawal) (withdrawal, error) {
				out, err := echo(ctx, w)
				for _, text := range [...]string{out.ID, out.Amount, out.Currency, out.Dest, out.State, out.TxHash} {
					if !utf8.ValidString(text) {
						return out, errors.New("not UTF-8")
					}
				}
				return out, err
			})
			return err
		}
	}, floorSide)
}

// BenchmarkSubmitReplayFeatures is the cost of the check a replay makes
// besides the floor's lookup, done the least way, beside the floor: the
// retry's withdrawal, read through its Fingerprint method called from
// generic code as the ledger calls it, compared with the record's, kept
// canonical.
func BenchmarkSubmitReplayFeatures(b *testing.B) {
	key, w := benchInput(1)
	f := newFloor()
	_, err := f.submit(bg, key, w, echo)
	require.NoError(b, err)
	canonical, err := w.Fingerprint().Canonical()
	require.NoError(b, err)
	f.records[key].fp = canonical
	paired(b, func(int) {
		if _, ok := replayChecked(f, key, w); !ok {
			b.Fatal("no outcome to replay")
		}
	}, func(int) {
		if _, ok := f.replay(key); !ok {
			b.Fatal("no outcome to replay")
		}
	})
}

// replayChecked is f.replay of key for req, whose withdrawal must be the
// record's.
func replayChecked[R submissions.Fingerprinter](f *floor, key string, req R) (withdrawal, bool) {
	f.mu.Lock()
	r, ok := f.records[key]
	f.mu.Unlock()
	if !ok || !r.done || !sameWithdrawal(req, &r.fp) { // a done record does not change
		return withdrawal{}, false
	}
	return r.out, true
}

// sameWithdrawal reports whether req is the withdrawal of want, a canonical
// fingerprint, as the ledger compares them.
func sameWithdrawal[R submissions.Fingerprinter](req R, want *submissions.Fingerprint) bool {
	got := req.Fingerprint()
	return engine.Differing(want, &got) == 0
}

// bareStore is the memory store as a Store and nothing more: neither a
// driver.Tracker nor a driver.Replayer, so that the ledger keeps the marks
// of its sends itself and checks every replay in full, as it does on any
// other store.
type bareStore struct{ driver.Store[withdrawal] }

func bareLedger() *submissions.Submissions[withdrawal] {
	return submissions.NewWithStore[withdrawal](bareStore{submissions.NewMemoryStore[withdrawal]()},
		submissions.WithLogger(slog.New(slog.DiscardHandler)))
}

// BenchmarkSubmitFreshBareStore is what driver.Tracker saves: fresh
// submits on the memory store (ledger) beside the same on it as a bare
// Store (floor).
func BenchmarkSubmitFreshBareStore(b *testing.B) {
	pairedFresh(b, ledgerSide(quietLedger), ledgerSide(bareLedger))
}

// BenchmarkSubmitReplayBareStore is what driver.Replayer saves: a replay on
// the memory store (ledger) beside the same on it as a bare Store (floor).
func BenchmarkSubmitReplayBareStore(b *testing.B) {
	key, w := benchInput(1)
	s, bare := quietLedger(), bareLedger()
	for _, l := range []*submissions.Submissions[withdrawal]{s, bare} {
		_, err := l.Submit(bg, key, w, echo)
		require.NoError(b, err)
	}
	paired(b, func(int) {
		if _, err := s.Submit(bg, key, w, echo); err != nil {
			b.Fatal(err)
		}
	}, func(int) {
		if _, err := bare.Submit(bg, key, w, echo); err != nil {
			b.Fatal(err)
		}
	})
}

func BenchmarkSubmitReplay(b *testing.B) {
	key, w := benchInput(1)
	s, f := quietLedger(), newFloor()
	_, err := s.Submit(bg, key, w, echo)
	require.NoError(b, err)
	_, err = f.submit(bg, key, w, echo)
	require.NoError(b, err)
	// Inside the timed turns the checks are plain ifs, cheap when they pass,
	// so that both sides are timed doing only their own work.
	paired(b, func(int) {
		if _, err := s.Submit(bg, key, w, echo); err != nil {
			b.Fatal(err)
		}
	}, func(int) {
		if _, ok := f.replay(key); !ok {
			b.Fatal("no outcome to replay")
		}
	})
}

// floor is the least a fresh submit must do, and nothing more: lock, look
// up the key and the withdrawal's claim, insert both, unlock; call send;
// lock, store the outcome and a done flag, unlock. A replay's floor is a
// locked map lookup. It validates nothing, logs nothing, keeps no time and
// gives send its caller's context as it is. What the ledger does beyond it
// is measured on its own: see featured and BenchmarkSubmitFreshFeatures.
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

// featured is the floor with the features whose cost a fresh submit of the
// ledger carries besides the floor's work, each the least it needs: the
// claim's and the outcome's times (by which the keys in flight are listed
// and the done ones pruned), the done records in order (so that a prune
// does not scan them all), and send's context carrying the withdrawal (by
// which send finds its rail key: one allocation).
type featured struct {
	mu      sync.Mutex
	records map[string]*featuredRecord
	claims  map[string]string
	settled []*featuredRecord
}

type featuredRecord struct {
	fp   submissions.Fingerprint
	out  withdrawal
	at   int64 // when claimed, then when done
	done bool
}

// floorCtx is the context featured's send runs in: its caller's, and the
// withdrawal being sent.
type floorCtx struct {
	context.Context
	withdrawalID string
}

func newFeatured() *featured {
	return &featured{records: make(map[string]*featuredRecord), claims: make(map[string]string)}
}

func (f *featured) submit(ctx context.Context, key string, req withdrawal,
	send func(context.Context, withdrawal) (withdrawal, error)) (withdrawal, error) {
	fp := req.Fingerprint()
	f.mu.Lock()
	_, known := f.records[key]
	_, claimed := f.claims[fp.WithdrawalID]
	if known || claimed {
		f.mu.Unlock()
		return withdrawal{}, errTaken
	}
	r := &featuredRecord{fp: fp, at: time.Now().UnixNano()}
	f.records[key] = r
	f.claims[fp.WithdrawalID] = key
	f.mu.Unlock()
	out, err := send(&floorCtx{ctx, fp.WithdrawalID}, req)
	if err != nil {
		return withdrawal{}, err
	}
	f.mu.Lock()
	r.out, r.done, r.at = out, true, time.Now().UnixNano()
	f.settled = append(f.settled, r)
	f.mu.Unlock()
	return out, nil
}

// BenchmarkTenantReplay is a replay through a tenant's view made for the
// call, as a service makes one per request, beside its peer: the same replay
// in the default tenant of the same ledger.
func BenchmarkTenantReplay(b *testing.B) {
	key, w := benchInput(1)
	s := quietLedger()
	_, err := s.Submit(bg, key, w, echo)
	require.NoError(b, err)
	_, err = s.Tenant("acme").Submit(bg, key, w, echo)
	require.NoError(b, err)
	paired(b, func(int) {
		if _, err := s.Tenant("acme").Submit(bg, key, w, echo); err != nil {
			b.Fatal(err)
		}
	}, func(int) {
		if _, err := s.Submit(bg, key, w, echo); err != nil {
			b.Fatal(err)
		}
	})
}

// BenchmarkMemoryPerRecord is the heap a record keeps, at a million fresh
// submits, in the ledger and its floor: the growth of the live heap from an
// empty ledger to a million settled records. The request keys and
// withdrawals are made before, as a service has them already: their text
// is not counted. Run it with -benchtime 1x: each iteration fills both
// anew.
func BenchmarkMemoryPerRecord(b *testing.B) {
	const records = 1_000_000
	keys := make([]string, records)
	reqs := make([]withdrawal, records)
	for i := range records {
		keys[i], reqs[i] = benchInput(i)
	}
	live := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	var ledger, floor float64
	for b.Loop() {
		before := live()
		s := quietLedger()
		for i := range records {
			if _, err := s.Submit(bg, keys[i], reqs[i], echo); err != nil {
				b.Fatal(err)
			}
		}
		ledger = float64(live()-before) / records
		runtime.KeepAlive(s)
		before = live()
		f := newFloor()
		for i := range records {
			if _, err := f.submit(bg, keys[i], reqs[i], echo); err != nil {
				b.Fatal(err)
			}
		}
		floor = float64(live()-before) / records
		runtime.KeepAlive(f)
	}
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(ledger, "ledger-B/record")
	b.ReportMetric(floor, "floor-B/record")
	b.ReportMetric(ledger/floor, "ratio")
}
