package telemetry

import (
	"io"
	"log/slog"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// BenchmarkMetrics_Run is what one echo run counts: its start, one model
// step's tokens and its end.
func BenchmarkMetrics_Run(b *testing.B) {
	m := NewMetrics(prometheus.NewRegistry())
	b.ReportAllocs()
	for b.Loop() {
		m.RunStarted("r", "spawn", KindOneShot)
		m.Tokens("echo", 4, 5)
		m.RunSettled("r", "spawn", KindOneShot, "completed")
	}
}

// BenchmarkLogHandler_With is the two loggers the in-process driver and
// the agent make for every child, which log nothing.
func BenchmarkLogHandler_With(b *testing.B) {
	log := slog.New(LogHandler(slog.NewJSONHandler(io.Discard, nil)))
	b.ReportAllocs()
	for b.Loop() {
		_ = log.With(slog.String("child_id", "0b6f7c0e-2d36-4a51-8f0f-5c1f1e3a9d11")).
			With(slog.String("session_id", "0b6f7c0e-2d36-4a51-8f0f-5c1f1e3a9d11"))
	}
}
