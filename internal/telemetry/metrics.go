package telemetry

import (
	"sync"
	"time"

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
	hooks    *prometheus.CounterVec
	backlog  prometheus.Gauge
	oldest   prometheus.Gauge

	// The children of the vectors every run and model step counts in, by
	// label values: {provider, kind}, {provider, kind, stop_reason} and
	// {provider, type}.
	startedOf *Children[[2]string, prometheus.Counter]
	liveOf    *Children[[2]string, prometheus.Gauge]
	settledOf *Children[[3]string, prometheus.Counter]
	tokensOf  *Children[[2]string, prometheus.Counter]

	// mu guards mine and early. mine holds the runs this process counted
	// live: an end this process records for a run another replica started
	// (a lost replica's run it closes) must not take the gauge below what
	// it counted. early holds, with when, the ends that arrived before
	// their start (the listeners of one run may be called out of order), so
	// that the late start is not counted live; an entry whose start never
	// comes here (a run started elsewhere) is dropped after earlyFor.
	mu    sync.Mutex
	mine  map[string]struct{}
	early map[string]time.Time
}

// earlyFor bounds how long an end waits for its own start.
const earlyFor = time.Minute

// Run kinds, as the kind label says them.
const (
	KindOneShot    = "one-shot"
	KindActivation = "activation"
)

// Webhook delivery outcomes, as the outcome label says them: a 2xx
// answer, a 410 Gone, and any other failed attempt (no answer, another
// status).
const (
	WebhookSuccess = "success"
	WebhookFailure = "failure"
	WebhookGone    = "gone"
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
	m := &Metrics{mine: map[string]struct{}{}, early: map[string]time.Time{},
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
		hooks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "subagentd_webhook_deliveries_total",
			Help: "Webhook delivery attempts this process made, by outcome (success: a 2xx; gone: a 410; failure: anything else).",
		}, []string{"outcome"}),
		backlog: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "subagentd_webhook_backlog_events",
			Help: "Lifecycle events committed after the cursors of the enabled webhook endpoints of every tenant, summed over the endpoints (each endpoint's count capped). The same store-wide value on every replica.",
		}),
		oldest: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "subagentd_webhook_backlog_oldest_seconds",
			Help: "Age of the oldest lifecycle event an enabled webhook endpoint has yet to go through, 0 when none. The same store-wide value on every replica.",
		}),
	}
	reg.MustRegister(m.started, m.settled, m.live, m.follow, m.tokens, m.takeover, m.control, m.replays, m.hooks, m.backlog, m.oldest)
	m.startedOf = NewChildren(func(l [2]string) prometheus.Counter { return m.started.WithLabelValues(l[:]...) })
	m.liveOf = NewChildren(func(l [2]string) prometheus.Gauge { return m.live.WithLabelValues(l[:]...) })
	m.settledOf = NewChildren(func(l [3]string) prometheus.Counter { return m.settled.WithLabelValues(l[:]...) })
	m.tokensOf = NewChildren(func(l [2]string) prometheus.Counter { return m.tokens.WithLabelValues(l[:]...) })
	return m
}

// RunStarted counts the start of run runID.
func (m *Metrics) RunStarted(runID, provider, kind string) {
	if m == nil {
		return
	}
	m.mu.Lock()
	_, ended := m.early[runID]
	if ended {
		delete(m.early, runID)
	} else {
		m.mine[runID] = struct{}{}
	}
	m.mu.Unlock()
	if !ended {
		m.liveOf.Of([2]string{provider, kind}).Inc()
	}
	m.startedOf.Of([2]string{provider, kind}).Inc()
}

// RunSettled counts the recorded end of run runID with stopReason.
func (m *Metrics) RunSettled(runID, provider, kind, stopReason string) {
	if m == nil {
		return
	}
	if !knownStopReasons[stopReason] {
		stopReason = "other"
	}
	m.mu.Lock()
	_, ok := m.mine[runID]
	if ok {
		delete(m.mine, runID)
	} else {
		now := time.Now()
		for id, at := range m.early {
			if now.Sub(at) > earlyFor {
				delete(m.early, id)
			}
		}
		m.early[runID] = now
	}
	m.mu.Unlock()
	// The gauge moves before the counter, so that a reader that sees the
	// end counted sees the run no longer live.
	if ok {
		m.liveOf.Of([2]string{provider, kind}).Dec()
	}
	m.settledOf.Of([3]string{provider, kind, stopReason}).Inc()
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
		m.tokensOf.Of([2]string{provider, "input"}).Add(float64(input))
	}
	if output > 0 {
		m.tokensOf.Of([2]string{provider, "output"}).Add(float64(output))
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

// WebhookDelivery counts one delivery attempt by outcome (WebhookSuccess,
// WebhookFailure or WebhookGone).
func (m *Metrics) WebhookDelivery(outcome string) {
	if m == nil {
		return
	}
	m.hooks.WithLabelValues(outcome).Inc()
}

// WebhookBacklog sets the webhook backlog: events not yet gone through
// and the age of the oldest.
func (m *Metrics) WebhookBacklog(events int64, oldest time.Duration) {
	if m == nil {
		return
	}
	m.backlog.Set(float64(events))
	m.oldest.Set(max(oldest, 0).Seconds())
}
