package telemetry

import (
	"context"
	"log/slog"
	"slices"
	"sync"

	"go.opentelemetry.io/otel/trace"
)

// LogHandler returns h adding trace_id and span_id to every record logged
// with a context that carries a span, so that a log line leads to its
// trace.
func LogHandler(h slog.Handler) slog.Handler { return logHandler{h} }

type logHandler struct{ slog.Handler }

func (l logHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r = r.Clone()
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return l.Handler.Handle(ctx, r)
}

// WithAttrs hands attrs to the inner handler only when the first record
// is logged (withAttrs): slog's handlers format attributes as they get
// them, and the loggers made for every run (child_id, session_id) most
// often log nothing.
func (l logHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &withAttrs{inner: l.Handler, attrs: attrs}
}

func (l logHandler) WithGroup(name string) slog.Handler { return logHandler{l.Handler.WithGroup(name)} }

// withAttrs is logHandler{inner.WithAttrs(attrs)}, made at its first
// record or group. Enabled asks inner: whether slog's handlers log a
// level does not depend on their attributes.
type withAttrs struct {
	inner slog.Handler
	attrs []slog.Attr

	once sync.Once
	h    logHandler
}

func (w *withAttrs) resolved() logHandler {
	w.once.Do(func() { w.h = logHandler{w.inner.WithAttrs(w.attrs)} })
	return w.h
}

func (w *withAttrs) Enabled(ctx context.Context, level slog.Level) bool {
	return w.inner.Enabled(ctx, level)
}

func (w *withAttrs) Handle(ctx context.Context, r slog.Record) error {
	return w.resolved().Handle(ctx, r)
}

// WithAttrs adds attrs after w's: outside a group, attributes added in
// two calls are those added in one.
func (w *withAttrs) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &withAttrs{inner: w.inner, attrs: append(slices.Clip(w.attrs), attrs...)}
}

func (w *withAttrs) WithGroup(name string) slog.Handler { return w.resolved().WithGroup(name) }
