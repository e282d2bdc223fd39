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
//	-rail-latency        how long the fake rail takes to answer (default 0);
//	                     also the Retry-After of a 409 for a key whose send
//	                     runs (at most -send-timeout; at least 1 second)
//	-rail-decline        share of sends, 0 to 1, the rail declines: no money
//	                     moves, and the withdrawal is failed (an outcome: 201)
//	-rail-unavailable    share of sends, 0 to 1, the rail is unavailable for and
//	                     says so: no money moves, a 503, the key free again
//	-rail-fail           share of sends, 0 to 1, the rail fails without saying
//	                     whether money moved (none did): a 502, the key left
//	                     claimed for an operator
//	-rail-timeout-share  share of sends, 0 to 1, that move money but never
//	                     answer: a 502 at -send-timeout, the key left claimed
//	-rail-log            a file the fake rail keeps its record in (default
//	                     none: in memory): each send it takes, appended as a
//	                     JSON line and synced to disk before it answers, and
//	                     read back at start, so that its transfers (and
//	                     its deduplication, and GET /rail/sends) outlive the
//	                     process, as a real rail's do; one process a file
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
// With -database-url, payoutd creates the ledger's table (pgstore.Migrate),
// the table of the keys of POST /withdrawals, payoutd_create_keys (another
// pgstore table), and its own table of withdrawals, payoutd_withdrawals, in
// the connection's current schema, if they do not exist, and adds the
// columns of a withdrawal's state (state, tx, failure_reason) to a table made
// by an older payoutd: safe from every process at once. A withdrawal's
// stored state moves with its key's claim, in the same transaction as the
// ledger's change (pgstore.WithHooks): "approved" -> "sending" with the
// claim, "sending" -> "sent" or "failed" with the outcome, "sending" ->
// "approved" with a release (the rail said nothing moved, or an operator
// released it). So "sending" is stored exactly while the ledger has a claim
// in flight for the withdrawal, and "sent" or "failed" exactly when it has
// the outcome, whatever process crashes when. The rail is called between
// those transactions, in none. A change that would find the withdrawal in
// another state than it expects is refused, and the ledger's change with
// it (a 503 store-unavailable for a submit). At start payoutd brings the
// states left by a payoutd from before this in line with the ledger: stop
// the older processes before starting this one on their database. (In
// memory, payoutd stores a withdrawal's outcome once it sees it, and the
// ledger alone knows a claim in flight.)
// SIGINT or SIGTERM stops it gracefully: it stops accepting connections and
// lets the requests in flight, and their sends, finish (for at most
// -send-timeout and five seconds).
//
// # The HTTP API
//
// Every error that reaches payoutd, 404 and 405 included, is an RFC 9457
// problem, with the content type application/problem+json and the members
// type, title, status and detail (and holder, answer and errors, below).
// Outside the admin endpoints, the detail is a sentence written for the
// client, never an error's text. The types
// are the ledger's (urn:submissions:problem:..., see package idemhttp, with
// its fixed sentences; for invalid-tenant payoutd says what is wrong with
// the X-Tenant header) and payoutd's own, urn:payoutd:problem: followed by
// not-found (404: no such path or withdrawal), method-not-allowed (405, with
// Allow), malformed-request (400: a body that is not one JSON object, a bad
// query parameter), body-too-large (413), and the admin endpoints' own
// (below). net/http itself refuses a request it cannot parse (a malformed
// request line or header field, such as a header value with a control
// character) with a plain-text 400 before payoutd sees it: that one is not
// a problem. A request body, on every endpoint, is at most 16 KiB (16384
// bytes): a larger one is a 413, and nothing else happens. Bodies are JSON
// objects; a detail or an errors member names a field by its JSON name.
//
// POST /withdrawals with {"amount": "25.00", "currency": "USDC",
// "destination": "0xab..."} creates a withdrawal: 201 and {"id", "amount",
// "currency", "destination", "state": "approved"}, with Location. The id
// ("wd_" and 32 hex digits) is the server's, random, never the client's: the
// ledger's claim is only as strong as the id. Malformed JSON is a 400; a
// missing or invalid amount, currency or destination (or one that is not a
// JSON string) a 422 invalid-fingerprint whose errors member lists every
// field at fault at once: [{"pointer": "#/amount", "detail": "is missing"},
// ...]. With an Idempotency-Key (idemhttp.InTx), the key and the withdrawal
// are written in one transaction (in memory, one submit of a ledger of the
// create keys'): a repeat of the request, however concurrent, gets the first
// 201, the same withdrawal and body, with Idempotent-Replayed: true (a
// repeat that comes while the first is being written waits for it); the
// same key with another body (compared as JSON) is a 422 key-reused, and
// creates nothing. The body is checked before the key is used: a body
// refused with 400 or 422 leaves the key unused, and the key with a good
// body then creates. An invalid key is a 400. The create keys are apart
// from the submit keys below, and per tenant. Without an Idempotency-Key,
// as before, each call creates a withdrawal: a client that may retry a
// create must send one.
//
// POST /withdrawals/{id}/submit with an Idempotency-Key header sends the
// withdrawal: 201 and the withdrawal with "state": "sent" and "tx", the
// rail's reference, or, when the rail declined it, "state": "failed" and
// "failure_reason" (nothing moved; the withdrawal stays claimed by the key:
// a new attempt is a new withdrawal). A repeat of the key gets the same
// status and body, byte for byte, with Idempotent-Replayed: true, and sends
// nothing. It reads no body (one is read and dropped, and over 16 KiB is a
// 413 like any other). Refused, this request sending nothing:
//
//	400  Idempotency-Key missing or invalid, X-Tenant invalid
//	404  no such withdrawal (or another tenant's)
//	413  a body over 16 KiB
//	409  key-in-flight: the key's send is running, or not known to have
//	     ended (with Retry-After: the rail's latency, in whole seconds, at
//	     least 1, at most -send-timeout; with -wait d, a repeat first waits
//	     up to d for the running send's outcome: 201 replayed if it comes,
//	     502 if the send ends without one; a key released meanwhile is a
//	     409 too, and the retry sends)
//	409  awaiting-operator: the key's send ended without an answer, no send
//	     runs, and nothing changes until an operator resolves or releases
//	     the key (no Retry-After); then a retry gets the operator's outcome,
//	     or sends
//	409  another key holds the withdrawal: "holder" names it; look it up
//	410  the key's outcome was pruned: the key and its withdrawal stay
//	     claimed for ever, and are never sent again
//	422  the key was used for another withdrawal
//	503  the store failed (Retry-After): retry with the same key
//	503  the rail was unavailable and moved nothing (not-sent, Retry-After):
//	     the key is free again, and a retry with the same key sends
//
// A request refused with 400, 404 or 413, or with the 409 that names
// another key as holder, claims nothing: its key stays unused, and a good
// request under it later sends (a create's keys are another set). The other 409s, the 410 and the 422 find the key claimed already,
// and leave it as it is.
//
// 502 when the rail failed or did not answer in time: money may have
// moved, and the key stays claimed (409 awaiting-operator to every retry)
// until an operator looks at the rail and resolves or releases it. A 502
// outcome-not-recorded (the rail answered, and its answer could not be
// recorded) carries the rail's answer, the withdrawal as the rail returned
// it, in its answer member; its detail says whether the key stays claimed
// or an operator resolved or released it while the rail answered. Never
// retry under a new key.
//
// GET /withdrawals/{id} returns the withdrawal with its state and
// "claimed_by", the request key holding it or null. The state is "approved"
// while no key holds it; "in_flight" while the holder key has no outcome
// and its send is not known to have ended (it runs, or the process running
// it stopped mid-send); "awaiting_operator" when that send ended without an
// answer (a 502): nothing changes until an operator resolves or releases
// the key; and the outcome's once it has one: "sent" (with "tx") or
// "failed" (with "failure_reason"). payoutd keeps the outcome in its own
// store as well (in memory, or in payoutd_withdrawals), so a withdrawal
// whose record the ledger pruned still reads as it ended; "unknown" if the
// ledger pruned an outcome payoutd never saw (in memory, one resolved around
// it and never read; on PostgreSQL, only one written past payoutd's hooks,
// by submissionsctl, and never read). The stored "sending" is never shown:
// the ledger's claim tells in_flight from awaiting_operator.
//
// GET /rail/sends returns {"<withdrawal id>": <count>, ...}: how many times
// this process's fake rail moved money for each withdrawal, answered or not
// (a declined, unavailable or failed send moves nothing, and neither does one
// the rail deduplicated); with -rail-log, every movement in its log, made by
// earlier processes too. Several processes each count their own; a client
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
// docs/operations.md). They are open to every client here; a real service
// must serve them only behind real authentication of its operators. `payoutd
// ctl` is the same from a shell, on payoutd's database (payoutd ctl -h), and
// moves the withdrawals' states with its resolves and releases as payoutd
// does (ctl.WithHooks); submissionsctl, which would leave them, refuses to
// resolve or release on payoutd's table (its Migrate records "payoutd ctl" there).
// `payoutd doctor` reports every withdrawal whose stored state disagrees
// with the ledger's claim (one left sending with no claim, by a change made
// past the hooks, is refused every submit), and changes nothing.
//
// GET /admin/inflight lists the keys in flight, oldest first, in every tenant:
// 200 and [{"tenant", "key", "withdrawal_id", "amount", "currency",
// "destination", "claimed_at", "token", "sending", "abandoned", "send"},
// ...]. Query parameters: older_than (a duration: the keys claimed at least
// that long ago), tenant (that tenant's keys only; tenant= is the default
// tenant) and limit (1 to 1000, default 100: the oldest ones). "send" is
// "running" while this process runs the key's send (leave those alone),
// "ended without a recorded answer" once it ended so ("abandoned": look at the rail),
// and "not known to have ended" otherwise (another process may run it, or
// stopped mid-send). A bad parameter is a 400.
//
// POST /admin/claims/{key}/resolve, in the X-Tenant header's tenant, with
// the withdrawal as the rail shows it as the body ("sent" with its "tx", or
// "failed" with its "failure_reason"), records it as the outcome of the
// key's claim, and payoutd keeps its state as the withdrawal's; every retry
// of the key replays it. POST /admin/claims/{key}/release drops the claim,
// the rail having affirmed that the key's sends moved nothing; the
// withdrawal may be sent again (the rail key stays the same, so a rail that
// deduplicates answers a wrong release with the first transfer). Both take
// token=N, to act only on that claim, and force=true, to act on a claim whose
// send is not known to have ended.
//
// Their decisions are package admin's, in its words (admin.Result), the
// same as payoutd ctl's: 200 and {"action", "decision", "message", "state",
// "claim", "outcome"} when the ledger is as asked ("changed", or
// "unchanged": the same outcome again);
// otherwise a problem of type urn:payoutd:problem:RULE whose detail is the
// message, with "next" (what to do) and the same members: 400 invalid-key,
// invalid-tenant; 404 unknown-key; 409 token-differs, field-differs,
// other-withdrawal, another-outcome, has-outcome, send-may-be-running,
// send-running, claim-changed; 410 pruned; 422 invalid-outcome; 503
// store-failed, context-ended.
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
//
// # Crash tests
//
// The environment variable PAYOUTD_FAULT, set to a step of a send, makes
// payoutd kill itself with SIGKILL at that step, saying so on stderr first:
// claimed (in the claim's transaction, before it commits), before-rail (the
// claim committed), rail-moved (the rail moved the money and recorded it,
// before it answers), settled (in the outcome's transaction, before it
// commits), before-answer (the outcome committed, before the HTTP answer),
// released (in the release's transaction, before it commits). It is for the
// tests (crash_test.go), never for a real process; a value that names no
// step stops payoutd at start.
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
	if len(os.Args) > 1 && os.Args[1] == "ctl" { // the operator's command line: payoutd ctl -h
		code := runCtl(ctx, os.Args[2:], os.Stdin, os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	if len(os.Args) > 1 && os.Args[1] == "doctor" { // the check of the states against the ledger: payoutd doctor -h
		code := runDoctor(ctx, os.Args[2:], os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	switch {
	case errors.Is(err, flag.ErrHelp): // -h: the usage, asked for and printed
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
// stdout, and logs to stderr. With -h it prints the usage to stdout and
// returns flag.ErrHelp; with a flag it does not know, the usage to stderr
// and the flag's error.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	flags := flag.NewFlagSet("payoutd", flag.ContinueOnError)
	flags.SetOutput(io.Discard) // the usage is printed below, where it belongs
	flags.Usage = func() {
		fmt.Fprint(flags.Output(), "Usage: payoutd [flags]\n\n"+
			"An example payout service on the submissions ledger: an HTTP API that sends\n"+
			"each withdrawal to a fake payment rail at most once (go doc ./examples/payoutd).\n\nFlags:\n")
		flags.PrintDefaults()
	}
	addr := flags.String("addr", "127.0.0.1:8080", "`address` to listen on; port 0 picks a free one")
	databaseURL := flags.String("database-url", "", "PostgreSQL connection `string`; empty keeps everything in memory")
	sendTimeout := flags.Duration("send-timeout", 10*time.Second, "how long a send may take")
	wait := flags.Duration("wait", 0, "how long a repeat of a key whose send runs waits for its outcome (then 201, replayed) before a 409; 0 answers 409 at once")
	latency := flags.Duration("rail-latency", 0, "how long the fake rail takes to answer; also the Retry-After of a key whose send runs")
	declineShare := flags.Float64("rail-decline", 0, "`share` of sends (0 to 1) the fake rail declines, moving no money: the withdrawal is failed")
	unavailableShare := flags.Float64("rail-unavailable", 0, "`share` of sends (0 to 1) the fake rail is unavailable for, moving no money and saying so: a 503, and a retry sends")
	failShare := flags.Float64("rail-fail", 0, "`share` of sends (0 to 1) the fake rail fails, moving no money without saying so: a 502, the key left claimed")
	timeoutShare := flags.Float64("rail-timeout-share", 0, "`share` of sends (0 to 1) that move money and never answer")
	railLog := flags.String("rail-log", "", "`file` the fake rail keeps its record in: appended and synced before it answers, read back at start")
	if err := flags.Parse(args); err != nil {
		flags.SetOutput(stderr)
		if errors.Is(err, flag.ErrHelp) { // asked for: on stdout
			flags.SetOutput(stdout)
		}
		flags.Usage()
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
	f, err := parseFault(os.Getenv(faultEnv))
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))

	cfg := config{Rail: newRail(*latency, *declineShare, *unavailableShare, *failShare, *timeoutShare), SendTimeout: *sendTimeout, Wait: *wait, Logger: log, Fault: f}
	cfg.Rail.fault = f
	if *railLog != "" {
		if err := cfg.Rail.openLog(*railLog); err != nil {
			return err
		}
		defer cfg.Rail.closeLog()
	}
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
