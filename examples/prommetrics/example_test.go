package prommetrics_test

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/idemledger/submissions"
	"github.com/idemledger/submissions/examples/prommetrics"
)

func Example() {
	reg := prometheus.NewRegistry()
	obs, err := prommetrics.New(reg)
	if err != nil {
		panic(err)
	}
	ledger := submissions.New[payout](submissions.WithObserver(obs),
		submissions.WithLogger(slog.New(slog.DiscardHandler)))
	send := func(_ context.Context, p payout) (payout, error) { return sent(p), nil }

	ctx := context.Background()
	w := newPayout("w-1")
	_, _ = ledger.Submit(ctx, "tap-1", w, send) // sent
	_, _ = ledger.Submit(ctx, "tap-1", w, send) // a double tap: replayed
	_, _ = ledger.Submit(ctx, "tap-2", w, send) // a second client: conflict

	// What GET /metrics would show, less the help, the buckets, the sums and
	// the counts at zero.
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	lines := bufio.NewScanner(rec.Body)
	for lines.Scan() {
		switch line := lines.Text(); {
		case strings.HasPrefix(line, "#"), strings.Contains(line, "_bucket"), strings.Contains(line, "_sum"):
		case strings.HasSuffix(line, " 0") && !strings.HasPrefix(line, "submissions_sends_in_progress"):
		default:
			fmt.Println(line)
		}
	}
	// Output:
	// submissions_decisions_total{kind="claimed"} 1
	// submissions_decisions_total{kind="conflict"} 1
	// submissions_decisions_total{kind="replayed"} 1
	// submissions_decisions_total{kind="sent"} 1
	// submissions_send_duration_seconds_count{result="sent"} 1
	// submissions_sends_in_progress 0
}
