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

// shutdownGrace is how long the requests in flight get to finish after
// SIGINT or SIGTERM.
const shutdownGrace = 10 * time.Second

func main() {
	os.Exit(mainArgs(os.Args[1:]))
}

// mainArgs runs the command with args until SIGINT or SIGTERM, and returns
// its exit code.
func mainArgs(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return exitCode(run(ctx, args, os.Stdout, os.Stderr), os.Stderr)
}

// errUsage marks an error that the usage has already been printed for.
var errUsage = errors.New("usage")

// exitCode is the exit code of run's err: 0 for none and for -h, 2 for a bad
// command line, 1 (with err on stderr) otherwise.
func exitCode(err error, stderr io.Writer) int {
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	}
	fmt.Fprintln(stderr, "sales:", err)
	return 1
}

// run serves the API on the flags' address and database until ctx ends,
// then shuts down gracefully. -h prints the usage on stdout and returns
// flag.ErrHelp.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	flags := flag.NewFlagSet("sales", flag.ContinueOnError)
	flags.SetOutput(io.Discard) // the usage is printed below, on stdout or stderr
	flags.Usage = func() {
		fmt.Fprint(flags.Output(), "Usage: sales [flags]\n\n"+
			"A shop-credit service whose POST /shops/{shop}/sales records each sale once,\n"+
			"however often it is tapped (go doc ./examples/sales).\n\nFlags:\n")
		flags.PrintDefaults()
	}
	addr := flags.String("addr", "127.0.0.1:8080", "`address` to listen on; port 0 picks a free one")
	databaseURL := flags.String("database-url", os.Getenv("DATABASE_URL"), "PostgreSQL connection `string` (default $DATABASE_URL)")
	commitDelay := flags.Duration("commit-delay", 0, "keep each sale's transaction open this long before it commits, to land a double tap by hand")
	if err := flags.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			flags.SetOutput(stdout)
			flags.Usage()
			return err
		}
		flags.SetOutput(stderr)
		fmt.Fprintln(stderr, err)
		flags.Usage()
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	switch {
	case flags.NArg() > 0:
		flags.SetOutput(stderr)
		fmt.Fprintf(stderr, "unexpected argument %q\n", flags.Arg(0))
		flags.Usage()
		return errUsage
	case *databaseURL == "":
		return errors.New("no database: set -database-url or DATABASE_URL")
	case *commitDelay < 0:
		return errors.New("-commit-delay must not be negative")
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))

	pool, err := connect(ctx, *databaseURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	setup, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	api, err := newServer(setup, config{Pool: pool, Logger: log, CommitDelay: *commitDelay})
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
	fmt.Fprintf(stdout, "sales listening on http://%s\n", ln.Addr())

	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down: finishing the requests in flight")
	stop, cancelStop := context.WithTimeout(context.Background(), *commitDelay+shutdownGrace)
	defer cancelStop()
	if err := srv.Shutdown(stop); err != nil {
		_ = srv.Close()
		return fmt.Errorf("shutdown: %w", err)
	}
	<-served // http.ErrServerClosed
	fmt.Fprintln(stdout, "sales stopped")
	return nil
}

// connect opens a pool on the database at url and checks that it answers.
func connect(ctx context.Context, url string) (*pgxpool.Pool, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
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
