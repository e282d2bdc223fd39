// Package pgstore keeps the state of a submissions ledger in PostgreSQL, so
// that several instances of a payout service share one set of claims and the
// database's unique constraints pick the one winner of every race.
//
//	store, err := pgstore.New[Withdrawal](pool)
//	...
//	err = store.Migrate(ctx) // once per deployment, or at every start: it is idempotent
//	ledger := submissions.NewWithStore[Withdrawal](store)
//
// A Store over a table that does not exist fails every call with an error
// that says to call Migrate.
//
// One table holds both of the ledger's indexes: a row per request key, unique
// on the key and unique on the withdrawal id. A claim is one INSERT, and the
// name of the constraint it violates says whether the key or the withdrawal
// was taken; a violation is never swallowed. Each row carries the claim's
// token, an identity column that no earlier claim of the key had, and an
// outcome is written and a claim released only on the row of that token. A
// fresh submit costs two round trips (claim, then outcome), a replay one: a
// plain SELECT on an instance that has seen the key, the claim statement
// elsewhere. The SQL is plain INSERT, SELECT, UPDATE and DELETE over unique
// constraints, with one common table expression; Migrate alone uses an
// advisory lock.
package pgstore

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemledger/submissions"
)

//go:embed schema.sql
var schema string

// DefaultTable is the table a Store uses unless WithTable names another.
const DefaultTable = "submissions"

// Store keeps a ledger's records and claims in one PostgreSQL table. It is
// safe for concurrent use, and several Stores, in several processes, may share
// one table.
type Store[R submissions.Fingerprinter] struct {
	pool   *pgxpool.Pool
	codec  Codec
	names  names
	schema string // the embedded schema for this table
	lockID int64  // the advisory lock Migrate holds
	sql    statements
	recent recentKeys // keys claimed or found here: a retry of one reads first
}

// statements are the store's SQL, for its table.
type statements struct {
	claim, lookup, claimedBy, settle, release, holder string
}

// A Codec turns outcomes into bytes and back. Two outcomes are the same to
// the ledger when their encoding/json encodings are equal, whatever the codec.
type Codec interface {
	Marshal(v any) ([]byte, error)
	Unmarshal(data []byte, v any) error
}

type jsonCodec struct{}

func (jsonCodec) Marshal(v any) ([]byte, error)      { return json.Marshal(v) }
func (jsonCodec) Unmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }

// names are the identifiers of one table's objects, quoted for SQL.
type names struct {
	table, keyUnique, withdrawalUnique string
	// unquoted constraint names, as PostgreSQL reports them in errors
	keyConstraint, withdrawalConstraint string
}

// An Option configures a Store made by New.
type Option interface {
	apply(*options)
}

type options struct {
	table string
	codec Codec
}

type optionFunc func(*options)

func (f optionFunc) apply(o *options) { f(o) }

// WithCodec sets how outcomes are stored. The default is encoding/json.
func WithCodec(c Codec) Option {
	return optionFunc(func(o *options) { o.codec = c })
}

// WithTable sets the table's name: a lower-case SQL identifier of at most 40
// characters (letters, digits, underscores), optionally qualified by a schema
// ("payouts.submissions"). The default is DefaultTable.
func WithTable(name string) Option {
	return optionFunc(func(o *options) { o.table = name })
}

var identifier = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,39}$`)

// New returns a Store over pool. It does not touch the database; call Migrate
// to create the table.
func New[R submissions.Fingerprinter](pool *pgxpool.Pool, opts ...Option) (*Store[R], error) {
	if pool == nil {
		return nil, errors.New("pgstore: nil pool")
	}
	o := options{table: DefaultTable, codec: jsonCodec{}}
	for _, opt := range opts {
		if opt != nil {
			opt.apply(&o)
		}
	}
	parts := strings.Split(o.table, ".")
	if len(parts) > 2 {
		return nil, fmt.Errorf("pgstore: table name %q has more than one dot", o.table)
	}
	for _, p := range parts {
		if !identifier.MatchString(p) {
			return nil, fmt.Errorf("pgstore: table name %q: %q is not a lower-case identifier of at most 40 characters", o.table, p)
		}
	}
	base := parts[len(parts)-1]
	n := names{
		table:                pgx.Identifier(parts).Sanitize(),
		keyConstraint:        base + "_key_unique",
		withdrawalConstraint: base + "_withdrawal_unique",
	}
	n.keyUnique = pgx.Identifier{n.keyConstraint}.Sanitize()
	n.withdrawalUnique = pgx.Identifier{n.withdrawalConstraint}.Sanitize()
	ddl := strings.NewReplacer(
		"{{table}}", n.table,
		"{{key_unique}}", n.keyUnique,
		"{{withdrawal_unique}}", n.withdrawalUnique,
		"{{settled_check}}", pgx.Identifier{base + "_settled_check"}.Sanitize(),
		"{{in_flight_index}}", pgx.Identifier{base + "_in_flight"}.Sanitize(),
		"{{settled_index}}", pgx.Identifier{base + "_settled"}.Sanitize(),
	).Replace(schema)
	if o.codec == nil {
		return nil, errors.New("pgstore: nil codec")
	}
	h := fnv.New64a()
	h.Write([]byte("github.com/idemledger/submissions/pgstore:" + o.table))
	return &Store[R]{pool: pool, codec: o.codec, names: n, schema: ddl, lockID: int64(h.Sum64()), sql: sqlFor(n.table)}, nil
}

// sqlFor returns the statements for table. Tenants are not used yet: every
// row has the empty tenant.
func sqlFor(table string) statements {
	const cols = "claim_id, withdrawal_id, amount, currency, destination, outcome"
	const fpCols = "withdrawal_id, amount, currency, destination"
	return statements{
		// One round trip: the key's row if it has one, else the new row. The
		// NOT EXISTS spares a replay a failed INSERT; it decides nothing: two
		// claims racing past it meet at the unique constraints.
		claim: `WITH existing AS (
	SELECT ` + cols + ` FROM ` + table + ` WHERE tenant = '' AND request_key = $1
), inserted AS (
	INSERT INTO ` + table + ` (request_key, ` + fpCols + `, outcome, settled_at)
	SELECT $1, $2, $3, $4, $5, $6::bytea, CASE WHEN $6::bytea IS NULL THEN NULL ELSE now() END
	WHERE NOT EXISTS (SELECT 1 FROM existing)
	RETURNING ` + cols + `
)
SELECT true, ` + cols + ` FROM inserted
UNION ALL
SELECT false, ` + cols + ` FROM existing`,
		lookup:    `SELECT ` + cols + ` FROM ` + table + ` WHERE tenant = '' AND request_key = $1`,
		claimedBy: `SELECT request_key FROM ` + table + ` WHERE tenant = '' AND withdrawal_id = $1`,
		// After a claim lost on the withdrawal: the key's row and the
		// withdrawal's holder, read in one snapshot, so that the answer is
		// true at one moment.
		holder: `SELECT k.claim_id, k.withdrawal_id, k.amount, k.currency, k.destination, k.outcome, h.request_key
FROM (SELECT 1) AS one
LEFT JOIN ` + table + ` k ON k.tenant = '' AND k.request_key = $1
LEFT JOIN ` + table + ` h ON h.tenant = '' AND h.withdrawal_id = $2`,
		settle: `UPDATE ` + table + ` SET outcome = $3, settled_at = now()
WHERE tenant = '' AND request_key = $1 AND claim_id = $2 AND outcome IS NULL
RETURNING ` + fpCols,
		release: `DELETE FROM ` + table + ` WHERE tenant = '' AND request_key = $1 AND claim_id = $2 AND outcome IS NULL
RETURNING ` + fpCols,
	}
}

// Migrate creates the table, its constraints and its indexes if they do not
// exist, and adds the claim_id column to a table made before it. It is
// idempotent, and safe to run from several instances at once: it
// holds a transaction-scoped advisory lock named after the table while it runs.
func (s *Store[R]) Migrate(ctx context.Context) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("pgstore: migrate: %w", err)
	}
	defer tx.Rollback(ctx) // a no-op after Commit
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", s.lockID); err != nil {
		return fmt.Errorf("pgstore: migrate: take the advisory lock: %w", err)
	}
	if _, err := tx.Exec(ctx, s.schema); err != nil {
		return fmt.Errorf("pgstore: migrate %s: %w", s.names.table, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("pgstore: migrate: %w", err)
	}
	return nil
}

// The answers a unique violation gives, told apart by the constraint's name,
// and the error of a table that is not there.
var (
	errKeyTaken        = errors.New("pgstore: request key already recorded")
	errWithdrawalTaken = errors.New("pgstore: withdrawal already claimed")
	errNoTable         = errors.New("pgstore: the table does not exist: call Migrate")
)

// translate is the one place driver errors become the store's answers: a
// unique violation (23505) on the key constraint is errKeyTaken, on the
// withdrawal constraint errWithdrawalTaken, and an undefined table (42P01)
// errNoTable, each wrapping the driver's error. Anything else comes back as
// it is.
func (s *Store[R]) translate(err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return err
	}
	switch {
	case pgErr.Code == "42P01":
		return fmt.Errorf("%w: %w", errNoTable, err)
	case pgErr.Code != "23505":
		return err
	case pgErr.ConstraintName == s.names.keyConstraint:
		return fmt.Errorf("%w: %w", errKeyTaken, err)
	case pgErr.ConstraintName == s.names.withdrawalConstraint:
		return fmt.Errorf("%w: %w", errWithdrawalTaken, err)
	}
	return err
}
