package pgstore

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemledger/submissions/driver"
)

// PollEvery is how often WaitClaim reads the claim's row again while it
// waits, in case a notification was lost (a notification is sent only to
// sessions listening when it commits, and is lost with a connection that
// breaks).
const PollEvery = 2 * time.Second

// ErrNoSession is WaitClaim's error on a Store whose listener's connection
// turned out to be no session of its own: see WithListener.
var ErrNoSession = errors.New("pgstore: wait: the listener's statements ran on two server sessions (a pooler in transaction mode?): give it a direct connection with WithListener")

// WaitClaim implements driver.Waiter with LISTEN/NOTIFY: settling, releasing
// or abandoning a claim, through any Store on the table, notifies the
// table's channel in the same transaction. The WaitClaims of a Store share
// one listener, a session of its own outside the pool, made (with the pool's
// connection config, or WithListener's, without its OnNotification) when a
// wait begins and none runs, and closed when the last wait ends: a wait
// holds no connection of the pool, and reads the row through the pool. The
// listener LISTENs, and holds a shared advisory lock named after the table,
// tenant and key of every key waited for, by which a settle, release or
// abandon knows to notify: a change that nobody waits for sends no
// notification. A wait reads the row once the listener holds its key's lock
// (so that a change made before is not missed), then again after each
// notification naming the key, every PollEvery, and after the listener
// connected again when its connection broke, until the claim is no longer in
// flight, or is abandoned (abandoned_at is set), or ctx ends. When the
// listener cannot connect, every wait under way ends with its error. When
// the listener finds its statements run on two server sessions (a pooler in
// transaction mode), every wait under way and every later WaitClaim of the
// Store fails with ErrNoSession.
func (s *Store[R]) WaitClaim(ctx context.Context, tenant, key string, token driver.Token) (driver.Record[R], bool, error) {
	return s.waitClaim(ctx, tenant, key, token, PollEvery)
}

// waitClaim is WaitClaim, reading the row every poll.
func (s *Store[R]) waitClaim(ctx context.Context, tenant, key string, token driver.Token, poll time.Duration) (rec driver.Record[R], ok bool, err error) {
	w := s.enter(waitPayload(tenant, key))
	defer s.leave(w)
	if err := s.failed(w); err != nil {
		return rec, false, err
	}
	t := time.NewTimer(poll)
	defer t.Stop()
	for {
		select {
		case <-w.wake:
		case <-t.C:
		case <-ctx.Done():
			return rec, false, ctx.Err()
		}
		if err := s.failed(w); err != nil {
			return rec, false, err
		}
		if rec, ok, err = s.Lookup(ctx, tenant, key); err != nil || !ok || rec.Done || rec.Abandoned || rec.Token != token {
			return rec, ok, err
		}
		t.Reset(poll)
	}
}

// waits are a Store's WaitClaims under way, and its listener's controls.
type waits struct {
	mu        sync.Mutex
	keys      map[string][]*waiter // the waits, by the payload of their key's notifications; empty when no listener runs
	stop      context.CancelFunc   // ends the listener
	interrupt context.CancelFunc   // ends the listener's wait for notifications, to lock and unlock keys
	refused   error                // ErrNoSession, once the listener found it
}

// A waiter is one WaitClaim.
type waiter struct {
	payload string
	wake    chan struct{} // a token: read the row
	armed   bool          // woken since the listener's connection holds its key's lock
	err     error         // why the listener failed
}

// signal wakes w, unless it has a wake to take already.
func (w *waiter) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// enter adds a wait of the key whose notifications have payload, and starts
// the listener when none runs.
func (s *Store[R]) enter(payload string) *waiter {
	w := &waiter{payload: payload, wake: make(chan struct{}, 1)}
	l := &s.waits
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.refused != nil {
		w.err = l.refused
		return w
	}
	if len(l.keys) == 0 {
		var ctx context.Context
		ctx, l.stop = context.WithCancel(context.Background())
		l.keys, l.interrupt = map[string][]*waiter{}, func() {}
		go s.listen(ctx)
	}
	l.keys[payload] = append(l.keys[payload], w)
	l.interrupt()
	return w
}

// leave removes w, and stops the listener when no wait is left. w may have
// been removed already, by a failure of the listener.
func (s *Store[R]) leave(w *waiter) {
	l := &s.waits
	l.mu.Lock()
	defer l.mu.Unlock()
	if ws := slices.DeleteFunc(l.keys[w.payload], func(x *waiter) bool { return x == w }); len(ws) != 0 {
		l.keys[w.payload] = ws
	} else {
		delete(l.keys, w.payload)
	}
	if len(l.keys) == 0 {
		l.stop()
	}
	l.interrupt()
}

// failed returns the error the listener failed w with, if it did.
func (s *Store[R]) failed(w *waiter) error {
	s.waits.mu.Lock()
	defer s.waits.mu.Unlock()
	return w.err
}

// listen is a Store's listener, until ctx ends. On its connection it holds
// the lock of each key waited for, waking the key's waits when they are
// armed (when it has the lock) and when a notification names the key. When
// its connection breaks it connects again; when it cannot, it fails every
// wait.
func (s *Store[R]) listen(ctx context.Context) {
	var conn *pgx.Conn
	var session uint32          // the server's pid of conn's session
	locked := map[string]bool{} // the payloads whose locks conn holds
	buffered, cancel := context.WithCancel(ctx)
	cancel() // done: notifications reads those conn has buffered, and returns
	for {
		var err error
		if conn == nil {
			if conn, session, err = s.listenOn(ctx); err != nil {
				s.fail(ctx, err, false)
				return
			}
			clear(locked)
		}
		lock, unlock, wctx := s.arm(ctx, locked)
		switch {
		case wctx == nil: // stopped
			_ = conn.Close(context.Background())
			return
		case len(lock) != 0 || len(unlock) != 0:
			var pid uint32
			var n1, n2 int64
			if err = conn.QueryRow(ctx, s.sql.relock, lock, unlock).Scan(&pid, &n1, &n2); err == nil && pid != session {
				_ = conn.Close(context.Background())
				s.fail(ctx, ErrNoSession, true)
				return
			}
			if err == nil {
				for _, p := range lock {
					locked[p] = true
				}
				for _, p := range unlock {
					delete(locked, p)
				}
				// Those that came during the statement, read now: waits
				// that come and go keep this loop from waiting for more.
				err = s.notifications(buffered, conn)
			}
		default:
			err = s.notifications(wctx, conn)
		}
		if err != nil { // connect again: every wait is armed again once its key is locked
			_ = conn.Close(context.Background())
			conn = nil
		}
	}
}

// listenOn connects the listener and LISTENs on the table's channel; it
// returns the connection and the server's pid of its session.
func (s *Store[R]) listenOn(ctx context.Context) (*pgx.Conn, uint32, error) {
	cfg := s.listener
	if cfg == nil {
		cfg = s.pool.Config().ConnConfig
	}
	cfg = cfg.Copy()
	cfg.OnNotification = nil // pgx buffers notifications for WaitForNotification only without one
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, 0, err
	}
	var channel string
	var pid uint64
	if err = conn.QueryRow(ctx, s.sql.channel).Scan(&channel); err == nil {
		// One simple query is one transaction, on one session even through
		// a pooler: the session that listens is the one whose pid it gives.
		var rs []*pgconn.Result
		rs, err = conn.PgConn().Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()+"; SELECT pg_backend_pid()").ReadAll()
		if err == nil {
			pid, err = strconv.ParseUint(string(rs[1].Rows[0][0]), 10, 32)
		}
	}
	if err != nil {
		_ = conn.Close(context.Background())
		return nil, 0, s.translate(err)
	}
	return conn, uint32(pid), nil
}

// arm wakes the waits whose keys are locked now and were not, and returns
// the keys to lock and to unlock, and the context of a wait for
// notifications, which ends when a wait enters or leaves; or a nil context
// when ctx has ended.
func (s *Store[R]) arm(ctx context.Context, locked map[string]bool) (lock, unlock []string, wctx context.Context) {
	l := &s.waits
	l.mu.Lock()
	defer l.mu.Unlock()
	if ctx.Err() != nil {
		return nil, nil, nil
	}
	for p, ws := range l.keys {
		if !locked[p] {
			lock = append(lock, p)
		}
		for _, w := range ws {
			if locked[p] && !w.armed {
				w.signal()
			}
			w.armed = locked[p]
		}
	}
	for p := range locked {
		if l.keys[p] == nil {
			unlock = append(unlock, p)
		}
	}
	l.interrupt()
	wctx, l.interrupt = context.WithCancel(ctx)
	return lock, unlock, wctx
}

// notifications wakes the waits of the key each notification on conn names,
// until wctx ends (nil) or conn fails (its error).
func (s *Store[R]) notifications(wctx context.Context, conn *pgx.Conn) error {
	for {
		n, err := conn.WaitForNotification(wctx)
		if err != nil {
			if wctx.Err() != nil {
				return nil
			}
			return err
		}
		s.waits.mu.Lock()
		for _, w := range s.waits.keys[n.Payload] {
			w.signal()
		}
		s.waits.mu.Unlock()
	}
}

// fail ends every wait with err, unless ctx has ended: the next wait starts
// another listener, unless sticky, when every later wait fails with err.
func (s *Store[R]) fail(ctx context.Context, err error, sticky bool) {
	l := &s.waits
	l.mu.Lock()
	defer l.mu.Unlock()
	if sticky {
		l.refused = err
	}
	if ctx.Err() != nil {
		return
	}
	for _, ws := range l.keys {
		for _, w := range ws {
			w.err = err
			w.signal()
		}
	}
	clear(l.keys)
	l.stop()
}

// querier is a pool or one of its connections.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// lookupOn is Lookup through q.
func (s *Store[R]) lookupOn(ctx context.Context, q querier, tenant, key string) (driver.Record[R], bool, error) {
	var row storedRow
	err := q.QueryRow(ctx, s.sql.lookup, tenant, key).
		Scan(&row.token, &row.fp.WithdrawalID, &row.fp.Amount, &row.fp.Currency, &row.fp.Destination, &row.outcome, &row.pruned, &row.abandoned, &row.answered, &row.answer)
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
