package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/idemledger/submissions/driver"
	"github.com/idemledger/submissions/pgstore"
)

// withdrawalHooks are the pgstore hooks that move a withdrawal's stored
// state in payoutd_withdrawals with its key's claim, in the transaction of
// each change the ledger's store makes (pgstore.WithHooks), so that the two
// commit together or not at all:
//
//	Claimed   "approved" -> "sending", for a send (the claim in flight);
//	          "approved" -> the outcome's state, for a Resolve of a key
//	          that had no claim (the claim made done)
//	Settled   "sending" -> "sent" (with tx) or "failed" (with failure_reason),
//	          the outcome's, whoever recorded it: its send, or an operator
//	Released  "sending" -> "approved": the rail said nothing moved, or an
//	          operator released the claim
//
// A withdrawal in another state than the change expects, or not tenant's
// in payoutd_withdrawals, or an outcome that is not "sent" with its tx or
// "failed" with its reason, is an error: the change rolls back, and the
// ledger call fails with ErrStoreFailed. The stored state is thus "sending"
// exactly while the ledger has a claim in flight for the withdrawal. The
// rail is called between the Claimed and the Settled or Released
// transactions, in none. f kills the process inside each hook, before its
// transaction commits, when it names that step (the crash tests).
func withdrawalHooks(f fault) pgstore.Hooks[Withdrawal] {
	return stateHooks(func(w Withdrawal) (Withdrawal, error) { return w, nil }, f)
}

// withdrawalHooksJSON are withdrawalHooks for outcomes as their JSON, as
// `payoutd ctl` (pgstore/ctl) holds them.
func withdrawalHooksJSON() pgstore.Hooks[json.RawMessage] {
	return stateHooks(func(raw json.RawMessage) (Withdrawal, error) {
		var w Withdrawal
		if err := json.Unmarshal(raw, &w); err != nil {
			return Withdrawal{}, fmt.Errorf("the outcome is not a withdrawal: %w", err)
		}
		return w, nil
	}, "")
}

// stateHooks are withdrawalHooks over outcomes of type R, which outcome
// reads as a withdrawal.
func stateHooks[R any](outcome func(R) (Withdrawal, error), f fault) pgstore.Hooks[R] {
	ended := func(rec driver.Record[R]) (Withdrawal, error) {
		out, err := outcome(rec.Outcome)
		if err != nil {
			return Withdrawal{}, err
		}
		if err := checkOutcome(out); err != nil {
			return Withdrawal{}, fmt.Errorf("withdrawal %s: %w", rec.Fingerprint.WithdrawalID, err)
		}
		return out, nil
	}
	return pgstore.Hooks[R]{
		Command: "payoutd ctl", // recorded on the table: submissionsctl refuses to change it
		Claimed: func(ctx context.Context, tx pgx.Tx, tenant, _ string, rec driver.Record[R]) error {
			to := Withdrawal{State: stateSending}
			if rec.Done {
				var err error
				if to, err = ended(rec); err != nil {
					return err
				}
			}
			if err := moveState(ctx, tx, tenant, rec.Fingerprint.WithdrawalID, stateApproved, to); err != nil {
				return err
			}
			f.at(faultClaimed)
			return nil
		},
		Settled: func(ctx context.Context, tx pgx.Tx, tenant, _ string, rec driver.Record[R]) error {
			to, err := ended(rec)
			if err != nil {
				return err
			}
			if err := moveState(ctx, tx, tenant, rec.Fingerprint.WithdrawalID, stateSending, to); err != nil {
				return err
			}
			f.at(faultSettled)
			return nil
		},
		Released: func(ctx context.Context, tx pgx.Tx, tenant, _ string, rec driver.Record[R]) error {
			if err := moveState(ctx, tx, tenant, rec.Fingerprint.WithdrawalID, stateSending, Withdrawal{State: stateApproved}); err != nil {
				return err
			}
			f.at(faultReleased)
			return nil
		},
	}
}

// moveState changes tenant's withdrawal id in payoutd_withdrawals, in tx,
// from state from to to's state, tx and failure reason; a withdrawal that is
// not tenant's, or not in state from, is an error and changes nothing.
func moveState(ctx context.Context, tx pgx.Tx, tenant, id, from string, to Withdrawal) error {
	tag, err := tx.Exec(ctx, `UPDATE payoutd_withdrawals SET state = $4, tx = $5, failure_reason = $6
WHERE id = $1 AND tenant = $2 AND state = $3`, id, tenant, from, to.State, to.Tx, to.FailureReason)
	if err != nil {
		return fmt.Errorf("withdrawal %s: %s -> %s: %w", id, from, to.State, err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	var state string
	err = tx.QueryRow(ctx, `SELECT state FROM payoutd_withdrawals WHERE id = $1 AND tenant = $2`, id, tenant).Scan(&state)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("withdrawal %s is not tenant %q's in payoutd_withdrawals: not %s -> %s", id, tenant, from, to.State)
	case err != nil:
		return fmt.Errorf("withdrawal %s: %s -> %s: %w", id, from, to.State, err)
	}
	return fmt.Errorf("withdrawal %s of tenant %q is %s, not %s: not %s -> %s", id, tenant, state, from, from, to.State)
}
