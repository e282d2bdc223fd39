package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemledger/submissions"
)

// codec is a Codec whose Marshal returns out and err.
type codec struct {
	jsonCodec
	out []byte
	err error
}

func (c codec) Marshal(any) ([]byte, error) { return c.out, c.err }

// TestNewAppliesItsOptions: the table and the codec a Store uses are the ones
// its options name, in order, nil options skipped. New does not touch the
// database, so neither does this test.
func TestNewAppliesItsOptions(t *testing.T) {
	c := codec{err: errors.New("codec broken")}
	s, err := New[w](&pgxpool.Pool{}, WithTable("ignored"), nil, WithTable("payouts.withdrawals"), WithCodec(c))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.names.table, `"payouts"."withdrawals"`; got != want {
		t.Errorf("table: got %s; want %s", got, want)
	}
	if _, err := s.encode("req-1", newW("w-1")); !errors.Is(err, c.err) {
		t.Errorf("encode: got %v; want the codec's error", err)
	}
}

// TestMigrateGivesBackItsConnection: Migrate returns the connection it took
// to the pool, whether it succeeds or fails. A connection it kept would hold
// one of the pool's for good (and make pool.Close wait forever, which is why
// this test closes its pool only when none is kept).
func TestMigrateGivesBackItsConnection(t *testing.T) {
	pool, err := pgxpool.NewWithConfig(bg, testPool(t, 2).Config())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if pool.Stat().AcquiredConns() == 0 {
			pool.Close()
		}
	})
	for _, c := range []struct {
		table string
		fails bool
	}{
		{testTable(t, pool), false},
		{"no_such_schema." + testTable(t, pool), true}, // the CREATE TABLE fails
	} {
		s, err := New[w](pool, WithTable(c.table))
		if err != nil {
			t.Fatal(err)
		}
		err = s.Migrate(bg)
		if n := pool.Stat().AcquiredConns(); n != 0 {
			t.Fatalf("Migrate of %s (error %v): %d connections still acquired; want 0", c.table, err, n)
		}
		if (err != nil) != c.fails {
			t.Fatalf("Migrate of %s: got error %v; want one: %v", c.table, err, c.fails)
		}
	}
}

// TestOutcomesTheCodecCannotEncode: an outcome the codec fails on, or encodes
// as no bytes (which would read back as no outcome), is never recorded. A
// Resolve says so and leaves the key unknown and the withdrawal free; a
// Submit returns the rail's outcome with ErrOutcomeNotRecorded and the key
// stays in flight.
func TestOutcomesTheCodecCannotEncode(t *testing.T) {
	pool := testPool(t, 2)
	broken := errors.New("codec broken")
	for _, c := range []struct {
		name  string
		codec Codec
		want  string
	}{
		{"an error", codec{err: broken}, "codec broken"},
		{"no bytes", codec{out: []byte{}}, "the codec returned no bytes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			st, err := New[w](pool, WithTable(testTable(t, pool)), WithCodec(c.codec))
			if err != nil {
				t.Fatal(err)
			}
			if err := st.Migrate(bg); err != nil {
				t.Fatal(err)
			}
			ledger := submissions.NewWithStore[w](st)
			err = ledger.Resolve(bg, "req-1", sent(newW("w-1"), "0xfound"))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Resolve: got %v; want an error saying %q", err, c.want)
			}
			if _, ok, err := ledger.ClaimedBy(bg, "w-1"); err != nil || ok {
				t.Fatalf("ClaimedBy after the failed Resolve: got %v, %v; want the withdrawal free", ok, err)
			}

			moved := sent(newW("w-2"), "0xmoved")
			out, err := ledger.Submit(bg, "req-2", newW("w-2"), func(context.Context, w) (w, error) { return moved, nil })
			if !errors.Is(err, submissions.ErrOutcomeNotRecorded) || !strings.Contains(fmt.Sprint(err), c.want) || out != moved {
				t.Fatalf("Submit: got %+v, %v; want the rail's outcome and ErrOutcomeNotRecorded saying %q", out, err, c.want)
			}
			if _, err := ledger.Submit(bg, "req-2", newW("w-2"), nil); !errors.Is(err, submissions.ErrSubmissionInFlight) {
				t.Fatalf("Submit again: got %v; want ErrSubmissionInFlight", err)
			}
		})
	}
}
