package submissions_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemledger/submissions"
	"github.com/idemledger/submissions/driver"
)

// TestLogsCarryTheErrorOfAFailure: a send that fails is logged at Warn with
// the key, the withdrawal and the error that says what happened; a send that
// moved nothing at Info; a replay at Debug with the key and the withdrawal,
// and no error.
func TestLogsCarryTheErrorOfAFailure(t *testing.T) {
	var logs bytes.Buffer
	s := submissions.New[withdrawal](submissions.WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	failing := func(context.Context, withdrawal) (withdrawal, error) {
		return withdrawal{}, errors.New("rail timed out")
	}
	_, err := s.Submit(bg, "req-1", newWithdrawal("w-1"), failing)
	require.Error(t, err)
	_, err = s.Submit(bg, "req-3", newWithdrawal("w-3"), func(context.Context, withdrawal) (withdrawal, error) {
		return withdrawal{}, fmt.Errorf("rail busy: %w", submissions.ErrNotSent)
	})
	require.ErrorIs(t, err, submissions.ErrNotSent)
	for range 2 {
		_, err := s.Submit(bg, "req-2", newWithdrawal("w-2"), nil)
		require.NoError(t, err)
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	require.Len(t, lines, 3, "log lines: the failed send, the one that moved nothing, the replay\n%s", logs.String())
	assert.Contains(t, lines[0], `level=WARN msg="outcome unknown" key=req-1 withdrawal=w-1 error="outcome unknown: request key req-1: rail timed out"`)
	assert.Contains(t, lines[1], `level=INFO msg="send moved nothing" key=req-3 withdrawal=w-3 error="request key req-3: claim released: rail busy: not sent"`)
	assert.Regexp(t, `level=DEBUG msg="submission replayed" key=req-2 withdrawal=w-2$`, lines[2], "the replay's line, with no error")
}

// releaseFails is a store whose Release fails.
type releaseFails struct{ driver.Store[withdrawal] }

func (releaseFails) Release(context.Context, string, string, driver.Token) (driver.Record[withdrawal], bool, error) {
	return driver.Record[withdrawal]{}, false, errors.New("connection reset")
}

// TestASendThatMovedNothingAndCouldNotReleaseWarns: the claim of a send
// that moved nothing stands when the store fails to release it: the error is
// ErrStoreFailed (not ErrNotSent: the key is still claimed), logged at Warn
// as what it is.
func TestASendThatMovedNothingAndCouldNotReleaseWarns(t *testing.T) {
	var logs bytes.Buffer
	s := submissions.NewWithStore[withdrawal](releaseFails{submissions.NewMemoryStore[withdrawal]()},
		submissions.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	_, err := s.Submit(bg, "req-1", newWithdrawal("w-1"), func(context.Context, withdrawal) (withdrawal, error) {
		return withdrawal{}, fmt.Errorf("rail busy: %w", submissions.ErrNotSent)
	})
	require.ErrorIs(t, err, submissions.ErrStoreFailed)
	require.NotErrorIs(t, err, submissions.ErrNotSent)
	require.NotErrorIs(t, err, submissions.ErrOutcomeUnknown)
	assert.Equal(t, "store failed: request key req-1: send moved nothing (rail busy: not sent), and its claim could not be released: connection reset", err.Error())
	assert.Contains(t, logs.String(), `level=WARN msg="send moved nothing" key=req-1 withdrawal=w-1 error="store failed: `)
	_, err = s.Submit(bg, "req-1", newWithdrawal("w-1"), nil)
	require.ErrorIs(t, err, submissions.ErrSubmissionInFlight, "the claim stands")
}
