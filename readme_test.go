package submissions_test

import (
	"bytes"
	"context"
	"go/format"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReadmeInstallAndQuickStart follows README.md as a new user would: in
// an empty folder beside a copy of this module (the clone the README asks
// for, named submissions), it runs the install steps of the README's first sh
// block, one by one, saving the quick start's go block as main.go where the
// steps say so, and checks that the program prints the text block that
// follows it. Only the root module is copied: the nested modules (pgstore,
// verify, the examples with a go.mod of their own) are not needed.
func TestReadmeInstallAndQuickStart(t *testing.T) {
	if testing.Short() {
		t.Skip("readme: skipped with -short: the README's install steps run go mod tidy and go run in a temporary folder")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("readme: the go command is not on PATH, so the README's install steps cannot run: %v", err)
	}
	t.Parallel()

	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	install := readmeSection(t, string(readme), "## Install")
	steps := codeBlock(t, install, "sh")
	quick := readmeSection(t, string(readme), "## Quick start")
	program := codeBlock(t, quick, "go")
	want := codeBlock(t, quick, "text")

	require.True(t, strings.HasPrefix(program, "package main\n"), "the quick start is a whole program: it starts with package main")
	formatted, err := format.Source([]byte(program))
	require.NoError(t, err, "the quick start parses as Go")
	assert.Equal(t, string(formatted), program, "the quick start is gofmt-formatted")

	dir := t.TempDir()
	copyRootModule(t, ".", filepath.Join(dir, "submissions"))

	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	got := followSteps(ctx, t, goBin, readmeEnv(ctx, t, goBin), dir, steps, program)
	assert.Equal(t, want, got, "what the quick start prints, as the README shows it")
}

// readmeSection returns the text of readme from the heading line to the
// next heading of the same level.
func readmeSection(t *testing.T, readme, heading string) string {
	t.Helper()
	start := strings.Index(readme, "\n"+heading+"\n")
	require.GreaterOrEqual(t, start, 0, "README.md has no %q section", heading)
	section := readme[start+1:]
	if end := strings.Index(section[len(heading):], "\n## "); end >= 0 {
		section = section[:len(heading)+end+1]
	}
	return section
}

// codeBlock returns the content of the first ```lang block of section,
// ending with a newline.
func codeBlock(t *testing.T, section, lang string) string {
	t.Helper()
	fence := "\n```" + lang + "\n"
	start := strings.Index(section, fence)
	require.GreaterOrEqual(t, start, 0, "no ```%s block in:\n%s", lang, section)
	body := section[start+len(fence):]
	end := strings.Index(body, "\n```\n")
	require.GreaterOrEqual(t, end, 0, "the ```%s block is not closed", lang)
	return body[:end+1]
}

// copyRootModule copies the files of the module in src to dst: every
// regular file, but not the directories of nested modules (those with a
// go.mod of their own) nor hidden ones (.git, .ci).
func copyRootModule(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			if rel != "." {
				if strings.HasPrefix(d.Name(), ".") {
					return filepath.SkipDir
				}
				if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
					return filepath.SkipDir
				}
			}
			return os.MkdirAll(target, 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		return copyFile(path, target)
	})
	require.NoError(t, err, "copying the module beside the user's folder")
	require.FileExists(t, filepath.Join(dst, "go.mod"))
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// readmeEnv is the environment of the steps: this one, with the module
// cache, path and proxy this go command uses, GOWORK=off (the steps run
// outside the repository, and no workspace may help them), and -mod=mod so
// that go mod tidy may write go.mod and go.sum whatever GOFLAGS said.
func readmeEnv(ctx context.Context, t *testing.T, goBin string) []string {
	t.Helper()
	out, err := exec.CommandContext(ctx, goBin, "env", "GOPATH", "GOMODCACHE", "GOPROXY", "GOFLAGS").Output()
	require.NoError(t, err, "go env")
	vals := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	require.Len(t, vals, 4, "go env printed %q", out)
	var flags []string
	for _, f := range strings.Fields(vals[3]) {
		if !strings.HasPrefix(f, "-mod=") {
			flags = append(flags, f)
		}
	}
	flags = append(flags, "-mod=mod")

	var env []string
	for _, kv := range os.Environ() {
		switch name, _, _ := strings.Cut(kv, "="); name {
		case "GOPATH", "GOMODCACHE", "GOPROXY", "GOFLAGS", "GOWORK":
		default:
			env = append(env, kv)
		}
	}
	return append(env, "GOPATH="+vals[0], "GOMODCACHE="+vals[1], "GOPROXY="+vals[2],
		"GOFLAGS="+strings.Join(flags, " "), "GOWORK=off")
}

// followSteps runs the README's install steps in dir as a shell would, for
// the few commands they may use (mkdir, cd and go; && between them; # for a
// comment), saving program as main.go at the comment that says so, and
// returns the standard output of the step that runs the program (go run).
func followSteps(ctx context.Context, t *testing.T, goBin string, env []string, dir, steps, program string) string {
	t.Helper()
	cwd, saved, ran := dir, false, false
	var printed string
	for _, line := range strings.Split(steps, "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "#") {
			if strings.Contains(line, "main.go") {
				require.NoError(t, os.WriteFile(filepath.Join(cwd, "main.go"), []byte(program), 0o644))
				saved = true
			}
			continue
		}
		if i := strings.Index(line, " #"); i >= 0 {
			line = strings.TrimSpace(line[:i])
		}
		if line == "" {
			continue
		}
		for _, command := range strings.Split(line, "&&") {
			args := strings.Fields(command)
			require.NotEmpty(t, args, "an empty command in %q", line)
			require.False(t, strings.ContainsAny(command, `'"$|;<>`+"`"), "the test follows plain commands only, not %q", command)
			switch args[0] {
			case "mkdir":
				require.Len(t, args, 2, "mkdir of one folder: %q", command)
				require.NoError(t, os.Mkdir(filepath.Join(cwd, args[1]), 0o755), "step %q", command)
			case "cd":
				require.Len(t, args, 2, "cd to one folder: %q", command)
				cwd = filepath.Join(cwd, args[1])
				require.DirExists(t, cwd, "step %q", command)
			case "go":
				if len(args) > 1 && args[1] == "run" {
					require.True(t, saved, "the steps run the program before saving the quick start as main.go")
					ran = true
				}
				var stdout, stderr bytes.Buffer
				cmd := exec.CommandContext(ctx, goBin, args[1:]...)
				cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = cwd, env, &stdout, &stderr
				require.NoError(t, cmd.Run(), "step %q in %s failed:\n%s%s", command, cwd, stdout.String(), stderr.String())
				t.Logf("%s: %s", command, strings.TrimSpace(stderr.String()))
				if ran && args[1] == "run" {
					printed = stdout.String()
				}
			default:
				t.Fatalf("the README's install steps use %q; this test follows only mkdir, cd and go", args[0])
			}
		}
	}
	require.True(t, saved, "the install steps never say to save the quick start as main.go")
	require.True(t, ran, "the install steps never run the program (go run)")
	return printed
}
