package main

import (
	"context"
	"io"

	"github.com/idemledger/submissions/pgstore/ctl"
)

// runCtl runs `payoutd ctl ARGS`: the operator's command line for payoutd's
// ledger in PostgreSQL (pgstore's ctl), with payoutd's rule for an outcome,
// so that it refuses what the admin API refuses, and payoutd's hooks, so
// that a resolve or release moves the withdrawal's state in
// payoutd_withdrawals in its own transaction, as the admin API does. It
// returns the exit code.
func runCtl(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return ctl.Run(ctx, args, stdin, stdout, stderr, ctl.WithName("payoutd ctl"), ctl.WithOutcomeCheck(checkOutcomeJSON),
		ctl.WithHooks(withdrawalHooksJSON()))
}
