package pgstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemledger/submissions/driver"
)

// Grouping: the fresh claims, and the settles, that a Store's callers make
// while one of its statements of that kind runs are made together in the
// next, one statement for all (a group). A call that finds fewer than
// maxGroups groups of its kind running (none is queued then) runs its own
// statement at once, in its own goroutine: a lone call waits for nobody, and
// runs the statement it would run alone. In a group of several, each row is still decided alone by the
// table's constraints: a claim the group's INSERT did not make (its key or
// its withdrawal was taken, by another row of the group or anyone else) is
// made again on its own, and a settle the UPDATE did not make is read as a
// lone one is. A group's statement runs until it ends or every caller's
// context has ended; a caller whose context ends leaves at once, as it would
// leave a statement of its own, and what its group then makes for it is
// handed to the group's orphaned (a claim is released).

// maxGroups is how many groups of a kind a Store runs at once.
const maxGroups = 2

// errAlone is a grouped call's answer when its row was not written by its
// group: it is made again on its own, which says why.
var errAlone = errors.New("pgstore: not written by its group")

// A group gathers calls of one kind into statements.
type group[Q, A any] struct {
	mu      sync.Mutex
	queue   []*call[Q, A]
	running int
	// run sets the answer of each call, all of them, and is called with two
	// or more (one runs on its own: alone).
	run   func(ctx context.Context, calls []*call[Q, A])
	alone func(ctx context.Context, q Q) (A, error)
	// orphaned, if set, is given the answer of a call whose caller left.
	orphaned func(q Q, a A, err error)
}

// A call is one caller's request in a group, and its answer.
type call[Q, A any] struct {
	ctx      context.Context
	q        Q
	a        A
	err      error
	panicked any // what its group's statement panicked with
	done     chan struct{}
	state    atomic.Int32 // waiting, then answered or left
}

// The states of a call.
const (
	waiting int32 = iota
	answered
	left
)

// do runs q alone when fewer than maxGroups groups run (no call is queued
// then), and otherwise in the next group; it returns q's answer, or ctx's
// error as soon as ctx ends.
func (g *group[Q, A]) do(ctx context.Context, q Q) (A, error) {
	g.mu.Lock()
	if g.running < maxGroups {
		g.running++
		g.mu.Unlock()
		defer g.next()
		return g.alone(ctx, q)
	}
	c := &call[Q, A]{ctx: ctx, q: q, done: make(chan struct{})}
	g.queue = append(g.queue, c)
	g.mu.Unlock()
	select {
	case <-c.done:
	case <-ctx.Done():
		if c.state.CompareAndSwap(waiting, left) {
			var none A
			return none, ctx.Err()
		}
		<-c.done // answered meanwhile
	}
	if c.panicked != nil {
		panic(c.panicked)
	}
	return c.a, c.err
}

// answer gives c its answer, or hands it to g.orphaned if c's caller left.
func (g *group[Q, A]) answer(c *call[Q, A]) {
	switch {
	case c.state.CompareAndSwap(waiting, answered):
		close(c.done)
	case g.orphaned != nil:
		g.orphaned(c.q, c.a, c.err)
	}
}

// next, when a group ends, runs the calls queued meanwhile, in a goroutine
// of its own, or else counts the group as ended.
func (g *group[Q, A]) next() {
	g.mu.Lock()
	more := len(g.queue) != 0
	if !more {
		g.running--
	}
	g.mu.Unlock()
	if more {
		go g.lead()
	}
}

// lead runs the calls queued now as one group, and again while calls are
// queued.
func (g *group[Q, A]) lead() {
	for {
		g.mu.Lock()
		calls := g.queue
		g.queue = nil
		if len(calls) == 0 {
			g.running--
			g.mu.Unlock()
			return
		}
		g.mu.Unlock()
		g.runGroup(calls)
	}
}

// runGroup answers calls: a call whose context has ended with its error, one
// left alone on its own, and several with run, under a context that ends
// when all of theirs have. A panic is every waiting caller's.
func (g *group[Q, A]) runGroup(calls []*call[Q, A]) {
	live := calls[:0:0]
	for _, c := range calls {
		if err := c.ctx.Err(); err != nil {
			c.err = err
			g.answer(c)
			continue
		}
		live = append(live, c)
	}
	defer func() {
		if p := recover(); p != nil {
			for _, c := range live {
				if c.state.CompareAndSwap(waiting, answered) {
					c.panicked = p
					close(c.done)
				}
			}
		}
	}()
	switch len(live) {
	case 0:
		return
	case 1:
		c := live[0]
		c.a, c.err = g.alone(c.ctx, c.q)
	default:
		ctx, stop := jointContext(live)
		defer stop()
		g.run(ctx, live)
	}
	for _, c := range live {
		g.answer(c)
	}
}

// jointContext returns a context, with the values of the first call's, that
// ends when every call's has ended; stop releases it.
func jointContext[Q, A any](calls []*call[Q, A]) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(calls[0].ctx))
	var left atomic.Int64
	left.Store(int64(len(calls)))
	stops := make([]func() bool, len(calls))
	for i, c := range calls {
		stops[i] = context.AfterFunc(c.ctx, func() {
			if left.Add(-1) == 0 {
				cancel()
			}
		})
	}
	return ctx, func() {
		for _, s := range stops {
			s()
		}
		cancel()
	}
}

// A claimReq is a fresh claim, without an outcome.
type claimReq struct {
	tenant, key string
	fp          driver.Fingerprint
}

// A settleReq is the outcome, encoded, of a claim.
type settleReq struct {
	tenant, key string
	token       driver.Token
	encoded     []byte
}

// A settled is a settle's answer: whether it wrote the outcome, and then the
// claim's fingerprint.
type settled struct {
	written bool
	fp      driver.Fingerprint
}

// initGroups sets up s's groups of claims and settles.
func (s *Store[R]) initGroups() {
	s.claims.alone = func(ctx context.Context, q claimReq) (int64, error) {
		var token int64
		err := s.pool.QueryRow(ctx, s.sql.insert, q.tenant, q.key, q.fp.WithdrawalID, q.fp.Amount, q.fp.Currency, q.fp.Destination, nil).Scan(&token)
		return token, s.translate(err)
	}
	s.claims.run = s.claimGroup
	s.claims.orphaned = func(q claimReq, token int64, err error) {
		if err == nil { // made for a caller who left, who was told it was not
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), unclaimTimeout)
				defer cancel()
				_, _, _ = s.Release(ctx, q.tenant, q.key, driver.Token(token))
			}()
		}
	}
	s.settles.alone = func(ctx context.Context, q settleReq) (settled, error) {
		a, err := s.settleOn(ctx, s.pool, q)
		return a, s.translate(err)
	}
	s.settles.run = s.settleGroup
}

// settleOn makes the settle q alone, through qr: written false, and no
// error, when it matched no row.
func (s *Store[R]) settleOn(ctx context.Context, qr querier, q settleReq) (settled, error) {
	var a settled
	err := qr.QueryRow(ctx, s.sql.settle, q.tenant, q.key, int64(q.token), q.encoded).Scan(&a.fp.WithdrawalID, &a.fp.Amount, &a.fp.Currency, &a.fp.Destination, nil)
	if errors.Is(err, pgx.ErrNoRows) {
		return a, nil
	}
	a.written = err == nil
	return a, err
}

// unclaimTimeout bounds the release of a claim made for a caller who left.
const unclaimTimeout = 5 * time.Second

// rowKey is a row's tenant and request key, or tenant and withdrawal id.
type rowKey struct{ tenant, id string }

// claimGroup inserts the claims of calls in one statement. A claim whose key
// or withdrawal another call of the group names is left to be made alone,
// after the group: each row then meets a committed one, never another of its
// own statement. When the statement fails with the server's error, nothing of
// it was written, and every claim is made alone.
func (s *Store[R]) claimGroup(ctx context.Context, calls []*call[claimReq, int64]) {
	var cols [6][]string
	byKey := make(map[rowKey]*call[claimReq, int64], len(calls))
	withdrawals := make(map[rowKey]bool, len(calls))
	var grouped []*call[claimReq, int64]
	// In the order of their keys: two groups that meet on two keys wait for
	// each other on the first, and never each on the other's.
	slices.SortFunc(calls, func(a, b *call[claimReq, int64]) int {
		return cmp.Or(strings.Compare(a.q.tenant, b.q.tenant), strings.Compare(a.q.key, b.q.key))
	})
	for _, c := range calls {
		k, wd := rowKey{c.q.tenant, c.q.key}, rowKey{c.q.tenant, c.q.fp.WithdrawalID}
		if byKey[k] != nil || withdrawals[wd] {
			c.err = errAlone
			continue
		}
		byKey[k], withdrawals[wd] = c, true
		grouped = append(grouped, c)
		for i, v := range [6]string{c.q.tenant, c.q.key, c.q.fp.WithdrawalID, c.q.fp.Amount, c.q.fp.Currency, c.q.fp.Destination} {
			cols[i] = append(cols[i], v)
		}
	}
	err := func() error {
		rows, err := s.pool.Query(ctx, s.sql.insertGroup, cols[0], cols[1], cols[2], cols[3], cols[4], cols[5])
		if err != nil {
			return err
		}
		var tenant, key string
		var token int64
		_, err = pgx.ForEachRow(rows, []any{&tenant, &key, &token}, func() error {
			if c := byKey[rowKey{tenant, key}]; c != nil {
				c.a = token
			}
			return nil
		})
		return err
	}()
	for _, c := range grouped {
		switch {
		case err != nil:
			c.err = groupFailed(err, s.translate(err))
		case c.a == 0:
			c.err = errAlone
		}
	}
}

// settleGroup writes the outcomes of calls in one statement, and notifies
// their waiters as a settle does. When the statement fails, every settle is
// made alone (one that the failed statement wrote after all then finds the
// claim settled with its own outcome).
func (s *Store[R]) settleGroup(ctx context.Context, calls []*call[settleReq, settled]) {
	var (
		tenants, keys []string
		tokens        []int64
		outcomes      [][]byte
	)
	byKey := make(map[rowKey]*call[settleReq, settled], len(calls))
	for _, c := range calls {
		k := rowKey{c.q.tenant, c.q.key}
		if byKey[k] != nil { // two settles of one key at once: one is made alone, after
			c.err = errAlone
			continue
		}
		byKey[k] = c
		tenants, keys, tokens, outcomes = append(tenants, c.q.tenant), append(keys, c.q.key), append(tokens, int64(c.q.token)), append(outcomes, c.q.encoded)
	}
	err := func() error {
		rows, err := s.pool.Query(ctx, s.sql.settleGroup, tenants, keys, tokens, outcomes)
		if err != nil {
			return err
		}
		var tenant, key string
		var fp driver.Fingerprint
		_, err = pgx.ForEachRow(rows, []any{&tenant, &key, &fp.WithdrawalID, &fp.Amount, &fp.Currency, &fp.Destination, nil}, func() error {
			if c := byKey[rowKey{tenant, key}]; c != nil {
				c.a = settled{true, fp}
			}
			return nil
		})
		return err
	}()
	for _, c := range calls {
		if err != nil && c.err == nil {
			c.err = errAlone
		}
	}
}

// groupFailed is a grouped claim's answer when its group's statement failed
// with err: errAlone when the server refused the statement (an ERROR: nothing
// of it was written, and the claim is made alone), and otherwise the error,
// translated: a connection that failed, or a session the server ended
// (FATAL, as when it shuts down, maybe after its commit), may have written it.
func groupFailed(err, translated error) error {
	if refused(err) {
		return fmt.Errorf("%w: %w", errAlone, err)
	}
	return translated
}
