package ctl

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/idemledger/submissions/admin"
	"github.com/idemledger/submissions/driver"
	"github.com/idemledger/submissions/pgstore"
)

// maxOutcome caps an outcome file.
const maxOutcome = 1 << 20

// testHookAfterLookup, when set, runs between a key's lookup and the action
// on its claim: the tests take the claim away there.
var testHookAfterLookup func()

func setupMigrate(e *env, _ *flag.FlagSet) func(context.Context, []string) error {
	return func(ctx context.Context, _ []string) error {
		l, err := e.open(ctx)
		if err != nil {
			return err
		}
		defer l.pool.Close()
		done, err := l.store.MigrateReport(ctx)
		if err != nil {
			return err
		}
		switch done {
		case pgstore.Created:
			fmt.Fprintf(e.stdout, "created table %s\n", e.g.table.value)
		case pgstore.Updated:
			fmt.Fprintf(e.stdout, "updated table %s: it is up to date now\n", e.g.table.value)
		default:
			fmt.Fprintf(e.stdout, "table %s is up to date: nothing changed\n", e.g.table.value)
		}
		return nil
	}
}

// claimJSON is a claim in flight as inflight --json writes it, one a line.
type claimJSON struct {
	Tenant       string    `json:"tenant"`
	Key          string    `json:"key"`
	WithdrawalID string    `json:"withdrawal_id"`
	Amount       string    `json:"amount"`
	Currency     string    `json:"currency"`
	Destination  string    `json:"destination"`
	ClaimedAt    time.Time `json:"claimed_at"`
	AgeSeconds   int64     `json:"age_seconds"`
	Token        uint64    `json:"token"`
	Abandoned    bool      `json:"abandoned"` // its send ended without a recorded answer
	Answered     bool      `json:"answered"`  // that send got an answer that was not recorded: money moved
	Send         string    `json:"send"`      // admin.Claim.Send: "answered, the answer not recorded", "ended without a recorded answer" or "not known to have ended" (this command runs no sends)
}

func setupInFlight(e *env, fs *flag.FlagSet) func(context.Context, []string) error {
	olderThan := fs.Duration("older-than", 0, "list the keys claimed at least this `long` ago (10m, 2h); 0 lists all")
	asJSON := fs.Bool("json", false, "write one JSON object a line instead of a table")
	limit := fs.Int("limit", 0, "list at most `N` keys; 0 lists all")
	return func(ctx context.Context, _ []string) error {
		if *olderThan < 0 || *limit < 0 {
			return usagef("inflight: --older-than and --limit must not be negative")
		}
		l, err := e.open(ctx)
		if err != nil {
			return err
		}
		defer l.pool.Close()
		q := admin.InFlightQuery{OlderThan: *olderThan}
		if e.g.tenant.set {
			q.Tenants = []string{e.g.tenant.value}
		}
		empty := q.EmptyText()
		tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
		if !*asJSON {
			fmt.Fprintln(tw, "TENANT\tKEY\tWITHDRAWAL\tAMOUNT\tCURRENCY\tDESTINATION\tCLAIMED AT\tAGE\tTOKEN\tSEND")
		}
		enc := json.NewEncoder(e.stdout)
		n, more := 0, false // shown, and whether --limit left some out
		for {
			q.Limit = admin.MaxListLimit
			if *limit > 0 { // one more than is left to show: is there more?
				q.Limit = min(q.Limit, *limit-n+1)
			}
			page, err := l.admin.InFlight(ctx, q)
			if err != nil {
				return err
			}
			shown := page
			if *limit > 0 && len(page) > *limit-n {
				shown, more = page[:*limit-n], true
			}
			now := time.Now()
			for _, c := range shown {
				age := max(now.Sub(c.ClaimedAt), 0)
				fp := c.Fingerprint
				if *asJSON {
					if err := enc.Encode(claimJSON{c.Tenant, c.Key, fp.WithdrawalID, fp.Amount, fp.Currency, fp.Destination,
						c.ClaimedAt, int64(age / time.Second), uint64(c.Token), c.Abandoned, c.Answered, c.Send()}); err != nil {
						return err
					}
					continue
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", quote(c.Tenant), quote(c.Key), quote(fp.WithdrawalID),
					fp.Amount, fp.Currency, quote(fp.Destination), c.ClaimedAt.Format(time.RFC3339), age.Round(time.Second), c.Token, c.Send())
			}
			n += len(shown)
			if more || len(page) < q.Limit {
				break
			}
			q.After = &page[len(page)-1]
		}
		switch {
		case *asJSON && more: // stdout stays JSON
			fmt.Fprintf(e.stderr, "%d shown, more in flight\n", n)
			return nil
		case *asJSON:
			return nil
		case n == 0: // no table of no rows
			fmt.Fprintln(e.stdout, empty)
			return nil
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if more {
			fmt.Fprintf(e.stdout, "%d shown, more in flight\n", n)
			return nil
		}
		fmt.Fprintf(e.stdout, "%d %s in flight\n", n, plural(n, "key", "keys"))
		return nil
	}
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// errNoRecord is the error of a key without a record.
var errNoRecord = errors.New("not found")

// found is a key's record, with its times when the table has them.
type found struct {
	tenant, key string
	rec         driver.Record[record]
	claimedAt   time.Time
	settledAt   *time.Time
}

// lookup returns the record of tenant's key, or an error when it has none.
func (l *ledger) lookup(ctx context.Context, tenant, key string) (found, error) {
	f := found{tenant: tenant, key: strings.TrimSpace(key)}
	rec, ok, err := l.store.Lookup(ctx, tenant, f.key)
	switch {
	case err != nil:
		return f, err
	case !ok:
		return f, fmt.Errorf("request key %s: %w in tenant %q", f.key, errNoRecord, tenant)
	}
	f.rec = rec
	// The claim and settlement times are the table's; a read that fails
	// leaves them out.
	_ = l.pool.QueryRow(ctx, `SELECT claimed_at, settled_at FROM `+l.table+` WHERE tenant = $1 AND request_key = $2 AND claim_id = $3`,
		tenant, f.key, int64(rec.Token)).Scan(&f.claimedAt, &f.settledAt)
	return f, nil
}

func (f found) state() string {
	if f.rec.Pruned { // a tombstone: its outcome and most of its request are gone
		return "pruned"
	}
	if f.rec.Done {
		return "done"
	}
	return "in flight"
}

func (f found) claim() admin.Claim {
	return admin.Claim{Tenant: f.tenant, Key: f.key, Fingerprint: f.rec.Fingerprint, ClaimedAt: f.claimedAt, Token: f.rec.Token,
		Abandoned: f.rec.Abandoned, Answered: f.rec.Answered}
}

// print writes the record for a reader, its outcome indented.
func (f found) print(w io.Writer) {
	fp := f.rec.Fingerprint
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "tenant:\t%s\n", quote(f.tenant))
	fmt.Fprintf(tw, "request key:\t%s\n", quote(f.key))
	fmt.Fprintf(tw, "state:\t%s\n", f.state())
	fmt.Fprintf(tw, "withdrawal:\t%s\n", quote(fp.WithdrawalID))
	fmt.Fprintf(tw, "amount:\t%s %s\n", fp.Amount, fp.Currency)
	fmt.Fprintf(tw, "destination:\t%s\n", quote(fp.Destination))
	fmt.Fprintf(tw, "token:\t%d\n", f.rec.Token)
	if !f.rec.Done {
		fmt.Fprintf(tw, "send:\t%s\n", f.claim().Send())
	}
	if !f.claimedAt.IsZero() {
		fmt.Fprintf(tw, "claimed at:\t%s (%s ago)\n", f.claimedAt.Format(time.RFC3339), max(time.Since(f.claimedAt), 0).Round(time.Second))
	}
	if f.settledAt != nil {
		fmt.Fprintf(tw, "settled at:\t%s\n", f.settledAt.Format(time.RFC3339))
	}
	_ = tw.Flush()
	if !f.rec.Done || f.rec.Pruned {
		return
	}
	var pretty bytes.Buffer
	if err := json.Indent(&pretty, bytes.TrimSpace(f.rec.Outcome.raw), "  ", "  "); err != nil {
		fmt.Fprintf(w, "outcome (not JSON, %d bytes): %q\n", len(f.rec.Outcome.raw), f.rec.Outcome.raw)
		return
	}
	fmt.Fprintf(w, "outcome:\n  %s\n", pretty.Bytes())
}

// recordJSON is a key's record as show --json writes it.
type recordJSON struct {
	Tenant       string          `json:"tenant"`
	Key          string          `json:"key"`
	State        string          `json:"state"`
	WithdrawalID string          `json:"withdrawal_id"`
	Amount       string          `json:"amount"`
	Currency     string          `json:"currency"`
	Destination  string          `json:"destination"`
	Token        uint64          `json:"token"`
	Abandoned    bool            `json:"abandoned"`      // in flight, and its send ended without a recorded answer
	Answered     bool            `json:"answered"`       // in flight, and that send got an answer that was not recorded
	Send         string          `json:"send,omitempty"` // in flight: admin.Claim.Send
	ClaimedAt    *time.Time      `json:"claimed_at,omitempty"`
	SettledAt    *time.Time      `json:"settled_at,omitempty"`
	Outcome      json.RawMessage `json:"outcome,omitempty"`
}

func setupShow(e *env, fs *flag.FlagSet) func(context.Context, []string) error {
	asJSON := fs.Bool("json", false, "write the record as a JSON object")
	return func(ctx context.Context, args []string) error {
		l, err := e.open(ctx)
		if err != nil {
			return err
		}
		defer l.pool.Close()
		f, err := l.lookup(ctx, e.g.tenant.value, args[0])
		if err != nil {
			return err
		}
		if !*asJSON {
			f.print(e.stdout)
			return nil
		}
		fp := f.rec.Fingerprint
		out := recordJSON{Tenant: f.tenant, Key: f.key, State: f.state(), WithdrawalID: fp.WithdrawalID, Amount: fp.Amount,
			Currency: fp.Currency, Destination: fp.Destination, Token: uint64(f.rec.Token), SettledAt: f.settledAt,
			Abandoned: f.rec.Abandoned, Answered: f.rec.Answered}
		if !f.rec.Done {
			out.Send = f.claim().Send()
		}
		if !f.claimedAt.IsZero() {
			out.ClaimedAt = &f.claimedAt
		}
		if f.rec.Done && !f.rec.Pruned {
			out.Outcome = f.rec.Outcome.raw
			if !json.Valid(out.Outcome) {
				return fmt.Errorf("request key %s: the stored outcome is not JSON", f.key)
			}
		}
		return json.NewEncoder(e.stdout).Encode(out)
	}
}

// tokenFlag registers --token on fs.
func tokenFlag(fs *flag.FlagSet) *uint64 {
	return fs.Uint64("token", 0, "act only if the key's claim has this `token` (as inflight and show list it); 0: its current claim")
}

// forceFlag registers --force on fs.
func forceFlag(fs *flag.FlagSet, what string) *bool {
	return fs.Bool("force", false, what+" a claim whose send is not known to have ended (it may run in a service process): only once the rail shows its final state")
}

// resultError is an action the ledger refused, or that failed: exit code 1.
type resultError struct{ res admin.Result }

func (e resultError) Error() string {
	if e.res.Next == "" {
		return e.res.Message
	}
	return e.res.Message + "; next: " + e.res.Next
}

func (e resultError) Unwrap() error { return e.res.Err }

// show writes res, an action's result: its message on stdout when the
// ledger is as asked, and otherwise the error that says it.
func (e *env) show(res admin.Result) error {
	if !res.OK() {
		return resultError{res}
	}
	fmt.Fprintln(e.stdout, res.Message)
	return nil
}

// openToChange is open, for a resolve or a release: it refuses a table
// that Migrate recorded as changed with a service's hooks when this
// command runs none (see pgstore.Hooks.Command).
func (e *env) openToChange(ctx context.Context) (*ledger, error) {
	l, err := e.open(ctx)
	if err != nil || e.o.hooks != nil {
		return l, err
	}
	command, hooked, err := l.store.HookedBy(ctx)
	if err == nil && hooked {
		run := "the service's own command (built with ctl.WithHooks)"
		if command != "" {
			run = command
		}
		err = fmt.Errorf("table %s is changed with a service's hooks, which this command does not run: run %s instead (nothing changed)", e.g.table.value, run)
	}
	if err != nil {
		l.pool.Close()
		return nil, err
	}
	return l, nil
}

// lookupToShow returns the record of tenant's key to show before an action,
// or false when it has none (or the key is not valid: the action says so);
// an error when it cannot be read, so that nothing is done unseen.
func (l *ledger) lookupToShow(ctx context.Context, tenant, key string) (found, bool, error) {
	if strings.TrimSpace(key) == "" {
		return found{}, false, nil
	}
	f, err := l.lookup(ctx, tenant, key)
	switch {
	case errors.Is(err, errNoRecord):
		return f, false, nil
	case err != nil:
		return f, false, err
	}
	return f, true, nil
}

func setupResolve(e *env, fs *flag.FlagSet) func(context.Context, []string) error {
	file := fs.String("outcome-file", "", "the outcome, the service's JSON encoding of what the rail shows, from this `file` (- for stdin)")
	token := tokenFlag(fs)
	force := forceFlag(fs, "resolve")
	names := fieldFlags(fs)
	return func(ctx context.Context, args []string) error {
		if *file == "" {
			return usagef("resolve: --outcome-file is required")
		}
		raw, err := e.readOutcome(*file)
		if err != nil {
			return err
		}
		l, err := e.openToChange(ctx)
		if err != nil {
			return err
		}
		defer l.pool.Close()
		t := admin.Target{Tenant: e.g.tenant.value, Key: args[0], Token: driver.Token(*token), Force: *force}
		f, ok, err := l.lookupToShow(ctx, t.Tenant, t.Key)
		if err != nil {
			return err
		}
		if ok {
			f.print(e.stdout)
			if t.Token == 0 {
				t.Token = f.rec.Token // the claim shown, and no later one
			}
		}
		fp, err := names.parse(raw)
		if err != nil {
			return fmt.Errorf("outcome file %s: %w: nothing written", *file, err)
		}
		if testHookAfterLookup != nil {
			testHookAfterLookup()
		}
		return e.show(l.admin.Resolve(ctx, t, record{fp: fp, raw: raw}))
	}
}

// readOutcome reads an outcome file: JSON, not null, at most maxOutcome
// bytes.
func (e *env) readOutcome(name string) ([]byte, error) {
	var r io.Reader = e.stdin
	if name != "-" {
		file, err := os.Open(name)
		if err != nil {
			return nil, fmt.Errorf("outcome file: %w", err)
		}
		defer file.Close()
		r = file
	}
	raw, err := io.ReadAll(io.LimitReader(r, maxOutcome+1))
	switch {
	case err != nil:
		return nil, fmt.Errorf("outcome file: %w", err)
	case len(raw) > maxOutcome:
		return nil, fmt.Errorf("outcome file %s: over %d bytes", name, maxOutcome)
	case !json.Valid(raw):
		return nil, fmt.Errorf("outcome file %s: not JSON", name)
	case string(bytes.TrimSpace(raw)) == "null":
		return nil, fmt.Errorf("outcome file %s: null is no outcome", name)
	}
	return raw, nil
}

func setupRelease(e *env, fs *flag.FlagSet) func(context.Context, []string) error {
	yes := fs.Bool("yes", false, "release without asking for confirmation")
	token := tokenFlag(fs)
	force := forceFlag(fs, "release")
	return func(ctx context.Context, args []string) error {
		l, err := e.openToChange(ctx)
		if err != nil {
			return err
		}
		defer l.pool.Close()
		t := admin.Target{Tenant: e.g.tenant.value, Key: args[0], Token: driver.Token(*token), Force: *force}
		f, ok, err := l.lookupToShow(ctx, t.Tenant, t.Key)
		if err != nil {
			return err
		}
		if ok && !f.rec.Done && (t.Token == 0 || t.Token == f.rec.Token) {
			f.print(e.stdout)
			if !*yes {
				fmt.Fprintf(e.stderr, "release request key %s of withdrawal %s in tenant %q? [y/N] ", f.key, f.rec.Fingerprint.WithdrawalID, f.tenant)
				answer, err := e.stdin.ReadString('\n')
				if err != nil && !errors.Is(err, io.EOF) {
					return err
				}
				if a := strings.ToLower(strings.TrimSpace(answer)); a != "y" && a != "yes" {
					return errDeclined
				}
			}
			t.Token = f.rec.Token // the claim the operator confirmed, and no later one
		}
		if testHookAfterLookup != nil {
			testHookAfterLookup()
		}
		return e.show(l.admin.Release(ctx, t))
	}
}

// pruneRisk is what pruning records younger than the clients' retries
// risks.
const pruneRisk = "a client retrying a pruned key gets 410/ErrPruned instead of its outcome; the key and withdrawal stay claimed for ever"

func setupPrune(e *env, fs *flag.FlagSet) func(context.Context, []string) error {
	before := fs.String("before", "", "prune the records settled before this `time`: RFC 3339 (2026-11-01T00:00:00Z), or a duration ago (720h)")
	batch := fs.Int("batch", admin.DefaultPruneBatch, "prune at most `N` records a statement")
	minRetention := fs.Duration("min-retention", admin.DefaultMinRetention, "refuse a horizon later than this `duration` ago")
	force := fs.Bool("force", false, "prune below the minimum retention (never after now)")
	return func(ctx context.Context, _ []string) error {
		now := time.Now()
		horizon, err := parseBefore(*before, now)
		switch {
		case err != nil:
			return err
		case *batch <= 0:
			return usagef("prune: --batch must be positive")
		case *minRetention < 0:
			return usagef("prune: --min-retention must not be negative")
		case horizon.After(now):
			return fmt.Errorf("%w: %s is in the future: nothing pruned (not even --force prunes after now)",
				admin.ErrHorizonTooRecent, horizon.UTC().Format(time.RFC3339))
		}
		l, err := e.open(ctx)
		if err != nil {
			return err
		}
		defer l.pool.Close()
		floor := *minRetention
		if *force {
			floor = 0
		}
		least := max(*minRetention, admin.DefaultMinRetention)
		n, err := l.admin.WithMinRetention(floor).Prune(ctx, horizon, *batch)
		if errors.Is(err, admin.ErrHorizonTooRecent) {
			return fmt.Errorf("%w: nothing pruned: %s; give an older --before, or a lower --min-retention, or --force", err, pruneRisk)
		}
		fmt.Fprintf(e.stdout, "pruned %d %s settled before %s\n", n, plural(n, "record", "records"), horizon.UTC().Format(time.RFC3339))
		if n > 0 && horizon.After(now.Add(-least)) { // allowed, by --force or --min-retention
			fmt.Fprintf(e.stderr, "%s: warning: pruned with a horizon less than %v ago: %s\n", e.o.name, least, pruneRisk)
		}
		return err
	}
}

// parseBefore reads prune's --before: a time in RFC 3339, or a duration
// before now.
func parseBefore(v string, now time.Time) (time.Time, error) {
	if v == "" {
		return time.Time{}, usagef("prune: --before is required")
	}
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return time.Time{}, usagef("prune: --before %q is neither an RFC 3339 time nor a positive duration", v)
	}
	return now.Add(-d), nil
}
