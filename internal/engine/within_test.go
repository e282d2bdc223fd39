package engine

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemledger/submissions/driver"
)

// mapTx is a Tx over a mapStore, as if every call were in one transaction
// that commits: a claim stands until it is settled or the transaction aborted. Its failures
// are set per call.
type mapTx struct {
	*mapStore
	claimErr, settleErr error
	aborted             int
	made                map[string]driver.Token // the claims made, by key
}

func (m *mapTx) Claim(ctx context.Context, tenant, key string, fp driver.Fingerprint) (driver.Record[transfer], bool, error) {
	if m.claimErr != nil {
		return driver.Record[transfer]{}, false, m.claimErr
	}
	rec, claimed, err := m.mapStore.Claim(ctx, tenant, key, fp, nil)
	if claimed {
		if m.made == nil {
			m.made = map[string]driver.Token{}
		}
		m.made[key] = rec.Token
	}
	return rec, claimed, err
}

func (m *mapTx) Settle(ctx context.Context, tenant, key string, token driver.Token, outcome transfer) error {
	if m.settleErr != nil {
		return m.settleErr
	}
	_, settled, err := m.mapStore.Settle(ctx, tenant, key, token, outcome)
	if err == nil && !settled {
		err = errors.New("not settled")
	}
	return err
}

// Abort rolls the transaction back at once: the claims it made are
// released.
func (m *mapTx) Abort(ctx context.Context) error {
	m.aborted++
	if err := ctx.Err(); err != nil {
		return err
	}
	for key, token := range m.made {
		_, _, _ = m.mapStore.Release(ctx, "", key, token)
	}
	return nil
}

func TestSubmitTx(t *testing.T) {
	ctx := context.Background()
	req := transfer{ID: "w-1"}
	answer := func(_ context.Context, r transfer) (transfer, error) { r.TxHash = "0xabc"; return r, nil }
	counted := func(n *int, work func(context.Context, transfer) (transfer, error)) func(context.Context, transfer) (transfer, error) {
		return func(ctx context.Context, r transfer) (transfer, error) { *n++; return work(ctx, r) }
	}

	t.Run("work once, then replays", func(t *testing.T) {
		tx := &mapTx{mapStore: newMapStore()}
		calls := 0
		out, replayed, err := SubmitTx(ctx, tx, "", " k1 ", req, counted(&calls, answer))
		require.NoError(t, err)
		assert.False(t, replayed)
		assert.Equal(t, "0xabc", out.TxHash)
		out, replayed, err = SubmitTx(ctx, tx, "", "k1", req, counted(&calls, answer))
		require.NoError(t, err)
		assert.True(t, replayed)
		assert.Equal(t, "0xabc", out.TxHash)
		assert.Equal(t, 1, calls)
		assert.Zero(t, tx.aborted)
	})

	t.Run("nil work records the request", func(t *testing.T) {
		tx := &mapTx{mapStore: newMapStore()}
		out, _, err := SubmitTx(ctx, tx, "", "k1", req, nil)
		require.NoError(t, err)
		assert.Equal(t, req, out)
		rec, ok, _ := tx.Lookup(ctx, "", "k1")
		require.True(t, ok)
		assert.True(t, rec.Done)
	})

	t.Run("refusals as Submit's, work not called", func(t *testing.T) {
		cases := []struct {
			name        string
			tenant, key string
			req         transfer
			setup       func(*mapTx)
			want        error
		}{
			{"bad tenant", "a\x00b", "k1", req, nil, ErrInvalidTenant},
			{"bad key", "", " ", req, nil, ErrInvalidKey},
			{"bad fingerprint", "", "k1", transfer{}, nil, driver.ErrInvalidFingerprint},
			{"another withdrawal's key", "", "k1", transfer{ID: "w-2"}, func(tx *mapTx) {
				_, _, _ = SubmitTx(ctx, tx, "", "k1", req, answer)
			}, driver.ErrIdempotencyConflict},
			{"withdrawal held", "", "k2", req, func(tx *mapTx) {
				_, _, _ = SubmitTx(ctx, tx, "", "k1", req, answer)
			}, driver.ErrIdempotencyConflict},
			{"in flight", "", "k1", req, func(tx *mapTx) {
				_, _, _ = tx.mapStore.Claim(ctx, "", "k1", mustCanonical(t, req), nil)
			}, ErrSubmissionInFlight},
			{"abandoned", "", "k1", req, func(tx *mapTx) {
				rec, _, _ := tx.mapStore.Claim(ctx, "", "k1", mustCanonical(t, req), nil)
				rec.Abandoned = true
				tx.recs["k1"] = rec
			}, ErrAbandoned},
			{"pruned", "", "k1", req, func(tx *mapTx) {
				tx.recs["k1"] = driver.Record[transfer]{Fingerprint: driver.Fingerprint{WithdrawalID: "w-1"}, Done: true, Pruned: true, Token: 9}
			}, driver.ErrPruned},
			{"store fails", "", "k1", req, func(tx *mapTx) { tx.claimErr = errors.New("boom") }, ErrStoreFailed},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				tx := &mapTx{mapStore: newMapStore()}
				if c.setup != nil {
					c.setup(tx)
				}
				calls := 0
				_, replayed, err := SubmitTx(ctx, tx, c.tenant, c.key, c.req, counted(&calls, answer))
				require.ErrorIs(t, err, c.want)
				assert.False(t, replayed)
				assert.Zero(t, calls)
			})
		}
		t.Run("abandoned is in flight", func(t *testing.T) {
			tx := &mapTx{mapStore: newMapStore()}
			rec, _, _ := tx.mapStore.Claim(ctx, "", "k1", mustCanonical(t, req), nil)
			rec.Abandoned = true
			tx.recs["k1"] = rec
			_, _, err := SubmitTx(ctx, tx, "", "k1", req, answer)
			assert.ErrorIs(t, err, ErrSubmissionInFlight)
		})
		t.Run("the holder is named", func(t *testing.T) {
			tx := &mapTx{mapStore: newMapStore()}
			_, _, err := SubmitTx(ctx, tx, "", "k1", req, answer)
			require.NoError(t, err)
			_, _, err = SubmitTx(ctx, tx, "", "k2", req, answer)
			ce, ok := errors.AsType[*driver.ConflictError](err)
			require.True(t, ok, "%v", err)
			assert.Equal(t, "k1", ce.Holder)
			assert.NotErrorIs(t, err, ErrStoreFailed)
		})
		t.Run("ctx done", func(t *testing.T) {
			tx := &mapTx{mapStore: newMapStore()}
			cctx, cancel := context.WithCancel(ctx)
			cancel()
			_, _, err := SubmitTx(cctx, tx, "", "k1", req, answer)
			require.ErrorIs(t, err, context.Canceled)
			_, ok, _ := tx.Lookup(ctx, "", "k1")
			assert.False(t, ok)
		})
		t.Run("nil request", func(t *testing.T) {
			tx := &ptrTx{mapTx{mapStore: newMapStore()}}
			_, _, err := SubmitTx[*transfer](ctx, tx, "", "k1", nil, nil)
			require.ErrorIs(t, err, driver.ErrInvalidFingerprint)
		})
	})

	t.Run("work fails: claim dropped", func(t *testing.T) {
		t.Run("ctx ended in work", func(t *testing.T) {
			tx := &mapTx{mapStore: newMapStore()}
			cctx, cancel := context.WithCancel(ctx)
			_, _, err := SubmitTx(cctx, tx, "", "k1", req, func(ctx context.Context, _ transfer) (transfer, error) {
				cancel()
				return transfer{}, ctx.Err()
			})
			require.ErrorIs(t, err, context.Canceled)
			_, ok, _ := tx.Lookup(ctx, "", "k1")
			assert.False(t, ok, "dropped although ctx ended")
		})
		boom := errors.New("boom")
		cases := []struct {
			name string
			work func(context.Context, transfer) (transfer, error)
			want error
			says string
		}{
			{"error", func(context.Context, transfer) (transfer, error) { return transfer{}, boom }, boom, "request key k1: boom"},
			{"another withdrawal", func(_ context.Context, r transfer) (transfer, error) { r.ID = "w-2"; return r, nil }, driver.ErrInvalidFingerprint, "answer differs in WithdrawalID"},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				tx := &mapTx{mapStore: newMapStore()}
				_, _, err := SubmitTx(ctx, tx, "", "k1", req, c.work)
				require.ErrorIs(t, err, c.want)
				assert.Contains(t, err.Error(), c.says)
				assert.Equal(t, 1, tx.aborted)
				_, ok, _ := tx.Lookup(ctx, "", "k1")
				assert.False(t, ok, "the claim is dropped")
			})
		}
		t.Run("panic", func(t *testing.T) {
			tx := &mapTx{mapStore: newMapStore()}
			assert.PanicsWithValue(t, "work bug", func() {
				_, _, _ = SubmitTx(ctx, tx, "", "k1", req, func(context.Context, transfer) (transfer, error) { panic("work bug") })
			})
			assert.Equal(t, 1, tx.aborted)
			_, ok, _ := tx.Lookup(ctx, "", "k1")
			assert.False(t, ok)
		})
		t.Run("nil answer", func(t *testing.T) {
			tx := &ptrTx{mapTx{mapStore: newMapStore()}}
			_, _, err := SubmitTx(ctx, tx, "", "k1", &req, func(context.Context, *transfer) (*transfer, error) { return nil, nil })
			require.ErrorIs(t, err, errNilWork)
			assert.Equal(t, 1, tx.aborted)
		})
		t.Run("settle fails", func(t *testing.T) {
			tx := &mapTx{mapStore: newMapStore(), settleErr: errors.New("gone")}
			_, _, err := SubmitTx(ctx, tx, "", "k1", req, answer)
			require.ErrorIs(t, err, ErrStoreFailed)
			assert.True(t, strings.HasSuffix(err.Error(), "request key k1: record the outcome: gone"), err.Error())
			assert.Equal(t, 1, tx.aborted, "a claim whose outcome was not written is dropped")
		})
	})
}

// ptrTx is a mapTx for pointer requests.
type ptrTx struct{ mapTx }

func (p *ptrTx) Claim(ctx context.Context, tenant, key string, fp driver.Fingerprint) (driver.Record[*transfer], bool, error) {
	rec, claimed, err := p.mapTx.Claim(ctx, tenant, key, fp)
	return driver.Record[*transfer]{Fingerprint: rec.Fingerprint, Outcome: &rec.Outcome, Done: rec.Done, Token: rec.Token}, claimed, err
}

func (p *ptrTx) Settle(ctx context.Context, tenant, key string, token driver.Token, outcome *transfer) error {
	return p.mapTx.Settle(ctx, tenant, key, token, *outcome)
}

func TestCheckTx(t *testing.T) {
	ctx := context.Background()
	require.NoError(t, CheckTx(ctx, "t", " k1 ", transfer{ID: "w-1"}))
	assert.ErrorIs(t, CheckTx(ctx, "a\x00", "k1", transfer{ID: "w-1"}), ErrInvalidTenant)
	assert.ErrorIs(t, CheckTx(ctx, "", "", transfer{ID: "w-1"}), ErrInvalidKey)
	assert.ErrorIs(t, CheckTx(ctx, "", "k1", transfer{}), driver.ErrInvalidFingerprint)
	assert.ErrorIs(t, CheckTx[*transfer](ctx, "", "k1", nil), driver.ErrInvalidFingerprint)
	done, cancel := context.WithCancel(ctx)
	cancel()
	assert.ErrorIs(t, CheckTx(done, "", "k1", transfer{ID: "w-1"}), context.Canceled)
}

func mustCanonical(t *testing.T, r transfer) driver.Fingerprint {
	t.Helper()
	fp, err := r.Fingerprint().Canonical()
	require.NoError(t, err)
	return fp
}
