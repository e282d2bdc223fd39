package submissions_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemledger/submissions"
	"github.com/idemledger/submissions/driver"
)

// TestTenantViewCostsOneSmallAllocation: a service makes a view per request,
// so making one, and replaying through it, costs one allocation of a few
// words.
func TestTenantViewCostsOneSmallAllocation(t *testing.T) {
	s := submissions.New[withdrawal](quiet)
	w := newWithdrawal("w-1")
	_, err := s.Tenant("acme").Submit(bg, "req-1", w, nil)
	require.NoError(t, err)
	assert.Equal(t, 1.0, testing.AllocsPerRun(100, func() { s.Tenant("acme") }), "allocations per view")
	assert.Equal(t, 1.0, testing.AllocsPerRun(100, func() {
		_, err := s.Tenant("acme").Submit(bg, "req-1", w, nil)
		require.NoError(t, err)
	}), "allocations per replay through a new view")
}

// TestTenantOfAZeroValueLedger: a view of a zero Submissions works on the
// same memory store as the ledger itself.
func TestTenantOfAZeroValueLedger(t *testing.T) {
	var s submissions.Submissions[withdrawal]
	w := newWithdrawal("w-1")
	_, err := s.Tenant("acme").Submit(bg, "req-1", w, nil)
	require.NoError(t, err)
	_, err = s.Submit(bg, "req-2", w, nil)
	require.NoError(t, err, "the default tenant's claim of the same withdrawal")
	holder, ok, err := s.Tenant("acme").ClaimedBy(bg, "w-1")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "req-1", holder)
	holder, _, err = s.ClaimedBy(bg, "w-1")
	require.NoError(t, err)
	require.Equal(t, "req-2", holder)
}

// TestInvalidTenantErrors: the error of an invalid tenant says what is wrong,
// as the key's does, and comes before the key's.
func TestInvalidTenantErrors(t *testing.T) {
	s := submissions.New[withdrawal](quiet)
	for tenant, want := range map[string]string{
		strings.Repeat("t", driver.MaxTenantLen+1): "invalid tenant: longer than 64 bytes",
		"t\xff":  "invalid tenant: not valid UTF-8",
		"t\x00t": "invalid tenant: has a NUL byte",
	} {
		_, err := s.Tenant(tenant).Submit(bg, "", newWithdrawal("w-1"), nil)
		assert.EqualError(t, err, want)
		assert.ErrorIs(t, err, submissions.ErrInvalidTenant)
		assert.EqualError(t, submissions.ValidateTenant(tenant), want, "ValidateTenant")
	}
	for _, tenant := range []string{"", "acme", " acme ", strings.Repeat("é", driver.MaxTenantLen/2)} {
		assert.NoError(t, submissions.ValidateTenant(tenant), "%q", tenant)
	}
	_, err := s.Tenant(strings.Repeat("t", driver.MaxTenantLen)).Submit(bg, "req-1", newWithdrawal("w-1"), nil)
	assert.NoError(t, err, "a tenant at the limit")
}

// TestLogsNameTheTenant: a view's log lines name its tenant; the default
// tenant's lines have no tenant attribute.
func TestLogsNameTheTenant(t *testing.T) {
	var logs bytes.Buffer
	s := submissions.New[withdrawal](submissions.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	failing := func(context.Context, withdrawal) (withdrawal, error) {
		return withdrawal{}, errors.New("rail timed out")
	}
	_, err := s.Tenant("acme").Submit(bg, "req-1", newWithdrawal("w-1"), failing)
	require.Error(t, err)
	_, err = s.Submit(bg, "req-1", newWithdrawal("w-1"), failing)
	require.Error(t, err)
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	require.Len(t, lines, 2, logs.String())
	assert.Contains(t, lines[0], `msg="outcome unknown" tenant=acme key=req-1 withdrawal=w-1 `)
	assert.Contains(t, lines[1], `msg="outcome unknown" key=req-1 withdrawal=w-1 `)
}

// TestSubmitOrReplayTellsAReplay: false for the call whose send answered,
// true for every retry after it, also when the outcome was recorded by
// Resolve, and false with every error.
func TestSubmitOrReplayTellsAReplay(t *testing.T) {
	for name, s := range ledgers[withdrawal]() {
		t.Run(name, func(t *testing.T) {
			w := newWithdrawal("w-1")
			out, replayed, err := s.SubmitOrReplay(bg, "req-1", w, nil)
			require.NoError(t, err)
			assert.False(t, replayed, "the first send")
			assert.Equal(t, w, out)
			for range 2 {
				out, replayed, err = s.SubmitOrReplay(bg, "req-1", w, nil)
				require.NoError(t, err)
				assert.True(t, replayed, "a retry")
				assert.Equal(t, w, out)
			}
			resolved := newWithdrawal("w-2")
			resolved.TxHash = "0xfound"
			require.NoError(t, s.Resolve(bg, "req-2", resolved))
			out, replayed, err = s.SubmitOrReplay(bg, "req-2", newWithdrawal("w-2"), nil)
			require.NoError(t, err)
			assert.True(t, replayed, "an outcome recorded by Resolve")
			assert.Equal(t, resolved, out)

			_, replayed, err = s.SubmitOrReplay(bg, "req-3", w, nil)
			require.ErrorIs(t, err, submissions.ErrIdempotencyConflict)
			assert.False(t, replayed, "a refusal")
			_, replayed, err = s.SubmitOrReplay(bg, "req-4", newWithdrawal("w-4"), func(context.Context, withdrawal) (withdrawal, error) {
				return withdrawal{}, errors.New("rail timed out")
			})
			require.ErrorIs(t, err, submissions.ErrOutcomeUnknown)
			assert.False(t, replayed, "a failed send")
		})
	}
}

// TestValidateIsTheLedgersCheck: Fingerprint.Validate refuses what the
// ledger refuses, with the same error, and accepts what it accepts.
func TestValidateIsTheLedgersCheck(t *testing.T) {
	s := submissions.New[withdrawal](quiet)
	for _, w := range []withdrawal{
		newWithdrawal("w-1"),
		{ID: "w-2", Amount: ".5", Currency: "usdc", Dest: "d"},
		{ID: "", Amount: "1", Currency: "EUR", Dest: "d"},
		{ID: "w-3", Amount: "0", Currency: "EUR", Dest: "d"},
		{ID: "w-4", Amount: "1", Currency: "E", Dest: "d"},
		{ID: "w-5", Amount: "1", Currency: "EUR", Dest: "d\x00"},
	} {
		verr := w.Fingerprint().Validate()
		_, err := s.Submit(bg, "req-"+w.ID, w, nil)
		if err == nil {
			assert.NoError(t, verr, "%+v", w)
			continue
		}
		assert.ErrorIs(t, verr, submissions.ErrInvalidFingerprint, "%+v", w)
		assert.EqualError(t, verr, err.Error(), "%+v", w)
	}
}
