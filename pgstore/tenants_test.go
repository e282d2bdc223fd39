package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemledger/submissions"
	"github.com/idemledger/submissions/driver"
)

// tenantRows returns the table's rows as "tenant/key/withdrawal", sorted.
func tenantRows(t *testing.T, pool *pgxpool.Pool, st *Store[w]) []string {
	t.Helper()
	rows, err := pool.Query(bg, `SELECT tenant, request_key, withdrawal_id FROM `+st.names.table+` ORDER BY tenant, request_key`)
	require.NoError(t, err)
	var got []string
	for rows.Next() {
		var tenant, key, id string
		require.NoError(t, rows.Scan(&tenant, &key, &id))
		got = append(got, tenant+"/"+key+"/"+id)
	}
	require.NoError(t, rows.Err())
	return got
}

// TestTenantsShareATable: two tenants on one table claim the same key for the
// same withdrawal id, each sends once, and nothing either does reads or
// changes the other's row.
func TestTenantsShareATable(t *testing.T) {
	pool := testPool(t, 2)
	st := newTestStore[w](t, pool)
	ledger := submissions.NewWithStore[w](st, submissions.WithLogger(quiet))
	tenants := []string{"", "acme"}
	x := newW("w-1")
	sends := map[string]*atomic.Int64{}
	for _, tenant := range append(tenants, "globex") {
		sends[tenant] = &atomic.Int64{}
	}
	send := func(tenant string) func(context.Context, w) (w, error) {
		return func(_ context.Context, x w) (w, error) {
			sends[tenant].Add(1)
			return sent(x, "0x"+tenant), nil
		}
	}

	t.Run("both claim and send once", func(t *testing.T) {
		for _, tenant := range tenants {
			view := ledger.Tenant(tenant)
			out, err := view.Submit(bg, "req-1", x, send(tenant))
			require.NoError(t, err, "tenant %q", tenant)
			assert.Equal(t, sent(x, "0x"+tenant), out, "tenant %q", tenant)
			again, err := view.Submit(bg, "req-1", x, send(tenant))
			require.NoError(t, err, "replay in tenant %q", tenant)
			assert.Equal(t, out, again, "replay in tenant %q", tenant)
		}
		for _, tenant := range tenants {
			assert.EqualValues(t, 1, sends[tenant].Load(), "sends of tenant %q", tenant)
			view := ledger.Tenant(tenant)
			out, ok, err := view.Outcome(bg, "req-1")
			require.NoError(t, err)
			assert.True(t, ok)
			assert.Equal(t, sent(x, "0x"+tenant), out, "Outcome in tenant %q", tenant)
			holder, ok, err := view.ClaimedBy(bg, x.ID)
			require.NoError(t, err)
			assert.True(t, ok)
			assert.Equal(t, "req-1", holder, "ClaimedBy in tenant %q", tenant)
		}
		assert.Equal(t, []string{"/req-1/w-1", "acme/req-1/w-1"}, tenantRows(t, pool, st))
	})

	t.Run("a conflict names the tenant and its own holder", func(t *testing.T) {
		_, ok, err := ledger.Tenant("globex").ClaimedBy(bg, x.ID)
		require.NoError(t, err)
		assert.False(t, ok, "ClaimedBy in a tenant with no rows")
		_, err = ledger.Tenant("globex").Submit(bg, "req-globex", x, nil)
		require.NoError(t, err, "a third tenant claims the withdrawal under a key of its own")
		holders := map[string]string{"": "req-1", "acme": "req-1", "globex": "req-globex"}
		for tenant, holder := range holders {
			_, err := ledger.Tenant(tenant).Submit(bg, "req-2", x, send(tenant))
			var conflict *submissions.ConflictError
			require.ErrorAs(t, err, &conflict, "tenant %q", tenant)
			assert.Equal(t, submissions.ConflictError{Tenant: tenant, Holder: holder, Key: "req-2", WithdrawalID: x.ID}, *conflict)

			_, _, err = st.Claim(bg, tenant, "req-2", x.Fingerprint(), nil)
			require.ErrorAs(t, err, &conflict, "Store.Claim in tenant %q", tenant)
			assert.Equal(t, submissions.ConflictError{Tenant: tenant, Holder: holder, Key: "req-2", WithdrawalID: x.ID}, *conflict)
		}
		// req-1 holds the withdrawal in the other tenants, not in globex.
		_, err = ledger.Tenant("globex").Submit(bg, "req-1", x, send("globex"))
		var conflict *submissions.ConflictError
		require.ErrorAs(t, err, &conflict, "another tenant's record of the key is not replayed")
		assert.Equal(t, submissions.ConflictError{Tenant: "globex", Holder: "req-globex", Key: "req-1", WithdrawalID: x.ID}, *conflict)
		assert.Zero(t, sends["globex"].Load(), "sends of globex")
	})

	t.Run("a claim token acts only in its tenant", func(t *testing.T) {
		y := newW("w-2")
		a, claimed, err := st.Claim(bg, "", "req-3", y.Fingerprint(), nil)
		require.NoError(t, err)
		require.True(t, claimed)
		b, claimed, err := st.Claim(bg, "acme", "req-3", y.Fingerprint(), nil)
		require.NoError(t, err)
		require.True(t, claimed)
		require.NotEqual(t, a.Token, b.Token)

		var zero driver.Record[w]
		rec, settled, err := st.Settle(bg, "acme", "req-3", a.Token, sent(y, "0xwrong"))
		require.NoError(t, err)
		assert.False(t, settled, "Settle in acme under the default tenant's token")
		assert.Equal(t, zero, rec)
		rec, released, err := st.Release(bg, "acme", "req-3", a.Token)
		require.NoError(t, err)
		assert.False(t, released, "Release in acme under the default tenant's token")
		assert.Equal(t, zero, rec)

		rec, released, err = st.Release(bg, "", "req-3", a.Token)
		require.NoError(t, err)
		assert.True(t, released)
		assert.Equal(t, driver.Record[w]{Fingerprint: y.Fingerprint(), Token: a.Token}, rec)
		still, ok, err := st.Lookup(bg, "acme", "req-3")
		require.NoError(t, err)
		require.True(t, ok, "acme's claim outlives the default tenant's release")
		assert.Equal(t, b, still)
		holder, ok, err := st.ClaimedBy(bg, "acme", y.ID)
		require.NoError(t, err)
		assert.True(t, ok)
		assert.Equal(t, "req-3", holder)
		_, ok, err = st.ClaimedBy(bg, "", y.ID)
		require.NoError(t, err)
		assert.False(t, ok, "the default tenant's claim is released")

		rec, settled, err = st.Settle(bg, "acme", "req-3", b.Token, sent(y, "0xacme"))
		require.NoError(t, err)
		assert.True(t, settled)
		assert.Equal(t, driver.Record[w]{Fingerprint: y.Fingerprint(), Outcome: sent(y, "0xacme"), Done: true, Token: b.Token}, rec)
		_, ok, err = st.Lookup(bg, "", "req-3")
		require.NoError(t, err)
		assert.False(t, ok, "acme's settle makes no row in the default tenant")
	})

	t.Run("resolve and release stay in their tenant", func(t *testing.T) {
		z := newW("w-3")
		railDown := errors.New("rail timed out")
		for _, tenant := range tenants {
			_, err := ledger.Tenant(tenant).Submit(bg, "req-4", z, func(context.Context, w) (w, error) { return w{}, railDown })
			require.ErrorIs(t, err, submissions.ErrOutcomeUnknown, "tenant %q", tenant)
		}
		require.NoError(t, ledger.Tenant("acme").Resolve(bg, "req-4", sent(z, "0xfound")))
		require.NoError(t, ledger.Release(bg, "req-4"), "Release in the default tenant")
		_, ok, err := ledger.Outcome(bg, "req-4")
		require.NoError(t, err)
		assert.False(t, ok, "released in the default tenant")
		out, ok, err := ledger.Tenant("acme").Outcome(bg, "req-4")
		require.NoError(t, err)
		assert.True(t, ok)
		assert.Equal(t, sent(z, "0xfound"), out, "acme's outcome")
		assert.ErrorIs(t, ledger.Tenant("acme").Release(bg, "req-4"), submissions.ErrIdempotencyConflict, "acme's key has an outcome")
	})
}

// TestTenantsRaceOnSeparateConnections: goroutines of several tenants, each
// on a connection and a Store of its own, released together on the same key,
// or on keys of their own, for the same withdrawal id: each tenant sends
// exactly once, and every other call is refused or replays its own tenant's
// outcome.
func TestTenantsRaceOnSeparateConnections(t *testing.T) {
	const (
		perTenant = 4
		rounds    = 5
	)
	tenants := []string{"", "acme", "globex", "日本-payouts"}
	admin := testPool(t, 2)
	table := strings.Trim(newTestStore[w](t, admin).names.table, `"`)
	type racer struct {
		tenant string
		ledger *submissions.Submissions[w]
	}
	var racers []racer
	for _, tenant := range tenants {
		for range perTenant {
			st, err := New[w](testPool(t, 1), WithTable(table))
			require.NoError(t, err)
			racers = append(racers, racer{tenant, submissions.NewWithStore[w](st, submissions.WithLogger(quiet)).Tenant(tenant)})
		}
	}
	// run releases every racer together on submit(i) and returns each one's
	// result, and the sends of each tenant.
	run := func(t *testing.T, submit func(i int, r racer, send func(context.Context, w) (w, error)) (w, error)) ([]w, []error, map[string]int64) {
		t.Helper()
		sends := make([]atomic.Int64, len(tenants))
		outs := make([]w, len(racers))
		errs := make([]error, len(racers))
		var ready, done sync.WaitGroup
		start := make(chan struct{})
		for i, r := range racers {
			ready.Add(1)
			done.Add(1)
			go func() {
				defer done.Done()
				n := &sends[i/perTenant]
				send := func(_ context.Context, x w) (w, error) {
					n.Add(1)
					return sent(x, "0x"+r.tenant), nil
				}
				ready.Done()
				<-start
				outs[i], errs[i] = submit(i, r, send)
			}()
		}
		ready.Wait()
		close(start)
		done.Wait()
		byTenant := map[string]int64{}
		for i, tenant := range tenants {
			byTenant[tenant] = sends[i].Load()
		}
		return outs, errs, byTenant
	}
	once := map[string]int64{}
	for _, tenant := range tenants {
		once[tenant] = 1
	}

	t.Run("one key", func(t *testing.T) {
		for round := range rounds {
			key, x := fmt.Sprint("req-same-", round), newW(fmt.Sprint("w-same-", round))
			outs, errs, sends := run(t, func(_ int, r racer, send func(context.Context, w) (w, error)) (w, error) {
				return r.ledger.Submit(bg, key, x, send)
			})
			require.Equal(t, once, sends, "round %d: sends per tenant", round)
			for i, err := range errs {
				tenant := racers[i].tenant
				if err != nil {
					assert.ErrorIs(t, err, submissions.ErrSubmissionInFlight, "round %d, tenant %q", round, tenant)
					continue
				}
				assert.Equal(t, sent(x, "0x"+tenant), outs[i], "round %d, tenant %q: its own tenant's outcome", round, tenant)
			}
		}
	})

	t.Run("keys of their own", func(t *testing.T) {
		for round := range rounds {
			x := newW(fmt.Sprint("w-own-", round))
			keyOf := func(i int) string { return fmt.Sprintf("req-own-%d-%d", round, i) }
			outs, errs, sends := run(t, func(i int, r racer, send func(context.Context, w) (w, error)) (w, error) {
				return r.ledger.Submit(bg, keyOf(i), x, send)
			})
			require.Equal(t, once, sends, "round %d: sends per tenant", round)
			winners := map[string]string{}
			for i, err := range errs {
				if err == nil {
					tenant := racers[i].tenant
					assert.Empty(t, winners[tenant], "round %d, tenant %q: a second winner", round, tenant)
					winners[tenant] = keyOf(i)
					assert.Equal(t, sent(x, "0x"+tenant), outs[i])
				}
			}
			require.Len(t, winners, len(tenants), "round %d: a winner in every tenant", round)
			for i, err := range errs {
				if err == nil {
					continue
				}
				tenant := racers[i].tenant
				var conflict *submissions.ConflictError
				if assert.ErrorAs(t, err, &conflict, "round %d, tenant %q", round, tenant) {
					assert.Equal(t, submissions.ConflictError{Tenant: tenant, Holder: winners[tenant], Key: keyOf(i), WithdrawalID: x.ID}, *conflict,
						"round %d: the holder is its own tenant's winner", round)
				}
			}
		}
	})
}

// TestATenantAtTheLimit: a tenant id of MaxTenantLen bytes of multi-byte
// UTF-8 is stored exactly and works as any other; ids that differ only in
// case, white space or the composition of an accent are other tenants; one
// byte more is the ledger's refusal, before the store.
func TestATenantAtTheLimit(t *testing.T) {
	pool := testPool(t, 2)
	st := newTestStore[w](t, pool)
	ledger := submissions.NewWithStore[w](st, submissions.WithLogger(quiet))
	tenant := atLimit(driver.MaxTenantLen, "t-", "é", "€", "𝄞", "日")
	require.Len(t, tenant, driver.MaxTenantLen)
	require.True(t, utf8.ValidString(tenant))
	require.Greater(t, len(tenant), utf8.RuneCountInString(tenant), "the tenant is multi-byte")
	view := ledger.Tenant(tenant)
	x := newW("w-1")

	t.Run("round trip", func(t *testing.T) {
		out, err := view.Submit(bg, "req-1", x, func(_ context.Context, x w) (w, error) { return sent(x, "0xlimit"), nil })
		require.NoError(t, err)
		assert.Equal(t, sent(x, "0xlimit"), out)
		again, err := view.Submit(bg, "req-1", x, nil)
		require.NoError(t, err)
		assert.Equal(t, out, again, "replay")
		got, ok, err := view.Outcome(bg, "req-1")
		require.NoError(t, err)
		assert.True(t, ok)
		assert.Equal(t, out, got)
		holder, ok, err := view.ClaimedBy(bg, x.ID)
		require.NoError(t, err)
		assert.True(t, ok)
		assert.Equal(t, "req-1", holder)

		_, err = view.Submit(bg, "req-2", newW("w-2"), func(context.Context, w) (w, error) { return w{}, errors.New("rail timed out") })
		require.ErrorIs(t, err, submissions.ErrOutcomeUnknown)
		require.NoError(t, view.Release(bg, "req-2"))
		require.NoError(t, view.Resolve(bg, "req-3", sent(newW("w-3"), "0xresolved")))
		assert.Equal(t, []string{tenant + "/req-1/w-1", tenant + "/req-3/w-3"}, tenantRows(t, pool, st), "the rows carry the tenant byte for byte")
	})

	t.Run("ids are exact", func(t *testing.T) {
		dropLast := func(s string) string { _, n := utf8.DecodeLastRuneInString(s); return s[:len(s)-n] }
		for _, other := range []string{
			"", strings.ToUpper(tenant), " " + dropLast(tenant),
			dropLast(strings.Replace(tenant, "é", "e\u0301", 1)), // the accent decomposed
		} {
			require.NotEqual(t, tenant, other)
			require.LessOrEqual(t, len(other), driver.MaxTenantLen, "tenant %q", other)
			_, ok, err := ledger.Tenant(other).Outcome(bg, "req-1")
			require.NoError(t, err, "tenant %q", other)
			assert.False(t, ok, "tenant %q sees the key", other)
			_, ok, err = ledger.Tenant(other).ClaimedBy(bg, x.ID)
			require.NoError(t, err, "tenant %q", other)
			assert.False(t, ok, "tenant %q sees the claim", other)
		}
	})

	t.Run("one byte more", func(t *testing.T) {
		var sends int
		_, err := ledger.Tenant(tenant+"x").Submit(bg, "req-9", newW("w-9"), func(_ context.Context, x w) (w, error) { sends++; return x, nil })
		assert.ErrorIs(t, err, submissions.ErrInvalidTenant)
		assert.Zero(t, sends)
	})
}

// TestSeenKeysAreTenants: the keys a Store remembers, to read a retry first,
// are remembered with their tenant. A key settled in one tenant and submitted
// in another for another withdrawal is claimed there, in the two statements
// of any fresh submit; a release in one tenant does not make the other's
// retry an INSERT.
func TestSeenKeysAreTenants(t *testing.T) {
	count := &counter{}
	pool := testPoolWith(t, 2, func(cfg *pgxpool.Config) { cfg.ConnConfig.Tracer = count })
	ledger := submissions.NewWithStore[w](newTestStore[w](t, pool), submissions.WithLogger(quiet))
	a, b := ledger.Tenant("tenant-a"), ledger.Tenant("tenant-b")
	var sends atomic.Int64
	send := func(tx string) func(context.Context, w) (w, error) {
		return func(_ context.Context, x w) (w, error) { sends.Add(1); return sent(x, tx), nil }
	}
	statements := func(f func()) int64 {
		before := count.n.Load()
		f()
		return count.n.Load() - before
	}

	t.Run("settled in one tenant, fresh in another", func(t *testing.T) {
		x, y := newW("w-a"), newW("w-b")
		_, err := a.Submit(bg, "req-1", x, send("0xa"))
		require.NoError(t, err)
		var out w
		n := statements(func() { out, err = b.Submit(bg, "req-1", y, send("0xb")) })
		require.NoError(t, err, "tenant B's submit of a key tenant A settled: neither a replay nor a conflict")
		assert.Equal(t, sent(y, "0xb"), out)
		assert.EqualValues(t, 2, sends.Load(), "sends")
		assert.EqualValues(t, 2, n, "statements of B's fresh submit: the claim and the outcome, no read first")
		for _, c := range []struct {
			view *submissions.Submissions[w]
			req  w
			want w
		}{{a, x, sent(x, "0xa")}, {b, y, sent(y, "0xb")}} {
			n = statements(func() { out, err = c.view.Submit(bg, "req-1", c.req, send("0xagain")) })
			require.NoError(t, err)
			assert.Equal(t, c.want, out, "each tenant replays its own outcome")
			assert.EqualValues(t, 1, n, "statements of a replay: one read")
		}
		assert.EqualValues(t, 2, sends.Load(), "sends after the replays")
	})

	t.Run("released in one tenant, retried in another", func(t *testing.T) {
		railDown := func(context.Context, w) (w, error) { sends.Add(1); return w{}, errors.New("rail timed out") }
		for _, view := range []*submissions.Submissions[w]{a, b} {
			_, err := view.Submit(bg, "req-2", newW("w-2"), railDown)
			require.ErrorIs(t, err, submissions.ErrOutcomeUnknown)
		}
		require.NoError(t, a.Release(bg, "req-2"))
		var err error
		n := statements(func() { _, err = b.Submit(bg, "req-2", newW("w-2"), send("0xb")) })
		assert.ErrorIs(t, err, submissions.ErrSubmissionInFlight, "tenant B's key is still in flight")
		assert.EqualValues(t, 1, n, "statements of B's retry: one read, as before A's release")
		n = statements(func() { _, err = a.Submit(bg, "req-2", newW("w-2"), send("0xa")) })
		require.NoError(t, err, "tenant A's key is claimed again")
		assert.EqualValues(t, 2, n, "statements of A's submit after its release: the claim and the outcome")
		assert.EqualValues(t, 5, sends.Load(), "sends: two that failed and one after the release")
	})
}
