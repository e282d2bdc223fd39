package verify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/idemledger/submissions"
	"github.com/idemledger/submissions/driver"
	"github.com/idemledger/submissions/internal/testdb"
)

// testPool returns a pool on the test database, closed when t ends. Without a
// database it skips t, saying how to get one; with CI=true it fails t instead.
func testPool(t *testing.T) *pgxpool.Pool {
	cfg, err := pgxpool.ParseConfig(testdb.URL(t))
	require.NoError(t, err)
	cfg.MaxConns = 16 // more than the clients: each call has a connection of its own
	pool, err := pgxpool.NewWithConfig(bg, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// testTable returns the name of a table of t's own, dropped when t ends (and
// first, in case a killed run left it).
func testTable(t *testing.T, pool *pgxpool.Pool, prefix string) string {
	table := fmt.Sprintf("%s_%d_%d", prefix, os.Getpid(), rand.Uint32())
	_, err := pool.Exec(bg, "DROP TABLE IF EXISTS "+table)
	require.NoError(t, err)
	t.Cleanup(func() {
		_, err := pool.Exec(bg, "DROP TABLE IF EXISTS "+table)
		require.NoError(t, err, "drop %s", table)
	})
	return table
}

// brokenPostgresRun bounds the search for a history that catches the broken
// PostgreSQL store.
var brokenPostgresRun = linConfig{histories: 300, clients: 6, ops: 12, groups: 2}

func TestBrokenPostgresClaimIsCaught(t *testing.T) {
	pool := testPool(t)
	table := testTable(t, pool, "broken")
	_, err := pool.Exec(bg, "CREATE TABLE "+table+` (
		token         bigserial PRIMARY KEY,
		tenant        text NOT NULL,
		request_key   text NOT NULL,
		withdrawal_id text NOT NULL,
		amount        text NOT NULL,
		currency      text NOT NULL,
		destination   text NOT NULL,
		outcome       bytea
	)`)
	require.NoError(t, err)
	var lanes []lane
	for i := range 3 { // three instances of a service, on one table
		lanes = append(lanes, lane{submissions.NewWithStore[W](faultyStore{&checkThenInsert{pool: pool, table: table}}, quiet), i})
	}
	caught(t, brokenPostgresRun, func(int) []lane { return lanes })
}

// checkThenInsert is a PostgreSQL store whose table has no unique
// constraints: a claim looks for the key, then for the withdrawal, then
// inserts, so two claims can both pass the checks. Its token is the row's
// serial number.
type checkThenInsert struct {
	pool  *pgxpool.Pool
	table string
}

// columns are what a row of a checkThenInsert holds, in scanRecord's order.
const columns = "withdrawal_id, amount, currency, destination, outcome, token"

// scanRecord reads a row of columns as a Record, with ok false when there is
// none.
func scanRecord(row pgx.Row) (rec driver.Record[W], ok bool, err error) {
	var outcome []byte
	var token int64
	fp := &rec.Fingerprint
	err = row.Scan(&fp.WithdrawalID, &fp.Amount, &fp.Currency, &fp.Destination, &outcome, &token)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return driver.Record[W]{}, false, nil
	case err != nil:
		return driver.Record[W]{}, false, err
	}
	rec.Token = driver.Token(token)
	if outcome != nil {
		rec.Done = true
		if err := json.Unmarshal(outcome, &rec.Outcome); err != nil {
			return driver.Record[W]{}, false, err
		}
	}
	return rec, true, nil
}

func (s *checkThenInsert) Claim(ctx context.Context, tenant, key string, fp driver.Fingerprint, outcome *W) (driver.Record[W], bool, error) {
	if rec, ok, err := s.Lookup(ctx, tenant, key); err != nil || ok {
		return rec, false, err
	}
	if holder, ok, err := s.ClaimedBy(ctx, tenant, fp.WithdrawalID); err != nil || ok {
		if ok {
			err = &driver.ConflictError{Tenant: tenant, Holder: holder, Key: key, WithdrawalID: fp.WithdrawalID}
		}
		return driver.Record[W]{}, false, err
	}
	var encoded []byte
	if outcome != nil {
		var err error
		if encoded, err = json.Marshal(*outcome); err != nil {
			return driver.Record[W]{}, false, err
		}
	}
	rec, _, err := scanRecord(s.pool.QueryRow(ctx, "INSERT INTO "+s.table+
		" (tenant, request_key, withdrawal_id, amount, currency, destination, outcome) VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING "+columns,
		tenant, key, fp.WithdrawalID, fp.Amount, fp.Currency, fp.Destination, encoded))
	return rec, err == nil, err
}

// claimOf returns key's record of token, with ok false when there is none.
func (s *checkThenInsert) claimOf(ctx context.Context, tenant, key string, token driver.Token) (driver.Record[W], bool, error) {
	return scanRecord(s.pool.QueryRow(ctx, "SELECT "+columns+" FROM "+s.table+
		" WHERE tenant = $1 AND request_key = $2 AND token = $3", tenant, key, int64(token)))
}

func (s *checkThenInsert) Settle(ctx context.Context, tenant, key string, token driver.Token, outcome W) (driver.Record[W], bool, error) {
	encoded, err := json.Marshal(outcome)
	if err != nil {
		return driver.Record[W]{}, false, err
	}
	rec, settled, err := scanRecord(s.pool.QueryRow(ctx, "UPDATE "+s.table+" SET outcome = $4"+
		" WHERE tenant = $1 AND request_key = $2 AND token = $3 AND outcome IS NULL RETURNING "+columns, tenant, key, int64(token), encoded))
	if err != nil || settled {
		return rec, settled, err
	}
	rec, _, err = s.claimOf(ctx, tenant, key, token)
	return rec, false, err
}

func (s *checkThenInsert) Release(ctx context.Context, tenant, key string, token driver.Token) (driver.Record[W], bool, error) {
	rec, released, err := scanRecord(s.pool.QueryRow(ctx, "DELETE FROM "+s.table+
		" WHERE tenant = $1 AND request_key = $2 AND token = $3 AND outcome IS NULL RETURNING "+columns, tenant, key, int64(token)))
	if err != nil || released {
		return rec, released, err
	}
	rec, _, err = s.claimOf(ctx, tenant, key, token)
	return rec, false, err
}

func (s *checkThenInsert) Lookup(ctx context.Context, tenant, key string) (driver.Record[W], bool, error) {
	return scanRecord(s.pool.QueryRow(ctx, "SELECT "+columns+" FROM "+s.table+
		" WHERE tenant = $1 AND request_key = $2 ORDER BY token LIMIT 1", tenant, key))
}

func (s *checkThenInsert) ClaimedBy(ctx context.Context, tenant, withdrawalID string) (string, bool, error) {
	var key string
	err := s.pool.QueryRow(ctx, "SELECT request_key FROM "+s.table+
		" WHERE tenant = $1 AND withdrawal_id = $2 ORDER BY token LIMIT 1", tenant, withdrawalID).Scan(&key)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", false, nil
	}
	return key, err == nil, err
}
