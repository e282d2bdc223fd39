package idemhttp

import (
	"errors"
	"net/http"
	"strings"

	"github.com/idemledger/submissions"
	"github.com/idemledger/submissions/driver"
)

// The header fields of the Idempotency-Key protocol.
const (
	KeyHeader      = "Idempotency-Key"     // the request key, sent by the client
	ReplayedHeader = "Idempotent-Replayed" // "true" on a replayed response
)

// MaxFieldLen is the longest Idempotency-Key field value Key reads, in bytes
// as received: room for a key of driver.MaxKeyLen bytes with every byte
// escaped, its quotes and white space around it.
const MaxFieldLen = 2*driver.MaxKeyLen + 64

// The errors of Key, one for each way an Idempotency-Key field is wrong. Each
// wraps submissions.ErrInvalidKey; ErrKeyMalformed is wrapped again with
// what is wrong.
var (
	ErrKeyMissing   = keyError("Idempotency-Key is missing")
	ErrKeyRepeated  = keyError("Idempotency-Key is repeated")
	ErrKeyList      = keyError("Idempotency-Key is a list")
	ErrKeyEmpty     = keyError("Idempotency-Key is empty")
	ErrKeyTooLong   = keyError("Idempotency-Key is too long")
	ErrKeyMalformed = keyError("Idempotency-Key is malformed")
)

// keyErr is an error of Key: a message of its own that a client may read,
// and submissions.ErrInvalidKey behind it.
type keyErr struct {
	msg    string
	parent error // ErrKeyMalformed for a malformed field's reason
}

func keyError(msg string) error { return &keyErr{msg, submissions.ErrInvalidKey} }

func (e *keyErr) Error() string { return e.msg }
func (e *keyErr) Unwrap() error { return e.parent }

// malformed is ErrKeyMalformed with what is wrong.
func malformed(what string) error {
	return &keyErr{ErrKeyMalformed.Error() + ": " + what, ErrKeyMalformed}
}

// Key returns the request key in h's Idempotency-Key field: the contents of
// an sf-string, or a bare token taken as it is, without surrounding spaces.
// Errors wrap submissions.ErrInvalidKey, through one of the ErrKey errors.
func Key(h http.Header) (string, error) {
	values := h.Values(KeyHeader)
	switch {
	case len(values) == 0:
		return "", ErrKeyMissing
	case len(values) > 1:
		return "", ErrKeyRepeated
	case len(values[0]) > MaxFieldLen:
		return "", ErrKeyTooLong
	}
	v := strings.Trim(values[0], " \t")
	if v == "" {
		return "", ErrKeyEmpty
	}
	if hasComma(v) {
		return "", ErrKeyList
	}
	var key string
	var err error
	if v[0] == '"' {
		key, err = parseString(v)
	} else {
		key, err = parseBare(v)
	}
	if err != nil {
		return "", err
	}
	key = strings.Trim(key, " ") // as the ledger trims it
	switch {
	case key == "":
		return "", ErrKeyEmpty
	case len(key) > driver.MaxKeyLen:
		return "", ErrKeyTooLong
	}
	return key, nil
}

// hasComma reports whether v has a comma outside an sf-string.
func hasComma(v string) bool {
	quoted := false
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case quoted && c == '\\':
			i++
		case c == '"':
			quoted = !quoted
		case !quoted && c == ',':
			return true
		}
	}
	return false
}

// parseString returns the contents of the sf-string v, which starts with a
// quote and must end with its closing quote.
func parseString(v string) (string, error) {
	var b strings.Builder
	for i := 1; i < len(v); i++ {
		switch c := v[i]; {
		case c == '\\':
			i++
			if i == len(v) {
				return "", malformed("unterminated string")
			}
			if c := v[i]; c != '"' && c != '\\' {
				return "", malformed("bad escape")
			}
			b.WriteByte(v[i])
		case c == '"':
			if i != len(v)-1 {
				return "", trailing(v[i+1:])
			}
			return b.String(), nil
		case !visible(c):
			return "", malformed("invalid character")
		default:
			b.WriteByte(c)
		}
	}
	return "", malformed("unterminated string")
}

// parseBare returns v if it is a run of tchar, ":" and "/".
func parseBare(v string) (string, error) {
	for i := 0; i < len(v); i++ {
		if !bareChar(v[i]) {
			if !visible(v[i]) {
				return "", malformed("invalid character")
			}
			return "", trailing(v[i:])
		}
	}
	return v, nil
}

// trailing is the error of text after a key.
func trailing(rest string) error {
	if strings.TrimLeft(rest, " \t")[0] == ';' {
		return malformed("parameters are not accepted")
	}
	return malformed("text after the key")
}

// visible reports whether c is a visible ASCII character or a space, what an
// sf-string may hold.
func visible(c byte) bool {
	return ' ' <= c && c <= '~'
}

// bareChar reports whether c may be part of a bare key: an RFC 9110 tchar,
// ":" or "/".
func bareChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~:/", c) >= 0
}

// keyMessage returns the message of the error of Key that err is or wraps.
func keyMessage(err error) (string, bool) {
	if ke, ok := errors.AsType[*keyErr](err); ok {
		return ke.msg, true
	}
	return "", false
}
