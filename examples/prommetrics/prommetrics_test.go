package prommetrics_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/idemledger/submissions"
	"github.com/idemledger/submissions/admin"
	"github.com/idemledger/submissions/examples/prommetrics"
	"github.com/idemledger/submissions/observe"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// payout is a withdrawal as a service keeps it.
type payout struct{ ID, Amount, Currency, To, Tx string }

func (p payout) Fingerprint() submissions.Fingerprint {
	return submissions.Fingerprint{WithdrawalID: p.ID, Amount: p.Amount, Currency: p.Currency, Destination: p.To}
}

func newPayout(id string) payout {
	return payout{ID: id, Amount: "25.00", Currency: "EUR", To: "DE89370400440532013000"}
}

// sent is the rail's answer for p.
func sent(p payout) payout {
	p.Tx = "tx-" + p.ID
	return p
}

var (
	bg    = context.Background()
	quiet = submissions.WithLogger(slog.New(slog.DiscardHandler))
)

// newLedger returns a ledger observed by a new Observer with opts, and the
// registry the Observer's metrics are in.
func newLedger(t *testing.T, opts ...prommetrics.Option) (*submissions.Submissions[payout], *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	obs, err := prommetrics.New(reg, opts...)
	require.NoError(t, err)
	return submissions.New[payout](submissions.WithObserver(obs), quiet), reg
}

// values returns every series reg gathers, by name and labels in the text
// format's way (`submissions_decisions_total{kind="sent"}`). A histogram is
// its count of samples, as name_count.
func values(t require.TestingT, reg prometheus.Gatherer) map[string]float64 {
	mfs, err := reg.Gather()
	require.NoError(t, err)
	vals := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			name := mf.GetName()
			if len(labels) > 0 {
				name += "{" + strings.Join(labels, ",") + "}"
			}
			switch {
			case m.GetCounter() != nil:
				vals[name] = m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				vals[name] = m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				name = strings.Replace(name, "{", "_count{", 1)
				vals[name] = float64(m.GetHistogram().GetSampleCount())
			default:
				t.Errorf("%s: not a counter, gauge or histogram", name)
			}
		}
	}
	return vals
}

// Names of series, as values has them.
const gauge = "submissions_sends_in_progress"

func decided(kind string) string { return `submissions_decisions_total{kind="` + kind + `"}` }
func took(result string) string {
	return `submissions_send_duration_seconds_count{result="` + result + `"}`
}

// zero is what a new Observer's registry holds: every series at zero.
func zero() map[string]float64 {
	vals := map[string]float64{gauge: 0}
	for _, kind := range []string{"claimed", "sent", "replayed", "conflict", "in_flight",
		"outcome_unknown", "not_recorded", "resolved", "released", "pruned", "not_sent"} {
		vals[decided(kind)] = 0
	}
	for _, result := range []string{"sent", "not_sent", "outcome_unknown", "not_recorded"} {
		vals[took(result)] = 0
	}
	return vals
}

func TestEveryKindStartsAtZero(t *testing.T) {
	_, reg := newLedger(t)
	vals := values(t, reg)
	assert.Equal(t, zero(), vals)
	for k := observe.EventKind(1); k != 0; k++ {
		if name := k.String(); name != "unknown event" {
			assert.Contains(t, vals, decided(strings.ReplaceAll(name, " ", "_")), "a series for %q", name)
		}
	}
}

func TestEveryDecisionIsCounted(t *testing.T) {
	ledger, reg := newLedger(t)
	want := zero()
	check := func(what string) {
		t.Helper()
		assert.Equal(t, want, values(t, reg), what)
	}
	railDown := errors.New("rail down")

	var during float64
	_, err := ledger.Submit(bg, "k1", newPayout("w1"), func(_ context.Context, p payout) (payout, error) {
		during = values(t, reg)[gauge]
		return sent(p), nil
	})
	require.NoError(t, err)
	assert.Equal(t, 1.0, during, "the send runs")
	want[decided("claimed")]++
	want[decided("sent")]++
	want[took("sent")]++
	check("a fresh send")

	_, err = ledger.Submit(bg, "k1", newPayout("w1"), nil)
	require.NoError(t, err)
	want[decided("replayed")]++
	check("a replay")

	_, err = ledger.Submit(bg, "k1-other", newPayout("w1"), nil)
	var conflict *submissions.ConflictError
	require.ErrorAs(t, err, &conflict)
	_, err = ledger.Submit(bg, "k1", newPayout("w-other"), nil)
	require.ErrorIs(t, err, submissions.ErrIdempotencyConflict)
	want[decided("conflict")] += 2
	check("another key, another withdrawal")

	_, err = ledger.Submit(bg, "k2", newPayout("w2"), func(context.Context, payout) (payout, error) {
		return payout{}, railDown
	})
	require.ErrorIs(t, err, submissions.ErrOutcomeUnknown)
	want[decided("claimed")]++
	want[decided("outcome_unknown")]++
	want[took("outcome_unknown")]++
	check("a failing send")

	_, err = ledger.Submit(bg, "k5", newPayout("w5"), func(context.Context, payout) (payout, error) {
		return payout{}, fmt.Errorf("rail busy: %w", submissions.ErrNotSent)
	})
	require.ErrorIs(t, err, submissions.ErrNotSent)
	want[decided("claimed")]++
	want[decided("not_sent")]++
	want[took("not_sent")]++
	check("a send that moved nothing")
	assert.Zero(t, values(t, reg)[gauge], "no send runs")

	_, err = ledger.Submit(bg, "k2", newPayout("w2"), nil)
	require.ErrorIs(t, err, submissions.ErrSubmissionInFlight)
	want[decided("in_flight")]++
	check("a retry of a key left in flight")

	require.PanicsWithValue(t, "rail exploded", func() {
		_, _ = ledger.Submit(bg, "k3", newPayout("w3"), func(context.Context, payout) (payout, error) {
			panic("rail exploded")
		})
	})
	want[decided("claimed")]++
	want[decided("outcome_unknown")]++
	want[took("outcome_unknown")]++
	check("a panicking send")

	_, err = ledger.Submit(bg, "k4", newPayout("w4"), func(_ context.Context, p payout) (payout, error) {
		p.Amount = "26.00"
		return sent(p), nil
	})
	require.ErrorIs(t, err, submissions.ErrOutcomeNotRecorded)
	want[decided("claimed")]++
	want[decided("not_recorded")]++
	want[took("not_recorded")]++
	check("an answer for another withdrawal")

	require.NoError(t, ledger.Resolve(bg, "k2", sent(newPayout("w2"))))
	require.NoError(t, ledger.Resolve(bg, "k4", sent(newPayout("w4"))))
	want[decided("resolved")] += 2
	require.NoError(t, ledger.Release(bg, "k3"))
	want[decided("released")]++
	check("resolved and released by an operator")
	assert.Zero(t, values(t, reg)[gauge], "no send runs")
}

func TestSendDuration(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	obs, err := prommetrics.New(reg, prommetrics.WithBuckets(0.01, 10))
	require.NoError(t, err)
	ledger := submissions.New[payout](submissions.WithObserver(obs), quiet)
	_, err = ledger.Submit(bg, "k1", newPayout("w1"), func(_ context.Context, p payout) (payout, error) {
		time.Sleep(20 * time.Millisecond)
		return sent(p), nil
	})
	require.NoError(t, err)

	mfs, err := reg.Gather()
	require.NoError(t, err)
	var found bool
	for _, mf := range mfs {
		if mf.GetName() != "submissions_send_duration_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.GetLabel()[0].GetValue() != "sent" {
				continue
			}
			found = true
			h := m.GetHistogram()
			assert.EqualValues(t, 1, h.GetSampleCount())
			assert.GreaterOrEqual(t, h.GetSampleSum(), 0.02, "seconds")
			require.Len(t, h.GetBucket(), 2)
			assert.EqualValues(t, 0, h.GetBucket()[0].GetCumulativeCount(), "not under 10ms")
			assert.Equal(t, 10.0, h.GetBucket()[1].GetUpperBound())
		}
	}
	assert.True(t, found, "a histogram of sends that were sent")
}

func TestExposition(t *testing.T) {
	ledger, reg := newLedger(t)
	_, err := ledger.Submit(bg, "k1", newPayout("w1"), nil)
	require.NoError(t, err)
	_, err = ledger.Submit(bg, "k1", newPayout("w1"), nil)
	require.NoError(t, err)

	const want = `
# HELP submissions_decisions_total Decisions of the submissions ledger, by kind.
# TYPE submissions_decisions_total counter
submissions_decisions_total{kind="claimed"} 1
submissions_decisions_total{kind="conflict"} 0
submissions_decisions_total{kind="in_flight"} 0
submissions_decisions_total{kind="not_recorded"} 0
submissions_decisions_total{kind="not_sent"} 0
submissions_decisions_total{kind="outcome_unknown"} 0
submissions_decisions_total{kind="pruned"} 0
submissions_decisions_total{kind="released"} 0
submissions_decisions_total{kind="replayed"} 1
submissions_decisions_total{kind="resolved"} 0
submissions_decisions_total{kind="sent"} 1
# HELP submissions_sends_in_progress Sends to the rail running in this process.
# TYPE submissions_sends_in_progress gauge
submissions_sends_in_progress 0
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want),
		"submissions_decisions_total", "submissions_sends_in_progress"))
	assert.Equal(t, 4, testutil.CollectAndCount(mustNew(t), "submissions_send_duration_seconds"), "a histogram per result")
}

// mustNew returns an Observer registered nowhere.
func mustNew(t *testing.T, opts ...prommetrics.Option) *prommetrics.Observer {
	t.Helper()
	obs, err := prommetrics.New(nil, opts...)
	require.NoError(t, err)
	return obs
}

func TestTenantLabel(t *testing.T) {
	t.Run("off by default", func(t *testing.T) {
		ledger, reg := newLedger(t)
		_, err := ledger.Tenant("acme").Submit(bg, "k1", newPayout("w1"), nil)
		require.NoError(t, err)
		_, err = ledger.Submit(bg, "k1", newPayout("w1"), nil)
		require.NoError(t, err)
		vals := values(t, reg)
		assert.Equal(t, 2.0, vals[decided("claimed")], "both tenants in one series")
		for name := range vals {
			assert.NotContains(t, name, "acme")
		}
	})

	t.Run("on", func(t *testing.T) {
		ledger, reg := newLedger(t, prommetrics.WithTenantLabel())
		assert.Equal(t, map[string]float64{gauge: 0,
			took("sent"): 0, took("not_sent"): 0, took("outcome_unknown"): 0, took("not_recorded"): 0,
		}, values(t, reg), "no decision yet: no series of decisions")

		acme := ledger.Tenant("acme")
		_, err := acme.Submit(bg, "k1", newPayout("w1"), nil)
		require.NoError(t, err)
		_, err = acme.Submit(bg, "k1", newPayout("w1"), nil)
		require.NoError(t, err)
		_, err = ledger.Submit(bg, "k1", newPayout("w1"), nil)
		require.NoError(t, err)
		assert.Equal(t, map[string]float64{gauge: 0,
			took("sent"): 2, took("not_sent"): 0, took("outcome_unknown"): 0, took("not_recorded"): 0,
			`submissions_decisions_total{kind="claimed",tenant="acme"}`:  1,
			`submissions_decisions_total{kind="sent",tenant="acme"}`:     1,
			`submissions_decisions_total{kind="replayed",tenant="acme"}`: 1,
			`submissions_decisions_total{kind="claimed",tenant=""}`:      1,
			`submissions_decisions_total{kind="sent",tenant=""}`:         1,
		}, values(t, reg))
	})
}

func TestRegistration(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	_, err := prommetrics.New(reg)
	require.NoError(t, err)
	_, err = prommetrics.New(reg)
	assert.Error(t, err, "the same metrics twice in one registry")

	other := prometheus.NewPedanticRegistry()
	obs := mustNew(t)
	require.NoError(t, other.Register(obs), "an Observer made without a registry is a Collector")
	assert.Equal(t, zero(), values(t, other))
}

// TestConcurrentSends: taps on several withdrawals, released together, each
// withdrawal under a few keys, half of the rail's sends failing. The gauge
// counts every send while they all run, and ends at zero; every call counts
// once.
func TestConcurrentSends(t *testing.T) {
	const withdrawals, taps, keys = 8, 32, 4
	ledger, reg := newLedger(t)
	var started, read sync.WaitGroup
	started.Add(withdrawals)
	read.Add(withdrawals)
	var mu sync.Mutex
	var during []float64
	send := func(_ context.Context, p payout) (payout, error) {
		started.Done()
		started.Wait() // every withdrawal's send has started
		g := values(t, reg)[gauge]
		mu.Lock()
		during = append(during, g)
		mu.Unlock()
		read.Done()
		read.Wait() // and none has ended
		if p.ID[len(p.ID)-1]%2 == 1 {
			return payout{}, errors.New("rail down")
		}
		return sent(p), nil
	}

	start := make(chan struct{})
	var done sync.WaitGroup
	for w := range withdrawals {
		for i := range taps {
			done.Go(func() {
				<-start
				_, _ = ledger.Submit(bg, fmt.Sprintf("w%d-k%d", w, i%keys), newPayout(fmt.Sprintf("w%d", w)), send)
			})
		}
	}
	close(start)
	done.Wait()

	assert.Equal(t, []float64{withdrawals, withdrawals, withdrawals, withdrawals,
		withdrawals, withdrawals, withdrawals, withdrawals}, during, "every send running, seen from each")
	vals := values(t, reg)
	assert.Zero(t, vals[gauge], "every send ended")
	assert.Equal(t, float64(withdrawals), vals[decided("claimed")], "one send a withdrawal")
	assert.Equal(t, float64(withdrawals/2), vals[decided("sent")])
	assert.Equal(t, float64(withdrawals/2), vals[decided("outcome_unknown")])
	assert.Equal(t, float64(withdrawals/2), vals[took("sent")])
	assert.Equal(t, float64(withdrawals/2), vals[took("outcome_unknown")])
	refused := vals[decided("replayed")] + vals[decided("in_flight")] + vals[decided("conflict")]
	assert.Equal(t, float64(withdrawals*taps-withdrawals), refused, "every other call replayed or refused")
}

// keysInFlight is the series of submissions_keys_in_flight for send.
func keysInFlight(send string) string { return `submissions_keys_in_flight{send="` + send + `"}` }

// TestKeysInFlightByState: with WithKeysInFlight, every scrape counts the
// ledger's keys in flight by the state of their send, every page of them,
// each state from zero; a key stays counted for as long as it is stuck, and
// leaves the count once resolved. A listing that fails fails that metric's
// scrape, not the others'.
func TestKeysInFlightByState(t *testing.T) {
	var ledger *submissions.Submissions[payout]
	reg := prometheus.NewPedanticRegistry()
	obs, err := prommetrics.New(reg, prommetrics.WithKeysInFlight(func(ctx context.Context, q admin.InFlightQuery) ([]admin.Claim, error) {
		q.Limit = 2 // pages of two: the scrape reads them all
		return ledger.Admin().InFlight(ctx, q)
	}))
	require.NoError(t, err)
	ledger = submissions.New[payout](submissions.WithObserver(obs), quiet)
	zero := map[string]float64{"running": 0, "ended": 0, "answered": 0, "unknown": 0}
	requireInFlight := func(want map[string]float64) {
		t.Helper()
		vals := values(t, reg)
		for state := range zero {
			assert.Equal(t, want[state], vals[keysInFlight(state)], state)
		}
	}
	requireInFlight(zero)

	for i := range 3 {
		_, err := ledger.Submit(bg, fmt.Sprintf("k-ended-%d", i), newPayout(fmt.Sprintf("w-e%d", i)), func(context.Context, payout) (payout, error) {
			return payout{}, errors.New("rail timed out")
		})
		require.ErrorIs(t, err, submissions.ErrOutcomeUnknown)
	}
	odd := newPayout("w-a")
	_, err = ledger.Submit(bg, "k-answered", odd, func(context.Context, payout) (payout, error) {
		p := sent(odd)
		p.Amount = "26"
		return p, nil
	})
	require.ErrorIs(t, err, submissions.ErrOutcomeNotRecorded)
	started, finish, done := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		_, _ = ledger.Submit(bg, "k-running", newPayout("w-r"), func(_ context.Context, p payout) (payout, error) {
			close(started)
			<-finish
			return sent(p), nil
		})
	}()
	<-started
	requireInFlight(map[string]float64{"running": 1, "ended": 3, "answered": 1})
	requireInFlight(map[string]float64{"running": 1, "ended": 3, "answered": 1}) // a key stuck stays counted
	close(finish)
	<-done
	require.NoError(t, ledger.Resolve(bg, "k-ended-0", sent(newPayout("w-e0"))))
	requireInFlight(map[string]float64{"ended": 2, "answered": 1})

	failing, err := prommetrics.New(nil, prommetrics.WithKeysInFlight(func(context.Context, admin.InFlightQuery) ([]admin.Claim, error) {
		return nil, errors.New("store down")
	}))
	require.NoError(t, err)
	reg = prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(failing))
	_, err = reg.Gather()
	require.ErrorContains(t, err, "store down")
}
