package pgstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

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
