package submissions_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

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
	if _, err := s.Submit(bg, "req-1", newWithdrawal("w-1"), failing); err == nil {
		t.Fatal("Submit with a failing send: got nil error")
	}
	for range 2 {
		if _, err := s.Submit(bg, "req-2", newWithdrawal("w-2"), nil); err != nil {
			t.Fatal(err)
		}
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("log lines: got %d; want 2 (the failed send, the replay)\n%s", len(lines), logs.String())
	}
	if l := lines[0]; !strings.Contains(l, "level=WARN") || !strings.Contains(l, "key=req-1 withdrawal=w-1 error=") || !strings.Contains(l, "rail timed out") {
		t.Errorf("the failed send's line: got\n%s\nwant level=WARN, the key, the withdrawal and the error", l)
	}
	if l := lines[1]; !strings.Contains(l, "level=INFO") || !strings.HasSuffix(l, `msg="submission replayed" key=req-2 withdrawal=w-2`) {
		t.Errorf("the replay's line: got\n%s\nwant level=INFO, the key and the withdrawal, and no error", l)
	}
}
