package pgstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemledger/submissions/driver"
	"github.com/idemledger/submissions/internal/engine"
)

// SubmitTx is a submit whose work is a write in s's database, made in tx,
// the caller's transaction: the claim of key and of req's withdrawal, work's
// own writes (work gets tx) and work's answer as the key's outcome are all
// written in tx, and commit or roll back with it. It returns the outcome,
// and whether it was replayed: recorded before, by a transaction that
// committed, or by Submit.
//
// The claim is an INSERT ... ON CONFLICT DO NOTHING in tx: when another
// transaction holds the key or the withdrawal, still open, it waits for that
// transaction to end (or for ctx). A key that has a record is answered as
// Submit answers it, work not called: the outcome replayed, or
// ErrIdempotencyConflict, ErrSubmissionInFlight, ErrPruned; a withdrawal
// another key holds is a *ConflictError. None of these is a failed
// statement, and tx is as it was. Bad input gets Submit's errors, nothing
// written.
//
// When work returns an error, panics or answers for another withdrawal, or
// the outcome cannot be written, tx is aborted before the error (or the
// panic) goes on: the caller rolls it back (or back to a savepoint that tx
// began after), and a commit of it rolls back too (pgx.ErrTxCommitRollback),
// so that neither the claim nor work's writes stand. tx must be READ
// COMMITTED (PostgreSQL's default): in a stricter one, a claim committed by
// another transaction after tx began is a serialization failure (SQLSTATE
// 40001) that aborts tx. A nil tx, or one that has ended or is aborted, is
// an error, and nothing is claimed.
func SubmitTx[R driver.Fingerprinter](ctx context.Context, s *Store[R], tx pgx.Tx, tenant, key string, req R,
	work func(ctx context.Context, tx pgx.Tx, req R) (R, error)) (out R, replayed bool, err error) {
	switch {
	case s == nil:
		return out, false, errors.New("pgstore: nil Store")
	case isNilTx(tx):
		return out, false, errors.New("pgstore: nil transaction")
	}
	var w func(context.Context, R) (R, error)
	if work != nil {
		w = func(ctx context.Context, req R) (R, error) { return work(ctx, workTx{tx}, req) }
	}
	return engine.SubmitTx(ctx, inTx[R]{s, tx}, tenant, key, req, w)
}

// Submit is SubmitTx in a READ COMMITTED transaction of its own on s's
// pool: it checks its input, begins the transaction, runs SubmitTx in it
// and commits it, or rolls it back on any error or panic. A commit that
// fails is ErrStoreFailed; but for one the server answered with an ERROR
// (it rolled back), it may have committed or not: a retry under the same
// key gets the outcome, or does the work. The commit is not cut short by
// ctx (see endTimeout).
func Submit[R driver.Fingerprinter](ctx context.Context, s *Store[R], tenant, key string, req R,
	work func(ctx context.Context, tx pgx.Tx, req R) (R, error)) (out R, replayed bool, err error) {
	if s == nil {
		return out, false, errors.New("pgstore: nil Store")
	}
	if err := engine.CheckTx(ctx, tenant, key, req); err != nil {
		return out, false, err
	}
	tx, err := s.pool.BeginTx(ctx, readCommitted)
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return out, false, cerr
		}
		return out, false, fmt.Errorf("%w: request key %s: begin a transaction: %w", driver.ErrStoreFailed, key, err)
	}
	ended := false
	defer func() {
		if !ended { // an error, or a panic under way
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), endTimeout)
			defer cancel()
			_ = tx.Rollback(rctx) // frees the pool's connection
		}
	}()
	var zero R
	if out, replayed, err = SubmitTx(ctx, s, tx, tenant, key, req, work); err != nil {
		return zero, false, err
	}
	ended = true
	if err = commit(ctx, tx); err != nil {
		return zero, false, fmt.Errorf("%w: request key %s: %w", driver.ErrStoreFailed, key, err)
	}
	return out, replayed, nil
}

// readCommitted are the options of the transactions pgstore begins.
var readCommitted = pgx.TxOptions{IsoLevel: pgx.ReadCommitted}

// endTimeout bounds a commit or rollback that pgstore makes: it runs on a
// context that the caller's ending does not cancel, because a cancel
// request sent to a commit under way would cancel its wait for a
// synchronous standby, and the commit could then stand on the primary
// alone. When the bound itself ends a commit, pgx sends that cancel
// request: the commit may then stand or not, and says so.
const endTimeout = 10 * time.Second

// commit commits tx, however ctx ends meanwhile, within endTimeout; it says
// whether a failed commit was rolled back or may stand.
func commit(ctx context.Context, tx pgx.Tx) error {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), endTimeout)
	defer cancel()
	err := tx.Commit(cctx)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, pgx.ErrTxCommitRollback), refused(err):
		return fmt.Errorf("commit rolled back: %w", err)
	}
	return fmt.Errorf("commit, which may or may not stand: %w", err)
}

// refused reports the answer of a server that refused a statement with an
// ERROR, which writes nothing of it; for a COMMIT (a deferred constraint, a
// serialization failure), the transaction rolled back. A FATAL is not one:
// a server shutting down ends the session of a statement, or a commit, that
// may have been made while it waited for a synchronous standby.
func refused(err error) bool {
	pgErr, ok := errors.AsType[*pgconn.PgError](err)
	return ok && cmp.Or(pgErr.SeverityUnlocalized, pgErr.Severity) == "ERROR"
}

// isNilTx reports a nil tx, or an interface holding a nil pointer.
func isNilTx(tx pgx.Tx) bool {
	if tx == nil {
		return true
	}
	v := reflect.ValueOf(tx)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// workTx is the caller's transaction as SubmitTx's work gets it: it cannot
// end it, which would commit a claim without its outcome.
type workTx struct{ pgx.Tx }

// errWorkEnds is the error of work's Commit or Rollback of its transaction.
var errWorkEnds = errors.New("pgstore: the work cannot end the transaction of its key: return, and its caller ends it")

func (workTx) Commit(context.Context) error   { return errWorkEnds }
func (workTx) Rollback(context.Context) error { return errWorkEnds }

// inTx is a Store's claims in one transaction of its caller's.
type inTx[R any] struct {
	s  *Store[R]
	tx pgx.Tx
}

// Claim inserts tenant's row of key in flight, unless a row has its key or
// withdrawal, which waits for the transaction that wrote it; then it reads
// the key's record and the withdrawal's holder as Store.Claim does.
func (c inTx[R]) Claim(ctx context.Context, tenant, key string, fp driver.Fingerprint) (driver.Record[R], bool, error) {
	for range attempts {
		var token int64
		err := c.tx.QueryRow(ctx, c.s.sql.insertTx, tenant, key, fp.WithdrawalID, fp.Amount, fp.Currency, fp.Destination).Scan(&token)
		switch {
		case err == nil:
			return driver.Record[R]{Fingerprint: fp, Token: driver.Token(token)}, true, nil
		case !errors.Is(err, pgx.ErrNoRows):
			return driver.Record[R]{}, false, txFailed(c.s.translate(err))
		}
		rec, found, holder, pruned, err := c.s.holder(ctx, c.tx, tenant, key, fp.WithdrawalID)
		switch {
		case err != nil:
			return driver.Record[R]{}, false, txFailed(err)
		case found:
			return rec, false, nil
		case holder != "" && holder != key:
			return driver.Record[R]{}, false, &driver.ConflictError{Tenant: tenant, Holder: holder, Key: key, WithdrawalID: fp.WithdrawalID, Pruned: pruned}
		}
		// released meanwhile: try again
	}
	return driver.Record[R]{}, false, fmt.Errorf("pgstore: claim request key %s: still contended after %d attempts", key, attempts)
}

// Settle writes outcome on the row of token that Claim inserted.
func (c inTx[R]) Settle(ctx context.Context, tenant, key string, token driver.Token, outcome R) error {
	encoded, err := c.s.encode(key, outcome)
	if err != nil {
		return err
	}
	tag, err := c.tx.Exec(ctx, c.s.sql.settleTx, tenant, key, int64(token), encoded)
	switch {
	case err != nil:
		return txFailed(c.s.translate(err))
	case tag.RowsAffected() != 1:
		return fmt.Errorf("pgstore: request key %s: the claim made in this transaction is no longer in flight", key)
	}
	return nil
}

// Abort makes the server raise an error in tx, which aborts it: a COMMIT
// of it then rolls back.
func (c inTx[R]) Abort(ctx context.Context) error {
	_, err := c.tx.Exec(ctx, abortTx)
	return err
}

// abortTx is Abort's statement. It fails by design; its text is what the
// server logs.
const abortTx = `DO $$BEGIN RAISE EXCEPTION 'submissions: the claim of this transaction has no outcome: roll it back'; END$$`

// txFailed names the errors of a caller's transaction that cannot take a
// statement: one that has ended, and one that an earlier error aborted.
func txFailed(err error) error {
	if errors.Is(err, pgx.ErrTxClosed) {
		return fmt.Errorf("pgstore: the transaction has been committed or rolled back: %w", err)
	}
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok && pgErr.Code == "25P02" {
		return fmt.Errorf("pgstore: the transaction is aborted by an earlier error: %w", err)
	}
	return err
}
