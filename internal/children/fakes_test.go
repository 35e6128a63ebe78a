package children

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// fakeProvider is the provider under a contProvider: its one-shot Start,
// which a continuable start never calls (R54), counts its calls and runs
// StartFn, else returns a fakeRun.
type fakeProvider struct {
	name    string
	caps    subagent.Capabilities
	StartFn func(ctx context.Context, req subagent.ResolvedRequest) (subagent.Run, error)

	mu     sync.Mutex
	starts int
}

func (p *fakeProvider) Name() string                        { return p.name }
func (p *fakeProvider) Description() string                 { return "fake provider " + p.name }
func (p *fakeProvider) Capabilities() subagent.Capabilities { return p.caps }
func (p *fakeProvider) InheritsParentContext() bool         { return false }
func (p *fakeProvider) startCount() int                     { p.mu.Lock(); defer p.mu.Unlock(); return p.starts }
func (p *fakeProvider) Start(ctx context.Context, req subagent.ResolvedRequest) (subagent.Run, error) {
	p.mu.Lock()
	p.starts++
	p.mu.Unlock()
	if p.StartFn == nil {
		return newFakeRun("child-"+p.name, true), nil
	}
	return p.StartFn(ctx, req)
}

// contCaps are the runtime capabilities of the in-process continuable
// providers the manager tests stand in for.
var contCaps = subagent.Capabilities{Steer: true, Resume: true, Local: true}

// fakeRun is a one-shot run the test settles (settle); Cancel and Dispose
// settle it aborted.
type fakeRun struct {
	childID string
	local   bool
	done    chan struct{}
	once    sync.Once
	result  subagent.Result
}

func newFakeRun(childID string, local bool) *fakeRun {
	return &fakeRun{childID: childID, local: local, done: make(chan struct{})}
}

func (r *fakeRun) ChildID() string       { return r.childID }
func (r *fakeRun) Local() bool           { return r.local }
func (r *fakeRun) Done() <-chan struct{} { return r.done }
func (r *fakeRun) Cancel()               { r.settle(subagent.Result{StopReason: subagent.StopAborted}, nil) }
func (r *fakeRun) Dispose(context.Context) error {
	r.Cancel()
	return nil
}

// Result is the settled result; it is read only after Done.
func (r *fakeRun) Result() (subagent.Result, error) { return r.result, nil }

// settle settles the run once; later calls are ignored. err is unused: a
// fakeRun always settles with a result.
func (r *fakeRun) settle(res subagent.Result, _ error) {
	r.once.Do(func() { r.result = res; close(r.done) })
}

// request is a one-shot request of root p1.
func request() subagent.Request {
	return subagent.Request{Prompt: []model.Block{model.TextBlock("do it")}, Parent: subagent.Parent{Session: store.Session{ID: "p1"}}}
}

// waitDone waits for h's end, failing after a generous bound.
func waitDone(t *testing.T, h *subagent.RunHandle) {
	t.Helper()
	select {
	case <-h.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("run %s did not settle", h.ID())
	}
}
