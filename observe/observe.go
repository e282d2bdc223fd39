// Package observe is how a submissions ledger tells of its decisions, for
// metrics and traces: an Observer, given to a ledger with
// submissions.WithObserver, is told of every Event.
package observe

import (
	"context"
	"time"
)

// An Observer is told of every decision a ledger makes. Observe runs on the
// goroutine of the call that decided, before the call returns: it must be
// safe for concurrent use, quick, and must not call the ledger. A panic in
// Observe goes on to the ledger's caller; send is not called after one of
// EventClaimed, and the key's claim is released (EventNotSent).
type Observer interface {
	Observe(ctx context.Context, e Event)
}

// Event is one decision of a ledger.
type Event struct {
	Kind         EventKind
	Tenant       string // "" for the default tenant
	Key          string
	WithdrawalID string
	// Duration is how long send ran, for EventSent, EventNotSent,
	// EventOutcomeUnknown and EventNotRecorded of a Submit that sent; 0
	// when send was not called.
	Duration time.Duration
	// Err is the error the call returns, for EventConflict, EventInFlight,
	// EventNotSent, EventOutcomeUnknown and EventNotRecorded (for a send
	// that panicked, an error that says so).
	Err error
	// Answer is send's answer that was not recorded, for EventNotRecorded:
	// the rail's word, which the ledger keeps nowhere else.
	Answer any
}

// EventKind is what a ledger decided.
type EventKind uint8

// The decisions of a ledger. A Submit that sends reports EventClaimed, then
// one of EventSent, EventNotSent, EventOutcomeUnknown and EventNotRecorded.
const (
	EventClaimed        EventKind = iota + 1 // the key claimed its withdrawal; send starts
	EventSent                                // send answered, and the answer is the key's outcome
	EventReplayed                            // the key's outcome, recorded before, was returned
	EventConflict                            // Submit refused: the key belongs to another withdrawal, or another key holds the withdrawal
	EventInFlight                            // Submit refused: the key's outcome is not known
	EventOutcomeUnknown                      // send ended without an answer; the key stays claimed
	EventNotRecorded                         // send answered, and the answer was not recorded
	EventResolved                            // an outcome was recorded by Resolve or an operator
	EventReleased                            // a key in flight was released
	EventPruned                              // a settled record was pruned
	EventNotSent                             // send said it moved nothing, or was not called (ctx ended as the key was claimed, or Observe panicked): its claim was released, unless closed meanwhile or the store failed (Err says)
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
	EventNotSent:        "not sent",
}

// String returns the kind's name: "claimed", "in flight", "outcome unknown".
func (k EventKind) String() string {
	if int(k) < len(eventNames) && eventNames[k] != "" {
		return eventNames[k]
	}
	return "unknown event"
}
