package pgstore

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemledger/submissions"
)

// codec is a Codec whose Marshal returns out and err.
type codec struct {
	jsonCodec
	out []byte
	err error
}

func (c codec) Marshal(any) ([]byte, error) { return c.out, c.err }

// TestNewAppliesItsOptions: the table and the codec a Store uses are the ones
// its options name, in order, nil options skipped. New does not touch the
// database, so neither does this test.
func TestNewAppliesItsOptions(t *testing.T) {
	c := codec{err: errors.New("codec broken")}
	s, err := New[w](&pgxpool.Pool{}, WithTable("ignored"), nil, WithTable("payouts.withdrawals"), WithCodec(c))
	require.NoError(t, err)
	assert.Equal(t, `"payouts"."withdrawals"`, s.names.table)
	_, err = s.encode("req-1", newW("w-1"))
	assert.ErrorIs(t, err, c.err, "encode uses the codec")
	assert.True(t, s.grouped, "claims and settles are grouped by default")
	assert.Nil(t, s.listener, "the listener connects as the pool does by default")

	listener := &pgx.ConnConfig{}
	s, err = New[w](&pgxpool.Pool{}, WithoutGrouping(), WithListener(listener))
	require.NoError(t, err)
	assert.False(t, s.grouped, "WithoutGrouping")
	require.NotNil(t, s.listener)
	assert.NotSame(t, listener, s.listener, "WithListener keeps a copy")
}

// TestMigrateGivesBackItsConnection: Migrate returns the connection it took
// to the pool, whether it succeeds or fails. A connection it kept would hold
// one of the pool's for good (and make pool.Close wait forever, which is why
// this test closes its pool only when none is kept).
func TestMigrateGivesBackItsConnection(t *testing.T) {
	pool, err := pgxpool.NewWithConfig(bg, testPool(t, 2).Config())
	require.NoError(t, err)
	t.Cleanup(func() {
		if pool.Stat().AcquiredConns() == 0 {
			pool.Close()
		}
	})
	for _, c := range []struct {
		table string
		fails bool
	}{
		{testTable(t, pool), false},
		{"no_such_schema." + testTable(t, pool), true}, // the CREATE TABLE fails
	} {
		s, err := New[w](pool, WithTable(c.table))
		require.NoError(t, err)
		err = s.Migrate(bg)
		require.Zero(t, pool.Stat().AcquiredConns(), "connections acquired after Migrate of %s (error %v)", c.table, err)
		if c.fails {
			require.Error(t, err, "Migrate of %s", c.table)
		} else {
			require.NoError(t, err, "Migrate of %s", c.table)
		}
	}
}

// TestOutcomesTheCodecCannotEncode: an outcome the codec fails on, or encodes
// as no bytes (which would read back as no outcome), is never recorded. A
// Resolve says so and leaves the key unknown and the withdrawal free; a
// Submit returns the rail's outcome with ErrOutcomeNotRecorded and the key
// stays in flight, abandoned.
func TestOutcomesTheCodecCannotEncode(t *testing.T) {
	pool := testPool(t, 2)
	broken := errors.New("codec broken")
	for _, c := range []struct {
		name  string
		codec Codec
		want  string
	}{
		{"an error", codec{err: broken}, "codec broken"},
		{"no bytes", codec{out: []byte{}}, "the codec returned no bytes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			st, err := New[w](pool, WithTable(testTable(t, pool)), WithCodec(c.codec))
			require.NoError(t, err)
			require.NoError(t, st.Migrate(bg))
			ledger := submissions.NewWithStore[w](st, submissions.WithLogger(quiet))
			err = ledger.Resolve(bg, "req-1", sent(newW("w-1"), "0xfound"))
			require.ErrorIs(t, err, submissions.ErrStoreFailed, "Resolve")
			require.ErrorContains(t, err, c.want, "Resolve")
			_, ok, err := ledger.ClaimedBy(bg, "w-1")
			require.NoError(t, err)
			require.False(t, ok, "the withdrawal stays free after the failed Resolve")

			moved := sent(newW("w-2"), "0xmoved")
			out, err := ledger.Submit(bg, "req-2", newW("w-2"), func(context.Context, w) (w, error) { return moved, nil })
			require.ErrorIs(t, err, submissions.ErrOutcomeNotRecorded, "Submit")
			require.ErrorContains(t, err, c.want, "Submit")
			require.Equal(t, moved, out, "Submit returns the rail's outcome")
			rec, ok, err := st.Lookup(bg, "", "req-2")
			require.NoError(t, err)
			require.True(t, ok)
			assert.False(t, rec.Done, "in flight")
			assert.True(t, rec.Abandoned, "the claim whose answer was not recorded is abandoned")
			_, err = ledger.Submit(bg, "req-2", newW("w-2"), nil)
			require.ErrorIs(t, err, submissions.ErrSubmissionInFlight, "Submit again")
		})
	}
}
