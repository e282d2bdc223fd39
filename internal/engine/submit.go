package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemledger/submissions/driver"
	"github.com/idemledger/submissions/observe"
)

// Submit is submissions.Submissions.SubmitOrReplay in tenant, which the
// caller has checked. A Replayer's answer is the fast path, kept apart so that
// a replay pays for nothing else.
func (l *Ledger[R]) Submit(ctx context.Context, tenant, key string, req R,
	send func(ctx context.Context, req R) (R, error)) (R, bool, error) {
	if l.replayer == nil || (l.nilable && isNil(req)) {
		return l.submit(ctx, tenant, key, req, send)
	}
	// A Replayer answers only for a key it holds as given, valid and
	// trimmed; a fingerprint as given that is the same as the record's is
	// valid: only ctx remains to check.
	fp, out := l.replayer.Replay(tenant, key)
	if fp == nil || !sameWithdrawal(fp, req.Fingerprint()) {
		return l.submit(ctx, tenant, key, req, send)
	}
	if err := ctx.Err(); err != nil {
		var zero R
		return zero, false, err
	}
	l.report(ctx, tenant, observe.EventReplayed, key, fp.WithdrawalID, 0, nil)
	return *out, true, nil
}

// submit is Submit past the Replayer.
func (l *Ledger[R]) submit(ctx context.Context, tenant, key string, req R,
	send func(ctx context.Context, req R) (R, error)) (R, bool, error) {
	var zero R
	key, err := begin(ctx, tenant, key)
	if err != nil {
		return zero, false, err
	}
	if l.nilable && isNil(req) {
		return zero, false, errNilRequest(req)
	}
	given := req.Fingerprint()
	fp, err := given.Canonical()
	if err != nil {
		return zero, false, err
	}
	rec, snd, err := l.tracker.ClaimSend(ctx, tenant, key, fp)
	switch {
	case err != nil:
		err = storeFailed("request key "+key, "claim", err)
		if errors.Is(err, driver.ErrIdempotencyConflict) {
			l.report(ctx, tenant, observe.EventConflict, key, fp.WithdrawalID, 0, err)
		}
		return zero, false, err
	case snd != nil:
		out, err := l.sendAndRecord(ctx, tenant, key, snd, rec.Token, &fp, &given, req, send)
		return out, false, err
	}
	if err := replayable(key, &given, &rec); err != nil {
		kind := observe.EventConflict
		if errors.Is(err, ErrSubmissionInFlight) {
			kind = observe.EventInFlight
		}
		l.report(ctx, tenant, kind, key, fp.WithdrawalID, 0, err)
		return zero, false, err
	}
	l.report(ctx, tenant, observe.EventReplayed, key, fp.WithdrawalID, 0, nil)
	return rec.Outcome, true, nil
}

// sendAndRecord calls send for the claim snd, and ends the claim's send:
// with the answer recorded, or with none, the key left claimed. A claim
// whose send is not called (ctx ended as the key was claimed, or the
// observer panicked) is released: ErrNotSent. Its steps are sendCall's;
// each that does not return (a panic, or runtime.Goexit in send) ends the
// send with no outcome, and the log says which it was.
func (l *Ledger[R]) sendAndRecord(ctx context.Context, tenant, key string, snd driver.Send[R], token driver.Token, fp, given *driver.Fingerprint, req R,
	send func(ctx context.Context, req R) (R, error)) (R, error) {
	c := sendCall[R]{l: l, ctx: ctx, tenant: tenant, key: key, snd: snd, token: token, fp: *fp}
	var (
		out R
		err error
	)
	c.step("the observer panicked, and send was not called: the claim is released", func() { c.report(observe.EventClaimed, nil) })
	if cerr := ctx.Err(); cerr != nil { // the claim took what was left of ctx: send is not called
		c.releasing = true
		c.step("the store panicked while releasing a claim whose send was not called", func() {
			err = l.notSent(ctx, key, snd, fmt.Errorf("%w: the context ended before send was called: %w", ErrNotSent, cerr))
		})
		c.report(observe.EventNotSent, err)
		return *new(R), err
	}
	c.step("send did not return", func() { out, err = c.send(req, send) })
	if err != nil {
		return *new(R), c.unanswered(err)
	}
	// An answer: it is recorded if it is for the request's withdrawal and
	// every store gives it back as it is (see exactly), even when the
	// caller's ctx has ended meanwhile (see record).
	// From here on, a send that ends without recording the answer is
	// abandoned as answered: money moved.
	c.answered = true
	var (
		why  error
		keep bool
	)
	c.step("the answer's Fingerprint panicked", func() { why, keep = c.refusal(out, given) })
	if keep {
		c.answer, c.keep = out, true // kept with the claim, for an operator to resolve it with
	}
	if why != nil {
		c.abandon()
	} else {
		c.step("the store panicked while recording the answer", func() { why = c.record(out) })
	}
	if why != nil {
		err = fmt.Errorf("%w: request key %s: %w", ErrOutcomeNotRecorded, key, why)
		l.reportAnswer(ctx, tenant, key, fp.WithdrawalID, c.took(), err, out)
		return out, err
	}
	c.report(observe.EventSent, nil)
	return out, nil
}

// A sendCall is one claim's send under way, from its claim to the end of
// its send.
type sendCall[R driver.Fingerprinter] struct {
	l           *Ledger[R]
	ctx         context.Context
	tenant, key string
	snd         driver.Send[R]
	token       driver.Token       // the claim's
	fp          driver.Fingerprint // canonical
	start       time.Time          // when send started, timed for an observer only
	called      bool               // send was called: a send ended before it releases its claim
	releasing   bool               // the claim of a send not called is being released: one that fails is abandoned
	answered    bool               // send answered: a send ended without recording it is abandoned as answered
	answer      R                  // the answer, when keep
	keep        bool               // a store can keep answer as it is
}

// step runs one step of the send; if it does not return, the claim's send
// ends with no outcome, and the log says what was under way, before the
// panic goes on.
func (c *sendCall[R]) step(under string, run func()) {
	returned := false
	defer func() {
		if returned {
			return
		}
		c.abandon()
		if !c.called {
			c.report(observe.EventNotSent, fmt.Errorf("%w: request key %s: %s", ErrNotSent, c.key, under))
			return
		}
		c.report(observe.EventOutcomeUnknown, fmt.Errorf("%w: request key %s: %s", ErrOutcomeUnknown, c.key, under))
	}()
	run()
	returned = true
}

// abandon ends the send without a recorded outcome: as answered, with the
// answer when kept, once send has answered. Before send is called, the
// claim is released instead (nothing was sent under it), or abandoned when
// its release did not return.
func (c *sendCall[R]) abandon() {
	switch {
	case !c.called && c.releasing:
		c.l.abandon(c.ctx, c.snd)
		return
	case !c.called:
		c.l.releaseUnsent(c.ctx, c.snd)
		return
	}
	if c.answered {
		var kept *R
		if c.keep {
			answer := c.answer // only a send that ends so pays for the copy
			kept = &answer
		}
		c.l.abandonAnswered(c.ctx, c.snd, kept)
		return
	}
	c.l.abandon(c.ctx, c.snd)
}

// report reports an event of the send: the time send took with those that
// end it.
func (c *sendCall[R]) report(kind observe.EventKind, err error) {
	took := time.Duration(0)
	if kind != observe.EventClaimed {
		took = c.took()
	}
	c.l.report(c.ctx, c.tenant, kind, c.key, c.fp.WithdrawalID, took, err)
}

// took is the time since send started, for an observer only; 0 for a
// send not called.
func (c *sendCall[R]) took() time.Duration {
	if c.l.observer == nil || !c.called {
		return 0
	}
	return time.Since(c.start)
}

// send calls send with req in a ctx that carries the withdrawal (req is
// the answer of a nil send); a nil answer of a nilable R is an error.
func (c *sendCall[R]) send(req R, send func(ctx context.Context, req R) (R, error)) (R, error) {
	if c.l.observer != nil {
		c.start = time.Now()
	}
	c.called = true
	if send == nil {
		return req, nil
	}
	out, err := send(&sendCtx{c.ctx, c.tenant, c.fp.WithdrawalID}, req)
	if err == nil && c.l.nilable && isNil(out) {
		err = errNilAnswer
	}
	return out, err
}

// unanswered ends the send whose error is err: a send that moved nothing
// (err wraps ErrNotSent) releases its claim, any other leaves it abandoned,
// its outcome unknown. It returns the caller's error.
func (c *sendCall[R]) unanswered(err error) error {
	if errors.Is(err, ErrNotSent) {
		c.step("the store panicked while releasing a claim its send moved nothing under", func() { err = c.l.notSent(c.ctx, c.key, c.snd, err) })
		c.report(observe.EventNotSent, err)
		return err
	}
	c.l.abandon(c.ctx, c.snd)
	err = fmt.Errorf("%w: request key %s: %w", ErrOutcomeUnknown, c.key, err)
	c.report(observe.EventOutcomeUnknown, err)
	return err
}

// refusal says why out, send's answer, is not to be recorded, or returns
// nil: an answer for another withdrawal than given's, or one that a store
// would not give back as it is; and whether a store can keep it as it is.
func (c *sendCall[R]) refusal(out R, given *driver.Fingerprint) (why error, keep bool) {
	if got := out.Fingerprint(); got != *given { // an answer that repeats the request's fingerprint is its withdrawal
		if fields := Differing(&c.fp, &got); fields != 0 {
			return fmt.Errorf("answer differs in %s", fieldNames(fields)), exactlyBy(&c.l.exact, &out) == nil
		}
	}
	why = exactlyBy(&c.l.exact, &out)
	return why, why == nil
}

// record settles the claim with out, and returns nil when out is the key's
// outcome, or why it is not. The rail has answered, so a Settle is made
// even when the caller's ctx has ended, before it or while it ran: within
// endGrace past ctx's end (afterEnd). A Settle that fails with
// driver.ErrUnavailable is made again on the claim's token while ctx lasts
// (resettleFor without a deadline), and then within the same grace: a
// primary that went away may come back, or another take its place, and a
// Settle that did stand the first time finds the claim done with out. A
// Settle that fails otherwise, or until then, or panics, may have recorded
// out or not: the claim is abandoned as answered, which marks it only if it
// is still in flight.
func (c *sendCall[R]) record(out R) error {
	ctx, cancel := c.ctx, context.CancelFunc(func() {})
	defer func() { cancel() }()
	graced, bounded := false, false // ctx is afterEnd's; ctx is bounded by resettleFor
	if c.ctx.Err() != nil {
		ctx, cancel, graced = afterEndOf(c.ctx)
	}
	rec, settled, err := c.snd.Settle(ctx, out)
	for pause := resettlePause; err != nil; pause = min(2*pause, resettlePauseMax) {
		switch {
		case !graced && c.ctx.Err() != nil: // ctx ended before or while it ran: again, within the grace
			cancel()
			ctx, cancel, graced = afterEndOf(c.ctx)
		case !errors.Is(err, driver.ErrUnavailable):
			return c.unrecorded(&rec, err, out)
		default:
			if _, ok := c.ctx.Deadline(); !ok && !graced && !bounded {
				var stop context.CancelFunc
				ctx, stop = context.WithTimeout(c.ctx, resettleFor)
				defer stop()
				bounded = true
			}
			if !sleep(ctx, pause) {
				if graced || c.ctx.Err() == nil { // the grace, or resettleFor, is over
					return c.unrecorded(&rec, err, out)
				}
				continue // ctx ended: the grace next
			}
		}
		rec, settled, err = c.snd.Settle(ctx, out) // the send runs on until a Settle answers or it is abandoned
	}
	if settled {
		return nil
	}
	return c.unrecorded(&rec, err, out)
}

// afterEndOf is afterEnd, and reports true.
func afterEndOf(ctx context.Context) (context.Context, context.CancelFunc, bool) {
	actx, cancel := afterEnd(ctx)
	return actx, cancel, true
}

// unrecorded is record's answer for out, not recorded by a Settle that
// returned rec and err: the claim is abandoned as answered after a failure.
func (c *sendCall[R]) unrecorded(rec *driver.Record[R], err error, out R) error {
	if err != nil {
		c.abandon()
	}
	return unsettled(rec, err, out) // nil when resolved meanwhile with the same outcome
}

// unsettled says why out, an answer that Settle did not record (its error
// err, or rec, the claim's record then), is not the key's outcome, or
// returns nil when it is all the same: the claim was resolved meanwhile with
// the same outcome.
func unsettled[R any](rec *driver.Record[R], err error, out R) error {
	switch {
	case err != nil:
		return fmt.Errorf("the store failed, and the answer may or may not stand: %w", foreign(err))
	case rec.Pruned:
		return fmt.Errorf("%w, and pruned", ErrResolvedMeanwhile)
	case !rec.Done:
		return ErrReleasedMeanwhile
	}
	switch same, err := sameOutcome(rec.Outcome, out); { // resolved while send ran
	case err != nil:
		return fmt.Errorf("%w, with an outcome that cannot be compared: %w", ErrResolvedMeanwhile, err)
	case !same:
		return ErrResolvedMeanwhile
	}
	return nil
}

// notSent ends snd, whose send said that it moved nothing (cause wraps
// ErrNotSent), by releasing its claim, and returns the error for Submit:
// cause, saying what became of the claim, or ErrStoreFailed when the store
// failed to release it (the claim is then abandoned). A claim closed
// otherwise while send ran is left as it is.
func (l *Ledger[R]) notSent(ctx context.Context, key string, snd driver.Send[R], cause error) error {
	// The rail has spoken: the release is made even when ctx has ended.
	rctx, cancel := afterEnd(ctx)
	defer cancel()
	rec, released, err := snd.Release(rctx)
	switch {
	case err != nil:
		l.abandon(ctx, snd)
		return fmt.Errorf("%w: request key %s: send moved nothing (%v), and its claim could not be released: %w", ErrStoreFailed, key, cause, foreign(err))
	case released:
		return fmt.Errorf("request key %s: claim released: %w", key, cause)
	case rec.Pruned:
		return fmt.Errorf("request key %s: %w, and pruned: %w", key, ErrResolvedMeanwhile, cause)
	case rec.Done:
		return fmt.Errorf("request key %s: %w: %w", key, ErrResolvedMeanwhile, cause)
	}
	return fmt.Errorf("request key %s: %w: %w", key, ErrReleasedMeanwhile, cause)
}

// errNilAnswer is the error of a send that answered with a nil pointer.
var errNilAnswer = errors.New("send answered nil")

// A call the ledger makes for a send whose ctx may have ended (an Abandon, a
// Release after the rail said it moved nothing) runs for at most
// abandonTimeout, and at most endGrace past the end of the send's ctx, so
// that the send's caller hears back within endGrace of its deadline even
// from a store that does not answer. A Settle that failed with
// driver.ErrUnavailable is made again after resettlePause, then after
// twice as long each time, up to resettlePauseMax, for as long as ctx
// lasts, or resettleFor when ctx has no deadline.
const (
	resettleFor      = 30 * time.Second
	abandonTimeout   = 5 * time.Second
	endGrace         = 100 * time.Millisecond
	resettlePause    = 20 * time.Millisecond
	resettlePauseMax = time.Second
)

// afterEnd returns the context of such a call, not cancelled with ctx.
func afterEnd(ctx context.Context) (context.Context, context.CancelFunc) {
	limit := abandonTimeout
	switch deadline, ok := ctx.Deadline(); {
	case ctx.Err() != nil:
		limit = endGrace
	case ok:
		limit = min(limit, time.Until(deadline)+endGrace)
	}
	return context.WithTimeout(context.WithoutCancel(ctx), limit)
}

// sleep waits for d, and reports false at once if ctx ends first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// abandonAnswered ends snd without an outcome, its claim marked as
// answered, with answer kept when not nil, as abandon does.
func (l *Ledger[R]) abandonAnswered(ctx context.Context, snd driver.Send[R], answer *R) {
	defer func() { _ = recover() }() // contained: see abandon
	actx, cancel := afterEnd(ctx)
	defer cancel()
	_ = snd.AbandonAnswered(actx, answer)
}

// releaseUnsent ends snd, whose send was never called, by releasing its
// claim, or abandons it when the store fails to. It is best effort, as
// abandon is.
func (l *Ledger[R]) releaseUnsent(ctx context.Context, snd driver.Send[R]) {
	released := false
	defer func() {
		_ = recover() // contained: see abandon
		if !released {
			l.abandon(ctx, snd)
		}
	}()
	rctx, cancel := afterEnd(ctx)
	defer cancel()
	_, _, err := snd.Release(rctx)
	released = err == nil
}

// abandon ends snd without an outcome. It is best effort: an error or a
// panic of the store is contained, so that the send's caller gets its error
// as it would without it (and a panic under way goes on unchanged).
func (l *Ledger[R]) abandon(ctx context.Context, snd driver.Send[R]) {
	defer func() { _ = recover() }() // contained: see above
	actx, cancel := afterEnd(ctx)
	defer cancel()
	_ = snd.Abandon(actx)
}
