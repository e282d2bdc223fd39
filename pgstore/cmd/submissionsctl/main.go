// Command submissionsctl is the operator's tool for a submissions ledger kept
// in PostgreSQL by pgstore: it lists the request keys left in flight (a send
// that ended without an answer: money may have moved), shows one, and closes
// it once the operator has looked at the rail, by resolving it with the
// rail's outcome or releasing it when nothing was sent. It is package ctl
// run as it is; a service runs ctl with its own rules for an outcome
// (ctl.WithOutcomeCheck) as a command of its own, as payoutd does with
// `payoutd ctl`.
//
//	submissionsctl [global flags] COMMAND [flags] [KEY]
//
// Commands:
//
//	migrate                           create or update the ledger's table (idempotent);
//	                                  says "created", "updated" or "up to date"
//	inflight [--older-than D] [--json] [--limit N]
//	                                  list the keys in flight, oldest first, in every
//	                                  tenant, or in --tenant's only, with the state of
//	                                  each send; "N shown, more in flight" when --limit
//	                                  left some out
//	show KEY [--json]                 show a key's record: state, send, withdrawal,
//	                                  claim token, times, outcome
//	resolve KEY --outcome-file F [--token N] [--force] [--id-field NAME]
//	        [--amount-field NAME] [--currency-field NAME] [--destination-field NAME]
//	                                  record F's JSON as the outcome of the key's claim
//	release KEY [--yes] [--token N] [--force]
//	                                  drop the key's claim: nothing was sent; asks
//	                                  for confirmation on stdin unless --yes
//	prune --before T [--batch N] [--min-retention D] [--force]
//	                                  turn the records settled before T (RFC 3339,
//	                                  or a duration ago: 720h) into tombstones, in
//	                                  every tenant; a pruned key or withdrawal is
//	                                  refused for good, never sent again
//
// Global flags, which may also follow the command:
//
//	--database-url URL  the PostgreSQL connection string (default $DATABASE_URL)
//	--table NAME        the ledger's table (default pgstore's, "submissions")
//	--tenant T          the tenant of the key (default "", the default tenant);
//	                    for inflight, list this tenant's keys only
//
// Exit codes:
//
//	0  done: changed, or already as asked (the message says which)
//	1  refused, nothing changed (the message says why and what to do next),
//	   or the command failed before acting (the database could not be read)
//	4  resolve or release failed: the database failed or the command was
//	   stopped; the message says whether the action may stand
//	2  usage: an unknown command or flag, a missing argument, no database URL
//	3  declined: release was not confirmed; nothing changed
//
// Every decision of resolve and release is package admin's (admin.Result),
// printed in its words: the same as payoutd's admin API gives. They act on
// the claim shown (or the one --token names): if the key was released and
// claimed again meanwhile, they are refused and change nothing. A claim whose
// send is not known to have ended (it may still run in a service process)
// is resolved or released only with --force, once the rail shows the
// transfer's final state.
//
// The outcome file of resolve must be the service's own encoding of the
// outcome the rail shows for that withdrawal: this command cannot read the
// service's types, so it writes the file's bytes as they are and the ledger
// replays them to every retry of the key. It works for services that keep
// pgstore's default codec, encoding/json. It reads the withdrawal id, amount,
// currency and destination from the members --id-field, --amount-field,
// --currency-field and --destination-field name (defaults "id", "amount",
// "currency", "destination", payoutd's), each matched regardless of case as
// encoding/json does; a file that lacks one is refused (exit 1). The ledger
// then refuses an outcome of another withdrawal, or with another amount,
// currency or destination than the claim's, and nothing is written. It
// cannot check the service's own rules for an outcome (payoutd's "sent"
// needs its tx): a service's own command line does.
//
// Prune refuses (exit 1, nothing pruned) a horizon in the future, always,
// and one later than the minimum retention ago: --min-retention, a day by
// default. A client retrying a pruned key gets 410/ErrPruned instead of its
// outcome, so the minimum should exceed every client's retry window;
// --force goes below it, and a prune that pruned records with a horizon
// less than a day ago (or than --min-retention, if longer) draws a warning
// saying what it risks.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/idemledger/submissions/pgstore/ctl"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := ctl.Run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
