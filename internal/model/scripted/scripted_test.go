package scripted

import (
	"context"
	"errors"
	"testing"

	"github.com/subagentd/subagentd/internal/model"
)

func collect(t *testing.T, ctx context.Context, m model.Model, req model.Request) ([]model.Chunk, error) {
	t.Helper()
	var out []model.Chunk
	for c, err := range m.Stream(ctx, req) {
		if err != nil {
			return out, err
		}
		out = append(out, c)
	}
	return out, nil
}

func TestStream_ChunkOrderAndDefaults(t *testing.T) {
	t.Parallel()
	m := New(
		Step{Reasoning: "think", Text: "hello big world", Usage: &model.Usage{InputTokens: 3, OutputTokens: 2}},
		Step{ToolCalls: []model.ToolCall{{Name: "a", Arguments: "{}"}, {ID: "x", Name: "b", Arguments: "{}"}}},
	)
	got, err := collect(t, context.Background(), m, model.Request{System: "s"})
	if err != nil {
		t.Fatal(err)
	}
	kinds := []model.ChunkKind{model.ChunkReasoning, model.ChunkText, model.ChunkText, model.ChunkText, model.ChunkUsage, model.ChunkFinish}
	if len(got) != len(kinds) {
		t.Fatalf("got %d chunks %+v", len(got), got)
	}
	var text string
	for i, c := range got {
		if c.Kind != kinds[i] {
			t.Errorf("chunk %d kind %s, want %s", i, c.Kind, kinds[i])
		}
		if c.Kind == model.ChunkText {
			text += c.Text
		}
	}
	if text != "hello big world" {
		t.Errorf("text %q", text)
	}
	if got[5].FinishReason != model.FinishStop {
		t.Errorf("finish %q", got[5].FinishReason)
	}

	got, err = collect(t, context.Background(), m, model.Request{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0].ToolCall.ID != "call-1" || got[1].ToolCall.ID != "x" || got[2].FinishReason != model.FinishToolCalls {
		t.Errorf("tool step chunks %+v", got)
	}

	if _, err := collect(t, context.Background(), m, model.Request{}); !errors.Is(err, ErrNoSteps) {
		t.Errorf("exhausted script: err %v, want ErrNoSteps", err)
	}
	if reqs := m.Requests(); len(reqs) != 3 || reqs[0].System != "s" {
		t.Errorf("recorded requests %+v", reqs)
	}
}

func TestStream_ErrAfterText(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	got, err := collect(t, context.Background(), New(Step{Text: "partial", Err: boom}), model.Request{})
	if !errors.Is(err, boom) || len(got) != 1 || got[0].Text != "partial" {
		t.Fatalf("got %+v, %v", got, err)
	}
}

func TestStream_GateHonoursCtx(t *testing.T) {
	t.Parallel()
	reached := make(chan struct{})
	m := New(Step{Text: "never", Gate: make(chan struct{}), Reached: reached})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		_, err := collect(t, ctx, m, model.Request{})
		done <- err
	}()
	<-reached
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
}

func TestStream_PauseHoldsAfterText(t *testing.T) {
	t.Parallel()
	m := New(Step{Text: "a b", Pause: make(chan struct{}), Finish: model.FinishMaxTokens})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var text string
	var err error
	for c, e := range m.Stream(ctx, model.Request{}) {
		if e != nil {
			err = e
			break
		}
		text += c.Text
		if text == "a b" {
			cancel()
		}
	}
	if text != "a b" || !errors.Is(err, context.Canceled) {
		t.Fatalf("text %q err %v", text, err)
	}
}

func TestFunc_AnswersPerRequest(t *testing.T) {
	t.Parallel()
	m := Func(func(r model.Request) Step { return Step{Text: r.Model} })
	got, err := collect(t, context.Background(), m, model.Request{Model: "m1"})
	if err != nil || len(got) != 2 || got[0].Text != "m1" {
		t.Fatalf("got %+v, %v", got, err)
	}
}
