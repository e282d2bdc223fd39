// Package pgstore keeps the state of a submissions ledger in PostgreSQL, so
// that several instances of a payout service share one set of claims and the
// database's unique constraints pick the one winner of every race.
//
//	store, err := pgstore.New[Withdrawal](pool)
//	...
//	err = store.Migrate(ctx) // once per deployment, or at every start: it is idempotent
//	ledger := submissions.NewWithStore[Withdrawal](store)
//
// Teams that run their own migration tool take the same statements as text
// from Schema instead of calling Migrate. A Store over a table that does not
// exist fails every call with an error that says to call Migrate.
//
// One table holds both of the ledger's indexes: a row per request key, unique
// on the tenant and key and unique on the tenant and withdrawal id, so that
// the keys and withdrawals of two tenants never collide. A claim is one
// INSERT, and the name of the constraint it violates says whether the key or
// the withdrawal was taken; a violation is never swallowed. Each row carries
// the claim's token, an identity column that no earlier claim of the key had,
// and an outcome is written and a claim released only on the row of that
// token. A fresh submit costs two round trips (claim, then outcome); a replay
// one, a plain SELECT, on an instance that has seen the key, and two
// elsewhere (the INSERT that fails, then the SELECT). Claims and settles that
// a Store's callers make while one of the same kind runs are made together,
// in one statement (a group), each row still decided by the constraints
// alone. The SQL is plain
// INSERT, SELECT, UPDATE and DELETE over unique constraints; Migrate and
// WaitClaim's listener alone use advisory locks, and WaitClaim LISTEN.
//
// When the work is a write in the same database, SubmitTx claims the key,
// runs the work and records its answer in the caller's transaction, and
// Submit does so in a transaction of its own: all of it commits or none
// does. WithHooks makes a Store run the service's own writes in the
// transaction of each claim, settle and release, for a send to a rail.
//
// The table holds every tenant id, key, withdrawal id, destination and amount
// the ledger accepts, up to its limits (driver.MaxTenantLen, driver.MaxKeyLen
// and the others), on a database whose encoding is UTF8.
//
// A Store is a driver.Store, and a driver.Lister, driver.Waiter,
// driver.Abandoner, driver.Answerer and driver.Pruner. It is neither a
// driver.Tracker nor a driver.Replayer: the sends under way are a process's own, and each ledger
// keeps the marks of its sends in its memory.
package pgstore

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

//go:embed schema.sql
var schema string

// DefaultTable is the table a Store uses unless WithTable names another.
const DefaultTable = "submissions"

// Store keeps a ledger's records and claims in one PostgreSQL table. It is
// safe for concurrent use, and several Stores, in several processes, may share
// one table.
type Store[R any] struct {
	pool     *pgxpool.Pool
	codec    Codec
	names    names
	schema   string // Schema's statements for this table
	sql      statements
	recent   recentKeys      // tenants' keys claimed or found here: a retry of one reads first
	waits    waits           // the WaitClaims under way, and their listener
	listener *pgx.ConnConfig // the waits' listener connects with it; nil: the pool's
	grouped  bool            // fresh claims and settles are made in groups
	claims   group[claimReq, int64]
	settles  group[settleReq, settled]
	hooks    Hooks[R] // the service's writes in each change's transaction
}

// statements are the store's SQL, for its table.
type statements struct {
	insert, lookup, claimedBy, settle, release, abandon, answered, holder, prune string
	insertGroup, settleGroup                                                     string // grouped claims' and settles'
	insertTx, settleTx                                                           string // SubmitTx's, in its caller's transaction
	channel, relock                                                              string // the wait listener's
	lock, upToDate                                                               string // Migrate's
}

// A Codec turns outcomes into bytes and back. Two outcomes are the same to
// the ledger when their encoding/json encodings are equal, whatever the codec.
// A Store calls a Codec with no connection taken from its pool, so a Codec
// that panics leaves none taken; the panic goes on to the caller.
type Codec interface {
	Marshal(v any) ([]byte, error)
	Unmarshal(data []byte, v any) error
}

type jsonCodec struct{}

func (jsonCodec) Marshal(v any) ([]byte, error)      { return json.Marshal(v) }
func (jsonCodec) Unmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }

// names are the identifiers of one table's objects.
type names struct {
	schema, base string // as given: schema is "" for an unqualified table
	// quoted for SQL
	table, keyUnique, withdrawalUnique, settledCheck, inFlightIndex, prunableIndex string
	oldInFlightIndex, oldSettledIndex                                              string // qualified by the schema when the table is
	// unquoted, as PostgreSQL reports them in errors and catalogs
	keyConstraint, withdrawalConstraint, inFlightName, prunableName, oldInFlightName, oldSettledName string
}

// An Option configures a Store made by New.
type Option interface {
	apply(*options)
}

type options struct {
	table  string
	codec  Codec
	listen *pgx.ConnConfig
	alone  bool
	hooks  any // a Hooks of the Store's R, or nil
}

type optionFunc func(*options)

func (f optionFunc) apply(o *options) { f(o) }

// WithCodec sets how outcomes are stored. The default is encoding/json; New
// refuses a nil Codec.
func WithCodec(c Codec) Option {
	return optionFunc(func(o *options) { o.codec = c })
}

// WithTable sets the table's name: a lower-case SQL identifier of at most 40
// characters (letters, digits, underscores), optionally qualified by a schema
// ("payouts.submissions"). The default is DefaultTable.
func WithTable(name string) Option {
	return optionFunc(func(o *options) { o.table = name })
}

// WithListener sets the connection config of the listener that WaitClaim's
// waits share (see WaitClaim); the default is the pool's. Behind a pooler in
// transaction mode, such as PgBouncer's, give it a direct route to the
// server: the listener needs a session of its own.
func WithListener(cfg *pgx.ConnConfig) Option {
	return optionFunc(func(o *options) { o.listen = cfg })
}

// WithoutGrouping makes every claim and settle a statement of its own. By
// default, the fresh claims that a Store's callers make while one of its
// claims runs are made together in its next statement, and so are settles
// (see Store.Claim); a lone call runs alone either way.
func WithoutGrouping() Option {
	return optionFunc(func(o *options) { o.alone = true })
}

var identifier = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,39}$`)

// New returns a Store over pool, or an error for a nil pool, a nil codec or
// a table name WithTable refuses. It does not touch the database; call
// Migrate to create the table, or run the statements of Schema.
func New[R any](pool *pgxpool.Pool, opts ...Option) (*Store[R], error) {
	if pool == nil {
		return nil, errors.New("pgstore: nil pool")
	}
	o := options{table: DefaultTable, codec: jsonCodec{}}
	for _, opt := range opts {
		if opt != nil {
			opt.apply(&o)
		}
	}
	n, err := tableNames(o.table)
	if err != nil {
		return nil, err
	}
	if o.codec == nil {
		return nil, errors.New("pgstore: nil codec")
	}
	st := &Store[R]{pool: pool, codec: o.codec, names: n, schema: n.ddl(), sql: sqlFor(n), grouped: !o.alone}
	if o.hooks != nil {
		h, ok := o.hooks.(Hooks[R])
		if !ok {
			return nil, fmt.Errorf("pgstore: WithHooks of %T for a Store of %T outcomes", o.hooks, *new(R))
		}
		if len(h.Command) > 200 || !utf8.ValidString(h.Command) || strings.ContainsRune(h.Command, 0) {
			return nil, errors.New("pgstore: Hooks.Command is over 200 bytes, not UTF-8, or holds a NUL byte")
		}
		st.hooks = h
		st.grouped = st.grouped && h.Claimed == nil && h.Settled == nil
	}
	if o.listen != nil {
		st.listener = o.listen.Copy()
	}
	st.initGroups()
	return st, nil
}

// Schema returns the statements Migrate runs for table, a name as WithTable
// takes it, for teams that keep their schema with a migration tool: create
// the table, its constraints and its indexes if they do not exist, and add the
// claim_id, pruned_at and abandoned_at columns to a table made before them. It returns an error for a name
// that WithTable would refuse.
func Schema(table string) (string, error) {
	n, err := tableNames(table)
	if err != nil {
		return "", err
	}
	return n.ddl(), nil
}

// tableNames checks table as WithTable documents it and returns the names of
// its objects.
func tableNames(table string) (names, error) {
	parts := strings.Split(table, ".")
	if len(parts) > 2 {
		return names{}, fmt.Errorf("pgstore: table name %q has more than one dot", table)
	}
	for _, p := range parts {
		if !identifier.MatchString(p) {
			return names{}, fmt.Errorf("pgstore: table name %q: %q is not a lower-case identifier of at most 40 characters", table, p)
		}
	}
	n := names{base: parts[len(parts)-1], table: pgx.Identifier(parts).Sanitize()}
	if len(parts) == 2 {
		n.schema = parts[0]
	}
	n.keyConstraint = n.base + "_key_unique"
	n.withdrawalConstraint = n.base + "_withdrawal_unique"
	n.inFlightName = n.base + "_in_flight_age"
	n.oldInFlightName = n.base + "_in_flight"
	n.prunableName = n.base + "_prunable"
	n.oldSettledName = n.base + "_settled"
	n.keyUnique = pgx.Identifier{n.keyConstraint}.Sanitize()
	n.withdrawalUnique = pgx.Identifier{n.withdrawalConstraint}.Sanitize()
	n.settledCheck = pgx.Identifier{n.base + "_settled_check"}.Sanitize()
	n.inFlightIndex = pgx.Identifier{n.inFlightName}.Sanitize()
	n.prunableIndex = pgx.Identifier{n.prunableName}.Sanitize()
	n.oldInFlightIndex = pgx.Identifier{n.oldInFlightName}.Sanitize()
	n.oldSettledIndex = pgx.Identifier{n.oldSettledName}.Sanitize()
	if n.schema != "" {
		n.oldInFlightIndex = pgx.Identifier{n.schema, n.oldInFlightName}.Sanitize()
		n.oldSettledIndex = pgx.Identifier{n.schema, n.oldSettledName}.Sanitize()
	}
	return n, nil
}

// ddl returns the embedded schema for n's table.
func (n names) ddl() string {
	return strings.NewReplacer(
		"{{table}}", n.table,
		"{{key_unique}}", n.keyUnique,
		"{{withdrawal_unique}}", n.withdrawalUnique,
		"{{settled_check}}", n.settledCheck,
		"{{in_flight_index}}", n.inFlightIndex,
		"{{old_in_flight_index}}", n.oldInFlightIndex,
		"{{prunable_index}}", n.prunableIndex,
		"{{old_settled_index}}", n.oldSettledIndex,
	).Replace(schema)
}

// sqlFor returns the statements for n's table. Every statement of a ledger
// call takes the tenant as its first parameter and reads or writes only that
// tenant's rows, through the unique constraints that both lead with it.
func sqlFor(n names) statements {
	const cols = "claim_id, withdrawal_id, amount, currency, destination, outcome, pruned_at IS NOT NULL, abandoned_at IS NOT NULL, answered_at IS NOT NULL, answer"
	const fpCols = "withdrawal_id, amount, currency, destination"
	table := n.table
	// A table's channel is named after its oid, however its name is spelled;
	// a notification's payload names the tenant and key, as waitPayload does.
	// While a key is waited for, the listener of each Store that waits for it
	// holds a shared advisory lock named after both: a change notifies only
	// when the exclusive lock cannot be had, so that a change nobody waits
	// for takes no part in the server's serialized commit of notifications.
	// The listener's lock waits for a change that holds the exclusive one
	// until that commits, and its waits read the row after.
	channel := `'submissions_' || '` + table + `'::regclass::oid::text`
	waitLock := func(payload string) string {
		return `hashtextextended('submissions wait ' || ` + channel + ` || ' ' || ` + payload + `, 0)`
	}
	notifyOf := func(tenant, key string) string {
		payload := `octet_length(` + tenant + `)::text || ':' || ` + tenant + ` || ` + key
		return `CASE WHEN pg_try_advisory_xact_lock(` + waitLock(payload) + `)
	THEN NULL ELSE pg_notify(` + channel + `, ` + payload + `)::text END`
	}
	notify := notifyOf("$1::text", "$2::text")
	return statements{
		// The claim: the unique constraints decide, and the row's token
		// comes back.
		insert: `INSERT INTO ` + table + ` (tenant, request_key, ` + fpCols + `, outcome, settled_at)
VALUES ($1, $2, $3, $4, $5, $6, $7::bytea, CASE WHEN $7::bytea IS NULL THEN NULL ELSE now() END)
RETURNING claim_id`,
		// A group's claims: those whose key or withdrawal is taken are
		// not made, and come back with no row.
		insertGroup: `INSERT INTO ` + table + ` (tenant, request_key, ` + fpCols + `)
SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[])
ON CONFLICT DO NOTHING
RETURNING tenant, request_key, claim_id`,
		// A claim in its caller's transaction: a key or withdrawal taken
		// comes back as no row, after the transaction that took it ends,
		// and leaves the transaction usable.
		insertTx: `INSERT INTO ` + table + ` (tenant, request_key, ` + fpCols + `)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT DO NOTHING
RETURNING claim_id`,
		// Nobody waits for a claim that its transaction has not committed:
		// no notification.
		settleTx: `UPDATE ` + table + ` SET outcome = $4, settled_at = now()
WHERE tenant = $1 AND request_key = $2 AND claim_id = $3 AND outcome IS NULL`,
		lookup:    `SELECT ` + cols + ` FROM ` + table + ` WHERE tenant = $1 AND request_key = $2`,
		claimedBy: `SELECT request_key FROM ` + table + ` WHERE tenant = $1 AND withdrawal_id = $2`,
		// After a claim lost on the withdrawal: the key's row and the
		// withdrawal's holder, read in one snapshot, so that the answer is
		// true at one moment.
		holder: `SELECT k.claim_id, k.withdrawal_id, k.amount, k.currency, k.destination, k.outcome, k.pruned_at IS NOT NULL,
	k.abandoned_at IS NOT NULL, k.answered_at IS NOT NULL, k.answer, h.request_key, h.pruned_at IS NOT NULL
FROM (SELECT 1) AS one
LEFT JOIN ` + table + ` k ON k.tenant = $1 AND k.request_key = $2
LEFT JOIN ` + table + ` h ON h.tenant = $1 AND h.withdrawal_id = $3`,
		// Settling and releasing a claim notify its waiters, on the table's
		// channel, in the same transaction: the notification is sent when
		// the change commits, and only if it does.
		settle: `WITH settled AS (UPDATE ` + table + ` SET outcome = $4, settled_at = now()
WHERE tenant = $1 AND request_key = $2 AND claim_id = $3 AND outcome IS NULL
RETURNING ` + fpCols + `)
SELECT ` + fpCols + `, ` + notify + ` FROM settled`,
		settleGroup: `WITH settled AS (UPDATE ` + table + ` t SET outcome = g.outcome, settled_at = now()
FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bytea[]) AS g(tenant, request_key, claim_id, outcome)
WHERE t.tenant = g.tenant AND t.request_key = g.request_key AND t.claim_id = g.claim_id AND t.outcome IS NULL
RETURNING t.tenant, t.request_key, t.` + strings.ReplaceAll(fpCols, ", ", ", t.") + `)
SELECT tenant, request_key, ` + fpCols + `, ` + notifyOf("tenant", "request_key") + ` FROM settled`,
		release: `WITH released AS (DELETE FROM ` + table + ` WHERE tenant = $1 AND request_key = $2 AND claim_id = $3 AND outcome IS NULL AND answered_at IS NULL
RETURNING ` + fpCols + `, abandoned_at IS NOT NULL AS abandoned)
SELECT ` + fpCols + `, abandoned, ` + notify + ` FROM released`,
		// Abandoning a claim in flight marks its row, and notifies its
		// waiters as settling and releasing do.
		abandon: `WITH abandoned AS (UPDATE ` + table + ` SET abandoned_at = now()
WHERE tenant = $1 AND request_key = $2 AND claim_id = $3 AND outcome IS NULL
RETURNING 1)
SELECT ` + notify + ` FROM abandoned`,
		// So, with the answer that could not be recorded, kept.
		answered: `WITH answered AS (UPDATE ` + table + ` SET abandoned_at = coalesce(abandoned_at, now()), answered_at = now(), answer = $4
WHERE tenant = $1 AND request_key = $2 AND claim_id = $3 AND outcome IS NULL
RETURNING 1)
SELECT ` + notify + ` FROM answered`,
		channel: `SELECT ` + channel,
		// The listener locks the keys whose payloads are $1, and unlocks
		// those of $2, on the server session whose pid it returns.
		relock: `SELECT pg_backend_pid(), (SELECT count(pg_advisory_lock_shared(` + waitLock("p") + `)) FROM unnest($1::text[]) p),
	(SELECT count(pg_advisory_unlock_shared(` + waitLock("p") + `)) FROM unnest($2::text[]) p)`,
		// Up to $2 settled rows not pruned yet, settled before $1, oldest
		// first through the prunable index, become tombstones: the key, the
		// withdrawal and the token stay, the rest is emptied (an empty
		// outcome, never NULL, so that a tombstone is never in flight). Rows
		// another Prune has locked are skipped, not waited for.
		// The rows are found by their ctid, which stays while this
		// statement holds their locks: a plan that reads those rows only,
		// whatever the planner guesses of $2.
		prune: `UPDATE ` + table + ` SET amount = '', currency = '', destination = '', outcome = ''::bytea, answer = NULL, pruned_at = now()
WHERE ctid = ANY(ARRAY(SELECT ctid FROM ` + table + `
	WHERE outcome IS NOT NULL AND pruned_at IS NULL AND settled_at < $1
	ORDER BY settled_at LIMIT $2 FOR UPDATE SKIP LOCKED)) AND pruned_at IS NULL
RETURNING tenant, request_key, withdrawal_id`,
		// The lock is named after the table where CREATE TABLE puts it: an
		// unqualified name is in current_schema(), so that "submissions" and
		// "public.submissions" take the same lock.
		lock: `SELECT pg_advisory_xact_lock(hashtextextended(
	'submissions/pgstore migrate ' || coalesce(nullif($1::text, ''), current_schema(), '') || '.' || $2::text, 0))`,
		// The table has its claim_id, pruned_at, abandoned_at, answered_at and answer columns
		// and both indexes, and not the indexes they replace: there is
		// nothing to do, and no DDL takes a lock on the table.
		upToDate: `SELECT count(*) FILTER (WHERE NOT old) = 7 AND NOT coalesce(bool_or(old), false) FROM (
	SELECT false AS old FROM pg_attribute WHERE attrelid = to_regclass($1) AND attname IN ('claim_id', 'pruned_at', 'abandoned_at', 'answered_at', 'answer') AND NOT attisdropped
	UNION ALL
	SELECT i.relname IN ($4, $5) FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid
	WHERE x.indrelid = to_regclass($1) AND i.relname IN ($2, $3, $4, $5)
) AS present`,
	}
}

// Migrate brings the table up to date: it runs the statements of Schema in
// one transaction, unless the table already has what they make. It is
// idempotent, and safe to run from several instances at once: it holds a
// transaction-scoped advisory lock named after the schema and table while it
// runs, however the name is spelled ("submissions" or "public.submissions").
// It takes no lock on a table that is up to date, and marked already when
// the Store has hooks (see Hooks.Command: the mark is the table's comment,
// which a first Migrate with hooks writes, reporting UpToDate all the same).
func (s *Store[R]) Migrate(ctx context.Context) error {
	_, err := s.MigrateReport(ctx)
	return err
}

// A Migration is what Migrate did to the table.
type Migration uint8

// The Migrations.
const (
	UpToDate Migration = iota // the table had all Migrate makes: nothing ran
	Created                   // there was no table: Migrate made it
	Updated                   // the table lacked a column or index of today's: Migrate added it
)

// String returns "up to date", "created" or "updated".
func (m Migration) String() string {
	switch m {
	case UpToDate:
		return "up to date"
	case Created:
		return "created"
	case Updated:
		return "updated"
	}
	return fmt.Sprintf("Migration(%d)", uint8(m))
}

// MigrateReport is Migrate, and says what it did: Created, Updated (a table
// made by an older version), or UpToDate when nothing was needed. With an
// error, nothing was changed and the Migration means nothing.
func (s *Store[R]) MigrateReport(ctx context.Context) (Migration, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return UpToDate, fmt.Errorf("pgstore: migrate: %w", err)
	}
	defer tx.Rollback(ctx) // a no-op after Commit
	if err := s.lock(ctx, tx); err != nil {
		return UpToDate, err
	}
	var current, exists bool
	if err := tx.QueryRow(ctx, s.sql.upToDate, s.upToDateArgs()...).Scan(&current); err != nil {
		return UpToDate, fmt.Errorf("pgstore: migrate %s: %w", s.names.table, err)
	}
	done := UpToDate
	if !current {
		if err := tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, s.names.table).Scan(&exists); err != nil {
			return UpToDate, fmt.Errorf("pgstore: migrate %s: %w", s.names.table, err)
		}
		if _, err := tx.Exec(ctx, s.schema); err != nil {
			return UpToDate, fmt.Errorf("pgstore: migrate %s: %w", s.names.table, err)
		}
		done = Created
		if exists {
			done = Updated
		}
	}
	if err := s.markHooked(ctx, tx); err != nil {
		return UpToDate, fmt.Errorf("pgstore: migrate %s: record its hooks: %w", s.names.table, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return UpToDate, fmt.Errorf("pgstore: migrate: %w", err)
	}
	return done, nil
}

// upToDateArgs are the arguments of the statement upToDate.
func (s *Store[R]) upToDateArgs() []any {
	n := &s.names
	return []any{n.table, n.inFlightName, n.prunableName, n.oldInFlightName, n.oldSettledName}
}

// lock takes Migrate's advisory lock for the table in tx.
func (s *Store[R]) lock(ctx context.Context, tx pgx.Tx) error {
	if _, err := tx.Exec(ctx, s.sql.lock, s.names.schema, s.names.base); err != nil {
		return fmt.Errorf("pgstore: migrate: take the advisory lock: %w", err)
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
