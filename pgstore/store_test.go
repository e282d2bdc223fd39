package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemledger/submissions"
	"github.com/idemledger/submissions/storetest"
)

type withdrawal struct{ ID string }

func (w withdrawal) Fingerprint() submissions.Fingerprint {
	return submissions.Fingerprint{WithdrawalID: w.ID, Amount: "1", Currency: "BTC", Destination: "bc1q"}
}

var bg = context.Background()

func TestNewRefusesBadInput(t *testing.T) {
	if _, err := New[withdrawal](nil); err == nil {
		t.Fatal("New(nil pool): got nil error; want one")
	}
	pool := &pgxpool.Pool{} // never used: New does not touch the database
	for _, name := range []string{"", "Submissions", "1abc", "a-b", "a.b.c", "x;drop table y", strings.Repeat("a", 41)} {
		if _, err := New[withdrawal](pool, WithTable(name)); err == nil {
			t.Errorf("WithTable(%q): got nil error; want one", name)
		}
	}
	for _, name := range []string{"submissions", "payouts.submissions", "_t1", strings.Repeat("a", 40)} {
		if _, err := New[withdrawal](pool, WithTable(name)); err != nil {
			t.Errorf("WithTable(%q): %v", name, err)
		}
	}
}

func TestMigrateIsIdempotent(t *testing.T) {
	pool := testPool(t, 4)
	table := testTable(t, pool)
	s, err := New[withdrawal](pool, WithTable(table))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := s.Migrate(bg); err != nil {
			t.Fatalf("Migrate #%d: %v", i+1, err)
		}
	}
	var got []string
	rows, err := pool.Query(bg, `SELECT conname FROM pg_constraint WHERE conrelid = $1::regclass ORDER BY conname`, table)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		got = append(got, name)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	want := []string{table + "_key_unique", table + "_settled_check", table + "_withdrawal_unique"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("constraints: got %v; want %v", got, want)
	}
}

func TestMigrateFromManyInstancesAtOnce(t *testing.T) {
	const instances = 8
	pool := testPool(t, 2)
	table := testTable(t, pool)
	var ready, done sync.WaitGroup
	start := make(chan struct{})
	errs := make(chan error, instances)
	for range instances {
		p := testPool(t, 1) // an instance of its own: its own connection
		s, err := New[withdrawal](p, WithTable(table))
		if err != nil {
			t.Fatal(err)
		}
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			ready.Done()
			<-start
			errs <- s.Migrate(bg)
		}()
	}
	ready.Wait()
	close(start)
	done.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("Migrate: %v", err)
		}
	}
}

// TestUniqueConstraintsPickOneWinner races plain INSERTs from separate
// connections: the database lets one through, and translate tells the losers
// which constraint stopped them.
func TestUniqueConstraintsPickOneWinner(t *testing.T) {
	const racers = 16
	pool := testPool(t, racers)
	table := testTable(t, pool)
	s, err := New[withdrawal](pool, WithTable(table))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(bg); err != nil {
		t.Fatal(err)
	}
	insert := `INSERT INTO ` + s.names.table + ` (request_key, withdrawal_id, amount, currency, destination) VALUES ($1, $2, '1', 'BTC', 'bc1q')`
	for _, c := range []struct {
		name string
		row  func(i int) (key, withdrawal string)
		want error
	}{
		{"one key, many withdrawals", func(i int) (string, string) { return "req-1", fmt.Sprint("w-a", i) }, errKeyTaken},
		{"one withdrawal, many keys", func(i int) (string, string) { return fmt.Sprint("req-b", i), "w-1" }, errWithdrawalTaken},
	} {
		t.Run(c.name, func(t *testing.T) {
			conns := make([]*pgxpool.Conn, racers)
			for i := range conns {
				conn, err := pool.Acquire(bg)
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Release()
				conns[i] = conn
			}
			var ready, done sync.WaitGroup
			start := make(chan struct{})
			errs := make([]error, racers)
			for i, conn := range conns {
				ready.Add(1)
				done.Add(1)
				go func() {
					defer done.Done()
					key, w := c.row(i)
					ready.Done()
					<-start
					_, err := conn.Exec(bg, insert, key, w)
					errs[i] = s.translate(err)
				}()
			}
			ready.Wait()
			close(start)
			done.Wait()
			wins := 0
			for _, err := range errs {
				switch {
				case err == nil:
					wins++
				case !errors.Is(err, c.want):
					t.Errorf("a loser's error: got %v; want %v", err, c.want)
				}
			}
			if wins != 1 {
				t.Fatalf("winners: got %d; want 1", wins)
			}
		})
	}
}

func TestTranslateLeavesOtherErrorsAlone(t *testing.T) {
	s, err := New[withdrawal](&pgxpool.Pool{})
	if err != nil {
		t.Fatal(err)
	}
	plain := errors.New("connection reset")
	if got := s.translate(plain); got != plain {
		t.Fatalf("translate(%v): got %v; want it unchanged", plain, got)
	}
	if got := s.translate(nil); got != nil {
		t.Fatalf("translate(nil): got %v; want nil", got)
	}
}

var _ submissions.Store[withdrawal] = (*Store[withdrawal])(nil)

// newTestStore returns a migrated store on a table of t's own.
func newTestStore[R submissions.Fingerprinter](t *testing.T, pool *pgxpool.Pool) *Store[R] {
	t.Helper()
	s, err := New[R](pool, WithTable(testTable(t, pool)))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(bg); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestConformance(t *testing.T) {
	pool := testPool(t, 32)
	storetest.Run(t, func(t *testing.T) submissions.Store[storetest.Withdrawal] {
		return newTestStore[storetest.Withdrawal](t, pool)
	})
}
