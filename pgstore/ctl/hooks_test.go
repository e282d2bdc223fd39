package ctl

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemledger/submissions/driver"
	"github.com/idemledger/submissions/pgstore"
)

// hookEvent is one run of a hook, as the hooks of TestHooks write it in
// their transaction.
type hookEvent struct {
	Hook, Tenant, Key, WithdrawalID string
	Done, Abandoned                 bool
	Token                           uint64
	Outcome                         []byte
}

// TestHooks: with WithHooks, a resolve and a release run the service's
// hooks in the transaction of their change, each with the record and its
// outcome as the JSON the table holds: a hook's write commits with the
// change, and a hook that fails rolls the change back (exit 4), its own
// write with it. Without the option no hook runs.
func TestHooks(t *testing.T) {
	f := setup(t)
	events := f.table + "_events"
	_, err := f.pool.Exec(context.Background(), `CREATE TABLE `+events+` (
    seq bigint GENERATED ALWAYS AS IDENTITY, hook text, tenant text, key text, withdrawal_id text,
    done bool, abandoned bool, token bigint, outcome bytea)`)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = f.pool.Exec(context.Background(), "DROP TABLE IF EXISTS "+events) })

	var refuse atomic.Bool
	record := func(name string) func(context.Context, pgx.Tx, string, string, driver.Record[json.RawMessage]) error {
		return func(ctx context.Context, tx pgx.Tx, tenant, key string, rec driver.Record[json.RawMessage]) error {
			_, err := tx.Exec(ctx, `INSERT INTO `+events+` (hook, tenant, key, withdrawal_id, done, abandoned, token, outcome)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`, name, tenant, key, rec.Fingerprint.WithdrawalID, rec.Done, rec.Abandoned, int64(rec.Token), []byte(rec.Outcome))
			if err != nil {
				return err
			}
			if refuse.Load() {
				return errors.New("the service refuses")
			}
			return nil
		}
	}
	hooks := pgstore.Hooks[json.RawMessage]{Claimed: record("claimed"), Settled: record("settled"), Released: record("released")}
	hooked := func(t *testing.T, stdin string, args ...string) (int, string, string) {
		t.Helper()
		var stdout, stderr bytes.Buffer
		args = append([]string{"--database-url", f.url, "--table", f.table}, args...)
		code := Run(context.Background(), args, strings.NewReader(stdin), &stdout, &stderr, WithHooks(hooks))
		return code, stdout.String(), stderr.String()
	}
	read := func(t *testing.T) []hookEvent {
		t.Helper()
		rows, err := f.pool.Query(context.Background(), `SELECT hook, tenant, key, withdrawal_id, done, abandoned, token, outcome FROM `+events+` ORDER BY seq`)
		require.NoError(t, err)
		got, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (hookEvent, error) {
			var e hookEvent
			var token int64
			err := row.Scan(&e.Hook, &e.Tenant, &e.Key, &e.WithdrawalID, &e.Done, &e.Abandoned, &token, &e.Outcome)
			e.Token = uint64(token)
			return e, err
		})
		require.NoError(t, err)
		_, err = f.pool.Exec(context.Background(), "TRUNCATE "+events)
		require.NoError(t, err)
		return got
	}

	t.Run("resolve", func(t *testing.T) {
		p := f.leaveInFlight(t, "acme", "k1", newPayout(randomID()))
		token := f.token(t, "acme", "k1")
		sent := p
		sent.State, sent.Tx = "sent", "tx_1"
		file := writeOutcome(t, sent)
		raw, err := os.ReadFile(file)
		require.NoError(t, err)
		code, _, stderr := hooked(t, "", "--tenant", "acme", "resolve", "k1", "--outcome-file", file)
		require.Equal(t, exitOK, code, stderr)
		assert.Equal(t, []hookEvent{{Hook: "settled", Tenant: "acme", Key: "k1", WithdrawalID: p.ID, Done: true, Token: token, Outcome: raw}},
			read(t), "the outcome, byte for byte as the file holds it")

		code, stdout, stderr := hooked(t, "", "--tenant", "acme", "resolve", "k1", "--outcome-file", file)
		require.Equal(t, exitOK, code, stderr)
		assert.Contains(t, stdout, "already has this outcome")
		assert.Empty(t, read(t), "nothing changed, no hook")
	})

	t.Run("release", func(t *testing.T) {
		p := f.leaveInFlight(t, "", "k2", newPayout(randomID()))
		token := f.token(t, "", "k2")
		code, _, stderr := hooked(t, "", "release", "k2", "--yes")
		require.Equal(t, exitOK, code, stderr)
		assert.Equal(t, []hookEvent{{Hook: "released", Key: "k2", WithdrawalID: p.ID, Abandoned: true, Token: token}}, read(t))
	})

	t.Run("a hook that fails rolls the change back", func(t *testing.T) {
		p := f.leaveInFlight(t, "", "k3", newPayout(randomID()))
		refuse.Store(true)
		defer refuse.Store(false)
		sent := p
		sent.State, sent.Tx = "sent", "tx_3"
		for _, args := range [][]string{{"resolve", "k3", "--outcome-file", writeOutcome(t, sent)}, {"release", "k3", "--yes"}} {
			code, _, stderr := hooked(t, "", args...)
			assert.Equal(t, exitFailedAction, code, "%s: %s", args[0], stderr)
			assert.Contains(t, stderr, "the service refuses", args[0])
			assert.Empty(t, read(t), "%s: the hook's write rolled back with the change", args[0])
			code, stdout, stderr := f.ctl(t, "", "show", "k3")
			require.Equal(t, exitOK, code, stderr)
			assert.Regexp(t, `state:\s+in flight\n`, stdout, "%s: nothing changed", args[0])
		}
	})

	t.Run("without the option, none runs", func(t *testing.T) {
		p := f.leaveInFlight(t, "", "k4", newPayout(randomID()))
		sent := p
		sent.State, sent.Tx = "sent", "tx_4"
		code, _, stderr := f.ctl(t, "", "resolve", "k4", "--outcome-file", writeOutcome(t, sent))
		require.Equal(t, exitOK, code, stderr)
		assert.Empty(t, read(t))
	})

	// Last: it marks the table.
	t.Run("a table migrated with hooks refuses a command without them", func(t *testing.T) {
		named := hooks
		named.Command = "payoutd ctl"
		var stdout, stderr bytes.Buffer
		args := []string{"--database-url", f.url, "--table", f.table, "migrate"}
		require.Equal(t, exitOK, Run(context.Background(), args, strings.NewReader(""), &stdout, &stderr, WithHooks(named)), stderr.String())
		p := f.leaveInFlight(t, "", "k5", newPayout(randomID()))
		sent := p
		sent.State, sent.Tx = "sent", "tx_5"
		for _, args := range [][]string{{"resolve", "k5", "--outcome-file", writeOutcome(t, sent)}, {"release", "k5", "--yes"}} {
			code, _, stderr := f.ctl(t, "", args...)
			assert.Equal(t, exitFailed, code, "%s: %s", args[0], stderr)
			assert.Contains(t, stderr, "is changed with a service's hooks, which this command does not run", args[0])
			assert.Contains(t, stderr, "run payoutd ctl instead (nothing changed)", args[0])
			code, stdout, stderr := f.ctl(t, "", "show", "k5")
			require.Equal(t, exitOK, code, stderr)
			assert.Regexp(t, `state:\s+in flight\n`, stdout, "%s: nothing changed", args[0])
		}
		assert.Empty(t, read(t), "no hook ran")

		stdout.Reset()
		stderr.Reset()
		args = []string{"--database-url", f.url, "--table", f.table, "release", "k5", "--yes"}
		require.Equal(t, exitOK, Run(context.Background(), args, strings.NewReader(""), &stdout, &stderr, WithHooks(named)), stderr.String())
		assert.Len(t, read(t), 1, "the command with the hooks ran them")
	})
}
