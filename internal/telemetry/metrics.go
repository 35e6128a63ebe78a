package telemetry

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics is the Prometheus metric set of the domain. Every label is
// bounded: provider names are configured, kinds, stop reasons, routes and
// ops are closed sets (anything else counts as "other"); no label is an id.
// A nil *Metrics counts nothing, so that a part built without one (a test)
// needs no stand-in. Safe for concurrent use.
type Metrics struct {
	started  *prometheus.CounterVec
	settled  *prometheus.CounterVec
	live     *prometheus.GaugeVec
	follow   *prometheus.CounterVec
	tokens   *prometheus.CounterVec
	takeover prometheus.Counter
	control  *prometheus.CounterVec
	replays  prometheus.Counter

	// mine holds the runs this process counted live: an end this process
	// records for a run another replica started (a lost replica's run it
	// closes) must not take the gauge below what it counted.
	mine sync.Map
}

// Run kinds, as the kind label says them.
const (
	KindOneShot    = "one-shot"
	KindActivation = "activation"
)

// knownStopReasons bound the stop_reason label: the set is open, and any
// other reason counts as "other".
var knownStopReasons = map[string]bool{
	"completed": true, "aborted": true, "error": true, "max-tokens": true, "refusal": true,
}

// knownRoutes bound the route label of followups.
var knownRoutes = map[string]bool{"steered": true, "started": true, "queued": true}

// NewMetrics registers the metric set in reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		started: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "subagentd_runs_started_total",
			Help: "One-shot runs and continuable activations this process started, by provider and kind (one-shot, activation).",
		}, []string{"provider", "kind"}),
		settled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "subagentd_runs_settled_total",
			Help: "Runs and activations whose end this process recorded, by provider, kind and stop reason (unknown reasons as other).",
		}, []string{"provider", "kind", "stop_reason"}),
		live: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "subagentd_runs_live",
			Help: "Runs and activations this process started and has not yet settled, by provider and kind.",
		}, []string{"provider", "kind"}),
		follow: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "subagentd_followups_total",
			Help: "Followups delivered to continuable children, by route (steered into the live activation, started a new one, queued for the next turn).",
		}, []string{"route"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "subagentd_model_tokens_total",
			Help: "Tokens in-process agents' model calls reported, by model provider (the route's kind: echo, openai) and type (input, output).",
		}, []string{"provider", "type"}),
		takeover: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "subagentd_lease_takeovers_total",
			Help: "Resident agents (root sessions, continuable children) this replica took over after their owner's lease lapsed.",
		}),
		control: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "subagentd_control_requests_total",
			Help: "Cross-replica control requests this replica carried out for another, by op.",
		}, []string{"op"}),
		replays: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "subagentd_idempotent_replays_total",
			Help: "Requests answered from a stored answer because they repeated an Idempotency-Key.",
		}),
	}
	reg.MustRegister(m.started, m.settled, m.live, m.follow, m.tokens, m.takeover, m.control, m.replays)
	return m
}

// RunStarted counts the start of run runID.
func (m *Metrics) RunStarted(runID, provider, kind string) {
	if m == nil {
		return
	}
	m.started.WithLabelValues(provider, kind).Inc()
	m.live.WithLabelValues(provider, kind).Inc()
	m.mine.Store(runID, struct{}{})
}

// RunSettled counts the recorded end of run runID with stopReason.
func (m *Metrics) RunSettled(runID, provider, kind, stopReason string) {
	if m == nil {
		return
	}
	if !knownStopReasons[stopReason] {
		stopReason = "other"
	}
	m.settled.WithLabelValues(provider, kind, stopReason).Inc()
	if _, ok := m.mine.LoadAndDelete(runID); ok {
		m.live.WithLabelValues(provider, kind).Dec()
	}
}

// Followup counts a followup delivered by route.
func (m *Metrics) Followup(route string) {
	if m == nil {
		return
	}
	if !knownRoutes[route] {
		route = "other"
	}
	m.follow.WithLabelValues(route).Inc()
}

// Tokens counts the usage one model call of provider reported.
func (m *Metrics) Tokens(provider string, input, output int) {
	if m == nil {
		return
	}
	if input > 0 {
		m.tokens.WithLabelValues(provider, "input").Add(float64(input))
	}
	if output > 0 {
		m.tokens.WithLabelValues(provider, "output").Add(float64(output))
	}
}

// Takeover counts a resident agent taken over from a lost owner.
func (m *Metrics) Takeover() {
	if m == nil {
		return
	}
	m.takeover.Inc()
}

// ControlRequest counts a control request carried out; op must be one
// this process handles (a registered op), else pass "other".
func (m *Metrics) ControlRequest(op string) {
	if m == nil {
		return
	}
	m.control.WithLabelValues(op).Inc()
}

// IdempotentReplay counts a request answered by replay.
func (m *Metrics) IdempotentReplay() {
	if m == nil {
		return
	}
	m.replays.Inc()
}
