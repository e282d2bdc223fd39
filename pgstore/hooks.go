package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemledger/submissions/driver"
)

// Hooks are a service's own writes, made in the transaction of each change
// that a Store makes to a claim, so that the service's rows and the ledger
// commit together or not at all: a withdrawal "approved" becomes "sending"
// in the claim's transaction, "sent" in the outcome's, and "approved" again
// in the release's. The send itself runs outside any transaction, as it
// does without hooks. A nil hook is skipped.
//
// A hook that returns an error or panics rolls the change back, and the
// ledger call fails as it does when the store fails at that step, its error
// wrapping the hook's (a panic goes on): a claim's is ErrStoreFailed, and
// nothing is sent; a send's outcome's is ErrOutcomeNotRecorded, the answer
// returned and the key left in flight, its rows as the claim left them; a
// release's, after a send that moved nothing, is ErrStoreFailed (the claim
// left in flight, abandoned, for an operator); a Resolve's or an operator's
// Release's is ErrStoreFailed. A change that the server rolled back to
// break a deadlock, or for a serialization failure, is made again, up to
// three times in all, hooks included. A hook runs for every ledger and
// operator tool on a Store made with it, and only for them: a Store made
// without the hooks over the same table changes claims without them. SubmitTx
// and Submit run no hook: their work is the service's writes, in the same
// transaction already.
type Hooks[R any] struct {
	// Claimed runs after a claim's row is inserted: rec is in flight, for a
	// send, or done with its outcome, for a Resolve of an unknown key.
	Claimed func(ctx context.Context, tx pgx.Tx, tenant, key string, rec driver.Record[R]) error
	// Settled runs after an outcome is written on a claim in flight: by its
	// send, or by a Resolve.
	Settled func(ctx context.Context, tx pgx.Tx, tenant, key string, rec driver.Record[R]) error
	// Released runs after a claim in flight is deleted: its send moved
	// nothing, or an operator released it.
	Released func(ctx context.Context, tx pgx.Tx, tenant, key string, rec driver.Record[R]) error
	// Command names the operator's command that changes the table with
	// these hooks ("payoutd ctl", say). Migrate with a hook records on the
	// table (its comment, replacing any other) that it is changed with
	// hooks, and by which command when Command is set; a tool made without
	// the hooks (submissionsctl) then refuses to resolve or release there,
	// naming the command: its changes would leave the service's rows as
	// they were. COMMENT ON TABLE ... IS NULL clears the mark, once no
	// service of the table has hooks.
	Command string
}

// hookMark is the table comment by which Migrate records that the table is
// changed with hooks; hookCommand and the command follow when it has one.
const (
	hookMark    = "submissions: changed with a service's hooks"
	hookCommand = ": run "
)

// hooked reports whether s has a hook.
func (s *Store[R]) hooked() bool {
	h := &s.hooks
	return h.Claimed != nil || h.Settled != nil || h.Released != nil
}

// markHooked records on the table, in tx, that s changes it with hooks,
// unless it says so already.
func (s *Store[R]) markHooked(ctx context.Context, tx pgx.Tx) error {
	if !s.hooked() {
		return nil
	}
	mark := hookMark
	if s.hooks.Command != "" {
		mark += hookCommand + s.hooks.Command
	}
	var stmt *string
	if err := tx.QueryRow(ctx, `SELECT CASE WHEN obj_description(to_regclass($1), 'pg_class') IS DISTINCT FROM $2
	THEN format('COMMENT ON TABLE %s IS %L', $1::text, $2::text) END`, s.names.table, mark).Scan(&stmt); err != nil || stmt == nil {
		return err
	}
	_, err := tx.Exec(ctx, *stmt)
	return err
}

// HookedBy reports whether a Migrate with hooks marked the table as
// changed with a service's hooks, and the command it named ("" for none;
// see Hooks.Command).
func (s *Store[R]) HookedBy(ctx context.Context) (command string, hooked bool, err error) {
	var comment *string
	if err := s.pool.QueryRow(ctx, `SELECT obj_description(to_regclass($1), 'pg_class')`, s.names.table).Scan(&comment); err != nil {
		return "", false, fmt.Errorf("pgstore: read the comment of %s: %w", s.names.table, err)
	}
	if comment == nil || !strings.HasPrefix(*comment, hookMark) {
		return "", false, nil
	}
	command, _ = strings.CutPrefix(strings.TrimPrefix(*comment, hookMark), hookCommand)
	return command, true, nil
}

// WithHooks makes the Store run h in the transaction of each claim, settle
// and release. R must be the Store's outcome type; New refuses another. A
// Store with a Claimed or Settled hook makes each claim and each settle
// alone (see WithoutGrouping), in a transaction of its own.
func WithHooks[R any](h Hooks[R]) Option {
	return optionFunc(func(o *options) { o.hooks = h })
}

// hooked runs write and then, if write changed a row, hook, in one READ
// COMMITTED transaction on s's pool, and commits it (as Submit commits);
// write's error is translated, hook's named. A transaction the server
// rolled back to break a deadlock or a serialization failure, whoever
// caused it, is made again, a few times.
func hooked[R any](ctx context.Context, s *Store[R], name string, hook func(context.Context, pgx.Tx, string, string, driver.Record[R]) error,
	tenant, key string, write func(tx pgx.Tx) (driver.Record[R], bool, error)) error {
	var err error
	for range hookAttempts {
		if err = hookedOnce(ctx, s, name, hook, tenant, key, write); !retryable(err) {
			return err
		}
	}
	return err
}

// hookAttempts bounds the attempts of a hooked change.
const hookAttempts = 3

// retryable reports an error of a transaction the server rolled back, that
// changed nothing: a deadlock or a serialization failure.
func retryable(err error) bool {
	pgErr, ok := errors.AsType[*pgconn.PgError](err)
	return ok && (pgErr.Code == "40P01" || pgErr.Code == "40001")
}

// hookedOnce is one attempt of hooked.
func hookedOnce[R any](ctx context.Context, s *Store[R], name string, hook func(context.Context, pgx.Tx, string, string, driver.Record[R]) error,
	tenant, key string, write func(tx pgx.Tx) (driver.Record[R], bool, error)) error {
	tx, err := s.pool.BeginTx(ctx, readCommitted)
	if err != nil {
		return err
	}
	ended := false
	defer func() {
		if !ended { // an error, or a panic under way
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), endTimeout)
			defer cancel()
			_ = tx.Rollback(rctx)
		}
	}()
	rec, changed, err := write(tx)
	if err != nil {
		return s.translate(err)
	}
	if changed {
		if err := hook(ctx, tx, tenant, key, rec); err != nil {
			return fmt.Errorf("pgstore: hook %s: %w", name, err)
		}
	}
	ended = true
	return commit(ctx, tx)
}
