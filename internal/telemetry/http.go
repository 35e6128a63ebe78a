package telemetry

import (
	"context"
	"net/http"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
)

// HTTPHandler wraps h in a server span per request, a child of the
// request's traceparent header. The span is named by the method until the
// router knows the route (NameHTTPSpan): never by the path, which would
// make a name per id.
func HTTPHandler(h http.Handler) http.Handler {
	return otelhttp.NewHandler(h, "http",
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return r.Method }))
}

// NameHTTPSpan names the request's span by its route pattern, as the
// semantic conventions name HTTP server spans ("POST /v1/runs").
func NameHTTPSpan(ctx context.Context, method, route string) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	span.SetName(method + " " + route)
	span.SetAttributes(semconv.HTTPRoute(route))
}
