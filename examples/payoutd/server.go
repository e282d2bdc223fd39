package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
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

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mux.ServeHTTP(w, r)
}

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
	if err := wd.Fingerprint().Validate(); err != nil {
		writeErrorSaying(w, err) // "invalid fingerprint: Amount: not a positive decimal ..."
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
	_, err = idemhttp.SubmitWaiting(ctx, w, r, s.ledger.Tenant(tenant), http.StatusCreated, wd, s.rail.Send, s.wait)
	if errors.Is(err, submissions.ErrOutcomeUnknown) || errors.Is(err, submissions.ErrOutcomeNotRecorded) {
		s.log.Error("money may have moved: look at the rail, then resolve or release the key",
			slog.String("tenant", tenant), slog.String("key", key),
			slog.String("withdrawal", wd.ID), slog.Any("error", err))
	}
}

// withdrawalView is a withdrawal as GET /withdrawals/{id} shows it.
type withdrawalView struct {
	Withdrawal
	ClaimedBy *string `json:"claimed_by"` // the request key holding it, or null
}

// get handles GET /withdrawals/{id}: the withdrawal, its state and the key
// holding it. A key that holds it without an outcome is in flight: sending,
// or left without an answer by the rail.
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
		view.ClaimedBy, view.State = &holder, stateInFlight
		out, done, err := ledger.Outcome(r.Context(), holder)
		if err != nil {
			idemhttp.WriteError(w, err)
			return
		}
		if done {
			view.Withdrawal = out
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
		writeProblem(w, http.StatusNotFound, fmt.Sprintf("No withdrawal %q.", id))
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
		writeProblem(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("The body is over %d bytes.", maxBody))
	case errors.As(err, &wrongType) && wrongType.Field != "":
		writeErrorSaying(w, fmt.Errorf("%w: %s: not a JSON string", submissions.ErrInvalidFingerprint, wrongType.Field))
	case errors.As(err, &wrongType):
		writeProblem(w, http.StatusBadRequest, "Malformed JSON: a JSON object is expected.")
	case errors.Is(err, io.EOF):
		writeProblem(w, http.StatusBadRequest, "The body is empty: a JSON object is expected.")
	default:
		writeProblem(w, http.StatusBadRequest, "Malformed JSON: "+err.Error()+".")
	}
	return false
}

// writeProblem writes a problem of no type of its own (about:blank), titled
// after its status.
func writeProblem(w http.ResponseWriter, status int, detail string) {
	idemhttp.WriteProblem(w, idemhttp.Problem{Type: "about:blank", Title: http.StatusText(status), Status: status, Detail: detail})
}

// writeErrorSaying writes the problem of err, a refusal whose text is meant
// for the client, with that text as its detail.
func writeErrorSaying(w http.ResponseWriter, err error) {
	p := idemhttp.ProblemFor(err)
	p.Detail = err.Error()
	idemhttp.WriteProblem(w, p)
}
