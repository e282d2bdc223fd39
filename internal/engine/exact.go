package engine

import (
	"encoding"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
	"unsafe"
)

// An outcome is kept by the memory store as a value and by PostgreSQL as
// its encoding (encoding/json by default): the ledger records only an
// outcome that comes back from encoding/json as it went in, so that every
// store answers with the same value. What would not come back is refused
// before any store sees it: text that is not valid UTF-8 (written as
// U+FFFD), a NaN or an infinity (which JSON cannot write), a field that JSON
// leaves out (unexported, or tagged "-") that is not zero, a value in an
// interface that JSON gives back as another type, a json.Number that is not
// one number (or empty, unless omitted), a map whose keys JSON cannot
// write, and a channel, function or complex number, even nil or zero. A
// type with its own MarshalJSON or MarshalText is taken as it gives itself
// back.

// A check says what in v does not come back from its encoding, as the path
// to it and what it is; "" when all of it does.
type check func(v reflect.Value, depth int) (path, what string)

// A flat is the check of a struct type whose every field to check is text
// or a float at a fixed offset in it (in its own fields, in structs and
// arrays it holds by value): it reads them in place, with no reflection and
// no copy of the outcome.
type flat struct {
	texts, floats32, floats64 []uintptr // offsets
	paths                     map[uintptr]string
}

// flatOf returns t's flat check, or nil when t has a field to check that
// is not at a fixed offset (behind a pointer, in a slice, a map or an
// interface), or one that must be zero: its check is then a check.
func flatOf(t reflect.Type) *flat {
	f := &flat{paths: map[uintptr]string{}}
	if t.Kind() != reflect.Struct || !f.add(t, 0, "") {
		return nil
	}
	return f
}

// add adds the fields of t, at offset off and path in the outcome, and
// reports whether all of them are flat.
func (f *flat) add(t reflect.Type, off uintptr, path string) bool {
	switch {
	case t == numberType:
		return false // its check knows the field's tag
	case marshals(t):
		return true
	}
	switch t.Kind() {
	case reflect.String:
		f.texts = append(f.texts, off)
	case reflect.Float32:
		f.floats32 = append(f.floats32, off)
	case reflect.Float64:
		f.floats64 = append(f.floats64, off)
	case reflect.Struct:
		for i := range t.NumField() {
			sf := t.Field(i)
			if (!sf.IsExported() && !sf.Anonymous) || sf.Tag.Get("json") == "-" {
				return false // must be zero
			}
			if !f.add(sf.Type, off+sf.Offset, path+"."+sf.Name) {
				return false
			}
		}
		return true
	case reflect.Array:
		for i := range t.Len() {
			if !f.add(t.Elem(), off+uintptr(i)*t.Elem().Size(), path+"["+strconv.Itoa(i)+"]") {
				return false
			}
		}
		return true
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return true
	case reflect.Slice:
		return t.Elem().Kind() == reflect.Uint8 && !marshals(t.Elem()) // bytes, written as base64
	default:
		return false
	}
	f.paths[off] = path
	return true
}

// check checks the outcome at p, of the type f was made for.
func (f *flat) check(p unsafe.Pointer) (string, string) {
	for _, off := range f.texts {
		if !utf8.ValidString(*(*string)(unsafe.Add(p, off))) {
			return f.paths[off], "holds text that is not valid UTF-8"
		}
	}
	for _, off := range f.floats64 {
		if v := *(*float64)(unsafe.Add(p, off)); math.IsNaN(v) || math.IsInf(v, 0) {
			return f.paths[off], fmt.Sprintf("is %v, which JSON cannot write", v)
		}
	}
	for _, off := range f.floats32 {
		if v := float64(*(*float32)(unsafe.Add(p, off))); math.IsNaN(v) || math.IsInf(v, 0) {
			return f.paths[off], fmt.Sprintf("is %v, which JSON cannot write", v)
		}
	}
	return "", ""
}

// checks are the checks made so far, by type (a type that needs none has a
// nil one); building is the lock of their making.
var (
	checks   sync.Map // reflect.Type -> check
	building sync.Mutex
)

// exactly returns nil when outcome comes back from its encoding as it went
// in, and otherwise an error saying where it does not.
func exactly[R any](outcome R) error {
	c := outcomeCheckOf(reflect.TypeFor[R]())
	return exactlyBy(&c, &outcome)
}

// An outcomeCheck is the check of one outcome type: flat when it has one,
// the check otherwise.
type outcomeCheck struct {
	flat  *flat
	check check
}

// outcomeCheckOf returns the check of outcomes of type t. An outcome type
// that is an interface is decoded into the value it holds, which is
// checked as its own type.
func outcomeCheckOf(t reflect.Type) outcomeCheck {
	if f := flatOf(t); f != nil {
		return outcomeCheck{flat: f}
	}
	if t.Kind() != reflect.Interface {
		return outcomeCheck{check: checkOf(t)}
	}
	return outcomeCheck{check: func(v reflect.Value, depth int) (string, string) {
		if v.IsNil() {
			return "", ""
		}
		if c := checkOf(v.Elem().Type()); c != nil {
			return c(v.Elem(), depth)
		}
		return "", ""
	}}
}

// exactlyBy is exactly by c, the check of R.
func exactlyBy[R any](c *outcomeCheck, outcome *R) error {
	var path, what string
	switch {
	case c.flat != nil:
		path, what = c.flat.check(unsafe.Pointer(outcome))
	case c.check != nil:
		path, what = reflected(c.check, *outcome)
	}
	switch {
	case what == "":
		return nil
	case path == "", what == tooDeep: // a path 1000 deep says nothing more
		return fmt.Errorf("the outcome %s", what)
	}
	return fmt.Errorf("the outcome's %s %s", strings.TrimPrefix(path, "."), what)
}

// reflected runs check on a copy of outcome, so that only an outcome that
// is not flat is copied to the heap for reflection.
func reflected[R any](check check, outcome R) (string, string) {
	return check(reflect.ValueOf(&outcome).Elem(), 0)
}

// checkOf returns t's check, nil when t needs none.
func checkOf(t reflect.Type) check {
	if c, ok := checks.Load(t); ok {
		return c.(check)
	}
	building.Lock()
	defer building.Unlock()
	return checkIn(t, map[reflect.Type]*check{})
}

// checkIn returns t's check, made with making, the checks being made by the
// caller: a type that holds itself checks itself through its pointer.
func checkIn(t reflect.Type, making map[reflect.Type]*check) check {
	if c, ok := checks.Load(t); ok {
		return c.(check)
	}
	if c, ok := making[t]; ok {
		return func(v reflect.Value, depth int) (string, string) {
			if *c == nil {
				return "", ""
			}
			return (*c)(v, depth)
		}
	}
	c := new(check)
	making[t] = c
	*c = build(t, making)
	checks.Store(t, *c)
	return *c
}

// maxDepth bounds the pointers, elements and entries a check follows one
// in another, as encoding/json bounds them before it looks for a cycle.
const maxDepth = 1000

// tooDeep is what a check says of a value nested deeper than maxDepth.
const tooDeep = "is nested more than 1000 deep, or holds a cycle"

var (
	jsonMarshaler = reflect.TypeFor[json.Marshaler]()
	textMarshaler = reflect.TypeFor[encoding.TextMarshaler]()
	anySlice      = reflect.TypeFor[[]any]()
	anyMap        = reflect.TypeFor[map[string]any]()
	numberType    = reflect.TypeFor[json.Number]()
)

// marshals reports a type that encodes itself.
func marshals(t reflect.Type) bool {
	p := reflect.PointerTo(t)
	return t.Implements(jsonMarshaler) || t.Implements(textMarshaler) || p.Implements(jsonMarshaler) || p.Implements(textMarshaler)
}

// build makes t's check.
func build(t reflect.Type, making map[reflect.Type]*check) check {
	switch {
	case t == numberType:
		return checkNumber(false)
	case marshals(t):
		return nil // it gives itself back, or not, by its own methods
	}
	switch t.Kind() {
	case reflect.String:
		return func(v reflect.Value, _ int) (string, string) {
			if !utf8.ValidString(v.String()) {
				return "", "holds text that is not valid UTF-8"
			}
			return "", ""
		}
	case reflect.Float32, reflect.Float64:
		return func(v reflect.Value, _ int) (string, string) {
			if f := v.Float(); math.IsNaN(f) || math.IsInf(f, 0) {
				return "", fmt.Sprintf("is %v, which JSON cannot write", f)
			}
			return "", ""
		}
	case reflect.Complex64, reflect.Complex128, reflect.Chan, reflect.Func, reflect.UnsafePointer:
		what := fmt.Sprintf("is a %s, which JSON cannot write", t.Kind())
		return func(reflect.Value, int) (string, string) { return "", what }
	case reflect.Pointer:
		elem := checkIn(t.Elem(), making)
		if elem == nil {
			return nil
		}
		return func(v reflect.Value, depth int) (string, string) {
			switch {
			case v.IsNil():
				return "", ""
			case depth > maxDepth:
				return "", tooDeep
			}
			return elem(v.Elem(), depth+1)
		}
	case reflect.Interface:
		return checkDynamic
	case reflect.Struct:
		return buildStruct(t, making)
	case reflect.Slice, reflect.Array: // of bytes too: written as base64, they need no check
		elem := checkIn(t.Elem(), making)
		if elem == nil {
			return nil
		}
		return func(v reflect.Value, depth int) (string, string) {
			for i := range v.Len() {
				if depth > maxDepth {
					return "", tooDeep
				}
				if path, what := elem(v.Index(i), depth+1); what != "" {
					return "[" + strconv.Itoa(i) + "]" + path, what
				}
			}
			return "", ""
		}
	case reflect.Map:
		switch k := t.Key(); {
		case k.Kind() == reflect.String, k.Kind() >= reflect.Int && k.Kind() <= reflect.Uintptr, marshals(k):
		default:
			what := fmt.Sprintf("is a map with keys of type %s, which JSON cannot write", k)
			return func(reflect.Value, int) (string, string) { return "", what }
		}
		key, elem := checkIn(t.Key(), making), checkIn(t.Elem(), making)
		if key == nil && elem == nil {
			return nil
		}
		return func(v reflect.Value, depth int) (string, string) {
			for it := v.MapRange(); it.Next(); {
				for _, c := range []struct {
					check check
					v     reflect.Value
				}{{key, it.Key()}, {elem, it.Value()}} {
					if c.check == nil {
						continue
					}
					if depth > maxDepth {
						return "", tooDeep
					}
					if path, what := c.check(c.v, depth+1); what != "" {
						return fmt.Sprintf("[%q]", fmt.Sprint(it.Key())) + path, what
					}
				}
			}
			return "", ""
		}
	}
	return nil // bool and integers come back as they went
}

// buildStruct makes the check of a struct type t: each field that JSON
// writes is checked, and each that it leaves out must be zero.
func buildStruct(t reflect.Type, making map[reflect.Type]*check) check {
	type field struct {
		index int
		name  string
		check check // nil for one left out
	}
	var fields []field
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		switch {
		case (!f.IsExported() && !f.Anonymous) || tag == "-":
			fields = append(fields, field{i, f.Name, nil})
		case f.Type == numberType:
			omitEmpty := slices.Contains(strings.Split(tag, ",")[1:], "omitempty")
			fields = append(fields, field{i, f.Name, checkNumber(omitEmpty)})
		default:
			if c := checkIn(f.Type, making); c != nil {
				fields = append(fields, field{i, f.Name, c})
			}
		}
	}
	if len(fields) == 0 {
		return nil
	}
	return func(v reflect.Value, depth int) (string, string) {
		for _, f := range fields {
			fv := v.Field(f.index)
			if f.check == nil {
				if !fv.IsZero() {
					return "." + f.name, "is not zero, and JSON leaves it out"
				}
				continue
			}
			if path, what := f.check(fv, depth); what != "" {
				return "." + f.name + path, what
			}
		}
		return "", ""
	}
}

// checkNumber returns the check of a json.Number, which JSON writes as a
// number: it must be one, as JSON reads it; an empty one comes back as 0,
// unless it is left out (omitted, when omitEmpty).
func checkNumber(omitEmpty bool) check {
	return func(v reflect.Value, _ int) (string, string) {
		n := v.String()
		switch {
		case n == "" && omitEmpty:
		case n == "":
			return "", "is an empty json.Number, which comes back as 0"
		case !validNumber(n):
			return "", fmt.Sprintf("is json.Number %q, which JSON cannot write", n)
		}
		return "", ""
	}
}

// validNumber reports whether n is a JSON number, as encoding/json writes a
// json.Number: read back, it is n, with nothing around it (not a string
// that holds one, nor null).
func validNumber(n string) bool {
	var f json.Number
	return json.Unmarshal([]byte(n), &f) == nil && f.String() == n
}

// checkDynamic checks the value in an interface: JSON gives back text,
// numbers as float64, true and false, []any and map[string]any.
func checkDynamic(v reflect.Value, depth int) (string, string) {
	if v.IsNil() {
		return "", ""
	}
	e := v.Elem()
	switch t := e.Type(); t {
	case reflect.TypeFor[string](), reflect.TypeFor[float64](), reflect.TypeFor[bool](), anySlice, anyMap:
		if c := checkOf(t); c != nil {
			return c(e, depth)
		}
		return "", ""
	default:
		return "", fmt.Sprintf("holds a %s, which JSON gives back as another type", t)
	}
}
