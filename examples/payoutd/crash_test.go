package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemledger/submissions"
	"github.com/idemledger/submissions/admin"
	"github.com/idemledger/submissions/idemhttp"
)

// railRecord is what a rail's log (-rail-log) says it did, per withdrawal
// id: money movements, sends under a rail key it had a transfer under, and
// the transfer it took.
type railRecord struct {
	moved     map[string]int
	repeats   map[string]int
	transfers map[string]Withdrawal
}

// readRailLog reads the rail's log at path.
func readRailLog(t *testing.T, path string) railRecord {
	t.Helper()
	rec := railRecord{moved: map[string]int{}, repeats: map[string]int{}, transfers: map[string]Withdrawal{}}
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return rec
	}
	require.NoError(t, err)
	for line := range bytes.Lines(data) {
		var e railEntry
		require.NoError(t, json.Unmarshal(line, &e), "%s", line)
		id := e.Withdrawal.ID
		switch e.Result {
		case railMoved:
			rec.moved[id]++
			rec.transfers[id] = e.Withdrawal
		case railDeclined:
			rec.transfers[id] = e.Withdrawal
		case railRepeat:
			rec.repeats[id]++
		}
	}
	return rec
}

// TestCrashAtEachStep kills payoutd (SIGKILL, PAYOUTD_FAULT) at each step of
// a send, on PostgreSQL, with a rail whose record survives the kill
// (-rail-log), and then starts it again on the same database and rail. At
// every point: the withdrawals table and the ledger agree (a withdrawal is
// "sending" exactly while the ledger has a claim in flight for it, "sent"
// exactly when the ledger has the outcome), and the rail moved each
// withdrawal at most once. A client's retry of the key then sends only if
// the ledger has no claim, replays an outcome, and otherwise changes
// nothing; an operator closes a claim left in flight from the rail's record
// (resolve if it moved the money, release if not), through the admin API or
// `payoutd ctl`; in the end every withdrawal moved exactly once, and the
// rail was never asked again for a withdrawal whose money moved.
func TestCrashAtEachStep(t *testing.T) {
	bin := buildPayoutd(t)
	for _, c := range []struct {
		step  string
		flags []string // the rail's, in the process killed
		after string   // the key's claim after the kill: "none", "in flight" or "done"
		moved int      // the rail's movements of the withdrawal after the kill
		door  string   // the operator's, for a claim left in flight: "ctl" or "http"
	}{
		{faultClaimed, nil, "none", 0, ""},
		{faultBeforeRail, nil, "in flight", 0, "ctl"},                               // release
		{faultRailMoved, nil, "in flight", 1, "ctl"},                                // resolve
		{faultSettled, nil, "in flight", 1, "http"},                                 // resolve
		{faultBeforeAnswer, nil, "done", 1, ""},                                     // replayed
		{faultReleased, []string{"-rail-unavailable", "1"}, "in flight", 0, "http"}, // release
	} {
		t.Run(c.step, func(t *testing.T) {
			t.Parallel()
			db := testDatabase(t)
			pool := testPool(t, db)
			railLog := filepath.Join(t.TempDir(), "rail.log")
			args := []string{"-addr", "127.0.0.1:0", "-database-url", db, "-rail-log", railLog}

			// A withdrawal sent, and the one the crash hits, created.
			o := launch(t, bin, args...)
			o.ready(t)
			a := &api{url: o.url}
			before := create(t, a, "")
			res := do(t, "POST", a.url+"/withdrawals/"+before+"/submit", "-", "pay-0", "")
			require.Equal(t, http.StatusCreated, res.status, "%s", res.body)
			res = do(t, "POST", a.url+"/withdrawals", "-", "create-1", createBody)
			require.Equal(t, http.StatusCreated, res.status, "%s", res.body)
			id := res.withdrawal(t).ID
			o.stop(t)

			p := launchWith(t, []string{faultEnv + "=" + c.step}, bin, append(args, c.flags...)...)
			p.ready(t)
			a = &api{url: p.url}
			res, err := request(nil, "POST", a.url+"/withdrawals/"+id+"/submit", "-", "pay-1", "")
			require.Error(t, err, "the process kills itself before it answers; it answered %d %s", res.status, res.body)
			p.killed(t)
			require.Contains(t, p.stderr.String(), "payoutd: "+faultEnv+"="+c.step+": killed here\n", "killed at its step")

			// What the kill left, before anyone acts.
			states := agreeAll(t, pool, "")
			state := map[string]string{"none": stateApproved, "in flight": stateSending, "done": stateSent}[c.after]
			assert.Equal(t, state, states[id], "the withdrawal")
			assert.Equal(t, stateSent, states[before], "the withdrawal sent before")
			rail := readRailLog(t, railLog)
			assert.Equal(t, c.moved, rail.moved[id], "the rail's movements of the withdrawal")

			q := launch(t, bin, args...)
			q.ready(t)
			a = &api{url: q.url}
			res = do(t, "POST", a.url+"/withdrawals", "-", "create-1", createBody)
			require.Equal(t, http.StatusCreated, res.status, "%s", res.body)
			assert.Equal(t, id, res.withdrawal(t).ID, "the create's key replays its withdrawal")
			assert.Equal(t, "true", res.header.Get(idemhttp.ReplayedHeader))

			res = do(t, "POST", a.url+"/withdrawals/"+id+"/submit", "-", "pay-1", "")
			switch c.after {
			case "none": // nothing was claimed: the retry sends
				require.Equal(t, http.StatusCreated, res.status, "%s", res.body)
				assert.Empty(t, res.header.Values(idemhttp.ReplayedHeader))
			case "done": // the outcome committed: the retry replays it
				require.Equal(t, http.StatusCreated, res.status, "%s", res.body)
				assert.Equal(t, "true", res.header.Get(idemhttp.ReplayedHeader))
			case "in flight": // nothing changes until an operator acts
				res.problemOf(t, http.StatusConflict, idemhttp.TypeKeyInFlight)
				assert.Equal(t, stateInFlight, do(t, "GET", a.url+"/withdrawals/"+id, "-", "-", "").withdrawal(t).State)
				claims := inFlight(t, a, "")
				require.Len(t, claims, 1)
				assert.Equal(t, admin.SendUnknown, claims[0].Send, "the process that ran it is gone: not known to have ended")
				assert.Equal(t, stateSending, agree(t, pool, "", id))
				assert.Equal(t, c.moved, readRailLog(t, railLog).moved[id], "the retry moved nothing")

				viaCtl := c.door == "ctl"
				transfer, moved := readRailLog(t, railLog).transfers[id]
				switch {
				case moved && viaCtl:
					body, err := json.Marshal(transfer)
					require.NoError(t, err)
					file := filepath.Join(t.TempDir(), "outcome.json")
					require.NoError(t, os.WriteFile(file, body, 0o600))
					out, err := exec.Command(bin, "ctl", "--database-url", db, "resolve", "pay-1", "--outcome-file", file, "--force").CombinedOutput()
					require.NoError(t, err, "payoutd ctl resolve: %s", out)
				case moved:
					body, err := json.Marshal(transfer)
					require.NoError(t, err)
					res := do(t, "POST", a.url+"/admin/claims/pay-1/resolve?force=true", "-", "-", string(body))
					require.Equal(t, http.StatusOK, res.status, "%s", res.body)
				case viaCtl:
					out, err := exec.Command(bin, "ctl", "--database-url", db, "release", "pay-1", "--yes", "--force").CombinedOutput()
					require.NoError(t, err, "payoutd ctl release: %s", out)
				default:
					res := do(t, "POST", a.url+"/admin/claims/pay-1/release?force=true", "-", "-", "")
					require.Equal(t, http.StatusOK, res.status, "%s", res.body)
				}
				want := stateApproved
				if moved {
					want = stateSent
				}
				assert.Equal(t, want, agree(t, pool, "", id), "the operator's action moved the state with the claim")

				res = do(t, "POST", a.url+"/withdrawals/"+id+"/submit", "-", "pay-1", "")
				require.Equal(t, http.StatusCreated, res.status, "%s", res.body)
				assert.Equal(t, moved, res.header.Get(idemhttp.ReplayedHeader) == "true", "a resolved key replays; a released one sends")
			}

			// In the end: sent once, and everything agrees.
			states = agreeAll(t, pool, "")
			rail = readRailLog(t, railLog)
			for wid := range states {
				assert.Equal(t, stateSent, states[wid], "withdrawal %s", wid)
				assert.Equal(t, 1, rail.moved[wid], "the rail moved withdrawal %s once", wid)
				assert.Zero(t, rail.repeats[wid], "the rail was not asked again for withdrawal %s", wid)
				got := do(t, "GET", a.url+"/withdrawals/"+wid, "-", "-", "").withdrawal(t)
				assert.Equal(t, stateSent, got.State)
				assert.Equal(t, rail.transfers[wid].Tx, got.Tx, "withdrawal %s: the rail's transfer", wid)
			}
			assert.Len(t, rail.moved, len(states), "no other movement")
			assert.Equal(t, rail.moved, railSends(t, a.url), "GET /rail/sends: the rail's whole record")
			assert.Empty(t, inFlight(t, a, ""))
			q.stop(t)
		})
	}
}

// The rail's log survives a crash that cuts its last line short: the rail
// drops that line (a transfer it never took) and goes on after it.
func TestRailLogTornLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rail.log")
	r := newRail(0, 0, 0, 0, 0)
	require.NoError(t, r.openLog(path))
	w := Withdrawal{ID: "wd_1", Amount: "1", Currency: "EUR", Destination: "x"}
	sent, err := sendVia(r, w)
	require.NoError(t, err)
	require.NoError(t, r.closeLog())
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteString(`{"rail_key":"k2","result":"mo`)
	require.NoError(t, err)
	require.NoError(t, f.Close())

	again := newRail(0, 0, 0, 0, 0)
	require.NoError(t, again.openLog(path))
	t.Cleanup(func() { _ = again.closeLog() })
	assert.Equal(t, map[string]int{"wd_1": 1}, again.Sends(), "read back")
	repeat, err := sendVia(again, w)
	require.NoError(t, err)
	assert.Equal(t, sent, repeat, "the first transfer, deduplicated across processes")
	_, err = sendVia(again, Withdrawal{ID: "wd_2", Amount: "1", Currency: "EUR", Destination: "x"})
	require.NoError(t, err)
	rec := readRailLog(t, path)
	assert.Equal(t, map[string]int{"wd_1": 1, "wd_2": 1}, rec.moved)
	assert.Equal(t, map[string]int{"wd_1": 1}, rec.repeats)
}

// sendVia sends w to r through a ledger of its own, which gives the send
// w's rail key.
func sendVia(r *rail, w Withdrawal) (Withdrawal, error) {
	return submissions.New[Withdrawal](submissions.WithLogger(slog.New(slog.DiscardHandler))).Submit(context.Background(), "k", w, r.Send)
}
