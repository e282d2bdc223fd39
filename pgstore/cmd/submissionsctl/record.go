package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/idemledger/submissions/driver"
)

// record is an outcome as the table holds it, which this command cannot read
// the service's fields of: its bytes, the service's JSON encoding, and the
// fingerprint of the claim it belongs to.
type record struct {
	fp  driver.Fingerprint
	raw json.RawMessage
}

// Fingerprint returns the fingerprint of the claim the outcome belongs to.
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

// mentions reports whether the JSON value raw holds s as a string anywhere,
// as an object's member or its name.
func mentions(raw []byte, s string) bool {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return false
	}
	var walk func(any) bool
	walk = func(v any) bool {
		switch v := v.(type) {
		case string:
			return v == s
		case []any:
			for _, e := range v {
				if walk(e) {
					return true
				}
			}
		case map[string]any:
			for k, e := range v {
				if k == s || walk(e) {
					return true
				}
			}
		}
		return false
	}
	return walk(v)
}
