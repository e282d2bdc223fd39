package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/idemledger/submissions"
	"github.com/idemledger/submissions/admin"
	"github.com/idemledger/submissions/driver"
	"github.com/idemledger/submissions/examples/prommetrics"
	"github.com/idemledger/submissions/idemhttp"
	"github.com/idemledger/submissions/pgstore"
)

// tenantHeader names the tenant of a request: a stand-in for the tenant a
// real service takes from its authentication.
const tenantHeader = "X-Tenant"

// maxBody caps a request body, on every endpoint: a withdrawal's fields fit
// many times over.
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

// titles are the titles of payoutd's own problems, by type.
var titles = map[string]string{
	typeNotFound:         "Not found",
	typeMethodNotAllowed: "Method not allowed",
	typeMalformed:        "Malformed request",
	typeBodyTooLarge:     "Request body too large",
	typeInvalidOutcome:   "Invalid outcome",
	typeOutcomeConflict:  "Outcome conflicts with the claim",
	typeClaimChanged:     "Claim changed",
	typeHorizonTooRecent: "Prune horizon too recent",
}

// config is what a server is made of.
type config struct {
	Pool        *pgxpool.Pool // PostgreSQL; nil keeps everything in memory
	Rail        *rail
	SendTimeout time.Duration // how long a send may run
	Wait        time.Duration // how long a repeat of a key in flight waits for its outcome before a 409; 0 answers 409 at once
	Logger      *slog.Logger  // nil: slog.Default()
	Fault       fault         // the step of a send at which the process kills itself (PAYOUTD_FAULT); "" for none
}

// retryAfter is the Retry-After of a key whose send runs: when a send
// started then has answered, the rail's latency, at most the send timeout
// (idemhttp rounds it up to whole seconds, and makes 0 one second).
func (c config) retryAfter() time.Duration {
	return min(c.Rail.latency, c.SendTimeout)
}

// createKeysTable is the table of the request keys of POST /withdrawals,
// apart from the ledger's (the keys of sends): pgstore's table, holding
// each key's response (idemhttp.Exchange).
const createKeysTable = "payoutd_create_keys"

// server is payoutd's HTTP API.
type server struct {
	ledger      *submissions.Submissions[Withdrawal]
	store       driver.Store[Withdrawal] // the ledger's, read to tell a send that runs from one that ended without an answer
	withdrawals withdrawals
	// statesInTx: the ledger's store moves the withdrawals' states with
	// its claims, in their transactions (PostgreSQL: withdrawalHooks); in
	// memory, payoutd keeps an outcome's state after the fact (keep).
	statesInTx bool
	// createTx runs a POST /withdrawals under an Idempotency-Key: the
	// withdrawal's insert and the key's response in one transaction
	// (PostgreSQL), or one submit of an in-memory ledger of its own.
	createTx    idemhttp.Transactor[creator]
	fault       fault
	rail        *rail
	sendTimeout time.Duration
	repeat      idemhttp.SubmitOptions // Wait and RetryAfter of a repeat of a key whose send runs
	log         *slog.Logger
	mux         *http.ServeMux
}

// newServer returns the API over cfg's stores, with metrics of its own. With
// a pool it brings the ledger's table and the withdrawals table up to date
// first.
func newServer(ctx context.Context, cfg config) (*server, error) {
	s := &server{rail: cfg.Rail, sendTimeout: cfg.SendTimeout, log: cfg.Logger, mux: http.NewServeMux(), fault: cfg.Fault,
		repeat: idemhttp.SubmitOptions{Wait: cfg.Wait, RetryAfter: cfg.retryAfter()}}
	if s.log == nil {
		s.log = slog.Default()
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	obs, err := prommetrics.New(reg, // no tenant label: any client names any tenant here
		prommetrics.WithKeysInFlight(func(ctx context.Context, q admin.InFlightQuery) ([]admin.Claim, error) {
			return s.admin().InFlight(ctx, q) // s.ledger is set below, before the first scrape
		}))
	if err != nil {
		return nil, err
	}
	opts := []submissions.Option{submissions.WithLogger(s.log), submissions.WithObserver(obs), submissions.WithOutcomeCheck(checkOutcome)}
	if cfg.Pool == nil {
		s.store = submissions.NewMemoryStore[Withdrawal]()
		s.ledger = submissions.NewWithStore(s.store, opts...)
		mem := &memWithdrawals{}
		s.withdrawals = mem
		s.createTx = memCreateTx(submissions.New[idemhttp.Exchange](submissions.WithLogger(s.log)), mem)
	} else {
		store, err := pgstore.New[Withdrawal](cfg.Pool, pgstore.WithHooks(withdrawalHooks(cfg.Fault)))
		if err != nil {
			return nil, err
		}
		if err := store.Migrate(ctx); err != nil {
			return nil, err
		}
		ws := &pgWithdrawals{pool: cfg.Pool}
		if err := ws.migrate(ctx, pgx.Identifier{pgstore.DefaultTable}.Sanitize()); err != nil {
			return nil, err
		}
		keys, err := pgstore.New[idemhttp.Exchange](cfg.Pool, pgstore.WithTable(createKeysTable))
		if err != nil {
			return nil, err
		}
		if err := keys.Migrate(ctx); err != nil {
			return nil, err
		}
		s.store = store
		s.ledger = submissions.NewWithStore[Withdrawal](store, opts...)
		s.withdrawals = ws
		s.statesInTx = true
		s.createTx = pgCreateTx(keys)
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
// problems like every other error. The body of a request it serves is read
// whole first, whether its handler reads it or not: over maxBody it is a
// 413, and nothing else happens.
func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	direct := s.emptyKeyAction(r)
	if h, pattern := s.mux.Handler(r); pattern == "" && direct == nil {
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
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		if _, tooLarge := errors.AsType[*http.MaxBytesError](err); tooLarge {
			writeProblem(w, typeBodyTooLarge, http.StatusRequestEntityTooLarge,
				fmt.Sprintf("The request body is over %d bytes; this request changed nothing.", maxBody))
			return
		}
		writeProblem(w, typeMalformed, http.StatusBadRequest, "The request body could not be read; this request changed nothing.")
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	if direct != nil {
		direct.ServeHTTP(w, r)
		return
	}
	s.mux.ServeHTTP(w, r)
}

// emptyKeyAction returns the handler of an admin action on an empty key
// (POST /admin/claims//release), which the mux would take for another path:
// the action refuses the key as every door does (invalid-key). It returns
// nil for any other request.
func (s *server) emptyKeyAction(r *http.Request) http.Handler {
	if r.Method != http.MethodPost {
		return nil
	}
	switch r.URL.Path {
	case "/admin/claims//resolve":
		return http.HandlerFunc(s.adminResolve)
	case "/admin/claims//release":
		return http.HandlerFunc(s.adminRelease)
	}
	return nil
}

// routeMiss takes the mux's answer to a request it has no route for, for
// ServeHTTP to keep its Allow field.
type routeMiss struct{ header http.Header }

func (m *routeMiss) Header() http.Header         { return m.header }
func (m *routeMiss) Write(b []byte) (int, error) { return len(b), nil }
func (m *routeMiss) WriteHeader(int)             {}

// create handles POST /withdrawals: a new withdrawal, approved, with an id of
// the server's. Under an Idempotency-Key the key and the withdrawal are
// written together: a repeat of the request gets the first 201, the same
// withdrawal, replayed; the key with another body a 422 key-reused. Without
// one, each call creates a withdrawal. The key's syntax and then the body
// are checked before the key is used: a request refused for either leaves
// the key unused.
func (s *server) create(w http.ResponseWriter, r *http.Request) {
	if _, ok := queryOf(w, r); !ok { // it takes none
		return
	}
	tenant, ok := tenantOf(w, r)
	if !ok {
		return
	}
	keyed := len(r.Header.Values("Idempotency-Key")) > 0
	if keyed {
		if _, err := idemhttp.Key(r.Header); err != nil {
			idemhttp.WriteError(w, err)
			return
		}
	}
	body, err := io.ReadAll(r.Body) // read whole, and capped, by ServeHTTP
	if err != nil {
		writeProblem(w, typeMalformed, http.StatusBadRequest, "The request body could not be read; this request changed nothing.")
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	wd, ok := newWithdrawal(w, r)
	if !ok {
		return
	}
	if !keyed {
		if err := s.withdrawals.create(r.Context(), tenant, wd); err != nil {
			s.log.Error("create withdrawal", slog.String("tenant", tenant), slog.Any("error", err))
			idemhttp.WriteError(w, err)
			return
		}
		w.Header().Set("Location", "/withdrawals/"+wd.ID)
		idemhttp.WriteJSON(w, http.StatusCreated, wd, false)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	res := &recorded{header: http.Header{}}
	idemhttp.InTx(s.createTx, func(*http.Request) string { return tenant },
		func(ctx context.Context, c creator, _ *http.Request, _ []byte) (int, any, error) {
			if err := c.create(ctx, tenant, wd); err != nil {
				s.log.Error("create withdrawal", slog.String("tenant", tenant), slog.Any("error", err))
				return 0, nil, err
			}
			return http.StatusCreated, wd, nil
		}).ServeHTTP(res, r)
	h := w.Header()
	for name, values := range res.header {
		h[name] = values
	}
	if res.status == http.StatusCreated { // the first's withdrawal, on a replay as well
		var created Withdrawal
		if json.Unmarshal(res.body.Bytes(), &created) == nil && created.ID != "" {
			h.Set("Location", "/withdrawals/"+created.ID)
		}
	}
	w.WriteHeader(res.status)
	_, _ = w.Write(res.body.Bytes())
}

// newWithdrawal reads the request's body as a new withdrawal, approved,
// with a random id of the server's. A body that is not one (not one JSON
// object, or a field missing, not a JSON string or not valid) is a problem,
// written here, which lists every field at fault at once.
func newWithdrawal(w http.ResponseWriter, r *http.Request) (Withdrawal, bool) {
	var in struct { // each member as sent, so that every field at fault is named at once
		Amount      json.RawMessage `json:"amount"`
		Currency    json.RawMessage `json:"currency"`
		Destination json.RawMessage `json:"destination"`
	}
	if !decode(w, r, &in) {
		return Withdrawal{}, false
	}
	wd := Withdrawal{ID: "wd_" + randomHex(16), State: stateApproved}
	var faults []idemhttp.FieldError
	for _, f := range []struct {
		name string
		raw  json.RawMessage
		to   *string
	}{{"amount", in.Amount, &wd.Amount}, {"currency", in.Currency, &wd.Currency}, {"destination", in.Destination, &wd.Destination}} {
		fault := stringMember(f.raw, f.to)
		if fault == "" {
			fault = fieldFault(f.name, *f.to)
		}
		if fault != "" {
			faults = append(faults, idemhttp.FieldError{Pointer: "#/" + f.name, Detail: fault})
		}
	}
	if len(faults) > 0 {
		p := idemhttp.ProblemFor(submissions.ErrInvalidFingerprint)
		p.Errors = faults
		idemhttp.WriteProblem(w, p)
		return Withdrawal{}, false
	}
	return wd, true
}

// recorded is a response kept to be written later: create's from
// idemhttp.InTx, to which it adds Location.
type recorded struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recorded) Header() http.Header { return r.header }

func (r *recorded) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
}

func (r *recorded) Write(b []byte) (int, error) {
	r.WriteHeader(http.StatusOK)
	return r.body.Write(b)
}

// pgCreateTx is the Transactor of creates on PostgreSQL: pgstore.Submit on
// keys, whose transaction holds the key's claim, the withdrawal's insert
// and the key's response. A repeat of a key whose first request is still
// in its transaction waits for it, and replays its response if it
// committed.
func pgCreateTx(keys *pgstore.Store[idemhttp.Exchange]) idemhttp.Transactor[creator] {
	return func(ctx context.Context, tenant, key string, req idemhttp.Exchange,
		work func(context.Context, creator, idemhttp.Exchange) (idemhttp.Exchange, error)) (idemhttp.Exchange, bool, error) {
		return pgstore.Submit(ctx, keys, tenant, key, req, func(ctx context.Context, tx pgx.Tx, req idemhttp.Exchange) (idemhttp.Exchange, error) {
			return work(ctx, txCreator{tx}, req)
		})
	}
}

// memCreateTx is the Transactor of creates in memory: a submit of keys, an
// in-memory ledger of its own, whose send creates the withdrawal in ws and
// answers the response. A create that fails wrote nothing: its claim is
// released (as a send that moved nothing), and the key stays unused. A
// repeat of a key whose first request runs waits for its response, as on
// PostgreSQL. The ledger calls are not cut short when the client hangs
// up: a withdrawal created is always recorded as its key's response.
func memCreateTx(keys *submissions.Submissions[idemhttp.Exchange], ws *memWithdrawals) idemhttp.Transactor[creator] {
	return func(ctx context.Context, tenant, key string, req idemhttp.Exchange,
		work func(context.Context, creator, idemhttp.Exchange) (idemhttp.Exchange, error)) (idemhttp.Exchange, bool, error) {
		ledger := keys.Tenant(tenant)
		for {
			var failed error
			out, replayed, err := ledger.SubmitOrReplay(context.WithoutCancel(ctx), key, req,
				func(ctx context.Context, req idemhttp.Exchange) (idemhttp.Exchange, error) {
					out, err := work(ctx, ws, req)
					if err != nil {
						failed = err
						return out, fmt.Errorf("create: %w: %w", submissions.ErrNotSent, err)
					}
					return out, nil
				})
			if failed != nil {
				return idemhttp.Exchange{}, false, failed
			}
			if !errors.Is(err, submissions.ErrSubmissionInFlight) || errors.Is(err, submissions.ErrAbandoned) {
				return out, replayed, err
			}
			out, err = ledger.Wait(ctx, key)
			if errors.Is(err, submissions.ErrUnknownKey) {
				continue // released: its create failed; this one tries
			}
			return out, err == nil, err
		}
	}
}

// submit handles POST /withdrawals/{id}/submit: the withdrawal sent to the
// rail at most once, its outcome replayed to every repeat of the key.
func (s *server) submit(w http.ResponseWriter, r *http.Request) {
	if _, ok := queryOf(w, r); !ok { // it takes none
		return
	}
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
	send := func(ctx context.Context, wd Withdrawal) (Withdrawal, error) {
		s.fault.at(faultBeforeRail) // the claim committed
		return s.rail.Send(ctx, wd)
	}
	if s.fault == faultBeforeAnswer {
		w = &faultWriter{ResponseWriter: w, f: s.fault}
	}
	out, err := idemhttp.SubmitWith(ctx, w, r, s.ledger.Tenant(tenant), http.StatusCreated, wd, send, s.repeat)
	switch {
	case err == nil && !s.statesInTx:
		s.keep(ctx, tenant, wd, out)
	case errors.Is(err, submissions.ErrOutcomeUnknown) || errors.Is(err, submissions.ErrOutcomeNotRecorded):
		s.log.Error(unrecordedAdvice(err), slog.String("tenant", tenant), slog.String("key", key),
			slog.String("withdrawal", wd.ID), slog.Any("error", err))
	}
}

// unrecordedAdvice is what an operator must do after a submit whose
// outcome was not recorded, err: the key's claim may be gone by then.
func unrecordedAdvice(err error) string {
	switch {
	case errors.Is(err, submissions.ErrReleasedMeanwhile):
		return "money may have moved after the key was released: look at the rail before the withdrawal is sent again (the key is free)"
	case errors.Is(err, submissions.ErrResolvedMeanwhile):
		return "the rail answered otherwise than the outcome recorded meanwhile: look at the rail, and correct the withdrawal by hand"
	case errors.Is(err, submissions.ErrOutcomeNotRecorded):
		return "the rail answered and the answer was not recorded: money moved, so do not release the key; look at the rail, then resolve the key with what it shows"
	}
	return "money may have moved: look at the rail, then resolve or release the key"
}

// faultWriter kills the process (faultBeforeAnswer) when the submit's
// answer is about to be written: its outcome, if it has one, committed.
type faultWriter struct {
	http.ResponseWriter
	f fault
}

func (w *faultWriter) WriteHeader(status int) {
	w.f.at(faultBeforeAnswer)
	w.ResponseWriter.WriteHeader(status)
}

func (w *faultWriter) Write(b []byte) (int, error) {
	w.f.at(faultBeforeAnswer)
	return w.ResponseWriter.Write(b)
}

// keep stores the state of out, an outcome of tenant's withdrawal kept as
// kept, unless kept has it already: GET answers from it once the ledger has
// pruned the outcome. A failure is logged; the next request that finds the
// outcome stores it. On PostgreSQL the outcome's transaction stored it
// already, and only a GET calls keep: to repair a withdrawal whose outcome
// was written past payoutd's hooks (by submissionsctl).
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
// holding it. A key that holds it without an outcome is in flight while its
// send is not known to have ended, and awaits an operator once it ended
// without an answer. The holder key's outcome comes from the ledger, and
// once the ledger has pruned it, from payoutd's own store.
func (s *server) get(w http.ResponseWriter, r *http.Request) {
	if _, ok := queryOf(w, r); !ok { // it takes none
		return
	}
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
	if !claimed && wd.State == stateSending { // released since it was read: approved now
		view.State = stateApproved
	}
	if claimed {
		view.ClaimedBy = &holder
		out, done, err := ledger.Outcome(r.Context(), holder)
		switch {
		case errors.Is(err, submissions.ErrPruned):
			if wd.State == stateApproved || wd.State == stateSending {
				view.State = stateUnknown
			}
		case err != nil:
			idemhttp.WriteError(w, err)
			return
		case done: // the outcome's state, on the withdrawal as created (an operator's outcome may spell its amount otherwise)
			view.State, view.Tx, view.FailureReason = out.State, out.Tx, out.FailureReason
			s.keep(r.Context(), tenant, wd, out)
		default:
			view.State = stateInFlight
			rec, found, err := s.store.Lookup(r.Context(), tenant, holder)
			if err != nil {
				s.log.Error("read a claim", slog.String("tenant", tenant), slog.String("key", holder), slog.Any("error", err))
				idemhttp.WriteError(w, fmt.Errorf("%w: %w", submissions.ErrStoreFailed, err))
				return
			}
			if found && rec.Abandoned {
				view.State = stateAwaitingOperator
			}
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
	p := idemhttp.ProblemFor(submissions.ErrInvalidTenant)
	switch {
	case len(values) > 1:
		p.Detail = "The " + tenantHeader + " header is repeated: a request names one tenant."
	case submissions.ValidateTenant(values[0]) != nil:
		p.Detail = fmt.Sprintf("The %s header is not a tenant: a tenant is at most %d bytes of UTF-8, without NUL bytes.",
			tenantHeader, driver.MaxTenantLen)
	default:
		return values[0], true
	}
	idemhttp.WriteProblem(w, p)
	return "", false
}

// decode reads the request's JSON object into v. Malformed JSON is a 400
// problem; a field of the wrong JSON type a 422.
func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(r.Body)
	err := dec.Decode(v)
	if err == nil && dec.More() {
		writeProblem(w, typeMalformed, http.StatusBadRequest, "Malformed JSON: data after the JSON object.")
		return false
	}
	syntax, isSyntax := errors.AsType[*json.SyntaxError](err)
	wrongType, isWrongType := errors.AsType[*json.UnmarshalTypeError](err)
	switch {
	case err == nil:
		return true
	case isWrongType && wrongType.Field != "":
		writeErrorSaying(w, fmt.Errorf("%w: %s: not a JSON string", submissions.ErrInvalidFingerprint, wrongType.Field))
	case errors.Is(err, io.EOF):
		writeProblem(w, typeMalformed, http.StatusBadRequest, "The body is empty: a JSON object is expected.")
	case isSyntax:
		writeProblem(w, typeMalformed, http.StatusBadRequest, fmt.Sprintf("Malformed JSON at byte %d: a JSON object is expected.", syntax.Offset))
	case errors.Is(err, io.ErrUnexpectedEOF):
		writeProblem(w, typeMalformed, http.StatusBadRequest, "Malformed JSON: the body ends inside the JSON object.")
	default:
		writeProblem(w, typeMalformed, http.StatusBadRequest, "Malformed JSON: a JSON object is expected.")
	}
	return false
}

// stringMember sets *to to the JSON string raw, a member of a request's
// object, and returns "", or else what is wrong with it, for the client.
func stringMember(raw json.RawMessage, to *string) string {
	switch {
	case raw == nil || string(raw) == "null":
		return "is missing"
	case json.Unmarshal(raw, to) != nil:
		return "is not a JSON string"
	}
	return ""
}

// fieldRules are the ledger's rules on the fields of a withdrawal that a
// client sends, by their JSON names, in words for the client.
var fieldRules = map[string]struct {
	set  func(*submissions.Fingerprint, string)
	rule string
}{
	"amount": {func(fp *submissions.Fingerprint, v string) { fp.Amount = v },
		fmt.Sprintf(`must be a positive decimal such as "25.00": digits with at most one point, no sign or exponent, at most %d characters`, driver.MaxAmountLen)},
	"currency": {func(fp *submissions.Fingerprint, v string) { fp.Currency = v },
		`must be 2 to 12 ASCII letters or digits, such as "USDC"`},
	"destination": {func(fp *submissions.Fingerprint, v string) { fp.Destination = v },
		fmt.Sprintf("must be 1 to %d bytes of UTF-8, without NUL bytes", driver.MaxDestinationLen)},
}

// validFingerprint is valid in every field: fieldFault changes one.
var validFingerprint = submissions.Fingerprint{WithdrawalID: "wd", Amount: "1", Currency: "XX", Destination: "x"}

// fieldFault returns what is wrong with value as the withdrawal's field of
// JSON name name, by the ledger's own rule, or "" if nothing is. Checked
// one field at a time, every field at fault is named, where the ledger's
// error names the first.
func fieldFault(name, value string) string {
	f := fieldRules[name]
	fp := validFingerprint
	f.set(&fp, value)
	if fp.Validate() != nil {
		return f.rule
	}
	return ""
}

// writeProblem writes a problem of payoutd's own type typ, with the type's
// title (a type without one is titled after its status).
func writeProblem(w http.ResponseWriter, typ string, status int, detail string) {
	title, ok := titles[typ]
	if !ok {
		title = http.StatusText(status)
	}
	idemhttp.WriteProblem(w, idemhttp.Problem{Type: typ, Title: title, Status: status, Detail: detail})
}

// writeErrorSaying writes the problem of err, a refusal whose text is meant
// for the client, with that text as its detail.
func writeErrorSaying(w http.ResponseWriter, err error) {
	p := idemhttp.ProblemFor(err)
	p.Detail = err.Error()
	idemhttp.WriteProblem(w, p)
}
