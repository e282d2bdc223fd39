// Package ctl is the operator's command line for a submissions ledger kept
// in PostgreSQL by pgstore, as a library: submissionsctl runs it as it is,
// and a service runs it with its own rules for an outcome (WithOutcomeCheck)
// as a command of its own, so that an operator's outcome is checked the same
// way at every door. Every decision of resolve and release is package
// admin's (admin.Result); the command line only shows it.
package ctl

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemledger/submissions"
	"github.com/idemledger/submissions/admin"
	"github.com/idemledger/submissions/pgstore"
)

// The exit codes.
const (
	exitOK           = 0
	exitFailed       = 1
	exitUsage        = 2
	exitDeclined     = 3
	exitFailedAction = 4
)

// usageError is an error of the command line: exit code 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// errDeclined is a release the operator did not confirm: exit code 3.
var errDeclined = errors.New("declined: nothing changed")

// stringFlag is a string flag that knows whether it was set, and never shows
// its value in the help text (a database URL may hold a password).
type stringFlag struct {
	value string
	set   bool
}

func (f *stringFlag) String() string     { return "" }
func (f *stringFlag) Set(s string) error { f.value, f.set = s, true; return nil }

// globals are the flags every command takes, before or after its name.
type globals struct {
	url    stringFlag
	table  stringFlag
	tenant stringFlag
}

func (g *globals) register(fs *flag.FlagSet) {
	fs.Var(&g.url, "database-url", "PostgreSQL connection `URL` (default $DATABASE_URL)")
	fs.Var(&g.table, "table", "the ledger's table `name` (default \""+pgstore.DefaultTable+"\")")
	fs.Var(&g.tenant, "tenant", "the `tenant` of the key (default \"\", the default tenant); inflight: list this tenant's keys only")
}

// env is one run's command line and streams.
type env struct {
	g      globals
	o      options
	stdin  *bufio.Reader
	stdout io.Writer
	stderr io.Writer
}

// An Option sets how Run behaves.
type Option interface{ apply(*options) }

type options struct {
	name  string                          // the program's name in its messages
	check func([]byte) error              // the service's rule for an outcome; nil for none
	hooks *pgstore.Hooks[json.RawMessage] // the service's writes in each change's transaction; nil for none
}

type optionFunc func(*options)

func (f optionFunc) apply(o *options) { f(o) }

// WithName names the program in its usage and messages; the default is
// "submissionsctl".
func WithName(name string) Option {
	return optionFunc(func(o *options) { o.name = name })
}

// WithOutcomeCheck makes resolve refuse an outcome file for which check,
// given the file's JSON, returns an error: the service's own rules for an
// outcome, as its other doors apply them (admin.Admin.WithOutcomeCheck).
// The default checks only that the outcome is the claim's withdrawal.
func WithOutcomeCheck(check func(outcome []byte) error) Option {
	return optionFunc(func(o *options) { o.check = check })
}

// WithHooks makes resolve and release (and every other change the command
// makes to a claim) run h in the transaction of that change, as the
// service's own Store does with pgstore.WithHooks, so that the service's
// rows move with the ledger's claims at this door too: a withdrawal
// "sending" becomes "sent" with a resolve, "approved" again with a release.
// Each hook gets the record with its outcome as its JSON, the bytes the
// table holds (for a resolve, the outcome file's). A hook that returns an
// error rolls the change back: the action fails (exit code 4), and nothing
// changed. The default runs none.
func WithHooks(h pgstore.Hooks[json.RawMessage]) Option {
	return optionFunc(func(o *options) { o.hooks = &h })
}

// Run runs the command line args (without the program's name), reading
// stdin and writing stdout and stderr, and returns the exit code: 0 done
// (changed, or already so), 1 refused or failed, 2 a usage error, 3 a
// release not confirmed, 4 a resolve or release that failed (admin.Failed). Errors go to stderr, one line each.
func Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, opts ...Option) int {
	o := options{name: "submissionsctl"}
	for _, opt := range opts {
		opt.apply(&o)
	}
	return run(ctx, args, stdin, stdout, stderr, o)
}

// command is one of the command line's commands.
type command struct {
	name    string
	args    []string // the names of its positional arguments
	usage   string   // its flags, for the usage line
	summary string
	// setup registers the command's own flags and returns what runs it.
	setup func(e *env, fs *flag.FlagSet) func(ctx context.Context, args []string) error
}

var commands = []command{
	{name: "migrate", summary: "create or update the ledger's table (idempotent): created, updated or up to date", setup: setupMigrate},
	{name: "inflight", usage: "[--older-than D] [--json] [--limit N]",
		summary: "list the keys in flight, oldest first (every tenant, or --tenant's)", setup: setupInFlight},
	{name: "show", args: []string{"KEY"}, usage: "[--json]",
		summary: "show a key's record: state, withdrawal, claim token, times, outcome", setup: setupShow},
	{name: "resolve", args: []string{"KEY"}, usage: "--outcome-file F [--token N] [--force] [--id-field NAME] [--amount-field NAME] [--currency-field NAME] [--destination-field NAME]",
		summary: "record F's JSON as the outcome of the key's claim, if its withdrawal is the claim's: it was sent", setup: setupResolve},
	{name: "release", args: []string{"KEY"}, usage: "[--yes] [--token N] [--force]",
		summary: "drop the key's claim: nothing was sent (asks unless --yes)", setup: setupRelease},
	{name: "prune", usage: "--before T [--batch N] [--min-retention D] [--force]",
		summary: "turn the records settled before T, at least --min-retention ago, into tombstones, in every tenant", setup: setupPrune},
}

const exitCodesHelp = `Exit codes:
  0  done: changed, or already as asked (the message says which)
  1  refused, nothing changed (the message says why, and what to do next), or
     the command failed before acting (the database could not be reached or read)
  4  resolve or release failed: the database failed or the command was stopped; the
     message says whether the action may stand (show the key to know)
  2  usage error (unknown command or flag, missing argument, no database URL)
  3  declined: release was not confirmed; nothing changed
`

// run runs the command line args and returns the exit code; errors go to
// stderr, one line each.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, o options) int {
	e := &env{o: o, stdin: bufio.NewReader(stdin), stdout: stdout, stderr: stderr}
	return report(e.run(ctx, args), o, stderr)
}

// report writes err, a run's error, to stderr, and returns the exit code.
func report(err error, o options, stderr io.Writer) int {
	var usage usageError
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.As(err, &usage):
		fmt.Fprintf(stderr, "%s: %v (see %s -h)\n", o.name, err, o.name)
		return exitUsage
	case errors.Is(err, errDeclined):
		fmt.Fprintf(stderr, "%s: %v\n", o.name, err)
		return exitDeclined
	}
	if re, ok := errors.AsType[resultError](err); ok && re.res.Decision == admin.Failed {
		fmt.Fprintf(stderr, "%s: %s\n", o.name, oneLine(err.Error()))
		return exitFailedAction
	}
	fmt.Fprintf(stderr, "%s: %s\n", o.name, oneLine(err.Error()))
	return exitFailed
}

func (e *env) run(ctx context.Context, args []string) error {
	top := flag.NewFlagSet(e.o.name, flag.ContinueOnError)
	top.SetOutput(io.Discard)
	e.g.register(top)
	if err := top.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			e.help(top)
			return err
		}
		return usageError{err.Error()}
	}
	if top.NArg() == 0 {
		return usagef("no command")
	}
	name, rest := top.Arg(0), top.Args()[1:]
	if name == "help" {
		e.help(top)
		return nil
	}
	var cmd *command
	for i := range commands {
		if commands[i].name == name {
			cmd = &commands[i]
		}
	}
	if cmd == nil {
		return usagef("unknown command %q", name)
	}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	e.g.register(fs)
	runCmd := cmd.setup(e, fs)
	pos, err := parseInterspersed(fs, rest)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			e.commandHelp(cmd, fs)
			return err
		}
		return usagef("%s: %v", name, err)
	}
	if len(pos) != len(cmd.args) {
		if len(cmd.args) == 0 {
			return usagef("%s: unexpected argument %q", name, pos[0])
		}
		return usagef("%s: expected %s, got %d arguments", name, strings.Join(cmd.args, " "), len(pos))
	}
	if err := submissions.ValidateTenant(e.g.tenant.value); err != nil {
		return usagef("--tenant: %v", err)
	}
	table := pgstore.DefaultTable
	if e.g.table.set {
		table = e.g.table.value
	}
	if _, err := pgstore.Schema(table); err != nil {
		return usagef("--table: %v", err)
	}
	e.g.table.value = table
	return runCmd(ctx, pos)
}

// parseInterspersed parses fs's flags wherever they are among args and
// returns the other arguments; after "--" every argument is one of those.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		consumed := len(args) - fs.NArg()
		if consumed > 0 && args[consumed-1] == "--" {
			return append(pos, fs.Args()...), nil
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

func (e *env) help(top *flag.FlagSet) {
	w := e.stdout
	fmt.Fprintf(w, "Usage: %s [global flags] COMMAND [flags] [KEY]\n", e.o.name)
	fmt.Fprint(w, `
The operator's tool for a submissions ledger in PostgreSQL (pgstore): find the
request keys left in flight, look at the rail, then resolve or release them.

Commands:
`)
	for _, c := range commands {
		fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, "\nGlobal flags (also accepted after the command):\n")
	top.SetOutput(w)
	top.PrintDefaults()
	top.SetOutput(io.Discard)
	fmt.Fprintf(w, "\n%s\nRun '%s COMMAND -h' for a command's flags.\n", exitCodesHelp, e.o.name)
}

func (e *env) commandHelp(c *command, fs *flag.FlagSet) {
	w := e.stdout
	line := e.o.name + " " + c.name
	for _, a := range c.args {
		line += " " + a
	}
	if c.usage != "" {
		line += " " + c.usage
	}
	fmt.Fprintf(w, "Usage: %s\n\n%s.\n\nFlags (with the global ones):\n", line, c.summary)
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
	fmt.Fprint(w, "\n"+exitCodesHelp)
}

// ledger is a connection to the ledger's table.
type ledger struct {
	pool  *pgxpool.Pool
	store *pgstore.Store[record]
	admin *admin.Admin[record]
	table string // quoted for SQL
}

// open connects to the database and returns the ledger on its table.
func (e *env) open(ctx context.Context) (*ledger, error) {
	url := e.g.url.value
	if !e.g.url.set {
		url = os.Getenv("DATABASE_URL")
	}
	if url == "" {
		return nil, usagef("no database: give --database-url or set DATABASE_URL")
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, usagef("database URL: %v", err)
	}
	cfg.MaxConns = 2
	connect, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(connect, cfg)
	if err == nil {
		if err = pool.Ping(connect); err != nil {
			pool.Close()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("database: %w", err)
	}
	opts := []pgstore.Option{pgstore.WithTable(e.g.table.value), pgstore.WithCodec(rawCodec{})}
	if e.o.hooks != nil {
		opts = append(opts, pgstore.WithHooks(rawHooks(*e.o.hooks)))
	}
	store, err := pgstore.New[record](pool, opts...)
	if err != nil {
		pool.Close()
		return nil, err
	}
	l := submissions.NewWithStore[record](store, submissions.WithLogger(slog.New(slog.DiscardHandler)))
	ops := l.Admin()
	if check := e.o.check; check != nil {
		ops = ops.WithOutcomeCheck(func(r record) error { return check(r.raw) })
	}
	return &ledger{pool: pool, store: store, admin: ops, table: pgx.Identifier(strings.Split(e.g.table.value, ".")).Sanitize()}, nil
}

// oneLine returns s with its line breaks as spaces.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// quote returns s as it is when it prints plainly in a column, and quoted
// otherwise (empty, spaces, other characters that would not show).
func quote(s string) string {
	if s == "" {
		return `""`
	}
	for _, r := range s {
		if r <= ' ' || r == '"' || !strconv.IsPrint(r) {
			return strconv.Quote(s)
		}
	}
	return s
}
