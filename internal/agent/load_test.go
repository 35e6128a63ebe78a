package agent

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/model/scripted"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
)

func seed(t *testing.T, st *fakeStore, sess store.Session, evs ...store.NewEvent) {
	t.Helper()
	if err := st.CreateSession(context.Background(), sess); err != nil {
		t.Fatal(err)
	}
	if _, err := st.AppendEvents(context.Background(), sess.ID, evs...); err != nil {
		t.Fatal(err)
	}
}

func userMsg(id, s string) sessionlog.UserMessage {
	return sessionlog.UserMessage{ID: id, Role: "user", Content: text(s), Source: userSrc}
}

func insert(target string, start int, m sessionlog.UserMessage) store.NewEvent {
	return event(sessionlog.EventInboxSpliced, sessionlog.InboxSplicedData{Target: target, Start: start, Inserted: []sessionlog.UserMessage{m}}).NewEvent
}

func TestLoad_S3_2_ColdResumeContinuesTurnsAndHistory(t *testing.T) {
	t.Parallel()
	st := newFakeStore()
	first := newAgent(t, st, Config{Model: scripted.New(scripted.Step{Text: "r1"}, scripted.Step{Text: "r2"})})
	followup(t, first, "one")
	followup(t, first, "two")
	waitIdle(t, first)
	if err := first.Close(testCtx(t)); err != nil {
		t.Fatal(err)
	}

	m := scripted.New(scripted.Step{Text: "r3"})
	second := newAgent(t, st, Config{Model: m})
	if n := len(second.Events()); n != len(first.Events()) {
		t.Fatalf("loaded %d events, the log has %d", n, len(first.Events()))
	}
	followup(t, second, "three")
	waitIdle(t, second)
	starts := ofType[sessionlog.TurnData](t, second.Events(), sessionlog.EventTurnStart)
	if len(starts) != 3 || starts[2].Turn != 3 {
		t.Errorf("turn/start %+v", starts)
	}
	var got []string
	for _, msg := range m.Requests()[0].Messages {
		got = append(got, string(msg.Role)+":"+model.Text(msg.Content))
	}
	if want := []string{"user:one", "assistant:r1", "user:two", "assistant:r2", "user:three"}; !slices.Equal(got, want) {
		t.Errorf("history %v, want %v", got, want)
	}
	checkSeqs(t, second.Events())
}

func TestLoad_CrashRepairParksQueueAndCancelsSteers(t *testing.T) {
	t.Parallel()
	st := newFakeStore()
	m1, m2, s1 := userMsg("m1", "one"), userMsg("m2", "two"), userMsg("s1", "steer")
	seed(t, st, store.Session{ID: "s"},
		insert(sessionlog.TargetNextTurn, 0, m1),
		event(sessionlog.EventTurnStart, sessionlog.TurnData{Turn: 1}).NewEvent,
		event(sessionlog.EventInboxSpliced, sessionlog.InboxSplicedData{Target: sessionlog.TargetNextTurn, RemovedCount: 1, Inserted: []sessionlog.UserMessage{}}).NewEvent,
		event(sessionlog.EventUserMessage, m1).NewEvent,
		event(sessionlog.EventStepStart, sessionlog.StepData{Turn: 1, Step: 1}).NewEvent,
		event(sessionlog.EventAssistantMessage, sessionlog.AssistantMessageData{Turn: 1, Step: 1, Message: sessionlog.AssistantMessage{Role: "assistant",
			Content: []model.Block{sessionlog.ToolCallBlock(model.ToolCall{ID: "c1", Name: "read", Arguments: "{}"})}}}).NewEvent,
		event(sessionlog.EventToolCall, sessionlog.ToolCallData{Turn: 1, Step: 1, CallID: "c1", Name: "read", Arguments: "{}"}).NewEvent,
		insert(sessionlog.TargetNextTurn, 0, m2),
		insert(sessionlog.TargetNextStep, 0, s1),
	)
	m := scripted.New(scripted.Step{Text: "a"}, scripted.Step{Text: "b"})
	a := newAgent(t, st, Config{Model: m})
	evs := a.Events()
	tail := evs[len(evs)-3:]
	if got := types(tail); !slices.Equal(got, []string{sessionlog.EventStepEnd, sessionlog.EventTurnEnd, sessionlog.EventInboxSpliced}) {
		t.Fatalf("repair events %v", got)
	}
	if ends := turnEnds(t, evs); !slices.Equal(ends, []string{sessionlog.ReasonInterrupted}) {
		t.Errorf("turn ends %v", ends)
	}
	if !isSplice(sessionlog.TargetNextStep, 1, sessionlog.OutcomeCanceled)(tail[2]) {
		t.Errorf("steer cancel splice %s", tail[2].Data)
	}
	// The queued message is parked: nothing runs until the next followup.
	if a.Running() {
		t.Fatal("parked message started on load")
	}
	followup(t, a, "three")
	waitIdle(t, a)
	evs = a.Events()
	if got := userTexts(t, evs); !slices.Equal(got, []string{"one", "two", "three"}) {
		t.Errorf("user messages %v", got)
	}
	starts := ofType[sessionlog.TurnData](t, evs, sessionlog.EventTurnStart)
	if len(starts) != 3 || starts[1].Turn != 2 || starts[2].Turn != 3 {
		t.Errorf("turn/start %+v", starts)
	}
	// The unanswered call of the crashed turn reaches the model as an error
	// result, so the history stays well formed.
	h := m.Requests()[0].Messages
	if len(h) != 4 || h[2].Role != model.RoleTool || h[2].ToolCallID != "c1" || !h[2].IsError || model.Text(h[3].Content) != "two" {
		t.Errorf("history %+v", h)
	}
}

func TestLoad_S3_3_ForkSeedContinuesNumberingAndIgnoresParentInbox(t *testing.T) {
	t.Parallel()
	st := newFakeStore()
	p1 := userMsg("p1", "parent question")
	seedEvents := []store.NewEvent{
		insert(sessionlog.TargetNextTurn, 0, p1),
		event(sessionlog.EventTurnStart, sessionlog.TurnData{Turn: 1}).NewEvent,
		event(sessionlog.EventInboxSpliced, sessionlog.InboxSplicedData{Target: sessionlog.TargetNextTurn, RemovedCount: 1, Inserted: []sessionlog.UserMessage{}}).NewEvent,
		event(sessionlog.EventUserMessage, p1).NewEvent,
		insert(sessionlog.TargetNextTurn, 0, userMsg("p2", "parent pending")), // pending in the parent, not the child's
		event(sessionlog.EventStepStart, sessionlog.StepData{Turn: 1, Step: 1}).NewEvent,
		event(sessionlog.EventAssistantMessage, sessionlog.AssistantMessageData{Turn: 1, Step: 1, Message: sessionlog.AssistantMessage{Role: "assistant", Content: text("parent answer")}}).NewEvent,
		event(sessionlog.EventStepEnd, sessionlog.StepData{Turn: 1, Step: 1}).NewEvent,
		event(sessionlog.EventTurnEnd, sessionlog.TurnEndData{Turn: 1, Reason: sessionlog.TurnReason{Kind: sessionlog.ReasonCompleted}}).NewEvent,
	}
	seed(t, st, store.Session{ID: "child", SeedLength: len(seedEvents)},
		append(seedEvents, store.NewEvent{Type: sessionlog.EventEndSeed, Data: []byte(`{}`)})...)
	m := scripted.New(scripted.Step{Text: "child answer"})
	a := newAgent(t, st, Config{ID: "child", Model: m})
	if a.Running() {
		t.Fatal("the parent's pending message reached the child inbox")
	}
	followup(t, a, "task")
	waitIdle(t, a)
	starts := ofType[sessionlog.TurnData](t, a.Events(), sessionlog.EventTurnStart)
	if last := starts[len(starts)-1]; last.Turn != 2 {
		t.Errorf("child's first own turn is %d, want 2", last.Turn)
	}
	h := m.Requests()[0].Messages
	if len(h) != 3 || model.Text(h[0].Content) != "parent question" || model.Text(h[2].Content) != "task" {
		t.Errorf("history %+v", h)
	}
	if got := userTexts(t, a.Events()); !slices.Equal(got, []string{"parent question", "task"}) {
		t.Errorf("user messages %v", got)
	}
}

func TestLoad_S4_3_CommittedCaptureSurvivesReload(t *testing.T) {
	t.Parallel()
	st := newFakeStore()
	first := newAgent(t, st, Config{Model: scripted.New(scripted.Step{ToolCalls: []model.ToolCall{captureCall(`{"answer":"kept"}`)}}),
		OutputSchema: answerSchema})
	followup(t, first, "q")
	waitIdle(t, first)
	if err := first.Close(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	second := newAgent(t, st, Config{Model: scripted.New(), OutputSchema: answerSchema})
	if v, ok := second.Structured(); !ok || string(v) != `{"answer":"kept"}` {
		t.Errorf("Structured() after reload = %s, %v", v, ok)
	}
}

func TestFollowupMessage_R94_CallerIDLoggedAndDeliveryIdempotent(t *testing.T) {
	t.Parallel()
	st := newFakeStore()
	first := newAgent(t, st, Config{Model: scripted.New(scripted.Step{Text: "a"})})
	msg := sessionlog.UserMessage{ID: "accepted-1", Content: text("hello"), Source: userSrc}
	for range 2 {
		id, err := first.FollowupMessage(testCtx(t), msg)
		if err != nil || id != "accepted-1" {
			t.Fatalf("FollowupMessage: %q, %v", id, err)
		}
	}
	waitIdle(t, first)
	if err := first.Close(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	// Redelivery after a restart is recognised from the log.
	second := newAgent(t, st, Config{Model: scripted.New()})
	if id, err := second.FollowupMessage(testCtx(t), msg); err != nil || id != "accepted-1" || second.Running() {
		t.Fatalf("redelivery: %q, %v, running %v", id, err, second.Running())
	}
	um := ofType[sessionlog.UserMessage](t, second.Events(), sessionlog.EventUserMessage)
	if len(um) != 1 || um[0].ID != "accepted-1" {
		t.Errorf("user messages %+v", um)
	}
}

// noReads is a store whose reads fail: an agent given Created must not
// read its session back.
type noReads struct{ *fakeStore }

func (noReads) GetSession(context.Context, string) (store.Session, error) {
	return store.Session{}, errors.New("GetSession called")
}

func (noReads) Events(context.Context, string, int64, int) ([]store.Event, error) {
	return nil, errors.New("Events called")
}

func TestNew_CreatedReplaysTheGivenLogWithoutReading(t *testing.T) {
	t.Parallel()
	st := newFakeStore()
	first := newAgent(t, st, Config{Model: scripted.New(scripted.Step{Text: "r1"})})
	followup(t, first, "one")
	waitIdle(t, first)
	if err := first.Close(testCtx(t)); err != nil {
		t.Fatal(err)
	}

	m := scripted.New(scripted.Step{Text: "r2"})
	second, err := New(context.Background(), Config{ID: "s", Store: noReads{st}, Logger: testLogger(t), Model: m,
		Created: &Created{Header: store.Session{ID: "s"}, Log: first.Events()}})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = second.Close(testCtx(t)) })
	followup(t, second, "two")
	waitIdle(t, second)
	if starts := ofType[sessionlog.TurnData](t, second.Events(), sessionlog.EventTurnStart); len(starts) != 2 || starts[1].Turn != 2 {
		t.Errorf("turn/start %+v, want turn 2 after the given log's turn 1", starts)
	}
	if got := len(m.Requests()[0].Messages); got != 3 {
		t.Errorf("the model saw %d messages, want the given history and the new one (3)", got)
	}
	checkSeqs(t, second.Events())
}
