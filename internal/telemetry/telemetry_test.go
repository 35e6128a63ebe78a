package telemetry

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

func TestSetupTracing_OnlyWithAnEndpointAndNotDisabled(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		vars map[string]string
	}{
		{"no endpoint", map[string]string{"OTEL_SERVICE_NAME": "x"}},
		{"disabled", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_SDK_DISABLED": "TRUE"}},
	} {
		tr, err := SetupTracing(t.Context(), env(tc.vars))
		if err != nil || tr.Enabled() {
			t.Errorf("%s: SetupTracing = %v, %v; want tracing off", tc.name, tr.Enabled(), err)
		}
		if err := tr.Shutdown(t.Context()); err != nil {
			t.Errorf("%s: Shutdown of tracing off: %v", tc.name, err)
		}
	}
}

func TestTracesEndpoint(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		vars map[string]string
		want string
	}{
		{map[string]string{}, ""},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318/"}, "http://c:4318/v1/traces"},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://t:9/x"}, "http://t:9/x"},
	} {
		if got := tracesEndpoint(env(tc.vars)); got != tc.want {
			t.Errorf("tracesEndpoint(%v) = %q, want %q", tc.vars, got, tc.want)
		}
	}
}

func TestTraceparent_RoundTrip(t *testing.T) {
	t.Parallel()
	if got := Traceparent(context.Background()); got != "" {
		t.Fatalf("Traceparent without a span = %q", got)
	}
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	ctx := WithTraceparent(context.Background(), tp)
	if got := Traceparent(ctx); got != tp {
		t.Fatalf("Traceparent(WithTraceparent(%q)) = %q", tp, got)
	}
	// A span in ctx wins over a kept traceparent; garbage is ignored.
	if got := Traceparent(WithTraceparent(ctx, "00-11111111111111111111111111111111-2222222222222222-01")); got != tp {
		t.Fatalf("WithTraceparent replaced the span ctx carries: %q", got)
	}
	if got := Traceparent(WithTraceparent(context.Background(), "not a traceparent")); got != "" {
		t.Fatalf("an invalid traceparent became %q", got)
	}
}

func TestStart_OffIsANoOp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	if got, inv := StartInvoke(ctx, InvokeParams{Agent: "spawn"}); got != ctx || inv != nil {
		t.Fatalf("StartInvoke without a tracer provider returned a new context or an invocation")
	}
	if got, chat := StartChat(ctx, ChatParams{Model: "m"}); got != ctx {
		t.Fatalf("StartChat without a tracer provider returned a new context")
	} else {
		chat.End(1, 2, nil)
	}
	if got, span := StartTool(ctx, "t", "c"); got != ctx || span.IsRecording() {
		t.Fatalf("StartTool without a tracer provider started a span")
	}
	var inv *Invocation
	inv.SetRun("r", "c")
	inv.End("completed", nil)
}

func TestLogHandler_AddsTheSpanOfTheContext(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := slog.New(LogHandler(slog.NewJSONHandler(&buf, nil))).With("k", "v")
	log.InfoContext(context.Background(), "plain")
	ctx := WithTraceparent(context.Background(), "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	log.InfoContext(ctx, "traced")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	var plain, traced map[string]any
	if len(lines) != 2 || json.Unmarshal([]byte(lines[0]), &plain) != nil || json.Unmarshal([]byte(lines[1]), &traced) != nil {
		t.Fatalf("log = %q", buf.String())
	}
	if _, ok := plain["trace_id"]; ok {
		t.Errorf("a record without a span has a trace_id: %v", plain)
	}
	if traced["trace_id"] != "4bf92f3577b34da6a3ce929d0e0e4736" || traced["span_id"] != "00f067aa0ba902b7" || traced["k"] != "v" {
		t.Errorf("traced record = %v", traced)
	}
}

func TestMetrics_LintAndBoundedLabels(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	m.RunStarted("r1", "spawn", KindOneShot)
	m.RunSettled("r1", "spawn", KindOneShot, "a reason nobody knows")
	m.RunSettled("lost", "spawn", KindOneShot, "error") // another replica's run
	m.Followup("steered")
	m.Followup("sideways")
	m.Tokens("echo", 3, 0)
	m.Takeover()
	m.ControlRequest("followup")
	m.IdempotentReplay()
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	for _, c := range []struct {
		c    prometheus.Collector
		want float64
	}{
		{m.settled.WithLabelValues("spawn", KindOneShot, "other"), 1},
		{m.settled.WithLabelValues("spawn", KindOneShot, "error"), 1},
		{m.live.WithLabelValues("spawn", KindOneShot), 0},
		{m.follow.WithLabelValues("other"), 1},
		{m.tokens.WithLabelValues("echo", "input"), 3},
	} {
		if got := testutil.ToFloat64(c.c); got != c.want {
			t.Errorf("%v = %v, want %v", c.c, got, c.want)
		}
	}
	if n := testutil.CollectAndCount(m.tokens); n != 1 {
		t.Errorf("tokens has %d series, want 1 (no zero output series)", n)
	}
	var nilMetrics *Metrics
	nilMetrics.RunStarted("r", "p", KindOneShot) // counts nothing, no panic
}

// TestMetrics_LiveRunsWhateverTheListenersOrder: a run's end counted before
// its start (its listeners called out of order) leaves it not live, as an
// end after its start does; an end of a run started elsewhere takes the
// gauge below nothing.
func TestMetrics_LiveRunsWhateverTheListenersOrder(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	live := func() float64 { return testutil.ToFloat64(m.live.WithLabelValues("spawn", KindActivation)) }
	m.RunStarted("a", "spawn", KindActivation)
	m.RunSettled("a", "spawn", KindActivation, "completed")
	m.RunSettled("b", "spawn", KindActivation, "completed")
	m.RunStarted("b", "spawn", KindActivation)
	m.RunSettled("c", "spawn", KindActivation, "completed")
	if got := live(); got != 0 {
		t.Fatalf("live runs %v after every run ended, want 0", got)
	}
	m.RunStarted("d", "spawn", KindActivation)
	if got := live(); got != 1 {
		t.Fatalf("live runs %v with one running, want 1", got)
	}
}

// TestChildren_ResolvesEachLabelSetOnce: a child is asked of the vector
// the first time its labels are seen, and counts into the vector's series
// every time after.
func TestChildren_ResolvesEachLabelSetOnce(t *testing.T) {
	t.Parallel()
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "c_total", Help: "c"}, []string{"a", "b"})
	asked := 0
	c := NewChildren(func(l [2]string) prometheus.Counter { asked++; return vec.WithLabelValues(l[:]...) })
	for range 3 {
		c.Of([2]string{"x", "y"}).Inc()
	}
	c.Of([2]string{"x", "z"}).Inc()
	if asked != 2 {
		t.Errorf("the vector was asked %d times for 2 label sets", asked)
	}
	if got := testutil.ToFloat64(vec.WithLabelValues("x", "y")); got != 3 {
		t.Errorf("x,y = %v, want 3", got)
	}
	if got := testutil.ToFloat64(vec.WithLabelValues("x", "z")); got != 1 {
		t.Errorf("x,z = %v, want 1", got)
	}
}

// TestLogHandler_AttrsAsSlogWritesThem: attributes and groups added in any
// order, before or after records, come out as slog's own handler writes
// them, trace ids after them.
func TestLogHandler_AttrsAsSlogWritesThem(t *testing.T) {
	t.Parallel()
	var got, want bytes.Buffer
	untimed := &slog.HandlerOptions{ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey && len(groups) == 0 {
			return slog.Attr{}
		}
		return a
	}}
	ours := slog.New(LogHandler(slog.NewJSONHandler(&got, untimed)))
	plain := slog.New(slog.NewJSONHandler(&want, untimed))
	for _, log := range []*slog.Logger{ours, plain} {
		a := log.With("child_id", "c1")
		b := a.With("session_id", "c1", "n", 2)
		a.Info("first")
		b.Debug("not enabled")
		b.Info("second")
		b.WithGroup("g").With("k", "v").Info("grouped", "x", 1)
		a.Info("third")
	}
	if got.String() != want.String() {
		t.Errorf("log =\n%s\nwant\n%s", got.String(), want.String())
	}
	var traced map[string]any
	buf := bytes.Buffer{}
	ctx := WithTraceparent(context.Background(), "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	slog.New(LogHandler(slog.NewJSONHandler(&buf, nil))).With("k", "v").With("l", "w").InfoContext(ctx, "traced")
	if err := json.Unmarshal(buf.Bytes(), &traced); err != nil || traced["k"] != "v" || traced["l"] != "w" || traced["trace_id"] != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("traced record = %v (%v)", traced, err)
	}
}
