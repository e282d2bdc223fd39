// Package testdb is where every test of the project that needs PostgreSQL
// finds its server: the connection string in URLVar, which scripts/test and
// .ci/run set after starting one.
package testdb

import (
	"os"
	"testing"
)

// URLVar names the environment variable that holds the connection string.
const URLVar = "SUBMISSIONS_TEST_DATABASE_URL"

// URL returns the connection string of the test server. Without one, it
// skips t, saying how to get one, or fails t when CI is "true": there, the
// tests that need PostgreSQL must run.
func URL(t testing.TB) string {
	t.Helper()
	url := os.Getenv(URLVar)
	if url != "" {
		return url
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s is not set, and CI=true: the PostgreSQL tests must run (scripts/test starts a server)", URLVar)
	}
	t.Skipf("%s is not set: skipping a PostgreSQL test (scripts/test starts a local server when it can; scripts/pg prints the URL of one)", URLVar)
	return ""
}
