package engine

import (
	"bytes"
	"context"
	"log/slog"
	"testing"

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
