package submissions_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemledger/submissions"
)

// TestLogsCarryTheErrorOfAFailure: a send that fails is logged at Warn with
// the key, the withdrawal and the error that says what happened; a replay is
// logged at Info with the key and the withdrawal, and no error.
func TestLogsCarryTheErrorOfAFailure(t *testing.T) {
	var logs bytes.Buffer
	s := submissions.New[withdrawal](submissions.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	failing := func(context.Context, withdrawal) (withdrawal, error) {
		return withdrawal{}, errors.New("rail timed out")
	}
	_, err := s.Submit(bg, "req-1", newWithdrawal("w-1"), failing)
	require.Error(t, err)
	for range 2 {
		_, err := s.Submit(bg, "req-2", newWithdrawal("w-2"), nil)
		require.NoError(t, err)
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	require.Len(t, lines, 2, "log lines: the failed send, the replay\n%s", logs.String())
	assert.Contains(t, lines[0], `level=WARN msg="outcome unknown" key=req-1 withdrawal=w-1 error="outcome unknown: request key req-1: rail timed out"`)
	assert.Regexp(t, `level=INFO msg="submission replayed" key=req-2 withdrawal=w-2$`, lines[1], "the replay's line, with no error")
}
