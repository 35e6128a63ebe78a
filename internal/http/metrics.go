package http

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// NewRegistry returns a private registry holding the Go runtime and process
// collectors; pass it to InstrumentStore and Config.Registry.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// metrics are the HTTP-side series.
type metrics struct {
	requests   *prometheus.CounterVec
	duration   *prometheus.HistogramVec
	errors     *prometheus.CounterVec
	sseClients *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "subagentd_http_requests_total",
			Help: "HTTP requests by method, chi route pattern and status.",
		}, []string{"method", "route", "status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "subagentd_http_request_duration_seconds",
			Help:    "HTTP request durations by method and chi route pattern (streams and waits included).",
			Buckets: prometheus.DefBuckets,
		}, []string{"method", "route"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "subagentd_http_errors_total",
			Help: "Problem responses by error code.",
		}, []string{"code"}),
		sseClients: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "subagentd_sse_clients",
			Help: "Connected Server-Sent Event clients by stream (events, session, run).",
		}, []string{"stream"}),
	}
	reg.MustRegister(m.requests, m.duration, m.errors, m.sseClients)
	return m
}

// middleware counts and times requests by chi route pattern (not by path,
// which would make a series per id).
func (m *metrics) middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(rec, r)
		route := "unmatched"
		if rc := chi.RouteContext(r.Context()); rc != nil && rc.RoutePattern() != "" {
			route = rc.RoutePattern()
		}
		m.requests.WithLabelValues(r.Method, route, strconv.Itoa(rec.status)).Inc()
		m.duration.WithLabelValues(r.Method, route).Observe(time.Since(start).Seconds())
	})
}

// statusRecorder remembers the status; Unwrap lets http.ResponseController
// reach Flush and SetWriteDeadline of the real writer.
type statusRecorder struct {
	http.ResponseWriter
	status      int
	wroteHeader bool
}

func (r *statusRecorder) WriteHeader(code int) {
	if !r.wroteHeader {
		r.status, r.wroteHeader = code, true
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(p []byte) (int, error) {
	r.wroteHeader = true
	return r.ResponseWriter.Write(p)
}

func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

func (s *Server) metricsHandler() http.Handler {
	return promhttp.HandlerFor(s.registry, promhttp.HandlerOpts{Registry: s.registry})
}

// knownStopReasons bound the stop_reason label: any other reason (the set
// is open) counts as "other".
var knownStopReasons = map[string]bool{
	subagent.StopCompleted: true, subagent.StopAborted: true, subagent.StopError: true,
	subagent.StopMaxTokens: true, subagent.StopRefusal: true,
}

// InstrumentStore returns st counting, into reg, what this process writes:
// events appended to session logs and to the lifecycle log, runs started,
// settled (by stop reason) and disposed, and the runs running. Runs are
// counted from their lifecycle transitions, which the store commits with
// their start and end events.
func InstrumentStore(st store.Store, reg prometheus.Registerer) store.Store {
	c := &countingStore{
		Store: st,
		appended: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "subagentd_events_appended_total",
			Help: "Events appended by this process, by log (session, lifecycle).",
		}, []string{"log"}),
		started: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "subagentd_runs_started_total",
			Help: "Runs and activations started by this process.",
		}),
		settled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "subagentd_runs_settled_total",
			Help: "Runs and activations settled by this process, by stop reason (unknown reasons as other).",
		}, []string{"stop_reason"}),
		disposed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "subagentd_runs_disposed_total",
			Help: "Run disposals recorded by this process (a repeated disposal counts again).",
		}),
		running: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "subagentd_runs_running",
			Help: "Runs started minus runs settled by this process.",
		}),
	}
	reg.MustRegister(c.appended, c.started, c.settled, c.disposed, c.running)
	// Every run appends to both logs a dozen times: look the two series
	// up once.
	c.sessionAppended, c.lifecycleAppended = c.appended.WithLabelValues("session"), c.appended.WithLabelValues("lifecycle")
	return c
}

type countingStore struct {
	store.Store
	appended *prometheus.CounterVec
	// sessionAppended and lifecycleAppended are appended's two series.
	sessionAppended, lifecycleAppended prometheus.Counter
	started                            prometheus.Counter
	settled                            *prometheus.CounterVec
	disposed                           prometheus.Counter
	running                            prometheus.Gauge
	// mine holds the ids of the runs this process started and has not
	// ended: ending a lost replica's run (lease reaping) must not take the
	// running gauge below zero.
	mine sync.Map
}

func (c *countingStore) AppendEvents(ctx context.Context, sessionID string, evs ...store.NewEvent) ([]store.Event, error) {
	out, err := c.Store.AppendEvents(ctx, sessionID, evs...)
	if err == nil {
		c.sessionAppended.Add(float64(len(out)))
	}
	return out, err
}

func (c *countingStore) AppendLifecycle(ctx context.Context, e store.LifecycleEvent) (store.LifecycleEvent, error) {
	out, err := c.Store.AppendLifecycle(ctx, e)
	if err == nil {
		c.lifecycleAppended.Inc()
	}
	return out, err
}

func (c *countingStore) StartRun(ctx context.Context, r store.Run, start store.LifecycleEvent) (store.LifecycleEvent, error) {
	out, err := c.Store.StartRun(ctx, r, start)
	if err == nil {
		c.lifecycleAppended.Inc()
		c.started.Inc()
		c.running.Inc()
		c.mine.Store(r.ID, struct{}{})
	}
	return out, err
}

func (c *countingStore) EndRun(ctx context.Context, runID string, res store.RunResult, end store.LifecycleEvent) (store.LifecycleEvent, error) {
	out, err := c.Store.EndRun(ctx, runID, res, end)
	if err == nil {
		reason := res.StopReason
		if !knownStopReasons[reason] {
			reason = "other"
		}
		c.lifecycleAppended.Inc()
		c.settled.WithLabelValues(reason).Inc()
		if _, ok := c.mine.LoadAndDelete(runID); ok {
			c.running.Dec()
		}
	}
	return out, err
}

func (c *countingStore) DisposeRun(ctx context.Context, runID string) error {
	err := c.Store.DisposeRun(ctx, runID)
	if err == nil {
		c.disposed.Inc()
	}
	return err
}
