package agent

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/model/echo"
	"github.com/subagentd/subagentd/internal/model/scripted"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
)

var answerSchema = json.RawMessage(`{"type":"object","required":["answer"],"properties":{"answer":{"type":"string"}},"additionalProperties":false}`)

func captureCall(args string) model.ToolCall {
	return model.ToolCall{Name: StructuredOutputTool, Arguments: args}
}

func TestStructured_S4_3_ValidCaptureEndsTurnWithoutAnotherStep(t *testing.T) {
	t.Parallel()
	m := scripted.New(scripted.Step{Text: "here", ToolCalls: []model.ToolCall{captureCall(`{"answer":"42"}`)}})
	a := newAgent(t, nil, Config{Model: m, OutputSchema: answerSchema, Sections: []Section{{Name: "base", Order: 100, Text: "BASE"}}})
	followup(t, a, "q")
	waitIdle(t, a)

	if v, ok := a.Structured(); !ok || string(v) != `{"answer":"42"}` {
		t.Errorf("Structured() = %s, %v", v, ok)
	}
	reqs := m.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d model requests, want exactly 1", len(reqs))
	}
	tools := reqs[0].Tools
	if len(tools) != 1 || tools[0].Name != StructuredOutputTool || string(tools[0].Parameters) != string(answerSchema) {
		t.Errorf("tools %+v", tools)
	}
	if sys := reqs[0].System; !strings.HasPrefix(sys, "BASE\n\n") || !strings.Contains(sys, "`structured_output`") {
		t.Errorf("system %q: base prompt kept, instruction appended", sys)
	}
	res := ofType[sessionlog.ToolResultData](t, a.Events(), sessionlog.EventToolResult)
	if len(res) != 1 || res[0].IsError || model.Text(res[0].Content) != StructuredRecorded {
		t.Errorf("result %+v", res)
	}
	if ends := turnEnds(t, a.Events()); !slices.Equal(ends, []string{sessionlog.ReasonCompleted}) {
		t.Errorf("turn ends %v", ends)
	}
}

func TestStructured_S4_3_InvalidArgsThenRetryInTurn(t *testing.T) {
	t.Parallel()
	m := scripted.New(
		scripted.Step{ToolCalls: []model.ToolCall{captureCall(`{"answer":1,"extra":true}`)}},
		scripted.Step{ToolCalls: []model.ToolCall{captureCall(`{"answer":"ok"}`)}},
	)
	a := newAgent(t, nil, Config{Model: m, OutputSchema: answerSchema})
	followup(t, a, "q")
	waitIdle(t, a)
	res := ofType[sessionlog.ToolResultData](t, a.Events(), sessionlog.EventToolResult)
	if len(res) != 2 || !res[0].IsError || res[1].IsError {
		t.Fatalf("results %+v", res)
	}
	msg := model.Text(res[0].Content)
	if !strings.HasPrefix(msg, "INVALID_ARGS: ") || !strings.Contains(msg, `"answer" must be a string`) || !strings.Contains(msg, `"extra"`) {
		t.Errorf("invalid args message %q", msg)
	}
	if v, ok := a.Structured(); !ok || string(v) != `{"answer":"ok"}` {
		t.Errorf("Structured() = %s, %v", v, ok)
	}
	if n := len(m.Requests()); n != 2 {
		t.Errorf("%d requests", n)
	}
}

func TestStructured_S4_3_GuardDeniesLaterCallsEarlierOnesRun(t *testing.T) {
	t.Parallel()
	m := scripted.New(
		scripted.Step{ToolCalls: []model.ToolCall{{Name: "read"}, captureCall(`{"answer":"a"}`), {Name: "read"}, captureCall(`{"answer":"b"}`)}},
		scripted.Step{ToolCalls: []model.ToolCall{{Name: "read"}}},
		scripted.Step{Text: "fine"},
	)
	a := newAgent(t, nil, Config{Model: m, OutputSchema: answerSchema, Global: registry(t, "read")})
	followup(t, a, "q")
	waitIdle(t, a)
	res := ofType[sessionlog.ToolResultData](t, a.Events(), sessionlog.EventToolResult)
	if len(res) != 4 || res[0].IsError || res[1].IsError {
		t.Fatalf("results %+v", res)
	}
	for i, name := range []string{"read", StructuredOutputTool} {
		want := "structured output already recorded: the run is complete, so `" + name + "` is not executed"
		if r := res[2+i]; !r.IsError || model.Text(r.Content) != want {
			t.Errorf("denied result %+v, want %q", r, want)
		}
	}
	if v, _ := a.Structured(); string(v) != `{"answer":"a"}` {
		t.Errorf("Structured() = %s", v)
	}
	// The guard is monotonic: a later turn's calls are denied too.
	followup(t, a, "more")
	waitIdle(t, a)
	res = ofType[sessionlog.ToolResultData](t, a.Events(), sessionlog.EventToolResult)
	if last := res[len(res)-1]; !last.IsError || !strings.Contains(model.Text(last.Content), "`read` is not executed") {
		t.Errorf("later turn result %+v", last)
	}
}

func TestStructured_R51_NoRePromptAfterCleanTurnWithoutCapture(t *testing.T) {
	t.Parallel()
	m := scripted.New(scripted.Step{Text: "plain answer"}, scripted.Step{Text: "unused"})
	a := newAgent(t, nil, Config{Model: m, OutputSchema: answerSchema})
	followup(t, a, "q")
	waitIdle(t, a)
	if _, ok := a.Structured(); ok {
		t.Error("a capture without a call")
	}
	if n := len(m.Requests()); n != 1 {
		t.Errorf("%d model requests, want exactly 1", n)
	}
	if ends := turnEnds(t, a.Events()); !slices.Equal(ends, []string{sessionlog.ReasonCompleted}) {
		t.Errorf("turn ends %v", ends)
	}
}

func TestStructured_S4_3_InvisibleToAgentsWithoutSchema(t *testing.T) {
	t.Parallel()
	m := scripted.New(scripted.Step{ToolCalls: []model.ToolCall{captureCall(`{"answer":"x"}`)}}, scripted.Step{Text: "ok"})
	a := newAgent(t, nil, Config{Model: m})
	followup(t, a, "q")
	waitIdle(t, a)
	res := ofType[sessionlog.ToolResultData](t, a.Events(), sessionlog.EventToolResult)
	if len(res) != 1 || !res[0].IsError || model.Text(res[0].Content) != "unknown tool structured_output" {
		t.Errorf("result %+v", res)
	}
	if strings.Contains(m.Requests()[0].System, "structured_output") || m.Requests()[0].Tools != nil {
		t.Error("plain agent request mentions structured output")
	}
}

func TestStructured_S1_5_UnsupportedSchemaRejectedByNew(t *testing.T) {
	t.Parallel()
	st := newFakeStore()
	if err := st.CreateSession(context.Background(), store.Session{ID: "s"}); err != nil {
		t.Fatal(err)
	}
	_, err := New(context.Background(), Config{ID: "s", Store: st, OutputSchema: json.RawMessage(`{"type":"string"}`)})
	if err == nil || !strings.Contains(err.Error(), "object-rooted") {
		t.Fatalf("err %v", err)
	}
}

func TestStructured_EchoModelSatisfiesSchemaOffline(t *testing.T) {
	t.Parallel()
	a := newAgent(t, nil, Config{Model: echo.New(), OutputSchema: answerSchema})
	followup(t, a, "question")
	waitIdle(t, a)
	if v, ok := a.Structured(); !ok || string(v) != `{"answer":"echo"}` {
		t.Errorf("Structured() = %s, %v", v, ok)
	}
	am := ofType[sessionlog.AssistantMessageData](t, a.Events(), sessionlog.EventAssistantMessage)
	if len(am) != 1 || model.Text(am[0].Message.Content) != "echo: question" {
		t.Errorf("assistant messages %+v", am)
	}
}
