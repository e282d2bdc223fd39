package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemledger/submissions/idemhttp"
)

// saleRequest is the body of POST /shops/{shop}/sales, checked.
type saleRequest struct {
	Customer string
	Amount   string // as parseSale accepts it
}

// sale is a sale as the API shows it.
type sale struct {
	ID        int64     `json:"id"`
	Shop      string    `json:"shop"`
	Customer  string    `json:"customer"`
	Amount    string    `json:"amount"`
	TotalDue  string    `json:"total_due"` // the customer's, after this sale
	CreatedAt time.Time `json:"created_at"`
}

// amounts are what an amount may be (more than zero, too).
var amounts = regexp.MustCompile(`^[0-9]{1,12}(\.[0-9]{1,2})?$`)

// parseSale returns the sale in body, or the problem with it: malformed
// (not one JSON object), or invalid, with every field at fault.
func parseSale(body []byte) (saleRequest, *idemhttp.Problem) {
	var members map[string]json.RawMessage
	d := json.NewDecoder(bytes.NewReader(body))
	if err := d.Decode(&members); err != nil || members == nil {
		return saleRequest{}, refusal(problemMalformedBody)
	}
	if _, err := d.Token(); err != io.EOF {
		return saleRequest{}, refusal(problemMalformedBody)
	}
	var in saleRequest
	var faults []idemhttp.FieldError
	str := func(name string) (string, bool) {
		raw, ok := members[name]
		if !ok {
			faults = append(faults, idemhttp.FieldError{Pointer: pointer(name), Detail: "is missing"})
			return "", false
		}
		var v string
		if json.Unmarshal(raw, &v) != nil {
			faults = append(faults, idemhttp.FieldError{Pointer: pointer(name), Detail: "is not a string"})
			return "", false
		}
		return v, true
	}
	if c, ok := str("customer"); ok {
		in.Customer = c
		if !ids.MatchString(c) {
			faults = append(faults, idemhttp.FieldError{Pointer: "#/customer", Detail: "is not a customer id: 1 to 64 letters, digits, '.', '_' and '-', starting with a letter or digit"})
		}
	}
	if a, ok := str("amount"); ok {
		in.Amount = a
		if !amounts.MatchString(a) || strings.Trim(a, "0.") == "" {
			faults = append(faults, idemhttp.FieldError{Pointer: "#/amount", Detail: "is not an amount: digits (at most 12), optionally a point and one or two more, more than zero"})
		}
	}
	var unknown []string
	for name := range members {
		if name != "customer" && name != "amount" {
			unknown = append(unknown, name)
		}
	}
	slices.Sort(unknown)
	for _, name := range unknown {
		faults = append(faults, idemhttp.FieldError{Pointer: pointer(name), Detail: "is not a field of a sale"})
	}
	if faults != nil {
		p := refusal(problemInvalidSale)
		p.Errors = faults
		return saleRequest{}, p
	}
	return in, nil
}

// refusal returns a copy of p, as the error a Writer refuses a request with.
func refusal(p idemhttp.Problem) *idemhttp.Problem { return &p }

// pointer is the JSON Pointer to the member name of the body, as a URI
// fragment.
func pointer(name string) string {
	esc := strings.NewReplacer("~", "~0", "/", "~1").Replace(name)
	return (&url.URL{Fragment: "/" + esc}).String()
}

// postSale hands a request for a shop whose id is valid to the InTx
// handler, which reads its key and body, and writes the sale and the key in
// one transaction (writeSale). Any other shop is a 404, nothing claimed.
func (s *server) postSale(w http.ResponseWriter, r *http.Request) {
	if !ids.MatchString(r.PathValue("shop")) {
		idemhttp.WriteProblem(w, problemNotFound)
		return
	}
	s.sales.ServeHTTP(w, r)
}

// writeSale is the Writer of POST /shops/{shop}/sales: in tx, the
// transaction that holds the request's key, it checks the sale, adds its
// amount to the customer's total_due, in SQL, and inserts the sale. A sale
// it refuses (malformed, invalid, or of a customer the shop does not have)
// is a *idemhttp.Problem error: the transaction rolls back, the key's claim
// with it, and InTx writes the problem. See the package doc.
func (s *server) writeSale(ctx context.Context, tx pgx.Tx, r *http.Request, body []byte) (int, any, error) {
	in, p := parseSale(body)
	if p != nil {
		return 0, nil, p
	}
	out := sale{Shop: r.PathValue("shop"), Customer: in.Customer}
	err := tx.QueryRow(ctx, `UPDATE customers SET total_due = total_due + $3::text::numeric
		WHERE shop = $1 AND id = $2 RETURNING round(total_due, 2)::text`, out.Shop, out.Customer, in.Amount).Scan(&out.TotalDue)
	switch {
	case errors.Is(err, pgx.ErrNoRows): // no such customer
		return 0, nil, refusal(problemUnknownCustomer)
	case err != nil:
		return 0, nil, fmt.Errorf("move the customer's total_due: %w", err)
	}
	err = tx.QueryRow(ctx, `INSERT INTO sales (shop, customer, amount) VALUES ($1, $2, $3::text::numeric)
		RETURNING id, round(amount, 2)::text, created_at`, out.Shop, out.Customer, in.Amount).Scan(&out.ID, &out.Amount, &out.CreatedAt)
	if err != nil {
		return 0, nil, fmt.Errorf("insert the sale: %w", err)
	}
	out.CreatedAt = out.CreatedAt.UTC()
	if d := s.cfg.CommitDelay; d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return 0, nil, ctx.Err()
		}
	}
	if s.cfg.beforeCommit != nil {
		if err := s.cfg.beforeCommit(ctx); err != nil {
			return 0, nil, err
		}
	}
	return http.StatusCreated, out, nil
}
