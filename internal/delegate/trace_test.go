package delegate

import (
	"context"
	"slices"
	"sync"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/model/scripted"
	"github.com/subagentd/subagentd/internal/providers/inprocess/inprocesstest"
	"github.com/subagentd/subagentd/internal/roots"
	"github.com/subagentd/subagentd/internal/telemetry"
)

// spanSink is an in-memory exporter that signals every export.
type spanSink struct {
	*tracetest.InMemoryExporter
	mu   sync.Mutex
	more chan struct{}
}

func (s *spanSink) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	err := s.InMemoryExporter.ExportSpans(ctx, spans)
	s.mu.Lock()
	close(s.more)
	s.more = make(chan struct{})
	s.mu.Unlock()
	return err
}

// wait returns the first exported span pred accepts.
func (s *spanSink) wait(t *testing.T, what string, pred func(tracetest.SpanStub) bool) tracetest.SpanStub {
	t.Helper()
	ctx := inprocesstest.Ctx(t)
	for {
		s.mu.Lock()
		more := s.more
		s.mu.Unlock()
		if i := slices.IndexFunc(s.GetSpans(), pred); i >= 0 {
			return s.GetSpans()[i]
		}
		select {
		case <-more:
		case <-ctx.Done():
			t.Fatalf("no span %s ended", what)
		}
	}
}

// attr returns the value of key on s.
func attr(s tracetest.SpanStub, key attribute.Key) attribute.Value {
	for _, kv := range s.Attributes {
		if kv.Key == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// TestTraces_SpawnRunIsAChildOfTheToolCall: a root's turn is an
// invoke_agent span; the delegation tool call in it is an execute_tool
// span; the spawn run it starts is an invoke_agent span under that tool
// call, with the child's chat span under it, all in one trace; and the run
// row keeps the tool call's traceparent. Not parallel: it installs the
// global tracer provider (other tests' spans, in other traces, are
// ignored).
func TestTraces_SpawnRunIsAChildOfTheToolCall(t *testing.T) {
	sink := &spanSink{InMemoryExporter: tracetest.NewInMemoryExporter(), more: make(chan struct{})}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(sink))
	otel.SetTracerProvider(tp)
	t.Cleanup(func() {
		otel.SetTracerProvider(noop.NewTracerProvider())
		_ = tp.Shutdown(context.Background())
	})
	m := scripted.Func(func(req model.Request) scripted.Step {
		switch {
		case lastText(req) == "go":
			return scripted.Step{ToolCalls: []model.ToolCall{
				call("c-spawn", SpawnTool, map[string]any{"description": "spawn child", "prompt": "task spawn"}),
			}}
		case req.Messages[len(req.Messages)-1].Role == model.RoleTool:
			return scripted.Step{Text: "summary"}
		}
		return scripted.Step{Text: "did " + lastText(req)}
	})
	w := newWorld(t, m)
	root := w.Parent.Session.ID
	w.prompt(t, "go", 1)

	rootSpan := sink.wait(t, "invoke_agent root", func(s tracetest.SpanStub) bool {
		return s.Name == "invoke_agent "+roots.RootAgent && attr(s, "gen_ai.conversation.id").AsString() == root
	})
	tr := rootSpan.SpanContext.TraceID()
	tool := sink.wait(t, "execute_tool subagent", func(s tracetest.SpanStub) bool {
		return s.Name == "execute_tool "+SpawnTool && s.SpanContext.TraceID() == tr
	})
	if tool.Parent.SpanID() != rootSpan.SpanContext.SpanID() || attr(tool, "gen_ai.tool.call.id").AsString() != "c-spawn" {
		t.Errorf("tool span %s under %s, want under the root's turn %s", tool.Name, tool.Parent.SpanID(), rootSpan.SpanContext.SpanID())
	}
	child := sink.wait(t, "invoke_agent spawn", func(s tracetest.SpanStub) bool {
		return s.Name == "invoke_agent spawn" && s.SpanContext.TraceID() == tr
	})
	if child.Parent.SpanID() != tool.SpanContext.SpanID() || child.SpanKind != trace.SpanKindInternal {
		t.Fatalf("spawn span (kind %v) under %s, want INTERNAL under the tool call %s", child.SpanKind, child.Parent.SpanID(), tool.SpanContext.SpanID())
	}
	runID := attr(child, telemetry.RunIDKey).AsString()
	for key, want := range map[attribute.Key]string{
		"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "spawn", "gen_ai.provider.name": "scripted",
		"subagentd.stop_reason": "completed",
	} {
		if got := attr(child, key).AsString(); got != want {
			t.Errorf("spawn span %s = %q, want %q", key, got, want)
		}
	}
	chat := sink.wait(t, "chat of the child", func(s tracetest.SpanStub) bool {
		return s.Name == "chat script-default" && s.Parent.SpanID() == child.SpanContext.SpanID()
	})
	if attr(chat, "gen_ai.operation.name").AsString() != "chat" || chat.SpanKind != trace.SpanKindClient {
		t.Errorf("child chat span %+v", chat.Attributes)
	}

	run, err := w.Store.GetRun(inprocesstest.Ctx(t), runID)
	if err != nil {
		t.Fatalf("GetRun(%q) of the span's run id: %v", runID, err)
	}
	if run.ChildID != attr(child, "gen_ai.conversation.id").AsString() {
		t.Errorf("span conversation %q, run child %q", attr(child, "gen_ai.conversation.id").AsString(), run.ChildID)
	}
	want := telemetry.Traceparent(trace.ContextWithSpanContext(context.Background(), tool.SpanContext))
	if run.Traceparent != want || want == "" {
		t.Errorf("run row traceparent %q, want the tool call's %q", run.Traceparent, want)
	}
	// The kept traceparent makes a later span, with no caller in reach, a
	// child of the tool call.
	ctx, inv := telemetry.StartInvoke(telemetry.WithTraceparent(context.Background(), run.Traceparent), telemetry.InvokeParams{Agent: "resumed"})
	inv.End("completed", nil)
	if sc := trace.SpanContextFromContext(ctx); sc.TraceID() != tr {
		t.Errorf("span from the kept traceparent is in trace %s, want %s", sc.TraceID(), tr)
	}
	resumed := sink.wait(t, "invoke_agent resumed", func(s tracetest.SpanStub) bool { return s.Name == "invoke_agent resumed" })
	if resumed.Parent.SpanID() != tool.SpanContext.SpanID() {
		t.Errorf("span from the kept traceparent under %s, want the tool call %s", resumed.Parent.SpanID(), tool.SpanContext.SpanID())
	}
}
