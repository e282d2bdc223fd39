// Command submissionsctl is the operator's tool for a submissions ledger kept
// in PostgreSQL by pgstore: it lists the request keys left in flight (a send
// that ended without an answer: money may have moved), shows one, and closes
// it once the operator has looked at the rail, by resolving it with the
// rail's outcome or releasing it when nothing was sent.
//
//	submissionsctl [global flags] COMMAND [flags] [KEY]
//
// Commands:
//
//	migrate                           create or update the ledger's table (idempotent);
//	                                  says "created", "updated" or "up to date"
//	inflight [--older-than D] [--json] [--limit N]
//	                                  list the keys in flight, oldest first, in every
//	                                  tenant, or in --tenant's only; "N shown, more
//	                                  in flight" when --limit left some out
//	show KEY [--json]                 show a key's record: state, withdrawal, claim
//	                                  token, times, outcome
//	resolve KEY --outcome-file F [--token N] [--id-field NAME] [--amount-field NAME]
//	        [--currency-field NAME] [--destination-field NAME]
//	                                  record F's JSON as the outcome of the key's claim,
//	                                  if its withdrawal is the claim's
//	release KEY [--yes] [--token N]   drop the key's claim: nothing was sent; asks
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
//	0  done
//	1  failed or refused: the database failed, the key is not there, the
//	   ledger refused the action (the claim changed, the key has another
//	   outcome), resolve's outcome file is not the claim's withdrawal, or
//	   prune's horizon is too recent; nothing was changed by a refusal, and
//	   the reason is printed
//	2  usage: an unknown command or flag, a missing argument, no database URL
//	3  declined: release was not confirmed; nothing changed
//
// Resolve and release act on the key's current claim, by its token (shown by
// inflight and show): if the key was released and claimed again between
// the look and the action, the action is refused and changes nothing. With
// --token they act only on that claim, the one the operator looked at.
//
// The outcome file of resolve must be the service's own encoding of the
// outcome the rail shows for that withdrawal: this command cannot read the
// service's types, so it writes the file's bytes as they are and the ledger
// replays them to every retry of the key. It works for services that keep
// pgstore's default codec, encoding/json. Before writing, it checks that the
// file is a JSON object whose withdrawal is the claim's, compared as the
// ledger compares fingerprints (amounts as numbers, currencies regardless of
// case, ids and destinations exactly): it learns the names of the members
// that hold the withdrawal id, amount, currency and destination from
// --id-field, --amount-field, --currency-field and --destination-field
// (defaults "id", "amount", "currency", "destination", payoutd's), each
// matched regardless of case as encoding/json does. A file that lacks one,
// or whose withdrawal differs, is refused (exit 1) and nothing is written.
//
// Prune refuses (exit 1, nothing pruned) a horizon in the future, always,
// and one later than the minimum retention ago: --min-retention, a day by
// default. A client retrying a pruned key gets 410/ErrPruned instead of its
// outcome, so the minimum should exceed every client's retry window;
// --force goes below it, and a horizon less than a day ago (or than
// --min-retention, if longer) draws a warning saying what it risks.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
