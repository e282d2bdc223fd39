package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemledger/submissions"
)

// The states of a withdrawal, as GET /withdrawals/{id} reports them. Sent
// and failed are outcomes of a send; the others are not.
const (
	stateApproved         = "approved"          // created; no request key holds it
	stateInFlight         = "in_flight"         // a key holds it without an outcome, and its send is not known to have ended
	stateAwaitingOperator = "awaiting_operator" // a key holds it without an outcome, and its send ended without an answer
	stateSent             = "sent"              // the rail took it: Tx is its reference
	stateFailed           = "failed"            // the rail declined it, moving nothing: FailureReason says why
	stateUnknown          = "unknown"           // the ledger pruned the holder key's outcome before payoutd kept it
)

// stateSending is the stored state of a withdrawal whose key's claim is in
// flight, in payoutd_withdrawals (PostgreSQL): set in the claim's
// transaction, and left in the outcome's or the release's. GET never shows
// it: it tells in_flight from awaiting_operator by the ledger's claim.
const stateSending = "sending"

// Withdrawal is the service's withdrawal, the ledger's request and outcome.
// Sending sets State and Tx or FailureReason, never the fingerprint's
// fields.
type Withdrawal struct {
	ID            string `json:"id"`
	Amount        string `json:"amount"`
	Currency      string `json:"currency"`
	Destination   string `json:"destination"`
	State         string `json:"state"`
	Tx            string `json:"tx,omitempty"`             // the rail's reference, once sent
	FailureReason string `json:"failure_reason,omitempty"` // why the rail declined it, once failed
}

// Fingerprint is what identifies the withdrawal to the ledger.
func (w Withdrawal) Fingerprint() submissions.Fingerprint {
	return submissions.Fingerprint{WithdrawalID: w.ID, Amount: w.Amount, Currency: w.Currency, Destination: w.Destination}
}

// withdrawals keeps the withdrawals the service created, each owned by the
// tenant that created it, and their state once a send ended, so that they
// outlive the ledger's records. Ids are global. An error of any method wraps
// submissions.ErrStoreFailed.
type withdrawals interface {
	creator
	// get returns withdrawal id, with ok false when it does not exist or
	// another tenant owns it.
	get(ctx context.Context, tenant, id string) (w Withdrawal, ok bool, err error)
	// update stores the state, Tx and FailureReason of w, tenant's
	// withdrawal w.ID; another tenant's is left alone.
	update(ctx context.Context, tenant string, w Withdrawal) error
}

// creator stores a new withdrawal: in the transaction of the create's
// request key (txCreator), or in memory (memWithdrawals). An error wraps
// submissions.ErrStoreFailed.
type creator interface {
	// create stores w, approved, for tenant.
	create(ctx context.Context, tenant string, w Withdrawal) error
}

// memWithdrawals keeps withdrawals in this process: approved, and the state
// of a send's outcome once payoutd has seen it (server.keep). It has no
// "sending": the ledger's claim says that.
type memWithdrawals struct {
	mu   sync.Mutex       // protects byID
	byID map[string]owned // id -> withdrawal
}

type owned struct {
	tenant string
	w      Withdrawal
}

func (m *memWithdrawals) create(_ context.Context, tenant string, w Withdrawal) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.byID[w.ID]; ok {
		return fmt.Errorf("%w: withdrawal %s exists", submissions.ErrStoreFailed, w.ID)
	}
	if m.byID == nil {
		m.byID = make(map[string]owned)
	}
	m.byID[w.ID] = owned{tenant, w}
	return nil
}

func (m *memWithdrawals) get(_ context.Context, tenant, id string) (Withdrawal, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	o, ok := m.byID[id]
	if !ok || o.tenant != tenant {
		return Withdrawal{}, false, nil
	}
	return o.w, true, nil
}

func (m *memWithdrawals) update(_ context.Context, tenant string, w Withdrawal) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if o, ok := m.byID[w.ID]; ok && o.tenant == tenant {
		o.w.State, o.w.Tx, o.w.FailureReason = w.State, w.Tx, w.FailureReason
		m.byID[w.ID] = o
	}
	return nil
}

// pgWithdrawals keeps withdrawals in PostgreSQL, in the table
// payoutd_withdrawals of the connection's current schema, shared by every
// payoutd process on the database. Their state moves with the ledger's
// claims, in the same transactions (stateHooks): "approved" while no key
// holds a withdrawal, "sending" exactly while a key's claim is in flight,
// and the outcome's state, "sent" or "failed", once the ledger has it.
type pgWithdrawals struct {
	pool *pgxpool.Pool
}

// migrate creates the table unless it exists, and adds the columns of a
// send's end to a table made before them; safe from every process at every
// start. Processes starting at once on one database would race in
// CREATE TABLE IF NOT EXISTS (the loser fails on a catalog's unique index), so
// it runs under a transaction-scoped advisory lock named after the schema and
// table. ledger is the ledger's table (quoted for SQL), made already: the
// states of withdrawals left by a payoutd from before the states moved with
// the claims are brought in line with it (reconcile).
func (p *pgWithdrawals) migrate(ctx context.Context, ledger string) error {
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended(
	'payoutd migrate ' || coalesce(current_schema(), '') || '.payoutd_withdrawals', 0))`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS payoutd_withdrawals (
    id          text        PRIMARY KEY,
    tenant      text        NOT NULL,
    amount      text        NOT NULL,
    currency    text        NOT NULL,
    destination text        NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
)`)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `ALTER TABLE payoutd_withdrawals
    ADD COLUMN IF NOT EXISTS state          text NOT NULL DEFAULT 'approved',
    ADD COLUMN IF NOT EXISTS tx             text NOT NULL DEFAULT '',
    ADD COLUMN IF NOT EXISTS failure_reason text NOT NULL DEFAULT ''`)
		if err != nil {
			return err
		}
		return reconcile(ctx, tx, ledger)
	})
	if err != nil {
		return fmt.Errorf("create payoutd_withdrawals: %w", err)
	}
	return nil
}

// reconcile brings the stored states in line with the ledger's claims where
// a payoutd from before the states moved with them left them apart: a
// withdrawal still "approved" whose key's claim is in flight becomes
// "sending", and one not yet in its key's outcome's state gets it. With
// every payoutd on the database moving the states in the claims'
// transactions it finds nothing to change: a statement's snapshot never
// holds a claim without its state. An outcome that is not a withdrawal's
// JSON is left alone (GET shows the ledger's outcome regardless).
func reconcile(ctx context.Context, tx pgx.Tx, ledger string) error {
	_, err := tx.Exec(ctx, `UPDATE payoutd_withdrawals w SET state = $1
FROM `+ledger+` l
WHERE l.tenant = w.tenant AND l.withdrawal_id = w.id AND l.outcome IS NULL AND w.state = $2`, stateSending, stateApproved)
	if err != nil {
		return err
	}
	rows, err := tx.Query(ctx, `SELECT w.tenant, w.id, l.outcome FROM payoutd_withdrawals w
JOIN `+ledger+` l ON l.tenant = w.tenant AND l.withdrawal_id = w.id
WHERE l.outcome IS NOT NULL AND l.pruned_at IS NULL AND w.state IN ($1, $2)`, stateApproved, stateSending)
	if err != nil {
		return err
	}
	type settled struct {
		tenant string
		out    Withdrawal
	}
	var todo []settled
	for rows.Next() {
		var (
			tenant, id string
			raw        []byte
		)
		if err := rows.Scan(&tenant, &id, &raw); err != nil {
			return err
		}
		var out Withdrawal
		if json.Unmarshal(raw, &out) != nil || checkOutcome(out) != nil {
			continue
		}
		out.ID = id
		todo = append(todo, settled{tenant, out})
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for _, s := range todo {
		if _, err := tx.Exec(ctx, `UPDATE payoutd_withdrawals SET state = $3, tx = $4, failure_reason = $5
WHERE id = $1 AND tenant = $2 AND state IN ($6, $7)`, s.out.ID, s.tenant, s.out.State, s.out.Tx, s.out.FailureReason,
			stateApproved, stateSending); err != nil {
			return err
		}
	}
	return nil
}

func (p *pgWithdrawals) create(ctx context.Context, tenant string, w Withdrawal) error {
	return txCreator{p.pool}.create(ctx, tenant, w)
}

// txCreator creates withdrawals through q: in a transaction of the
// create's request key, or on the pool.
type txCreator struct {
	q interface {
		Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	}
}

func (c txCreator) create(ctx context.Context, tenant string, w Withdrawal) error {
	_, err := c.q.Exec(ctx, `INSERT INTO payoutd_withdrawals (id, tenant, amount, currency, destination, state)
VALUES ($1, $2, $3, $4, $5, $6)`, w.ID, tenant, w.Amount, w.Currency, w.Destination, stateApproved)
	if err != nil {
		return fmt.Errorf("%w: create withdrawal %s: %w", submissions.ErrStoreFailed, w.ID, err)
	}
	return nil
}

func (p *pgWithdrawals) get(ctx context.Context, tenant, id string) (Withdrawal, bool, error) {
	w := Withdrawal{ID: id}
	err := p.pool.QueryRow(ctx, `SELECT amount, currency, destination, state, tx, failure_reason FROM payoutd_withdrawals
WHERE id = $1 AND tenant = $2`, id, tenant).Scan(&w.Amount, &w.Currency, &w.Destination, &w.State, &w.Tx, &w.FailureReason)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return Withdrawal{}, false, nil
	case err != nil:
		return Withdrawal{}, false, fmt.Errorf("%w: read withdrawal %s: %w", submissions.ErrStoreFailed, id, err)
	}
	return w, true, nil
}

// update stores w's outcome, a repair: the hooks move the states with the
// claims, and an outcome is final, so that only a withdrawal whose outcome
// was written past them (by submissionsctl, without payoutd's hooks) is
// ever changed here.
func (p *pgWithdrawals) update(ctx context.Context, tenant string, w Withdrawal) error {
	_, err := p.pool.Exec(ctx, `UPDATE payoutd_withdrawals SET state = $3, tx = $4, failure_reason = $5
WHERE id = $1 AND tenant = $2`, w.ID, tenant, w.State, w.Tx, w.FailureReason)
	if err != nil {
		return fmt.Errorf("%w: update withdrawal %s: %w", submissions.ErrStoreFailed, w.ID, err)
	}
	return nil
}
