package submissions

import (
	"log/slog"

	"github.com/idemledger/submissions/observe"
)

// An Option configures a Submissions ledger made by New or NewWithStore.
type Option interface {
	apply(*options)
}

type options struct {
	logger   *slog.Logger
	observer observe.Observer
	check    any // a func(R) error of the ledger's R, or nil
}

type optionFunc func(*options)

func (f optionFunc) apply(o *options) { f(o) }

// WithLogger sets the logger for replays, resolutions and releases (Info),
// and for outcomes unknown or not recorded (Warn), each with the key and the
// withdrawal. The default, and the logger used when l is nil, is
// slog.Default() as it is when New is called.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(o *options) {
		if l != nil {
			o.logger = l
		}
	})
}

// WithObserver sets the observer of the ledger's decisions, and of its
// tenants' views and its Admin's (see package observe). The default, and the
// observer when o is nil, is none.
func WithObserver(o observe.Observer) Option {
	return optionFunc(func(opts *options) { opts.observer = o })
}

// WithOutcomeCheck sets the service's rule for an outcome recorded by hand
// (say, a "sent" without its transaction): the ledger's Resolve and every
// Admin action of it refuse an outcome for which check returns an error,
// writing nothing (admin.ErrInvalidOutcome, rule admin.RuleInvalidOutcome),
// as they refuse an invalid fingerprint. Send's answers are the rail's,
// and are not checked. R must be the ledger's outcome type: New and
// NewWithStore panic on another.
func WithOutcomeCheck[R Fingerprinter](check func(outcome R) error) Option {
	return optionFunc(func(o *options) {
		if check != nil {
			o.check = check
		}
	})
}

func buildOptions(opts []Option) options {
	o := options{logger: slog.Default()}
	for _, opt := range opts {
		if opt != nil {
			opt.apply(&o)
		}
	}
	return o
}
