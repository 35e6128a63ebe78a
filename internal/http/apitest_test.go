package http

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"

	"github.com/subagentd/subagentd/api"
	"github.com/subagentd/subagentd/internal/governance"
	"github.com/subagentd/subagentd/internal/memstore"
	"github.com/subagentd/subagentd/internal/roots"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
	"github.com/subagentd/subagentd/internal/telemetry"
)

// The spec, loaded once per test binary.
var loadSpec = sync.OnceValues(func() (*openapi3.T, error) {
	doc, err := openapi3.NewLoader().LoadFromData(api.OpenAPI)
	if err != nil {
		return nil, err
	}
	return doc, doc.Validate(context.Background())
})

var loadRouter = sync.OnceValues(func() (routers.Router, error) {
	doc, err := loadSpec()
	if err != nil {
		return nil, err
	}
	return legacy.NewRouter(doc)
})

func init() {
	// Bodies kin-openapi has no decoder for (HTML, CSS, JavaScript) are
	// compared as strings.
	openapi3filter.RegisterBodyDecoder("*/*", openapi3filter.FileBodyDecoder)
}

func spec(t testing.TB) (*openapi3.T, routers.Router) {
	t.Helper()
	doc, err := loadSpec()
	if err != nil {
		t.Fatalf("load spec: %v", err)
	}
	router, err := loadRouter()
	if err != nil {
		t.Fatalf("spec router: %v", err)
	}
	return doc, router
}

// testBundle is a server over real HTTP with the real seam service and an
// in-memory store.
type testBundle struct {
	st   store.Store
	svc  *subagent.Service
	srv  *Server
	ts   *httptest.Server
	log  *slog.Logger
	logs *bytes.Buffer
	// stops run at cleanup, in order, before the service shuts down.
	stops []func(context.Context) error
}

// testLogger returns a logger writing JSON into a buffer, which tests can
// inspect (and which is reported when a test fails).
func testLogger(t *testing.T) (*slog.Logger, *bytes.Buffer) {
	var mu sync.Mutex
	buf := &bytes.Buffer{}
	w := writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return buf.Write(p)
	})
	t.Cleanup(func() {
		if t.Failed() {
			mu.Lock()
			t.Logf("server log:\n%s", buf.String())
			mu.Unlock()
		}
	})
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug})), buf
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// setup starts a server over a fresh memstore. opts adjust the config
// (and may wrap Config.Store).
func setup(t *testing.T, opts ...func(*Config)) *testBundle {
	t.Helper()
	return start(t, nil, opts...)
}

// start is setup with wire, which (when set) runs once the service exists
// and before the server is built: it registers providers, sets the
// config's collaborators and adds their stops.
func start(t *testing.T, wire func(b *testBundle, cfg *Config), opts ...func(*Config)) *testBundle {
	t.Helper()
	return startSeam(t, subagent.Config{}, wire, opts...)
}

// startSeam is start with seam's settings (MaxLiveRuns, say) for the
// service; its store, logger and owner are the bundle's.
func startSeam(t *testing.T, seam subagent.Config, wire func(b *testBundle, cfg *Config), opts ...func(*Config)) *testBundle {
	t.Helper()
	log, logs := testLogger(t)
	cfg := Config{Logger: log, Version: "test", Registry: NewRegistry(), Store: memstore.New()}
	for _, o := range opts {
		o(&cfg)
	}
	st := cfg.Store
	if cfg.Metrics == nil {
		cfg.Metrics = telemetry.NewMetrics(cfg.Registry)
	}
	seam.Store, seam.Logger, seam.Owner, seam.Metrics = st, log, "test", cfg.Metrics
	if seam.Governor == nil {
		limits := governance.NewLimits(st, log)
		seam.Governor, cfg.Limits = limits, limits
	}
	svc := subagent.NewService(seam)
	cfg.Service = svc
	b := &testBundle{st: st, svc: svc, log: log, logs: logs}
	if wire != nil {
		wire(b, &cfg)
	}
	if cfg.Sessions == nil {
		cfg.Sessions = roots.New(roots.Config{Store: st, Routes: cfg.Routes, Limits: cfg.Limits})
	}
	b.srv = NewServer(cfg)
	b.ts = httptest.NewServer(b.srv.Handler())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, stop := range b.stops {
			if err := stop(ctx); err != nil {
				t.Errorf("stop: %v", err)
			}
		}
		if err := svc.Shutdown(ctx); err != nil {
			t.Errorf("service shutdown: %v", err)
		}
		if err := b.srv.Shutdown(ctx); err != nil {
			t.Errorf("server shutdown: %v", err)
		}
		b.ts.Close()
	})
	return b
}

// call is one request through the spec-validating client.
type call struct {
	method, path string
	body         any               // marshalled to JSON unless []byte
	header       map[string]string // extra request headers
	// invalid says the request breaks the spec on purpose: the test checks
	// that the spec rejects it too, and then checks only the response.
	invalid bool
	// notJSON says the body is not one JSON value, which the spec's
	// validator does not judge; only the response is checked.
	notJSON bool
	ctx     context.Context
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) decode(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("decode %s: %v", r.body, err)
	}
}

func (r response) problem(t *testing.T) problem {
	t.Helper()
	var p problem
	r.decode(t, &p)
	return p
}

// request builds the HTTP request of c.
func (b *testBundle) request(t *testing.T, c call) *http.Request {
	t.Helper()
	var body []byte
	switch v := c.body.(type) {
	case nil:
	case []byte:
		body = v
	default:
		var err error
		if body, err = json.Marshal(v); err != nil {
			t.Fatalf("marshal body: %v", err)
		}
	}
	ctx := c.ctx
	if ctx == nil {
		ctx = t.Context()
	}
	req, err := http.NewRequestWithContext(ctx, c.method, b.ts.URL+c.path, bytes.NewReader(body))
	if err != nil {
		t.Fatalf("new request: %v", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range c.header {
		req.Header.Set(k, v)
	}
	return req
}

// validateRequest checks req against the spec and returns the input for
// validating its response (nil when the spec has no route for it).
func validateRequest(t *testing.T, req *http.Request, body []byte, invalid bool) *openapi3filter.RequestValidationInput {
	t.Helper()
	_, router := spec(t)
	route, params, err := router.FindRoute(req)
	if err != nil {
		if !invalid {
			t.Fatalf("%s %s: no route in the spec: %v", req.Method, req.URL.Path, err)
		}
		return nil
	}
	// kin-openapi's security check reads the body and puts back what
	// GetBody returns, which for a probe must be the probe's body.
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	in := &openapi3filter.RequestValidationInput{
		Request: req, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, MultiError: true},
	}
	err = openapi3filter.ValidateRequest(t.Context(), in)
	req.Body = io.NopCloser(bytes.NewReader(body))
	switch {
	case err != nil && !invalid:
		t.Fatalf("%s %s: request breaks the spec: %v", req.Method, req.URL.Path, err)
	case err == nil && invalid:
		t.Fatalf("%s %s: request meant to break the spec passes it", req.Method, req.URL.Path)
	}
	return in
}

// validateResponse checks a response against the spec; a request without
// a spec route must be answered with a Problem.
func validateResponse(t *testing.T, in *openapi3filter.RequestValidationInput, req *http.Request, status int, header http.Header, body []byte, stream bool) {
	t.Helper()
	if in == nil {
		doc, _ := spec(t)
		if ct := header.Get("Content-Type"); ct != "application/problem+json" {
			t.Fatalf("%s %s: unrouted answer has Content-Type %q", req.Method, req.URL.Path, ct)
		}
		var v any
		if err := json.Unmarshal(body, &v); err != nil {
			t.Fatalf("decode problem: %v", err)
		}
		if err := doc.Components.Schemas["Problem"].Value.VisitJSON(v, openapi3.EnableJSONSchema2020()); err != nil {
			t.Fatalf("%s %s: problem breaks the spec: %v", req.Method, req.URL.Path, err)
		}
		return
	}
	in.Request.Body = io.NopCloser(bytes.NewReader(nil))
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in, Status: status, Header: header,
		Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true, ExcludeResponseBody: stream},
	}
	out.SetBodyBytes(body)
	if err := openapi3filter.ValidateResponse(t.Context(), out); err != nil {
		t.Fatalf("%s %s: response %d breaks the spec: %v\nbody: %s", req.Method, req.URL.Path, status, err, body)
	}
}

// do sends c, validating the request and the response against the spec.
func (b *testBundle) do(t *testing.T, c call) response {
	t.Helper()
	return b.async(t, c)()
}

// async validates c and sends it from another goroutine; the returned
// func waits for the response and validates it (call it from the test's
// goroutine).
func (b *testBundle) async(t *testing.T, c call) func() response {
	t.Helper()
	req := b.request(t, c)
	body, _ := io.ReadAll(req.Body)
	var in *openapi3filter.RequestValidationInput
	if c.notJSON {
		probe := req.Clone(req.Context())
		probe.Body = io.NopCloser(strings.NewReader("{}"))
		in = validateRequest(t, probe, []byte("{}"), false)
	} else {
		probe := req.Clone(req.Context())
		probe.Body = io.NopCloser(bytes.NewReader(body))
		in = validateRequest(t, probe, body, c.invalid)
	}
	req.Body = io.NopCloser(bytes.NewReader(body))
	type result struct {
		resp response
		err  error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := noRedirect.Do(req)
		if err != nil {
			done <- result{err: err}
			return
		}
		defer resp.Body.Close()
		data, err := io.ReadAll(resp.Body)
		done <- result{response{status: resp.StatusCode, header: resp.Header, body: data}, err}
	}()
	return func() response {
		t.Helper()
		r := <-done
		if r.err != nil {
			t.Fatalf("%s %s: %v", c.method, c.path, r.err)
		}
		validateResponse(t, in, req, r.resp.status, r.resp.header, r.resp.body, false)
		return r.resp
	}
}

var noRedirect = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// want sends c and checks the status.
func (b *testBundle) want(t *testing.T, status int, c call) response {
	t.Helper()
	r := b.do(t, c)
	if r.status != status {
		t.Fatalf("%s %s: status %d, want %d; body %s", c.method, c.path, r.status, status, r.body)
	}
	return r
}

// wantProblem sends c and checks the status and the problem's code.
func (b *testBundle) wantProblem(t *testing.T, status int, code string, c call) problem {
	t.Helper()
	p := b.want(t, status, c).problem(t)
	if p.Code != code || p.Status != status {
		t.Fatalf("%s %s: problem %+v, want code %s status %d", c.method, c.path, p, code, status)
	}
	return p
}

// frame is one SSE frame; comment frames have only comment set.
type frame struct {
	id, event string
	data      json.RawMessage
	comment   string
}

// sseStream reads frames of one SSE response in the background.
type sseStream struct {
	resp   *http.Response
	frames chan frame
	done   chan error // the read error (io.EOF at a clean end)
	cancel context.CancelFunc
}

// stream opens an SSE request, validating it and its status against the
// spec, and checks every frame's data against the schema the operation's
// x-sse-events names for its event type.
func (b *testBundle) stream(t *testing.T, path string, header map[string]string) *sseStream {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	req := b.request(t, call{method: http.MethodGet, path: path, header: header, ctx: ctx})
	in := validateRequest(t, req.Clone(ctx), nil, false)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatalf("GET %s: %v", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		validateResponse(t, in, req, resp.StatusCode, resp.Header, body, false)
		t.Fatalf("GET %s: status %d: %s", path, resp.StatusCode, body)
	}
	validateResponse(t, in, req, resp.StatusCode, resp.Header, nil, true)
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("GET %s: Content-Type %q", path, ct)
	}
	schemas := sseSchemas(t, in.Route)
	s := &sseStream{resp: resp, frames: make(chan frame, 4096), done: make(chan error, 1), cancel: cancel}
	t.Cleanup(s.close)
	go s.read(schemas)
	return s
}

func (s *sseStream) close() {
	s.cancel()
	s.resp.Body.Close()
}

// sseSchemas returns the x-sse-events map of route's 200 event stream.
func sseSchemas(t *testing.T, route *routers.Route) map[string]*openapi3.Schema {
	t.Helper()
	doc, _ := spec(t)
	mt := route.Operation.Responses.Status(http.StatusOK).Value.Content.Get("text/event-stream")
	names, ok := mt.Extensions["x-sse-events"].(map[string]any)
	if !ok {
		t.Fatalf("%s %s: no x-sse-events", route.Method, route.Path)
	}
	out := map[string]*openapi3.Schema{}
	for event, name := range names {
		ref := doc.Components.Schemas[name.(string)]
		if ref == nil {
			t.Fatalf("x-sse-events names unknown schema %v", name)
		}
		out[event] = ref.Value
	}
	return out
}

// read parses frames; a frame whose data breaks its schema, or that lacks
// an id, ends the stream with an error.
func (s *sseStream) read(schemas map[string]*openapi3.Schema) {
	defer close(s.frames)
	sc := bufio.NewScanner(s.resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<22)
	var f frame
	fail := func(err error) { s.done <- err }
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if f.comment == "" && f.event == "" && f.data == nil {
				continue
			}
			if f.comment == "" {
				if err := checkFrame(f, schemas); err != nil {
					fail(err)
					return
				}
			}
			s.frames <- f
			f = frame{}
		case strings.HasPrefix(line, ":"):
			f.comment = strings.TrimSpace(line[1:])
		case strings.HasPrefix(line, "id: "):
			f.id = line[4:]
		case strings.HasPrefix(line, "event: "):
			f.event = line[7:]
		case strings.HasPrefix(line, "data: "):
			if f.data != nil {
				fail(fmt.Errorf("frame %s has more than one data line", f.id))
				return
			}
			f.data = json.RawMessage(line[6:])
		default:
			fail(fmt.Errorf("unexpected SSE line %q", line))
			return
		}
	}
	err := sc.Err()
	if err == nil {
		err = io.EOF
	}
	s.done <- err
}

func checkFrame(f frame, schemas map[string]*openapi3.Schema) error {
	if f.id == "" || f.event == "" {
		return fmt.Errorf("frame without id or event: %+v", f)
	}
	sch, ok := schemas[f.event]
	if !ok {
		sch = schemas["*"]
	}
	if sch == nil {
		return fmt.Errorf("event %q has no schema", f.event)
	}
	var v any
	if err := json.Unmarshal(f.data, &v); err != nil {
		return fmt.Errorf("frame %s data: %v", f.id, err)
	}
	if err := sch.VisitJSON(v, openapi3.EnableJSONSchema2020()); err != nil {
		return fmt.Errorf("frame %s (%s) data %s breaks the spec: %v", f.id, f.event, f.data, err)
	}
	return nil
}

// streamTimeout bounds how long a test waits for a frame before failing.
const streamTimeout = 10 * time.Second

// next returns the next event frame, skipping heartbeat comments.
func (s *sseStream) next(t *testing.T) frame {
	t.Helper()
	for {
		f := s.nextFrame(t)
		if f.comment == "" {
			return f
		}
	}
}

// nextFrame returns the next frame, comments included.
func (s *sseStream) nextFrame(t *testing.T) frame {
	t.Helper()
	select {
	case f, ok := <-s.frames:
		if !ok {
			t.Fatalf("stream ended: %v", <-s.done)
		}
		return f
	case <-time.After(streamTimeout):
		t.Fatalf("no frame within %s", streamTimeout)
	}
	return frame{}
}

// end waits for the server to end the stream after the frames read so far,
// returning any frames still pending.
func (s *sseStream) end(t *testing.T) []frame {
	t.Helper()
	var rest []frame
	timeout := time.After(streamTimeout)
	for {
		select {
		case f, ok := <-s.frames:
			if !ok {
				if err := <-s.done; err != io.EOF {
					t.Fatalf("stream ended with %v", err)
				}
				return rest
			}
			if f.comment == "" {
				rest = append(rest, f)
			}
		case <-timeout:
			t.Fatalf("stream did not end within %s", streamTimeout)
		}
	}
}
