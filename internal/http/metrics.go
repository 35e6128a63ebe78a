package http

import (
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/subagentd/subagentd/internal/telemetry"
)

// NewRegistry returns a private registry holding the Go runtime and process
// collectors; pass it to telemetry.NewMetrics and Config.Registry.
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

	// The children of requests and duration that middleware counts every
	// request in, by label values (duration's: method and route).
	requestsOf *telemetry.Children[requestLabels, prometheus.Counter]
	durationOf *telemetry.Children[[2]string, prometheus.Observer]
}

// requestLabels are the label values of requests.
type requestLabels struct {
	method, route string
	status        int
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
	m.requestsOf = telemetry.NewChildren(func(l requestLabels) prometheus.Counter {
		return m.requests.WithLabelValues(l.method, l.route, strconv.Itoa(l.status))
	})
	m.durationOf = telemetry.NewChildren(func(l [2]string) prometheus.Observer { return m.duration.WithLabelValues(l[:]...) })
	return m
}

// middleware counts and times requests by chi route pattern (not by path,
// which would make a series per id), and names the request's span by it.
func (m *metrics) middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(rec, r)
		route := "unmatched"
		if rc := chi.RouteContext(r.Context()); rc != nil {
			if p := rc.RoutePattern(); p != "" { // built anew at each call
				route = p
			}
		}
		telemetry.NameHTTPSpan(r.Context(), r.Method, route)
		m.requestsOf.Of(requestLabels{r.Method, route, rec.status}).Inc()
		m.durationOf.Of([2]string{r.Method, route}).Observe(time.Since(start).Seconds())
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
