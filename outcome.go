package submissions

import (
	"bytes"
	"encoding/json"
	"reflect"
)

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
