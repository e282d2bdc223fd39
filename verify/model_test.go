package verify

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The model is the specification the other checks hold the ledger to, so
// its own rules are pinned here, one scenario each, as plain sequences.

var (
	w1  = W{ID: "w1", Amount: "25.00", Currency: "USDC", Dest: "d1"}
	w1b = W{ID: "w1", Amount: "25", Currency: "usdc", Dest: "d1"} // w1 spelled another way
	w1d = W{ID: "w1", Amount: "25.00", Currency: "USDC", Dest: "d2"}
	w2  = W{ID: "w2", Amount: "10", Currency: "EUR", Dest: "d1"}
)

// apply applies ops to m in order and returns their results.
func applyAll(m *Model, ops ...Op) []Result {
	var out []Result
	for _, op := range ops {
		out = append(out, m.Apply(op))
	}
	return out
}

func TestModelSubmit(t *testing.T) {
	t.Run("a fresh key claims, sends and records", func(t *testing.T) {
		var m Model
		got := applyAll(&m,
			Op{Kind: Submit, Key: "k1", W: w1},
			Op{Kind: Outcome, Key: "k1"},
			Op{Kind: ClaimedBy, W: W{ID: "w1"}})
		assert.Equal(t, []Result{{Outcome: Sent(w1, "k1")}, {OK: true, Outcome: Sent(w1, "k1")}, {OK: true, Holder: "k1"}}, got)
	})
	t.Run("a nil send records the request", func(t *testing.T) {
		var m Model
		assert.Equal(t, Result{Outcome: w1}, m.Apply(Op{Kind: Submit, Key: "k1", W: w1, Send: SendNil}))
	})
	t.Run("a repeat replays, however the withdrawal is spelled", func(t *testing.T) {
		var m Model
		m.Apply(Op{Kind: Submit, Key: "k1", W: w1})
		assert.Equal(t, Result{Outcome: Sent(w1, "k1")}, m.Apply(Op{Kind: Submit, Key: "k1", W: w1b, Send: SendFail}))
	})
	t.Run("a key of another withdrawal is refused", func(t *testing.T) {
		var m Model
		m.Apply(Op{Kind: Submit, Key: "k1", W: w1})
		assert.Equal(t, Result{Err: Idempotency}, m.Apply(Op{Kind: Submit, Key: "k1", W: w1d}))
	})
	t.Run("another key for a claimed withdrawal is refused and names the holder", func(t *testing.T) {
		var m Model
		m.Apply(Op{Kind: Submit, Key: "k1", W: w1, Send: SendFail})
		assert.Equal(t, Result{Err: Conflict, Holder: "k1"}, m.Apply(Op{Kind: Submit, Key: "k2", W: w1b}))
		assert.Equal(t, Result{}, m.Apply(Op{Kind: Outcome, Key: "k2"}), "the loser leaves no trace")
	})
	t.Run("a rail that moved nothing frees the key and the withdrawal", func(t *testing.T) {
		var m Model
		got := applyAll(&m,
			Op{Kind: Submit, Key: "k1", W: w1, Send: SendNotSent},
			Op{Kind: ClaimedBy, W: w1},
			Op{Kind: Submit, Key: "k1", W: w1})
		assert.Equal(t, []Result{{Err: NotSent}, {}, {Outcome: Sent(w1, "k1")}}, got)
	})
	for send, want := range map[Send]Result{
		SendFail:     {Err: OutcomeUnknown},
		SendBoth:     {Err: OutcomeUnknown},
		SendPanic:    {Err: SendPanicked},
		SendWrong:    {Err: NotRecorded, Outcome: Wrong(w1)},
		SettleFails:  {Err: NotRecorded, Outcome: Sent(w1, "k1")},
		SettlePanics: {Err: StorePanicked},
	} {
		t.Run("a rail that "+sendNames[send]+" leaves the key in flight", func(t *testing.T) {
			var m Model
			got := applyAll(&m,
				Op{Kind: Submit, Key: "k1", W: w1, Send: send},
				Op{Kind: Submit, Key: "k1", W: w1},
				Op{Kind: Outcome, Key: "k1"},
				Op{Kind: Submit, Key: "k2", W: w1})
			assert.Equal(t, []Result{want, {Err: InFlight}, {}, {Err: Conflict, Holder: "k1"}}, got)
		})
	}
	t.Run("a rail that answers after the caller's ctx ended has its answer recorded", func(t *testing.T) {
		var m Model
		got := applyAll(&m,
			Op{Kind: Submit, Key: "k1", W: w1, Send: SendLate},
			Op{Kind: Submit, Key: "k1", W: w1},
			Op{Kind: Release, Key: "k1", Force: true},
			Op{Kind: Submit, Key: "k2", W: w1})
		assert.Equal(t, []Result{{Outcome: Sent(w1, "k1")}, {Outcome: Sent(w1, "k1")}, {Err: Idempotency}, {Err: Conflict, Holder: "k1"}}, got)
	})
	for send, want := range map[Send]Result{
		SettleFailsAfter:  {Err: NotRecorded, Outcome: Sent(w1, "k1")},
		SettlePanicsAfter: {Err: StorePanicked},
	} {
		t.Run("a store that "+sendNames[send]+" has recorded the answer", func(t *testing.T) {
			var m Model
			got := applyAll(&m,
				Op{Kind: Submit, Key: "k1", W: w1, Send: send},
				Op{Kind: Submit, Key: "k1", W: w1},
				Op{Kind: Outcome, Key: "k1"})
			assert.Equal(t, []Result{want, {Outcome: Sent(w1, "k1")}, {OK: true, Outcome: Sent(w1, "k1")}}, got)
		})
	}
}

func TestModelClaims(t *testing.T) {
	claim := func(key string, w W, ledger, id int) Op {
		return Op{Kind: Claim, Key: key, W: w, Ledger: ledger, ClaimID: id}
	}
	settle := func(key string, w W, ledger, id int) Op {
		return Op{Kind: Settle, Key: key, W: w, Ledger: ledger, ClaimID: id}
	}
	t.Run("an answer is recorded on its own claim", func(t *testing.T) {
		var m Model
		got := applyAll(&m, claim("k1", w1, 0, 1), settle("k1", w1, 0, 1))
		assert.Equal(t, []Result{{Claimed: true}, {Outcome: Sent(w1, "k1")}}, got)
	})
	t.Run("an answer after a release and a new claim is not recorded on it", func(t *testing.T) {
		var m Model
		got := applyAll(&m,
			claim("k1", w1, 0, 1),
			Op{Kind: Release, Key: "k1", Ledger: 1, Force: true},
			claim("k1", w1b, 1, 2),
			settle("k1", w1, 0, 1),
			Op{Kind: Outcome, Key: "k1"},
			settle("k1", w1b, 1, 2))
		assert.Equal(t, []Result{
			{Claimed: true}, {}, {Claimed: true},
			{Err: NotRecorded, Outcome: Sent(w1, "k1")},
			{},
			{Outcome: Sent(w1b, "k1")},
		}, got)
	})
	t.Run("an answer after a release is not recorded", func(t *testing.T) {
		var m Model
		got := applyAll(&m, claim("k1", w1, 0, 1), Op{Kind: Release, Key: "k1", Ledger: 1, Force: true}, settle("k1", w1, 0, 1), Op{Kind: ClaimedBy, W: w1})
		assert.Equal(t, []Result{{Claimed: true}, {}, {Err: NotRecorded, Outcome: Sent(w1, "k1")}, {}}, got)
	})
	t.Run("an answer after a Resolve is accepted only if it is the same outcome", func(t *testing.T) {
		var m Model
		got := applyAll(&m,
			claim("k1", w1, 0, 1), Op{Kind: Resolve, Key: "k1", W: Sent(w1, "k1")}, settle("k1", w1, 0, 1),
			claim("k2", w2, 0, 2), Op{Kind: Resolve, Key: "k2", W: w2}, settle("k2", w2, 0, 2),
			Op{Kind: Outcome, Key: "k2"})
		assert.Equal(t, []Result{
			{Claimed: true}, {}, {Outcome: Sent(w1, "k1")},
			{Claimed: true}, {}, {Err: NotRecorded, Outcome: Sent(w2, "k2")},
			{OK: true, Outcome: w2},
		}, got)
	})
	t.Run("a ledger refuses to release the claim it is sending", func(t *testing.T) {
		var m Model
		got := applyAll(&m,
			claim("k1", w1, 0, 1),
			Op{Kind: Release, Key: "k1", Ledger: 0, Force: true},
			settle("k1", w1, 0, 1),
			claim("k2", w2, 0, 2),
			Op{Kind: Release, Key: "k2", Ledger: 1, Force: true}, // another ledger's marks
			settle("k2", w2, 0, 2))
		assert.Equal(t, []Result{
			{Claimed: true}, {Err: InFlight}, {Outcome: Sent(w1, "k1")},
			{Claimed: true}, {}, {Err: NotRecorded, Outcome: Sent(w2, "k2")},
		}, got)
	})
	t.Run("a ledger's mark is on the claim, not the key", func(t *testing.T) {
		var m Model
		got := applyAll(&m,
			claim("k1", w1, 0, 1),
			Op{Kind: Release, Key: "k1", Ledger: 1, Force: true},
			claim("k1", w1, 1, 2),
			Op{Kind: Release, Key: "k1", Ledger: 0, Force: true}, // still sends claim 1, not claim 2
			Op{Kind: Release, Key: "k1", Ledger: 1, Force: true}) // nothing to release
		assert.Equal(t, []Result{{Claimed: true}, {}, {Claimed: true}, {}, {}}, got)
	})
	t.Run("a store that fails as it records an answer records it only on its own claim", func(t *testing.T) {
		for send, failed := range map[Send]func(w W, key string) Result{
			SettleFailsAfter:  func(w W, key string) Result { return Result{Err: NotRecorded, Outcome: Sent(w, key)} },
			SettlePanicsAfter: func(W, string) Result { return Result{Err: StorePanicked} },
		} {
			var m Model
			s1, s2 := settle("k1", w1, 0, 1), settle("k2", w2, 0, 2)
			s1.Send, s2.Send = send, send
			got := applyAll(&m,
				claim("k1", w1, 0, 1), Op{Kind: Resolve, Key: "k1", W: w1}, s1,
				claim("k2", w2, 0, 2), Op{Kind: Release, Key: "k2", Ledger: 1, Force: true}, s2,
				Op{Kind: Outcome, Key: "k1"}, Op{Kind: Outcome, Key: "k2"}, Op{Kind: ClaimedBy, W: w2})
			assert.Equal(t, []Result{
				{Claimed: true}, {}, failed(w1, "k1"),
				{Claimed: true}, {}, failed(w2, "k2"),
				{OK: true, Outcome: w1}, {}, {},
			}, got, sendNames[send])
		}
		for _, send := range []Send{SettleFailsAfter, SettlePanicsAfter} {
			m := &Model{}
			op := settle("k1", w1, 0, 1)
			op.Send = send
			m.Apply(claim("k1", w1, 0, 1))
			m.Apply(op)
			assert.Equal(t, Result{OK: true, Outcome: Sent(w1, "k1")}, m.Apply(Op{Kind: Outcome, Key: "k1"}), sendNames[op.Send])
		}
	})
	t.Run("a send that moved nothing releases its own claim, still in flight, only", func(t *testing.T) {
		var m Model
		notSent := func(key string, w W, ledger, id int) Op {
			op := settle(key, w, ledger, id)
			op.Send = SendNotSent
			return op
		}
		got := applyAll(&m,
			claim("k1", w1, 0, 1), notSent("k1", w1, 0, 1), Op{Kind: ClaimedBy, W: w1}, Op{Kind: Wait, Key: "k1"},
			claim("k1", w1, 0, 2), Op{Kind: Release, Key: "k1", Ledger: 1, Force: true}, claim("k2", w1, 1, 3), notSent("k1", w1, 0, 2), Op{Kind: ClaimedBy, W: w1},
			claim("k3", w2, 0, 4), Op{Kind: Resolve, Key: "k3", W: w2}, notSent("k3", w2, 0, 4), Op{Kind: Outcome, Key: "k3"})
		assert.Equal(t, []Result{
			{Claimed: true}, {Err: NotSent}, {}, {Err: UnknownKey},
			{Claimed: true}, {}, {Claimed: true}, {Err: NotSent}, {OK: true, Holder: "k2"},
			{Claimed: true}, {}, {Err: NotSent}, {OK: true, Outcome: w2},
		}, got)
	})
	t.Run("a send's end clears its mark whatever the rail did", func(t *testing.T) {
		for send := SendOK; send <= lastSend; send++ {
			var m Model
			m.Apply(claim("k1", w1, 0, 1))
			op := settle("k1", w1, 0, 1)
			op.Send = send
			m.Apply(op)
			assert.Empty(t, m.marks, sendNames[send])
		}
	})
}

func TestModelResolveAndRelease(t *testing.T) {
	t.Run("Resolve of an unknown key records it and claims the withdrawal", func(t *testing.T) {
		var m Model
		got := applyAll(&m,
			Op{Kind: Resolve, Key: "k1", W: Sent(w1, "x")},
			Op{Kind: Outcome, Key: "k1"},
			Op{Kind: Resolve, Key: "k2", W: w1},
			Op{Kind: Resolve, Key: "k1", W: Sent(w1, "x")},
			Op{Kind: Resolve, Key: "k1", W: Sent(w1, "y")},
			Op{Kind: Resolve, Key: "k1", W: w1d},
			Op{Kind: Release, Key: "k1"})
		assert.Equal(t, []Result{
			{}, {OK: true, Outcome: Sent(w1, "x")},
			{Err: Conflict, Holder: "k1"},
			{}, {Err: Idempotency}, {Err: Idempotency},
			{Err: Idempotency},
		}, got)
	})
	t.Run("Release drops an idle claim and frees the withdrawal; an unknown key is a no-op", func(t *testing.T) {
		var m Model
		got := applyAll(&m,
			Op{Kind: Release, Key: "k1"},
			Op{Kind: Submit, Key: "k1", W: w1, Send: SendFail, ClaimID: 1},
			Op{Kind: Release, Key: "k1"},
			Op{Kind: ClaimedBy, W: w1},
			Op{Kind: Submit, Key: "k2", W: w1, ClaimID: 2})
		assert.Equal(t, []Result{{}, {Err: OutcomeUnknown}, {}, {}, {Outcome: Sent(w1, "k2")}}, got)
	})
}

func TestModelStep(t *testing.T) {
	var m Model
	m.Apply(Op{Kind: Claim, Key: "k1", W: w1, ClaimID: 1})
	before := m.String()

	ok, next := m.Step(Op{Kind: Resolve, Key: "k1", W: w1}, Result{})
	require.True(t, ok)
	resolved := next
	assert.Equal(t, Result{OK: true, Outcome: w1}, next.Apply(Op{Kind: Outcome, Key: "k1"}))
	assert.Equal(t, before, m.String(), "Step changes nothing")

	ok, next = m.Step(Op{Kind: Resolve, Key: "k1", W: w1b}, Result{Err: InFlight})
	require.True(t, ok, "a Resolve may find its key released under it")
	assert.True(t, next.Equal(&m))

	for _, tc := range []struct {
		name string
		op   Op
		got  Result
	}{
		{"of another withdrawal", Op{Kind: Resolve, Key: "k1", W: w1d}, Result{Err: InFlight}},
		{"of an unknown key", Op{Kind: Resolve, Key: "k2", W: w2}, Result{Err: InFlight}},
		{"by a Release", Op{Kind: Release, Key: "k1", Ledger: 1, Force: true}, Result{Err: InFlight}},
		{"of a wrong answer", Op{Kind: Submit, Key: "k2", W: w2}, Result{Outcome: w2}},
	} {
		ok, _ := m.Step(tc.op, tc.got)
		assert.False(t, ok, "InFlight %s", tc.name)
	}

	var done Model
	done.Apply(Op{Kind: Submit, Key: "k1", W: w1})
	ok, _ = done.Step(Op{Kind: Resolve, Key: "k1", W: Sent(w1, "k1")}, Result{Err: InFlight})
	assert.False(t, ok, "a key with an outcome is not in flight")

	for _, got := range []Result{{Err: OutcomeUnknown}, {Err: UnknownKey}, {Outcome: w1}} {
		ok, _ = m.Step(Op{Kind: Wait, Key: "k1"}, got)
		assert.False(t, ok, "a Wait for a claim being sent takes effect later, not as %+v", got)
	}
	ok, next = resolved.Step(Op{Kind: Wait, Key: "k1"}, Result{Outcome: w1})
	require.True(t, ok, "once the claim is resolved")
	assert.True(t, next.Equal(resolved), "Wait changes nothing")
}

func TestModelCloneEqualString(t *testing.T) {
	var m Model
	m.Apply(Op{Kind: Claim, Key: "k1", W: w1, ClaimID: 1})
	c := m.Clone()
	require.True(t, c.Equal(&m))
	require.Equal(t, m.String(), c.String())

	c.Apply(Op{Kind: Settle, Key: "k1", W: w1, ClaimID: 1})
	assert.False(t, c.Equal(&m), "a clone shares nothing")
	assert.NotEqual(t, m.String(), c.String())
	assert.Equal(t, Result{}, m.Apply(Op{Kind: Outcome, Key: "k1"}))

	a, b := &Model{}, &Model{}
	a.Apply(Op{Kind: Submit, Key: "k1", W: w1, Send: SendFail, ClaimID: 1})
	b.Apply(Op{Kind: Submit, Key: "k1", W: w1, Send: SendFail, ClaimID: 2})
	assert.False(t, a.Equal(b), "claims differ by their id")
	assert.NotEqual(t, a.String(), b.String())
}

func TestModelTenants(t *testing.T) {
	in := func(tenant string, op Op) Op {
		op.Tenant = tenant
		return op
	}
	t.Run("the same key and withdrawal in two tenants are unrelated", func(t *testing.T) {
		var m Model
		got := applyAll(&m,
			in("", Op{Kind: Submit, Key: "k1", W: w1, Send: SendFail, ClaimID: 1}),
			in("t1", Op{Kind: Submit, Key: "k1", W: w1, ClaimID: 2}),
			in("t1", Op{Kind: Submit, Key: "k2", W: w1d, ClaimID: 3}),
			in("", Op{Kind: Outcome, Key: "k1"}),
			in("t1", Op{Kind: Outcome, Key: "k1"}),
			in("t2", Op{Kind: ClaimedBy, W: w1}),
			in("t2", Op{Kind: Resolve, Key: "k2", W: w1}))
		assert.Equal(t, []Result{
			{Err: OutcomeUnknown},
			{Outcome: Sent(w1, "k1")},
			{Err: Conflict, Holder: "k1", Tenant: "t1"},
			{},
			{OK: true, Outcome: Sent(w1, "k1")},
			{},
			{},
		}, got)
	})
	t.Run("a release frees its own tenant's claim only", func(t *testing.T) {
		var m Model
		got := applyAll(&m,
			in("", Op{Kind: Submit, Key: "k1", W: w1, Send: SendFail, ClaimID: 1}),
			in("t1", Op{Kind: Submit, Key: "k1", W: w1, Send: SendFail, ClaimID: 2}),
			in("t1", Op{Kind: Release, Key: "k1"}),
			in("", Op{Kind: ClaimedBy, W: w1}),
			in("t1", Op{Kind: ClaimedBy, W: w1}))
		assert.Equal(t, []Result{{Err: OutcomeUnknown}, {Err: OutcomeUnknown}, {}, {OK: true, Holder: "k1"}, {}}, got)
	})
	t.Run("an invalid tenant is refused and changes nothing", func(t *testing.T) {
		for _, tenant := range badTenants {
			var m Model
			m.Apply(Op{Kind: Submit, Key: "k1", W: w1, Send: SendFail, ClaimID: 1})
			before := m.String()
			for _, op := range []Op{
				{Kind: Submit, Key: "k2", W: w2, ClaimID: 2}, {Kind: Claim, Key: "k2", W: w2, ClaimID: 3},
				{Kind: Settle, Key: "k1", W: w1, ClaimID: 1}, {Kind: Resolve, Key: "k1", W: w1},
				{Kind: Release, Key: "k1"}, {Kind: Outcome, Key: "k1"}, {Kind: ClaimedBy, W: w1},
			} {
				assert.Equal(t, Result{Err: InvalidTenant}, m.Apply(in(tenant, op)), "%s in %q", kindNames[op.Kind], tenant)
			}
			assert.Equal(t, before, m.String())
		}
	})
	t.Run("a tenant id is exact, at most 64 bytes of UTF-8 without NUL", func(t *testing.T) {
		for _, tenant := range append(append([]string{}, tenants...), otherTenants...) {
			assert.True(t, ValidTenant(tenant), "%q", tenant)
		}
		for _, tenant := range badTenants {
			assert.False(t, ValidTenant(tenant), "%q", tenant)
		}
		var m Model
		m.Apply(Op{Kind: Resolve, Tenant: "t1", Key: "k1", W: w1})
		assert.Equal(t, Result{}, m.Apply(Op{Kind: Outcome, Tenant: "t1 ", Key: "k1"}), "t1 and t1 with a space are two tenants")
	})
	t.Run("states of two tenants differ", func(t *testing.T) {
		a, b := &Model{}, &Model{}
		a.Apply(Op{Kind: Resolve, Key: "k1", W: w1})
		b.Apply(Op{Kind: Resolve, Tenant: "t1", Key: "k1", W: w1})
		assert.False(t, a.Equal(b))
		assert.NotEqual(t, a.String(), b.String())
	})
}

func TestModelPrune(t *testing.T) {
	var m Model
	got := applyAll(&m,
		Op{Kind: Submit, Key: "k1", W: w1},
		Op{Kind: Submit, Key: "k2", W: w2, Send: SendFail}, // in flight: never pruned
		Op{Kind: Prune, Tenant: "\x00"},                    // across tenants, whatever op.Tenant says
		Op{Kind: Submit, Key: "k1", W: w1},
		Op{Kind: Submit, Key: "k1", W: w2},
		Op{Kind: Submit, Key: "k3", W: w1},
		Op{Kind: Resolve, Key: "k1", W: Sent(w1, "k1")},
		Op{Kind: Resolve, Key: "k3", W: Sent(w1, "k3")},
		Op{Kind: Release, Key: "k1"},
		Op{Kind: Outcome, Key: "k1"},
		Op{Kind: ClaimedBy, W: W{ID: "w1"}},
		Op{Kind: Submit, Key: "k2", W: w2},
		Op{Kind: Submit, Key: "k1", W: w1, Tenant: "t1"})
	assert.Equal(t, []Result{
		{Outcome: Sent(w1, "k1")}, {Err: OutcomeUnknown}, {},
		{Err: Pruned}, {Err: Pruned}, {Err: Conflict, Holder: "k1", Pruned: true},
		{Err: Pruned}, {Err: Conflict, Holder: "k1", Pruned: true},
		{Err: Pruned}, {Err: Pruned}, {OK: true, Holder: "k1"},
		{Err: InFlight}, {Outcome: Sent(w1, "k1")},
	}, got)
}

func TestModelWait(t *testing.T) {
	t.Run("an unknown key", func(t *testing.T) {
		var m Model
		assert.Equal(t, Result{Err: UnknownKey}, m.Apply(Op{Kind: Wait, Key: "k1"}))
	})
	t.Run("a done key returns its outcome, however it got it", func(t *testing.T) {
		var m Model
		applyAll(&m, Op{Kind: Submit, Key: "k1", W: w1}, Op{Kind: Submit, Key: "k2", W: w2, Send: SendNil},
			Op{Kind: Submit, Key: "k3", W: W{ID: "w3", Amount: "1", Currency: "EUR", Dest: "d1"}, Send: SendFail},
			Op{Kind: Resolve, Key: "k3", W: W{ID: "w3", Amount: "1", Currency: "EUR", Dest: "d1", TxHash: "tx-a"}})
		assert.Equal(t, Result{Outcome: Sent(w1, "k1")}, m.Apply(Op{Kind: Wait, Key: "k1"}))
		assert.Equal(t, Result{Outcome: w2}, m.Apply(Op{Kind: Wait, Key: "k2"}))
		assert.Equal(t, Result{Outcome: W{ID: "w3", Amount: "1", Currency: "EUR", Dest: "d1", TxHash: "tx-a"}},
			m.Apply(Op{Kind: Wait, Key: "k3"}), "resolved after its send failed")
	})
	for _, send := range []Send{SendFail, SendPanic, SendWrong, SendBoth, SettleFails, SettlePanics} {
		t.Run("a key whose send ended without an answer: "+sendNames[send], func(t *testing.T) {
			var m Model
			m.Apply(Op{Kind: Submit, Key: "k1", W: w1, Send: send})
			before := m.Clone()
			assert.Equal(t, Result{Err: OutcomeUnknown}, m.Apply(Op{Kind: Wait, Key: "k1"}))
			assert.Equal(t, Result{Err: OutcomeUnknown}, m.Apply(Op{Kind: Wait, Key: "k1", Ledger: 1}), "on any ledger")
			assert.True(t, before.Equal(&m), "Wait changes nothing")
		})
	}
	t.Run("a released key is unknown", func(t *testing.T) {
		var m Model
		applyAll(&m, Op{Kind: Submit, Key: "k1", W: w1, Send: SendFail}, Op{Kind: Release, Key: "k1"})
		assert.Equal(t, Result{Err: UnknownKey}, m.Apply(Op{Kind: Wait, Key: "k1"}))
	})
	t.Run("a pruned key", func(t *testing.T) {
		var m Model
		applyAll(&m, Op{Kind: Submit, Key: "k1", W: w1}, Op{Kind: Prune})
		assert.Equal(t, Result{Err: Pruned}, m.Apply(Op{Kind: Wait, Key: "k1"}))
	})
	t.Run("tenants", func(t *testing.T) {
		var m Model
		m.Apply(Op{Kind: Submit, Key: "k1", W: w1})
		assert.Equal(t, Result{Err: UnknownKey}, m.Apply(Op{Kind: Wait, Tenant: "t1", Key: "k1"}), "a key of another tenant")
		assert.Equal(t, Result{Err: InvalidTenant}, m.Apply(Op{Kind: Wait, Tenant: "t1\x00", Key: "k1"}))
	})
	for _, send := range []Send{SettleFailsAfter, SettlePanicsAfter} {
		t.Run("a key whose store recorded the answer, then "+sendNames[send], func(t *testing.T) {
			var m Model
			m.Apply(Op{Kind: Submit, Key: "k1", W: w1, Send: send})
			assert.Equal(t, Result{Outcome: Sent(w1, "k1")}, m.Apply(Op{Kind: Wait, Key: "k1", Ledger: 1}))
		})
	}
	t.Run("a claim being sent blocks, until its send ends", func(t *testing.T) {
		var m Model
		m.Apply(Op{Kind: Claim, Key: "k1", W: w1, ClaimID: 1})
		assert.True(t, m.Blocks(Op{Kind: Wait, Key: "k1"}))
		assert.True(t, m.Blocks(Op{Kind: Wait, Key: "k1", Ledger: 1}), "on any ledger")
		assert.Panics(t, func() { m.Apply(Op{Kind: Wait, Key: "k1"}) }, "it is no sequential step")
		for _, op := range []Op{
			{Kind: Wait, Key: "k2"}, {Kind: Wait, Tenant: "t1", Key: "k1"}, {Kind: Wait, Tenant: "t1\x00", Key: "k1"},
			{Kind: Outcome, Key: "k1"}, {Kind: Submit, Key: "k1", W: w1},
		} {
			assert.False(t, m.Blocks(op), "%s %q %s", kindNames[op.Kind], op.Tenant, op.Key)
		}
		assert.Equal(t, Result{Err: InFlight}, m.Apply(Op{Kind: Release, Key: "k1"}))
		assert.True(t, m.Blocks(Op{Kind: Wait, Key: "k1"}), "a Release refused by the sender's ledger ends nothing")
		m.Apply(Op{Kind: Settle, Key: "k1", W: w1, ClaimID: 1, Send: SendFail})
		assert.False(t, m.Blocks(Op{Kind: Wait, Key: "k1"}))
		assert.Equal(t, Result{Err: OutcomeUnknown}, m.Apply(Op{Kind: Wait, Key: "k1"}), "once the send ended")
	})
	t.Run("a claim being sent, resolved or released through another ledger", func(t *testing.T) {
		var m Model
		applyAll(&m, Op{Kind: Claim, Key: "k1", W: w1, ClaimID: 1}, Op{Kind: Claim, Key: "k2", W: w2, ClaimID: 2})
		require.True(t, m.Blocks(Op{Kind: Wait, Key: "k1"}))
		require.True(t, m.Blocks(Op{Kind: Wait, Key: "k2"}))
		applyAll(&m, Op{Kind: Resolve, Key: "k1", W: Sent(w1, "x"), Ledger: 1}, Op{Kind: Release, Key: "k2", Ledger: 1, Force: true})
		assert.False(t, m.Blocks(Op{Kind: Wait, Key: "k1"}))
		assert.False(t, m.Blocks(Op{Kind: Wait, Key: "k2"}))
		assert.Equal(t, Result{Outcome: Sent(w1, "x")}, m.Apply(Op{Kind: Wait, Key: "k1"}), "the resolved outcome, while its send runs")
		assert.Equal(t, Result{Err: UnknownKey}, m.Apply(Op{Kind: Wait, Key: "k2"}), "released while its send runs")
	})
}
