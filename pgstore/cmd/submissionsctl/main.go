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
//	migrate                           create or update the ledger's table (idempotent)
//	inflight [--older-than D] [--json] [--limit N]
//	                                  list the keys in flight, oldest first, in every
//	                                  tenant, or in --tenant's only
//	show KEY [--json]                 show a key's record: state, withdrawal, claim
//	                                  token, times, outcome
//	resolve KEY --outcome-file F [--token N]
//	                                  record F's JSON as the outcome of the key's claim
//	release KEY [--yes] [--token N]   drop the key's claim: nothing was sent; asks
//	                                  for confirmation on stdin unless --yes
//	prune --before T [--batch N]      turn the records settled before T (RFC 3339,
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
//	1  failed or refused: the database failed, the key is not there, or the
//	   ledger refused the action (the claim changed, the key has another
//	   outcome): the ledger's error is printed
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
// service's types, so it writes the file's bytes as they are (after checking
// that they are JSON) and the ledger replays them to every retry of the key.
// It works for services that keep pgstore's default codec, encoding/json.
// The operator is responsible for the file; a file that does not mention the
// withdrawal id draws a warning.
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
