package pgstore

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemledger/submissions/driver"
)

// PollEvery is how often WaitClaim reads the claim's row again while it
// waits, in case a notification was lost (a notification is sent only to
// sessions listening when it commits, and is lost with a connection that
// breaks).
const PollEvery = 2 * time.Second

// WaitClaim implements driver.Waiter with LISTEN/NOTIFY: settling,
// releasing or abandoning a claim, through any Store on the table, notifies
// the table's channel in the same transaction. WaitClaim takes a connection of the pool
// for itself while it waits, LISTENs, reads the row (so that a change made
// before it listened is not missed), then waits for a notification naming
// the key, reading the row again after each and every PollEvery, until the
// claim is no longer in flight, or is abandoned (abandoned_at is set), or
// ctx ends. While it waits it holds a shared
// advisory lock named after the table, tenant and key, by which a settle or
// release knows to notify: a change that nobody waits for sends no
// notification. It UNLISTENs and unlocks before it gives the connection
// back, and closes it instead when it cannot.
func (s *Store[R]) WaitClaim(ctx context.Context, tenant, key string, token driver.Token) (driver.Record[R], bool, error) {
	return s.waitClaim(ctx, tenant, key, token, PollEvery)
}

// waitClaim is WaitClaim, reading the row every poll.
func (s *Store[R]) waitClaim(ctx context.Context, tenant, key string, token driver.Token, poll time.Duration) (rec driver.Record[R], ok bool, err error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return rec, false, s.translate(err)
	}
	listening := false
	defer func() {
		if listening && !s.unlisten(conn.Conn()) {
			_ = conn.Conn().Close(context.Background()) // the pool drops a closed connection
		}
		conn.Release()
	}()
	var channel string
	if err := conn.QueryRow(ctx, s.sql.channel).Scan(&channel); err != nil {
		return rec, false, s.translate(err)
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		return rec, false, s.translate(err)
	}
	listening = true
	payload := waitPayload(tenant, key)
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock_shared(hashtextextended('submissions wait ' || $1::text || ' ' || $2::text, 0))`, channel, payload); err != nil {
		return rec, false, s.translate(err)
	}
	for {
		if rec, ok, err = s.lookupOn(ctx, conn.Conn(), tenant, key); err != nil || !ok || rec.Done || rec.Abandoned || rec.Token != token {
			return rec, ok, err
		}
		if err := s.notified(ctx, conn.Conn(), payload, poll); err != nil {
			return rec, false, err
		}
	}
}

// notified waits on conn for a notification with payload, until poll has
// passed or ctx ends (ctx's error).
func (s *Store[R]) notified(ctx context.Context, conn *pgx.Conn, payload string, poll time.Duration) error {
	wctx, cancel := context.WithTimeout(ctx, poll)
	defer cancel()
	for {
		n, err := conn.WaitForNotification(wctx)
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, context.DeadlineExceeded) || wctx.Err() != nil:
			return nil // time to read the row again
		case err != nil:
			return err
		case n.Payload == payload:
			return nil
		}
	}
}

// unlisten stops conn listening, and reports whether conn is fit to go back
// to the pool.
func (s *Store[R]) unlisten(conn *pgx.Conn) bool {
	if conn.IsClosed() {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := conn.Exec(ctx, "UNLISTEN *; SELECT pg_advisory_unlock_all()")
	return err == nil
}

// querier is a pool or one of its connections.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// lookupOn is Lookup through q.
func (s *Store[R]) lookupOn(ctx context.Context, q querier, tenant, key string) (driver.Record[R], bool, error) {
	var row storedRow
	err := q.QueryRow(ctx, s.sql.lookup, tenant, key).
		Scan(&row.token, &row.fp.WithdrawalID, &row.fp.Amount, &row.fp.Currency, &row.fp.Destination, &row.outcome, &row.pruned, &row.abandoned)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return driver.Record[R]{}, false, nil
	case err != nil:
		return driver.Record[R]{}, false, s.translate(err)
	}
	rec, err := s.record(key, row)
	return rec, err == nil, err
}

// waitPayload is the payload of the notification of a change to tenant's
// key, as the store's statements make it: the tenant's length in bytes, a
// colon, the tenant and the key.
func waitPayload(tenant, key string) string {
	return strconv.Itoa(len(tenant)) + ":" + tenant + key
}
