package webhooks

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
	"github.com/subagentd/subagentd/internal/telemetry"
)

// metricsOf returns a bundle whose service counts into a fresh registry,
// measuring the backlog every 10 ms.
func metricsOf(t *testing.T, retry []time.Duration) (*bundle, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m := telemetry.NewMetrics(reg)
	b := setup(t, func(c *Config) { c.Metrics, c.Poll, c.Retry = m, 10*time.Millisecond, retry })
	return b, reg
}

// gauge returns the value of the unlabelled metric name in reg, -1 if it
// has no sample.
func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return -1
}

// outcomes returns subagentd_webhook_deliveries_total by outcome.
func outcomes(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range fams {
		if f.GetName() != "subagentd_webhook_deliveries_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			out[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
		}
	}
	return out
}

// eventually waits, bounded by deadline, until cond holds: metrics are
// read by a scrape, which no signal announces. It fails t with what.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	end := time.After(deadline)
	for !cond() {
		select {
		case <-tick.C:
		case <-end:
			t.Fatalf("not within %v: %s", deadline, what)
		}
	}
}

// TestMetrics_DeliveriesByOutcome: a receiver answering 500, 204, 410 is
// counted as one failure, one success and one gone; the registry lints
// clean.
func TestMetrics_DeliveriesByOutcome(t *testing.T) {
	t.Parallel()
	b, reg := metricsOf(t, []time.Duration{10 * time.Millisecond})
	rc := newReceiver(t, func(n int, _ *http.Request) int {
		return []int{http.StatusInternalServerError, http.StatusNoContent, http.StatusGone}[min(n, 3)-1]
	})
	b.create(t, rc.srv.URL, RunStarted)
	b.event(t, subagent.Event{Type: subagent.EventStart, RunID: "run-1"}) // 500, then 204
	b.event(t, subagent.Event{Type: subagent.EventStart, RunID: "run-2"}) // 410
	for range 3 {
		rc.next(t)
	}
	want := map[string]float64{telemetry.WebhookFailure: 1, telemetry.WebhookSuccess: 1, telemetry.WebhookGone: 1}
	eventually(t, "one delivery of each outcome counted", func() bool {
		got := outcomes(t, reg)
		return got[telemetry.WebhookFailure] == 1 && got[telemetry.WebhookSuccess] == 1 && got[telemetry.WebhookGone] == 1
	})
	if got := outcomes(t, reg); len(got) != len(want) {
		t.Fatalf("outcomes %v, want %v", got, want)
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

// TestMetrics_Backlog: while the receiver answers 503 the backlog gauge
// counts the events after the endpoint's cursor and the age of the oldest
// grows; once it answers 204 both fall to 0.
func TestMetrics_Backlog(t *testing.T) {
	t.Parallel()
	// Retries every 20 ms, for longer than any wait of the test.
	b, reg := metricsOf(t, slices.Repeat([]time.Duration{20 * time.Millisecond}, int(deadline/(20*time.Millisecond))))
	var up atomic.Bool
	rc := newReceiver(t, func(int, *http.Request) int {
		if up.Load() {
			return http.StatusNoContent
		}
		return http.StatusServiceUnavailable
	})
	b.create(t, rc.srv.URL, RunStarted, RunSettled)
	eventually(t, "an empty backlog measured", func() bool {
		return gauge(t, reg, "subagentd_webhook_backlog_events") == 0
	})
	for i := range 4 {
		b.event(t, subagent.Event{Type: subagent.EventStart, RunID: "run-" + strconv.Itoa(i)})
	}
	rc.next(t) // the first attempt failed
	eventually(t, "a backlog of 4 events, the oldest aging", func() bool {
		return gauge(t, reg, "subagentd_webhook_backlog_events") == 4 && gauge(t, reg, "subagentd_webhook_backlog_oldest_seconds") > 0
	})
	up.Store(true)
	eventually(t, "the backlog drained", func() bool {
		return gauge(t, reg, "subagentd_webhook_backlog_events") == 0 && gauge(t, reg, "subagentd_webhook_backlog_oldest_seconds") == 0
	})
}

// TestDeliver_TraceparentOfTheRun: with traces off, a delivery of an event
// of a run whose row kept a traceparent carries that traceparent; one of a
// run without a row carries a new one.
func TestDeliver_TraceparentOfTheRun(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	rc := newReceiver(t, nil)
	b.create(t, rc.srv.URL, RunStarted)
	const kept = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	b.startRun(t, "run-traced", kept)
	b.event(t, subagent.Event{Type: subagent.EventStart, RunID: "run-rowless"})
	if got := rc.next(t).header.Get("traceparent"); got != kept {
		t.Fatalf("traceparent of the traced run's delivery = %q, want the run's %q", got, kept)
	}
	got := rc.next(t).header.Get("traceparent")
	if !traceparentRE.MatchString(got) || strings.Contains(got, "0af7651916cd43dd8448eb211c80319c") {
		t.Fatalf("traceparent of the rowless run's delivery = %q, want a new trace", got)
	}
}

// startRun records a one-shot run of "child" whose row keeps traceparent,
// appending its subagent/start.
func (b *bundle) startRun(t *testing.T, runID, traceparent string) {
	t.Helper()
	e := subagent.Event{Type: subagent.EventStart, RunID: runID, ID: "child", ParentID: "mid", Provider: "spawn"}
	payload, err := subagent.EventPayload(e)
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.st.StartRun(t.Context(), store.Run{ID: runID, Kind: store.KindOneShot, Provider: "spawn", ChildID: "child", ParentID: "mid",
		State: store.StateRunning, StartedAt: time.Now(), Owner: "test", LeaseUntil: time.Now().Add(time.Minute), Traceparent: traceparent},
		store.LifecycleEvent{Type: e.Type, ParentID: e.ParentID, RunID: runID, Payload: payload})
	if err != nil {
		t.Fatal(err)
	}
}

// ended is a span processor that hands each ended span to a channel.
type ended chan sdktrace.ReadOnlySpan

func (e ended) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (e ended) OnEnd(s sdktrace.ReadOnlySpan)                   { e <- s }
func (e ended) Shutdown(context.Context) error                  { return nil }
func (e ended) ForceFlush(context.Context) error                { return nil }

// TestDeliver_SpanContinuesTheRunTrace: with traces on, a delivery of an
// event of a run whose row kept a traceparent is a "webhook deliver"
// CLIENT span in that trace, a child of the kept span, and the receiver
// gets that span's traceparent. Not parallel: it installs the global
// tracer provider (restored before the parallel tests resume).
func TestDeliver_SpanContinuesTheRunTrace(t *testing.T) {
	spans := make(ended, 100)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	otel.SetTracerProvider(tp)
	t.Cleanup(func() {
		otel.SetTracerProvider(noop.NewTracerProvider())
		_ = tp.Shutdown(context.Background())
	})
	b := setup(t, nil)
	rc := newReceiver(t, nil)
	b.create(t, rc.srv.URL, RunStarted)
	const traceID, parentID = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
	b.startRun(t, "run-traced", "00-"+traceID+"-"+parentID+"-01")
	got := rc.next(t).header.Get("traceparent")
	if !traceparentRE.MatchString(got) || !strings.HasPrefix(got, "00-"+traceID+"-") || strings.Contains(got, parentID) {
		t.Fatalf("traceparent %q, want the run's trace %s under a new span", got, traceID)
	}
	var s sdktrace.ReadOnlySpan
	select {
	case s = <-spans:
	case <-time.After(deadline):
		t.Fatalf("no span ended within %v", deadline)
	}
	attrs := map[string]string{}
	for _, kv := range s.Attributes() {
		attrs[string(kv.Key)] = kv.Value.String()
	}
	if s.Name() != "webhook deliver" || s.SpanKind() != trace.SpanKindClient || s.SpanContext().TraceID().String() != traceID ||
		s.Parent().SpanID().String() != parentID || !strings.Contains(got, s.SpanContext().SpanID().String()) ||
		attrs["http.request.method"] != "POST" || attrs["http.response.status_code"] != "204" ||
		attrs[string(telemetry.WebhookEventKey)] != RunStarted {
		t.Fatalf("span %s kind %v trace %s parent %s attrs %v; traceparent %s", s.Name(), s.SpanKind(),
			s.SpanContext().TraceID(), s.Parent().SpanID(), attrs, got)
	}
}
