package verify

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemledger/submissions/internal/figures"
)

// A checker is only worth what it catches. Each variant below breaks the
// ledger the way a plausible bug would; the test copies the repository,
// applies the variant, and runs the linearizability check alone on the copy,
// which must fail with a history that is not linearizable. A variant whose
// code no longer matches fails the test too, so the variants follow the code.

type edit struct {
	file, old, new string
}

var variants = []struct {
	name  string
	check string // the test that must catch it
	edits []edit
}{
	{
		name:  "ClaimCheckRemoved",
		check: "TestLinearizableMemory",
		edits: []edit{{
			file: "claims.go",
			old: `	if holder, ok := c[withdrawalID]; ok {
		return &ConflictError{Holder: holder, Key: key, WithdrawalID: withdrawalID}
	}
`,
			new: "",
		}},
	},
	{
		name:  "KeyReleasedOnFailedSend",
		check: "TestLinearizableMemory",
		edits: []edit{{
			file: "submissions.go",
			old: `	if err != nil {
		t.abandon()
		settled = true
`,
			new: `	if err != nil {
		t.abandon()
		s.backend().release(ctx, key)
		settled = true
`,
		}},
	},
	{
		name:  "ReleaseDuringItsOwnSend",
		check: "TestLinearizableMemory",
		edits: []edit{{
			file: "memstore.go",
			old: `	if release && u.sends > 0 {
		return nil, errSending
	}
`,
			new: "",
		}},
	},
	{
		name:  "ResolveRefusedDuringTheSend",
		check: "TestLinearizableMemory",
		edits: []edit{{
			file: "memstore.go",
			old: `	case !ok || rec.fp != fp:
		return Record[R]{}, false, nil
`,
			new: `	case !ok || rec.fp != fp:
		return Record[R]{}, false, nil
	case rec.sending:
		return rec.snapshot(), false, nil
`,
		}},
	},
	{
		name:  "CheckThenInsertClaim",
		check: "TestLinearizablePostgres",
		edits: []edit{
			{
				file: "pgstore/schema.sql",
				old: `    CONSTRAINT {{key_unique}} UNIQUE (tenant, request_key),
    CONSTRAINT {{withdrawal_unique}} UNIQUE (tenant, withdrawal_id),
`,
				new: "",
			},
			{
				file: "pgstore/ops.go",
				old:  `func (s *Store[R]) claimOnce(`,
				new: `// claimOnce checks, then inserts: two claims can both pass the checks.
func (s *Store[R]) claimOnce(ctx context.Context, key string, fp submissions.Fingerprint, encoded []byte) (submissions.Record[R], bool, error) {
	if rec, ok, err := s.Lookup(ctx, key); err != nil || ok {
		return rec, false, err
	}
	if _, held, err := s.ClaimedBy(ctx, fp.WithdrawalID); err != nil || held {
		if err == nil {
			err = errWithdrawalTaken
		}
		return submissions.Record[R]{}, false, err
	}
	_, err := s.pool.Exec(ctx, "INSERT INTO "+s.names.table+
		" (request_key, withdrawal_id, amount, currency, destination, outcome, settled_at)"+
		" VALUES ($1, $2, $3, $4, $5, $6::bytea, CASE WHEN $6::bytea IS NULL THEN NULL ELSE now() END)",
		key, fp.WithdrawalID, fp.Amount, fp.Currency, fp.Destination, encoded)
	return submissions.Record[R]{Fingerprint: fp}, err == nil, err
}

func (s *Store[R]) claimOnceAtomically(`,
			},
		},
	},
}

func TestBrokenVariantsAreCaught(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skipping the broken variants, which build the repository once each")
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			if v.check == "TestLinearizablePostgres" {
				testPool(t) // skips without a database, fails in CI
			}
			dir := t.TempDir()
			copyTree(t, root, dir)
			for _, e := range v.edits {
				path := filepath.Join(dir, e.file)
				src, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				if bytes.Count(src, []byte(e.old)) != 1 {
					t.Fatalf("%s no longer has exactly one %q: update the variant", e.file, e.old)
				}
				if err := os.WriteFile(path, bytes.Replace(src, []byte(e.old), []byte(e.new), 1), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, "go", "test", "-count=1", "-run", "^"+v.check+"$", ".")
			cmd.Dir = filepath.Join(dir, "verify")
			cmd.WaitDelay = 10 * time.Second // the test binary may outlive go test
			tmp := t.TempDir()               // for the visualization
			cmd.Env = append(os.Environ(),
				"SUBMISSIONS_LIN_SEED=",      // a new seed: any seed must do
				"SUBMISSIONS_LIN_HISTORIES=", // the run CI makes
				"SUBMISSIONS_FIGURES=",       // the variant's figures are not CI's
				"GOFLAGS=", "TMPDIR="+tmp)
			out, err := cmd.CombinedOutput()
			switch {
			case err == nil:
				t.Fatalf("the linearizability check passed on the broken variant:\n%s", out)
			case !strings.Contains(string(out), "is not linearizable"):
				t.Fatalf("the check failed on the broken variant, but not by finding a history that is not linearizable:\n%s", out)
			}
			line, _, _ := strings.Cut(string(out[bytes.Index(out, []byte("history ")):]), "\n")
			line, _, _ = strings.Cut(line, " (SUBMISSIONS_LIN_SEED")
			figures.Add(t, "caught: %s is not linearizable", line)
		})
	}
}

// copyTree copies the repository at root into dir, without its .git.
func copyTree(t *testing.T, root, dir string) {
	t.Helper()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		switch {
		case d.IsDir() && d.Name() == ".git":
			return filepath.SkipDir
		case d.IsDir():
			return os.MkdirAll(filepath.Join(dir, rel), 0o755)
		case !d.Type().IsRegular():
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, rel), src, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}
