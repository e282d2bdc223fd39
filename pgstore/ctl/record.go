package ctl

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/idemledger/submissions/driver"
	"github.com/idemledger/submissions/pgstore"
)

// record is an outcome as the table holds it, which this command cannot read
// the service's fields of: its bytes, the service's JSON encoding, and its
// fingerprint: the claim's for a stored outcome, the file's own for an
// outcome file.
type record struct {
	fp  driver.Fingerprint
	raw json.RawMessage
}

// Fingerprint returns the outcome's fingerprint.
func (r record) Fingerprint() driver.Fingerprint { return r.fp }

// MarshalJSON returns the outcome's JSON as it is, so that the ledger
// compares outcomes by the JSON the service wrote.
func (r record) MarshalJSON() ([]byte, error) {
	if !json.Valid(r.raw) {
		return nil, errors.New("the stored outcome is not JSON")
	}
	return r.raw, nil
}

// rawCodec is a pgstore.Codec that stores a record's bytes as they are and
// reads them back as they are: what the service's default codec,
// encoding/json, wrote and reads.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) {
	r, ok := v.(record)
	switch {
	case !ok:
		return nil, fmt.Errorf("cannot encode a %T", v)
	case !json.Valid(r.raw):
		return nil, errors.New("the outcome is not JSON")
	}
	return bytes.Clone(r.raw), nil
}

func (rawCodec) Unmarshal(data []byte, v any) error {
	r, ok := v.(*record)
	if !ok {
		return fmt.Errorf("cannot decode into a %T", v)
	}
	r.raw = bytes.Clone(data)
	return nil
}

// fieldNames are the JSON names of the fingerprint's fields in the
// service's outcome, which this command cannot read the type of.
type fieldNames struct {
	id, amount, currency, destination *string
}

// fieldFlags registers the flags that name the fingerprint's fields, with
// the names of payoutd's withdrawal.
func fieldFlags(fs *flag.FlagSet) fieldNames {
	return fieldNames{
		id:          fs.String("id-field", "id", "the outcome's JSON member `name` that holds the withdrawal id"),
		amount:      fs.String("amount-field", "amount", "the outcome's JSON member `name` that holds the amount"),
		currency:    fs.String("currency-field", "currency", "the outcome's JSON member `name` that holds the currency"),
		destination: fs.String("destination-field", "destination", "the outcome's JSON member `name` that holds the destination"),
	}
}

// parse returns the fingerprint of the outcome raw, a JSON object, as it
// holds it, read from the members these names name (matched regardless of
// case, as encoding/json matches them); or an error that names the flag to
// set for a member it cannot find. Whether the outcome is the claim's
// withdrawal is the ledger's to decide.
func (n fieldNames) parse(raw []byte) (driver.Fingerprint, error) {
	var members map[string]json.RawMessage
	if err := json.Unmarshal(raw, &members); err != nil {
		return driver.Fingerprint{}, errors.New("the outcome is not a JSON object")
	}
	var got driver.Fingerprint
	for _, f := range []struct {
		flag, name string
		to         *string
	}{
		{"id-field", *n.id, &got.WithdrawalID},
		{"amount-field", *n.amount, &got.Amount},
		{"currency-field", *n.currency, &got.Currency},
		{"destination-field", *n.destination, &got.Destination},
	} {
		v, err := member(members, f.name)
		if err != nil {
			return driver.Fingerprint{}, fmt.Errorf("%w (--%s names it)", err, f.flag)
		}
		*f.to = v
	}
	return got, nil
}

// member returns the string or number of members named name, matched as
// encoding/json matches a struct's field (regardless of case); more than
// one such member is an error.
func member(members map[string]json.RawMessage, name string) (string, error) {
	var found []string
	for k := range members {
		if strings.EqualFold(k, name) {
			found = append(found, k)
		}
	}
	switch len(found) {
	case 0:
		return "", fmt.Errorf("the outcome has no member %q", name)
	case 1:
	default:
		slices.Sort(found)
		return "", fmt.Errorf("the outcome has %d members named %q regardless of case: %q", len(found), name, found)
	}
	var s string
	if err := json.Unmarshal(members[found[0]], &s); err == nil {
		return s, nil
	}
	var num json.Number
	if err := json.Unmarshal(members[found[0]], &num); err == nil {
		return num.String(), nil
	}
	return "", fmt.Errorf("the outcome's %q is neither a string nor a number", found[0])
}

// rawHooks are h, hooks on outcomes as their JSON (WithHooks), as hooks of
// the command's Store of records: each gets the record with its outcome's
// bytes.
func rawHooks(h pgstore.Hooks[json.RawMessage]) pgstore.Hooks[record] {
	return pgstore.Hooks[record]{Claimed: rawHook(h.Claimed), Settled: rawHook(h.Settled), Released: rawHook(h.Released), Command: h.Command}
}

type hook[R any] func(ctx context.Context, tx pgx.Tx, tenant, key string, rec driver.Record[R]) error

func rawHook(h hook[json.RawMessage]) hook[record] {
	if h == nil {
		return nil
	}
	return func(ctx context.Context, tx pgx.Tx, tenant, key string, rec driver.Record[record]) error {
		var raw json.RawMessage
		if rec.Done && !rec.Pruned {
			raw = bytes.Clone(rec.Outcome.raw)
		}
		var answer *json.RawMessage
		if rec.Answer != nil {
			a := json.RawMessage(bytes.Clone(rec.Answer.raw))
			answer = &a
		}
		return h(ctx, tx, tenant, key, driver.Record[json.RawMessage]{Fingerprint: rec.Fingerprint, Outcome: raw,
			Done: rec.Done, Token: rec.Token, Pruned: rec.Pruned, Abandoned: rec.Abandoned, Answered: rec.Answered, Answer: answer})
	}
}
