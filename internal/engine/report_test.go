package engine

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/idemledger/submissions/observe"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type countKinds map[observe.EventKind]int

func (c countKinds) Observe(_ context.Context, e observe.Event) { c[e.Kind]++ }

// TestReportLogsTheKindsItLists: every kind of event an EventKind can hold,
// one observe may add later included, reaches the observer; only the kinds
// logged lists are logged, with their message, and none panics.
func TestReportLogsTheKindsItLists(t *testing.T) {
	var buf bytes.Buffer
	seen := countKinds{}
	l := New[transfer](newMapStore(), slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})), seen)
	for k := range 256 {
		buf.Reset()
		kind := observe.EventKind(k)
		require.NotPanics(t, func() { l.report(context.Background(), "", kind, "req-1", "w-1", 0, nil) }, "kind %d", k)
		if k < len(logged) && logged[k].msg != "" {
			assert.Contains(t, buf.String(), logged[k].msg, "kind %d", k)
		} else {
			assert.Empty(t, buf.String(), "kind %d", k)
		}
		assert.Equal(t, 1, seen[kind], "kind %d", k)
	}
}

// keepEvents is an Observer that keeps what it is told.
type keepEvents struct{ got []observe.Event }

func (k *keepEvents) Observe(_ context.Context, e observe.Event) { k.got = append(k.got, e) }

// TestReportAnswerKeepsTheRailsWord: an answer that is not recorded reaches
// the observer and the log in full, at Error (not at all when the logger
// logs less); an answer that JSON cannot encode is logged in Go syntax.
func TestReportAnswerKeepsTheRailsWord(t *testing.T) {
	answer := transfer{ID: "w-1", TxHash: "0xrail"}
	for _, c := range []struct {
		name  string
		level slog.Level // the logger's
		err   error
		want  string // the level logged, "" for none
	}{
		{"resolved meanwhile", slog.LevelInfo, fmt.Errorf("%w: request key req-1: %w", ErrOutcomeNotRecorded, ErrResolvedMeanwhile), "ERROR"},
		{"released meanwhile", slog.LevelInfo, fmt.Errorf("%w: request key req-1: %w", ErrOutcomeNotRecorded, ErrReleasedMeanwhile), "ERROR"},
		{"another withdrawal", slog.LevelInfo, fmt.Errorf("%w: request key req-1: answer differs in Amount", ErrOutcomeNotRecorded), "ERROR"},
		{"errors only, closed meanwhile", slog.LevelError, fmt.Errorf("%w: %w", ErrOutcomeNotRecorded, ErrReleasedMeanwhile), "ERROR"},
		{"above errors", slog.LevelError + 4, ErrOutcomeNotRecorded, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			var buf bytes.Buffer
			seen := &keepEvents{}
			l := New[transfer](newMapStore(), slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: c.level})), seen)
			l.reportAnswer(context.Background(), "acme", "req-1", "w-1", time.Second, c.err, answer)
			require.Len(t, seen.got, 1)
			assert.Equal(t, observe.Event{Kind: observe.EventNotRecorded, Tenant: "acme", Key: "req-1", WithdrawalID: "w-1",
				Duration: time.Second, Err: c.err, Answer: answer}, seen.got[0])
			if c.want == "" {
				assert.Empty(t, buf.String())
				return
			}
			assert.Contains(t, buf.String(), "level="+c.want)
			assert.Contains(t, buf.String(), "tenant=acme key=req-1 withdrawal=w-1")
			assert.Contains(t, buf.String(), `0xrail`, "the answer in full")
		})
	}
	t.Run("no observer, the default logger", func(t *testing.T) {
		var buf bytes.Buffer
		defer slog.SetDefault(slog.Default())
		slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
		l := New[transfer](newMapStore(), nil, nil)
		l.reportAnswer(context.Background(), "", "req-1", "w-1", 0, ErrOutcomeNotRecorded, answer)
		assert.Contains(t, buf.String(), "level=ERROR")
		assert.Contains(t, buf.String(), `msg="outcome not recorded: the rail answered"`)
		assert.NotContains(t, buf.String(), "tenant=", "the default tenant is not named")
	})
	assert.Equal(t, `{"a":1}`, answerText(map[string]int{"a": 1}))
	assert.Equal(t, `map[string]func(){"f":(func())(nil)}`, answerText(map[string]func(){"f": nil}), "no JSON: Go syntax")
}
