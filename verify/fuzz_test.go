package verify

import (
	"testing"

	"github.com/idemledger/submissions"
)

// FuzzOperations reads its input as a sequence of operations, three bytes
// each, and runs them on a memory ledger and on Model: every result must
// agree, and so must the state at the end. The fuzzer, guided by coverage,
// looks for the sequence where they part. Seeds are in testdata/fuzz.
func FuzzOperations(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0x00, 0x00, 0x00, 0x00, 0x00, 0x00}) // the same Submit twice
	f.Add([]byte{0x00, 0x02, 0x00, 0x02, 0x02, 0x00, 0x00, 0x02, 0x00})
	f.Add([]byte{0x00, 0x02, 0x10, 0x01, 0x02, 0x00, 0x00, 0x00, 0x11})
	f.Fuzz(func(t *testing.T, data []byte) {
		s, m := submissions.New[W](quiet), &Model{}
		for i := 0; i+3 <= len(data) && i < 3*64; i += 3 {
			op := decodeOp(data[i : i+3])
			got, want := apply(s, op), m.Apply(op)
			if got != want {
				t.Fatalf("op %d %+v: got %+v; want %+v", i/3, op, got, want)
			}
		}
		for _, key := range keys {
			op := Op{Kind: Outcome, Key: key}
			if got, want := apply(s, op), m.Apply(op); got != want {
				t.Fatalf("Outcome(%s) at the end: got %+v; want %+v", key, got, want)
			}
		}
		for _, id := range ids {
			op := Op{Kind: ClaimedBy, W: W{ID: id}}
			if got, want := apply(s, op), m.Apply(op); got != want {
				t.Fatalf("ClaimedBy(%s) at the end: got %+v; want %+v", id, got, want)
			}
		}
	})
}

// decodeOp makes an operation of three bytes: the kind (the low three bits)
// and the send or the transaction (the others); the key and the withdrawal id;
// the amount, currency and destination.
func decodeOp(b []byte) Op {
	pick := func(list []string, n byte) string { return list[int(n)%len(list)] }
	op := Op{
		Kind: Kind((b[0] & 7) % 5),
		Key:  pick(keys, b[1]&0x0f),
		W: W{
			ID:       pick(ids, b[1]>>4),
			Amount:   pick(amounts, b[2]&0x07),
			Currency: pick(currency, (b[2]>>3)&0x03),
			Dest:     pick(dests, b[2]>>5),
		},
	}
	switch op.Kind {
	case Submit:
		op.Send = Send((b[0] >> 3) % 6)
	case Resolve:
		op.W.TxHash = pick(txs, b[0]>>3)
	}
	return op
}
