package ledgertest

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemledger/submissions"
	"github.com/idemledger/submissions/admin"
	"github.com/idemledger/submissions/storetest"
)

// Withdrawal is the type the suite submits: storetest's, the one type of
// withdrawal the project's suites share. Its fingerprint stays the same as
// it moves from approved to sent.
type Withdrawal = storetest.Withdrawal

// sentTx is w sent, under the rail's transaction tx.
func sentTx(w Withdrawal, tx string) Withdrawal {
	w.State, w.TxHash = "sent", tx
	return w
}

func newWithdrawal(id string) Withdrawal {
	return Withdrawal{ID: id, Amount: "25.00", Currency: "USDC", Dest: "0xabc", State: "approved"}
}

// rail is a fake payment rail that counts its sends.
type rail struct {
	calls atomic.Int64
}

// send moves the money and answers with w sent under transaction 0xtx-<id>.
func (r *rail) send(_ context.Context, w Withdrawal) (Withdrawal, error) {
	r.calls.Add(1)
	return sentTx(w, "0xtx-"+w.ID), nil
}

// requireSends stops t unless the rail moved money want times.
func (r *rail) requireSends(t *testing.T, want int64) {
	t.Helper()
	require.Equal(t, want, r.calls.Load(), "rail sends")
}

// errRail is what a failing send returns.
var errRail = errors.New("rail timed out")

func failing(context.Context, Withdrawal) (Withdrawal, error) { return Withdrawal{}, errRail }

// blocking returns a send that says it has started, then waits for finish
// before it answers as r.send does.
func (r *rail) blocking(started chan<- struct{}, finish <-chan struct{}) func(context.Context, Withdrawal) (Withdrawal, error) {
	return func(ctx context.Context, w Withdrawal) (Withdrawal, error) {
		close(started)
		<-finish
		return r.send(ctx, w)
	}
}

// strand submits w under key with a failing send, which leaves the key
// claimed with no outcome.
func strand(t *testing.T, s *submissions.Submissions[Withdrawal], key string, w Withdrawal) {
	t.Helper()
	_, err := s.Submit(bg, key, w, failing)
	require.ErrorIs(t, err, errRail)
	require.ErrorIs(t, err, submissions.ErrOutcomeUnknown)
}

// requireConflict stops t unless err is a *ConflictError that names holder.
func requireConflict(t *testing.T, err error, holder string) *submissions.ConflictError {
	t.Helper()
	var ce *submissions.ConflictError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, holder, ce.Holder, "Holder")
	require.ErrorIs(t, err, submissions.ErrIdempotencyConflict)
	require.Contains(t, err.Error(), holder, "the error names the holder")
	return ce
}

// requireOutcome stops t unless key's outcome is want, or unknown when ok is
// false.
func requireOutcome(t *testing.T, s *submissions.Submissions[Withdrawal], key string, want Withdrawal, ok bool) {
	t.Helper()
	got, found, err := s.Outcome(bg, key)
	require.NoError(t, err, "Outcome(%q)", key)
	require.Equal(t, ok, found, "Outcome(%q) found", key)
	require.Equal(t, want, got, "Outcome(%q)", key)
}

// requireHolder stops t unless id is claimed by holder, or by no key when
// holder is "".
func requireHolder(t *testing.T, s *submissions.Submissions[Withdrawal], id, holder string) {
	t.Helper()
	got, ok, err := s.ClaimedBy(bg, id)
	require.NoError(t, err, "ClaimedBy(%q)", id)
	require.Equal(t, holder != "", ok, "ClaimedBy(%q) found", id)
	require.Equal(t, holder, got, "ClaimedBy(%q)", id)
}

// requireKeptClaim stops t unless key is claimed for w with no outcome: a
// retry is in flight, another key is refused naming it, and nothing is sent.
func requireKeptClaim(t *testing.T, s *submissions.Submissions[Withdrawal], key string, w Withdrawal) {
	t.Helper()
	r := &rail{}
	_, err := s.Submit(bg, key, w, r.send)
	require.ErrorIs(t, err, submissions.ErrSubmissionInFlight)
	_, err = s.Submit(bg, "other-"+key, w, r.send)
	requireConflict(t, err, key)
	requireOutcome(t, s, key, Withdrawal{}, false)
	requireHolder(t, s, w.ID, key)
	r.requireSends(t, 0)
}

// requireAwaitingOperator stops t unless key is kept claimed for w (see
// requireKeptClaim) and a retry says that its send ended without an answer.
func requireAwaitingOperator(t *testing.T, s *submissions.Submissions[Withdrawal], key string, w Withdrawal) {
	t.Helper()
	requireKeptClaim(t, s, key, w)
	_, err := s.Submit(bg, key, w, nil)
	requireRefusal(t, err, submissions.ErrSubmissionInFlight)
	require.ErrorIs(t, err, submissions.ErrAbandoned, "a retry of a key whose send ended without an answer")
}

// requireRefusal stops t unless err is a refusal, and a refusal only: it
// wraps want and none of the classes that say money may have moved or the
// store failed.
func requireRefusal(t *testing.T, err, want error) {
	t.Helper()
	require.ErrorIs(t, err, want)
	for _, other := range []error{submissions.ErrOutcomeUnknown, submissions.ErrOutcomeNotRecorded, submissions.ErrStoreFailed} {
		assert.NotErrorIs(t, err, other)
	}
}

// logs is a slog.Handler that keeps what it is given.
type logs struct {
	mu      sync.Mutex
	entries []entry
}

type entry struct {
	level slog.Level
	msg   string
	attrs map[string]string
}

func (l *logs) Enabled(context.Context, slog.Level) bool { return true }
func (l *logs) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logs) WithGroup(string) slog.Handler            { return l }
func (l *logs) Handle(_ context.Context, r slog.Record) error {
	e := entry{level: r.Level, msg: r.Message, attrs: map[string]string{}}
	r.Attrs(func(a slog.Attr) bool {
		e.attrs[a.Key] = a.Value.String()
		return true
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	l.entries = append(l.entries, e)
	return nil
}

// at returns the entries at level about key and withdrawal id.
func (l *logs) at(level slog.Level, key, id string) []entry {
	l.mu.Lock()
	defer l.mu.Unlock()
	var found []entry
	for _, e := range l.entries {
		if e.level == level && e.attrs["key"] == key && e.attrs["withdrawal"] == id {
			found = append(found, e)
		}
	}
	return found
}

// requireAnswerLogged stops t unless one entry at level names key and id
// and holds the rail's answer, whose JSON encoding holds tx.
func (l *logs) requireAnswerLogged(t *testing.T, level slog.Level, key, id, tx string) {
	t.Helper()
	found := l.at(level, key, id)
	require.Len(t, found, 1, "%v entries naming %s and %s", level, key, id)
	assert.Contains(t, found[0].attrs["answer"], tx, "the rail's answer, in full")
}

// requireWarned stops t unless one Warn entry names key and id.
func (l *logs) requireWarned(t *testing.T, key, id string) {
	t.Helper()
	require.Len(t, l.at(slog.LevelWarn, key, id), 1, "Warn entries naming %s and %s", key, id)
}

// forceRelease releases key through s's Admin with force, as an operator
// who has looked at the rail does for a claim whose send is not known to
// have ended, and stops t unless it changed the ledger.
func forceRelease(t *testing.T, s *submissions.Submissions[Withdrawal], key string) {
	t.Helper()
	res := s.Admin().Release(bg, admin.Target{Key: key, Force: true})
	require.Equal(t, admin.Changed, res.Decision, "forced Release of %s: %s", key, res.Message)
}
