package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/idemledger/submissions"
	"github.com/idemledger/submissions/examples/prommetrics"
	"github.com/idemledger/submissions/idemhttp"
	"github.com/idemledger/submissions/pgstore"
)

// tenantHeader names the tenant of a request: a stand-in for the tenant a
// real service takes from its authentication.
const tenantHeader = "X-Tenant"

// maxBody caps a request body: a withdrawal's fields fit many times over.
const maxBody = 16 << 10

// The types of payoutd's own problems; the ledger's errors are idemhttp's.
const (
	typeNotFound         = "urn:payoutd:problem:not-found"          // 404: no such route, withdrawal or claim in flight
	typeMethodNotAllowed = "urn:payoutd:problem:method-not-allowed" // 405, with Allow
	typeMalformed        = "urn:payoutd:problem:malformed-request"  // 400: a body that is not one JSON object, a bad query parameter
	typeBodyTooLarge     = "urn:payoutd:problem:body-too-large"     // 413: a body over maxBody
	typeInvalidOutcome   = "urn:payoutd:problem:invalid-outcome"    // 422: an operator's outcome in no outcome's state
	typeOutcomeConflict  = "urn:payoutd:problem:outcome-conflict"   // 409: an operator's outcome for another withdrawal, or another outcome
	typeClaimChanged     = "urn:payoutd:problem:claim-changed"      // 409: the claim an operator named is gone
	typeHorizonTooRecent = "urn:payoutd:problem:horizon-too-recent" // 422: a prune horizon in the future or within the minimum retention
)

// config is what a server is made of.
type config struct {
	Pool        *pgxpool.Pool // PostgreSQL; nil keeps everything in memory
	Rail        *rail
	SendTimeout time.Duration // how long a send may run
	Wait        time.Duration // how long a repeat of a key in flight waits for its outcome before a 409; 0 answers 409 at once
	Logger      *slog.Logger  // nil: slog.Default()
}

// server is payoutd's HTTP API.
type server struct {
	ledger      *submissions.Submissions[Withdrawal]
	withdrawals withdrawals
	rail        *rail
	sendTimeout time.Duration
	wait        time.Duration
	log         *slog.Logger
	mux         *http.ServeMux
}

// newServer returns the API over cfg's stores, with metrics of its own. With
// a pool it brings the ledger's table and the withdrawals table up to date
// first.
func newServer(ctx context.Context, cfg config) (*server, error) {
	s := &server{rail: cfg.Rail, sendTimeout: cfg.SendTimeout, wait: cfg.Wait, log: cfg.Logger, mux: http.NewServeMux()}
	if s.log == nil {
		s.log = slog.Default()
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	obs, err := prommetrics.New(reg) // no tenant label: any client names any tenant here
	if err != nil {
		return nil, err
	}
	opts := []submissions.Option{submissions.WithLogger(s.log), submissions.WithObserver(obs)}
	if cfg.Pool == nil {
		s.ledger = submissions.New[Withdrawal](opts...)
		s.withdrawals = &memWithdrawals{}
	} else {
		store, err := pgstore.New[Withdrawal](cfg.Pool)
		if err != nil {
			return nil, err
		}
		if err := store.Migrate(ctx); err != nil {
			return nil, err
		}
		ws := &pgWithdrawals{pool: cfg.Pool}
		if err := ws.migrate(ctx); err != nil {
			return nil, err
		}
		s.ledger = submissions.NewWithStore[Withdrawal](store, opts...)
		s.withdrawals = ws
	}
	s.mux.HandleFunc("POST /withdrawals", s.create)
	s.mux.HandleFunc("POST /withdrawals/{id}/submit", s.submit)
	s.mux.HandleFunc("GET /withdrawals/{id}", s.get)
	s.mux.HandleFunc("GET /rail/sends", s.sends)
	// The operator's endpoints: a real service serves them only behind
	// authentication of its operators, out of its clients' reach.
	s.mux.HandleFunc("GET /admin/inflight", s.adminInFlight)
	s.mux.HandleFunc("POST /admin/claims/{key}/resolve", s.adminResolve)
	s.mux.HandleFunc("POST /admin/claims/{key}/release", s.adminRelease)
	s.mux.HandleFunc("POST /admin/prune", s.adminPrune)
	s.mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelError),
		Registry: reg, // counts its own errors
	}))
	return s, nil
}

// ServeHTTP routes r. The mux's own answers, a 404 for a path it does not
// serve and a 405 (with Allow) for a method it does not serve there, are
// problems like every other error.
func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h, pattern := s.mux.Handler(r); pattern == "" {
		miss := &routeMiss{header: http.Header{}}
		h.ServeHTTP(miss, r)
		if allow := miss.header.Values("Allow"); len(allow) > 0 {
			w.Header()["Allow"] = allow
			writeProblem(w, typeMethodNotAllowed, http.StatusMethodNotAllowed, fmt.Sprintf("%s is not served on %s.", r.Method, r.URL.Path))
			return
		}
		writeProblem(w, typeNotFound, http.StatusNotFound, fmt.Sprintf("Nothing is served on %s.", r.URL.Path))
		return
	}
	s.mux.ServeHTTP(w, r)
}

// routeMiss takes the mux's answer to a request it has no route for, for
// ServeHTTP to keep its Allow field.
type routeMiss struct{ header http.Header }

func (m *routeMiss) Header() http.Header         { return m.header }
func (m *routeMiss) Write(b []byte) (int, error) { return len(b), nil }
func (m *routeMiss) WriteHeader(int)             {}

// create handles POST /withdrawals: a new withdrawal, approved, with an id of
// the server's.
func (s *server) create(w http.ResponseWriter, r *http.Request) {
	tenant, ok := tenantOf(w, r)
	if !ok {
		return
	}
	var in struct {
		Amount      string `json:"amount"`
		Currency    string `json:"currency"`
		Destination string `json:"destination"`
	}
	if !decode(w, r, &in) {
		return
	}
	wd := Withdrawal{ID: "wd_" + randomHex(16), Amount: in.Amount, Currency: in.Currency,
		Destination: in.Destination, State: stateApproved}
	if err := validate(wd); err != nil {
		writeErrorSaying(w, err) // "invalid fingerprint: amount: not a positive decimal ..."
		return
	}
	if err := s.withdrawals.create(r.Context(), tenant, wd); err != nil {
		s.log.Error("create withdrawal", slog.String("tenant", tenant), slog.Any("error", err))
		idemhttp.WriteError(w, err)
		return
	}
	w.Header().Set("Location", "/withdrawals/"+wd.ID)
	idemhttp.WriteJSON(w, http.StatusCreated, wd, false)
}

// submit handles POST /withdrawals/{id}/submit: the withdrawal sent to the
// rail at most once, its outcome replayed to every repeat of the key.
func (s *server) submit(w http.ResponseWriter, r *http.Request) {
	tenant, ok := tenantOf(w, r)
	if !ok {
		return
	}
	key, err := idemhttp.Key(r.Header)
	if err != nil {
		idemhttp.WriteError(w, err)
		return
	}
	wd, ok := s.withdrawal(w, r, tenant)
	if !ok {
		return
	}
	// The send runs to its end, or its timeout, even if the client hangs up:
	// cut short, it would leave the key claimed without an answer.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), s.sendTimeout)
	defer cancel()
	out, err := idemhttp.SubmitWaiting(ctx, w, r, s.ledger.Tenant(tenant), http.StatusCreated, wd, s.rail.Send, s.wait)
	switch {
	case err == nil:
		s.keep(ctx, tenant, wd, out)
	case errors.Is(err, submissions.ErrOutcomeUnknown) || errors.Is(err, submissions.ErrOutcomeNotRecorded):
		s.log.Error("money may have moved: look at the rail, then resolve or release the key",
			slog.String("tenant", tenant), slog.String("key", key),
			slog.String("withdrawal", wd.ID), slog.Any("error", err))
	}
}

// keep stores the state of out, an outcome of tenant's withdrawal kept as
// kept, unless kept has it already: GET answers from it once the ledger has
// pruned the outcome. A failure is logged; the next request that finds the
// outcome stores it.
func (s *server) keep(ctx context.Context, tenant string, kept, out Withdrawal) {
	if kept.State == out.State && kept.Tx == out.Tx && kept.FailureReason == out.FailureReason {
		return
	}
	if err := s.withdrawals.update(ctx, tenant, out); err != nil {
		s.log.Error("keep the state of a withdrawal", slog.String("tenant", tenant),
			slog.String("withdrawal", out.ID), slog.Any("error", err))
	}
}

// withdrawalView is a withdrawal as GET /withdrawals/{id} shows it.
type withdrawalView struct {
	Withdrawal
	ClaimedBy *string `json:"claimed_by"` // the request key holding it, or null
}

// get handles GET /withdrawals/{id}: the withdrawal, its state and the key
// holding it. A key that holds it without an outcome is in flight: sending,
// or left without an answer by the rail. The holder key's outcome comes from
// the ledger, and once the ledger has pruned it, from payoutd's own store.
func (s *server) get(w http.ResponseWriter, r *http.Request) {
	tenant, ok := tenantOf(w, r)
	if !ok {
		return
	}
	wd, ok := s.withdrawal(w, r, tenant)
	if !ok {
		return
	}
	ledger := s.ledger.Tenant(tenant)
	holder, claimed, err := ledger.ClaimedBy(r.Context(), wd.ID)
	if err != nil {
		idemhttp.WriteError(w, err)
		return
	}
	view := withdrawalView{Withdrawal: wd}
	if claimed {
		view.ClaimedBy = &holder
		out, done, err := ledger.Outcome(r.Context(), holder)
		switch {
		case errors.Is(err, submissions.ErrPruned):
			if wd.State == stateApproved {
				view.State = stateUnknown
			}
		case err != nil:
			idemhttp.WriteError(w, err)
			return
		case done:
			view.Withdrawal = out
			s.keep(r.Context(), tenant, wd, out)
		default:
			view.State = stateInFlight
		}
	}
	idemhttp.WriteJSON(w, http.StatusOK, view, false)
}

// sends handles GET /rail/sends: this process's rail's money movements per
// withdrawal id.
func (s *server) sends(w http.ResponseWriter, _ *http.Request) {
	idemhttp.WriteJSON(w, http.StatusOK, s.rail.Sends(), false)
}

// withdrawal returns the withdrawal of the path's id if tenant owns it, and
// otherwise writes a problem and returns false.
func (s *server) withdrawal(w http.ResponseWriter, r *http.Request, tenant string) (Withdrawal, bool) {
	id := r.PathValue("id")
	wd, ok, err := s.withdrawals.get(r.Context(), tenant, id)
	switch {
	case err != nil:
		s.log.Error("read withdrawal", slog.String("tenant", tenant), slog.String("withdrawal", id), slog.Any("error", err))
		idemhttp.WriteError(w, err)
		return Withdrawal{}, false
	case !ok:
		writeProblem(w, typeNotFound, http.StatusNotFound, fmt.Sprintf("No withdrawal %q.", id))
		return Withdrawal{}, false
	}
	return wd, true
}

// tenantOf returns the request's tenant, "" when it names none. A tenant
// the ledger would refuse, or two of them, is a 400 problem, written here.
func tenantOf(w http.ResponseWriter, r *http.Request) (string, bool) {
	values := r.Header.Values(tenantHeader)
	if len(values) == 0 {
		return "", true
	}
	err := submissions.ValidateTenant(values[0])
	if len(values) > 1 {
		err = fmt.Errorf("%w: more than one", submissions.ErrInvalidTenant)
	}
	if err != nil {
		writeErrorSaying(w, fmt.Errorf("%s: %w", tenantHeader, err))
		return "", false
	}
	return values[0], true
}

// decode reads the request's JSON object into v. Malformed JSON is a 400
// problem; a field of the wrong JSON type a 422; a body over maxBody a 413.
func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	err := dec.Decode(v)
	if err == nil && dec.More() {
		err = errors.New("data after the JSON object")
	}
	var tooLarge *http.MaxBytesError
	var wrongType *json.UnmarshalTypeError
	switch {
	case err == nil:
		return true
	case errors.As(err, &tooLarge):
		writeProblem(w, typeBodyTooLarge, http.StatusRequestEntityTooLarge, fmt.Sprintf("The body is over %d bytes.", maxBody))
	case errors.As(err, &wrongType) && wrongType.Field != "":
		writeErrorSaying(w, fmt.Errorf("%w: %s: not a JSON string", submissions.ErrInvalidFingerprint, wrongType.Field))
	case errors.As(err, &wrongType):
		writeProblem(w, typeMalformed, http.StatusBadRequest, "Malformed JSON: a JSON object is expected.")
	case errors.Is(err, io.EOF):
		writeProblem(w, typeMalformed, http.StatusBadRequest, "The body is empty: a JSON object is expected.")
	default:
		writeProblem(w, typeMalformed, http.StatusBadRequest, "Malformed JSON: "+err.Error()+".")
	}
	return false
}

// jsonNames are the JSON names of the fingerprint's fields, by the Go names
// the ledger's errors give them.
var jsonNames = map[string]string{"WithdrawalID": "id", "Amount": "amount", "Currency": "currency", "Destination": "destination"}

// validate returns nil if the ledger takes w's fingerprint, and otherwise
// the ledger's error wrapping submissions.ErrInvalidFingerprint with the
// field at fault under its JSON name.
func validate(w Withdrawal) error {
	err := w.Fingerprint().Validate()
	if err == nil {
		return nil
	}
	field, why, _ := strings.Cut(strings.TrimPrefix(err.Error(), submissions.ErrInvalidFingerprint.Error()+": "), ": ")
	if name, ok := jsonNames[field]; ok {
		return fmt.Errorf("%w: %s: %s", submissions.ErrInvalidFingerprint, name, why)
	}
	return err
}

// writeProblem writes a problem of payoutd's own type typ, titled after its
// status.
func writeProblem(w http.ResponseWriter, typ string, status int, detail string) {
	idemhttp.WriteProblem(w, idemhttp.Problem{Type: typ, Title: http.StatusText(status), Status: status, Detail: detail})
}

// writeErrorSaying writes the problem of err, a refusal whose text is meant
// for the client, with that text as its detail.
func writeErrorSaying(w http.ResponseWriter, err error) {
	p := idemhttp.ProblemFor(err)
	p.Detail = err.Error()
	idemhttp.WriteProblem(w, p)
}
