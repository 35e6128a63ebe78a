package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/model/echo"
	"github.com/subagentd/subagentd/internal/model/scripted"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
)

func TestTurn_S3_2_EventOrderAndPayloads(t *testing.T) {
	t.Parallel()
	st := newFakeStore()
	m := scripted.New(scripted.Step{Reasoning: "hmm", Text: "hello big world", Usage: &model.Usage{InputTokens: 7, OutputTokens: 3}})
	a := newAgent(t, st, Config{Model: m, ModelName: "m1", MaxTokens: 99})
	id := followup(t, a, "hi")
	waitIdle(t, a)

	evs := a.Events()
	if !slices.EqualFunc(evs, st.log("s"), func(x, y store.Event) bool { return x.Seq == y.Seq && x.Type == y.Type }) {
		t.Fatal("mirror differs from the store")
	}
	checkSeqs(t, evs)
	want := []string{
		sessionlog.EventInboxSpliced, sessionlog.EventTurnStart, sessionlog.EventInboxSpliced, sessionlog.EventUserMessage, sessionlog.EventStepStart,
		sessionlog.EventAssistantChunk, sessionlog.EventAssistantChunk, sessionlog.EventAssistantChunk, sessionlog.EventAssistantChunk, sessionlog.EventAssistantChunk, sessionlog.EventAssistantChunk,
		sessionlog.EventAssistantMessage, sessionlog.EventStepEnd, sessionlog.EventTurnEnd,
	}
	if got := types(evs); !slices.Equal(got, want) {
		t.Fatalf("event types\n got %v\nwant %v", got, want)
	}
	splices := ofType[sessionlog.InboxSplicedData](t, evs, sessionlog.EventInboxSpliced)
	if ins := splices[0]; ins.Target != sessionlog.TargetNextTurn || ins.Start != 0 || len(ins.Inserted) != 1 || ins.Inserted[0].ID != id {
		t.Errorf("insert splice %+v", ins)
	}
	if claim := splices[1]; claim.Target != sessionlog.TargetNextTurn || claim.RemovedCount != 1 || len(claim.Inserted) != 0 || claim.Outcome != "" {
		t.Errorf("claim splice %+v", claim)
	}
	if !json.Valid(evs[2].Data) || string(evs[2].Data) != `{"target":"next-turn","start":0,"removedCount":1,"inserted":[]}` {
		t.Errorf("claim splice JSON %s", evs[2].Data)
	}
	um := ofType[sessionlog.UserMessage](t, evs, sessionlog.EventUserMessage)[0]
	if um.ID != id || um.Role != "user" || model.Text(um.Content) != "hi" || um.Source.Kind != "user" {
		t.Errorf("user/message %+v", um)
	}
	if ts := ofType[sessionlog.TurnData](t, evs, sessionlog.EventTurnStart)[0]; ts.Turn != 1 {
		t.Errorf("turn/start %+v", ts)
	}
	chunks := ofType[sessionlog.ChunkData](t, evs, sessionlog.EventAssistantChunk)
	var streamed string
	for _, c := range chunks {
		if c.Turn != 1 || c.Step != 1 {
			t.Errorf("chunk %+v not in turn 1 step 1", c)
		}
		if c.Chunk.Type == string(model.ChunkText) {
			streamed += c.Chunk.Text
		}
	}
	if streamed != "hello big world" || chunks[0].Chunk.Type != "reasoning-delta" ||
		chunks[4].Chunk.Type != "usage" || chunks[4].Chunk.InputTokens != 7 || chunks[5].Chunk.FinishReason != "stop" {
		t.Errorf("chunks %+v", chunks)
	}
	am := ofType[sessionlog.AssistantMessageData](t, evs, sessionlog.EventAssistantMessage)[0]
	if am.Turn != 1 || am.Step != 1 || am.Message.Role != "assistant" || am.Interrupted ||
		len(am.Message.Content) != 2 || am.Message.Content[0].Type != "reasoning" || model.Text(am.Message.Content) != "hello big world" ||
		am.Usage == nil || *am.Usage != (sessionlog.UsageData{InputTokens: 7, OutputTokens: 3}) {
		t.Errorf("assistant/message %+v", am)
	}
	if se := ofType[sessionlog.StepData](t, evs, sessionlog.EventStepEnd)[0]; se != (sessionlog.StepData{Turn: 1, Step: 1}) {
		t.Errorf("step/end %+v", se)
	}
	if te := ofType[sessionlog.TurnEndData](t, evs, sessionlog.EventTurnEnd)[0]; te.Turn != 1 || te.Reason.Kind != sessionlog.ReasonCompleted || te.Reason.Cause != nil {
		t.Errorf("turn/end %+v", te)
	}
	req := m.Requests()[0]
	if req.Model != "m1" || req.MaxTokens != 99 || req.Tools != nil || len(req.Messages) != 1 || model.Text(req.Messages[0].Content) != "hi" {
		t.Errorf("request %+v", req)
	}
}

func TestTurn_ToolCallsRunAndFeedNextStep(t *testing.T) {
	t.Parallel()
	m := scripted.New(
		scripted.Step{Text: "let me", ToolCalls: []model.ToolCall{{ID: "c1", Name: "add", Arguments: `{"x":1}`}, {ID: "c2", Name: "nope"}}},
		scripted.Step{Text: "done"},
	)
	a := newAgent(t, nil, Config{Model: m, Global: registry(t, "add")})
	followup(t, a, "go")
	waitIdle(t, a)
	evs := a.Events()

	want := []string{sessionlog.EventAssistantMessage, sessionlog.EventToolCall, sessionlog.EventToolResult, sessionlog.EventToolCall, sessionlog.EventToolResult, sessionlog.EventStepEnd, sessionlog.EventStepStart}
	got := slices.DeleteFunc(types(evs), func(s string) bool { return s == sessionlog.EventAssistantChunk })
	i := slices.Index(got, sessionlog.EventAssistantMessage)
	if i < 0 || !slices.Equal(got[i:i+len(want)], want) {
		t.Fatalf("event types %v", got)
	}
	am := ofType[sessionlog.AssistantMessageData](t, evs, sessionlog.EventAssistantMessage)[0]
	raw, _ := json.Marshal(am.Message.Content)
	if string(raw) != `[{"type":"text","text":"let me"},{"type":"tool-call","callId":"c1","name":"add","arguments":"{\"x\":1}"},{"type":"tool-call","callId":"c2","name":"nope","arguments":"{}"}]` {
		t.Errorf("assistant content %s", raw)
	}
	calls := ofType[sessionlog.ToolCallData](t, evs, sessionlog.EventToolCall)
	if calls[0] != (sessionlog.ToolCallData{Turn: 1, Step: 1, CallID: "c1", Name: "add", Arguments: `{"x":1}`}) || calls[1].Arguments != "{}" {
		t.Errorf("tool/call %+v", calls)
	}
	results := ofType[sessionlog.ToolResultData](t, evs, sessionlog.EventToolResult)
	if results[0].IsError || model.Text(results[0].Content) != `add ran with {"x":1}` || results[0].Name != "add" {
		t.Errorf("add result %+v", results[0])
	}
	if !results[1].IsError || model.Text(results[1].Content) != "unknown tool nope" {
		t.Errorf("unknown tool result %+v", results[1])
	}
	reqs := m.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests", len(reqs))
	}
	h := reqs[1].Messages
	if len(h) != 4 || h[1].Role != model.RoleAssistant || len(h[1].ToolCalls) != 2 || model.Text(h[1].Content) != "let me" ||
		h[2].Role != model.RoleTool || h[2].ToolCallID != "c1" || !h[3].IsError {
		t.Errorf("second request history %+v", h)
	}
	if ends := turnEnds(t, evs); !slices.Equal(ends, []string{sessionlog.ReasonCompleted}) {
		t.Errorf("turn ends %v", ends)
	}
}

func TestTurn_S4_1_StopReasonsFromModel(t *testing.T) {
	t.Parallel()
	boom := errors.New("upstream said no")
	for _, tc := range []struct {
		name        string
		step        scripted.Step
		reason      string
		message     string
		interrupted bool
		toolCalls   int
	}{
		{"max-tokens drops truncated calls", scripted.Step{Text: "cut", ToolCalls: []model.ToolCall{{Name: "add"}}, Finish: model.FinishMaxTokens}, sessionlog.ReasonMaxTokens, "", false, 0},
		{"refusal is blocked", scripted.Step{Text: "no", Finish: model.FinishRefusal}, sessionlog.ReasonBlocked, "", false, 0},
		{"model error keeps partial text", scripted.Step{Text: "part", Err: boom}, sessionlog.ReasonError, boom.Error(), true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a := newAgent(t, nil, Config{Model: scripted.New(tc.step), Global: registry(t, "add")})
			followup(t, a, "go")
			waitIdle(t, a)
			evs := a.Events()
			te := ofType[sessionlog.TurnEndData](t, evs, sessionlog.EventTurnEnd)
			if len(te) != 1 || te[0].Reason.Kind != tc.reason || te[0].Reason.Message != tc.message {
				t.Fatalf("turn/end %+v", te)
			}
			am := ofType[sessionlog.AssistantMessageData](t, evs, sessionlog.EventAssistantMessage)
			if len(am) != 1 || am[0].Interrupted != tc.interrupted || len(am[0].Message.Content) != 1 {
				t.Errorf("assistant/message %+v", am)
			}
			if n := len(ofType[sessionlog.ToolCallData](t, evs, sessionlog.EventToolCall)); n != tc.toolCalls {
				t.Errorf("%d tool calls ran", n)
			}
			if n := len(ofType[sessionlog.StepData](t, evs, sessionlog.EventStepEnd)); n != 1 {
				t.Errorf("%d step/end", n)
			}
		})
	}
}

func TestTurn_R45_NoModelRouteEndsInError(t *testing.T) {
	t.Parallel()
	a := newAgent(t, nil, Config{})
	followup(t, a, "hi")
	waitIdle(t, a)
	te := ofType[sessionlog.TurnEndData](t, a.Events(), sessionlog.EventTurnEnd)
	if len(te) != 1 || te[0].Reason.Kind != sessionlog.ReasonError || te[0].Reason.Message == "" {
		t.Fatalf("turn/end %+v", te)
	}
	if slices.Contains(types(a.Events()), sessionlog.EventStepStart) {
		t.Error("a step started without a model")
	}
}

func TestTurn_S3_4_BeforeFirstStepHookOnce(t *testing.T) {
	t.Parallel()
	calls := 0
	hook := func() []store.NewEvent {
		calls++
		return []store.NewEvent{{Type: "subagent/descriptor", Data: json.RawMessage(`{"v":2}`)}}
	}
	m := scripted.New(scripted.Step{ToolCalls: []model.ToolCall{{Name: "add"}}}, scripted.Step{Text: "a"}, scripted.Step{Text: "b"})
	a := newAgent(t, nil, Config{Model: m, Global: registry(t, "add"), BeforeFirstStep: hook})
	followup(t, a, "one")
	followup(t, a, "two")
	waitIdle(t, a)
	got := types(a.Events())
	i := slices.Index(got, "subagent/descriptor")
	if calls != 1 || i < slices.Index(got, sessionlog.EventUserMessage) || got[i+1] != sessionlog.EventStepStart ||
		slices.Index(got, sessionlog.EventStepStart) != i+1 || slices.Index(got, sessionlog.EventTurnStart) > i {
		t.Fatalf("hook calls %d, events %v", calls, got)
	}
}

func TestTurn_TurnsAreFIFOOneMessageEach_R83(t *testing.T) {
	t.Parallel()
	gate := make(chan struct{})
	reached := make(chan struct{})
	m := scripted.New(scripted.Step{Text: "1", Gate: gate, Reached: reached}, scripted.Step{Text: "2"}, scripted.Step{Text: "3"})
	a := newAgent(t, nil, Config{Model: m})
	followup(t, a, "a")
	<-reached
	followup(t, a, "b")
	followup(t, a, "c")
	if !a.Running() {
		t.Error("not running during a turn")
	}
	close(gate)
	waitIdle(t, a)
	evs := a.Events()
	if got := userTexts(t, evs); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Errorf("user messages %v", got)
	}
	var turns []int
	for _, d := range ofType[sessionlog.TurnData](t, evs, sessionlog.EventTurnStart) {
		turns = append(turns, d.Turn)
	}
	if !slices.Equal(turns, []int{1, 2, 3}) || a.Running() {
		t.Errorf("turns %v running %v", turns, a.Running())
	}
	for i, r := range m.Requests() {
		if n := len(r.Messages); n != 2*i+1 {
			t.Errorf("request %d has %d messages", i, n)
		}
	}
}

func TestTurn_StoreFailureEndsTurnAndNothingAcceptedOnInsertFailure(t *testing.T) {
	t.Parallel()
	st := newFakeStore()
	gate := make(chan struct{})
	reached := make(chan struct{})
	a := newAgent(t, st, Config{Model: scripted.New(scripted.Step{Text: "x y", Gate: gate, Reached: reached})})
	followup(t, a, "hi")
	<-reached
	st.setFail(true)
	if _, err := a.Followup(context.Background(), text("lost"), userSrc); !errors.Is(err, errStoreDown) {
		t.Errorf("Followup with the store down: %v", err)
	}
	close(gate)
	waitIdle(t, a)
	st.setFail(false)
	if got := types(a.Events()); got[len(got)-1] != sessionlog.EventStepStart {
		t.Errorf("events after failure %v", got)
	}
	// The agent recovers: the next followup runs a new turn.
	a2 := followup(t, a, "again")
	waitIdle(t, a)
	if a2 == "" || turnEnds(t, a.Events()) == nil {
		t.Errorf("no turn after recovery: %v", types(a.Events()))
	}
}

func TestNew_RequiresExistingSession(t *testing.T) {
	t.Parallel()
	_, err := New(context.Background(), Config{ID: "missing", Store: newFakeStore()})
	if !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("err %v, want ErrNotFound", err)
	}
}

func TestTurn_EchoModelDrivesToolsOffline(t *testing.T) {
	t.Parallel()
	a := newAgent(t, nil, Config{Model: echo.New(), Global: registry(t, "add")})
	followup(t, a, `/call add {"x":1}`)
	waitIdle(t, a)
	evs := a.Events()
	am := ofType[sessionlog.AssistantMessageData](t, evs, sessionlog.EventAssistantMessage)
	if len(am) != 2 || model.Text(am[1].Message.Content) != `echo: add ran with {"x":1}` {
		t.Errorf("assistant messages %+v", am)
	}
	if ends := turnEnds(t, evs); !slices.Equal(ends, []string{sessionlog.ReasonCompleted}) {
		t.Errorf("turn ends %v", ends)
	}
}

// TestTurn_StepBoundariesShareAppends: the hook's events go out with the
// first step/start, and a last step without tools logs its message, its
// step/end and turn/end in one append, behind the stream's deltas when the
// stream was done within the linger.
func TestTurn_StepBoundariesShareAppends(t *testing.T) {
	t.Parallel()
	st := newFakeStore()
	var mu sync.Mutex
	var batches []string
	st.beforeAppend = func(evs []store.NewEvent) {
		var b []string
		for _, e := range evs {
			b = append(b, e.Type)
		}
		mu.Lock()
		batches = append(batches, fmt.Sprint(b))
		mu.Unlock()
	}
	hook := func() []store.NewEvent {
		return []store.NewEvent{{Type: "subagent/descriptor", Data: json.RawMessage(`{}`)}}
	}
	a := newAgent(t, st, Config{Model: scripted.New(scripted.Step{Text: "done"}), BeforeFirstStep: hook, ChunkLinger: time.Hour})
	followup(t, a, "one")
	waitIdle(t, a)
	mu.Lock()
	defer mu.Unlock()
	first := fmt.Sprint([]string{"subagent/descriptor", sessionlog.EventStepStart})
	last := fmt.Sprint([]string{sessionlog.EventAssistantChunk, sessionlog.EventAssistantChunk, sessionlog.EventAssistantMessage, sessionlog.EventStepEnd, sessionlog.EventTurnEnd})
	if !slices.Contains(batches, first) || batches[len(batches)-1] != last {
		t.Fatalf("append batches %v: want %s in one and %s last", batches, first, last)
	}
}
