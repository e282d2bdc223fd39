package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idemledger/submissions"
	"github.com/idemledger/submissions/admin"
	"github.com/idemledger/submissions/driver"
	"github.com/idemledger/submissions/idemhttp"
)

// claimView is a key's claim as the admin endpoints show it.
type claimView struct {
	Tenant       string     `json:"tenant"`
	Key          string     `json:"key"`
	WithdrawalID string     `json:"withdrawal_id"`
	Amount       string     `json:"amount"`
	Currency     string     `json:"currency"`
	Destination  string     `json:"destination"`
	ClaimedAt    *time.Time `json:"claimed_at,omitempty"` // in listings
	Token        uint64     `json:"token"`
	Sending      bool       `json:"sending"`        // this process is running its send
	Abandoned    bool       `json:"abandoned"`      // its send ended without a recorded answer
	Answered     bool       `json:"answered"`       // that send got an answer that was not recorded: money moved
	Send         string     `json:"send,omitempty"` // in flight: admin.Claim.Send, "running", "ended without a recorded answer" or "not known to have ended"
}

func viewOf(c admin.Claim) claimView {
	fp := c.Fingerprint
	v := claimView{Tenant: c.Tenant, Key: c.Key, WithdrawalID: fp.WithdrawalID, Amount: fp.Amount, Currency: fp.Currency,
		Destination: fp.Destination, Token: uint64(c.Token), Sending: c.Sending, Abandoned: c.Abandoned, Answered: c.Answered, Send: c.Send()}
	if !c.ClaimedAt.IsZero() {
		at := c.ClaimedAt
		v.ClaimedAt = &at
	}
	return v
}

// checkOutcome is payoutd's rule for an outcome an operator records, at
// every door (this API and `payoutd ctl`): sent, with the rail's reference,
// or failed, with the reason.
func checkOutcome(out Withdrawal) error {
	switch {
	case out.State == stateSent && out.Tx == "":
		return errors.New(`state "sent" without its tx`)
	case out.State == stateFailed && out.FailureReason == "":
		return errors.New(`state "failed" without its failure_reason`)
	case out.State != stateSent && out.State != stateFailed:
		return fmt.Errorf(`state %q is not an outcome: "sent" (with tx) or "failed" (with failure_reason)`, out.State)
	}
	return nil
}

// checkOutcomeJSON is checkOutcome of an outcome in payoutd's JSON.
func checkOutcomeJSON(raw []byte) error {
	var out Withdrawal
	if err := json.Unmarshal(raw, &out); err != nil {
		return fmt.Errorf("not a withdrawal: %v", err)
	}
	return checkOutcome(out)
}

// admin returns the ledger's operator side, with payoutd's outcome rule
// (the ledger's: submissions.WithOutcomeCheck).
func (s *server) admin() *admin.Admin[Withdrawal] {
	return s.ledger.Admin()
}

// adminInFlight handles GET /admin/inflight: the oldest keys in flight, in
// every tenant or in the tenant query parameter's, claimed at least
// older_than ago, at most limit of them.
func (s *server) adminInFlight(w http.ResponseWriter, r *http.Request) {
	params, ok := queryOf(w, r, "older_than", "tenant", "limit")
	if !ok {
		return
	}
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
	claims, err := s.admin().InFlight(r.Context(), q)
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

// adminResolve handles POST /admin/claims/{key}/resolve[?token=N][&force=true]:
// the body, the withdrawal as the rail shows it (sent, or failed), recorded
// as the outcome of the key's claim, and kept as the withdrawal's state.
func (s *server) adminResolve(w http.ResponseWriter, r *http.Request) {
	t, ok := s.target(w, r)
	if !ok {
		return
	}
	var out Withdrawal
	if !decode(w, r, &out) {
		return
	}
	res := s.admin().Resolve(r.Context(), t, out)
	if res.OK() && !s.statesInTx { // on PostgreSQL, the outcome's transaction stored it
		if kept, found, err := s.withdrawals.get(r.Context(), res.Claim.Tenant, res.Claim.Fingerprint.WithdrawalID); err == nil && found {
			s.keep(r.Context(), res.Claim.Tenant, kept, out)
		}
	}
	s.writeResult(w, res, &out)
}

// adminRelease handles POST /admin/claims/{key}/release[?token=N][&force=true]:
// the key's claim dropped, its withdrawal free to be sent again.
func (s *server) adminRelease(w http.ResponseWriter, r *http.Request) {
	t, ok := s.target(w, r)
	if !ok {
		return
	}
	s.writeResult(w, s.admin().Release(r.Context(), t), nil)
}

// target reads the claim an admin action names: the path's key in the
// request's tenant, the token and force query parameters.
func (s *server) target(w http.ResponseWriter, r *http.Request) (admin.Target, bool) {
	tenant, ok := tenantOf(w, r)
	if !ok {
		return admin.Target{}, false
	}
	params, ok := queryOf(w, r, "token", "force")
	if !ok {
		return admin.Target{}, false
	}
	t := admin.Target{Tenant: tenant, Key: r.PathValue("key")}
	if v := params.Get("token"); v != "" {
		token, err := strconv.ParseUint(v, 10, 64)
		if err != nil || token == 0 {
			writeProblem(w, typeMalformed, http.StatusBadRequest, fmt.Sprintf("token %q is not a claim's token.", v))
			return admin.Target{}, false
		}
		t.Token = driver.Token(token)
	}
	if v := params.Get("force"); v != "" {
		force, err := strconv.ParseBool(v)
		if err != nil {
			writeProblem(w, typeMalformed, http.StatusBadRequest, fmt.Sprintf("force %q is neither true nor false.", v))
			return admin.Target{}, false
		}
		t.Force = force
	}
	return t, true
}

// resultView is an admin action's result, as the admin endpoints write it:
// the body of a 200, and the members a refusal's problem adds.
type resultView struct {
	Action   string      `json:"action"`
	Decision string      `json:"decision"`
	Rule     string      `json:"rule,omitempty"`
	Field    string      `json:"field,omitempty"`
	Message  string      `json:"message"`
	Next     string      `json:"next,omitempty"`
	State    string      `json:"state,omitempty"` // the key's, as the action found it
	Claim    *claimView  `json:"claim,omitempty"`
	Outcome  *Withdrawal `json:"outcome,omitempty"`
}

// adminProblem is a refused or failed admin action, as a problem.
type adminProblem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	resultView
}

// ruleStatus is the HTTP status of each rule's refusal or failure, and its
// problem's title.
var ruleStatus = map[admin.Rule]struct {
	status int
	title  string
}{
	admin.RuleInvalidTenant:     {http.StatusBadRequest, "Invalid tenant"},
	admin.RuleInvalidKey:        {http.StatusBadRequest, "Invalid request key"},
	admin.RuleInvalidOutcome:    {http.StatusUnprocessableEntity, "Invalid outcome"},
	admin.RuleUnknownKey:        {http.StatusNotFound, "Unknown request key"},
	admin.RuleTokenDiffers:      {http.StatusConflict, "Another claim token"},
	admin.RulePruned:            {http.StatusGone, "Request key pruned"},
	admin.RuleOtherWithdrawal:   {http.StatusConflict, "Outcome of another withdrawal"},
	admin.RuleFieldDiffers:      {http.StatusConflict, "Outcome differs from the claim"},
	admin.RuleAnotherOutcome:    {http.StatusConflict, "Another outcome recorded"},
	admin.RuleHasOutcome:        {http.StatusConflict, "Request key has an outcome"},
	admin.RuleSendRunning:       {http.StatusConflict, "Send running"},
	admin.RuleSendMayRun:        {http.StatusConflict, "Send not known to have ended"},
	admin.RuleClaimChanged:      {http.StatusConflict, "Claim changed"},
	admin.RuleAnswered:          {http.StatusConflict, "Send answered, answer not recorded"},
	admin.RuleNoAnswer:          {http.StatusConflict, "No answer kept"},
	admin.RuleWithdrawalClaimed: {http.StatusConflict, "Withdrawal claimed by another key"},
	admin.RuleStoreFailed:       {http.StatusServiceUnavailable, "Store unavailable"},
	admin.RuleContextEnded:      {http.StatusServiceUnavailable, "Request ended"},
}

// writeResult writes res: 200 with the result when the ledger is as asked,
// and otherwise the problem of its rule, whose detail is its message. It
// logs what an operator changed.
func (s *server) writeResult(w http.ResponseWriter, res admin.Result, out *Withdrawal) {
	v := resultView{Action: res.Action, Decision: res.Decision.String(), Rule: string(res.Rule), Field: res.Field,
		Message: res.Message, Next: res.Next, State: res.State}
	if res.Claim.Token != 0 {
		c := viewOf(res.Claim)
		if res.State != "in flight" { // the send of a settled key is over
			c.Send = ""
		}
		v.Claim = &c
	}
	if res.OK() {
		if res.Decision == admin.Changed {
			s.log.Info("operator "+res.Action+"d a claim", "tenant", res.Claim.Tenant, "key", res.Claim.Key,
				"withdrawal", res.Claim.Fingerprint.WithdrawalID, "token", uint64(res.Claim.Token))
		}
		v.Outcome = out
		idemhttp.WriteJSON(w, http.StatusOK, v, false)
		return
	}
	rs, ok := ruleStatus[res.Rule]
	if !ok {
		rs.status, rs.title = http.StatusInternalServerError, "Internal error"
	}
	body, err := json.Marshal(adminProblem{Type: "urn:payoutd:problem:" + string(res.Rule), Title: rs.title, Status: rs.status,
		Detail: res.Message, resultView: v})
	if err != nil {
		idemhttp.WriteError(w, err)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	if rs.status == http.StatusServiceUnavailable {
		h.Set("Retry-After", "1")
	}
	w.WriteHeader(rs.status)
	_, _ = w.Write(append(body, '\n'))
}

// adminPrune handles POST /admin/prune?before=T: the records settled before
// T (RFC 3339, or a duration ago such as 720h), in every tenant, become
// tombstones; their keys and withdrawals are refused from then on. T must be
// at least the ledger's minimum retention ago (admin.DefaultMinRetention);
// force=true allows a later T, never one in the future.
func (s *server) adminPrune(w http.ResponseWriter, r *http.Request) {
	params, ok := queryOf(w, r, "before", "force")
	if !ok {
		return
	}
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
	ops := s.admin()
	if force {
		ops = ops.WithMinRetention(0)
	}
	n, err := ops.Prune(r.Context(), before, 0)
	switch {
	case errors.Is(err, admin.ErrHorizonTooRecent):
		detail := err.Error() + ": nothing pruned."
		if !force && !before.After(time.Now()) {
			detail += " force=true prunes within the minimum retention (never after now): a client retrying a key settled since the horizon then gets 410 instead of its outcome."
		}
		writeProblem(w, typeHorizonTooRecent, http.StatusUnprocessableEntity, detail)
		return
	case err != nil:
		idemhttp.WriteError(w, err)
		return
	}
	s.log.Info("operator pruned settled records", "before", before, "forced", force, "pruned", n)
	idemhttp.WriteJSON(w, http.StatusOK, struct {
		Pruned int       `json:"pruned"`
		Before time.Time `json:"before"`
	}{n, before.UTC()}, false)
}

// queryOf returns r's query parameters when each is one of known, given
// once: a parameter misspelled, unknown or repeated is a 400 problem that
// names it, written here, and the request changes nothing.
func queryOf(w http.ResponseWriter, r *http.Request, known ...string) (url.Values, bool) {
	params, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		writeProblem(w, typeMalformed, http.StatusBadRequest, "The query is not valid URL encoding; this request changed nothing.")
		return nil, false
	}
	names := make([]string, 0, len(params))
	for name := range params {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		switch {
		case !slices.Contains(known, name):
			detail := fmt.Sprintf("Unknown query parameter %q; this request changed nothing.", name)
			if len(known) > 0 {
				detail = fmt.Sprintf("Unknown query parameter %q (known here: %s); this request changed nothing.", name, strings.Join(known, ", "))
			}
			writeProblem(w, typeMalformed, http.StatusBadRequest, detail)
			return nil, false
		case len(params[name]) > 1:
			writeProblem(w, typeMalformed, http.StatusBadRequest, fmt.Sprintf("The query parameter %q is repeated; this request changed nothing.", name))
			return nil, false
		}
	}
	return params, true
}
