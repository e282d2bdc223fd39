package pgstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemledger/submissions"
	"github.com/idemledger/submissions/driver"
)

// Two waits that used to run until their ctx ended, on PostgreSQL: a wait in
// another instance for a send whose Settle failed (the claim was not
// abandoned), and a wait through the instance that sends the key for a
// Resolve made through another (the wait watched the send only). Each wait
// here has waitDeadline, and must answer within prompt of the change that
// ends it, made at most prompt after the wait began.
const (
	waitDeadline = 6 * time.Second
	prompt       = 2 * time.Second
)

// settleFails is a Store whose Settle fails as settle says, over a real one
// whose every other call, optional ones included, it keeps.
type settleFails struct {
	*Store[w]
	settle func(ctx context.Context, tenant, key string, token driver.Token, outcome w) (driver.Record[w], bool, error)
}

func (s settleFails) Settle(ctx context.Context, tenant, key string, token driver.Token, outcome w) (driver.Record[w], bool, error) {
	return s.settle(ctx, tenant, key, token, outcome)
}

// waitResult is what a ledger's Wait returned, and when.
type waitResult struct {
	out w
	err error
	at  time.Time
}

// goWait runs ledger.Wait of key with waitDeadline on a goroutine and
// returns the channel of its result.
func goWait(ledger *submissions.Submissions[w], key string) <-chan waitResult {
	done := make(chan waitResult, 1)
	go func() {
		ctx, cancel := context.WithTimeout(bg, waitDeadline)
		defer cancel()
		out, err := ledger.Wait(ctx, key)
		done <- waitResult{out, err, time.Now()}
	}()
	return done
}

// requirePrompt stops t unless done answers within prompt of since.
func requirePrompt(t *testing.T, done <-chan waitResult, since time.Time, what string) waitResult {
	t.Helper()
	select {
	case got := <-done:
		require.Less(t, got.at.Sub(since), prompt, "%s: answered %v after the change (its deadline: %v): %v", what, got.at.Sub(since), waitDeadline, got.err)
		return got
	case <-time.After(time.Until(since.Add(prompt))):
		got := <-done // it ends by its deadline
		require.Failf(t, "no prompt answer", "%s: answered %v after the change, at its deadline %v: %v", what, got.at.Sub(since), waitDeadline, got.err)
		return got
	}
}

// TestAWaitElsewhereLearnsASendWhoseSettleFailed: instance A sends a key and
// its Settle fails, with the answer not written or written before the error
// came, or panics. A's Submit says the outcome was not recorded, and the
// claim is abandoned if it is still in flight: a Wait of the key through
// instance B, on a pool of its own, that waited all along answers at once
// (ErrOutcomeUnknown, or the outcome that stands), and so does a Wait begun
// after it, in either instance. The claim is then resolved as any other.
func TestAWaitElsewhereLearnsASendWhoseSettleFailed(t *testing.T) {
	lost := errors.New("connection lost while the outcome was written")
	for _, c := range []struct {
		name    string
		written bool // the answer was written before Settle failed
		panics  bool
	}{
		{name: "an error, nothing written"},
		{name: "an error, the answer written", written: true},
		{name: "a panic, nothing written", panics: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			poolA, poolB := testPool(t, 4), testPool(t, 4)
			st := newTestStore[w](t, poolA)
			failing := settleFails{Store: st, settle: func(ctx context.Context, tenant, key string, token driver.Token, outcome w) (driver.Record[w], bool, error) {
				if c.written {
					if _, settled, err := st.Settle(ctx, tenant, key, token, outcome); err != nil || !settled {
						return driver.Record[w]{}, false, errors.Join(errors.New("the answer was not written"), err)
					}
				}
				if c.panics {
					panic(lost)
				}
				return driver.Record[w]{}, false, lost
			}}
			other, err := New[w](poolB, WithTable(st.names.base))
			require.NoError(t, err)
			a := submissions.NewWithStore[w](failing, submissions.WithLogger(quiet))
			b := submissions.NewWithStore[w](other, submissions.WithLogger(quiet))

			x := newW("w-1")
			answer := sent(x, "0xmoved")
			sending, gate := make(chan struct{}), make(chan struct{})
			release := sync.OnceFunc(func() { close(gate) })
			defer release() // after a failure: the send ends, and Submit with it
			type submitted struct {
				out      w
				err      error
				panicked any
			}
			submit := make(chan submitted, 1)
			go func() {
				var s submitted
				defer func() { s.panicked = recover(); submit <- s }()
				s.out, s.err = a.Submit(bg, "req-1", x, func(context.Context, w) (w, error) {
					close(sending)
					<-gate
					return answer, nil
				})
			}()
			<-sending
			waited := goWait(b, "req-1")
			requireLocked(t, poolA, st, "req-1", 1) // B's Wait waits in the store
			start := time.Now()
			release()
			s := <-submit
			if c.panics {
				require.Equal(t, lost, s.panicked, "Submit: Settle's panic goes on")
			} else {
				require.Nil(t, s.panicked)
				require.ErrorIs(t, s.err, submissions.ErrOutcomeNotRecorded, "Submit")
				require.ErrorIs(t, s.err, lost, "Submit")
				require.Equal(t, answer, s.out, "Submit returns the rail's answer")
			}

			got := requirePrompt(t, waited, start, "B's Wait, waiting all along")
			rec, ok, err := st.Lookup(bg, "", "req-1")
			require.NoError(t, err)
			require.True(t, ok)
			if c.written {
				require.NoError(t, got.err, "B's Wait: the answer stands")
				assert.Equal(t, answer, got.out, "B's Wait")
				assert.True(t, rec.Done, "settled")
				assert.False(t, rec.Abandoned, "a done claim is never abandoned")
				return
			}
			require.ErrorIs(t, got.err, submissions.ErrOutcomeUnknown, "B's Wait")
			assert.False(t, rec.Done, "in flight")
			assert.True(t, rec.Abandoned, "the claim is abandoned")
			for name, ledger := range map[string]*submissions.Submissions[w]{"A": a, "B": b} {
				start := time.Now()
				got := requirePrompt(t, goWait(ledger, "req-1"), start, name+"'s Wait begun after")
				require.ErrorIs(t, got.err, submissions.ErrOutcomeUnknown, "%s's Wait begun after", name)
			}
			list, err := other.ListInFlight(bg, driver.ListQuery{Limit: 10})
			require.NoError(t, err)
			require.Len(t, list, 1)
			assert.True(t, list[0].Abandoned, "listed abandoned")

			require.NoError(t, b.Resolve(bg, "req-1", answer), "the operator resolves it, elsewhere")
			out, err := a.Submit(bg, "req-1", x, nil)
			require.NoError(t, err)
			assert.Equal(t, answer, out, "a retry replays the resolved outcome")
		})
	}
}

// TestAWaitThroughTheSenderHearsAResolveElsewhere: instance A sends a key,
// its send held up; a Wait of the key through A itself answers, within the
// polling interval, with the outcome an operator records through instance
// B, on a pool of its own, while A's send still runs. A's send then answers the same, and its Submit
// succeeds.
func TestAWaitThroughTheSenderHearsAResolveElsewhere(t *testing.T) {
	poolA, poolB := testPool(t, 4), testPool(t, 4)
	st := newTestStore[w](t, poolA)
	other, err := New[w](poolB, WithTable(st.names.base))
	require.NoError(t, err)
	a := submissions.NewWithStore[w](st, submissions.WithLogger(quiet))
	b := submissions.NewWithStore[w](other, submissions.WithLogger(quiet))

	x := newW("w-1")
	answer := sent(x, "0xmoved")
	sending, gate := make(chan struct{}), make(chan struct{})
	release := sync.OnceFunc(func() { close(gate) })
	type submitted struct {
		out w
		err error
	}
	submit := make(chan submitted, 1)
	go func() {
		out, err := a.Submit(bg, "req-1", x, func(context.Context, w) (w, error) {
			close(sending)
			<-gate
			return answer, nil
		})
		submit <- submitted{out, err}
	}()
	defer release() // after a failure: the send ends, and Submit with it
	<-sending
	waited := goWait(a, "req-1")
	// A's Wait reads the store now and then (it holds no connection, which
	// A's send needs to record its answer); a Wait that watched A's send
	// only would fail the check below, at its deadline.
	time.Sleep(50 * time.Millisecond)
	start := time.Now()
	require.NoError(t, b.Resolve(bg, "req-1", answer), "Resolve through B while A sends")
	got := requirePrompt(t, waited, start, "A's Wait, while A sends")
	require.NoError(t, got.err, "A's Wait")
	assert.Equal(t, answer, got.out, "A's Wait: B's outcome")
	select {
	case s := <-submit:
		require.Failf(t, "the send ended", "A's Submit returned before its send was let go: %+v", s)
	default: // A's send still runs: the Wait did not wait for it
	}

	release()
	s := <-submit
	require.NoError(t, s.err, "A's Submit: its answer is the one recorded")
	assert.Equal(t, answer, s.out)
	out, done, err := b.Outcome(bg, "req-1")
	require.NoError(t, err)
	require.True(t, done)
	assert.Equal(t, answer, out)
}

// TestWaitsThroughTheSenderLeaveItsPoolFree: many Waits of a key through the
// instance that is sending it, twice as many as its pool has connections,
// hold none of them: the send records its answer at once when it ends, and
// every Wait gets that outcome promptly (a Wait that held a connection would
// keep the answer from being recorded until the Waits' deadlines).
func TestWaitsThroughTheSenderLeaveItsPoolFree(t *testing.T) {
	const conns = 4
	pool := testPool(t, conns)
	a := submissions.NewWithStore[w](newTestStore[w](t, pool), submissions.WithLogger(quiet))
	x := newW("w-1")
	answer := sent(x, "0xmoved")
	sending, gate := make(chan struct{}), make(chan struct{})
	submit := make(chan error, 1)
	go func() {
		_, err := a.Submit(bg, "req-1", x, func(context.Context, w) (w, error) {
			close(sending)
			<-gate
			return answer, nil
		})
		submit <- err
	}()
	<-sending
	waits := make([]<-chan waitResult, 2*conns)
	for i := range waits {
		waits[i] = goWait(a, "req-1")
	}
	time.Sleep(100 * time.Millisecond) // the Waits are under way (a check that can only miss a bug)
	start := time.Now()
	close(gate)
	select {
	case err := <-submit:
		require.NoError(t, err, "the send's answer is recorded")
	case <-time.After(prompt):
		require.FailNow(t, "the send's answer was not recorded promptly: its pool is held by the Waits")
	}
	for i, done := range waits {
		got := requirePrompt(t, done, start, fmt.Sprintf("Wait %d", i))
		require.NoError(t, got.err)
		assert.Equal(t, answer, got.out)
	}
}
