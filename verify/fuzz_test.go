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
	f.Fuzz(func(t *testing.T, data []byte) {
		r := &runner{lanes: memoryLanes()}
		require.NoError(t, r.runAll(decodeSteps(data)))
	})
}

// decodeSteps reads data as up to 64 steps of four bytes:
//
//   - the kind (the low three bits, see fuzzKind), and the send of a
//     Submit or the resolution of a Resolve (the others);
//   - the key (the low four bits) and the withdrawal id;
//   - the amount (the low three bits), currency (two) and destination;
//   - the lane (the low two bits), whether the step is one that the rail
//     of the last Submit before it makes while it sends (bit 2), and the
//     tenant (the others, see fuzzTenant).
//
// A step in a rail whose Submit has none (SendNil), or that follows no
// Submit, runs on its own, and so does a Wait, which in a rail could wait for
// the send that makes it.
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
			st.op.Send = Send(int(b[0]>>3) % (int(SendBoth) + 1))
		case Resolve:
			st.op.W = resolution(st.op.W, st.op.Key, int(b[0]>>3))
		}
		if b[3]&4 != 0 && outer >= 0 && st.op.Kind != Wait {
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
