package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
)

// fakeStore is the part of store.Store the agent uses, in memory. Calling
// any other method panics (nil embedded interface).
type fakeStore struct {
	store.Store
	mu         sync.Mutex
	sessions   map[string]store.Session
	logs       map[string][]store.Event
	failAppend bool
	changed    chan struct{} // closed and replaced by every append
	// beforeAppend, set before the agent starts, sees every append first
	// (and may hold it).
	beforeAppend func(evs []store.NewEvent)
}

func newFakeStore() *fakeStore {
	return &fakeStore{sessions: map[string]store.Session{}, logs: map[string][]store.Event{}, changed: make(chan struct{})}
}

func (s *fakeStore) CreateSession(_ context.Context, sess store.Session) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.sessions[sess.ID]; ok {
		return store.ErrConflict
	}
	s.sessions[sess.ID] = sess
	return nil
}

func (s *fakeStore) GetSession(_ context.Context, id string) (store.Session, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sess, ok := s.sessions[id]
	if !ok {
		return store.Session{}, store.ErrNotFound
	}
	return sess, nil
}

var errStoreDown = errors.New("store down")

func (s *fakeStore) AppendEvents(_ context.Context, id string, evs ...store.NewEvent) ([]store.Event, error) {
	if s.beforeAppend != nil {
		s.beforeAppend(evs)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failAppend {
		return nil, errStoreDown
	}
	if _, ok := s.sessions[id]; !ok {
		return nil, store.ErrNotFound
	}
	var out []store.Event
	for _, e := range evs {
		if !json.Valid(e.Data) {
			return nil, fmt.Errorf("event %s: data is not JSON", e.Type)
		}
		out = append(out, store.Event{Seq: int64(len(s.logs[id]) + len(out)), Type: e.Type, Time: time.Now(), Data: e.Data})
	}
	s.logs[id] = append(s.logs[id], out...)
	close(s.changed)
	s.changed = make(chan struct{})
	return out, nil
}

func (s *fakeStore) Events(_ context.Context, id string, after int64, limit int) ([]store.Event, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.sessions[id]; !ok {
		return nil, store.ErrNotFound
	}
	log := s.logs[id]
	start := min(int(after+1), len(log))
	end := min(start+limit, len(log))
	return slices.Clone(log[start:end]), nil
}

// LogTail serves the log from its newest history/snapshot on.
func (s *fakeStore) LogTail(_ context.Context, id string, limit int) ([]store.Event, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.sessions[id]; !ok {
		return nil, store.ErrNotFound
	}
	log := s.logs[id]
	start := 0
	for i, e := range log {
		if e.Type == store.SnapshotEvent {
			start = i
		}
	}
	return slices.Clone(log[start:min(start+limit, len(log))]), nil
}

func (s *fakeStore) setFail(v bool) {
	s.mu.Lock()
	s.failAppend = v
	s.mu.Unlock()
}

func (s *fakeStore) log(id string) []store.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.logs[id])
}

// waitEvent blocks until session id's log holds an event matching pred and
// returns it.
func (s *fakeStore) waitEvent(t *testing.T, id string, pred func(store.Event) bool) store.Event {
	t.Helper()
	ctx := testCtx(t)
	for {
		s.mu.Lock()
		changed := s.changed
		for _, e := range s.logs[id] {
			if pred(e) {
				s.mu.Unlock()
				return e
			}
		}
		s.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			t.Fatal("timed out waiting for an event")
		}
	}
}

// isSplice matches agent/inbox/spliced events of target that insert
// (removed == 0) or remove removed messages with outcome.
func isSplice(target string, removed int, outcome string) func(store.Event) bool {
	return func(e store.Event) bool {
		var d sessionlog.InboxSplicedData
		return e.Type == sessionlog.EventInboxSpliced && json.Unmarshal(e.Data, &d) == nil &&
			d.Target == target && d.RemovedCount == removed && d.Outcome == outcome
	}
}

func testLogger(t *testing.T) *slog.Logger {
	t.Helper()
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// newAgent creates session cfg.ID (default "s") in st (a fresh store when
// nil) and an agent over it, closed at cleanup.
func newAgent(t *testing.T, st *fakeStore, cfg Config) *Agent {
	t.Helper()
	if st == nil {
		st = newFakeStore()
	}
	if cfg.ID == "" {
		cfg.ID = "s"
	}
	cfg.Store = st
	cfg.Logger = testLogger(t)
	if err := st.CreateSession(context.Background(), store.Session{ID: cfg.ID}); err != nil && !errors.Is(err, store.ErrConflict) {
		t.Fatal(err)
	}
	a, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if err := a.Close(testCtx(t)); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return a
}

// testCtx bounds a wait so that a broken test fails instead of hanging.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func text(s string) []model.Block { return []model.Block{model.TextBlock(s)} }

var userSrc = sessionlog.Source{Kind: "user"}

func followup(t *testing.T, a *Agent, s string) string {
	t.Helper()
	id, err := a.Followup(testCtx(t), text(s), userSrc)
	if err != nil {
		t.Fatalf("Followup(%q): %v", s, err)
	}
	return id
}

func waitIdle(t *testing.T, a *Agent) {
	t.Helper()
	if err := a.WaitIdle(testCtx(t)); err != nil {
		t.Fatalf("WaitIdle: %v", err)
	}
}

func types(evs []store.Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.Type
	}
	return out
}

// ofType returns the payloads of the events of type typ.
func ofType[T any](t *testing.T, evs []store.Event, typ string) []T {
	t.Helper()
	var out []T
	for _, e := range evs {
		if e.Type != typ {
			continue
		}
		var v T
		if err := json.Unmarshal(e.Data, &v); err != nil {
			t.Fatalf("decode %s: %v", typ, err)
		}
		out = append(out, v)
	}
	return out
}

// turnEnds returns the reason kinds of every turn/end.
func turnEnds(t *testing.T, evs []store.Event) []string {
	t.Helper()
	var out []string
	for _, d := range ofType[sessionlog.TurnEndData](t, evs, sessionlog.EventTurnEnd) {
		out = append(out, d.Reason.Kind)
	}
	return out
}

// userTexts returns the texts of every user/message.
func userTexts(t *testing.T, evs []store.Event) []string {
	t.Helper()
	var out []string
	for _, m := range ofType[sessionlog.UserMessage](t, evs, sessionlog.EventUserMessage) {
		out = append(out, model.Text(m.Content))
	}
	return out
}

func checkSeqs(t *testing.T, evs []store.Event) {
	t.Helper()
	for i, e := range evs {
		if e.Seq != int64(i) {
			t.Fatalf("event %d has seq %d", i, e.Seq)
		}
	}
}

func echoTool(name string) Tool {
	return Tool{Name: name, Description: name + " tool", Run: func(_ context.Context, c Call) ([]model.Block, error) {
		return text(name + " ran with " + string(c.Arguments)), nil
	}}
}

func registry(t *testing.T, names ...string) *Registry {
	t.Helper()
	r := NewRegistry()
	for _, n := range names {
		if err := r.Register(echoTool(n)); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

func toolNames(specs []model.ToolSpec) []string {
	var out []string
	for _, s := range specs {
		out = append(out, s.Name)
	}
	return out
}
