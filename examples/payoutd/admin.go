package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/idemledger/submissions"
	"github.com/idemledger/submissions/admin"
	"github.com/idemledger/submissions/idemhttp"
)

// claimView is a key in flight as the admin endpoints show it.
type claimView struct {
	Tenant       string    `json:"tenant"`
	Key          string    `json:"key"`
	WithdrawalID string    `json:"withdrawal_id"`
	Amount       string    `json:"amount"`
	Currency     string    `json:"currency"`
	Destination  string    `json:"destination"`
	ClaimedAt    time.Time `json:"claimed_at"`
	Token        uint64    `json:"token"`
	Sending      bool      `json:"sending"` // this process is running its send: leave it alone
}

func viewOf(c admin.Claim) claimView {
	fp := c.Fingerprint
	return claimView{Tenant: c.Tenant, Key: c.Key, WithdrawalID: fp.WithdrawalID, Amount: fp.Amount, Currency: fp.Currency,
		Destination: fp.Destination, ClaimedAt: c.ClaimedAt, Token: uint64(c.Token), Sending: c.Sending}
}

// adminInFlight handles GET /admin/inflight: the oldest keys in flight, in
// every tenant or in the tenant query parameter's, claimed at least
// older_than ago, at most limit of them.
func (s *server) adminInFlight(w http.ResponseWriter, r *http.Request) {
	params := r.URL.Query()
	var q admin.InFlightQuery
	if v := params.Get("older_than"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			writeProblem(w, http.StatusBadRequest, fmt.Sprintf("older_than %q is not a duration such as 10m.", v))
			return
		}
		q.OlderThan = d
	}
	if params.Has("tenant") {
		tenant := params.Get("tenant")
		if err := submissions.ValidateTenant(tenant); err != nil {
			writeErrorSaying(w, fmt.Errorf("tenant: %w", err))
			return
		}
		q.Tenants = []string{tenant}
	}
	q.Limit = admin.DefaultListLimit
	if v := params.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > admin.MaxListLimit {
			writeProblem(w, http.StatusBadRequest, fmt.Sprintf("limit %q is not a number from 1 to %d.", v, admin.MaxListLimit))
			return
		}
		q.Limit = n
	}
	claims, err := s.ledger.Admin().InFlight(r.Context(), q)
	if err != nil {
		s.log.Error("list the keys in flight", "error", err)
		idemhttp.WriteError(w, err)
		return
	}
	views := make([]claimView, 0, len(claims))
	for _, c := range claims {
		views = append(views, viewOf(c))
	}
	idemhttp.WriteJSON(w, http.StatusOK, views, false)
}

// adminResolve handles POST /admin/claims/{key}/resolve: the body, the
// withdrawal as the rail shows it sent, recorded as the outcome of the key's
// claim in flight.
func (s *server) adminResolve(w http.ResponseWriter, r *http.Request) {
	c, ok := s.claimOf(w, r)
	if !ok {
		return
	}
	var out Withdrawal
	if !decode(w, r, &out) {
		return
	}
	if err := s.ledger.Admin().ResolveClaim(r.Context(), c, out); err != nil {
		writeAdminError(w, err)
		return
	}
	s.log.Info("operator resolved a claim", "tenant", c.Tenant, "key", c.Key, "withdrawal", c.Fingerprint.WithdrawalID, "token", uint64(c.Token))
	idemhttp.WriteJSON(w, http.StatusOK, struct {
		Resolved claimView  `json:"resolved"`
		Outcome  Withdrawal `json:"outcome"`
	}{viewOf(c), out}, false)
}

// adminRelease handles POST /admin/claims/{key}/release: the key's claim in
// flight dropped, its withdrawal free to be sent again.
func (s *server) adminRelease(w http.ResponseWriter, r *http.Request) {
	c, ok := s.claimOf(w, r)
	if !ok {
		return
	}
	if err := s.ledger.Admin().ReleaseClaim(r.Context(), c); err != nil {
		writeAdminError(w, err)
		return
	}
	s.log.Info("operator released a claim", "tenant", c.Tenant, "key", c.Key, "withdrawal", c.Fingerprint.WithdrawalID, "token", uint64(c.Token))
	idemhttp.WriteJSON(w, http.StatusOK, struct {
		Released claimView `json:"released"`
	}{viewOf(c)}, false)
}

// adminPrune handles POST /admin/prune?before=T: the records settled before
// T (RFC 3339, or a duration ago such as 720h), in every tenant, become
// tombstones; their keys and withdrawals are refused from then on.
func (s *server) adminPrune(w http.ResponseWriter, r *http.Request) {
	v := r.URL.Query().Get("before")
	before, err := time.Parse(time.RFC3339, v)
	if err != nil {
		d, derr := time.ParseDuration(v)
		if derr != nil || d <= 0 {
			writeProblem(w, http.StatusBadRequest, fmt.Sprintf("before %q is neither an RFC 3339 time nor a positive duration such as 720h.", v))
			return
		}
		before = time.Now().Add(-d)
	}
	n, err := s.ledger.Admin().Prune(r.Context(), before, 0)
	if err != nil {
		writeAdminError(w, err)
		return
	}
	s.log.Info("operator pruned settled records", "before", before, "pruned", n)
	idemhttp.WriteJSON(w, http.StatusOK, struct {
		Pruned int       `json:"pruned"`
		Before time.Time `json:"before"`
	}{n, before.UTC()}, false)
}

// claimOf returns the claim in flight of the path's key in the request's
// tenant, as the listing has it, and of the token query parameter's claim
// when it names one; otherwise it writes a problem and returns false.
func (s *server) claimOf(w http.ResponseWriter, r *http.Request) (admin.Claim, bool) {
	tenant, ok := tenantOf(w, r)
	if !ok {
		return admin.Claim{}, false
	}
	key := strings.TrimSpace(r.PathValue("key"))
	var token uint64
	if v := r.URL.Query().Get("token"); v != "" {
		var err error
		if token, err = strconv.ParseUint(v, 10, 64); err != nil || token == 0 {
			writeProblem(w, http.StatusBadRequest, fmt.Sprintf("token %q is not a claim's token.", v))
			return admin.Claim{}, false
		}
	}
	c, found, err := s.findClaim(r.Context(), tenant, key)
	switch {
	case err != nil:
		writeAdminError(w, err)
		return admin.Claim{}, false
	case !found:
		writeProblem(w, http.StatusNotFound, fmt.Sprintf("Request key %s has no claim in flight in this tenant.", key))
		return admin.Claim{}, false
	case token != 0 && uint64(c.Token) != token:
		writeAdminError(w, fmt.Errorf("%w: request key %s: its claim is token %d now, not %d", admin.ErrClaimChanged, key, c.Token, token))
		return admin.Claim{}, false
	}
	return c, true
}

// findClaim walks tenant's keys in flight for key's claim.
func (s *server) findClaim(ctx context.Context, tenant, key string) (admin.Claim, bool, error) {
	q := admin.InFlightQuery{Tenants: []string{tenant}, Limit: admin.MaxListLimit}
	for {
		page, err := s.ledger.Admin().InFlight(ctx, q)
		if err != nil {
			return admin.Claim{}, false, err
		}
		for _, c := range page {
			if c.Key == key {
				return c, true, nil
			}
		}
		if len(page) < q.Limit {
			return admin.Claim{}, false, nil
		}
		q.After = &page[len(page)-1]
	}
}

// writeAdminError writes the problem of an admin action's error, with the
// ledger's error as its detail: the operator's, not a client's.
func writeAdminError(w http.ResponseWriter, err error) {
	status := http.StatusInternalServerError
	switch {
	case errors.Is(err, admin.ErrClaimChanged), errors.Is(err, submissions.ErrIdempotencyConflict),
		errors.Is(err, submissions.ErrSubmissionInFlight):
		status = http.StatusConflict
	case errors.Is(err, submissions.ErrInvalidKey), errors.Is(err, submissions.ErrInvalidTenant):
		status = http.StatusBadRequest
	case errors.Is(err, submissions.ErrInvalidFingerprint):
		status = http.StatusUnprocessableEntity
	case errors.Is(err, submissions.ErrStoreFailed):
		status = http.StatusServiceUnavailable
	}
	writeProblem(w, status, err.Error())
}
