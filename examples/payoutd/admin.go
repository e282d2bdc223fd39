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
			writeProblem(w, typeMalformed, http.StatusBadRequest, fmt.Sprintf("older_than %q is not a duration such as 10m.", v))
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
			writeProblem(w, typeMalformed, http.StatusBadRequest, fmt.Sprintf("limit %q is not a number from 1 to %d.", v, admin.MaxListLimit))
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
// withdrawal as the rail shows it (sent, or failed), recorded as the outcome
// of the key's claim in flight, and kept as the withdrawal's state.
func (s *server) adminResolve(w http.ResponseWriter, r *http.Request) {
	c, ok := s.claimOf(w, r)
	if !ok {
		return
	}
	var out Withdrawal
	if !decode(w, r, &out) {
		return
	}
	if err := validate(out); err != nil {
		writeErrorSaying(w, err)
		return
	}
	if why := outcomeProblem(out); why != "" {
		writeProblem(w, typeInvalidOutcome, http.StatusUnprocessableEntity, why)
		return
	}
	if err := s.ledger.Admin().ResolveClaim(r.Context(), c, out); err != nil {
		writeAdminError(w, err)
		return
	}
	if kept, ok, err := s.withdrawals.get(r.Context(), c.Tenant, out.ID); err == nil && ok {
		s.keep(r.Context(), c.Tenant, kept, out)
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

// outcomeProblem returns what is wrong with out as an outcome, or "": it
// must be sent, with the rail's reference, or failed, with the reason.
func outcomeProblem(out Withdrawal) string {
	switch {
	case out.State == stateSent && out.Tx == "":
		return `state: "sent" without its tx.`
	case out.State == stateFailed && out.FailureReason == "":
		return `state: "failed" without its failure_reason.`
	case out.State != stateSent && out.State != stateFailed:
		return fmt.Sprintf(`state: %q is not an outcome: "sent" (with tx) or "failed" (with failure_reason).`, out.State)
	}
	return ""
}

// adminPrune handles POST /admin/prune?before=T: the records settled before
// T (RFC 3339, or a duration ago such as 720h), in every tenant, become
// tombstones; their keys and withdrawals are refused from then on. T must be
// at least the ledger's minimum retention ago (admin.DefaultMinRetention);
// force=true allows a later T, never one in the future.
func (s *server) adminPrune(w http.ResponseWriter, r *http.Request) {
	params := r.URL.Query()
	v := params.Get("before")
	before, err := time.Parse(time.RFC3339, v)
	if err != nil {
		d, derr := time.ParseDuration(v)
		if derr != nil || d <= 0 {
			writeProblem(w, typeMalformed, http.StatusBadRequest, fmt.Sprintf("before %q is neither an RFC 3339 time nor a positive duration such as 720h.", v))
			return
		}
		before = time.Now().Add(-d)
	}
	force := false
	if v := params.Get("force"); v != "" {
		if force, err = strconv.ParseBool(v); err != nil {
			writeProblem(w, typeMalformed, http.StatusBadRequest, fmt.Sprintf("force %q is neither true nor false.", v))
			return
		}
	}
	ops := s.ledger.Admin()
	if force {
		ops = ops.WithMinRetention(0)
	}
	n, err := ops.Prune(r.Context(), before, 0)
	if err != nil {
		writeAdminError(w, err)
		return
	}
	s.log.Info("operator pruned settled records", "before", before, "forced", force, "pruned", n)
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
			writeProblem(w, typeMalformed, http.StatusBadRequest, fmt.Sprintf("token %q is not a claim's token.", v))
			return admin.Claim{}, false
		}
	}
	c, found, err := s.findClaim(r.Context(), tenant, key)
	switch {
	case err != nil:
		writeAdminError(w, err)
		return admin.Claim{}, false
	case !found:
		writeProblem(w, typeNotFound, http.StatusNotFound, fmt.Sprintf("Request key %s has no claim in flight in this tenant.", key))
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
// ledger's error as its detail: the operator's, not a client's. The
// ledger's classes are idemhttp's problems, but for an outcome that
// contradicts the claim, and the admin package's own errors.
func writeAdminError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, admin.ErrClaimChanged):
		writeProblem(w, typeClaimChanged, http.StatusConflict, err.Error())
	case errors.Is(err, admin.ErrHorizonTooRecent):
		writeProblem(w, typeHorizonTooRecent, http.StatusUnprocessableEntity, err.Error()+
			". force=true prunes within the minimum retention (never after now): a client retrying a key settled since the horizon gets 410 instead of its outcome.")
	case errors.Is(err, submissions.ErrIdempotencyConflict):
		writeProblem(w, typeOutcomeConflict, http.StatusConflict, err.Error())
	default:
		writeErrorSaying(w, err)
	}
}
