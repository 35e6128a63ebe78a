package echo

import (
	"context"
	"encoding/json"
	"errors"
	"iter"
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/model"
)

func run(t *testing.T, ctx context.Context, req model.Request) (string, []model.ToolCall, model.FinishReason, error) {
	t.Helper()
	var text string
	var calls []model.ToolCall
	var finish model.FinishReason
	chunks := 0
	for c, err := range New().Stream(ctx, req) {
		if err != nil {
			return text, calls, finish, err
		}
		switch c.Kind {
		case model.ChunkText:
			chunks++
			text += c.Text
		case model.ChunkToolCall:
			calls = append(calls, *c.ToolCall)
		case model.ChunkFinish:
			finish = c.FinishReason
		}
	}
	if text != "" && chunks < 2 {
		t.Errorf("text %q came in %d chunk(s), want word by word", text, chunks)
	}
	return text, calls, finish, nil
}

func user(s string) model.Message {
	return model.Message{Role: model.RoleUser, Content: []model.Block{model.TextBlock(s)}}
}

func TestEcho_RepliesWithLastUserMessage(t *testing.T) {
	t.Parallel()
	text, calls, finish, err := run(t, context.Background(), model.Request{Messages: []model.Message{user("first"), user("hello there")}})
	if err != nil || text != "echo: hello there" || calls != nil || finish != model.FinishStop {
		t.Fatalf("got %q %v %q %v", text, calls, finish, err)
	}
}

func TestEcho_CallLineDrivesTool(t *testing.T) {
	t.Parallel()
	tools := []model.ToolSpec{{Name: "subagent"}}
	msgs := []model.Message{user("please\n/call subagent {\"prompt\":\"hi\"}")}
	text, calls, finish, err := run(t, context.Background(), model.Request{Messages: msgs, Tools: tools})
	if err != nil || text != "" || finish != model.FinishToolCalls || len(calls) != 1 ||
		calls[0].Name != "subagent" || calls[0].Arguments != `{"prompt":"hi"}` {
		t.Fatalf("got %q %+v %q %v", text, calls, finish, err)
	}
	msgs = append(msgs,
		model.Message{Role: model.RoleAssistant, ToolCalls: calls},
		model.Message{Role: model.RoleTool, ToolCallID: calls[0].ID, Content: []model.Block{model.TextBlock("child said hi")}})
	text, calls, finish, err = run(t, context.Background(), model.Request{Messages: msgs, Tools: tools})
	if err != nil || text != "echo: child said hi" || calls != nil || finish != model.FinishStop {
		t.Fatalf("after result: got %q %+v %q %v", text, calls, finish, err)
	}

	// A tool that is not offered is not called.
	text, calls, _, _ = run(t, context.Background(), model.Request{Messages: []model.Message{user("/call nope")}})
	if text != "echo: /call nope" || calls != nil {
		t.Fatalf("unoffered tool: got %q %+v", text, calls)
	}
}

func TestEcho_StructuredOutputSatisfiesSchema(t *testing.T) {
	t.Parallel()
	schema := json.RawMessage(`{"type":"object","required":["s","n","i","b","a","e","c","o","obj"],"properties":{
		"s":{"type":"string"},"n":{"type":"number"},"i":{"type":"integer"},"b":{"type":"boolean"},
		"a":{"type":"array","items":{"type":"string"}},"e":{"type":"string","enum":["x","y"]},
		"c":{"type":"number","const":1.5},"o":{"oneOf":[{"type":"null"},{"type":"string"}]},
		"obj":{"type":"object","required":["z"],"properties":{"z":{"type":"boolean"},"opt":{"type":"string"}}},
		"skip":{"type":"string"}}}`)
	tools := []model.ToolSpec{{Name: StructuredOutputTool, Parameters: schema}}
	msgs := []model.Message{user("go")}
	text, calls, finish, err := run(t, context.Background(), model.Request{Messages: msgs, Tools: tools})
	if err != nil || text != "echo: go" || finish != model.FinishToolCalls || len(calls) != 1 {
		t.Fatalf("got %q %+v %q %v", text, calls, finish, err)
	}
	want := `{"a":[],"b":false,"c":1.5,"e":"x","i":0,"n":0,"o":null,"obj":{"z":false},"s":"echo"}`
	if calls[0].Arguments != want {
		t.Errorf("arguments\n got %s\nwant %s", calls[0].Arguments, want)
	}
	// After the capture's result echo answers in text only.
	msgs = append(msgs,
		model.Message{Role: model.RoleAssistant, ToolCalls: calls},
		model.Message{Role: model.RoleTool, ToolCallID: calls[0].ID, Content: []model.Block{model.TextBlock("Structured output recorded.")}})
	_, calls, finish, _ = run(t, context.Background(), model.Request{Messages: msgs, Tools: tools})
	if calls != nil || finish != model.FinishStop {
		t.Errorf("after capture: calls %+v finish %q", calls, finish)
	}
}

func TestEcho_HonoursCancellation(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, _, _, err := run(t, ctx, model.Request{Messages: []model.Message{user("a b c")}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
}

func TestEcho_SleepLinePausesBeforeTheAnswer(t *testing.T) {
	t.Parallel()
	const d = 50 * time.Millisecond
	start := time.Now()
	text, _, finish, err := run(t, context.Background(), model.Request{Messages: []model.Message{user("/sleep 50ms\nhi there")}})
	if err != nil || text != "echo: /sleep 50ms\nhi there" || finish != model.FinishStop {
		t.Fatalf("got %q %q %v", text, finish, err)
	}
	if took := time.Since(start); took < d {
		t.Fatalf("answered after %v, want a pause of %v", took, d)
	}
}

func TestEcho_SleepEndsWithTheContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	next, stop := iter.Pull2(New().Stream(ctx, model.Request{Messages: []model.Message{user("/sleep 1h")}}))
	defer stop()
	got := make(chan error, 1)
	go func() {
		_, err, _ := next()
		got <- err
	}()
	cancel()
	if err := <-got; !errors.Is(err, context.Canceled) {
		t.Fatalf("first chunk error %v, want context.Canceled", err)
	}
}

func TestEcho_Pause(t *testing.T) {
	t.Parallel()
	for text, want := range map[string]time.Duration{
		"/sleep 2s":            2 * time.Second,
		"work\n  /sleep 10ms ": 10 * time.Millisecond,
		"/sleep 10h":           MaxSleep,
		"/sleep soon":          0,
		"/sleep -1s":           0,
		"no directive":         0,
	} {
		if got := pause(model.Request{Messages: []model.Message{user(text)}}); got != want {
			t.Errorf("pause(%q) = %v, want %v", text, got, want)
		}
	}
	tool := model.Message{Role: model.RoleTool, Content: []model.Block{model.TextBlock("/sleep 2s")}}
	if got := pause(model.Request{Messages: []model.Message{tool}}); got != 0 {
		t.Errorf("a tool result paused %v", got)
	}
}
