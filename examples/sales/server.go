package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemledger/submissions"
	"github.com/idemledger/submissions/idemhttp"
	"github.com/idemledger/submissions/pgstore"
)

// keysTable is the table of the sales' idempotency keys.
const keysTable = "sales_keys"

// config is what a server is made of.
type config struct {
	Pool   *pgxpool.Pool
	Logger *slog.Logger // nil: slog.Default()
	// CommitDelay keeps each sale's transaction open this long after its
	// writes, before it commits.
	CommitDelay time.Duration
	// beforeCommit, when set, runs in each sale's transaction after its
	// writes and CommitDelay; an error rolls the transaction back (tests).
	beforeCommit func(ctx context.Context) error
}

// server is the HTTP API.
type server struct {
	cfg   config
	log   *slog.Logger
	pool  *pgxpool.Pool
	sales http.Handler // idemhttp.InTx of writeSale
	mux   *http.ServeMux
}

// tables are the service's own tables, made if they are not there.
const tables = `
CREATE TABLE IF NOT EXISTS customers (
	shop      text NOT NULL,
	id        text NOT NULL,
	total_due numeric NOT NULL DEFAULT 0,
	PRIMARY KEY (shop, id)
);
CREATE TABLE IF NOT EXISTS sales (
	id         bigserial PRIMARY KEY,
	shop       text NOT NULL,
	customer   text NOT NULL,
	amount     numeric NOT NULL CHECK (amount > 0),
	created_at timestamptz NOT NULL DEFAULT now(),
	FOREIGN KEY (shop, customer) REFERENCES customers (shop, id)
);
CREATE INDEX IF NOT EXISTS sales_customer ON sales (shop, customer);
`

// newServer makes the tables that are not there, and returns the API.
func newServer(ctx context.Context, cfg config) (*server, error) {
	if cfg.Pool == nil {
		return nil, errors.New("no database pool")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if err := migrate(ctx, cfg.Pool); err != nil {
		return nil, err
	}
	store, err := pgstore.New[idemhttp.Exchange](cfg.Pool, pgstore.WithTable(keysTable))
	if err != nil {
		return nil, err
	}
	if err := store.Migrate(ctx); err != nil {
		return nil, err
	}
	s := &server{cfg: cfg, log: cfg.Logger, pool: cfg.Pool, mux: http.NewServeMux()}
	submit := func(ctx context.Context, tenant, key string, req idemhttp.Exchange,
		work func(context.Context, pgx.Tx, idemhttp.Exchange) (idemhttp.Exchange, error)) (idemhttp.Exchange, bool, error) {
		out, replayed, err := pgstore.Submit(ctx, store, tenant, key, req, work)
		if _, refused := errors.AsType[*idemhttp.Problem](err); err != nil && !refused && idemhttp.ProblemFor(err).Status >= 500 {
			s.log.Warn("sale not written", "shop", tenant, "key", key, "err", err)
		}
		return out, replayed, err
	}
	s.sales = idemhttp.InTx(submit, func(r *http.Request) string { return r.PathValue("shop") }, s.writeSale)
	s.mux.HandleFunc("POST /shops/{shop}/sales", s.postSale)
	s.mux.HandleFunc("PUT /shops/{shop}/customers/{id}", s.putCustomer)
	s.mux.HandleFunc("GET /shops/{shop}/customers/{id}", s.getCustomer)
	return s, nil
}

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// migrate creates the service's tables, under a transaction-scoped advisory
// lock so that processes starting at once do not race their CREATEs.
func migrate(ctx context.Context, pool *pgxpool.Pool) error {
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('examples/sales ' || current_schema()))`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, tables)
		return err
	})
	if err != nil {
		return fmt.Errorf("create the tables: %w", err)
	}
	return nil
}

// ids are what a shop or customer id may be.
var ids = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// The service's own problem types.
const (
	typeNotFound        = "urn:sales:problem:not-found"
	typeMalformedBody   = "urn:sales:problem:malformed-body"
	typeInvalidSale     = "urn:sales:problem:invalid-sale"
	typeUnknownCustomer = "urn:sales:problem:unknown-customer"
)

var (
	problemNotFound = idemhttp.Problem{Type: typeNotFound, Title: "Not found", Status: http.StatusNotFound,
		Detail: "The shop has no such customer."}
	problemMalformedBody = idemhttp.Problem{Type: typeMalformedBody, Title: "Malformed request body", Status: http.StatusBadRequest,
		Detail: "The request body is not one JSON object. This request wrote nothing, and its key is unused."}
	problemInvalidSale = idemhttp.Problem{Type: typeInvalidSale, Title: "Invalid sale", Status: http.StatusUnprocessableEntity,
		Detail: "The sale's fields listed in errors are not valid. This request wrote nothing, and its key is unused."}
	problemUnknownCustomer = idemhttp.Problem{Type: typeUnknownCustomer, Title: "Unknown customer", Status: http.StatusNotFound,
		Detail: "The shop has no such customer: create it first. This request wrote nothing, and its key is unused."}
)

// customer is a customer as the API shows it.
type customer struct {
	Shop     string `json:"shop"`
	ID       string `json:"id"`
	TotalDue string `json:"total_due"`
}

// putCustomer creates the customer of the path, 201, or finds it, 200.
// The insert's conflict is the answer "it exists", not an error to hide.
func (s *server) putCustomer(w http.ResponseWriter, r *http.Request) {
	shop, id := r.PathValue("shop"), r.PathValue("id")
	if !ids.MatchString(shop) || !ids.MatchString(id) {
		idemhttp.WriteProblem(w, problemNotFound)
		return
	}
	c := customer{Shop: shop, ID: id}
	err := s.pool.QueryRow(r.Context(), `INSERT INTO customers (shop, id) VALUES ($1, $2)
		ON CONFLICT (shop, id) DO NOTHING RETURNING round(total_due, 2)::text`, shop, id).Scan(&c.TotalDue)
	status := http.StatusCreated
	if errors.Is(err, pgx.ErrNoRows) {
		status = http.StatusOK
		err = s.pool.QueryRow(r.Context(), `SELECT round(total_due, 2)::text FROM customers WHERE shop = $1 AND id = $2`, shop, id).Scan(&c.TotalDue)
	}
	if err != nil {
		s.databaseFailed(w, r, err)
		return
	}
	idemhttp.WriteJSON(w, status, c, false)
}

// getCustomer returns the customer of the path, with its total_due.
func (s *server) getCustomer(w http.ResponseWriter, r *http.Request) {
	shop, id := r.PathValue("shop"), r.PathValue("id")
	if !ids.MatchString(shop) || !ids.MatchString(id) {
		idemhttp.WriteProblem(w, problemNotFound)
		return
	}
	c := customer{Shop: shop, ID: id}
	err := s.pool.QueryRow(r.Context(), `SELECT round(total_due, 2)::text FROM customers WHERE shop = $1 AND id = $2`, shop, id).Scan(&c.TotalDue)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		idemhttp.WriteProblem(w, problemNotFound)
	case err != nil:
		s.databaseFailed(w, r, err)
	default:
		idemhttp.WriteJSON(w, http.StatusOK, c, false)
	}
}

// databaseFailed logs err and writes a 503 (or, for a request that ended,
// idemhttp's request-ended).
func (s *server) databaseFailed(w http.ResponseWriter, r *http.Request, err error) {
	s.log.Warn("database", "method", r.Method, "path", r.URL.Path, "err", err)
	if cerr := r.Context().Err(); cerr != nil {
		err = fmt.Errorf("%w: %w", cerr, err)
	} else {
		err = fmt.Errorf("%w: %w", submissions.ErrStoreFailed, err)
	}
	idemhttp.WriteError(w, err)
}
