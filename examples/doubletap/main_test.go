package main

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestDemoSendsEachWithdrawalOnce(t *testing.T) {
	var out strings.Builder
	calls, err := run(context.Background(), &out)
	require.NoError(t, err, out.String())
	assert.Equal(t, map[string]int{"wd-1": 1, "wd-2": 1, "wd-3": 1}, calls, "rail transfers\n%s", out.String())
	for _, want := range []string{
		"claimed by request key tap-1",
		"it looks up tap-1 instead: sent 0xwd-1-1",
		"its retry: submission in flight",
		`level=WARN msg="outcome unknown" key=req-3 withdrawal=wd-3`,
		"is claimed by request key req-3",
		"the retry now: sent 0xwd-3-1",
	} {
		assert.Contains(t, out.String(), want)
	}
}
