package http

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// fakeProvider publishes fakeRuns that the test settles. Local runs get a
// child session (header and descriptor event), as in-process providers do.
type fakeProvider struct {
	name  string
	caps  subagent.Capabilities
	local bool
	steer bool
	st    store.Store

	mu      sync.Mutex
	runs    map[string]*fakeRun // by child id
	started chan *fakeRun       // every published run, in order
}

var _ subagent.Provider = (*fakeProvider)(nil)

func (p *fakeProvider) Name() string        { return p.name }
func (p *fakeProvider) Description() string { return "fake provider " + p.name }
func (p *fakeProvider) Capabilities() subagent.Capabilities {
	c := p.caps
	c.Steer, c.Local = p.steer, p.local
	return c
}
func (p *fakeProvider) InheritsParentContext() bool { return false }
func (p *fakeProvider) run(childID string) *fakeRun {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.runs[childID]
}
func (p *fakeProvider) setRun(childID string, r *fakeRun) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.runs[childID] = r
}
func allCaps() subagent.Capabilities {
	return subagent.Capabilities{OutputSchema: true, DepthLimit: true, ToolFilter: true, Persona: true}
}
func (b *testBundle) register(t *testing.T, p *fakeProvider) *fakeProvider {
	t.Helper()
	p.st, p.runs, p.started = b.st, map[string]*fakeRun{}, make(chan *fakeRun, 100)
	if err := b.svc.Register(t.Context(), p); err != nil {
		t.Fatalf("register %s: %v", p.name, err)
	}
	return p
}

func (p *fakeProvider) Start(ctx context.Context, req subagent.ResolvedRequest) (subagent.Run, error) {
	r := &fakeRun{
		childID: uuid.NewString(), local: p.local, st: p.st, ctx: context.WithoutCancel(ctx), startCtx: ctx,
		done: make(chan struct{}), cancelled: make(chan struct{}),
	}
	if p.local {
		hdr := store.Session{
			ID: r.childID, ParentID: req.Parent.Session.ID, Origin: "subagent", DelegationDepth: req.ChildDepth,
			Label: req.Label, Provider: p.name, Mode: subagent.ModeOneShot, CreatedAt: time.Now(),
		}
		if err := p.st.CreateSession(ctx, hdr); err != nil {
			return nil, err
		}
		desc, err := subagent.SnapshotDescriptor(req.Descriptor)
		if err != nil {
			return nil, err
		}
		prompt, err := json.Marshal(sessionlog.UserMessage{ID: uuid.NewString(), Role: "user", Content: req.Prompt, Source: sessionlog.Source{Kind: "user"}})
		if err != nil {
			return nil, err
		}
		if _, err := p.st.AppendEvents(ctx, r.childID,
			store.NewEvent{Type: sessionlog.EventDescriptor, Data: desc},
			store.NewEvent{Type: sessionlog.EventUserMessage, Data: prompt}); err != nil {
			return nil, err
		}
	}
	p.setRun(r.childID, r)
	p.started <- r
	if !p.steer {
		return nonSteering{r}, nil
	}
	return r, nil
}

// fakeRun is a child the test drives: it appends to the child log, settles
// it, and observes cancellation.
type fakeRun struct {
	childID string
	local   bool
	st      store.Store
	ctx     context.Context
	// startCtx is the context Start was called with.
	startCtx context.Context

	once       sync.Once
	done       chan struct{}
	res        subagent.Result
	cancelOnce sync.Once
	cancelled  chan struct{}

	mu     sync.Mutex
	steers int
}

var (
	_ subagent.Run     = (*fakeRun)(nil)
	_ subagent.Steerer = (*fakeRun)(nil)
)

func (r *fakeRun) ChildID() string                   { return r.childID }
func (r *fakeRun) Local() bool                       { return r.local }
func (r *fakeRun) Done() <-chan struct{}             { return r.done }
func (r *fakeRun) Result() (subagent.Result, error)  { <-r.done; return r.res, nil }
func (r *fakeRun) settle(res subagent.Result)        { r.once.Do(func() { r.res = res; close(r.done) }) }
func (r *fakeRun) Dispose(ctx context.Context) error { r.Cancel(); <-r.done; return nil }
func (r *fakeRun) isSettled() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// Cancel settles the run aborted unless it settled before (R23, R25).
func (r *fakeRun) Cancel() {
	r.cancelOnce.Do(func() { close(r.cancelled) })
	r.settle(subagent.Result{Output: []model.Block{}, StopReason: subagent.StopAborted})
}

// Steer admits content at once, as the next model step would, unless the
// run settled (ESteerRejected).
func (r *fakeRun) Steer(ctx context.Context, content []model.Block) (string, error) {
	if r.isSettled() {
		return "", subagent.Errorf(subagent.ESteerRejected, "child is not running")
	}
	r.mu.Lock()
	r.steers++
	id := "steer-" + strconv.Itoa(r.steers)
	r.mu.Unlock()
	return id, nil
}

// logEvent appends one event to the child's log.
func (r *fakeRun) logEvent(t *testing.T, typ string, data any) store.Event {
	t.Helper()
	raw, err := json.Marshal(data)
	if err != nil {
		t.Fatalf("marshal %s: %v", typ, err)
	}
	evs, err := r.st.AppendEvents(r.ctx, r.childID, store.NewEvent{Type: typ, Data: raw})
	if err != nil {
		t.Fatalf("append %s: %v", typ, err)
	}
	return evs[0]
}

// complete logs an assistant message (local runs) and settles completed.
func (r *fakeRun) complete(t *testing.T, text string) {
	t.Helper()
	out := []model.Block{model.TextBlock(text)}
	if r.local {
		r.logEvent(t, sessionlog.EventAssistantMessage, sessionlog.AssistantMessageData{
			Turn: 1, Step: 1, Message: sessionlog.AssistantMessage{Role: "assistant", Content: out},
		})
	}
	r.settle(subagent.Result{Output: out, StopReason: subagent.StopCompleted})
}

// waitCancelled fails the test unless the run is cancelled in time.
func (r *fakeRun) waitCancelled(t *testing.T) {
	t.Helper()
	select {
	case <-r.cancelled:
	case <-time.After(streamTimeout):
		t.Fatal("run was not cancelled")
	}
}

// nonSteering hides a run's Steer method: the runs of a provider that
// cannot steer.
type nonSteering struct{ subagent.Run }

// rootSession creates a root session over the API and returns its id.
func (b *testBundle) rootSession(t *testing.T) string {
	t.Helper()
	var s sessionJSON
	b.want(t, http.StatusCreated, call{method: http.MethodPost, path: "/v1/sessions", body: map[string]any{"label": "root"}}).decode(t, &s)
	return s.ID
}

// startRun starts a run of provider under parent with a text prompt and
// extra body fields.
func (b *testBundle) startRun(t *testing.T, provider, parent string, extra map[string]any) runJSON {
	t.Helper()
	body := map[string]any{"provider": provider, "parentSessionId": parent, "prompt": []map[string]any{{"type": "text", "text": "do it"}}}
	for k, v := range extra {
		body[k] = v
	}
	var run runJSON
	b.want(t, http.StatusCreated, call{method: http.MethodPost, path: "/v1/runs", body: body}).decode(t, &run)
	return run
}

// finish completes run with text and waits until it settled (its
// subagent/end is recorded asynchronously).
func (b *testBundle) finish(t *testing.T, p *fakeProvider, run runJSON, text string) {
	t.Helper()
	p.run(run.ChildSessionID).complete(t, text)
	var got runJSON
	b.want(t, http.StatusOK, call{method: http.MethodGet, path: "/v1/runs/" + run.RunID + "?wait=10"}).decode(t, &got)
	if got.State != store.StateSettled {
		t.Fatalf("run %s did not settle: %+v", run.RunID, got)
	}
}
