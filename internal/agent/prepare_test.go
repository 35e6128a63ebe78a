package agent

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/model/scripted"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
)

// TestPrepareFollowup_LaunchRunsTheStoredTurn: an agent made over a log not
// stored yet prepares its first turn up to the first step's start without
// writing; its creator stores all of it at once, Launch runs the turn over
// the stored log, and EndTurn writes the turn's end.
func TestPrepareFollowup_LaunchRunsTheStoredTurn(t *testing.T) {
	t.Parallel()
	st := newFakeStore()
	m := scripted.New(scripted.Step{Text: "hi"})
	planned := []store.Event{{Seq: 0, Type: sessionlog.EventApprovalPolicy, Data: []byte(`{"policy":"never"}`)}}
	var ended []TurnEnd
	cfg := Config{ID: "s", Store: st, Logger: testLogger(t), Model: m, ChunkLinger: time.Hour,
		Created:         &Created{Header: store.Session{ID: "s"}, Log: planned},
		BeforeFirstStep: func() []store.NewEvent { return []store.NewEvent{{Type: "subagent/descriptor", Data: []byte(`{}`)}} },
		EndTurn: func(ctx context.Context, end TurnEnd) ([]store.Event, error) {
			ended = append(ended, end)
			return st.AppendEvents(ctx, "s", end.Events...)
		}}
	a, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close(testCtx(t)) })
	a.Track()
	evs, err := a.PrepareFollowup(sessionlog.UserMessage{Content: text("go"), Source: userSrc})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.PrepareFollowup(sessionlog.UserMessage{Content: text("again")}); err == nil {
		t.Error("a second PrepareFollowup was accepted")
	}
	want := []string{sessionlog.EventInboxSpliced, sessionlog.EventTurnStart, sessionlog.EventInboxSpliced, sessionlog.EventUserMessage, "subagent/descriptor", sessionlog.EventStepStart}
	var got []string
	for _, e := range evs {
		got = append(got, e.Type)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("prepared %v, want %v", got, want)
	}
	if len(m.Requests()) != 0 || len(st.log("s")) != 0 {
		t.Fatal("PrepareFollowup called the model or wrote")
	}
	// The creator stores the planned log and the prepared events at once.
	if err := st.CreateSession(t.Context(), store.Session{ID: "s"}); err != nil {
		t.Fatal(err)
	}
	stored, err := st.AppendEvents(t.Context(), "s", append([]store.NewEvent{{Type: sessionlog.EventApprovalPolicy, Data: planned[0].Data}}, evs...)...)
	if err != nil {
		t.Fatal(err)
	}
	a.Launch(stored)
	waitIdle(t, a)
	log := st.log("s")
	if n := len(ofType[sessionlog.StepData](t, log, sessionlog.EventStepStart)); n != 1 {
		t.Errorf("%d step/starts, want the prepared one only", n)
	}
	if ends := turnEnds(t, log); !slices.Equal(ends, []string{sessionlog.ReasonCompleted}) {
		t.Errorf("turn ends %v", ends)
	}
	if len(m.Requests()) != 1 || len(ended) != 1 {
		t.Fatalf("model calls %d, EndTurn calls %d; want 1 each", len(m.Requests()), len(ended))
	}
	// Launch folded the prepared events into the history and the outcome.
	if msgs := m.Requests()[0].Messages; len(msgs) != 1 || model.Text(msgs[0].Content) != "go" {
		t.Errorf("the model was sent %+v, want the prompt", msgs)
	}
	o := ended[0].Outcome
	if o.End == nil || o.End.Turn != 1 || o.End.Seq != log[len(log)-1].Seq || o.End.Reason.Kind != sessionlog.ReasonCompleted || model.Text(o.Output) != "hi" || len(o.Messages) != 1 {
		t.Errorf("EndTurn's outcome %+v, want turn 1 completed with output hi and the prompt", o)
	}
	if got := a.Outcome(); got.End == nil || got.End.Seq != log[len(log)-1].Seq || model.Text(got.Output) != "hi" {
		t.Errorf("outcome after the turn %+v, want its end at seq %d", got, log[len(log)-1].Seq)
	}
	var endTypes []string
	for _, e := range ended[0].Events {
		endTypes = append(endTypes, e.Type)
	}
	// The stream was done within the linger: its deltas go with the end.
	if !slices.Equal(endTypes, []string{sessionlog.EventAssistantChunk, sessionlog.EventAssistantChunk, sessionlog.EventAssistantMessage, sessionlog.EventStepEnd, sessionlog.EventTurnEnd}) {
		t.Errorf("EndTurn wrote %v", endTypes)
	}
	if got := a.Events(); len(got) != len(log) {
		t.Errorf("agent mirrors %d events, the store holds %d", len(got), len(log))
	}
	checkSeqs(t, log)
}
