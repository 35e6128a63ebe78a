package subagent

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/logtest"
	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/store"
)

// fakeProvider is a Provider whose Start is a func field.
type fakeProvider struct {
	name    string
	caps    Capabilities
	StartFn func(ctx context.Context, req ResolvedRequest) (Run, error)

	mu     sync.Mutex
	starts []ResolvedRequest
}

var _ Provider = (*fakeProvider)(nil)

func (p *fakeProvider) Name() string                { return p.name }
func (p *fakeProvider) Description() string         { return "fake provider " + p.name }
func (p *fakeProvider) Capabilities() Capabilities  { return p.caps }
func (p *fakeProvider) InheritsParentContext() bool { return false }

func (p *fakeProvider) Start(ctx context.Context, req ResolvedRequest) (Run, error) {
	p.mu.Lock()
	p.starts = append(p.starts, req)
	p.mu.Unlock()
	if p.StartFn == nil {
		return newFakeRun("child-"+p.name, true), nil
	}
	return p.StartFn(ctx, req)
}

// startCount is how often Start was invoked.
func (p *fakeProvider) startCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.starts)
}

var allCaps = Capabilities{OutputSchema: true, DepthLimit: true, ToolFilter: true, Persona: true}

// fakeRun is a Run settled by the test (settle) or by Cancel, which settles
// "aborted" keeping the partial output.
type fakeRun struct {
	childID string
	local   bool
	done    chan struct{}

	mu        sync.Mutex
	settled   bool
	result    Result
	err       error
	partial   []model.Block
	cancels   int
	disposes  int
	releaseFn func(ctx context.Context) error // Dispose's release step
}

var _ Run = (*fakeRun)(nil)

func newFakeRun(childID string, local bool) *fakeRun {
	return &fakeRun{childID: childID, local: local, done: make(chan struct{})}
}

func (r *fakeRun) ChildID() string       { return r.childID }
func (r *fakeRun) Local() bool           { return r.local }
func (r *fakeRun) Done() <-chan struct{} { return r.done }

func (r *fakeRun) Result() (Result, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.result, r.err
}

// settle settles the run once; later calls are ignored.
func (r *fakeRun) settle(res Result, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.settled {
		return
	}
	r.settled = true
	r.result, r.err = res, err
	close(r.done)
}

func (r *fakeRun) Cancel() {
	r.mu.Lock()
	r.cancels++
	partial := r.partial
	r.mu.Unlock()
	r.settle(Result{Output: partial, StopReason: StopAborted}, nil)
}

func (r *fakeRun) Dispose(ctx context.Context) error {
	r.mu.Lock()
	r.disposes++
	release := r.releaseFn
	r.mu.Unlock()
	r.Cancel()
	<-r.done
	if release != nil {
		return release(ctx)
	}
	return nil
}

func (r *fakeRun) counts() (cancels, disposes int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cancels, r.disposes
}

// steerRun is a fakeRun that accepts steering.
type steerRun struct {
	*fakeRun
	steered [][]model.Block
}

var _ Steerer = (*steerRun)(nil)

func (r *steerRun) Steer(_ context.Context, content []model.Block) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.settled {
		return "", Errorf(ESteerRejected, "run settled")
	}
	r.steered = append(r.steered, content)
	return fmt.Sprintf("msg-%d", len(r.steered)), nil
}

// fakeStore implements the parts of store.Store the service uses; any other
// method panics through the nil embedded interface.
type fakeStore struct {
	store.Store

	mu        sync.Mutex
	nextID    int64
	lifecycle []store.LifecycleEvent
	runs      map[string]store.Run
	// failStartRun and failAppend make those calls fail.
	failStartRun error
	failAppend   error
	tenants      []string // tenant of every write
}

func newFakeStore() *fakeStore { return &fakeStore{runs: map[string]store.Run{}} }

func (s *fakeStore) append(ctx context.Context, e store.LifecycleEvent) store.LifecycleEvent {
	s.nextID++
	e.ID = s.nextID
	s.lifecycle = append(s.lifecycle, e)
	s.tenants = append(s.tenants, store.Tenant(ctx))
	return e
}

func (s *fakeStore) AppendLifecycle(ctx context.Context, e store.LifecycleEvent) (store.LifecycleEvent, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failAppend != nil {
		return store.LifecycleEvent{}, s.failAppend
	}
	return s.append(ctx, e), nil
}

func (s *fakeStore) Lifecycle(ctx context.Context, f store.LifecycleFilter) ([]store.LifecycleEvent, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []store.LifecycleEvent
	for _, e := range s.lifecycle {
		if e.ID > f.After && (len(f.Types) == 0 || slices.Contains(f.Types, e.Type)) && len(out) < f.Limit {
			out = append(out, e)
		}
	}
	return out, nil
}

func (s *fakeStore) StartRun(ctx context.Context, r store.Run, start store.LifecycleEvent) (store.LifecycleEvent, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failStartRun != nil {
		return store.LifecycleEvent{}, s.failStartRun
	}
	if _, ok := s.runs[r.ID]; ok {
		return store.LifecycleEvent{}, store.ErrConflict
	}
	s.runs[r.ID] = r
	return s.append(ctx, start), nil
}

func (s *fakeStore) EndRun(ctx context.Context, runID string, res store.RunResult, end store.LifecycleEvent) (store.LifecycleEvent, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.runs[runID]
	switch {
	case !ok:
		return store.LifecycleEvent{}, store.ErrNotFound
	case r.State != store.StateRunning:
		return store.LifecycleEvent{}, store.ErrConflict
	}
	r.State, r.StopReason, r.Output, r.Structured, r.Diagnostic, r.EndedAt =
		store.StateSettled, res.StopReason, res.Output, res.Structured, res.Diagnostic, res.EndedAt
	s.runs[runID] = r
	return s.append(ctx, end), nil
}

func (s *fakeStore) DisposeRun(ctx context.Context, runID string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.runs[runID]
	switch {
	case !ok:
		return store.ErrNotFound
	case r.State == store.StateRunning:
		return store.ErrConflict
	}
	r.State = store.StateDisposed
	s.runs[runID] = r
	s.tenants = append(s.tenants, store.Tenant(ctx))
	return nil
}

func (s *fakeStore) run(id string) (store.Run, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.runs[id]
	return r, ok
}

func (s *fakeStore) events() []store.LifecycleEvent {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.lifecycle)
}

// recorder is a Listener that records every event it sees.
type recorder struct {
	mu     sync.Mutex
	events []Event
	seen   chan Event
}

func newRecorder() *recorder { return &recorder{seen: make(chan Event, 100)} }

func (r *recorder) listen(_ context.Context, e Event) error {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
	r.seen <- e
	return nil
}

func (r *recorder) all() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// types lists the recorded event types.
func (r *recorder) types() []string {
	var out []string
	for _, e := range r.all() {
		out = append(out, e.Type)
	}
	return out
}

// testBundle is what setup returns besides the service.
type testBundle struct {
	store *fakeStore
	rec   *recorder // unscoped listener
	logs  *logtest.Buffer
}

func setup(t *testing.T, providers ...*fakeProvider) (*Service, *testBundle) {
	t.Helper()
	b := &testBundle{store: newFakeStore(), rec: newRecorder(), logs: &logtest.Buffer{}}
	svc := NewService(Config{
		Store:  b.store,
		Logger: slog.New(slog.NewTextHandler(b.logs, nil)),
		Owner:  "replica-1",
	})
	for _, p := range providers {
		if err := svc.Register(t.Context(), p); err != nil {
			t.Fatalf("register %s: %v", p.name, err)
		}
	}
	svc.Subscribe("", b.rec.listen)
	t.Cleanup(func() {
		if err := svc.Shutdown(context.WithoutCancel(t.Context())); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if t.Failed() {
			t.Log("service log:\n" + b.logs.String())
		}
	})
	return svc, b
}

// parent returns a top-level parent session.
func parent(id string) Parent {
	return Parent{Session: store.Session{ID: id}}
}

// request returns a minimal valid request of parent "p1".
func request() Request {
	return Request{Prompt: []model.Block{model.TextBlock("do it")}, Parent: parent("p1")}
}

// waitDone waits for the handle's end, failing after a generous bound so a
// broken implementation fails instead of hanging.
func waitDone(t *testing.T, h *RunHandle) {
	t.Helper()
	select {
	case <-h.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("run %s did not settle", h.ID())
	}
}

func ptr[T any](v T) *T { return &v }

// fakePreparer is a Preparer whose children are fakePrepared, over a
// fakeRun; prepareFn, if set, runs first.
type fakePreparer struct {
	fakeProvider
	prepareFn func(ctx context.Context)
	children  chan *fakePrepared
}

var _ Preparer = (*fakePreparer)(nil)

func (p *fakePreparer) Prepare(ctx context.Context, req ResolvedRequest) (PreparedChild, error) {
	if p.prepareFn != nil {
		p.prepareFn(ctx)
	}
	c := &fakePrepared{run: newFakeRun("child-"+p.name, true), launched: make(chan Settle, 1)}
	p.children <- c
	return c, nil
}

// fakePrepared is a PreparedChild whose Launch hands its Settle to the test.
type fakePrepared struct {
	run      *fakeRun
	log      []store.Event
	launched chan Settle
}

func (c *fakePrepared) Session() (store.Session, []store.NewEvent) {
	return store.Session{ID: c.run.childID}, []store.NewEvent{{Type: "turn/start", Data: []byte(`{}`)}}
}

func (c *fakePrepared) Run() Run { return c.run }

func (c *fakePrepared) Launch(log []store.Event, settle Settle) {
	c.log = log
	c.launched <- settle
}

func (s *fakeStore) StartRunWithSession(ctx context.Context, p store.StartRunParams) ([]store.Event, store.LifecycleEvent, error) {
	start, err := s.StartRun(ctx, p.Run, p.Start)
	if err != nil {
		return nil, start, err
	}
	log := make([]store.Event, len(p.Events))
	for i, e := range p.Events {
		log[i] = store.Event{Seq: int64(i), Type: e.Type, Data: e.Data}
	}
	return log, start, nil
}

func (s *fakeStore) EndRunWithEvents(ctx context.Context, p store.EndRunParams) (store.LifecycleEvent, []store.Event, error) {
	end, err := s.EndRun(ctx, p.RunID, p.Result, p.End)
	if err != nil {
		return end, nil, err
	}
	log := make([]store.Event, len(p.Events))
	for i, e := range p.Events {
		log[i] = store.Event{Seq: int64(100 + i), Type: e.Type, Data: e.Data}
	}
	return end, log, nil
}
