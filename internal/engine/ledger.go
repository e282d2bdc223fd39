// Package engine is the one ledger behind package submissions' service door
// and package admin's operator door: every operation is defined here once,
// over any driver.Store, and errors reach the doors in their public form.
package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"time"

	"github.com/idemledger/submissions/driver"
	"github.com/idemledger/submissions/internal/valid"
	"github.com/idemledger/submissions/observe"
)

// Ledger runs a Store: the policy of every call, the sends' bookkeeping
// (the Store's own when it is a driver.Tracker, the adapter's otherwise),
// the observer and the log. It is safe for concurrent use.
type Ledger[R driver.Fingerprinter] struct {
	store    driver.Store[R]
	tracker  driver.Tracker[R]
	replayer driver.Replayer[R] // nil when the Store is not one
	log      *slog.Logger       // nil means slog.Default()
	observer observe.Observer   // nil for none
	nilable  bool               // R is a type with a nil value, such as a pointer
	exact    outcomeCheck       // R's check that an outcome comes back as it went in (see exactly), nil for none
	check    func(R) error      // the service's rule for an outcome recorded by hand; nil for none
}

// SetCheck sets the service's rule for an outcome recorded by hand, which
// every Admin of l applies; it is called once, before l is used.
func (l *Ledger[R]) SetCheck(check func(R) error) { l.check = check }

// New returns a ledger on store that logs to log (nil for slog.Default())
// and tells observer (nil for none) of its decisions.
func New[R driver.Fingerprinter](store driver.Store[R], log *slog.Logger, observer observe.Observer) *Ledger[R] {
	l := &Ledger[R]{store: store, log: log, observer: observer, nilable: nilable[R](), exact: outcomeCheckOf(reflect.TypeFor[R]())}
	if t, ok := store.(driver.Tracker[R]); ok {
		l.tracker = t
	} else {
		l.tracker = track(store)
	}
	l.replayer, _ = store.(driver.Replayer[R])
	return l
}

// ValidateTenant returns nil if id is a valid tenant id ("" included), and
// otherwise an error wrapping ErrInvalidTenant.
func ValidateTenant(id string) error {
	if id != "" && !valid.Text(id, driver.MaxTenantLen) {
		return fmt.Errorf("%w: %s", ErrInvalidTenant, valid.TextProblem(id, driver.MaxTenantLen))
	}
	return nil
}

// ValidateKey returns key trimmed, or an error wrapping ErrInvalidKey when
// it is not a valid request key.
func ValidateKey(key string) (string, error) {
	return validKey(key)
}

// validKey trims key and checks it against the rules of ErrInvalidKey.
func validKey(key string) (string, error) {
	key = valid.Trim(key)
	if !valid.Text(key, driver.MaxKeyLen) {
		return "", fmt.Errorf("%w: %s", ErrInvalidKey, valid.TextProblem(key, driver.MaxKeyLen))
	}
	return key, nil
}

// begin checks a call's tenant, its key, trimming it, and its ctx, in that
// order: the one place where a call's tenant is checked.
func begin(ctx context.Context, tenant, key string) (string, error) {
	if err := ValidateTenant(tenant); err != nil {
		return "", err
	}
	key, err := validKey(key)
	if err != nil {
		return "", err
	}
	return key, ctx.Err()
}

// fingerprint returns v's fingerprint in canonical form, or the error of a
// nil v or an invalid fingerprint.
func (l *Ledger[R]) fingerprint(v R) (driver.Fingerprint, error) {
	if l.nilable && isNil(v) {
		return driver.Fingerprint{}, errNilRequest(v)
	}
	return v.Fingerprint().Canonical()
}

// Bits of a fingerprint's fields, as Differing returns them.
const (
	WithdrawalIDField = 1 << iota
	AmountField
	CurrencyField
	DestinationField
)

// Differing compares got, as given, with want, a canonical fingerprint,
// field by field, and returns the fields that differ as bits, 0 for none: a
// field of got that is not valid differs. It allocates nothing.
func Differing(want, got *driver.Fingerprint) (fields int) {
	if got.WithdrawalID != want.WithdrawalID {
		fields |= WithdrawalIDField
	}
	if got.Amount != want.Amount { // a canonical amount is its own canonical form
		if a, ok := valid.Amount(got.Amount); !ok || a != want.Amount {
			fields |= AmountField
		}
	}
	if !valid.SameCurrency(want.Currency, got.Currency) {
		fields |= CurrencyField
	}
	if got.Destination != want.Destination {
		fields |= DestinationField
	}
	return fields
}

// sameWithdrawal reports whether got, as given, is want's withdrawal (see
// Differing). It takes got as a value, so that a Fingerprint method's
// result goes to it in registers.
func sameWithdrawal(want *driver.Fingerprint, got driver.Fingerprint) bool {
	return Differing(want, &got) == 0
}

// fieldNames names the fields of a Differing result, by their Fingerprint
// names: "Amount, Destination".
func fieldNames(fields int) string {
	var names []string
	for i, name := range []string{"WithdrawalID", "Amount", "Currency", "Destination"} {
		if fields&(1<<i) != 0 {
			names = append(names, name)
		}
	}
	return strings.Join(names, ", ")
}

// logged is the log level and message of each kind of event that a ledger
// logs; the others are not logged.
var logged = [...]struct {
	level slog.Level
	msg   string
}{
	observe.EventReplayed:       {slog.LevelDebug, "submission replayed"},
	observe.EventNotSent:        {slog.LevelInfo, "send moved nothing"},
	observe.EventResolved:       {slog.LevelInfo, "submission resolved"},
	observe.EventReleased:       {slog.LevelInfo, "submission released"},
	observe.EventOutcomeUnknown: {slog.LevelWarn, "outcome unknown"},
}

// report tells the observer of a decision of kind about key and
// withdrawalID, made in tenant, and logs it if its kind is logged: with the
// tenant (unless it is the default), the key, the withdrawal and err if not
// nil. With no observer, it costs one call when the kind is not logged or its
// level is disabled.
func (l *Ledger[R]) report(ctx context.Context, tenant string, kind observe.EventKind, key, withdrawalID string, took time.Duration, err error) {
	if l.observer != nil {
		l.observer.Observe(ctx, observe.Event{Kind: kind, Tenant: tenant, Key: key, WithdrawalID: withdrawalID, Duration: took, Err: err})
	}
	if int(kind) >= len(logged) || logged[kind].msg == "" {
		return
	}
	level := logged[kind].level
	if kind == observe.EventNotSent && errors.Is(err, ErrStoreFailed) { // its claim stands, in flight
		level = slog.LevelWarn
	}
	lg := l.log
	if lg == nil {
		lg = slog.Default()
	}
	if !lg.Enabled(ctx, level) {
		return
	}
	attrs := make([]slog.Attr, 0, 4)
	if tenant != "" {
		attrs = append(attrs, slog.String("tenant", tenant))
	}
	attrs = append(attrs, slog.String("key", key), slog.String("withdrawal", withdrawalID))
	if err != nil {
		attrs = append(attrs, slog.Any("error", err))
	}
	lg.LogAttrs(ctx, level, logged[kind].msg, attrs...)
}

// reportAnswer reports an EventNotRecorded whose error is err, with send's
// answer: to the observer, and to the log at Error with the answer in full
// (its JSON encoding, or its Go syntax when it has none): the rail said that
// money moved, and nothing else keeps its word.
func (l *Ledger[R]) reportAnswer(ctx context.Context, tenant, key, withdrawalID string, took time.Duration, err error, answer R) {
	if l.observer != nil {
		l.observer.Observe(ctx, observe.Event{Kind: observe.EventNotRecorded, Tenant: tenant, Key: key,
			WithdrawalID: withdrawalID, Duration: took, Err: err, Answer: answer})
	}
	level, msg := slog.LevelError, "outcome not recorded: the rail answered"
	if errors.Is(err, ErrResolvedMeanwhile) || errors.Is(err, ErrReleasedMeanwhile) {
		msg = "outcome not recorded: the rail's answer came after the claim was closed"
	}
	lg := l.log
	if lg == nil {
		lg = slog.Default()
	}
	if !lg.Enabled(ctx, level) {
		return
	}
	attrs := make([]slog.Attr, 0, 5)
	if tenant != "" {
		attrs = append(attrs, slog.String("tenant", tenant))
	}
	attrs = append(attrs, slog.String("key", key), slog.String("withdrawal", withdrawalID),
		slog.Any("error", err), slog.String("answer", answerText(answer)))
	lg.LogAttrs(ctx, level, msg, attrs...)
}

// answerText is answer in full for a log: its JSON encoding, or its Go
// syntax when it has none.
func answerText(answer any) string {
	if b, err := json.Marshal(answer); err == nil {
		return string(b)
	}
	return fmt.Sprintf("%#v", answer)
}

// nilable reports whether R has a nil value: it is a pointer, interface,
// map, slice, channel or function type.
func nilable[R any]() bool {
	switch reflect.TypeFor[R]().Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Map, reflect.Slice, reflect.Chan, reflect.Func, reflect.UnsafePointer:
		return true
	}
	return false
}

// isNil reports whether v, of a type R for which nilable is true, is nil, or
// an interface holding a nil pointer, map, slice, channel or function: a
// value whose Fingerprint method may panic, and no outcome.
func isNil[R any](v R) bool {
	if any(v) == nil {
		return true
	}
	switch rv := reflect.ValueOf(any(v)); rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Chan, reflect.Func, reflect.UnsafePointer:
		return rv.IsNil()
	}
	return false
}

// sameOutcome reports whether a and b are the same outcome: their
// encoding/json encodings hold equal JSON values. Each encoding is decoded
// and encoded again, so that what encoding/json writes two ways reads the
// same: object members in any order, and text that held bytes that are not
// UTF-8 (written as \ufffd) or the character U+FFFD itself. Numbers are
// compared as written.
func sameOutcome[R any](a, b R) (bool, error) {
	ca, err := canonicalJSON(a)
	if err != nil {
		return false, err
	}
	cb, err := canonicalJSON(b)
	if err != nil {
		return false, err
	}
	return bytes.Equal(ca, cb), nil
}

func canonicalJSON(v any) ([]byte, error) {
	encoded, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(encoded))
	dec.UseNumber()
	var value any
	if err := dec.Decode(&value); err != nil {
		return nil, err
	}
	return json.Marshal(value)
}

// sameAsRecorded returns nil when outcome is the same as recorded, key's
// outcome, and otherwise the ErrIdempotencyConflict of a Resolve that
// contradicts it.
func sameAsRecorded[R any](key string, recorded, outcome R) error {
	same, err := sameOutcome(recorded, outcome)
	switch {
	case err != nil:
		return fmt.Errorf("%w: request key %s: the outcomes cannot be compared: %w", driver.ErrIdempotencyConflict, key, err)
	case !same:
		return hasOutcome(key, "another outcome")
	}
	return nil
}

// validID reports whether id can be a fingerprint's WithdrawalID.
func validID(id string) bool {
	return valid.Text(id, driver.MaxWithdrawalIDLen)
}
