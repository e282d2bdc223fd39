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
// increase of those two.
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
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

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

// Observer is an observe.Observer that keeps the package's metrics. It is
// safe for concurrent use, and one Observer may watch several ledgers: their
// decisions add up.
type Observer struct {
	decisions *prometheus.CounterVec
	sending   prometheus.Gauge
	durations *prometheus.HistogramVec
	tenants   bool
	byKind    []kindMetrics // indexed by kind
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
}

// Collect sends the Observer's metrics to ch.
func (o *Observer) Collect(ch chan<- prometheus.Metric) {
	o.decisions.Collect(ch)
	o.sending.Collect(ch)
	o.durations.Collect(ch)
}
