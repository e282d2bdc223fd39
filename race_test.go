package submissions_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/idemledger/submissions"
)

// TestMain checks that no test of the package leaves a goroutine behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// The concurrency tests of every store are storetest's; these are the two
// that matter most, on their own, for the ledgers of this package: many
// taps of one key, and many keys for one withdrawal, released together
// while the rail is slow, under -race, with the rail's sends counted.

const racers = 64

// race runs call(i) for i in [0, racers) on goroutines released together,
// and returns their errors. The rail's first send waits for release, which
// closes once all but one of the calls have returned; any later send
// returns at once, so that a ledger that lets two callers send fails the
// count rather than hanging. A call that has not returned 30 seconds after
// the others fails t.
func race(t *testing.T, call func(i int, rail func(context.Context, withdrawal) (withdrawal, error)) error) (errs []error, sends int64) {
	t.Helper()
	var (
		count   atomic.Int64
		ready   sync.WaitGroup
		start   = make(chan struct{})
		release = make(chan struct{})
		results = make(chan error, racers)
		open    = sync.OnceFunc(func() { close(release) })
	)
	rail := func(_ context.Context, w withdrawal) (withdrawal, error) {
		if count.Add(1) == 1 {
			<-release
		}
		w.State, w.TxHash = "sent", "0xtx"
		return w, nil
	}
	ready.Add(racers)
	for i := range racers {
		go func() {
			ready.Done()
			<-start
			results <- call(i, rail)
		}()
	}
	ready.Wait()
	close(start)
	for len(errs) < racers {
		select {
		case err := <-results:
			errs = append(errs, err)
		case <-time.After(30 * time.Second):
			open() // let the calls end, for goleak
			require.FailNow(t, "calls still running after 30s", "%d of %d returned, %d sends", len(errs), racers, count.Load())
		}
		if len(errs) == racers-1 {
			open()
		}
	}
	return errs, count.Load()
}

// TestRaceCountsASecondSend: race returns, with both sends counted, when
// two of its calls send, rather than waiting for a release that the first
// send holds.
func TestRaceCountsASecondSend(t *testing.T) {
	var n atomic.Int64
	errs, sends := race(t, func(_ int, rail func(context.Context, withdrawal) (withdrawal, error)) error {
		if n.Add(1) <= 2 {
			_, err := rail(bg, newWithdrawal("w-1"))
			return err
		}
		return nil
	})
	assert.Len(t, errs, racers)
	assert.Equal(t, int64(2), sends)
}

func TestConcurrentTapsOfOneKeySendOnce(t *testing.T) {
	for name, s := range ledgers[withdrawal]() {
		t.Run(name, func(t *testing.T) {
			w := newWithdrawal("w-1")
			errs, sends := race(t, func(_ int, rail func(context.Context, withdrawal) (withdrawal, error)) error {
				_, err := s.Submit(bg, "tap-1", w, rail)
				return err
			})
			require.Equal(t, int64(1), sends, "rail sends")
			inFlight := 0
			for _, err := range errs {
				if err != nil {
					require.ErrorIs(t, err, submissions.ErrSubmissionInFlight)
					inFlight++
				}
			}
			assert.Equal(t, racers-1, inFlight, "taps refused while the first one sends")
		})
	}
}

func TestConcurrentKeysForOneWithdrawalSendOnce(t *testing.T) {
	for name, s := range ledgers[withdrawal]() {
		t.Run(name, func(t *testing.T) {
			w := newWithdrawal("w-1")
			errs, sends := race(t, func(i int, rail func(context.Context, withdrawal) (withdrawal, error)) error {
				_, err := s.Submit(bg, fmt.Sprint("client-", i), w, rail)
				return err
			})
			require.Equal(t, int64(1), sends, "rail sends")
			holder, ok, err := s.ClaimedBy(bg, "w-1")
			require.NoError(t, err)
			require.True(t, ok)
			wins := 0
			for _, err := range errs {
				if err == nil {
					wins++
					continue
				}
				var conflict *submissions.ConflictError
				require.ErrorAs(t, err, &conflict)
				assert.Equal(t, holder, conflict.Holder, "every loser is told the holder")
			}
			assert.Equal(t, 1, wins, "clients that sent")
		})
	}
}
