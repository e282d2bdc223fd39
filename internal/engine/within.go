package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemledger/submissions/driver"
)

// A Tx writes one request key's claim and outcome in a transaction that its
// caller owns, for SubmitTx: nothing it writes is seen by anyone else until
// that transaction commits, and none of it stands if it rolls back.
type Tx[R any] interface {
	// Claim is driver.Store.Claim of key in flight, in the transaction: a
	// claim that another transaction holds still open is waited for until
	// that transaction ends.
	Claim(ctx context.Context, tenant, key string, fp driver.Fingerprint) (rec driver.Record[R], claimed bool, err error)
	// Settle records outcome on the claim token that Claim made in the
	// transaction.
	Settle(ctx context.Context, tenant, key string, token driver.Token, outcome R) error
	// Abort leaves the transaction unable to commit, after a claim whose
	// outcome will not be written: a commit of it rolls back, so that
	// neither the claim nor the work's writes stand. It is called even
	// when ctx has ended.
	Abort(ctx context.Context) error
}

// SubmitTx is Submit with work in place of send, in tx: the key's claim,
// work's own writes (work is given the same transaction by its caller) and
// the outcome are written in one transaction, and stand or fall with it. A
// key that has a record is answered as Submit answers it (a replay, or the
// refusal), and work is not called. After an error of work, a panic, an
// answer for another withdrawal (ErrInvalidFingerprint, naming the fields
// that differ) or a failure to record the outcome, the transaction is
// aborted before the error (or the panic) goes on: its caller rolls it back,
// and a commit would roll back too, so that neither the claim nor work's
// writes stand, and a retry under the key does the work again.
func SubmitTx[R driver.Fingerprinter](ctx context.Context, tx Tx[R], tenant, key string, req R,
	work func(ctx context.Context, req R) (R, error)) (out R, replayed bool, err error) {
	var zero R
	key, given, fp, err := checkTx(ctx, tenant, key, req)
	if err != nil {
		return zero, false, err
	}
	rec, claimed, err := tx.Claim(ctx, tenant, key, fp)
	switch {
	case err != nil:
		return zero, false, storeFailed("request key "+key, "claim", err)
	case !claimed:
		if err := replayable(key, &given, &rec); err != nil {
			return zero, false, err
		}
		return rec.Outcome, true, nil
	}
	// Until the outcome is written, the transaction is aborted on the way
	// out, even when ctx has ended (work may have given up without a failed
	// statement) or work panicked (the panic goes on): work's writes must
	// not commit without the key's outcome.
	settled := false
	defer func() {
		if !settled {
			actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), abandonTimeout)
			defer cancel()
			_ = tx.Abort(actx) // fails only in a transaction that cannot commit
		}
	}()
	out = req
	if work != nil {
		out, err = work(ctx, req)
	}
	switch {
	case err == nil && nilable[R]() && isNil(out):
		err = fmt.Errorf("request key %s: %w", key, errNilWork)
	case err != nil:
		err = fmt.Errorf("request key %s: %w", key, err)
	default:
		if got := out.Fingerprint(); got != given {
			if fields := Differing(&fp, &got); fields != 0 {
				err = fmt.Errorf("%w: request key %s: answer differs in %s", driver.ErrInvalidFingerprint, key, fieldNames(fields))
				break
			}
		}
		if why := exactly(out); why != nil {
			err = fmt.Errorf("%w: request key %s: %w", ErrOutcomeNotRecorded, key, why)
		}
	}
	if err != nil {
		return zero, false, err
	}
	if err := tx.Settle(ctx, tenant, key, rec.Token, out); err != nil {
		return zero, false, storeFailed("request key "+key, "record the outcome", err)
	}
	settled = true
	return out, false, nil
}

// errNilWork is the error of a work that answered with a nil pointer.
var errNilWork = errors.New("work answered nil")

// CheckTx returns the error SubmitTx would return for its input before it
// claims: a tenant, key or request that is not valid, or ctx done.
func CheckTx[R driver.Fingerprinter](ctx context.Context, tenant, key string, req R) error {
	_, _, _, err := checkTx(ctx, tenant, key, req)
	return err
}

// checkTx checks SubmitTx's input, and returns the key trimmed and req's
// fingerprint, as given and canonical.
func checkTx[R driver.Fingerprinter](ctx context.Context, tenant, key string, req R) (string, driver.Fingerprint, driver.Fingerprint, error) {
	var none driver.Fingerprint
	key, err := begin(ctx, tenant, key)
	if err != nil {
		return "", none, none, err
	}
	if nilable[R]() && isNil(req) {
		return "", none, none, errNilRequest(req)
	}
	given := req.Fingerprint()
	fp, err := given.Canonical()
	return key, given, fp, err
}

// replayable returns nil when rec, the record a claim of key for given
// found, holds the outcome to replay, and otherwise the refusal: the key
// was pruned, is another withdrawal's, or is in flight.
func replayable[R any](key string, given *driver.Fingerprint, rec *driver.Record[R]) error {
	switch {
	case rec.Pruned:
		return prunedKey(key)
	case Differing(&rec.Fingerprint, given) != 0:
		return keyTaken(key)
	case rec.Abandoned && !rec.Done:
		return abandoned(key)
	case !rec.Done:
		return inFlight(key)
	}
	return nil
}
