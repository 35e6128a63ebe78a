package children

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/agent"
	"github.com/subagentd/subagentd/internal/logtest"
	"github.com/subagentd/subagentd/internal/memstore"
	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/model/scripted"
	"github.com/subagentd/subagentd/internal/resident"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// feed is a list tests wait on: add appends and wakes waiters.
type feed[T any] struct {
	mu      sync.Mutex
	items   []T
	changed chan struct{}
}

func newFeed[T any]() *feed[T] { return &feed[T]{changed: make(chan struct{})} }

func (f *feed[T]) add(v T) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.items = append(f.items, v)
	close(f.changed)
	f.changed = make(chan struct{})
}

func (f *feed[T]) all() []T {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.items)
}

// waitFor blocks until pred holds for the items and returns them.
func (f *feed[T]) waitFor(t *testing.T, what string, pred func([]T) bool) []T {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		f.mu.Lock()
		items, changed := slices.Clone(f.items), f.changed
		f.mu.Unlock()
		if pred(items) {
			return items
		}
		select {
		case <-changed:
		case <-timeout:
			t.Fatalf("timed out waiting for %s; have %d items", what, len(items))
		}
	}
}

// notice is one message (settlement notice or report) a sink received.
type notice struct {
	parentID string
	content  []model.Block
	src      sessionlog.Source
	id       string
	quiet    bool
}

// noticeSink is a NoticeSink that records notices; fail makes it fail,
// and onNotify, when set, is called first with the message.
type noticeSink struct {
	*feed[notice]
	fail     error
	onNotify func(sessionlog.UserMessage)
}

func (s *noticeSink) Notify(_ context.Context, parentID string, msg sessionlog.UserMessage, quiet bool) error {
	if s.onNotify != nil {
		s.onNotify(msg)
	}
	s.add(notice{parentID: parentID, content: msg.Content, src: msg.Source, id: msg.ID, quiet: quiet})
	return s.fail
}

// spyStore is a store that records the acceptance order of inbox
// messages and can fail chosen calls.
type spyStore struct {
	store.Store
	mu          sync.Mutex
	enqueued    []string
	changed     chan struct{} // closed and replaced by every Enqueue
	failEnqueue error
}

func (s *spyStore) Enqueue(ctx context.Context, m store.InboxMessage) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failEnqueue != nil {
		return s.failEnqueue
	}
	if err := s.Store.Enqueue(ctx, m); err != nil {
		return err
	}
	s.enqueued = append(s.enqueued, m.ID)
	if s.changed != nil {
		close(s.changed)
	}
	s.changed = make(chan struct{})
	return nil
}

func (s *spyStore) accepted() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.enqueued)
}

// waitAccepted blocks until n messages were accepted.
func (s *spyStore) waitAccepted(t *testing.T, n int) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		s.mu.Lock()
		if s.changed == nil {
			s.changed = make(chan struct{})
		}
		got, changed := len(s.enqueued), s.changed
		s.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-changed:
		case <-timeout:
			t.Fatalf("timed out waiting for %d accepted messages (have %d)", n, got)
		}
	}
}

// testMat is a Materializer building real agents over the store with the
// env's model; it records every request. err fails Materialize before
// Create; wrap decorates the agent.
type testMat struct {
	st    store.Store
	model model.Model
	mu    sync.Mutex
	reqs  []subagent.MaterializeRequest
	err   error
	wrap  func(subagent.ChildAgent) subagent.ChildAgent
}

// setWrap sets the agent decorator of later materializations.
func (m *testMat) setWrap(wrap func(subagent.ChildAgent) subagent.ChildAgent) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.wrap = wrap
}

func (m *testMat) Materialize(ctx context.Context, req subagent.MaterializeRequest) (subagent.ChildAgent, error) {
	m.mu.Lock()
	m.reqs = append(m.reqs, req)
	fail, wrap := m.err, m.wrap
	m.mu.Unlock()
	if fail != nil {
		return nil, fail
	}
	if req.Create != nil {
		if err := req.Create(ctx); err != nil {
			return nil, err
		}
	}
	a, err := agent.New(ctx, agent.Config{ID: req.Session.ID, Store: m.st, Model: m.model,
		ModelName: req.Options.Model, MaxTokens: req.Options.MaxTokens, Persona: req.Descriptor.Persona})
	if err != nil {
		return nil, err
	}
	if wrap != nil {
		return wrap(a), nil
	}
	return a, nil
}

func (m *testMat) requests() []subagent.MaterializeRequest {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.reqs)
}

// contProvider is a ContinuableProvider over fakeProvider.
type contProvider struct {
	*fakeProvider
	prepare func(ctx context.Context, req subagent.ContinuableCreateRequest) (subagent.ContinuableSpec, error)
}

func (p *contProvider) PrepareContinuable(ctx context.Context, req subagent.ContinuableCreateRequest) (subagent.ContinuableSpec, error) {
	if p.prepare != nil {
		return p.prepare(ctx, req)
	}
	return subagent.ContinuableSpec{}, nil
}

// contEnv is a Service and Manager over a spyStore with a "spawn"
// continuable provider, a root parent "p1" and recorders.
type contEnv struct {
	st      *spyStore
	svc     *subagent.Service
	m       *Manager
	mat     *testMat
	prov    *contProvider
	life    *feed[subagent.Event]
	notices *noticeSink
	logs    *logtest.Buffer
}

func newContEnv(t *testing.T, mdl model.Model) *contEnv {
	t.Helper()
	st := &spyStore{Store: memstore.New()}
	return newContEnvOver(t, st, mdl)
}

// newContEnvOver builds an env over an existing store (a restarted process).
func newContEnvOver(t *testing.T, st *spyStore, mdl model.Model) *contEnv {
	t.Helper()
	return newContEnvWith(t, st, mdl, subagent.Config{})
}

// newContEnvWith builds an env over st whose Service has cfg (its store,
// logger and owner are the env's).
func newContEnvWith(t *testing.T, st *spyStore, mdl model.Model, cfg subagent.Config) *contEnv {
	t.Helper()
	e := &contEnv{st: st, life: newFeed[subagent.Event](), notices: &noticeSink{feed: newFeed[notice]()}, logs: &logtest.Buffer{}}
	logger := slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	cfg.Store, cfg.Logger, cfg.Owner = st, logger, "replica-1"
	e.svc = subagent.NewService(cfg)
	e.mat = &testMat{st: st, model: mdl}
	e.m = NewManager(e.svc, ManagerConfig{Materializer: e.mat, Notices: e.notices, Logger: logger})
	e.prov = &contProvider{fakeProvider: &fakeProvider{name: "spawn", caps: contCaps}}
	if err := e.svc.Register(t.Context(), e.prov); err != nil {
		t.Fatal(err)
	}
	e.svc.Subscribe("", func(_ context.Context, ev subagent.Event) error {
		if subagent.IsRunEvent(ev.Type) {
			e.life.add(ev)
		}
		return nil
	})
	if _, err := st.GetSession(t.Context(), "p1"); errors.Is(err, store.ErrNotFound) {
		if err := st.CreateSession(t.Context(), store.Session{ID: "p1", AgentProvider: "route-a", AgentModel: "model-a", MaxTokens: 500}); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		ctx := context.WithoutCancel(t.Context())
		if err := e.m.Shutdown(ctx); err != nil {
			t.Errorf("manager shutdown: %v", err)
		}
		if err := e.svc.Shutdown(ctx); err != nil {
			t.Errorf("service shutdown: %v", err)
		}
		if t.Failed() {
			t.Log("service log:\n" + e.logs.String())
		}
	})
	return e
}

// parent returns session id as a delegating parent with its header route.
func (e *contEnv) parent(t *testing.T, id string) subagent.Parent {
	t.Helper()
	s, err := e.st.GetSession(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	return subagent.Parent{Session: s, Options: subagent.AgentOptions{Provider: s.AgentProvider, Model: s.AgentModel, MaxTokens: s.MaxTokens}}
}

// req is a continuable request of parent p1 with prompt text.
// req is a continuable start of text under root p1 as a delegation tool
// makes it: the child's notices wake its parent.
func (e *contEnv) req(t *testing.T, text string) ContinuableRequest {
	return ContinuableRequest{Provider: "spawn", Label: "task", Prompt: txt(text), Parent: e.parent(t, "p1"), WakeParent: true}
}

func (e *contEnv) start(t *testing.T, req ContinuableRequest) ContinuableStarted {
	t.Helper()
	res, err := e.m.StartContinuable(t.Context(), req)
	if err != nil {
		t.Fatalf("StartContinuable: %v", err)
	}
	return res
}

// ended waits for the subagent/end of task taskID.
func (e *contEnv) ended(t *testing.T, taskID string) subagent.Event {
	t.Helper()
	evs := e.life.waitFor(t, "end of task "+taskID, func(evs []subagent.Event) bool {
		return slices.ContainsFunc(evs, func(ev subagent.Event) bool { return ev.Type == subagent.EventEnd && ev.TaskID == taskID })
	})
	return evs[slices.IndexFunc(evs, func(ev subagent.Event) bool { return ev.Type == subagent.EventEnd && ev.TaskID == taskID })]
}

// settled waits until childID has no live activation.
func (e *contEnv) settled(t *testing.T, childID string) {
	t.Helper()
	e.life.waitFor(t, "settlement of "+childID, func(evs []subagent.Event) bool {
		open := 0
		for _, ev := range evs {
			if ev.ID != childID {
				continue
			}
			if ev.Type == subagent.EventStart {
				open++
			} else {
				open--
			}
		}
		return open == 0 && len(evs) > 0
	})
	// The end is dispatched before the activation is removed: wait for the
	// removal.
	for act := e.m.liveActivation(resident.Key{Tenant: store.DefaultTenant, ID: childID}); act != nil; act = e.m.liveActivation(resident.Key{Tenant: store.DefaultTenant, ID: childID}) {
		<-act.done
	}
}

// log returns session id's whole log.
func (e *contEnv) log(t *testing.T, id string) []store.Event {
	t.Helper()
	evs, err := e.st.Events(t.Context(), id, -1, 1000)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// waitLog blocks until session id's log satisfies pred and returns it.
func (e *contEnv) waitLog(t *testing.T, id string, what string, pred func([]store.Event) bool) []store.Event {
	t.Helper()
	wake, stop := e.st.Subscribe(store.SessionTopic(id))
	defer stop()
	timeout := time.After(10 * time.Second)
	for {
		evs := e.log(t, id)
		if pred(evs) {
			return evs
		}
		select {
		case <-wake:
		case <-timeout:
			t.Fatalf("timed out waiting for %s in the log of %s (%d events)", what, id, len(evs))
		}
	}
}

// steersSubmitted matches a log holding n next-step inbox inserts.
func steersSubmitted(n int) func([]store.Event) bool {
	return func(evs []store.Event) bool {
		got := 0
		for _, e := range evs {
			var d sessionlog.InboxSplicedData
			if e.Type == sessionlog.EventInboxSpliced && json.Unmarshal(e.Data, &d) == nil &&
				d.Target == sessionlog.TargetNextStep && len(d.Inserted) > 0 {
				got++
			}
		}
		return got >= n
	}
}

func txt(s string) []model.Block { return []model.Block{model.TextBlock(s)} }

// userMessages returns the user/messages of evs.
func userMessages(t *testing.T, evs []store.Event) []sessionlog.UserMessage {
	t.Helper()
	var out []sessionlog.UserMessage
	for _, e := range evs {
		if e.Type != sessionlog.EventUserMessage {
			continue
		}
		var m sessionlog.UserMessage
		if err := json.Unmarshal(e.Data, &m); err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

func userTexts(t *testing.T, evs []store.Event) []string {
	t.Helper()
	var out []string
	for _, m := range userMessages(t, evs) {
		out = append(out, model.Text(m.Content))
	}
	return out
}

func countType(evs []store.Event, typ string) int {
	n := 0
	for _, e := range evs {
		if e.Type == typ {
			n++
		}
	}
	return n
}

// turnEndKinds returns the reason kind of every turn/end.
func turnEndKinds(t *testing.T, evs []store.Event) []string {
	t.Helper()
	var out []string
	for _, e := range evs {
		if e.Type != sessionlog.EventTurnEnd {
			continue
		}
		var d sessionlog.TurnEndData
		if err := json.Unmarshal(e.Data, &d); err != nil {
			t.Fatal(err)
		}
		out = append(out, d.Reason.Kind)
	}
	return out
}

// followupAsync runs Followup in a goroutine and returns its outcome
// channel.
type followupOutcome struct {
	res FollowupResult
	err error
}

func (e *contEnv) followupAsync(ctx context.Context, childID, text string) <-chan followupOutcome {
	out := make(chan followupOutcome, 1)
	go func() {
		res, err := e.m.Followup(ctx, "p1", childID, txt(text), sessionlog.Source{})
		out <- followupOutcome{res, err}
	}()
	return out
}

func await(t *testing.T, ch <-chan followupOutcome) followupOutcome {
	t.Helper()
	select {
	case o := <-ch:
		return o
	case <-time.After(10 * time.Second):
		t.Fatal("followup did not answer")
		return followupOutcome{}
	}
}

// gatedModel answers the first call with a step held until gate closes
// (reached closes when it is called), and every later call with "ok".
func gatedModel(gate, reached chan struct{}, first string) *scripted.Model {
	var mu sync.Mutex
	calls := 0
	return scripted.Func(func(model.Request) scripted.Step {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if calls == 1 {
			return scripted.Step{Text: first, Gate: gate, Reached: reached}
		}
		return scripted.Step{Text: "ok"}
	})
}

func wantCode(t *testing.T, err error, code string) {
	t.Helper()
	if got := subagent.ErrorCode(err); got != code {
		t.Fatalf("error %v: code %s, want %s", err, got, code)
	}
}
