package verify

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

// The model-based checks: random sequences of steps, each a call on one of
// several ledgers that share a store, some of them made by a rail while its
// Submit sends, run on the ledgers and on Model. rapid shrinks a sequence on
// which they differ to a minimal one.

// drawW draws a withdrawal for key: mostly key's own, as a client's retry
// has it, spelled one of several ways; now and then any of the world's.
func drawW(t *rapid.T, key string) W {
	if rapid.IntRange(0, 5).Draw(t, "another withdrawal") == 0 {
		return W{
			ID:       rapid.SampledFrom(ids).Draw(t, "id"),
			Amount:   rapid.SampledFrom(amounts).Draw(t, "amount"),
			Currency: rapid.SampledFrom(currency).Draw(t, "currency"),
			Dest:     rapid.SampledFrom(dests).Draw(t, "dest"),
		}
	}
	return W{
		ID:       ids[slices.Index(keys, key)%len(ids)],
		Amount:   rapid.SampledFrom(amounts[:3]).Draw(t, "amount"),
		Currency: rapid.SampledFrom(currency[:2]).Draw(t, "currency"),
		Dest:     dests[0],
	}
}

// drawTenant draws a tenant: mostly one of tenants, now and then another
// valid one or one that is refused.
func drawTenant(t *rapid.T) string {
	switch n := rapid.IntRange(0, 15).Draw(t, "tenant"); {
	case n < 14:
		return tenants[n%len(tenants)]
	case n == 14:
		return rapid.SampledFrom(otherTenants).Draw(t, "other tenant")
	}
	return rapid.SampledFrom(badTenants).Draw(t, "bad tenant")
}

// drawStep draws a step on one of lanes ledgers. A Submit's rail makes up
// to three steps of its own while it works, when depth allows: most of them
// on the Submit's key, half of them in its tenant. Keys and withdrawals are
// drawn alike in every tenant.
func drawStep(t *rapid.T, lanes int, tenant, key string, depth int) step {
	outer := key == ""
	if outer || rapid.IntRange(0, 3).Draw(t, "other key") == 0 {
		key = rapid.SampledFrom(keys).Draw(t, "key")
	}
	if outer || rapid.Bool().Draw(t, "other tenant") {
		tenant = drawTenant(t)
	}
	kinds := []Kind{Submit, Resolve, Release, Outcome, ClaimedBy, Prune, Wait}
	if depth == 0 { // in a rail: mostly what can change the claim being sent, and Waits, which may block for it
		kinds = []Kind{Submit, Submit, Resolve, Release, Release, Release, Outcome, Prune, Wait, Wait}
	}
	st := step{
		op:   Op{Kind: rapid.SampledFrom(kinds).Draw(t, "kind"), Tenant: tenant, Key: key, W: drawW(t, key)},
		lane: rapid.IntRange(0, lanes-1).Draw(t, "lane"),
	}
	switch st.op.Kind {
	case Prune: // through the Admin of a ledger on the store itself, which is a Pruner
		st.lane = 0
	case Submit:
		st.op.Send = Send(rapid.IntRange(0, int(lastSend)).Draw(t, "send"))
		if depth > 0 && st.op.Send != SendNil {
			for range rapid.IntRange(0, 3).Draw(t, "during") {
				st.during = append(st.during, drawStep(t, lanes, tenant, key, depth-1))
			}
		}
	case Resolve:
		st.op.W = resolution(st.op.W, key, rapid.IntRange(0, 2).Draw(t, "tx"))
	}
	return st
}

// check runs random sequences of steps on the ledgers newLanes gives and on
// the model, rounds times as many as rapid checks by default (100, or
// -rapid.checks), and fails at the first result that differs, and at the end
// if what the ledgers read of any key or withdrawal differs.
func check(t *testing.T, rounds int, newLanes func(t *rapid.T) []lane) {
	for range rounds {
		rapid.Check(t, func(t *rapid.T) {
			r := &runner{lanes: newLanes(t)}
			for range rapid.IntRange(1, 60).Draw(t, "steps") {
				require.NoError(t, r.run(drawStep(t, len(r.lanes), "", "", 1)))
			}
			require.NoError(t, r.finish())
		})
	}
}

func TestMemoryLedgersFollowTheModel(t *testing.T) {
	check(t, 10, func(*rapid.T) []lane { return memoryLanes() })
}
