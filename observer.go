package submissions

import (
	"context"
	"log/slog"
	"time"
)

// An Observer is told of every decision a ledger makes, for metrics and
// traces. Observe runs on the goroutine of the call that decided, before the
// call returns: it must be safe for concurrent use, quick, and must not call
// the ledger. A panic in Observe goes on to the ledger's caller; one of
// EventClaimed leaves the key claimed, as a send that panics does (send was
// not called: Release it).
type Observer interface {
	Observe(ctx context.Context, e Event)
}

// Event is one decision of a ledger.
type Event struct {
	Kind         EventKind
	Tenant       string // "" for the default tenant
	Key          string
	WithdrawalID string
	// Duration is how long send ran, for EventSent, EventOutcomeUnknown and
	// EventNotRecorded of a Submit that sent.
	Duration time.Duration
	// Err is the error the call returns, for EventConflict, EventInFlight,
	// EventOutcomeUnknown and EventNotRecorded (for a send that panicked,
	// an error that says so).
	Err error
}

// EventKind is what a ledger decided.
type EventKind uint8

// The decisions of a ledger. A Submit that sends reports EventClaimed, then
// one of EventSent, EventOutcomeUnknown and EventNotRecorded.
const (
	EventClaimed        EventKind = iota + 1 // the key claimed its withdrawal; send starts
	EventSent                                // send answered, and the answer is the key's outcome
	EventReplayed                            // the key's outcome, recorded before, was returned
	EventConflict                            // Submit refused: the key belongs to another withdrawal, or another key holds the withdrawal
	EventInFlight                            // Submit refused: the key's outcome is not known
	EventOutcomeUnknown                      // send ended without an answer; the key stays claimed
	EventNotRecorded                         // send answered, and the answer was not recorded
	EventResolved                            // Resolve recorded an outcome
	EventReleased                            // Release dropped a key in flight
	EventPruned                              // a settled record was pruned
)

var eventNames = [...]string{
	EventClaimed:        "claimed",
	EventSent:           "sent",
	EventReplayed:       "replayed",
	EventConflict:       "conflict",
	EventInFlight:       "in flight",
	EventOutcomeUnknown: "outcome unknown",
	EventNotRecorded:    "not recorded",
	EventResolved:       "resolved",
	EventReleased:       "released",
	EventPruned:         "pruned",
}

// String returns the kind's name: "claimed", "in flight", "outcome unknown".
func (k EventKind) String() string {
	if int(k) < len(eventNames) && eventNames[k] != "" {
		return eventNames[k]
	}
	return "unknown event"
}

// WithObserver sets the observer of the ledger's decisions, and of its
// tenants' views. The default, and the observer when o is nil, is none.
func WithObserver(o Observer) Option {
	return optionFunc(func(opts *options) { opts.observer = o })
}

// logged is the log level and message of each kind of event that a ledger
// logs; the others are not logged.
var logged = [...]struct {
	level slog.Level
	msg   string
}{
	EventReplayed:       {slog.LevelInfo, "submission replayed"},
	EventResolved:       {slog.LevelInfo, "submission resolved"},
	EventReleased:       {slog.LevelInfo, "submission released"},
	EventOutcomeUnknown: {slog.LevelWarn, "outcome unknown"},
	EventNotRecorded:    {slog.LevelWarn, "outcome not recorded"},
}

// report is sh.report of a decision made in s's tenant.
func (s *Submissions[R]) report(ctx context.Context, sh *shared[R], kind EventKind, key, withdrawalID string, took time.Duration, err error) {
	sh.report(ctx, s.tenant, kind, key, withdrawalID, took, err)
}

// report tells the observer of a decision of kind about key and withdrawalID,
// made in tenant, and logs it if its kind is logged: with the tenant (unless
// it is the default), the key, the withdrawal and err if not nil. With no
// observer, it costs one call when the kind is not logged or its level is
// disabled.
func (sh *shared[R]) report(ctx context.Context, tenant string, kind EventKind, key, withdrawalID string, took time.Duration, err error) {
	if sh.observer != nil {
		sh.observer.Observe(ctx, Event{Kind: kind, Tenant: tenant, Key: key, WithdrawalID: withdrawalID, Duration: took, Err: err})
	}
	if int(kind) >= len(logged) || logged[kind].msg == "" {
		return
	}
	level := logged[kind].level
	l := sh.log
	if l == nil {
		l = slog.Default()
	}
	if !l.Enabled(ctx, level) {
		return
	}
	attrs := make([]slog.Attr, 0, 4)
	if tenant != "" {
		attrs = append(attrs, slog.String("tenant", tenant))
	}
	attrs = append(attrs, slog.String("key", key), slog.String("withdrawal", withdrawalID))
	if err != nil {
		attrs = append(attrs, slog.Any("error", err))
	}
	l.LogAttrs(ctx, level, logged[kind].msg, attrs...)
}
