package submissions_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemledger/submissions"
	"github.com/idemledger/submissions/driver"
	"github.com/idemledger/submissions/observe"
)

// events is an Observer that keeps what it is told.
type events struct {
	mu   sync.Mutex
	seen []observe.Event
}

func (o *events) Observe(_ context.Context, e observe.Event) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.seen = append(o.seen, e)
}

// take returns the events seen since the last take.
func (o *events) take() []observe.Event {
	o.mu.Lock()
	defer o.mu.Unlock()
	seen := o.seen
	o.seen = nil
	return seen
}

// kinds returns the kinds of es, in order.
func kinds(es []observe.Event) []observe.EventKind {
	var ks []observe.EventKind
	for _, e := range es {
		ks = append(ks, e.Kind)
	}
	return ks
}

// TestObserverSeesEveryDecision: each call reports its decisions, in order,
// with the tenant, key and withdrawal, the error the call returned, and how
// long send ran.
func TestObserverSeesEveryDecision(t *testing.T) {
	o := &events{}
	stores := map[string]driver.Store[withdrawal]{
		"in memory":            submissions.NewMemoryStore[withdrawal](),
		"behind the interface": struct{ driver.Store[withdrawal] }{submissions.NewMemoryStore[withdrawal]()},
	}
	for name, st := range stores {
		t.Run(name, func(t *testing.T) {
			s := submissions.NewWithStore(st, submissions.WithObserver(o), quiet).Tenant("acme")
			w := newWithdrawal("w-1")
			slow := func(_ context.Context, w withdrawal) (withdrawal, error) {
				time.Sleep(time.Millisecond)
				return w, nil
			}
			_, err := s.Submit(bg, "req-1", w, slow)
			require.NoError(t, err)
			seen := o.take()
			require.Equal(t, []observe.EventKind{observe.EventClaimed, observe.EventSent}, kinds(seen))
			for _, e := range seen {
				assert.Equal(t, "acme", e.Tenant)
				assert.Equal(t, "req-1", e.Key)
				assert.Equal(t, "w-1", e.WithdrawalID)
				assert.NoError(t, e.Err)
			}
			assert.GreaterOrEqual(t, seen[1].Duration, time.Millisecond, "the send's duration")
			assert.Less(t, seen[1].Duration, time.Minute, "the send's duration, timed from its start")

			_, err = s.Submit(bg, "req-1", w, slow)
			require.NoError(t, err)
			assert.Equal(t, []observe.EventKind{observe.EventReplayed}, kinds(o.take()), "a replay")

			for _, c := range []struct {
				key string
				w   withdrawal
			}{{"req-1", newWithdrawal("w-2")}, {"req-2", w}} {
				_, err = s.Submit(bg, c.key, c.w, slow)
				require.ErrorIs(t, err, submissions.ErrIdempotencyConflict)
				seen = o.take()
				require.Equal(t, []observe.EventKind{observe.EventConflict}, kinds(seen), "a conflict")
				assert.Equal(t, err, seen[0].Err)
				assert.Equal(t, c.key, seen[0].Key)
			}

			fail := func(context.Context, withdrawal) (withdrawal, error) {
				return withdrawal{}, errors.New("rail timed out")
			}
			_, err = s.Submit(bg, "req-3", newWithdrawal("w-3"), fail)
			require.ErrorIs(t, err, submissions.ErrOutcomeUnknown)
			seen = o.take()
			require.Equal(t, []observe.EventKind{observe.EventClaimed, observe.EventOutcomeUnknown}, kinds(seen))
			assert.Equal(t, err, seen[1].Err)

			_, err = s.Submit(bg, "req-3", newWithdrawal("w-3"), fail)
			require.ErrorIs(t, err, submissions.ErrSubmissionInFlight)
			seen = o.take()
			require.Equal(t, []observe.EventKind{observe.EventInFlight}, kinds(seen))
			assert.Equal(t, err, seen[0].Err)

			require.NoError(t, s.Resolve(bg, "req-3", newWithdrawal("w-3")))
			assert.Equal(t, []observe.EventKind{observe.EventResolved}, kinds(o.take()))

			_, err = s.Submit(bg, "req-4", newWithdrawal("w-4"), func(_ context.Context, w withdrawal) (withdrawal, error) {
				w.Amount = "26"
				return w, nil
			})
			require.ErrorIs(t, err, submissions.ErrOutcomeNotRecorded)
			seen = o.take()
			require.Equal(t, []observe.EventKind{observe.EventClaimed, observe.EventNotRecorded}, kinds(seen))
			assert.Equal(t, err, seen[1].Err)

			require.ErrorIs(t, s.Release(bg, "req-4"), submissions.ErrIdempotencyConflict, "an answered claim is never released")
			assert.Empty(t, kinds(o.take()))
			_, err = s.Submit(bg, "req-6", newWithdrawal("w-6"), fail)
			require.ErrorIs(t, err, submissions.ErrOutcomeUnknown)
			o.take()
			require.NoError(t, s.Release(bg, "req-6"))
			assert.Equal(t, []observe.EventKind{observe.EventReleased}, kinds(o.take()))

			require.Panics(t, func() {
				_, _ = s.Submit(bg, "req-5", newWithdrawal("w-5"), func(context.Context, withdrawal) (withdrawal, error) { panic("rail exploded") })
			})
			seen = o.take()
			require.Equal(t, []observe.EventKind{observe.EventClaimed, observe.EventOutcomeUnknown}, kinds(seen))
			assert.ErrorIs(t, seen[1].Err, submissions.ErrOutcomeUnknown)
			assert.ErrorContains(t, seen[1].Err, "send did not return")

			_, err = s.Submit(bg, " ", w, slow)
			require.ErrorIs(t, err, submissions.ErrInvalidKey)
			assert.Empty(t, o.take(), "an invalid key is no decision")
		})
	}
}

func TestEventKindNames(t *testing.T) {
	for k, want := range map[observe.EventKind]string{
		observe.EventClaimed:        "claimed",
		observe.EventSent:           "sent",
		observe.EventReplayed:       "replayed",
		observe.EventConflict:       "conflict",
		observe.EventInFlight:       "in flight",
		observe.EventOutcomeUnknown: "outcome unknown",
		observe.EventNotRecorded:    "not recorded",
		observe.EventResolved:       "resolved",
		observe.EventReleased:       "released",
		observe.EventPruned:         "pruned",
		observe.EventNotSent:        "not sent",
		0:                           "unknown event",
		observe.EventNotSent + 1:    "unknown event",
		255:                         "unknown event",
	} {
		assert.Equal(t, want, k.String())
	}
}

// panicsOn is an Observer that panics on one kind of event.
type panicsOn observe.EventKind

func (p panicsOn) Observe(_ context.Context, e observe.Event) {
	if e.Kind == observe.EventKind(p) {
		panic("observer exploded")
	}
}

// panicsOnClaimed is an Observer that panics on a claim, and keeps the
// other events it is given.
type panicsOnClaimed struct {
	mu   sync.Mutex
	seen []observe.Event
}

func (p *panicsOnClaimed) Observe(_ context.Context, e observe.Event) {
	if e.Kind == observe.EventClaimed {
		panic("observer exploded")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seen = append(p.seen, e)
}

// TestObserverPanicLeavesTheLedgerWhole: an Observe that panics on the
// claim stops the send from being called, and the ledger releases the claim
// (nothing was sent under it); one that panics on the outcome leaves it
// recorded.
func TestObserverPanicLeavesTheLedgerWhole(t *testing.T) {
	for name, st := range map[string]driver.Store[withdrawal]{
		"in memory":            submissions.NewMemoryStore[withdrawal](),
		"behind the interface": struct{ driver.Store[withdrawal] }{submissions.NewMemoryStore[withdrawal]()},
	} {
		t.Run(name, func(t *testing.T) {
			sends := 0
			send := func(_ context.Context, w withdrawal) (withdrawal, error) { sends++; return w, nil }
			s := submissions.NewWithStore(st, submissions.WithObserver(panicsOn(observe.EventClaimed)), quiet)
			require.PanicsWithValue(t, "observer exploded", func() { _, _ = s.Submit(bg, "req-1", newWithdrawal("w-1"), send) })
			assert.Zero(t, sends, "send is not called")
			obs := &panicsOnClaimed{}
			require.PanicsWithValue(t, "observer exploded", func() {
				_, _ = submissions.NewWithStore(st, submissions.WithObserver(obs), quiet).Submit(bg, "req-9", newWithdrawal("w-1"), send)
			})
			require.Len(t, obs.seen, 1, "the claim's end, and nothing else")
			assert.Equal(t, observe.EventNotSent, obs.seen[0].Kind, "not an outcome unknown: the claim is released")
			require.ErrorIs(t, obs.seen[0].Err, submissions.ErrNotSent)
			assert.Contains(t, obs.seen[0].Err.Error(), "the observer panicked, and send was not called: the claim is released")
			assert.Zero(t, obs.seen[0].Duration, "no send ran")
			_, err := submissions.NewWithStore(st, quiet).Submit(bg, "req-0", newWithdrawal("w-1"), send)
			require.NoError(t, err, "the claim was released: another key sends the withdrawal")
			assert.Equal(t, 1, sends)

			s = submissions.NewWithStore(st, submissions.WithObserver(panicsOn(observe.EventSent)), quiet)
			require.PanicsWithValue(t, "observer exploded", func() { _, _ = s.Submit(bg, "req-2", newWithdrawal("w-2"), send) })
			assert.Equal(t, 2, sends)
			out, ok, err := s.Outcome(bg, "req-2")
			require.NoError(t, err)
			require.True(t, ok, "the answer is recorded")
			assert.Equal(t, newWithdrawal("w-2"), out)
		})
	}
}
