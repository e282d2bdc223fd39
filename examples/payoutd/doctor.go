package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemledger/submissions/pgstore"
)

// The exit codes of payoutd doctor.
const (
	doctorAgree    = 0 // every withdrawal's state agrees with the ledger
	doctorFound    = 1 // some do not: each is printed
	doctorUsage    = 2 // a flag or argument was wrong
	doctorReadFail = 3 // the database could not be read: nothing is known
)

// runDoctor runs `payoutd doctor`: it reads payoutd_withdrawals beside the
// ledger's table and prints every withdrawal whose stored state disagrees
// with its key's claim, with what to do, one line each. A withdrawal
// "sending" that no key claims in flight is the one a change made past
// payoutd's hooks leaves (an older submissionsctl's release, a hand-made
// DELETE): every submit of it is refused until it is repaired. It changes
// nothing. It returns the exit code.
func runDoctor(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	flags := flag.NewFlagSet("payoutd doctor", flag.ContinueOnError)
	flags.SetOutput(io.Discard)
	databaseURL := flags.String("database-url", "", "PostgreSQL connection `string` of payoutd's database (default $DATABASE_URL)")
	if err := flags.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, "Usage: payoutd doctor [--database-url URL]\n\n"+
				"Reports every withdrawal whose stored state disagrees with the ledger's claim\n"+
				"of it, and changes nothing. Exit codes: 0 all agree, 1 some do not (each is\n"+
				"printed), 2 usage error, 3 the database could not be read.\n\nFlags:\n")
			flags.SetOutput(stdout)
			flags.PrintDefaults()
			return doctorAgree
		}
		fmt.Fprintf(stderr, "payoutd doctor: %v (see payoutd doctor -h)\n", err)
		return doctorUsage
	}
	url := *databaseURL
	if url == "" {
		url = os.Getenv("DATABASE_URL")
	}
	switch {
	case flags.NArg() > 0:
		fmt.Fprintf(stderr, "payoutd doctor: unexpected argument %q (see payoutd doctor -h)\n", flags.Arg(0))
		return doctorUsage
	case url == "":
		fmt.Fprintln(stderr, "payoutd doctor: no database: give --database-url or set DATABASE_URL (see payoutd doctor -h)")
		return doctorUsage
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	findings, err := diagnose(ctx, url)
	if err != nil {
		fmt.Fprintf(stderr, "payoutd doctor: %v: nothing is known\n", err)
		return doctorReadFail
	}
	for _, f := range findings {
		fmt.Fprintln(stdout, f)
	}
	if len(findings) > 0 {
		fmt.Fprintf(stderr, "payoutd doctor: %d of the withdrawals disagree with the ledger\n", len(findings))
		return doctorFound
	}
	fmt.Fprintln(stdout, "every withdrawal's state agrees with the ledger")
	return doctorAgree
}

// diagnose returns a line for each withdrawal of the database at url whose
// state disagrees with the ledger, read in one snapshot.
func diagnose(ctx context.Context, url string) ([]string, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("database: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	ledger := pgx.Identifier{pgstore.DefaultTable}.Sanitize()
	var findings []string
	err = pgx.BeginTxFunc(ctx, conn, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT w.tenant, w.id, w.state, coalesce(l.request_key, ''),
    CASE WHEN l.request_key IS NULL THEN 'none' WHEN l.pruned_at IS NOT NULL THEN 'pruned' WHEN l.outcome IS NULL THEN 'in flight' ELSE 'done' END
FROM payoutd_withdrawals w
LEFT JOIN `+ledger+` l ON l.tenant = w.tenant AND l.withdrawal_id = w.id
WHERE (w.state = $1 AND (l.request_key IS NULL OR l.outcome IS NOT NULL OR l.pruned_at IS NOT NULL))
   OR (w.state = $2 AND l.request_key IS NOT NULL)
ORDER BY w.created_at, w.id`, stateSending, stateApproved)
		if err != nil {
			return err
		}
		for rows.Next() {
			var tenant, id, state, key, claim string
			if err := rows.Scan(&tenant, &id, &state, &key, &claim); err != nil {
				return err
			}
			findings = append(findings, finding(tenant, id, state, key, claim))
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("read payoutd_withdrawals and %s: %w", ledger, err)
	}
	return findings, nil
}

// finding says what is wrong with withdrawal id of tenant, stored in state,
// whose key's claim is claim ("none", "in flight", "done" or "pruned"), and
// what to do.
func finding(tenant, id, state, key, claim string) string {
	where := fmt.Sprintf("withdrawal %s in %s", id, tenantText(tenant))
	switch {
	case state == stateSending && claim == "none":
		return where + ` is sending, but no key claims it: its claim was released past payoutd's hooks, and every submit of it is refused; look at the rail: if nothing was sent, set its state back to approved; if it was, store the rail's outcome as its state`
	case state == stateSending && claim == "pruned":
		return fmt.Sprintf("%s is sending, but request key %s was settled and pruned: its outcome is gone; look at the rail, and store the rail's outcome as its state", where, key)
	case state == stateSending:
		return fmt.Sprintf("%s is sending, but request key %s has an outcome (%s): a GET of the withdrawal, or payoutd's next start, stores it", where, key, claim)
	}
	return fmt.Sprintf("%s is approved, but request key %s claims it (%s): payoutd's next start stores the claim's state", where, key, claim)
}

// tenantText names tenant for a message.
func tenantText(tenant string) string {
	if tenant == "" {
		return "the default tenant"
	}
	return fmt.Sprintf("tenant %q", tenant)
}
