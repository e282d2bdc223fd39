package storetest

import (
	"fmt"
	"os"
	"testing"
)

// FiguresVar names a file to which Figure appends; CI prints it at the end of
// a run, and the README quotes it.
const FiguresVar = "SUBMISSIONS_FIGURES"

// Figure logs one line of what a test did (histories checked, faults
// injected), and appends it, after the test's name, to the file FiguresVar
// names, if it names one.
func Figure(t testing.TB, format string, args ...any) {
	t.Helper()
	line := fmt.Sprintf(format, args...)
	t.Log(line)
	path := os.Getenv(FiguresVar)
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
		t.Errorf("%s: %v", FiguresVar, err)
	}
}
