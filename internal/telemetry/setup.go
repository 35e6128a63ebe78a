// Package telemetry is subagentd's observability: the OpenTelemetry trace
// setup, the spans of the GenAI semantic conventions the domain opens
// (invoke_agent, chat, execute_tool) and the traceparent that carries a
// trace across processes, and the Prometheus metric set. It imports no
// other package of the project: the domain calls it where things happen,
// so that a count or a span can never be missed by a wrapper.
//
// Traces are off unless OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set; off, the global tracer
// provider stays OpenTelemetry's no-op one and a span costs a context
// value. The README's operations section says what each metric means.
package telemetry

import (
	"context"
	"fmt"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
)

// ServiceName is the service.name of the traces unless OTEL_SERVICE_NAME
// (or OTEL_RESOURCE_ATTRIBUTES) names another.
const ServiceName = "subagentd"

// Tracing says whether traces are exported and flushes them.
type Tracing struct {
	provider *sdktrace.TracerProvider
}

// Enabled reports whether spans are recorded and exported.
func (t *Tracing) Enabled() bool { return t.provider != nil }

// Shutdown exports the spans still buffered and stops the exporter; call it
// last in a graceful shutdown, after the runs ended their spans. A no-op
// when tracing is off.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t.provider == nil {
		return nil
	}
	if err := t.provider.Shutdown(ctx); err != nil {
		return fmt.Errorf("flush traces: %w", err)
	}
	return nil
}

// SetupTracing installs the global tracer provider and the W3C trace
// context propagator when getenv names an OTLP endpoint —
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, used as it is, or
// OTEL_EXPORTER_OTLP_ENDPOINT, to which /v1/traces is appended, as the
// OpenTelemetry specification says — and OTEL_SDK_DISABLED is not "true".
// The endpoint is read through getenv (cmd/api passes its configuration);
// every other standard variable is read from the process environment by
// the SDK: OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES,
// OTEL_TRACES_SAMPLER and its argument, OTEL_EXPORTER_OTLP_HEADERS,
// _TIMEOUT, _COMPRESSION and their _TRACES_ forms, OTEL_BSP_* for the
// batching. Spans are exported over OTLP/HTTP in batches.
func SetupTracing(ctx context.Context, getenv func(string) string) (*Tracing, error) {
	endpoint := tracesEndpoint(getenv)
	if endpoint == "" || strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return &Tracing{}, nil
	}
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(endpoint))
	if err != nil {
		return nil, fmt.Errorf("OTLP trace exporter for %s: %w", endpoint, err)
	}
	res, err := resource.Merge(
		resource.NewSchemaless(semconv.ServiceName(ServiceName)),
		resource.Environment(),
	)
	if err != nil {
		return nil, fmt.Errorf("trace resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	return &Tracing{provider: tp}, nil
}

// tracesEndpoint is the URL spans are posted to, "" when none is set.
func tracesEndpoint(getenv func(string) string) string {
	if u := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")); u != "" {
		return u
	}
	if u := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_ENDPOINT")); u != "" {
		return strings.TrimSuffix(u, "/") + "/v1/traces"
	}
	return ""
}
