package telemetry

import (
	"context"
	"strconv"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// instrumentation names the tracer of every span subagentd opens.
const instrumentation = "github.com/subagentd/subagentd"

// RunIDKey is the attribute of an invoke_agent span that names the run or
// activation it traces.
const RunIDKey = attribute.Key("subagentd.run_id")

// WebhookEventKey is the attribute of a "webhook deliver" span that names
// the event type delivered.
const WebhookEventKey = attribute.Key("subagentd.webhook.event_type")

// tracerOf is the tracer of one tracer provider.
type tracerOf struct {
	provider trace.TracerProvider
	tracer   trace.Tracer
}

// cached is the tracer of the provider that was global at the last span.
var cached atomic.Pointer[tracerOf]

// tracer is the tracer of the global provider, which SetupTracing (and a
// test) replaces: a tracer taken once would keep the first provider, and
// asking the provider on every span takes its lock.
func tracer() trace.Tracer {
	tp := otel.GetTracerProvider()
	if c := cached.Load(); c != nil && c.provider == tp {
		return c.tracer
	}
	t := tp.Tracer(instrumentation)
	cached.Store(&tracerOf{provider: tp, tracer: t})
	return t
}

// Recording reports whether spans are recorded: an SDK tracer provider is
// installed (SetupTracing, or a test's). Work done only for a span's sake
// asks it first; the Start functions below do nothing without it, so that
// a process without traces pays a type assertion per span.
func Recording() bool {
	_, ok := otel.GetTracerProvider().(*sdktrace.TracerProvider)
	return ok
}

// Traceparent returns the W3C traceparent of the span ctx carries, "" when
// it carries none: what a run row keeps so that the run's span, wherever
// and whenever it starts, is a child of the span that asked for it.
func Traceparent(ctx context.Context) string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ""
	}
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	return c["traceparent"]
}

// WithTraceparent returns ctx whose span is the remote one traceparent
// names, unless ctx carries a span already or traceparent is not a valid
// W3C traceparent: a run that resumes with no caller in reach (after a
// restart, on another replica) continues the trace its row kept.
func WithTraceparent(ctx context.Context, traceparent string) context.Context {
	if traceparent == "" || trace.SpanContextFromContext(ctx).IsValid() {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{"traceparent": traceparent})
}

// InvokeParams describe one invoke_agent span.
type InvokeParams struct {
	// Agent is our provider's name (gen_ai.agent.name): spawn, fork, or a
	// configured ACP agent; for a root session's turn, "root".
	Agent string
	// Remote says the agent runs in another process (an ACP agent): the
	// span is a CLIENT span, else INTERNAL; the agent itself is then its
	// gen_ai.provider.name.
	Remote bool
	// ConversationID is the child session id (gen_ai.conversation.id),
	// when known at the start; SetRun sets it later.
	ConversationID string
}

// Invocation is an open invoke_agent span: one run, one activation or one
// root turn. It sums the token usage of the chat spans under it. A nil
// *Invocation (traces are off) is a no-op.
type Invocation struct {
	span          trace.Span
	input, output atomic.Int64
}

type invocationKey struct{}

// StartInvoke opens the invoke_agent span of p under ctx's span and
// returns ctx carrying it: the agent's chat and tool spans started from
// that ctx are its children, and their usage adds to it.
func StartInvoke(ctx context.Context, p InvokeParams) (context.Context, *Invocation) {
	if !Recording() {
		return ctx, nil
	}
	kind := trace.SpanKindInternal
	if p.Remote {
		kind = trace.SpanKindClient
	}
	ctx, span := tracer().Start(ctx, "invoke_agent "+p.Agent, trace.WithSpanKind(kind))
	inv := &Invocation{span: span}
	if span.IsRecording() {
		span.SetAttributes(semconv.GenAIOperationNameInvokeAgent, semconv.GenAIAgentName(p.Agent))
		if p.Remote {
			span.SetAttributes(semconv.GenAIProviderNameKey.String(p.Agent))
		}
		if p.ConversationID != "" {
			span.SetAttributes(semconv.GenAIConversationID(p.ConversationID))
		}
	}
	return context.WithValue(ctx, invocationKey{}, inv), inv
}

// SetRun names the run the invocation became and its child session.
func (inv *Invocation) SetRun(runID, conversationID string) {
	if inv == nil || !inv.span.IsRecording() {
		return
	}
	inv.span.SetAttributes(RunIDKey.String(runID), semconv.GenAIConversationID(conversationID))
}

// End closes the span with the summed usage and the stop reason; a
// non-nil err, or a reason other than "completed", marks it failed.
func (inv *Invocation) End(stopReason string, err error) {
	if inv == nil {
		return
	}
	if inv.span.IsRecording() {
		inv.span.SetAttributes(semconv.GenAIUsageInputTokens(int(inv.input.Load())),
			semconv.GenAIUsageOutputTokens(int(inv.output.Load())),
			attribute.String("subagentd.stop_reason", stopReason))
		switch {
		case err != nil:
			inv.span.RecordError(err)
			inv.span.SetStatus(codes.Error, err.Error())
		case stopReason != "completed":
			inv.span.SetStatus(codes.Error, stopReason)
		}
	}
	inv.span.End()
}

// NameModelProvider sets gen_ai.provider.name — the model's provider (echo,
// openai) for an in-process agent, the agent's for an ACP one — on the
// invocation ctx carries: the provider that resolves the model knows it,
// the service that opened the span does not.
func NameModelProvider(ctx context.Context, name string) {
	inv, _ := ctx.Value(invocationKey{}).(*Invocation)
	if inv == nil || !inv.span.IsRecording() {
		return
	}
	inv.span.SetAttributes(semconv.GenAIProviderNameKey.String(name))
}

// ChatParams describe one chat span: one model call.
type ChatParams struct {
	// Provider is the model's provider (gen_ai.provider.name): echo, openai.
	Provider string
	// Model is the requested model (gen_ai.request.model).
	Model string
}

// Chat is an open chat span; the zero Chat is a no-op.
type Chat struct {
	ctx  context.Context
	span trace.Span
}

// StartChat opens the chat span of one model call under ctx's span and
// returns ctx carrying it, for the model request.
func StartChat(ctx context.Context, p ChatParams) (context.Context, Chat) {
	if !Recording() {
		return ctx, Chat{}
	}
	ctx, span := tracer().Start(ctx, "chat "+p.Model, trace.WithSpanKind(trace.SpanKindClient))
	if span.IsRecording() {
		span.SetAttributes(semconv.GenAIOperationNameChat, semconv.GenAIProviderNameKey.String(p.Provider),
			semconv.GenAIRequestModel(p.Model))
	}
	return ctx, Chat{ctx: ctx, span: span}
}

// End closes the span with the call's usage, which also adds to the
// invocation the call belongs to; a non-nil err marks it failed.
func (c Chat) End(input, output int, err error) {
	if c.span == nil {
		return
	}
	if inv, _ := c.ctx.Value(invocationKey{}).(*Invocation); inv != nil {
		inv.input.Add(int64(input))
		inv.output.Add(int64(output))
	}
	if c.span.IsRecording() {
		c.span.SetAttributes(semconv.GenAIUsageInputTokens(input), semconv.GenAIUsageOutputTokens(output))
		if err != nil {
			c.span.RecordError(err)
			c.span.SetStatus(codes.Error, err.Error())
		}
	}
	c.span.End()
}

// StartTool opens the execute_tool span of one tool call under ctx's span
// and returns ctx carrying it: a delegation the tool starts is its child.
func StartTool(ctx context.Context, name, callID string) (context.Context, trace.Span) {
	if !Recording() {
		return ctx, noop.Span{}
	}
	ctx, span := tracer().Start(ctx, "execute_tool "+name, trace.WithSpanKind(trace.SpanKindInternal))
	if span.IsRecording() {
		span.SetAttributes(semconv.GenAIOperationNameExecuteTool, semconv.GenAIToolName(name), semconv.GenAIToolCallID(callID))
	}
	return ctx, span
}

// Delivery is an open "webhook deliver" span: one delivery attempt of a
// webhook. The zero Delivery (traces off) is a no-op.
type Delivery struct {
	span   trace.Span
	parent string
	tp     string
}

// StartDelivery opens the CLIENT span of one webhook delivery attempt of
// an event of eventType, a child of the span parent names — the span that
// asked for the run the event reports, as its row kept it — or the root of
// a new trace when parent is "".
func StartDelivery(ctx context.Context, parent, eventType string) Delivery {
	if !Recording() {
		return Delivery{parent: parent}
	}
	ctx, span := tracer().Start(WithTraceparent(ctx, parent), "webhook deliver", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(semconv.HTTPRequestMethodPost, WebhookEventKey.String(eventType)))
	return Delivery{span: span, parent: parent, tp: Traceparent(ctx)}
}

// Traceparent is the traceparent header of the attempt: the span's when
// traces are recorded, else the parent it was started with ("" if none):
// the trace a receiver wants is the run's, traced here or not.
func (d Delivery) Traceparent() string {
	if d.tp != "" {
		return d.tp
	}
	return d.parent
}

// End closes the span with the receiver's status (0: no answer); err, or
// a status outside 2xx, marks it failed.
func (d Delivery) End(status int, err error) {
	if d.span == nil {
		return
	}
	if status != 0 {
		d.span.SetAttributes(semconv.HTTPResponseStatusCode(status))
	}
	switch {
	case err != nil:
		d.span.RecordError(err)
		d.span.SetStatus(codes.Error, err.Error())
	case status < 200 || status > 299:
		d.span.SetStatus(codes.Error, "HTTP "+strconv.Itoa(status))
	}
	d.span.End()
}
