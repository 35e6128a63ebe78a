package delegate

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/providers/inprocess"
	"github.com/subagentd/subagentd/internal/providers/inprocess/inprocesstest"
	"github.com/subagentd/subagentd/internal/roots"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// world is one isolated deployment: the in-process harness (store, service
// with spawn and fork, global registry, a root parent session) plus the
// delegation tools and the root agents over it.
type world struct {
	*inprocesstest.Harness
	tools *Tools
	roots *roots.Manager
}

// newWorld builds a world whose only (default) model route is m; opts
// adjust the tools' configuration before they start.
func newWorld(t *testing.T, m model.Model, opts ...func(*ToolsConfig, *roots.Manager, inprocess.Deps)) *world {
	t.Helper()
	return newWorldWith(t, inprocesstest.Config{Routes: []model.Route{inprocesstest.Route("script", m)}}, opts...)
}

// newWorldWith is newWorld over a harness of cfg.
func newWorldWith(t *testing.T, cfg inprocesstest.Config, opts ...func(*ToolsConfig, *roots.Manager, inprocess.Deps)) *world {
	t.Helper()
	h := inprocesstest.New(t, cfg)
	w := &world{Harness: h}
	w.roots = roots.NewManager(roots.ManagerConfig{Store: h.Store, Routes: h.Deps.Routes, Tools: h.Tools, Logger: h.Logger})
	t.Cleanup(func() {
		if err := w.roots.Close(context.Background()); err != nil {
			t.Errorf("close roots: %v", err)
		}
	})
	tcfg := ToolsConfig{Seam: h.Service, Store: h.Store, Registry: h.Tools, Logger: h.Logger}
	for _, o := range opts {
		o(&tcfg, w.roots, h.Deps)
	}
	w.tools = NewTools(tcfg)
	if err := w.tools.Start(inprocesstest.Ctx(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.tools.Stop)
	return w
}

// prompt prompts the harness's root session and waits until turn n ended.
func (w *world) prompt(t *testing.T, text string, n int) {
	t.Helper()
	if _, err := w.roots.Prompt(inprocesstest.Ctx(t), w.Parent.Session.ID, inprocesstest.Text(text)); err != nil {
		t.Fatalf("prompt %q: %v", text, err)
	}
	w.waitTurnEnd(t, w.Parent.Session.ID, n)
}

// awaitIdle waits until the live agent of root session id runs no turn
// and has nothing runnable queued (agent.Agent.Idle): a turn/end in the
// log comes a little before that.
func (w *world) awaitIdle(t *testing.T, id string) {
	t.Helper()
	idle, ok := w.roots.Idle(inprocesstest.Ctx(t), id)
	if !ok {
		t.Fatalf("root session %s has no live agent", id)
	}
	select {
	case <-idle:
	case <-time.After(inprocesstest.Timeout):
		t.Fatalf("the agent of root session %s is not idle after %s", id, inprocesstest.Timeout)
	}
}

// waitTurnEnd waits until session id's log holds the turn/end of turn n.
func (w *world) waitTurnEnd(t *testing.T, id string, n int) sessionlog.TurnEndData {
	t.Helper()
	e := w.WaitEvent(t, id, func(e store.Event) bool {
		if e.Type != sessionlog.EventTurnEnd {
			return false
		}
		var d sessionlog.TurnEndData
		return json.Unmarshal(e.Data, &d) == nil && d.Turn == n
	})
	return inprocesstest.Decode[sessionlog.TurnEndData](t, e)
}

// toolResults returns the tool/result payloads of session id by call id.
func (w *world) toolResults(t *testing.T, id string) map[string]sessionlog.ToolResultData {
	t.Helper()
	out := map[string]sessionlog.ToolResultData{}
	for _, e := range inprocesstest.OfType(w.Log(t, id), sessionlog.EventToolResult) {
		d := inprocesstest.Decode[sessionlog.ToolResultData](t, e)
		out[d.CallID] = d
	}
	return out
}

// lastText is the text of the last message of req.
func lastText(req model.Request) string {
	if len(req.Messages) == 0 {
		return ""
	}
	return model.Text(req.Messages[len(req.Messages)-1].Content)
}

// call is a tool call of the delegation tool name with args.
func call(id, name string, args map[string]any) model.ToolCall {
	raw, _ := json.Marshal(args)
	return model.ToolCall{ID: id, Name: name, Arguments: string(raw)}
}

// fakeProvider is a provider whose runs settle with a fixed result, or
// whose Start fails.
type fakeProvider struct {
	name     string
	inherits bool
	caps     subagent.Capabilities
	result   subagent.Result
	startErr error

	mu   sync.Mutex
	reqs []subagent.ResolvedRequest
}

func (p *fakeProvider) Name() string                        { return p.name }
func (p *fakeProvider) Description() string                 { return "fake provider " + p.name }
func (p *fakeProvider) Capabilities() subagent.Capabilities { return p.caps }
func (p *fakeProvider) InheritsParentContext() bool         { return p.inherits }
func (p *fakeProvider) requests() []subagent.ResolvedRequest {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.reqs
}

func (p *fakeProvider) Start(ctx context.Context, req subagent.ResolvedRequest) (subagent.Run, error) {
	p.mu.Lock()
	p.reqs = append(p.reqs, req)
	p.mu.Unlock()
	if p.startErr != nil {
		return nil, p.startErr
	}
	done := make(chan struct{})
	close(done)
	return &fakeRun{id: "fake-child", done: done, result: p.result}, nil
}

// fakeRun is a settled remote run.
type fakeRun struct {
	id     string
	done   chan struct{}
	result subagent.Result
}

func (r *fakeRun) ChildID() string                   { return r.id }
func (r *fakeRun) Local() bool                       { return false }
func (r *fakeRun) Done() <-chan struct{}             { return r.done }
func (r *fakeRun) Result() (subagent.Result, error)  { return r.result, nil }
func (r *fakeRun) Cancel()                           {}
func (r *fakeRun) Dispose(ctx context.Context) error { return nil }
func contains(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// busyRoot prompts the harness's root session with text and returns once
// its turn's first step started (the model holds it as the test arranged),
// with the context and the root's id.
func (w *world) busyRoot(t *testing.T, text string) (context.Context, string) {
	t.Helper()
	ctx := inprocesstest.Ctx(t)
	root := w.Parent.Session.ID
	if _, err := w.roots.Prompt(ctx, root, inprocesstest.Text(text)); err != nil {
		t.Fatal(err)
	}
	w.WaitEvent(t, root, inprocesstest.Type(sessionlog.EventStepStart))
	return ctx, root
}
