package verify

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzOperations reads its input as a sequence of steps, four bytes each (see
// decodeStep), and runs them on three ledgers that share a memory store and
// on Model: every result must agree, and so must what every ledger reads at
// the end. The fuzzer, guided by coverage, looks for the sequence where they
// part. Seeds are in testdata/fuzz.
func FuzzOperations(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01}) // the same Submit twice, on two ledgers
	f.Add([]byte{0x00, 0x02, 0x00, 0x02, 0x02, 0x02, 0x00, 0x06, 0x00, 0x02, 0x00, 0x05})
	f.Add([]byte{0x00, 0x02, 0x10, 0x00, 0x01, 0x02, 0x00, 0x04, 0x00, 0x00, 0x11, 0x01})
	f.Add([]byte{0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x19, 0x04, 0x00, 0x00, 0x1a}) // the same Submit in two tenants, then ClaimedBy
	// Wait: unknown, abandoned (on another ledger), done
	f.Add([]byte{0x07, 0x00, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00, 0x07, 0x00, 0x00, 0x02, 0x00, 0x11, 0x00, 0x00, 0x07, 0x01, 0x00, 0x01})
	// Wait after a Settle that failed, on another ledger; after one that
	// recorded the answer and then panicked
	f.Add([]byte{0xe0, 0x00, 0x00, 0x00, 0x07, 0x00, 0x00, 0x02, 0xf8, 0x11, 0x00, 0x01, 0x07, 0x01, 0x00, 0x00})
	// In a rail: Waits for the key being sent, on its sender and another
	// ledger, then a Resolve elsewhere, which ends them; again with a Release
	// by the ledger of other marks
	f.Add([]byte{0x00, 0x00, 0x00, 0x00, 0x07, 0x00, 0x00, 0x04, 0x07, 0x00, 0x00, 0x06, 0x09, 0x00, 0x00, 0x05, 0x07, 0x00, 0x00, 0x05})
	f.Add([]byte{0x00, 0x01, 0x00, 0x00, 0x07, 0x01, 0x00, 0x04, 0x02, 0x01, 0x00, 0x06, 0x07, 0x01, 0x00, 0x05})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := &runner{lanes: memoryLanes()}
		require.NoError(t, r.runAll(decodeSteps(data)))
	})
}

// decodeSteps reads data as up to 64 steps of four bytes:
//
//   - the kind (the low three bits, see fuzzKind), and the send of a
//     Submit (see fuzzSend) or the resolution of a Resolve (the others);
//   - the key (the low four bits) and the withdrawal id;
//   - the amount (the low three bits), currency (two) and destination;
//   - the lane (the low two bits), whether the step is one that the rail
//     of the last Submit before it makes while it sends (bit 2), and the
//     tenant (the others, see fuzzTenant).
//
// A step in a rail whose Submit has none (SendNil), or that follows no
// Submit, runs on its own. A Wait in a rail for the key being sent blocks,
// and runs on beside the steps after it (see pending).
func decodeSteps(data []byte) []step {
	pick := func(list []string, n byte) string { return list[int(n)%len(list)] }
	var steps []step
	outer := -1 // the Submit whose rail makes the steps marked as its own
	for i := 0; i+4 <= len(data) && i < 4*64; i += 4 {
		b := data[i : i+4]
		st := step{
			op: Op{
				Kind:   fuzzKind(b[0] & 7),
				Tenant: fuzzTenant(b[3] >> 3),
				Key:    pick(keys, b[1]&0x0f),
				W: W{
					ID:       pick(ids, b[1]>>4),
					Amount:   pick(amounts, b[2]&0x07),
					Currency: pick(currency, (b[2]>>3)&0x03),
					Dest:     pick(dests, b[2]>>5),
				},
			},
			lane: int(b[3]&3) % 3,
		}
		switch st.op.Kind {
		case Submit:
			st.op.Send = fuzzSend(b[0] >> 3)
		case Resolve:
			st.op.W = resolution(st.op.W, st.op.Key, int(b[0]>>3))
		}
		if b[3]&4 != 0 && outer >= 0 {
			steps[outer].during = append(steps[outer].during, st)
			continue
		}
		steps = append(steps, st)
		outer = -1
		if st.op.Kind == Submit && st.op.Send != SendNil {
			outer = len(steps) - 1
		}
	}
	return steps
}

// fuzzKind reads n, three bits, as a kind: Submit, Resolve, Release, Outcome
// and ClaimedBy (0-4), again Submit, Resolve (5, 6), and Wait (7, Release
// before there was Wait, which no seed in testdata/fuzz uses).
func fuzzKind(n byte) Kind {
	if n == 7 {
		return Wait
	}
	return Kind(n % 5)
}

// fuzzSend reads n, five bits, as a Send: the rail's (SendOK to
// SendNotSent) by n modulo 8 for 0-27, and the four faults of the store's
// Settle for 28-31.
func fuzzSend(n byte) Send {
	if n >= 28 {
		return SettleFails + Send(n-28)
	}
	return Send(int(n) % (int(SendNotSent) + 1))
}

// fuzzTenant reads n, five bits, as a tenant: by its low three, the default
// tenant (0-2), t1 (3-5), another valid tenant (6) or one refused (7), the
// last two chosen by the high two bits. Keys and withdrawals are read alike
// in every tenant.
func fuzzTenant(n byte) string {
	pick := func(list []string) string { return list[int(n>>3)%len(list)] }
	switch n & 7 {
	case 0, 1, 2:
		return ""
	case 3, 4, 5:
		return "t1"
	case 6:
		return pick(otherTenants)
	}
	return pick(badTenants)
}
