// Package prommetrics reports a submissions ledger's decisions to
// Prometheus, through the ledger's observer hook: its Observer is an
// observe.Observer, given to the ledger with submissions.WithObserver:
//
//	reg := prometheus.NewRegistry()
//	obs, err := prommetrics.New(reg)
//	ledger := submissions.New[Withdrawal](submissions.WithObserver(obs))
//
// The metrics:
//
//	submissions_decisions_total{kind}           counter: every decision, kind as
//	                                            observe.EventKind names it, spaces
//	                                            as underscores: claimed, sent, replayed,
//	                                            conflict, in_flight, outcome_unknown,
//	                                            not_recorded, resolved, released, pruned,
//	                                            not_sent
//	submissions_sends_in_progress               gauge: sends running in this process,
//	                                            claimed and not yet ended
//	submissions_send_duration_seconds{result}   histogram: how long each send ran, by
//	                                            how it ended: sent, not_sent,
//	                                            outcome_unknown, not_recorded
//
// A key left claimed without an outcome is a decision of kind
// outcome_unknown or not_recorded: money may have moved, and an operator
// must look at the rail, then resolve or release the key. Alert on any
// increase of those two. With WithKeysInFlight, a gauge counts the keys in
// flight at each scrape, by the state of their send, for as long as they
// stay so (an increase is gone from a rate's window while its key is still
// stuck):
//
//	submissions_keys_in_flight{send}            gauge: the ledger's keys in flight, in
//	                                            every tenant, by admin.Claim.Send:
//	                                            running (in this process), ended (without
//	                                            a recorded answer), answered (the answer
//	                                            not recorded: money moved), unknown (not
//	                                            known to have ended: it may run in
//	                                            another process)
//
// Alert on submissions_keys_in_flight{send=~"ended|answered"} > 0, and on
// {send="unknown"} > 0 for longer than a send takes.
//
// # Tenants
//
// By default no metric has a tenant label: a service's tenants are as many
// as its customers, and every tenant would add a series per kind to each
// scrape, for as long as the process runs. WithTenantLabel adds one to
// submissions_decisions_total, for a service with few tenants, known in
// advance.
//
// Every series without a tenant starts at zero, so that rate and increase
// see a key's first decision; a tenant's series appear with its first
// decision of their kind.
package prommetrics

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemledger/submissions/admin"
	"github.com/idemledger/submissions/observe"
)

// DefaultBuckets are the upper bounds, in seconds, of the send duration
// histogram's buckets: from 5ms, a rail that answers from memory, to 60s, a
// slow bank.
var DefaultBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

// kinds are the decisions a ledger reports, whose series start at zero.
var kinds = []observe.EventKind{
	observe.EventClaimed,
	observe.EventSent,
	observe.EventReplayed,
	observe.EventConflict,
	observe.EventInFlight,
	observe.EventOutcomeUnknown,
	observe.EventNotRecorded,
	observe.EventResolved,
	observe.EventReleased,
	observe.EventPruned,
	observe.EventNotSent,
}

// sendEnds are the decisions that end a send.
var sendEnds = []observe.EventKind{
	observe.EventSent,
	observe.EventNotSent,
	observe.EventOutcomeUnknown,
	observe.EventNotRecorded,
}

// label returns the label value of kind: its name, with underscores for
// spaces ("outcome_unknown").
func label(kind observe.EventKind) string {
	return strings.ReplaceAll(kind.String(), " ", "_")
}

// An Option configures an Observer.
type Option interface {
	apply(*options)
}

type options struct {
	tenants bool
	buckets []float64
	list    func(context.Context, admin.InFlightQuery) ([]admin.Claim, error)
}

type optionFunc func(*options)

func (f optionFunc) apply(o *options) { f(o) }

// WithTenantLabel adds a tenant label to submissions_decisions_total, ""
// for the default tenant. The default is none: see the package doc before
// using it.
func WithTenantLabel() Option {
	return optionFunc(func(o *options) { o.tenants = true })
}

// WithBuckets sets the upper bounds, in seconds, of the send duration
// histogram's buckets. The default, and the buckets when none are given, is
// DefaultBuckets.
func WithBuckets(bounds ...float64) Option {
	return optionFunc(func(o *options) { o.buckets = bounds })
}

// WithKeysInFlight adds submissions_keys_in_flight, read at each scrape
// from list, the ledger's Admin().InFlight: every page of it, within
// listTimeout. A scrape whose listing fails reports the error for that
// metric (the scrape's other metrics are kept).
func WithKeysInFlight(list func(context.Context, admin.InFlightQuery) ([]admin.Claim, error)) Option {
	return optionFunc(func(o *options) { o.list = list })
}

// listTimeout bounds a scrape's listing of the keys in flight, and
// maxPages its pages: a listing that does not end is an error.
const (
	listTimeout = 5 * time.Second
	maxPages    = 1000
)

// sendStates are the label values of submissions_keys_in_flight, by
// admin.Claim.Send.
var sendStates = map[string]string{
	admin.SendRunning:  "running",
	admin.SendEnded:    "ended",
	admin.SendAnswered: "answered",
	admin.SendUnknown:  "unknown",
}

// Observer is an observe.Observer that keeps the package's metrics. It is
// safe for concurrent use, and one Observer may watch several ledgers: their
// decisions add up.
type Observer struct {
	decisions *prometheus.CounterVec
	sending   prometheus.Gauge
	durations *prometheus.HistogramVec
	tenants   bool
	byKind    []kindMetrics // indexed by kind
	list      func(context.Context, admin.InFlightQuery) ([]admin.Claim, error)
	inFlight  *prometheus.Desc
}

var (
	_ observe.Observer     = (*Observer)(nil)
	_ prometheus.Collector = (*Observer)(nil)
)

// kindMetrics is what an Observer keeps for one kind of decision.
type kindMetrics struct {
	label   string
	decided prometheus.Counter  // the kind's counter; nil with a tenant label
	ended   prometheus.Observer // the send's duration, for a kind that ends a send
}

// New returns an Observer whose metrics are registered with reg, or not
// registered if reg is nil (the Observer is a prometheus.Collector, to
// register later). It returns the error of the registration: metrics of the
// same names are registered already, say.
func New(reg prometheus.Registerer, opts ...Option) (*Observer, error) {
	var o options
	for _, opt := range opts {
		opt.apply(&o)
	}
	if len(o.buckets) == 0 {
		o.buckets = DefaultBuckets
	}
	labels := []string{"kind"}
	if o.tenants {
		labels = []string{"tenant", "kind"}
	}
	obs := &Observer{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "submissions_decisions_total",
			Help: "Decisions of the submissions ledger, by kind.",
		}, labels),
		sending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "submissions_sends_in_progress",
			Help: "Sends to the rail running in this process.",
		}),
		durations: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "submissions_send_duration_seconds",
			Help:    "How long sends to the rail ran, by how they ended.",
			Buckets: o.buckets,
		}, []string{"result"}),
		tenants: o.tenants,
		list:    o.list,
		inFlight: prometheus.NewDesc("submissions_keys_in_flight",
			"Keys of the ledger in flight, by the state of their send.", []string{"send"}, nil),
	}
	obs.byKind = make([]kindMetrics, int(slices.Max(kinds))+1)
	for _, k := range kinds {
		m := &obs.byKind[k]
		m.label = label(k)
		if !o.tenants {
			m.decided = obs.decisions.WithLabelValues(m.label)
		}
	}
	for _, k := range sendEnds {
		obs.byKind[k].ended = obs.durations.WithLabelValues(label(k))
	}
	if reg != nil {
		if err := reg.Register(obs); err != nil {
			return nil, err
		}
	}
	return obs, nil
}

// Observe records the decision e.
func (o *Observer) Observe(_ context.Context, e observe.Event) {
	var m kindMetrics
	if int(e.Kind) < len(o.byKind) {
		m = o.byKind[e.Kind]
	}
	if m.label == "" {
		m.label = label(e.Kind)
	}
	switch {
	case o.tenants:
		o.decisions.WithLabelValues(e.Tenant, m.label).Inc()
	case m.decided != nil:
		m.decided.Inc()
	default:
		o.decisions.WithLabelValues(m.label).Inc()
	}
	if e.Kind == observe.EventClaimed {
		o.sending.Inc()
	}
	if m.ended != nil {
		o.sending.Dec()
		m.ended.Observe(e.Duration.Seconds())
	}
}

// Describe sends the descriptions of the Observer's metrics to ch.
func (o *Observer) Describe(ch chan<- *prometheus.Desc) {
	o.decisions.Describe(ch)
	o.sending.Describe(ch)
	o.durations.Describe(ch)
	if o.list != nil {
		ch <- o.inFlight
	}
}

// Collect sends the Observer's metrics to ch.
func (o *Observer) Collect(ch chan<- prometheus.Metric) {
	o.decisions.Collect(ch)
	o.sending.Collect(ch)
	o.durations.Collect(ch)
	if o.list != nil {
		o.collectInFlight(ch)
	}
}

// collectInFlight sends the counts of the keys in flight by state to ch,
// every state's, or the error of the listing.
func (o *Observer) collectInFlight(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), listTimeout)
	defer cancel()
	counts := map[string]int{}
	q := admin.InFlightQuery{Limit: admin.MaxListLimit}
	for pages := 0; ; pages++ {
		claims, err := o.list(ctx, q)
		if err == nil && pages == maxPages {
			err = fmt.Errorf("prommetrics: more than %d pages of keys in flight", maxPages)
		}
		if err != nil {
			ch <- prometheus.NewInvalidMetric(o.inFlight, err)
			return
		}
		if len(claims) == 0 {
			break
		}
		for _, c := range claims {
			counts[sendStates[c.Send()]]++
		}
		q.After = &claims[len(claims)-1]
	}
	for _, state := range sendStates {
		ch <- prometheus.MustNewConstMetric(o.inFlight, prometheus.GaugeValue, float64(counts[state]), state)
	}
}
