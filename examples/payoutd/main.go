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
//	-rail-latency        how long the fake rail takes to answer (default 0)
//	-rail-fail           share of sends, 0 to 1, the rail refuses: no money moves
//	-rail-timeout-share  share of sends, 0 to 1, that move money but never answer
//
// With -database-url, payoutd creates the ledger's table (pgstore.Migrate) and
// its own table of withdrawals, payoutd_withdrawals, in the connection's
// current schema, if they do not exist: safe from every process at once.
// SIGINT or SIGTERM stops it gracefully: it stops accepting connections and
// lets the requests in flight, and their sends, finish (for at most
// -send-timeout and five seconds).
//
// # The HTTP API
//
// Bodies are JSON. Every error is an RFC 9457 problem, with the content type
// application/problem+json and the fields type, title, status and detail
// (and holder, below).
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
// rail's reference. A repeat of the key gets the same status and body,
// byte for byte, with Idempotent-Replayed: true, and sends nothing. Refused,
// nothing sent:
//
//	400  Idempotency-Key missing or invalid
//	404  no such withdrawal (or another tenant's)
//	409  the key's send is still running, or ended without an answer (with
//	     -wait d, a repeat first waits up to d for the running send's outcome:
//	     201 replayed if it comes, 502 if the send ends without one)
//	409  another key holds the withdrawal: "holder" names it; look it up
//	422  the key was used for another withdrawal
//	503  the store failed (Retry-After): retry with the same key
//
// and 502 when the rail failed or did not answer in time: money may have
// moved, and the key stays claimed (409 to every retry) until an operator
// looks at the rail and resolves or releases it. Never retry under a new key.
//
// GET /withdrawals/{id} returns the withdrawal with its state and
// "claimed_by", the request key holding it or null. The state is "approved"
// while no key holds it, "sent" (with "tx") once the holder key has an
// outcome, and "in_flight" while the holder key has none: its send is
// running, or ended without an answer and waits for an operator.
//
// GET /rail/sends returns {"<withdrawal id>": <count>, ...}: how many times
// this process's fake rail moved money for each withdrawal, answered or not
// (a refused send moves nothing). Several processes each count their own; a
// client sums them.
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
// The operator's side, for the keys left in flight (see the README's
// runbook). They are open to every client here; a real service must serve
// them only behind real authentication of its operators. Their errors are
// problems whose detail is the ledger's error.
//
// GET /admin/inflight lists the keys in flight, oldest first, in every tenant:
// 200 and [{"tenant", "key", "withdrawal_id", "amount", "currency",
// "destination", "claimed_at", "token", "sending"}, ...]. Query parameters:
// older_than (a duration: the keys claimed at least that long ago), tenant
// (that tenant's keys only; tenant= is the default tenant) and limit (1 to
// 1000, default 100: the oldest ones). "sending" is true while this process
// runs the key's send: leave those alone.
//
// POST /admin/claims/{key}/resolve, in the X-Tenant header's tenant, with the
// withdrawal as the rail shows it sent as the body, records it as the outcome
// of the key's claim in flight: 200 and {"resolved": claim, "outcome":
// withdrawal}; every retry of the key replays it. POST
// /admin/claims/{key}/release drops the claim, the rail having affirmed that
// nothing was sent: 200 and {"released": claim}; the withdrawal may be sent
// again. Both act on the claim the listing shows, by its token, and with
// ?token=N only if the key's claim is still that one: a key released and
// claimed again meanwhile is a 409 and nothing changes. 404 when the key has
// no claim in flight in the tenant; 409 when the outcome contradicts the
// claim (another withdrawal) or the recorded one, or when this process is
// sending the key (release).
//
// POST /admin/prune?before=T turns the records settled before T (RFC 3339,
// or a duration ago such as 720h), in every tenant, into tombstones: 200 and
// {"pruned": n, "before": T}. A pruned key or withdrawal is refused from
// then on (410 to a submit of the pruned key, 409 with holder to another key
// for its withdrawal), never sent again.
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
	failShare := flags.Float64("rail-fail", 0, "`share` of sends (0 to 1) the fake rail refuses, moving no money")
	timeoutShare := flags.Float64("rail-timeout-share", 0, "`share` of sends (0 to 1) that move money and never answer")
	if err := flags.Parse(args); err != nil {
		return err
	}
	switch {
	case flags.NArg() > 0:
		return fmt.Errorf("unexpected argument %q", flags.Arg(0))
	case *failShare < 0 || *timeoutShare < 0 || *failShare+*timeoutShare > 1:
		return errors.New("-rail-fail and -rail-timeout-share must be shares from 0 to 1, together at most 1")
	case *sendTimeout <= 0:
		return errors.New("-send-timeout must be positive")
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))

	cfg := config{Rail: newRail(*latency, *failShare, *timeoutShare), SendTimeout: *sendTimeout, Wait: *wait, Logger: log}
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
