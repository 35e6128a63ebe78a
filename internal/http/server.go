// Package http is the HTTP transport of subagentd: the v1 REST API of
// api/openapi.yaml, its Server-Sent Event streams, problem+json errors, Prometheus
// metrics, the OpenAPI document with Swagger UI, and the dashboard.
// Handlers decode and validate wire structs, call the subagent seam or the
// store, and encode the answer; they hold no domain logic.
package http

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-playground/validator/v10"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/subagentd/subagentd/internal/children"
	"github.com/subagentd/subagentd/internal/governance"
	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/roots"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
	"github.com/subagentd/subagentd/internal/telemetry"
)

// Service is the part of the subagent seam the API drives;
// *subagent.Service implements it.
type Service interface {
	// Provider returns the provider registered as name; ok is false when
	// there is none.
	Provider(name string) (p subagent.Provider, ok bool)
	// Providers returns the registered providers in registration order.
	Providers() []subagent.Provider
	// Start validates req, has the provider publish the child, records the
	// run and its subagent/start, and returns its handle. Returns the seam's
	// *subagent.Error codes (NO_PROVIDER, UNSUPPORTED_CAPABILITY,
	// INVALID_MAX_DEPTH, UNSUPPORTED_SCHEMA, DEPTH_EXCEEDED, DRAINING, …).
	Start(ctx context.Context, provider string, req subagent.Request) (*subagent.RunHandle, error)
	// Run returns the live handle of a run this process started in ctx's
	// tenant and has not disposed.
	Run(ctx context.Context, runID string) (*subagent.RunHandle, bool)
	// CancelRun stops a live run or activation, whichever engine and
	// replica drives it; a settled run is a no-op. RUN_NOT_FOUND for an
	// unknown run.
	CancelRun(ctx context.Context, runID string) error
	// DisposeRun stops a live run or activation, whichever engine and
	// replica drives it, waits until it settled and marks it disposed.
	// Idempotent. RUN_NOT_FOUND for an unknown run.
	DisposeRun(ctx context.Context, runID string) error
}

var _ Service = (*subagent.Service)(nil)

// Continuations is the continuation manager the continuable routes drive
// (/v1/subagents, /v1/tasks, the children and descendants listings);
// *children.Manager implements it. Its errors are *subagent.Error values
// whose codes the problem table maps.
type Continuations interface {
	// StartContinuable creates a continuable child and accepts its prompt.
	StartContinuable(ctx context.Context, req children.ContinuableRequest) (children.ContinuableStarted, error)
	// Followup delivers content to a continuable child of parentSessionID,
	// steered into its running turn or started as a new task.
	Followup(ctx context.Context, parentSessionID, childID string, content []model.Block, src sessionlog.Source) (children.FollowupResult, error)
	// FollowupAsync is Followup answered once the content is accepted: it
	// returns the message id, and the route follows as lifecycle event
	// message/routed.
	FollowupAsync(ctx context.Context, parentSessionID, childID string, content []model.Block, src sessionlog.Source) (string, error)
	// Interrupt stops the current turn of a continuable child of
	// parentSessionID.
	Interrupt(ctx context.Context, parentSessionID, childID string) error
	// Dispose disposes a continuable child of parentSessionID: its live
	// activation settles, its agent is released and later followups get
	// DISPOSED. Idempotent.
	Dispose(ctx context.Context, parentSessionID, childID string) error
	// Child returns a child's header, identity, activity and task.
	Child(ctx context.Context, childID string) (children.ChildInfo, error)
	// Children lists the direct subagent children of parentID.
	Children(ctx context.Context, parentID string) ([]children.ListEntry, error)
	// Descendants lists every subagent below rootID in pre-order.
	Descendants(ctx context.Context, rootID string) ([]children.ListEntry, error)
	// Task returns the activation run of a task.
	Task(ctx context.Context, taskID string) (store.Run, error)
	// SteerActivation steers content into the running turn of the live
	// activation runID and returns the message id once a model step
	// admitted it: RUN_NOT_FOUND when runID is no live activation here,
	// STEER_REJECTED when it was not admitted (never queued or resumed).
	SteerActivation(ctx context.Context, runID string, content []model.Block) (string, error)
}

var _ Continuations = (*children.Manager)(nil)

// Roots runs the agents of root sessions (POST /v1/sessions/{id}/messages);
// *roots.Manager implements it.
type Roots interface {
	// Prompt queues content as the next turn of a root session's agent and
	// returns the message id once it is durably accepted.
	Prompt(ctx context.Context, sessionID string, content []model.Block) (string, error)
}

// Trees carries out tree control (POST /v1/sessions/{id}/cancel, DELETE
// /v1/sessions/{id}); *governance.Trees implements it.
type Trees interface {
	// Cancel settles every live run and activation below a session, and
	// a root's running turn, and returns how many it stopped.
	Cancel(ctx context.Context, id string) (int, error)
	// Dispose cancels a root's tree, disposes its continuable children
	// and the root, which then refuses prompts. Idempotent.
	Dispose(ctx context.Context, id string) error
}

var _ Trees = (*governance.Trees)(nil)

// Sessions creates root sessions and tells which sessions are working;
// *roots.Sessions implements it.
type Sessions interface {
	// Create creates a root session and returns its header as stored.
	Create(ctx context.Context, p roots.CreateParams) (store.Session, error)
	// Activity reports which of rows are working.
	Activity(ctx context.Context, rows []store.Session) (map[string]bool, error)
	// Get returns a session as GET /v1/sessions/{id} shows it
	// (store.ErrNotFound for none).
	Get(ctx context.Context, id string) (roots.View, error)
}

var _ Sessions = (*roots.Sessions)(nil)

// Defaults of Config.
const (
	DefaultHeartbeat    = 15 * time.Second
	DefaultWriteTimeout = 10 * time.Second
	DefaultMaxWait      = 300 * time.Second
	DefaultBodyLimit    = 1 << 20
	DefaultRingSize     = 1024
)

// Config configures a Server. Service, Sessions, Store and Logger are
// required; zero limits take the defaults above.
type Config struct {
	Service Service
	// Sessions creates root sessions (POST /v1/sessions, the MCP face's
	// root) and answers the activity of listed sessions.
	Sessions Sessions
	// Continuations serves continuable children and the children and
	// descendants listings; nil answers those routes NOT_READY (503).
	Continuations Continuations
	// Roots runs root sessions' agents; nil answers POST
	// /v1/sessions/{id}/messages NOT_READY (503).
	Roots Roots
	// Trees carries out tree cancel and dispose; nil answers those routes
	// NOT_READY (503).
	Trees Trees
	// Routes are the model routes of in-process agents: /v1/providers shows
	// the default route of in-process providers. nil shows no model.
	Routes *model.Routes
	// Webhooks manages webhook endpoints; nil answers the /v1/webhooks
	// routes NOT_READY (503).
	Webhooks Webhooks
	// Usage answers GET /v1/sessions/{id}/usage; nil answers it NOT_READY
	// (503).
	Usage Usage
	// Limits answers a tree's limits (GET /v1/sessions/{id}'s limits,
	// PATCH /v1/sessions/{id}/limits); nil shows none and answers the
	// PATCH NOT_READY (503).
	Limits TreeLimits
	// Approvals lists and decides approvals; nil answers the /v1/approvals
	// routes NOT_READY (503).
	Approvals Approvals
	// Store is where sessions, logs, runs and the lifecycle log are read.
	Store  store.Store
	Logger *slog.Logger
	// Registry receives the HTTP and SSE metrics and is served at /metrics;
	// nil means a new private registry (see NewRegistry).
	Registry *prometheus.Registry
	// Metrics counts idempotent replays; nil counts nothing.
	Metrics *telemetry.Metrics
	// Tracing wraps the handler in an otelhttp span per request (named by
	// its route pattern), child of the caller's traceparent; off, requests
	// pay nothing for traces.
	Tracing bool
	// Version is reported by /healthz.
	Version string
	// Dashboard holds the dashboard's static files (index.html at its root),
	// served at "/"; nil serves a placeholder page. The files must not
	// change while the server runs: each one's ETag is worked out once.
	Dashboard fs.FS
	// Heartbeat is the interval of SSE comment heartbeats.
	Heartbeat time.Duration
	// WriteTimeout bounds each SSE write; a subscriber that cannot take a
	// frame within it is disconnected.
	WriteTimeout time.Duration
	// MaxWait bounds ?wait and Prefer: wait=N.
	MaxWait time.Duration
	// BodyLimit bounds request bodies (413 PAYLOAD_TOO_LARGE beyond).
	BodyLimit int64
	// RingSize is how many recent events each SSE topic keeps in memory; a
	// subscriber that falls further behind is disconnected.
	RingSize int

	// Tokens are the API tokens (docs/architecture.md §10): with any, every /v1 route,
	// /readyz and /metrics need a bearer token or a sign-in cookie, and
	// the token's tenant scopes the request. Without tokens every request
	// is the default tenant's and only loopback Host headers are answered.
	Tokens []store.Token
	// CORSOrigins are the origins (scheme://host[:port]) whose pages may
	// call the API; none turns CORS off.
	CORSOrigins []string
	// RateLimit is the requests per second each tenant may send (bursts of
	// twice that); 0 means DefaultRateLimit, negative no limit.
	RateLimit float64
	// MaxStreams caps the open SSE streams of each tenant; 0 means
	// DefaultMaxStreams, negative no cap.
	MaxStreams int

	// MCP builds the handler of /mcp, the MCP face, over the server's
	// operations (operations.go); it is served behind the same guard as
	// /v1. nil answers /mcp NOT_READY (503).
	MCP func(*Server) http.Handler
	// A2A builds the A2A face over the server's operations
	// (operations.go); its routes are served behind the same guard as /v1,
	// its agent cards in public. nil answers its routes NOT_READY (503).
	A2A func(*Server) A2A
}

// Server serves the API. Create it with NewServer, serve Handler, and call
// Shutdown when the process stops.
type Server struct {
	svc         Service
	sessions    Sessions
	conts       Continuations
	roots       Roots
	trees       Trees
	hooks       Webhooks
	usage       Usage
	limits      TreeLimits
	approvalSvc Approvals
	modelRoutes *model.Routes
	store       store.Store
	log         *slog.Logger
	version     string
	dashboard   fs.FS
	dashTags    sync.Map // dashboard file name → its ETag
	heartbeat   time.Duration
	writeTO     time.Duration
	maxWait     time.Duration
	bodyLimit   int64
	tokens      []store.Token
	corsOrigins []string
	limiter     *limiter
	streamCap   *counter
	mcp         http.Handler // nil: Config.MCP was not set
	a2a         A2A          // nil: Config.A2A was not set

	registry *prometheus.Registry
	metrics  *metrics
	domain   *telemetry.Metrics
	tracing  bool
	validate *validator.Validate
	broker   *broker
	router   chi.Router

	// runCtx is the parent of every run started over HTTP: runs outlive
	// their request and end through Service.Shutdown, not through it.
	runCtx context.Context
	// done is closed by Shutdown: streams flush what is stored and end,
	// waits return early, /readyz answers DRAINING.
	done chan struct{}
	// streamMu orders stream registration against Shutdown, so that no
	// stream is added to streams once Shutdown waits for it.
	streamMu sync.Mutex
	closed   bool
	streams  sync.WaitGroup
}

// NewServer returns a Server for cfg.
func NewServer(cfg Config) *Server {
	reg := cfg.Registry
	if reg == nil {
		reg = NewRegistry()
	}
	s := &Server{
		svc:         cfg.Service,
		sessions:    cfg.Sessions,
		conts:       cfg.Continuations,
		roots:       cfg.Roots,
		trees:       cfg.Trees,
		hooks:       cfg.Webhooks,
		usage:       cfg.Usage,
		limits:      cfg.Limits,
		approvalSvc: cfg.Approvals,
		modelRoutes: cfg.Routes,
		store:       cfg.Store,
		log:         cfg.Logger,
		version:     cfg.Version,
		dashboard:   cfg.Dashboard,
		heartbeat:   orDefault(cfg.Heartbeat, DefaultHeartbeat),
		writeTO:     orDefault(cfg.WriteTimeout, DefaultWriteTimeout),
		maxWait:     orDefault(cfg.MaxWait, DefaultMaxWait),
		bodyLimit:   orDefault(cfg.BodyLimit, DefaultBodyLimit),
		tokens:      cfg.Tokens,
		corsOrigins: cfg.CORSOrigins,
		limiter:     newLimiter(orDefault(cfg.RateLimit, DefaultRateLimit)),
		streamCap:   &counter{max: orDefault(cfg.MaxStreams, DefaultMaxStreams), n: map[string]int{}},
		registry:    reg,
		metrics:     newMetrics(reg),
		domain:      cfg.Metrics,
		tracing:     cfg.Tracing,
		validate:    newValidator(),
		runCtx:      context.Background(),
		done:        make(chan struct{}),
	}
	s.broker = newBroker(cfg.Store, cfg.Logger, orDefault(cfg.RingSize, DefaultRingSize))
	if cfg.MCP != nil {
		s.mcp = cfg.MCP(s)
	}
	if cfg.A2A != nil {
		s.a2a = cfg.A2A(s)
	}
	s.router = s.routes()
	return s
}

func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// Handler returns the router, traced when Config.Tracing is set.
func (s *Server) Handler() http.Handler {
	if s.tracing {
		return telemetry.HTTPHandler(s.router)
	}
	return s.router
}

// Shutdown ends every SSE stream after it sent what is already stored, ends
// pending waits, and waits until the streams and their store readers are
// gone or ctx ends. Call it after Service.Shutdown so that the streams carry
// the runs' final subagent/end events. Idempotent.
func (s *Server) Shutdown(ctx context.Context) error {
	s.streamMu.Lock()
	if !s.closed {
		s.closed = true
		close(s.done)
	}
	s.streamMu.Unlock()
	finished := make(chan struct{})
	go func() {
		s.streams.Wait()
		s.broker.close()
		close(finished)
	}()
	select {
	case <-finished:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("http server shutdown: %w", ctx.Err())
	}
}

// handlerFunc is a handler that returns its error for writeError.
type handlerFunc func(w http.ResponseWriter, r *http.Request) error

// h adapts f: a returned error is written as problem+json.
func (s *Server) h(f handlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := f(w, r); err != nil {
			s.writeError(w, r, err)
		}
	}
}

// routes is the route table; api/openapi.yaml describes exactly these
// routes (TestRoutes_MatchSpec).
func (s *Server) routes() chi.Router {
	r := chi.NewRouter()
	r.Use(s.linger, s.metrics.middleware, s.recoverer, s.guard)
	r.NotFound(s.h(func(w http.ResponseWriter, r *http.Request) error {
		return subagent.Errorf(codeNotFound, "no route for %s %s", r.Method, r.URL.Path)
	}))
	r.MethodNotAllowed(s.h(func(w http.ResponseWriter, r *http.Request) error {
		return subagent.Errorf(codeMethodNotAllowed, "%s is not allowed on %s", r.Method, r.URL.Path)
	}))

	r.Route("/v1", func(r chi.Router) {
		r.Use(s.idempotent)
		r.Get("/auth/session", s.h(s.getAuthSession))
		r.Post("/auth/session", s.h(s.createAuthSession))
		r.Delete("/auth/session", s.h(s.deleteAuthSession))

		r.Get("/providers", s.h(s.listProviders))
		r.Get("/providers/{name}", s.h(s.getProvider))

		r.Post("/sessions", s.h(s.createSession))
		r.Get("/sessions", s.h(s.listSessions))
		r.Get("/sessions/{id}", s.h(s.getSession))
		r.Delete("/sessions/{id}", s.h(s.disposeSession))
		r.Post("/sessions/{id}/cancel", s.h(s.cancelSession))
		r.Get("/sessions/{id}/events", s.h(s.listSessionEvents))
		r.Post("/sessions/{id}/messages", s.h(s.promptSession))
		r.Get("/sessions/{id}/children", s.h(s.listSessionChildren))
		r.Get("/sessions/{id}/descendants", s.h(s.listSessionDescendants))
		r.Get("/sessions/{id}/usage", s.h(s.getSessionUsage))
		r.Patch("/sessions/{id}/limits", s.h(s.patchSessionLimits))
		r.Get("/sessions/{id}/stream", s.h(s.streamSession))

		r.Post("/runs", s.h(s.createRun))
		r.Get("/runs", s.h(s.listRuns))
		r.Get("/runs/{runId}", s.h(s.getRun))
		r.Delete("/runs/{runId}", s.h(s.disposeRun))
		r.Post("/runs/{runId}/steer", s.h(s.steerRun))
		r.Post("/runs/{runId}/cancel", s.h(s.cancelRun))
		r.Get("/runs/{runId}/stream", s.h(s.streamRun))

		r.Post("/subagents", s.h(s.createSubagent))
		r.Get("/subagents/{childId}", s.h(s.getSubagent))
		r.Delete("/subagents/{childId}", s.h(s.disposeSubagent))
		r.Post("/subagents/{childId}/followup", s.h(s.followupSubagent))
		r.Post("/subagents/{childId}/interrupt", s.h(s.interruptSubagent))
		r.Get("/tasks/{taskId}", s.h(s.getTask))

		r.Get("/events", s.h(s.streamEvents))
		s.webhookRoutes(r)
		s.approvalRoutes(r)
	})

	r.Post(mcpPath, s.h(s.serveMCP))
	s.a2aRoutes(r)

	r.Get("/healthz", s.h(s.health))
	r.Get("/readyz", s.h(s.ready))
	r.Get("/metrics", s.metricsHandler().ServeHTTP)
	r.Get("/openapi.yaml", serveSpec)
	r.Get("/docs", redirectDocs)
	r.Get("/docs/{file}", s.docsHandler())
	r.Get("/", s.h(s.dashboardIndex))
	r.Get("/{asset:"+assetPattern+"}", s.h(s.dashboardAsset))
	r.Get("/{dir:"+dirPattern+"}/{asset:"+assetPattern+"}", s.h(s.dashboardAsset))
	return r
}

// recoverer answers a panicking handler with INTERNAL and logs the stack,
// unless the panic is http.ErrAbortHandler (an intended abort).
func (s *Server) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if v == http.ErrAbortHandler {
				panic(v)
			}
			s.writeError(w, r, fmt.Errorf("panic: %v\n%s", v, debug.Stack()))
		}()
		next.ServeHTTP(w, r)
	})
}

// mcpPath is where the MCP face is served.
const mcpPath = "/mcp"

// serveMCP hands a request of the MCP face to its handler, with the body
// bounded as a /v1 body is and its text checked (checkedBody). The MCP
// transport's own refusals (a missing Accept, a body that is not JSON-RPC
// or whose text checkedBody refused, one too large) are text/plain; they
// are answered as problem+json like every other error here.
func (s *Server) serveMCP(w http.ResponseWriter, r *http.Request) error {
	if s.mcp == nil {
		return subagent.Errorf(codeNotReady, "this server runs no MCP face")
	}
	r.Body = &checkedBody{w: w, body: http.MaxBytesReader(w, r.Body, s.bodyLimit)}
	pw := &plainRefusals{ResponseWriter: w}
	s.mcp.ServeHTTP(pw, r)
	if pw.status == 0 {
		return nil
	}
	w.Header().Del("Content-Type")
	w.Header().Del("X-Content-Type-Options")
	code, ok := refusalCodes[pw.status]
	if !ok {
		return fmt.Errorf("the MCP transport answered %d: %s", pw.status, clip(strings.TrimSpace(pw.text.String()), 200))
	}
	return subagent.Errorf(code, "%s", clip(strings.TrimSpace(pw.text.String()), 200))
}

// refusalCodes are the codes of the MCP transport's text/plain refusals.
var refusalCodes = map[int]string{
	http.StatusBadRequest:            subagent.EInvalidRequest,
	http.StatusForbidden:             subagent.EForbidden,
	http.StatusNotFound:              codeNotFound,
	http.StatusMethodNotAllowed:      codeMethodNotAllowed,
	http.StatusRequestEntityTooLarge: subagent.EPayloadTooLarge,
	http.StatusUnsupportedMediaType:  codeUnsupportedMediaType,
}

// plainRefusals passes an answer through unless it is a text/plain error
// (an http.Error), which it keeps back: its status, and its text up to
// 4 KiB.
type plainRefusals struct {
	http.ResponseWriter
	status int
	text   bytes.Buffer
}

func (p *plainRefusals) WriteHeader(code int) {
	if code >= 400 && strings.HasPrefix(p.Header().Get("Content-Type"), "text/plain") {
		p.status = code
		return
	}
	p.ResponseWriter.WriteHeader(code)
}

func (p *plainRefusals) Write(b []byte) (int, error) {
	if p.status == 0 {
		return p.ResponseWriter.Write(b)
	}
	p.text.Write(b[:min(len(b), max(0, 4<<10-p.text.Len()))])
	return len(b), nil
}

// Unwrap lets http.ResponseController reach the connection.
func (p *plainRefusals) Unwrap() http.ResponseWriter { return p.ResponseWriter }

func (s *Server) health(w http.ResponseWriter, r *http.Request) error {
	s.writeJSON(w, r, http.StatusOK, healthJSON{Status: "ok", Version: s.version})
	return nil
}

// readyTimeout bounds the store's Ping of a /readyz: an unreachable
// database makes the replica unready, never a hanging probe.
const readyTimeout = 2 * time.Second

// ready answers 200 while the store answers Ping and every provider's
// capabilities are known or cannot be (awaitProbe), both within
// readyTimeout, listing the providers whose agent cannot be started;
// NOT_READY when that takes longer, and DRAINING once Shutdown began.
func (s *Server) ready(w http.ResponseWriter, r *http.Request) error {
	select {
	case <-s.done:
		return subagent.Errorf(subagent.EDraining, "the server is shutting down")
	default:
	}
	ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
	defer cancel()
	if err := s.store.Ping(ctx); err != nil {
		s.log.WarnContext(r.Context(), "store not ready", slog.Any("error", err))
		return &subagent.Error{Code: codeNotReady, Message: "the store is not reachable or its schema is not current", Err: err}
	}
	out := healthJSON{Status: "ok", Version: s.version}
	for _, p := range s.svc.Providers() {
		reason, err := awaitProbe(ctx, p)
		if err != nil {
			return err
		}
		if reason != "" {
			out.UnavailableProviders = append(out.UnavailableProviders, unavailableProviderJSON{Name: p.Name(), Reason: reason})
		}
	}
	s.writeJSON(w, r, http.StatusOK, out)
	return nil
}
