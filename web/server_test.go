package web_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/agent"
	"github.com/subagentd/subagentd/internal/children"
	"github.com/subagentd/subagentd/internal/delegate"
	"github.com/subagentd/subagentd/internal/governance"
	apihttp "github.com/subagentd/subagentd/internal/http"
	"github.com/subagentd/subagentd/internal/memstore"
	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/model/scripted"
	"github.com/subagentd/subagentd/internal/providers/fork"
	"github.com/subagentd/subagentd/internal/providers/inprocess"
	"github.com/subagentd/subagentd/internal/providers/spawn"
	"github.com/subagentd/subagentd/internal/roots"
	"github.com/subagentd/subagentd/internal/subagent"
	"github.com/subagentd/subagentd/web"
)

// testServer is the real router (internal/http) over the in-memory store,
// wired as cmd/api wires it: the spawn and fork providers, the continuation
// manager over the in-process materializer, root agents and the delegation
// tools — all talking to one scripted model — tree control, usage and
// approvals (governance), serving the embedded
// dashboard. It can refuse SSE streams to simulate an outage.
type testServer struct {
	*httptest.Server
	refuse atomic.Bool
	// st is the server's store, for tests that seed history directly.
	st *memstore.Store
	// approvals are the server's approvals, as cmd/api wires them: a test
	// opens one as an ACP provider's policy would (Open), for a running child.
	approvals *governance.Approvals
	// lists counts GET /v1/sessions and GET /v1/runs (the history the page
	// loads once); streams counts SSE requests.
	lists, streams atomic.Int64
	// earlier, when set, holds (or refuses) every read of a log page before
	// a seq other than the end: the dashboard's background read of a long
	// log's earlier part.
	earlier atomic.Pointer[gate]
}

// startServer starts a testServer whose children and root agents ask mdl.
// startServer serves the dashboard and the API over mdl; opts adjust the
// API's configuration (tokens, for the sign-in test).
func startServer(t *testing.T, mdl model.Model, opts ...func(*apihttp.Config)) *testServer {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	st := memstore.New()
	routes, err := model.NewRoutes("scripted", model.Route{Name: "scripted", Kind: "scripted", DefaultModel: "scripted-model", Model: mdl})
	if err != nil {
		t.Fatalf("model routes: %v", err)
	}
	svc := subagent.NewService(subagent.Config{Store: st, Logger: logger, Owner: "web-test"})
	tools := agent.NewRegistry()
	deps := inprocess.Deps{Store: st, Routes: routes, Tools: tools, Logger: logger}
	for _, p := range []subagent.Provider{spawn.New(deps), fork.New(deps)} {
		if err := svc.Register(t.Context(), p); err != nil {
			t.Fatalf("registering %s: %v", p.Name(), err)
		}
	}
	agents := roots.NewManager(roots.ManagerConfig{Store: st, Routes: routes, Tools: tools, Logger: logger})
	mgr := children.NewManager(svc, children.ManagerConfig{Materializer: inprocess.NewMaterializer(deps), Notices: agents, Logger: logger})
	dtools := delegate.NewTools(delegate.ToolsConfig{Seam: svc, Continuations: mgr, Store: st, Registry: tools, Logger: logger})
	if err := dtools.Start(t.Context()); err != nil {
		t.Fatalf("mounting the delegation tools: %v", err)
	}
	approvals := governance.NewApprovals(governance.ApprovalsConfig{Store: st, Owner: "web-test", Logger: logger})
	limits := governance.NewLimits(st, logger)
	cfg := apihttp.Config{
		Service: svc, Store: st, Logger: logger, Dashboard: web.FS,
		Continuations: mgr, Roots: agents, Routes: routes,
		Sessions:  roots.New(roots.Config{Store: st, Routes: routes, Agents: agents, Policies: approvals, Limits: limits}),
		Trees:     governance.NewTrees(governance.TreesConfig{Store: st, Runs: mgr, Roots: agents, Logger: logger}),
		Usage:     governance.NewUsage(st),
		Limits:    limits,
		Approvals: approvals,
	}
	for _, opt := range opts {
		opt(&cfg)
	}
	api := apihttp.NewServer(cfg)

	s := &testServer{st: st, approvals: approvals}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && (r.URL.Path == "/v1/sessions" || r.URL.Path == "/v1/runs") {
			s.lists.Add(1)
		}
		if isStream(r) {
			s.streams.Add(1)
		}
		if g := s.earlier.Load(); g != nil && r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/events") &&
			r.URL.Query().Has("before") && r.URL.Query().Get("before") != endSeq {
			if g.refuse {
				http.Error(w, "earlier pages are refused by the test", http.StatusServiceUnavailable)
				return
			}
			g.hold(r)
		}
		if s.refuse.Load() && isStream(r) {
			http.Error(w, "streams are refused by the test", http.StatusServiceUnavailable)
			return
		}
		api.Handler().ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		// The order of cmd/api: root agents, activations, runs, streams.
		if err := errors.Join(agents.Close(ctx), mgr.Shutdown(ctx), svc.Shutdown(ctx), api.Shutdown(ctx)); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		dtools.Stop()
		s.Close()
	})
	return s
}

// endSeq is the before a page reader passes to mean the end of a log.
const endSeq = "9007199254740991"

// gate holds requests until open is closed, telling asked of each; a
// refusing gate answers them 503 at once instead.
type gate struct {
	asked  chan struct{}
	open   chan struct{}
	refuse bool
}

func newGate() *gate { return &gate{asked: make(chan struct{}, 1), open: make(chan struct{})} }

func (g *gate) hold(r *http.Request) {
	select {
	case g.asked <- struct{}{}:
	default:
	}
	select {
	case <-g.open:
	case <-r.Context().Done():
	}
}

// replying is a model that answers "re: <text of the last message>",
// except that the step whose last message is a key of holds streams
// "working on <text>" and then waits until that channel is closed (or its
// turn is cancelled): the run stays running while a test looks at it.
func replying(holds map[string]chan struct{}) *scripted.Model {
	return scripted.Func(func(req model.Request) scripted.Step {
		last := model.Text(req.Messages[len(req.Messages)-1].Content)
		if hold, ok := holds[last]; ok {
			return scripted.Step{Text: "working on " + last, Pause: hold}
		}
		return scripted.Step{Text: "re: " + last}
	})
}

func isStream(r *http.Request) bool {
	return r.URL.Path == "/v1/events" || strings.HasSuffix(r.URL.Path, "/stream")
}

// refuseStreams makes SSE requests fail with 503 (on) or pass again (off).
func (s *testServer) refuseStreams(on bool) { s.refuse.Store(on) }

// waitSettled long-polls the API until the run of the child has settled.
func (s *testServer) waitSettled(t *testing.T, childID string) {
	t.Helper()
	var runs struct {
		Runs []struct {
			RunID string `json:"runId"`
		} `json:"runs"`
	}
	s.getJSON(t, "/v1/runs?childSessionId="+url.QueryEscape(childID), &runs)
	if len(runs.Runs) != 1 {
		t.Fatalf("runs of child %s: %d, want 1", childID, len(runs.Runs))
	}
	var run struct {
		State string `json:"state"`
	}
	s.getJSON(t, "/v1/runs/"+runs.Runs[0].RunID+"?wait=30", &run)
	if run.State == "running" {
		t.Fatalf("run of child %s still running after 30 s", childID)
	}
}

// eventSeqs reads the seqs of a session's durable log through the API.
func (s *testServer) eventSeqs(t *testing.T, sessionID string) []int64 {
	t.Helper()
	var page struct {
		Events []struct {
			Seq int64 `json:"seq"`
		} `json:"events"`
		HasMore bool `json:"hasMore"`
	}
	s.getJSON(t, "/v1/sessions/"+url.PathEscape(sessionID)+"/events?limit=1000", &page)
	if page.HasMore {
		t.Fatalf("the log of %s has more than 1000 events", sessionID)
	}
	seqs := make([]int64, len(page.Events))
	for i, e := range page.Events {
		seqs[i] = e.Seq
	}
	return seqs
}

func (s *testServer) getJSON(t *testing.T, path string, v any) {
	t.Helper()
	res, err := http.Get(s.URL + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(res.Body)
		t.Fatalf("GET %s: %s %s", path, res.Status, body)
	}
	if err := json.NewDecoder(res.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: decoding: %v", path, err)
	}
}

// testWriter sends log lines to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}
