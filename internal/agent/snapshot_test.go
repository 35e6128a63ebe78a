package agent

import (
	"context"
	"encoding/json"
	"slices"
	"testing"

	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/model/scripted"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
)

// requestHistory is the history of the model's first request, role:text.
func requestHistory(m *scripted.Model) []string {
	var got []string
	for _, msg := range m.Requests()[0].Messages {
		got = append(got, string(msg.Role)+":"+model.Text(msg.Content))
	}
	return got
}

// snapshots decodes the history/snapshot events of evs.
func snapshots(t *testing.T, evs []store.Event) []sessionlog.SnapshotData {
	t.Helper()
	var out []sessionlog.SnapshotData
	for _, e := range evs {
		if e.Type != sessionlog.EventSnapshot {
			continue
		}
		d, err := sessionlog.DecodeSnapshot(e)
		if err != nil {
			t.Fatalf("snapshot at seq %d: %v", e.Seq, err)
		}
		out = append(out, d)
	}
	return out
}

// TestSnapshot_ColdResumeStartsAtTheNewestSnapshot: turn ends write
// snapshots; a new agent reads the log from the newest one on, yet
// continues turn numbering and the model history (tool call included) as
// from the whole log, and its snapshots list the messages logged since.
func TestSnapshot_ColdResumeStartsAtTheNewestSnapshot(t *testing.T) {
	t.Parallel()
	st := newFakeStore()
	first := newAgent(t, st, Config{SnapshotEvery: 1, Global: registry(t, "read"), Model: scripted.New(
		scripted.Step{ToolCalls: []model.ToolCall{{ID: "c1", Name: "read", Arguments: "{}"}}},
		scripted.Step{Text: "r1"},
		scripted.Step{Text: "r2"})})
	one := followup(t, first, "one")
	waitIdle(t, first)
	two := followup(t, first, "two")
	waitIdle(t, first)
	if err := first.Close(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	log := st.log("s")
	snaps := snapshots(t, log)
	if len(snaps) != 2 || log[len(log)-1].Type != sessionlog.EventSnapshot {
		t.Fatalf("log %v: want a snapshot after each turn's end", types(log))
	}
	if d := snaps[1]; d.Turn != 2 || !slices.Equal(d.Logged, []string{one, two}) || len(d.Queue) != 0 {
		t.Errorf("last snapshot turn %d, logged %v, queue %v; want turn 2, logged [%s %s], no queue", d.Turn, d.Logged, d.Queue, one, two)
	}

	m := scripted.New(scripted.Step{Text: "r3"})
	second := newAgent(t, st, Config{Model: m, Global: registry(t, "read")})
	if evs := second.Events(); len(evs) != 1 || evs[0].Seq != log[len(log)-1].Seq {
		t.Fatalf("loaded %v, want only the newest snapshot", types(evs))
	}
	// A message the log holds is not inserted again.
	if _, err := second.FollowupMessage(testCtx(t), userMsg(two, "two")); err != nil || len(second.Events()) != 1 {
		t.Fatalf("redelivering a logged message: %v, log %v", err, types(second.Events()))
	}
	followup(t, second, "three")
	waitIdle(t, second)
	if starts := ofType[sessionlog.TurnData](t, second.Events(), sessionlog.EventTurnStart); len(starts) != 1 || starts[0].Turn != 3 {
		t.Errorf("turn/start %+v, want turn 3", starts)
	}
	want := []string{"user:one", "assistant:", "tool:read ran with {}", "assistant:r1", "user:two", "assistant:r2", "user:three"}
	if got := requestHistory(m); !slices.Equal(got, want) {
		t.Errorf("history %v, want %v", got, want)
	}
	// The default threshold writes no snapshot for this short turn.
	if n := len(snapshots(t, second.Events())); n != 1 {
		t.Errorf("second agent's log holds %d snapshots, want only the loaded one", n)
	}
}

// TestSnapshot_RestoresInboxAndCapture: a snapshot's queue is parked and
// runs first, in order, at the next followup; its logged ids are not
// inserted again; its committed capture is the agent's.
func TestSnapshot_RestoresInboxAndCapture(t *testing.T) {
	t.Parallel()
	st := newFakeStore()
	m2 := userMsg("m2", "queued")
	seed(t, st, store.Session{ID: "s"},
		event(sessionlog.EventUserMessage, userMsg("m0", "before the snapshot")).NewEvent,
		event(sessionlog.EventSnapshot, sessionlog.SnapshotData{Version: sessionlog.SnapshotVersion, Turn: 4,
			Messages: []sessionlog.SnapshotMessage{{Role: model.RoleUser, Content: text("earlier")}},
			Queue:    []sessionlog.UserMessage{m2}, Logged: []string{"m1"}, Structured: json.RawMessage(`{"ok":true}`)}).NewEvent)
	m := scripted.New(scripted.Step{Text: "a"}, scripted.Step{Text: "b"})
	a := newAgent(t, st, Config{Model: m, OutputSchema: json.RawMessage(`{"type":"object"}`)})
	if v, ok := a.Structured(); !ok || string(v) != `{"ok":true}` {
		t.Errorf("Structured() = %s, %v; want the snapshot's capture", v, ok)
	}
	if _, err := a.FollowupMessage(testCtx(t), userMsg("m1", "logged")); err != nil || len(a.Events()) != 1 {
		t.Fatalf("redelivering a logged message: %v, log %v", err, types(a.Events()))
	}
	if a.Running() {
		t.Fatal("the snapshot's queue started on its own; it must stay parked")
	}
	followup(t, a, "three")
	waitIdle(t, a)
	if got, want := userTexts(t, a.Events()), []string{"queued", "three"}; !slices.Equal(got, want) {
		t.Errorf("turns ran %v, want %v", got, want)
	}
	if starts := ofType[sessionlog.TurnData](t, a.Events(), sessionlog.EventTurnStart); len(starts) != 2 || starts[0].Turn != 5 {
		t.Errorf("turn/start %+v, want turns 5 and 6", starts)
	}
	if got, want := requestHistory(m), []string{"user:earlier", "user:queued"}; !slices.Equal(got, want) {
		t.Errorf("history %v, want %v", got, want)
	}
}

// TestSnapshot_ForkSeedSnapshotGivesHistoryOnly: a snapshot inside a fork
// seed (the parent's) gives the child its history and turn numbering, not
// the parent's inbox or capture.
func TestSnapshot_ForkSeedSnapshotGivesHistoryOnly(t *testing.T) {
	t.Parallel()
	st := newFakeStore()
	seed(t, st, store.Session{ID: "s", SeedLength: 2},
		event(sessionlog.EventSnapshot, sessionlog.SnapshotData{Version: sessionlog.SnapshotVersion, Turn: 2,
			Messages: []sessionlog.SnapshotMessage{{Role: model.RoleUser, Content: text("parent")}},
			Queue:    []sessionlog.UserMessage{userMsg("p1", "parent's queued")}, Structured: json.RawMessage(`{}`)}).NewEvent,
		store.NewEvent{Type: sessionlog.EventEndSeed, Data: json.RawMessage(`{}`)})
	m := scripted.New(scripted.Step{Text: "a"})
	a := newAgent(t, st, Config{Model: m, OutputSchema: json.RawMessage(`{"type":"object"}`)})
	if _, ok := a.Structured(); ok {
		t.Error("the parent's capture became the child's")
	}
	followup(t, a, "child")
	waitIdle(t, a)
	if got, want := userTexts(t, a.Events()), []string{"child"}; !slices.Equal(got, want) {
		t.Errorf("turns ran %v, want %v (the parent's queue is not the child's)", got, want)
	}
	if starts := ofType[sessionlog.TurnData](t, a.Events(), sessionlog.EventTurnStart); len(starts) != 1 || starts[0].Turn != 3 {
		t.Errorf("turn/start %+v, want turn 3", starts)
	}
	if got, want := requestHistory(m), []string{"user:parent", "user:child"}; !slices.Equal(got, want) {
		t.Errorf("history %v, want %v", got, want)
	}
}

// TestSnapshot_NeverAndUnreadable: a negative SnapshotEvery writes none,
// and a snapshot of another version makes load read the whole log.
func TestSnapshot_NeverAndUnreadable(t *testing.T) {
	t.Parallel()
	st := newFakeStore()
	a := newAgent(t, st, Config{SnapshotEvery: -1, Model: scripted.New(scripted.Step{Text: "r1"})})
	followup(t, a, "one")
	waitIdle(t, a)
	if n := len(snapshots(t, st.log("s"))); n != 0 {
		t.Fatalf("SnapshotEvery -1 wrote %d snapshots", n)
	}
	if _, err := st.AppendEvents(context.Background(), "s", store.NewEvent{Type: sessionlog.EventSnapshot,
		Data: json.RawMessage(`{"version":99,"messages":[]}`)}); err != nil {
		t.Fatal(err)
	}
	m := scripted.New(scripted.Step{Text: "r2"})
	b := newAgent(t, st, Config{ID: "s", Model: m})
	if n := len(b.Events()); n != len(st.log("s")) {
		t.Fatalf("loaded %d events over an unreadable snapshot, want the whole log of %d", n, len(st.log("s")))
	}
	followup(t, b, "two")
	waitIdle(t, b)
	if got, want := requestHistory(m), []string{"user:one", "assistant:r1", "user:two"}; !slices.Equal(got, want) {
		t.Errorf("history %v, want %v", got, want)
	}
}
