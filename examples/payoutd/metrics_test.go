package main

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMetrics(t *testing.T) {
	forEachStore(t, func(t *testing.T, db string) {
		var f fates
		r := newRail(0, 0, 0, 0, 0)
		r.decide = f.decide
		a := serve(t, db, r, 10*time.Second)
		before := metrics(t, a.url)
		assert.Equal(t, "0", before[`submissions_decisions_total{kind="sent"}`], "every kind from zero")
		assert.Equal(t, "0", before["submissions_sends_in_progress"])
		assert.Equal(t, "0", before[`submissions_keys_in_flight{send="ended"}`], "every state from zero")
		assert.Contains(t, before, "go_goroutines")
		assert.Contains(t, before, "process_cpu_seconds_total")

		id := create(t, a, "acme")
		res := do(t, "POST", a.url+"/withdrawals/"+id+"/submit", "acme", "k1", "")
		require.Equal(t, http.StatusCreated, res.status, "%s", res.body)
		res = do(t, "POST", a.url+"/withdrawals/"+id+"/submit", "acme", "k1", "")
		require.Equal(t, http.StatusCreated, res.status, "%s", res.body)
		refused := create(t, a, "acme")
		f.set(refused, fail)
		res = do(t, "POST", a.url+"/withdrawals/"+refused+"/submit", "acme", "k2", "")
		require.Equal(t, http.StatusBadGateway, res.status, "%s", res.body)

		after := metrics(t, a.url)
		for name, want := range map[string]string{
			`submissions_decisions_total{kind="claimed"}`:                       "2",
			`submissions_decisions_total{kind="sent"}`:                          "1",
			`submissions_decisions_total{kind="replayed"}`:                      "1",
			`submissions_decisions_total{kind="outcome_unknown"}`:               "1",
			`submissions_decisions_total{kind="conflict"}`:                      "0",
			`submissions_sends_in_progress`:                                     "0",
			`submissions_send_duration_seconds_count{result="sent"}`:            "1",
			`submissions_send_duration_seconds_count{result="outcome_unknown"}`: "1",
			`submissions_keys_in_flight{send="ended"}`:                          "1", // k2, stuck until resolved
			`submissions_keys_in_flight{send="answered"}`:                       "0",
			`submissions_keys_in_flight{send="running"}`:                        "0",
			`submissions_keys_in_flight{send="unknown"}`:                        "0",
		} {
			assert.Equal(t, want, after[name], name)
		}
		for name := range after {
			assert.NotContains(t, name, "acme", "no tenant label")
		}
	})
}

// metrics returns GET /metrics of the server at url: each series' value by
// its name and labels, as the text format writes them.
func metrics(t *testing.T, url string) map[string]string {
	t.Helper()
	res := do(t, "GET", url+"/metrics", "-", "-", "")
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	require.True(t, strings.HasPrefix(res.header.Get("Content-Type"), "text/plain"), res.header.Get("Content-Type"))
	series := map[string]string{}
	for line := range strings.Lines(string(res.body)) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		require.Positive(t, i, "a sample: %q", line)
		series[line[:i]] = line[i+1:]
	}
	return series
}
