// Command payoutd is an example payout service on the submissions ledger: an
// HTTP API that creates withdrawals and sends each one to a fake payment rail
// at most once, however many times, by however many callers and through
// however many payoutd processes it is asked.
//
//	go run ./examples/payoutd                       # in memory, on 127.0.0.1:8080
//	go run ./examples/payoutd -database-url "$URL"  # PostgreSQL, shared by every process on it
//
// Flags:
//
//	-addr                where to listen (default 127.0.0.1:8080); the address
//	                     taken is printed at start, so port 0 works
//	-database-url        a PostgreSQL connection string; without it the ledger
//	                     and the withdrawals live in this process's memory
//	-send-timeout        how long a send may take (default 10s); a send without
//	                     an answer by then is a 502, its key left claimed
//	-wait                how long a repeat of a key whose send is running waits
//	                     for its outcome before answering (default 0: a 409 at
//	                     once); an outcome in time is a 201, replayed
//	-rail-latency        how long the fake rail takes to answer (default 0)
//	-rail-decline        share of sends, 0 to 1, the rail declines: no money
//	                     moves, and the withdrawal is failed (an outcome: 201)
//	-rail-unavailable    share of sends, 0 to 1, the rail is unavailable for and
//	                     says so: no money moves, a 503, the key free again
//	-rail-fail           share of sends, 0 to 1, the rail fails without saying
//	                     whether money moved (none did): a 502, the key left
//	                     claimed for an operator
//	-rail-timeout-share  share of sends, 0 to 1, that move money but never
//	                     answer: a 502 at -send-timeout, the key left claimed
//
// The four shares together are at most 1; the rest of the sends move the
// money and answer. The fake rail deduplicates like most payment service
// providers: on the ledger's rail key (submissions.RailKeyFromContext), a
// function of the tenant and the withdrawal id. A send under a key the rail
// has taken a transfer under (sent, failed, or never answered) gets that
// transfer back and moves no money, so that even an operator's wrong release
// of a withdrawal whose money moved cannot send it twice. Each process has a
// fake rail of its own, which knows only its own transfers: behind several
// processes, a retry that lands on another one moves the money again (a real
// rail is one, shared by all).
//
// With -database-url, payoutd creates the ledger's table (pgstore.Migrate) and
// its own table of withdrawals, payoutd_withdrawals, in the connection's
// current schema, if they do not exist, and adds the columns of a
// withdrawal's state (state, tx, failure_reason) to a table made by an older
// payoutd: safe from every process at once.
// SIGINT or SIGTERM stops it gracefully: it stops accepting connections and
// lets the requests in flight, and their sends, finish (for at most
// -send-timeout and five seconds).
//
// # The HTTP API
//
// Bodies are JSON objects of at most 16 KiB (16384 bytes); a larger one is
// a 413. Every error, 404 and 405 included, is an RFC 9457 problem, with the
// content type application/problem+json and the fields type, title, status
// and detail (and holder, below). The types are the ledger's
// (urn:submissions:problem:..., see package idemhttp) and payoutd's own,
// urn:payoutd:problem: followed by not-found (404: no such path, withdrawal
// or claim in flight), method-not-allowed (405, with Allow),
// malformed-request (400: a body that is not one JSON object, a bad query
// parameter), body-too-large (413), invalid-outcome (422), outcome-conflict
// and claim-changed (409), and horizon-too-recent (422). A detail names a
// field by its JSON name.
//
// POST /withdrawals with {"amount": "25.00", "currency": "USDC",
// "destination": "0xab..."} creates a withdrawal: 201 and {"id", "amount",
// "currency", "destination", "state": "approved"}. The id ("wd_" and 32 hex
// digits) is the server's, random, never the client's: the ledger's claim is
// only as strong as the id. Malformed JSON is a 400; an invalid amount,
// currency or destination (or a field that is not a JSON string) a 422.
//
// POST /withdrawals/{id}/submit with an Idempotency-Key header sends the
// withdrawal: 201 and the withdrawal with "state": "sent" and "tx", the
// rail's reference, or, when the rail declined it, "state": "failed" and
// "failure_reason" (nothing moved; the withdrawal stays claimed by the key:
// a new attempt is a new withdrawal). A repeat of the key gets the same
// status and body, byte for byte, with Idempotent-Replayed: true, and sends
// nothing. Refused, this request sending nothing:
//
//	400  Idempotency-Key missing or invalid
//	404  no such withdrawal (or another tenant's)
//	409  the key's send is still running, or ended without an answer (with
//	     -wait d, a repeat first waits up to d for the running send's outcome:
//	     201 replayed if it comes, 502 if the send ends without one; a key
//	     released meanwhile is a 409 too, and the retry sends)
//	409  another key holds the withdrawal: "holder" names it; look it up
//	410  the key's outcome was pruned: the key and its withdrawal stay
//	     claimed for ever, and are never sent again
//	422  the key was used for another withdrawal
//	503  the store failed (Retry-After): retry with the same key
//	503  the rail was unavailable and moved nothing (not-sent, Retry-After):
//	     the key is free again, and a retry with the same key sends
//
// and 502 when the rail failed or did not answer in time: money may have
// moved, and the key stays claimed (409 to every retry) until an operator
// looks at the rail and resolves or releases it. Never retry under a new key.
//
// GET /withdrawals/{id} returns the withdrawal with its state and
// "claimed_by", the request key holding it or null. The state is "approved"
// while no key holds it, "in_flight" while the holder key has no outcome (its
// send is running, or ended without an answer and waits for an operator),
// and the outcome's once it has one: "sent" (with "tx") or "failed" (with
// "failure_reason"). payoutd keeps the outcome in its own store as well (in
// memory, or in payoutd_withdrawals), so a withdrawal whose record the ledger
// pruned still reads as it ended; "unknown" if the ledger pruned an outcome
// payoutd never saw (one resolved around it and never read).
//
// GET /rail/sends returns {"<withdrawal id>": <count>, ...}: how many times
// this process's fake rail moved money for each withdrawal, answered or not
// (a declined, unavailable or failed send moves nothing, and neither does one
// the rail deduplicated). Several processes each count their own; a client
// sums them.
//
// GET /metrics serves Prometheus metrics: the ledger's decisions, the sends
// running and how long sends took, as package examples/prommetrics names
// them, and the Go runtime's and the process's. They have no tenant label
// (here any client names any tenant). Each process counts its own. A real
// service would serve them on an address of its own, out of its clients'
// reach.
//
// # Admin endpoints
//
// The operator's side, for the keys left in flight and for retention (see
// the README's runbook). They are open to every client here; a real service
// must serve them only behind real authentication of its operators. Their
// errors are problems whose detail is the ledger's error.
//
// GET /admin/inflight lists the keys in flight, oldest first, in every tenant:
// 200 and [{"tenant", "key", "withdrawal_id", "amount", "currency",
// "destination", "claimed_at", "token", "sending"}, ...]. Query parameters:
// older_than (a duration: the keys claimed at least that long ago), tenant
// (that tenant's keys only; tenant= is the default tenant) and limit (1 to
// 1000, default 100: the oldest ones). "sending" is true while this process
// runs the key's send: leave those alone. A bad parameter is a 400.
//
// POST /admin/claims/{key}/resolve, in the X-Tenant header's tenant, with
// the withdrawal as the rail shows it as the body, records it as the outcome
// of the key's claim in flight, and payoutd keeps it as the withdrawal's
// state: 200 and {"resolved": claim, "outcome": withdrawal}; every retry of
// the key replays it. The body is checked as a client's would be: its id,
// amount, currency and destination valid (422 invalid-fingerprint), and its
// state an outcome, "sent" with a "tx" or "failed" with a "failure_reason"
// (422 invalid-outcome); an outcome of another withdrawal than the claim's
// is a 409 outcome-conflict.
//
// POST /admin/claims/{key}/release drops the claim, the rail having affirmed
// that the key's sends moved nothing: 200 and {"released": claim}; the
// withdrawal may be sent again (the rail key stays the same, so a rail that
// deduplicates answers a wrong release with the first transfer).
//
// Both act on the claim the listing shows, by its token, and with ?token=N
// only if the key's claim is still that one: a key released and claimed
// again meanwhile is a 409 claim-changed and nothing changes. 404 when the
// key has no claim in flight in the tenant; 409 when the outcome contradicts
// the claim or the recorded one (outcome-conflict), or when this process is
// sending the key (release: key-in-flight).
//
// POST /admin/prune?before=T turns the records settled before T (RFC 3339,
// or a duration ago such as 720h), in every tenant, into tombstones: 200 and
// {"pruned": n, "before": T}. A pruned key or withdrawal is refused from
// then on (410 to a submit of the pruned key, 409 with holder to another key
// for its withdrawal), never sent again. T must be at least the minimum
// retention, admin.DefaultMinRetention (24h), ago: a later T, or one in the
// future, is a 422 horizon-too-recent that prunes nothing. force=true lowers
// the minimum to none, for a T up to now, never in the future: a client
// that retries a key settled since T then gets 410 instead of its outcome.
//
// # Tenants
//
// The X-Tenant header names the request's tenant; without it, the default
// tenant "". It stands in for the tenant a real service takes from its
// authentication: here any client may claim any tenant. Idempotency keys and
// claims are per tenant (two tenants may use the same keys), and a withdrawal
// belongs to the tenant that created it: to any other it is a 404. A tenant
// of more than 64 bytes, or not valid UTF-8, is a 400.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop() // a second signal stops payoutd at once
	}()
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		os.Exit(2)
	case err != nil:
		fmt.Fprintln(os.Stderr, "payoutd:", err)
		os.Exit(1)
	}
}

// shutdownGrace is how long a graceful shutdown waits, beyond -send-timeout,
// for the requests in flight.
const shutdownGrace = 5 * time.Second

// run serves the API with the flags in args until ctx ends, then shuts down
// gracefully. It prints the listening address, and then "payoutd stopped", to
// stdout, and logs to stderr.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	flags := flag.NewFlagSet("payoutd", flag.ContinueOnError)
	flags.SetOutput(stderr)
	addr := flags.String("addr", "127.0.0.1:8080", "`address` to listen on; port 0 picks a free one")
	databaseURL := flags.String("database-url", "", "PostgreSQL connection `string`; empty keeps everything in memory")
	sendTimeout := flags.Duration("send-timeout", 10*time.Second, "how long a send may take")
	wait := flags.Duration("wait", 0, "how long a repeat of a key whose send runs waits for its outcome (then 201, replayed) before a 409; 0 answers 409 at once")
	latency := flags.Duration("rail-latency", 0, "how long the fake rail takes to answer")
	declineShare := flags.Float64("rail-decline", 0, "`share` of sends (0 to 1) the fake rail declines, moving no money: the withdrawal is failed")
	unavailableShare := flags.Float64("rail-unavailable", 0, "`share` of sends (0 to 1) the fake rail is unavailable for, moving no money and saying so: a 503, and a retry sends")
	failShare := flags.Float64("rail-fail", 0, "`share` of sends (0 to 1) the fake rail fails, moving no money without saying so: a 502, the key left claimed")
	timeoutShare := flags.Float64("rail-timeout-share", 0, "`share` of sends (0 to 1) that move money and never answer")
	if err := flags.Parse(args); err != nil {
		return err
	}
	least := min(*declineShare, *unavailableShare, *failShare, *timeoutShare)
	total := *declineShare + *unavailableShare + *failShare + *timeoutShare
	switch {
	case flags.NArg() > 0:
		return fmt.Errorf("unexpected argument %q", flags.Arg(0))
	case !(least >= 0 && total <= 1): // NaN too
		return errors.New("-rail-decline, -rail-unavailable, -rail-fail and -rail-timeout-share must be shares from 0 to 1, together at most 1")
	case *sendTimeout <= 0:
		return errors.New("-send-timeout must be positive")
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))

	cfg := config{Rail: newRail(*latency, *declineShare, *unavailableShare, *failShare, *timeoutShare), SendTimeout: *sendTimeout, Wait: *wait, Logger: log}
	if *databaseURL != "" {
		pool, err := connect(*databaseURL)
		if err != nil {
			return err
		}
		defer pool.Close()
		cfg.Pool = pool
	}
	setup, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	api, err := newServer(setup, cfg)
	if err != nil {
		return err
	}

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler:           api,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	fmt.Fprintf(stdout, "payoutd listening on http://%s\n", ln.Addr())

	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down: finishing the requests in flight")
	stop, cancel := context.WithTimeout(context.Background(), *sendTimeout+shutdownGrace)
	defer cancel()
	if err := srv.Shutdown(stop); err != nil {
		srv.Close()
		return fmt.Errorf("shutdown: %w", err)
	}
	<-served // http.ErrServerClosed
	fmt.Fprintln(stdout, "payoutd stopped")
	return nil
}

// connect opens a pool on the database at url and checks that it answers.
func connect(url string) (*pgxpool.Pool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("database: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("database: %w", err)
	}
	return pool, nil
}
