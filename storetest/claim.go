package storetest

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemledger/submissions/driver"
)

func testClaim(t *testing.T, newStores Factory) {
	t.Run("a new key is claimed in flight, under a non-zero token, with its fingerprint", func(t *testing.T) {
		a, b := newStores(t)
		rec := claim(t, a, "", "k-1", withdrawal("w-1"))
		requireRecord(t, b, "", "k-1", rec)
		requireHolder(t, b, "", "w-1", "k-1")
	})

	t.Run("a new key with an outcome is claimed done with it", func(t *testing.T) {
		a, b := newStores(t)
		w := withdrawal("w-1")
		rec := claimDone(t, a, "", "k-1", w, sent(w, "0x1"))
		requireRecord(t, b, "", "k-1", rec)
		requireHolder(t, b, "", "w-1", "k-1")
	})

	t.Run("a key's record is returned, claimed false, whatever the fingerprint", func(t *testing.T) {
		a, b := newStores(t)
		w, w2, w3 := withdrawal("w-1"), withdrawal("w-2"), withdrawal("w-3")
		held := claim(t, a, "", "k-1", w)
		more := w
		more.Amount = "26"
		outcome := sent(w, "0x1")
		for i, c := range []struct {
			fp      driver.Fingerprint
			outcome *Withdrawal
		}{{fp(w), nil}, {fp(w2), nil}, {fp(more), nil}, {fp(w), &outcome}, {fp(w2), &outcome}} {
			rec, claimed, err := pick(i, a, b).Claim(bg, "", "k-1", c.fp, c.outcome)
			require.NoError(t, err, "Claim #%d", i)
			require.False(t, claimed, "Claim #%d claimed", i)
			require.Equal(t, held, rec, "Claim #%d", i)
		}
		requireRecord(t, a, "", "k-1", held) // still in flight: an outcome given to Claim settles nothing
		requireHolder(t, a, "", "w-2", "")
		fin := claimDone(t, b, "", "k-3", w3, sent(w3, "0x3"))
		rec, claimed, err := a.Claim(bg, "", "k-3", fp(w), nil)
		require.NoError(t, err)
		require.False(t, claimed)
		require.Equal(t, fin, rec, "a done key's record")
	})

	t.Run("another key for a claimed withdrawal gets a ConflictError naming the holder, and nothing changes", func(t *testing.T) {
		a, b := newStores(t)
		w, v := withdrawal("w-1"), withdrawal("w-2")
		held := claim(t, a, "t1", "k-1", w)
		fin := claimDone(t, b, "t1", "k-2", v, sent(v, "0x2"))
		other := w
		other.Dest = "0xdef"
		outcome := sent(w, "0x1")
		for i, c := range []struct {
			holder string
			fp     driver.Fingerprint
			out    *Withdrawal
		}{{"k-1", fp(w), nil}, {"k-1", fp(other), nil}, {"k-1", fp(w), &outcome}, {"k-2", fp(v), nil}, {"k-2", fp(v), &outcome}} {
			_, claimed, err := pick(i, a, b).Claim(bg, "t1", "k-new", c.fp, c.out)
			require.False(t, claimed, "Claim #%d claimed", i)
			requireConflict(t, err, driver.ConflictError{Tenant: "t1", Holder: c.holder, Key: "k-new", WithdrawalID: c.fp.WithdrawalID})
		}
		requireNoRecord(t, a, "t1", "k-new")
		requireRecord(t, b, "t1", "k-1", held)
		requireRecord(t, b, "t1", "k-2", fin)
		requireHolder(t, a, "t1", "w-1", "k-1")
		requireHolder(t, a, "t1", "w-2", "k-2")
	})

	t.Run("a key with a record of its own gets it, not a conflict, for another key's withdrawal", func(t *testing.T) {
		a, b := newStores(t)
		claim(t, a, "", "k-1", withdrawal("w-1"))
		own := claim(t, b, "", "k-2", withdrawal("w-2"))
		rec, claimed, err := a.Claim(bg, "", "k-2", fp(withdrawal("w-1")), nil)
		require.NoError(t, err)
		require.False(t, claimed)
		require.Equal(t, own, rec)
	})

	t.Run("a key released and claimed again gets a token no earlier claim of it had", func(t *testing.T) {
		a, b := newStores(t)
		seen := map[driver.Token]int{}
		for i := range 12 {
			rec := claim(t, pick(i, a, b), "", "k-1", withdrawal(fmt.Sprint("w-", i%3)))
			require.NotContains(t, seen, rec.Token, "claim #%d's token %d was claim #%d's", i, rec.Token, seen[rec.Token])
			seen[rec.Token] = i
			_, released := release(t, pick(i+1, a, b), "", "k-1", rec.Token)
			require.True(t, released, "release #%d", i)
		}
		w := withdrawal("w-1")
		rec := claimDone(t, a, "", "k-1", w, sent(w, "0x1"))
		require.NotContains(t, seen, rec.Token, "the last claim's token")
	})

	t.Run("keys and withdrawal ids are compared byte for byte", func(t *testing.T) {
		a, b := newStores(t)
		keys := []string{"k", "K", "\u00e9", "e\u0301", "k\u200b", "\uff4b"}
		ids := []string{"w", "W", "w ", " w", "\u00e9", "e\u0301"}
		recs := make([]record, len(keys))
		for i := range keys {
			recs[i] = claim(t, pick(i, a, b), "", keys[i], withdrawal(ids[i]))
		}
		for i := range keys {
			requireRecord(t, pick(i+1, a, b), "", keys[i], recs[i])
			requireHolder(t, pick(i, a, b), "", ids[i], keys[i])
		}
	})

	t.Run("values at every limit, and odd but valid UTF-8, round-trip exactly", func(t *testing.T) {
		a, b := newStores(t)
		for i, v := range limitValues() {
			rec := claim(t, pick(i, a, b), v.tenant, v.key, v.w)
			requireRecord(t, pick(i+1, a, b), v.tenant, v.key, rec)
			requireHolder(t, pick(i+1, a, b), v.tenant, v.w.ID, v.key)
			outcome := sent(v.w, v.w.Dest)
			got, settled := settle(t, pick(i, a, b), v.tenant, v.key, rec.Token, outcome)
			require.True(t, settled)
			require.Equal(t, done(v.w, outcome, rec.Token), got)
			requireRecord(t, pick(i+1, a, b), v.tenant, v.key, got)
			fin := claimDone(t, pick(i, a, b), v.tenant, v.key+"!", v.other, outcome)
			requireRecord(t, pick(i+1, a, b), v.tenant, v.key+"!", fin)
		}
	})

	t.Run("tenants apart: the same key and withdrawal in two tenants are two claims", func(t *testing.T) {
		a, b := newStores(t)
		tenants := []string{"", "t1", "T1", atLimit(driver.MaxTenantLen, "t-", "\u65e5")}
		recs := make([]record, len(tenants))
		for i, tenant := range tenants {
			recs[i] = claim(t, pick(i, a, b), tenant, "k-1", withdrawal("w-1"))
		}
		for i, tenant := range tenants {
			requireRecord(t, pick(i+1, a, b), tenant, "k-1", recs[i])
			requireHolder(t, pick(i+1, a, b), tenant, "w-1", "k-1")
			_, _, err := pick(i, a, b).Claim(bg, tenant, "k-2", fp(withdrawal("w-1")), nil)
			requireConflict(t, err, driver.ConflictError{Tenant: tenant, Holder: "k-1", Key: "k-2", WithdrawalID: "w-1"})
		}
		requireNoRecord(t, a, "t2", "k-1")
		requireHolder(t, b, "t2", "w-1", "")
	})

	t.Run("racing claims of one key through a and b: one claims, the others get its record", func(t *testing.T) {
		a, b := newStores(t)
		const n = 16
		for round := range 4 {
			key := fmt.Sprint("k-", round)
			id := func(i int) string { return fmt.Sprintf("w-%d-%d", round, i%4) }
			recs, claimed, errs := make([]record, n), make([]bool, n), make([]error, n)
			together(n, func(i int) {
				w := withdrawal(id(i))
				var outcome *Withdrawal
				if i%3 == 0 {
					o := sent(w, "0x1")
					outcome = &o
				}
				recs[i], claimed[i], errs[i] = pick(i, a, b).Claim(bg, "", key, fp(w), outcome)
			})
			winner := onlyWinner(t, claimed, errs)
			require.Equal(t, fp(withdrawal(id(winner))), recs[winner].Fingerprint, "the winner's fingerprint")
			require.Equal(t, winner%3 == 0, recs[winner].Done, "the winner's record is done")
			for i := range n {
				require.Equal(t, recs[winner], recs[i], "racer %d's record", i)
			}
			requireRecord(t, a, "", key, recs[winner])
			for i := range 4 {
				holder := ""
				if i == winner%4 {
					holder = key
				}
				requireHolder(t, b, "", id(i), holder)
			}
		}
	})

	t.Run("racing claims of one withdrawal by many keys through a and b: one claims, the others get a ConflictError naming it", func(t *testing.T) {
		a, b := newStores(t)
		const n = 16
		for round := range 4 {
			w := withdrawal(fmt.Sprint("w-", round))
			key := func(i int) string { return fmt.Sprintf("k-%d-%d", round, i) }
			recs, claimed, errs := make([]record, n), make([]bool, n), make([]error, n)
			together(n, func(i int) {
				recs[i], claimed[i], errs[i] = pick(i, a, b).Claim(bg, "t1", key(i), fp(w), nil)
			})
			winner := -1
			for i := range n {
				if claimed[i] {
					require.Equal(t, -1, winner, "two claims: %d and %d", winner, i)
					require.NoError(t, errs[i])
					winner = i
				}
			}
			require.NotEqual(t, -1, winner, "no racer claimed: %v", errs)
			for i := range n {
				if i != winner {
					requireConflict(t, errs[i], driver.ConflictError{Tenant: "t1", Holder: key(winner), Key: key(i), WithdrawalID: w.ID})
					requireNoRecord(t, pick(i, a, b), "t1", key(i))
				}
			}
			requireRecord(t, a, "t1", key(winner), inFlight(w, recs[winner].Token))
			requireHolder(t, b, "t1", w.ID, key(winner))
		}
	})
}

// onlyWinner stops t unless every racer answered and exactly one claimed,
// and returns that one.
func onlyWinner(t *testing.T, claimed []bool, errs []error) int {
	t.Helper()
	winner := -1
	for i := range claimed {
		require.NoError(t, errs[i], "racer %d", i)
		if claimed[i] {
			require.Equal(t, -1, winner, "two claims: racers %d and %d", winner, i)
			winner = i
		}
	}
	require.NotEqual(t, -1, winner, "no racer claimed")
	return winner
}

// limitValue is a tenant, a key and two withdrawals at the limits a store
// must hold.
type limitValue struct {
	tenant, key string
	w, other    Withdrawal
}

// limitValues returns values of the largest and smallest sizes the ledger
// accepts, multi-byte and with odd but valid UTF-8: control characters,
// quotes, backslashes, SQL wildcards, U+2028, a byte order mark, the last
// code point. Each key leaves room for one more byte.
func limitValues() []limitValue {
	runes := []string{"\u00e9", "\u20ac", "\U0001d11e", "\u65e5"} // 2, 3, 4 and 3 bytes
	var vs []limitValue
	for i, lead := range []string{"a", "b\x01\t'\"\\%_", "c\u2028\ufeff", "d\U0010ffff\ufffd\x7f"} {
		r := runes[i:]
		w := Withdrawal{
			ID:       atLimit(driver.MaxWithdrawalIDLen, lead+" id ", r...),
			Amount:   strings.Repeat("9", driver.MaxAmountLen-3) + ".25",
			Currency: "ABCDEFGHIJ12",
			Dest:     atLimit(driver.MaxDestinationLen, lead+"\n\r dest ", r...),
			State:    atLimit(300, lead+" state ", r...),
		}
		other := w
		other.ID = atLimit(driver.MaxWithdrawalIDLen, lead+" other ", r...)
		vs = append(vs, limitValue{atLimit(driver.MaxTenantLen, lead+"-t", r...), atLimit(driver.MaxKeyLen-1, lead+"-k", r...), w, other})
	}
	small := Withdrawal{ID: "i", Amount: "1", Currency: "XY", Dest: "d"}
	other := small
	other.ID = "j"
	return append(vs, limitValue{"t", "k", small, other})
}
