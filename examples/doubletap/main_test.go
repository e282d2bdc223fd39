package main

import (
	"context"
	"strings"
	"testing"
)

func TestDemoSendsEachWithdrawalOnce(t *testing.T) {
	var out strings.Builder
	calls, err := run(context.Background(), &out)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	for _, id := range []string{"wd-1", "wd-2", "wd-3"} {
		if calls[id] != 1 {
			t.Errorf("rail transfers for %s: got %d; want 1\n%s", id, calls[id], out.String())
		}
	}
	if len(calls) != 3 {
		t.Errorf("rail transfers: got %v; want wd-1, wd-2 and wd-3 once each", calls)
	}
	for _, want := range []string{
		"claimed by request key tap-1",
		"it looks up tap-1 instead: sent 0xwd-1-1",
		"its retry: submission in flight",
		"level=WARN msg=\"send failed; the outcome is unknown and the key stays claimed\" key=req-3 withdrawal=wd-3",
		"is claimed by request key req-3",
		"the retry now: sent 0xwd-3-1",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
