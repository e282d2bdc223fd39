package ledgertest

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemledger/submissions/driver"
)

// Reads: Outcome and ClaimedBy.
var readTests = []test{
	{"Reads", testReads},
}

func testReads(t *testing.T, newStore Factory) {
	f := setUp(t, newStore)
	requireOutcome(t, f.s, "req-1", Withdrawal{}, false)
	requireHolder(t, f.s, "w-1", "")
	strand(t, f.s, "req-1", f.w)
	requireOutcome(t, f.s, "req-1", Withdrawal{}, false)
	requireHolder(t, f.s, "w-1", "req-1")
	requireHolder(t, f.s, "W-1", "")
	out, err := f.s.Submit(bg, "req-2", newWithdrawal("w-2"), f.rail.send)
	require.NoError(t, err)
	requireOutcome(t, f.s, "req-2", out, true)
	// No fingerprint can carry these ids, so no key holds them.
	for _, id := range []string{"", " w-1", "w-\xff", "w\x00", strings.Repeat("i", driver.MaxWithdrawalIDLen+1)} {
		requireHolder(t, f.s, id, "")
	}
}
