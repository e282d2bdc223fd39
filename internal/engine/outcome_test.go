package engine

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSameOutcomeReadsEncodingsAsJSONValues: the encodings of two outcomes
// are compared as JSON values, so that what encoding/json writes two ways
// (bytes that are not UTF-8, and U+FFFD itself) is the same; member order
// and numbers as written are kept by encoding/json itself.
func TestSameOutcomeReadsEncodingsAsJSONValues(t *testing.T) {
	type outcome struct {
		Tx   string
		Memo any
	}
	for _, c := range []struct {
		name string
		a, b outcome
		same bool
	}{
		{"equal", outcome{"0xa", 1}, outcome{"0xa", 1}, true},
		{"invalid UTF-8 and its replacement", outcome{"0x\xff", nil}, outcome{"0x\ufffd", nil}, true},
		{"two invalid bytes and one replacement", outcome{"0x\xff\xfe", nil}, outcome{"0x\ufffd", nil}, false},
		{"maps in another order", outcome{"0xa", map[string]int{"a": 1, "b": 2}}, outcome{"0xa", map[string]int{"b": 2, "a": 1}}, true},
		{"another text", outcome{"0xa", nil}, outcome{"0xb", nil}, false},
		{"a number and its text", outcome{"0xa", 1}, outcome{"0xa", "1"}, false},
	} {
		same, err := sameOutcome(c.a, c.b)
		require.NoError(t, err, c.name)
		assert.Equal(t, c.same, same, c.name)
	}
	_, err := sameOutcome(outcome{Memo: make(chan int)}, outcome{})
	require.Error(t, err, "an outcome encoding/json cannot encode")
}
