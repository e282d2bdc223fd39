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
	key, err := begin(ctx, key)
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
		out, err := l.sendAndRecord(ctx, tenant, key, snd, &fp, &given, req, send)
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
// with the answer recorded, or with none, the key left claimed.
func (l *Ledger[R]) sendAndRecord(ctx context.Context, tenant, key string, snd driver.Send[R], fp, given *driver.Fingerprint, req R,
	send func(ctx context.Context, req R) (R, error)) (R, error) {
	var start time.Time // when send started, timed for an observer only
	took := func() time.Duration {
		if l.observer == nil {
			return 0
		}
		return time.Since(start)
	}
	// If this function does not return (send, the answer's Fingerprint or
	// the store panicked, or send exited its goroutine), the claim's send
	// ends with no outcome, and the log says what was under way.
	ended, under := false, "send did not return"
	defer func() {
		if !ended {
			l.abandon(ctx, snd)
			l.report(ctx, tenant, observe.EventOutcomeUnknown, key, fp.WithdrawalID, took(),
				fmt.Errorf("%w: request key %s: %s", ErrOutcomeUnknown, key, under))
		}
	}()
	under = "the observer panicked, and send was not called"
	l.report(ctx, tenant, observe.EventClaimed, key, fp.WithdrawalID, 0, nil)
	under = "send did not return"
	if l.observer != nil {
		start = time.Now()
	}
	out, err := req, error(nil)
	if send != nil {
		out, err = send(&sendCtx{ctx, tenant, fp.WithdrawalID}, req)
	}
	if err == nil && l.nilable && isNil(out) {
		err = errNilAnswer
	}
	if err != nil {
		kind := observe.EventOutcomeUnknown
		if errors.Is(err, ErrNotSent) {
			under = "the store panicked while releasing a claim its send moved nothing under"
			kind, err = observe.EventNotSent, l.notSent(ctx, key, snd, err)
		} else {
			l.abandon(ctx, snd)
			err = fmt.Errorf("%w: request key %s: %w", ErrOutcomeUnknown, key, err)
		}
		ended = true
		l.report(ctx, tenant, kind, key, fp.WithdrawalID, took(), err)
		return *new(R), err
	}

	// An answer: it is recorded only if it is for the request's withdrawal,
	// came while the caller still waited, and every store gives it back as
	// it is (see exactly).
	var why error
	fields := 0
	under = "the answer's Fingerprint panicked"
	if got := out.Fingerprint(); got != *given { // an answer that repeats the request's fingerprint is its withdrawal
		fields = Differing(fp, &got)
	}
	switch cerr := ctx.Err(); {
	case fields == 0 && cerr == nil:
		why = exactlyBy(&l.exact, &out)
	case fields != 0 && cerr != nil:
		why = fmt.Errorf("answer differs in %s, and the context ended: %w", fieldNames(fields), cerr)
	case fields != 0:
		why = fmt.Errorf("answer differs in %s", fieldNames(fields))
	case cerr != nil:
		why = fmt.Errorf("context ended while send ran: %w", cerr)
	}
	if why != nil {
		ended = true
		l.abandon(ctx, snd)
	} else {
		// A Settle that fails or panics may have recorded the answer or
		// not: the claim is abandoned, which marks it only if it is still
		// in flight.
		under = "the store panicked while recording the answer"
		rec, settled, err := snd.Settle(ctx, out)
		ended = true
		if err == nil && settled {
			l.report(ctx, tenant, observe.EventSent, key, fp.WithdrawalID, took(), nil)
			return out, nil
		}
		if err != nil {
			l.abandon(ctx, snd)
		}
		if why = unsettled(&rec, err, out); why == nil { // resolved meanwhile with the same outcome
			l.report(ctx, tenant, observe.EventSent, key, fp.WithdrawalID, took(), nil)
			return out, nil
		}
	}
	err = fmt.Errorf("%w: request key %s: %w", ErrOutcomeNotRecorded, key, why)
	l.reportAnswer(ctx, tenant, key, fp.WithdrawalID, took(), err, out)
	return out, err
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
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), abandonTimeout)
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

// abandonTimeout bounds an Abandon, which runs when the send's ctx may have
// ended already.
const abandonTimeout = 5 * time.Second

// abandon ends snd without an outcome. It is best effort: an error or a
// panic of the store is contained, so that the send's caller gets its error
// as it would without it (and a panic under way goes on unchanged).
func (l *Ledger[R]) abandon(ctx context.Context, snd driver.Send[R]) {
	defer func() { _ = recover() }() // contained: see above
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), abandonTimeout)
	defer cancel()
	_ = snd.Abandon(actx)
}
