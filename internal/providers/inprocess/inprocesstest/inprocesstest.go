// Package inprocesstest is the test harness of the in-process providers: an
// in-memory store, a real subagent.Service with spawn and fork registered,
// model routes of the caller's choosing and a root parent session, plus
// helpers to read what a run left behind.
package inprocesstest

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"runtime"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/subagentd/subagentd/internal/agent"
	"github.com/subagentd/subagentd/internal/memstore"
	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/providers/fork"
	"github.com/subagentd/subagentd/internal/providers/inprocess"
	"github.com/subagentd/subagentd/internal/providers/spawn"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// Timeout bounds every wait of a test.
const Timeout = 20 * time.Second

// ParentCwd is the cwd of the harness's parent session.
const ParentCwd = "/srv/work/parent"

// Config adjusts New.
type Config struct {
	// Routes are the model routes; the first is the default. None means no
	// model is configured.
	Routes []model.Route
	// DeploymentPersona and Vars go into the providers' Deps.
	DeploymentPersona string
	Vars              map[string]func() (string, bool)
	// Hooks, when set, are called from inside the store calls of the
	// providers and the service, so tests can act at an exact point of a
	// child's setup.
	Hooks *Hooks
	// Store is the store of the harness; nil means a new memstore.
	Store store.Store
	// Owner names the harness's replica in leases; "" means "test".
	// LeaseDuration is its lease; zero means the Service's default.
	Owner         string
	LeaseDuration time.Duration
	// Governor, when set, builds the service's governor (a tree's limits)
	// over the harness's store.
	Governor func(store.Store) subagent.Governor
}

// Hooks are called after the store call they are named after. Set them
// before the calls they observe; a nil hook is skipped.
type Hooks struct {
	OnCreate func(store.Session)
	OnAppend func([]store.NewEvent)
	OnEvents func(sessionID string)
}

// hookStore calls Hooks from inside store calls.
type hookStore struct {
	store.Store
	hooks *Hooks
}

func (s hookStore) CreateSession(ctx context.Context, sess store.Session) error {
	err := s.Store.CreateSession(ctx, sess)
	if s.hooks.OnCreate != nil {
		s.hooks.OnCreate(sess)
	}
	return err
}

func (s hookStore) CreateSessionWithEvents(ctx context.Context, sess store.Session, evs ...store.NewEvent) ([]store.Event, error) {
	out, err := s.Store.CreateSessionWithEvents(ctx, sess, evs...)
	if s.hooks.OnCreate != nil {
		s.hooks.OnCreate(sess)
	}
	return out, err
}

func (s hookStore) StartRunWithSession(ctx context.Context, p store.StartRunParams) ([]store.Event, store.LifecycleEvent, error) {
	log, stored, err := s.Store.StartRunWithSession(ctx, p)
	if s.hooks.OnCreate != nil {
		s.hooks.OnCreate(p.Session)
	}
	return log, stored, err
}

func (s hookStore) AppendEvents(ctx context.Context, id string, evs ...store.NewEvent) ([]store.Event, error) {
	out, err := s.Store.AppendEvents(ctx, id, evs...)
	if s.hooks.OnAppend != nil {
		s.hooks.OnAppend(evs)
	}
	return out, err
}

func (s hookStore) Events(ctx context.Context, id string, after int64, limit int) ([]store.Event, error) {
	out, err := s.Store.Events(ctx, id, after, limit)
	if s.hooks.OnEvents != nil {
		s.hooks.OnEvents(id)
	}
	return out, err
}

// Harness is one isolated world: store, tools, service and parent.
type Harness struct {
	Store   store.Store
	Tools   *agent.Registry
	Deps    inprocess.Deps
	Service *subagent.Service
	// Parent is a root session stored in Store, with no route options.
	Parent subagent.Parent
	Logger *slog.Logger
}

// Logger returns a logger that discards everything: runs may log after a
// test's t.Log is gone.
func Logger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// New builds a harness and registers spawn and fork on its service.
func New(t testing.TB, cfg Config) *Harness {
	t.Helper()
	h := &Harness{Store: cfg.Store, Tools: agent.NewRegistry(), Logger: Logger()}
	if h.Store == nil {
		h.Store = memstore.New()
	}
	var routes *model.Routes
	if len(cfg.Routes) > 0 {
		var err error
		if routes, err = model.NewRoutes(cfg.Routes[0].Name, cfg.Routes...); err != nil {
			t.Fatal(err)
		}
	}
	var st store.Store = h.Store
	if cfg.Hooks != nil {
		st = hookStore{Store: h.Store, hooks: cfg.Hooks}
	}
	h.Deps = inprocess.Deps{Store: st, Routes: routes, Tools: h.Tools,
		DeploymentPersona: cfg.DeploymentPersona, Vars: cfg.Vars, Logger: h.Logger}
	owner := cfg.Owner
	if owner == "" {
		owner = "test"
	}
	scfg := subagent.Config{Store: st, Logger: h.Logger, Owner: owner, LeaseDuration: cfg.LeaseDuration}
	if cfg.Governor != nil {
		scfg.Governor = cfg.Governor(st)
	}
	h.Service = subagent.NewService(scfg)
	for _, p := range []subagent.Provider{spawn.New(h.Deps), fork.New(h.Deps)} {
		if err := h.Service.Register(Ctx(t), p); err != nil {
			t.Fatal(err)
		}
	}
	h.Parent = subagent.Parent{Session: h.NewSession(t, store.Session{Cwd: ParentCwd, Label: "parent"})}
	return h
}

// Route is a model route named name over m whose default model is
// name+"-default".
func Route(name string, m model.Model) model.Route {
	return model.Route{Name: name, Kind: "scripted", DefaultModel: name + "-default", Model: m}
}

// Ctx is t's context bounded by Timeout.
func Ctx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	t.Cleanup(cancel)
	return ctx
}

// NewSession stores s (a fresh id when s.ID is empty) and returns it as
// stored.
func (h *Harness) NewSession(t testing.TB, s store.Session) store.Session {
	t.Helper()
	if s.ID == "" {
		s.ID = uuid.NewString()
	}
	if err := h.Store.CreateSession(Ctx(t), s); err != nil {
		t.Fatal(err)
	}
	got, err := h.Store.GetSession(Ctx(t), s.ID)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// Text is a prompt of one text block.
func Text(s string) []model.Block { return []model.Block{model.TextBlock(s)} }

// Request is a request from the harness's parent with prompt.
func (h *Harness) Request(prompt string) subagent.Request {
	return subagent.Request{Prompt: Text(prompt), Parent: h.Parent}
}

// Start starts a run through the service, failing t on error, and disposes
// it when t ends.
func (h *Harness) Start(t testing.TB, provider string, req subagent.Request) *subagent.RunHandle {
	t.Helper()
	run, err := h.Service.Start(Ctx(t), provider, req)
	if err != nil {
		t.Fatalf("start %s: %v", provider, err)
	}
	t.Cleanup(func() {
		if err := run.Dispose(context.Background()); err != nil {
			t.Errorf("dispose: %v", err)
		}
	})
	return run
}

// Settle waits until run settled and returns its result, failing t when
// Result fails.
func Settle(t testing.TB, run *subagent.RunHandle) subagent.Result {
	t.Helper()
	select {
	case <-run.Done():
	case <-time.After(Timeout):
		t.Fatal("run did not settle")
	}
	res, err := run.Result()
	if err != nil {
		t.Fatalf("result: %v", err)
	}
	return res
}

// Log returns the whole log of session id.
func (h *Harness) Log(t testing.TB, id string) []store.Event {
	t.Helper()
	var out []store.Event
	for after := int64(-1); ; {
		page, err := h.Store.Events(Ctx(t), id, after, 1000)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			return out
		}
		out = append(out, page...)
		after = page[len(page)-1].Seq
	}
}

// WaitEvent blocks until session id's log holds an event matching pred and
// returns it.
func (h *Harness) WaitEvent(t testing.TB, id string, pred func(store.Event) bool) store.Event {
	t.Helper()
	wake, stop := h.Store.Subscribe(store.SessionTopic(id))
	defer stop()
	timeout := time.After(Timeout)
	for {
		for _, e := range h.Log(t, id) {
			if pred(e) {
				return e
			}
		}
		select {
		case <-wake:
		case <-timeout:
			t.Fatalf("session %s: no matching event", id)
		}
	}
}

// Type matches events of type typ.
func Type(typ string) func(store.Event) bool {
	return func(e store.Event) bool { return e.Type == typ }
}

// OfType returns the events of type typ.
func OfType(evs []store.Event, typ string) []store.Event {
	var out []store.Event
	for _, e := range evs {
		if e.Type == typ {
			out = append(out, e)
		}
	}
	return out
}

// Types lists the types of evs.
func Types(evs []store.Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.Type
	}
	return out
}

// Decode unmarshals e's payload into a T, failing t when it does not fit.
func Decode[T any](t testing.TB, e store.Event) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(e.Data, &v); err != nil {
		t.Fatalf("%s payload %s: %v", e.Type, e.Data, err)
	}
	return v
}

// Lifecycle returns every lifecycle event in the store, oldest first.
func (h *Harness) Lifecycle(t testing.TB) []subagent.Event {
	t.Helper()
	var out []subagent.Event
	for after := int64(0); ; {
		page, err := h.Store.Lifecycle(Ctx(t), store.LifecycleFilter{After: after, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			return out
		}
		for _, le := range page {
			e, err := subagent.ParseEvent(le)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, e)
		}
		after = page[len(page)-1].ID
	}
}

// RunEvents returns the subagent/start and subagent/end events.
func (h *Harness) RunEvents(t testing.TB) []subagent.Event {
	t.Helper()
	var out []subagent.Event
	for _, e := range h.Lifecycle(t) {
		if e.Type == subagent.EventStart || e.Type == subagent.EventEnd {
			out = append(out, e)
		}
	}
	return out
}

// Children returns the sessions whose parent is parentID.
func (h *Harness) Children(t testing.TB, parentID string) []store.Session {
	t.Helper()
	out, err := h.Store.ListSessions(Ctx(t), store.SessionFilter{ParentID: &parentID, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// AssertNothingPublished fails t when a run edge was recorded or the parent
// has a child session (R11, R20).
func (h *Harness) AssertNothingPublished(t testing.TB) {
	t.Helper()
	if evs := h.RunEvents(t); len(evs) > 0 {
		t.Errorf("lifecycle events were recorded: %+v", evs)
	}
	if kids := h.Children(t, h.Parent.Session.ID); len(kids) > 0 {
		t.Errorf("child sessions were created: %+v", kids)
	}
}

// WaitGoroutines waits until no more goroutines run than baseline, failing
// t after Timeout. Callers must not run in parallel with other tests.
func WaitGoroutines(t testing.TB, baseline int) {
	t.Helper()
	deadline := time.Now().Add(Timeout)
	for runtime.NumGoroutine() > baseline {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines left, want <= %d:\n%s", runtime.NumGoroutine(), baseline, buf[:runtime.Stack(buf, true)])
		}
		runtime.Gosched()
	}
}
