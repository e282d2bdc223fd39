// Package figures records what the reliability checks did (histories
// checked, faults injected, restarts survived), for CI to print at the end
// of a run. It is plumbing for this repository's tests, not an API.
package figures

import (
	"fmt"
	"os"
	"testing"
)

// Var names the file to which Add appends; CI sets it and prints the file.
const Var = "SUBMISSIONS_FIGURES"

// Add logs one line of what a test did and appends it, after the test's
// name, to the file Var names, if it names one.
func Add(t testing.TB, format string, args ...any) {
	t.Helper()
	line := fmt.Sprintf(format, args...)
	t.Log(line)
	path := os.Getenv(Var)
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err == nil {
		_, err = fmt.Fprintf(f, "%s: %s\n", t.Name(), line)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		t.Errorf("%s: %v", Var, err)
	}
}
