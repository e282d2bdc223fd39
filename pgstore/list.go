package pgstore

import (
	"context"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/idemledger/submissions/driver"
)

// ListInFlight implements driver.Lister: one SELECT of the rows without
// an outcome, through the in-flight index, which holds those rows only,
// ordered as the listing is (claimed_at, then tenant and request_key compared
// byte by byte, as COLLATE "C" does); the settled rows, however many, are
// never read. ClaimedAt is the row's claimed_at, the database's clock when
// the claim was made. Abandoned is abandoned_at set. Which claims a ledger is
// sending is the ledger's to know, not the Store's.
func (s *Store[R]) ListInFlight(ctx context.Context, q driver.ListQuery) ([]driver.InFlight, error) {
	sql, args := listSQL(s.names.table, q)
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, s.translate(err)
	}
	claims, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (driver.InFlight, error) {
		var c driver.InFlight
		var token int64
		err := row.Scan(&c.Tenant, &c.Key, &c.Fingerprint.WithdrawalID, &c.Fingerprint.Amount, &c.Fingerprint.Currency,
			&c.Fingerprint.Destination, &c.ClaimedAt, &token, &c.Abandoned, &c.Answered)
		c.Token = driver.Token(token)
		return c, err
	})
	if err != nil {
		return nil, s.translate(err)
	}
	return claims, nil
}

// listSQL returns the SELECT of the claims in flight that q selects from
// table, and its arguments: a condition only for each part of q that is
// set, so that every statement is one the in-flight index serves in order,
// with the page's start (After) as the index's start.
func listSQL(table string, q driver.ListQuery) (string, []any) {
	var args []any
	arg := func(v any, typ string) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args)) + "::" + typ
	}
	var b strings.Builder
	b.WriteString(`SELECT tenant, request_key, withdrawal_id, amount, currency, destination, claimed_at, claim_id,
	abandoned_at IS NOT NULL, answered_at IS NOT NULL
FROM ` + table + `
WHERE outcome IS NULL`)
	if !q.ClaimedBefore.IsZero() {
		b.WriteString(` AND claimed_at < ` + arg(q.ClaimedBefore, "timestamptz"))
	}
	// The tenants are compared in the index's collation, which the unique
	// constraints that lead with the tenant do not have: no plan reads a
	// tenant's settled rows through them to find its few in flight. One
	// tenant is an equality, which the index checks as it reads in order;
	// for several, the planner may instead read each one's claims and sort
	// them.
	switch {
	case len(q.Tenants) == 1:
		b.WriteString(` AND tenant COLLATE "C" = ` + arg(q.Tenants[0], "text"))
	case q.Tenants != nil:
		b.WriteString(` AND tenant COLLATE "C" = ANY(` + arg(q.Tenants, "text[]") + `)`)
	}
	if a := q.After; a != nil {
		b.WriteString(` AND (claimed_at, tenant COLLATE "C", request_key COLLATE "C") > (` +
			arg(a.ClaimedAt, "timestamptz") + `, ` + arg(a.Tenant, "text") + `, ` + arg(a.Key, "text") + `)`)
	}
	b.WriteString(`
ORDER BY claimed_at, tenant COLLATE "C", request_key COLLATE "C"
LIMIT ` + arg(max(q.Limit, 0), "bigint"))
	return b.String(), args
}
