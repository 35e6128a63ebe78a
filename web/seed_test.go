package web_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/store"
)

// seeder writes history straight into a test server's store: sessions,
// settled runs with their lifecycle events, and session logs, so a test can
// show the page a tree it could not cheaply produce through agents (usage
// numbers, failures, a thousand sessions) and know every value it expects.
type seeder struct {
	t   *testing.T
	st  store.Store
	ctx context.Context
}

func (s *testServer) seeder(t *testing.T) *seeder {
	return &seeder{t: t, st: s.st, ctx: t.Context()}
}

func newID(prefix string) string {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return prefix + "-" + hex.EncodeToString(b)
}

func rawJSON(t *testing.T, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	return b
}

// root creates a root session.
func (sd *seeder) root(label string, created time.Time) string {
	sd.t.Helper()
	id := newID("root")
	if err := sd.st.CreateSession(sd.ctx, store.Session{ID: id, Label: label, CreatedAt: created}); err != nil {
		sd.t.Fatalf("seeding root %q: %v", label, err)
	}
	return id
}

// child creates a child session of parent with its descriptor in its log.
func (sd *seeder) child(parent, provider, mode, label string, created time.Time) string {
	sd.t.Helper()
	id := newID("child")
	if err := sd.st.CreateSession(sd.ctx, store.Session{ID: id, ParentID: parent, Origin: "subagent", DelegationDepth: 1,
		Provider: provider, Mode: mode, Label: label, CreatedAt: created}); err != nil {
		sd.t.Fatalf("seeding child %q: %v", label, err)
	}
	desc := map[string]any{"mode": mode, "provider": provider}
	if label != "" {
		desc["label"] = label
	}
	sd.events(id, created, ev("subagent/descriptor", desc))
	return id
}

// seedRun is one settled (or, with a zero end, running) run to seed.
type seedRun struct {
	child, parent, provider, taskID string
	start, end                      time.Time
	stop, output                    string
	structured                      any
	// in and out are the tokens its result reports (one model call); none
	// when both are zero.
	in, out int64
}

// run stores r with its subagent/start (and subagent/end) lifecycle events
// and returns its id.
func (sd *seeder) run(r seedRun) string {
	sd.t.Helper()
	id := newID("run")
	kind := store.KindOneShot
	if r.taskID != "" {
		kind = store.KindActivation
	}
	payload := map[string]any{"runId": id, "provider": r.provider, "id": r.child, "local": true, "parentSessionId": r.parent}
	if r.taskID != "" {
		payload["taskId"] = r.taskID
	}
	if _, err := sd.st.StartRun(sd.ctx, store.Run{ID: id, Kind: kind, Provider: r.provider, ChildID: r.child, ParentID: r.parent,
		TaskID: r.taskID, Local: true, StartedAt: r.start, Owner: "seed"},
		store.LifecycleEvent{Type: "subagent/start", ParentID: r.parent, RunID: id, Time: r.start, Payload: rawJSON(sd.t, payload)}); err != nil {
		sd.t.Fatalf("seeding run: %v", err)
	}
	if r.end.IsZero() {
		return id
	}
	output := []map[string]string{}
	if r.output != "" {
		output = append(output, map[string]string{"type": "text", "text": r.output})
		payload["lastAssistantMessage"] = output
	}
	payload["stopReason"] = r.stop
	res := store.RunResult{StopReason: r.stop, Output: rawJSON(sd.t, output), EndedAt: r.end}
	if r.in+r.out > 0 {
		res.Usage, res.UsageKnown = store.Usage{InputTokens: r.in, OutputTokens: r.out, ModelCalls: 1, Reported: 1}, true
	}
	if r.structured != nil {
		res.Structured = rawJSON(sd.t, r.structured)
	}
	if _, err := sd.st.EndRun(sd.ctx, id, res,
		store.LifecycleEvent{Type: "subagent/end", ParentID: r.parent, RunID: id, Time: r.end, Payload: rawJSON(sd.t, payload)}); err != nil {
		sd.t.Fatalf("seeding the end of run %s: %v", id, err)
	}
	return id
}

// event is one log entry to seed: a type and its payload.
type event struct {
	typ  string
	data any
}

func ev(typ string, data any) event { return event{typ, data} }

// events appends evs to a session log, one millisecond apart from at. An
// assistant/message with usage counts one model call and its tokens in the
// session's running sum, as sessionlog.Encode does.
func (sd *seeder) events(session string, at time.Time, evs ...event) {
	sd.t.Helper()
	out := make([]store.NewEvent, len(evs))
	for i, e := range evs {
		out[i] = store.NewEvent{Type: e.typ, Time: at.Add(time.Duration(i) * time.Millisecond), Data: rawJSON(sd.t, e.data)}
		if m, ok := e.data.(map[string]any); ok && e.typ == "assistant/message" {
			if u, ok := m["usage"].(map[string]int); ok {
				out[i].Usage = store.Usage{InputTokens: int64(u["inputTokens"]), OutputTokens: int64(u["outputTokens"]), ModelCalls: 1, Reported: 1}
			}
		}
	}
	if _, err := sd.st.AppendEvents(sd.ctx, session, out...); err != nil {
		sd.t.Fatalf("seeding events of %s: %v", session, err)
	}
}

// turn is the log of one turn: the prompt, one assistant step that
// answers with text and the given usage, and the turn's end.
func turn(n int, prompt, answer string, in, out int) []event {
	text := func(s string) []map[string]string { return []map[string]string{{"type": "text", "text": s}} }
	return []event{
		ev("user/message", map[string]any{"id": newID("msg"), "role": "user", "content": text(prompt), "source": map[string]string{"kind": "user"}}),
		ev("turn/start", map[string]any{"turn": n}),
		ev("step/start", map[string]any{"turn": n, "step": 1}),
		ev("assistant/chunk", map[string]any{"turn": n, "step": 1, "chunk": map[string]string{"type": "text-delta", "text": answer}}),
		ev("assistant/message", map[string]any{"turn": n, "step": 1, "message": map[string]any{"role": "assistant", "content": text(answer)},
			"usage": map[string]int{"inputTokens": in, "outputTokens": out}}),
		ev("step/end", map[string]any{"turn": n, "step": 1}),
		ev("turn/end", map[string]any{"turn": n, "reason": map[string]string{"kind": "completed"}}),
	}
}
