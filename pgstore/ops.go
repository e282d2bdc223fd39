package pgstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemledger/submissions/driver"
)

// attempts bounds the retries of a claim that lost a race it can read the
// result of: the winner's row is committed by the time the loser sees the
// violation, so one more attempt almost always settles it. Each further
// attempt means that another claim of the key, or of the withdrawal, was made
// and released meanwhile (sends that moved nothing release theirs at once):
// progress elsewhere, not a livelock.
const attempts = 10

// Claim implements driver.Store: one INSERT of tenant's row, whose
// unique constraints decide; the new row's claim_id, drawn from an identity
// sequence, is the claim's token. A violation on the key constraint means the
// key has a row (a retry, or a concurrent claim that won), which is read and
// returned; a violation on the withdrawal constraint means another key of the
// tenant holds the withdrawal, reported as a *driver.ConflictError
// naming it. It returns the key's record, token included: new with claimed
// true, or found with claimed false.
//
// Fresh claims (those without an outcome) made while the Store is running
// one are made in groups (see WithoutGrouping): one INSERT ... ON CONFLICT
// DO NOTHING of the group's rows, which returns those it made; a claim it did
// not make is made again alone, as above, which says why. A claim made alone
// that the server rolls back to break a deadlock with a group is made again.
//
// A key this Store has claimed or found before in the same tenant, and not
// released since, is most likely there still: a retry. For such a key Claim
// reads the row first, a plain SELECT, and inserts only if the row has gone
// (released through another Store meanwhile). A retry of a key that this
// Store has not seen costs the INSERT that fails and the read.
//
// A fresh claim runs on for up to claimGrace past ctx's end (see pastEnd):
// a claim the server commits as ctx ends is returned, token and all, for the
// caller to release, and not left standing behind an error that says this
// call claimed nothing.
func (s *Store[R]) Claim(ctx context.Context, tenant, key string, fp driver.Fingerprint, outcome *R) (driver.Record[R], bool, error) {
	if outcome == nil && s.recent.has(tenant, key) {
		if rec, ok, err := s.Lookup(ctx, tenant, key); err != nil || ok {
			return rec, false, err
		}
	}
	if outcome == nil {
		var stop func()
		ctx, stop = pastEnd(ctx)
		defer stop()
	}
	var encoded []byte // NULL: in flight
	if outcome != nil {
		var err error
		if encoded, err = s.encode(key, *outcome); err != nil {
			return driver.Record[R]{}, false, err
		}
	}
	var err error
	for i := range attempts {
		var token int64
		if i == 0 && s.grouped && outcome == nil {
			token, err = s.claims.do(ctx, claimReq{tenant, key, fp})
		} else {
			token, err = s.insert(ctx, tenant, key, fp, encoded, outcome)
		}
		switch {
		case err == nil:
			s.recent.add(tenant, key)
			rec := driver.Record[R]{Fingerprint: fp, Done: outcome != nil, Token: driver.Token(token)}
			if outcome != nil {
				rec.Outcome = *outcome
			}
			return rec, true, nil
		case errors.Is(err, errKeyTaken):
			rec, found, lerr := s.Lookup(ctx, tenant, key)
			switch {
			case lerr != nil:
				return driver.Record[R]{}, false, lerr
			case found:
				s.recent.add(tenant, key)
				return rec, false, nil
			}
			continue // released meanwhile: try again
		case errors.Is(err, errWithdrawalTaken):
			rec, found, holder, pruned, herr := s.holder(ctx, s.pool, tenant, key, fp.WithdrawalID)
			switch {
			case herr != nil:
				return driver.Record[R]{}, false, herr
			case found: // the key was claimed meanwhile, by a request of its own
				s.recent.add(tenant, key)
				return rec, false, nil
			case holder != "" && holder != key:
				return driver.Record[R]{}, false, &driver.ConflictError{Tenant: tenant, Holder: holder, Key: key, WithdrawalID: fp.WithdrawalID, Pruned: pruned}
			}
			continue // released meanwhile: try again
		case errors.Is(err, errAlone), retryable(err) && s.hooks.Claimed == nil:
			continue // not made by its group, or rolled back to break a deadlock with one: made alone (hooked retries its own)
		}
		return driver.Record[R]{}, false, err
	}
	return driver.Record[R]{}, false, fmt.Errorf("pgstore: claim request key %s: still contended after %d attempts: %w", key, attempts, err)
}

// claimGrace is how long a fresh claim runs on past its ctx's end.
const claimGrace = 100 * time.Millisecond

// pastEnd returns a context with ctx's values that ends claimGrace after
// ctx does; stop releases it.
func pastEnd(ctx context.Context) (_ context.Context, stop func()) {
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stopAfter := context.AfterFunc(ctx, func() {
		grace := time.NewTimer(claimGrace)
		defer grace.Stop()
		select {
		case <-grace.C:
		case <-pctx.Done(): // stopped first
		}
		cancel()
	})
	return pctx, func() { stopAfter(); cancel() }
}

// insert is Claim's INSERT of one row, with the Claimed hook in its
// transaction when the Store has one.
func (s *Store[R]) insert(ctx context.Context, tenant, key string, fp driver.Fingerprint, encoded []byte, outcome *R) (int64, error) {
	var token int64
	row := func(q querier) (driver.Record[R], bool, error) {
		err := q.QueryRow(ctx, s.sql.insert, tenant, key, fp.WithdrawalID, fp.Amount, fp.Currency, fp.Destination, encoded).Scan(&token)
		rec := driver.Record[R]{Fingerprint: fp, Done: outcome != nil, Token: driver.Token(token)}
		if outcome != nil {
			rec.Outcome = *outcome
		}
		return rec, err == nil, err
	}
	if s.hooks.Claimed == nil {
		_, _, err := row(s.pool)
		return token, s.translate(err)
	}
	return token, hooked(ctx, s, "Claimed", s.hooks.Claimed, tenant, key, func(tx pgx.Tx) (driver.Record[R], bool, error) { return row(tx) })
}

// holder reads tenant's record of key through q, if it has one, and
// otherwise the key of tenant that holds withdrawalID ("" for none) and
// whether its record was pruned, both at the same moment.
func (s *Store[R]) holder(ctx context.Context, q querier, tenant, key, withdrawalID string) (rec driver.Record[R], found bool, holder string, holderPruned bool, err error) {
	var (
		token                                 *int64
		id, amount, currency, dest, by        *string
		outcome, answer                       []byte
		pruned, abandoned, answered, byPruned bool
	)
	if err := q.QueryRow(ctx, s.sql.holder, tenant, key, withdrawalID).Scan(&token, &id, &amount, &currency, &dest, &outcome, &pruned, &abandoned, &answered, &answer, &by, &byPruned); err != nil {
		return rec, false, "", false, s.translate(err)
	}
	if token != nil {
		row := storedRow{token: *token, fp: driver.Fingerprint{WithdrawalID: *id, Amount: *amount, Currency: *currency, Destination: *dest}, outcome: outcome, pruned: pruned, abandoned: abandoned, answered: answered, answer: answer}
		rec, err = s.record(key, row)
		return rec, err == nil, "", false, err
	}
	if by != nil {
		holder = *by
	}
	return rec, false, holder, byPruned, nil
}

// encode encodes an outcome; an encoding of no bytes would read back as no
// outcome (NULL), so it is refused.
func (s *Store[R]) encode(key string, outcome R) ([]byte, error) {
	encoded, err := s.codec.Marshal(outcome)
	switch {
	case err != nil:
		return nil, fmt.Errorf("pgstore: encode the outcome of request key %s: %w", key, err)
	case len(encoded) == 0:
		return nil, fmt.Errorf("pgstore: encode the outcome of request key %s: the codec returned no bytes", key)
	}
	return encoded, nil
}

// storedRow is a row as scanned, before its outcome is decoded.
type storedRow struct {
	token   int64 // claim_id
	fp      driver.Fingerprint
	outcome []byte // nil while in flight
	pruned  bool   // a tombstone: only the token and withdrawal id are kept
	// abandoned: abandoned_at is set (which a settled row ignores)
	abandoned bool
	answered  bool   // answered_at is set (so is abandoned_at)
	answer    []byte // the answer kept, encoded; nil for none
}

func (s *Store[R]) record(key string, row storedRow) (driver.Record[R], error) {
	if row.pruned {
		return driver.Record[R]{Fingerprint: driver.Fingerprint{WithdrawalID: row.fp.WithdrawalID}, Done: true,
			Token: driver.Token(row.token), Pruned: true}, nil
	}
	rec := driver.Record[R]{Fingerprint: row.fp, Done: row.outcome != nil, Token: driver.Token(row.token), Abandoned: row.abandoned && row.outcome == nil}
	if rec.Abandoned && row.answered {
		rec.Answered = true
		if row.answer != nil {
			rec.Answer = new(R)
			if s.codec.Unmarshal(row.answer, rec.Answer) != nil {
				rec.Answer = nil // an answer the codec cannot read is no answer kept: the claim stays answered
			}
		}
	}
	if rec.Done {
		if err := s.codec.Unmarshal(row.outcome, &rec.Outcome); err != nil {
			return driver.Record[R]{}, fmt.Errorf("pgstore: decode the outcome of request key %s: %w", key, err)
		}
	}
	return rec, nil
}

// Settle implements driver.Store: one UPDATE that writes outcome on
// tenant's row of key and token while it has no outcome, and returns the settled
// record. When it matches nothing, a read tells why: the claim is done (its
// record, settled false) or gone (the zero Record). Settles made while the
// Store is running one are made in groups, one UPDATE for all, as claims
// are; when a group's statement fails, each settle is made alone.
//
// An error after which the Settle may stand if made again (the server could
// not be reached or went away, is not the primary, or rolled it back)
// wraps driver.ErrUnavailable, and the ledger makes it again while its
// caller's ctx lasts.
func (s *Store[R]) Settle(ctx context.Context, tenant, key string, token driver.Token, outcome R) (driver.Record[R], bool, error) {
	rec, settled, err := s.settle(ctx, tenant, key, token, outcome)
	return rec, settled, unavailable(err)
}

// settle is Settle, its errors as they come.
func (s *Store[R]) settle(ctx context.Context, tenant, key string, token driver.Token, outcome R) (driver.Record[R], bool, error) {
	encoded, err := s.encode(key, outcome)
	if err != nil {
		return driver.Record[R]{}, false, err
	}
	q := settleReq{tenant, key, token, encoded}
	var a settled
	if s.hooks.Settled != nil {
		err = hooked(ctx, s, "Settled", s.hooks.Settled, tenant, key, func(tx pgx.Tx) (driver.Record[R], bool, error) {
			a, err = s.settleOn(ctx, tx, q)
			return driver.Record[R]{Fingerprint: a.fp, Outcome: outcome, Done: true, Token: token}, a.written, err
		})
	} else if s.grouped {
		a, err = s.settles.do(ctx, q)
	}
	if s.hooks.Settled == nil && (!s.grouped || errors.Is(err, errAlone)) {
		a, err = s.settles.alone(ctx, q)
	}
	switch {
	case err != nil:
		return driver.Record[R]{}, false, err
	case a.written:
		return driver.Record[R]{Fingerprint: a.fp, Outcome: outcome, Done: true, Token: token}, true, nil
	}
	return s.claimDone(ctx, tenant, key, token)
}

// Release implements driver.Store: one DELETE of tenant's row of key and
// token while it has no outcome and no answer, which returns the deleted record, Abandoned
// if it was; the claim on the withdrawal is the same row, so it goes with it. When it matches
// nothing, a read tells why: the claim is done or answered (its record,
// released false) or gone (the zero Record).
func (s *Store[R]) Release(ctx context.Context, tenant, key string, token driver.Token) (driver.Record[R], bool, error) {
	release := func(q querier) (driver.Record[R], bool, error) {
		rec := driver.Record[R]{Token: token}
		fp := &rec.Fingerprint
		err := q.QueryRow(ctx, s.sql.release, tenant, key, int64(token)).Scan(&fp.WithdrawalID, &fp.Amount, &fp.Currency, &fp.Destination, &rec.Abandoned, nil)
		if errors.Is(err, pgx.ErrNoRows) {
			return driver.Record[R]{}, false, nil
		}
		return rec, err == nil, err
	}
	var (
		rec      driver.Record[R]
		released bool
		err      error
	)
	if s.hooks.Released == nil {
		rec, released, err = release(s.pool)
		err = s.translate(err)
	} else {
		err = hooked(ctx, s, "Released", s.hooks.Released, tenant, key, func(tx pgx.Tx) (driver.Record[R], bool, error) {
			rec, released, err = release(tx)
			return rec, released, err
		})
	}
	switch {
	case err != nil:
		return driver.Record[R]{}, false, err
	case released:
		s.recent.forget(tenant, key) // its next claim is most likely a fresh one
		return rec, true, nil
	}
	return s.claimDone(ctx, tenant, key, token)
}

// Abandon implements driver.Abandoner: one UPDATE that sets abandoned_at
// on tenant's row of key and token while it has no outcome, notifying the
// claim's waiters in the same statement as Settle and Release do. A row that
// is done or gone changes nothing. Only a send that ends without an answer
// pays for it.
func (s *Store[R]) Abandon(ctx context.Context, tenant, key string, token driver.Token) error {
	if _, err := s.pool.Exec(ctx, s.sql.abandon, tenant, key, int64(token)); err != nil {
		return s.translate(err)
	}
	return nil
}

// AbandonAnswered implements driver.Answerer: Abandon that also sets
// answered_at, and keeps answer encoded as an outcome is (none when answer
// is nil, or the codec cannot encode it), in one UPDATE.
func (s *Store[R]) AbandonAnswered(ctx context.Context, tenant, key string, token driver.Token, answer *R) error {
	var encoded []byte
	if answer != nil {
		func() {
			defer func() { _ = recover() }()    // a codec that panics: the answer is marked, not kept
			encoded, _ = s.encode(key, *answer) // an answer the codec refuses is marked, not kept
		}()
	}
	if _, err := s.pool.Exec(ctx, s.sql.answered, tenant, key, int64(token), encoded); err != nil {
		return s.translate(err)
	}
	return nil
}

// claimDone is the answer of a Settle or Release that matched no row: key's
// record if it is token's claim (which, having been in flight under a token
// its caller holds, can only be done now), and otherwise the zero Record.
func (s *Store[R]) claimDone(ctx context.Context, tenant, key string, token driver.Token) (driver.Record[R], bool, error) {
	rec, ok, err := s.Lookup(ctx, tenant, key)
	if err != nil || !ok || rec.Token != token {
		return driver.Record[R]{}, false, err
	}
	return rec, false, nil
}

// Lookup implements driver.Store: one SELECT of tenant's row of key, returned as
// its record with its token, or ok false when key has none.
func (s *Store[R]) Lookup(ctx context.Context, tenant, key string) (driver.Record[R], bool, error) {
	return s.lookupOn(ctx, s.pool, tenant, key)
}

// ClaimedBy implements driver.Store: one SELECT of the key whose row of
// tenant holds withdrawalID, or ok false when none does.
func (s *Store[R]) ClaimedBy(ctx context.Context, tenant, withdrawalID string) (string, bool, error) {
	var key string
	err := s.pool.QueryRow(ctx, s.sql.claimedBy, tenant, withdrawalID).Scan(&key)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return "", false, nil
	case err != nil:
		return "", false, s.translate(err)
	}
	return key, true, nil
}

// unavailable returns err wrapped in driver.ErrUnavailable when the call
// that failed with it may succeed if made again: a connection that could not
// be made (no server takes writes yet, during a failover) or that broke, a
// server shutting down or starting up, a transaction refused as read-only
// (a standby, or a primary demoted under it), or one the server rolled back
// (a deadlock, a serialization failure). It returns any other err as it is.
func unavailable(err error) error {
	if err == nil || errors.Is(err, driver.ErrUnavailable) || errors.Is(err, context.Canceled) ||
		errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err) {
		return err // the caller's ctx ended: the ledger makes no Settle again
	}
	again := false
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok {
		switch pgErr.Code {
		case "57P01", "57P02", "57P03", "25006", "40001", "40P01":
			again = true
		default:
			again = strings.HasPrefix(pgErr.Code, "08") // connection exception
		}
	} else if _, ok := errors.AsType[*pgconn.ConnectError](err); ok {
		again = true
	} else if _, ok := errors.AsType[net.Error](err); ok {
		again = true
	} else {
		again = errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || pgconn.SafeToRetry(err)
	}
	if !again {
		return err
	}
	return fmt.Errorf("%w: %w", driver.ErrUnavailable, err)
}

// recentKeys is a bounded set of keys a Store has claimed or found, each with
// its tenant: two generations of at most recentCap keys each, the older
// dropped when the newer fills.
type recentKeys struct {
	mu       sync.Mutex // protects both generations
	new, old map[tenantKey]struct{}
}

// tenantKey is a request key of one tenant.
type tenantKey struct{ tenant, key string }

const recentCap = 1 << 16

func (r *recentKeys) has(tenant, key string) bool {
	k := tenantKey{tenant, key}
	r.mu.Lock()
	defer r.mu.Unlock()
	_, inNew := r.new[k]
	_, inOld := r.old[k]
	return inNew || inOld
}

func (r *recentKeys) forget(tenant, key string) {
	k := tenantKey{tenant, key}
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.new, k)
	delete(r.old, k)
}

func (r *recentKeys) add(tenant, key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.new) >= recentCap {
		r.old, r.new = r.new, nil
	}
	if r.new == nil {
		r.new = make(map[tenantKey]struct{})
	}
	r.new[tenantKey{tenant, key}] = struct{}{}
}

// Prune implements driver.Pruner: one UPDATE that turns up to limit
// settled rows, settled before before, into tombstones, oldest first through
// the prunable index (which holds the settled rows not pruned yet), and
// returns them. A tombstone stays in the table, so that its unique
// constraints keep refusing the key and the withdrawal; its amount, currency,
// destination and outcome are emptied. Rows in flight are never read, and
// rows another Prune is pruning are skipped.
func (s *Store[R]) Prune(ctx context.Context, before time.Time, limit int) ([]driver.PrunedRecord, error) {
	if limit <= 0 {
		return nil, nil
	}
	rows, err := s.pool.Query(ctx, s.sql.prune, before, limit)
	if err != nil {
		return nil, s.translate(err)
	}
	pruned, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (driver.PrunedRecord, error) {
		var p driver.PrunedRecord
		err := row.Scan(&p.Tenant, &p.Key, &p.WithdrawalID)
		return p, err
	})
	if err != nil {
		return nil, s.translate(err)
	}
	return pruned, nil
}
