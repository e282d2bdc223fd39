package engine

import (
	"encoding/json"
	"math"
	"reflect"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemledger/submissions/driver"
)

type (
	inner struct {
		Note string
		Fee  float64
	}
	hidden struct{ Shown string }
	outer  struct {
		ID     string
		In     inner
		Ptr    *inner
		List   []inner
		Fixed  [2]string
		Tags   map[string]string
		Any    any
		Raw    []byte
		When   time.Time
		Num    json.Number `json:"num,omitempty"`
		Skip   string      `json:"-"`
		hidden             // its exported fields are written
		note   string      // unexported: left out
	}
	node struct {
		Name string
		Next *node
	}
	plain struct {
		N  int
		OK bool
	}
	withFunc   struct{ F func() }
	withNumber struct{ Fee json.Number }
	floatKeys  struct{ M map[float64]string }
	named      string
)

// TestExactly: an outcome is recorded only when it comes back from its
// encoding as it went in; the error names where it does not, and what.
func TestExactly(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		says string
	}{
		{"all of it comes back", exactly(outer{ID: "w-1", In: inner{Note: "ok", Fee: 0.1}, Ptr: &inner{}, Raw: []byte{0xff},
			Any: map[string]any{"a": []any{"b", 1.5, true, nil}}, When: time.Now(), Num: "1.0", hidden: hidden{"x"}}), ""},
		{"text", exactly(outer{ID: "w-\xff"}), "the outcome's ID holds text that is not valid UTF-8"},
		{"nested text", exactly(outer{In: inner{Note: "\xc3"}}), "the outcome's In.Note holds text"},
		{"through a pointer", exactly(outer{Ptr: &inner{Note: "\xff"}}), "the outcome's Ptr.Note holds text"},
		{"in a slice", exactly(outer{List: []inner{{}, {Note: "\xff"}}}), "the outcome's List[1].Note holds text"},
		{"in an array", exactly(outer{Fixed: [2]string{"", "\xff"}}), "the outcome's Fixed[1] holds text"},
		{"a map's value", exactly(outer{Tags: map[string]string{"k": "\xff"}}), `the outcome's Tags["k"] holds text`},
		{"a map's key", exactly(outer{Tags: map[string]string{"\xff": ""}}), `holds text that is not valid UTF-8`},
		{"in an interface", exactly(outer{Any: map[string]any{"a": []any{"\xff"}}}), `the outcome's Any["a"][0] holds text`},
		{"another type in an interface", exactly(outer{Any: 1}), "the outcome's Any holds a int, which JSON gives back as another type"},
		{"a struct in an interface", exactly(outer{Any: inner{}}), "holds a engine.inner"},
		{"NaN", exactly(outer{In: inner{Fee: math.NaN()}}), "the outcome's In.Fee is NaN, which JSON cannot write"},
		{"infinity", exactly(outer{Ptr: &inner{Fee: math.Inf(-1)}}), "the outcome's Ptr.Fee is -Inf"},
		{"float32", exactly(float32(math.Inf(1))), "the outcome is +Inf"},
		{"a field tagged -", exactly(outer{Skip: "x"}), "the outcome's Skip is not zero, and JSON leaves it out"},
		{"an unexported field", exactly(outer{note: "x"}), "the outcome's note is not zero"},
		{"an embedded struct's field", exactly(outer{hidden: hidden{"\xff"}}), "the outcome's hidden.Shown holds text"},
		{"a func, even nil", exactly(withFunc{}), "the outcome's F is a func, which JSON cannot write"},
		{"a named string", exactly(named("\xff")), "the outcome holds text"},
		{"a top-level slice", exactly([]string{"\xff"}), "the outcome's [0] holds text"},
		{"a list", exactly(node{Name: "a", Next: &node{Name: "b", Next: &node{Name: "\xff"}}}), "the outcome's Next.Next.Name holds text"},
		{"nothing to check", exactly(plain{N: 1}), ""},
		{"a number", exactly(withNumber{Fee: "0.10"}), ""},
		{"an empty number, not omitted", exactly(withNumber{}), "the outcome's Fee is an empty json.Number, which comes back as 0"},
		{"an empty number, omitted", exactly(outer{Num: ""}), ""},
		{"not a number", exactly(withNumber{Fee: "0x10"}), `the outcome's Fee is json.Number "0x10", which JSON cannot write`},
		{"two numbers", exactly(json.Number("1 2")), `the outcome is json.Number "1 2"`},
		{"a number with space", exactly(json.Number(" 1")), "which JSON cannot write"},
		{"keys JSON cannot write", exactly(floatKeys{M: map[float64]string{}}), "the outcome's M is a map with keys of type float64, which JSON cannot write"},
		{"integer keys", exactly(map[int]string{1: "a"}), ""},
		{"uintptr keys", exactly(map[uintptr]string{1: "a"}), ""},
		{"a key of a map of numbers", exactly(map[string]int{"\xff": 1}), "holds text that is not valid UTF-8"},
		{"a value in a map with integer keys", exactly(map[int]string{1: "\xff"}), `the outcome's ["1"] holds text`},
		{"a negative number", exactly(json.Number("-1")), ""},
		{"a number of nines", exactly(json.Number("9.99e9")), ""},
		{"a number in quotes", exactly(json.Number(`"1"`)), "which JSON cannot write"},
		{"null", exactly(json.Number("null")), "which JSON cannot write"},
		{"a nil pointer", exactly[*inner](nil), ""},
		{"an outcome type that is an interface", exactly[any](inner{}), ""},
		{"the value it holds", exactly[any](&inner{Note: "\xff"}), "the outcome's Note holds text"},
		{"none", exactly[any](nil), ""},
	} {
		if c.says == "" {
			assert.NoError(t, c.err, c.name)
			continue
		}
		require.Error(t, c.err, c.name)
		assert.Contains(t, c.err.Error(), c.says, c.name)
	}
	// The bound is exact: 1000 pointers, elements or entries one in another
	// are followed, and no more.
	list := func(n int) node { // n nodes after the first
		first := node{Name: "0"}
		for i := range n {
			next := first
			first = node{Name: strconv.Itoa(i + 1), Next: &next}
		}
		return first
	}
	assert.NoError(t, exactly(list(maxDepth+1)))
	assert.ErrorContains(t, exactly(list(maxDepth+2)), tooDeep)
	slices := func(n int) []any { // n slices in the outermost, each holding the next
		s := []any{}
		for range n {
			s = []any{s}
		}
		return s
	}
	assert.NoError(t, exactly(slices(maxDepth+1)))
	assert.ErrorContains(t, exactly(slices(maxDepth+2)), tooDeep)
	maps := func(n int) map[string]any {
		m := map[string]any{}
		for range n {
			m = map[string]any{"m": m}
		}
		return m
	}
	assert.NoError(t, exactly(maps(maxDepth+1)))
	assert.ErrorContains(t, exactly(maps(maxDepth+2)), tooDeep)
	loop := &node{Name: "a"}
	loop.Next = loop
	assert.EqualError(t, exactly(loop), "the outcome is nested more than 1000 deep, or holds a cycle", "without the path")
}

// TestFlatOutcomes: the outcome of a struct of text and numbers at fixed
// offsets is checked in place, with no allocation; any other is checked by
// reflection.
func TestFlatOutcomes(t *testing.T) {
	for _, c := range []struct {
		name string
		t    reflect.Type
		flat bool
	}{
		{"text and numbers", reflect.TypeFor[plain](), true},
		{"text", reflect.TypeFor[inner](), true},
		{"an array, a struct in it, bytes", reflect.TypeFor[struct {
			A   [2]inner
			Raw []byte
			In  inner
		}](), true},
		{"not a struct", reflect.TypeFor[named](), false},
		{"a pointer", reflect.TypeFor[node](), false},
		{"an unexported field", reflect.TypeFor[struct{ a string }](), false},
		{"a field tagged -", reflect.TypeFor[struct {
			A string `json:"-"`
		}](), false},
		{"a number", reflect.TypeFor[withNumber](), false},
	} {
		assert.Equal(t, c.flat, flatOf(c.t) != nil, c.name)
	}
	l := New[flatOutcome](newFlatStore(), nil, nil)
	out := flatOutcome{ID: "w-1", Fee: 0.1, Items: [2]inner{{Note: "a"}, {Note: "b"}}}
	require.NoError(t, l.Exactly(out))
	assert.Zero(t, testing.AllocsPerRun(100, func() { _ = l.Exactly(out) }), "a flat check allocates nothing")
	out.Items[1].Note = "\xff"
	assert.EqualError(t, l.Exactly(out), "the outcome's Items[1].Note holds text that is not valid UTF-8")
	out.Items[1].Note, out.Fee32 = "", float32(math.Inf(1))
	assert.EqualError(t, l.Exactly(out), "the outcome's Fee32 is +Inf, which JSON cannot write")
}

// flatOutcome is an outcome whose check is flat.
type flatOutcome struct {
	ID    string
	Fee   float64
	Fee32 float32
	Items [2]inner
}

func (f flatOutcome) Fingerprint() driver.Fingerprint {
	return driver.Fingerprint{WithdrawalID: f.ID, Amount: "1", Currency: "EUR", Destination: "d"}
}

// TestChecksAreMadeOnce: a type's check is made once, however many
// goroutines ask for it at once, and one that needs none is nil.
func TestChecksAreMadeOnce(t *testing.T) {
	type fresh struct {
		A string
		B *fresh
	}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range 8 {
		wg.Go(func() {
			<-start
			assert.ErrorContains(t, exactly(fresh{B: &fresh{A: "\xff"}}), "B.A holds text")
		})
	}
	close(start)
	wg.Wait()
	assert.Nil(t, checkOf(reflect.TypeFor[plain]()))
	assert.Nil(t, checkOf(reflect.TypeFor[time.Time]()), "it encodes itself")
	assert.NotNil(t, checkOf(reflect.TypeFor[fresh]()))
}

// flatStore is a Store no test calls: the ledger's outcome check needs none.
type flatStore struct{ driver.Store[flatOutcome] }

func newFlatStore() flatStore { return flatStore{} }
