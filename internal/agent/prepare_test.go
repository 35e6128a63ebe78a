package agent

import (
	"context"
	"slices"
	"testing"

	"github.com/subagentd/subagentd/internal/model/scripted"
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
	planned := []store.Event{{Seq: 0, Type: EventApprovalPolicy, Data: []byte(`{"policy":"never"}`)}}
	var ended []TurnEnd
	cfg := Config{ID: "s", Store: st, Logger: testLogger(t), Model: m,
		Created:         &Created{Header: store.Session{ID: "s"}, Log: planned},
		BeforeFirstStep: func() []store.NewEvent { return []store.NewEvent{{Type: "subagent/descriptor", Data: []byte(`{}`)}} },
		EndTurn: func(ctx context.Context, end TurnEnd) ([]store.Event, error) {
			ended = append(ended, TurnEnd{Log: slices.Clone(end.Log), Events: end.Events})
			return st.AppendEvents(ctx, "s", end.Events...)
		}}
	a, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close(testCtx(t)) })
	evs, err := a.PrepareFollowup(UserMessage{Content: text("go"), Source: userSrc})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.PrepareFollowup(UserMessage{Content: text("again")}); err == nil {
		t.Error("a second PrepareFollowup was accepted")
	}
	want := []string{EventInboxSpliced, EventTurnStart, EventInboxSpliced, EventUserMessage, "subagent/descriptor", EventStepStart}
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
	stored, err := st.AppendEvents(t.Context(), "s", append([]store.NewEvent{{Type: EventApprovalPolicy, Data: planned[0].Data}}, evs...)...)
	if err != nil {
		t.Fatal(err)
	}
	a.Launch(stored)
	waitIdle(t, a)
	log := st.log("s")
	if n := len(ofType[StepData](t, log, EventStepStart)); n != 1 {
		t.Errorf("%d step/starts, want the prepared one only", n)
	}
	if ends := turnEnds(t, log); !slices.Equal(ends, []string{ReasonCompleted}) {
		t.Errorf("turn ends %v", ends)
	}
	if len(m.Requests()) != 1 || len(ended) != 1 {
		t.Fatalf("model calls %d, EndTurn calls %d; want 1 each", len(m.Requests()), len(ended))
	}
	if tail := types(ended[0].Log[min(len(stored), len(ended[0].Log)):]); len(tail) == 0 || slices.ContainsFunc(tail, func(typ string) bool { return typ != EventAssistantChunk }) {
		t.Errorf("EndTurn saw %v after the stored log, want the chunks", tail)
	}
	var endTypes []string
	for _, e := range ended[0].Events {
		endTypes = append(endTypes, e.Type)
	}
	if !slices.Equal(endTypes, []string{EventAssistantMessage, EventStepEnd, EventTurnEnd}) {
		t.Errorf("EndTurn wrote %v", endTypes)
	}
	if got := a.Events(); len(got) != len(log) {
		t.Errorf("agent mirrors %d events, the store holds %d", len(got), len(log))
	}
	checkSeqs(t, log)
}
