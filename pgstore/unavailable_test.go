package pgstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemledger/submissions/driver"
)

// TestUnavailableNamesTheErrorsASettleMayOutlive: an error after which the
// same Settle may stand if made again wraps driver.ErrUnavailable, keeping
// the error; any other is returned as it is.
func TestUnavailableNamesTheErrorsASettleMayOutlive(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, connectErr := pgconn.Connect(ctx, "postgres://nobody@127.0.0.1:1/none?sslmode=disable&connect_timeout=1")
	require.Error(t, connectErr, "nothing listens on port 1")
	pg := func(code string) error { return &pgconn.PgError{Severity: "FATAL", Code: code, Message: "m"} }
	again := []error{
		pg("57P01"), pg("57P02"), pg("57P03"), pg("25006"), pg("40001"), pg("40P01"), pg("08006"), pg("08003"),
		fmt.Errorf("settle: %w", pg("57P01")), connectErr,
		&net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")},
		io.EOF, io.ErrUnexpectedEOF, fmt.Errorf("read: %w", io.ErrUnexpectedEOF),
	}
	for _, err := range again {
		got := unavailable(err)
		assert.ErrorIs(t, got, driver.ErrUnavailable, "%v", err)
		assert.ErrorIs(t, got, err, "%v: kept", err)
		assert.Equal(t, got, unavailable(got), "%v: wrapped once", err)
	}
	for _, err := range []error{
		nil, pg("23505"), pg("42P01"), pg("22P02"), pg("57014"), errors.New("a hook's own error"),
		context.Canceled, context.DeadlineExceeded, fmt.Errorf("settle: %w", context.DeadlineExceeded),
	} {
		assert.Equal(t, err, unavailable(err), "%v: as it is", err)
	}
}

// TestPastEndRunsOnForItsGrace: the context of a fresh claim ends
// claimGrace after its caller's does, not at once, and at once when it is
// stopped.
func TestPastEndRunsOnForItsGrace(t *testing.T) {
	ctx, cancel := context.WithCancel(bg)
	pctx, stop := pastEnd(ctx)
	defer stop()
	cancel()
	ended := time.Now()
	time.Sleep(claimGrace / 4)
	require.NoError(t, pctx.Err(), "within the grace")
	select {
	case <-pctx.Done():
		assert.GreaterOrEqual(t, time.Since(ended), claimGrace, "not before the grace is over")
	case <-time.After(5 * time.Second):
		t.Fatal("the grace never ended")
	}

	pctx, stop = pastEnd(bg)
	stop()
	require.ErrorIs(t, pctx.Err(), context.Canceled, "stopped")
}

// TestAClaimThatCommitsAsItsCtxEndsIsReturned: the caller's ctx ends while
// the claim's statement runs (here, in its Claimed hook's transaction): the
// claim runs on within the grace and is returned, token and all, for the
// caller to release; it is not left standing behind an error.
func TestAClaimThatCommitsAsItsCtxEndsIsReturned(t *testing.T) {
	pool := testPool(t, 2)
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	hooks := Hooks[w]{Claimed: func(hctx context.Context, tx pgx.Tx, _, _ string, _ driver.Record[w]) error {
		cancel() // the caller gives up as the row is written
		_, err := tx.Exec(hctx, "SELECT pg_sleep(0.02)")
		return err
	}}
	st, err := New[w](pool, WithTable(testTable(t, pool)), WithHooks(hooks))
	require.NoError(t, err)
	require.NoError(t, st.Migrate(bg))
	x := newW("w-1")
	rec, claimed, err := st.Claim(ctx, "", "req-1", x.Fingerprint(), nil)
	require.NoError(t, err, "the claim that committed")
	require.True(t, claimed)
	require.NotZero(t, rec.Token)
	require.Error(t, ctx.Err())
	_, released, err := st.Release(bg, "", "req-1", rec.Token)
	require.NoError(t, err)
	require.True(t, released, "released by its token, as the ledger does")
}
