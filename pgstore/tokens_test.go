package pgstore

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemledger/submissions"
	"github.com/idemledger/submissions/admin"
	"github.com/idemledger/submissions/driver"
)

// TestClaimTokens: every claim of a key has a token no earlier claim of the
// key had, Claim, Lookup and the lost-claim read return it, and Settle and
// Release act only on the claim their token names.
func TestClaimTokens(t *testing.T) {
	pool := testPool(t, 2)
	st := newTestStore[w](t, pool)
	x := newW("w-1")
	fp := x.Fingerprint()
	var zero driver.Record[w]

	first, claimed, err := st.Claim(bg, "", "req-1", fp, nil)
	require.NoError(t, err)
	require.True(t, claimed)
	require.NotZero(t, first.Token)
	again, claimed, err := st.Claim(bg, "", "req-1", fp, nil)
	require.NoError(t, err)
	assert.False(t, claimed)
	assert.Equal(t, first, again, "Claim of a claimed key returns its record, token included")
	found, ok, err := st.Lookup(bg, "", "req-1")
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, first, found)
	rec, found2, holder, _, err := st.holder(bg, st.pool, "", "req-1", x.ID)
	require.NoError(t, err)
	assert.True(t, found2)
	assert.Empty(t, holder)
	assert.Equal(t, first, rec, "the lost-claim read returns the key's record, token included")

	rec, released, err := st.Release(bg, "", "req-1", first.Token+1)
	require.NoError(t, err)
	assert.False(t, released)
	assert.Equal(t, zero, rec, "Release under another token")
	rec, released, err = st.Release(bg, "", "req-1", first.Token)
	require.NoError(t, err)
	assert.True(t, released)
	assert.Equal(t, driver.Record[w]{Fingerprint: fp, Token: first.Token}, rec)

	second, claimed, err := st.Claim(bg, "", "req-1", fp, nil)
	require.NoError(t, err)
	require.True(t, claimed)
	assert.NotEqual(t, first.Token, second.Token, "a key claimed again has a new token")

	answer := sent(x, "0xfirst")
	rec, settled, err := st.Settle(bg, "", "req-1", first.Token, answer)
	require.NoError(t, err)
	assert.False(t, settled, "Settle under the released claim's token")
	assert.Equal(t, zero, rec)
	rec, released, err = st.Release(bg, "", "req-1", first.Token)
	require.NoError(t, err)
	assert.False(t, released, "Release under the released claim's token")
	assert.Equal(t, zero, rec)
	now, ok, err := st.Lookup(bg, "", "req-1")
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, second, now, "the second claim is untouched, in flight")

	answer = sent(x, "0xsecond")
	done := driver.Record[w]{Fingerprint: fp, Outcome: answer, Done: true, Token: second.Token}
	rec, settled, err = st.Settle(bg, "", "req-1", second.Token, answer)
	require.NoError(t, err)
	assert.True(t, settled)
	assert.Equal(t, done, rec)
	rec, settled, err = st.Settle(bg, "", "req-1", second.Token, sent(x, "0xother"))
	require.NoError(t, err)
	assert.False(t, settled, "Settle of a done claim")
	assert.Equal(t, done, rec)
	rec, released, err = st.Release(bg, "", "req-1", second.Token)
	require.NoError(t, err)
	assert.False(t, released, "Release of a done claim")
	assert.Equal(t, done, rec)

	for _, token := range []driver.Token{first.Token, second.Token} {
		rec, settled, err = st.Settle(bg, "", "req-unknown", token, answer)
		require.NoError(t, err)
		assert.False(t, settled)
		assert.Equal(t, zero, rec, "Settle of a key with no row")
		rec, released, err = st.Release(bg, "", "req-unknown", token)
		require.NoError(t, err)
		assert.False(t, released)
		assert.Equal(t, zero, rec, "Release of a key with no row")
	}

	resolved := sent(newW("w-2"), "0xresolved")
	rec, claimed, err = st.Claim(bg, "", "req-2", resolved.Fingerprint(), &resolved)
	require.NoError(t, err)
	assert.True(t, claimed)
	assert.True(t, rec.Done)
	assert.NotZero(t, rec.Token)
	assert.NotEqual(t, second.Token, rec.Token)
}

// TestAnswerOfAReleasedClaimDoesNotLandOnTheNextClaim: while one instance
// sends, an operator on another releases the key, and the key is claimed
// again there for the same withdrawal. The first send's answer comes back
// with ErrOutcomeNotRecorded, and the new claim stays in flight: the answer
// was given to another claim.
func TestAnswerOfAReleasedClaimDoesNotLandOnTheNextClaim(t *testing.T) {
	pool := testPool(t, 4)
	st := newTestStore[w](t, pool)
	other, err := New[w](pool, WithTable(strings.Trim(st.names.table, `"`)))
	require.NoError(t, err)
	here := submissions.NewWithStore[w](st, submissions.WithLogger(quiet))
	elsewhere := submissions.NewWithStore[w](other, submissions.WithLogger(quiet))
	x := newW("w-1")
	railDown := errors.New("rail timed out")

	var before driver.Record[w]
	answer := sent(x, "0xfirst")
	out, err := here.Submit(bg, "req-1", x, func(ctx context.Context, x w) (w, error) {
		rec, ok, lerr := st.Lookup(ctx, "", "req-1")
		require.NoError(t, lerr)
		require.True(t, ok)
		before = rec
		res := elsewhere.Admin().Release(ctx, admin.Target{Key: "req-1", Force: true}) // an operator elsewhere, who does not know of this send
		require.Equal(t, admin.Changed, res.Decision, res.Message)
		_, serr := elsewhere.Submit(ctx, "req-1", x, func(context.Context, w) (w, error) { return w{}, railDown })
		require.ErrorIs(t, serr, submissions.ErrOutcomeUnknown)
		return answer, nil
	})
	require.ErrorIs(t, err, submissions.ErrOutcomeNotRecorded)
	assert.Equal(t, answer, out, "the answer comes back with the error")

	now, ok, err := st.Lookup(bg, "", "req-1")
	require.NoError(t, err)
	require.True(t, ok)
	assert.False(t, now.Done, "the new claim stays in flight")
	assert.NotEqual(t, before.Token, now.Token)
	_, err = elsewhere.Submit(bg, "req-1", x, nil)
	assert.ErrorIs(t, err, submissions.ErrSubmissionInFlight)
	holder, held, err := here.ClaimedBy(bg, x.ID)
	require.NoError(t, err)
	assert.True(t, held)
	assert.Equal(t, "req-1", holder)
}

// previousSchema is the table as Migrate made it before claim tokens.
const previousSchema = `CREATE TABLE %[1]s (
    tenant        text        NOT NULL DEFAULT '',
    request_key   text        NOT NULL,
    withdrawal_id text        NOT NULL,
    amount        text        NOT NULL,
    currency      text        NOT NULL,
    destination   text        NOT NULL,
    outcome       bytea,
    claimed_at    timestamptz NOT NULL DEFAULT now(),
    settled_at    timestamptz,
    CONSTRAINT %[1]s_key_unique UNIQUE (tenant, request_key),
    CONSTRAINT %[1]s_withdrawal_unique UNIQUE (tenant, withdrawal_id),
    CONSTRAINT %[1]s_settled_check CHECK ((outcome IS NULL) = (settled_at IS NULL))
);
CREATE INDEX %[1]s_in_flight ON %[1]s (tenant, claimed_at) WHERE outcome IS NULL;
CREATE INDEX %[1]s_settled ON %[1]s (settled_at) WHERE outcome IS NOT NULL;
INSERT INTO %[1]s (request_key, withdrawal_id, amount, currency, destination) VALUES ('req-1', 'w-1', '25', 'USDC', '0x9f2c');
INSERT INTO %[1]s (request_key, withdrawal_id, amount, currency, destination, outcome, settled_at)
VALUES ('req-2', 'w-2', '25', 'USDC', '0x9f2c', '{"ID":"w-2","Amount":"25.00","Currency":"USDC","Dest":"0x9f2c","State":"sent","TxHash":"0xold"}', now());`

// TestMigrateUpgradesATableOfThePreviousSchema: a table made before claim
// tokens, with rows in flight and done, gets its claim_id column; each row a
// token of its own, and the ledger works on them as on any other.
func TestMigrateUpgradesATableOfThePreviousSchema(t *testing.T) {
	pool := testPool(t, 2)
	table := testTable(t, pool)
	_, err := pool.Exec(bg, strings.ReplaceAll(previousSchema, "%[1]s", table))
	require.NoError(t, err)
	st, err := New[w](pool, WithTable(table))
	require.NoError(t, err)
	_, _, err = st.Lookup(bg, "", "req-1")
	require.Error(t, err, "the old table has no claim_id")

	for range 2 {
		require.NoError(t, st.Migrate(bg))
	}
	var identity string
	require.NoError(t, pool.QueryRow(bg, `SELECT attidentity FROM pg_attribute WHERE attrelid = $1::regclass AND attname = 'claim_id'`, table).Scan(&identity))
	assert.Equal(t, "a", identity, "claim_id is GENERATED ALWAYS AS IDENTITY")
	inFlight, ok, err := st.Lookup(bg, "", "req-1")
	require.NoError(t, err)
	require.True(t, ok)
	done, ok, err := st.Lookup(bg, "", "req-2")
	require.NoError(t, err)
	require.True(t, ok)
	assert.NotZero(t, inFlight.Token)
	assert.NotZero(t, done.Token)
	assert.NotEqual(t, inFlight.Token, done.Token)

	ledger := submissions.NewWithStore[w](st, submissions.WithLogger(quiet))
	out, err := ledger.Submit(bg, "req-2", newW("w-2"), nil)
	require.NoError(t, err)
	assert.Equal(t, "0xold", out.TxHash, "a done row replays")
	_, err = ledger.Submit(bg, "req-1", newW("w-1"), nil)
	require.ErrorIs(t, err, submissions.ErrSubmissionInFlight)
	require.ErrorIs(t, ledger.Release(bg, "req-1"), submissions.ErrSubmissionInFlight, "a claim no send is known to have ended")
	require.Equal(t, admin.Changed, ledger.Admin().Release(bg, admin.Target{Key: "req-1", Force: true}).Decision)
	out, err = ledger.Submit(bg, "req-1", newW("w-1"), func(_ context.Context, x w) (w, error) { return sent(x, "0xnew"), nil })
	require.NoError(t, err)
	assert.Equal(t, "0xnew", out.TxHash)
	again, ok, err := st.Lookup(bg, "", "req-1")
	require.NoError(t, err)
	require.True(t, ok)
	assert.Greater(t, again.Token, done.Token, "a claim after the upgrade draws from the same sequence")
}
