package main

import (
	"context"
	"io"

	"github.com/idemledger/submissions/pgstore/ctl"
)

// runCtl runs `payoutd ctl ARGS`: the operator's command line for payoutd's
// ledger in PostgreSQL (pgstore's ctl), with payoutd's rule for an outcome,
// so that it refuses what the admin API refuses. It returns the exit code.
func runCtl(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return ctl.Run(ctx, args, stdin, stdout, stderr, ctl.WithName("payoutd ctl"), ctl.WithOutcomeCheck(checkOutcomeJSON))
}
