package acp

import (
	"context"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/subagentd/subagentd/internal/model"
)

// TestStart_PromptCarriesTraceparentInMeta: the session/prompt of a run
// started under a span carries that span's traceparent in _meta, so the
// agent's spans join the trace; untraced, the request has no _meta.
func TestStart_PromptCarriesTraceparentInMeta(t *testing.T) {
	t.Parallel()
	p, b := setup(t, "meta")
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:     trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
		TraceFlags: trace.FlagsSampled,
	})
	ctx := trace.ContextWithSpanContext(context.Background(), sc)
	r, err := p.Start(ctx, request(b.root, model.TextBlock("hello")))
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { dispose(t, r) })
	const want = `_meta={"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}`
	if got := model.Text(result(t, r).Output); !strings.Contains(got, want) {
		t.Fatalf("agent saw %q, want %q", got, want)
	}

	if got := model.Text(result(t, start(t, p, b)).Output); strings.Contains(got, "traceparent") {
		t.Fatalf("untraced prompt carried a traceparent: %q", got)
	}
}
