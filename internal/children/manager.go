package children

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/resident"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// materializer builds the agents of provider's children: the provider's own
// Materializer when it has one (ACP), else the manager's.
func (m *Manager) materializer(provider string) subagent.Materializer {
	if p, ok := m.svc.Provider(provider); ok {
		if mat, ok := p.(subagent.Materializer); ok {
			return mat
		}
	}
	return m.mat
}

// NoticeSink delivers settlement notices (docs/seam.md §13) and child
// reports (docs/seam.md §17) to parents the Manager does not drive: root sessions
// (*roots.Manager implements it). Notices and reports to continuable
// parents go through the Manager's own inbox.
type NoticeSink interface {
	// Notify accepts msg, whose id the Manager issued, for root parentID.
	// Messages to one parent must reach it in the order Notify accepted
	// them (R110). Without quiet the parent is woken: msg joins its
	// running turn at the next step, or opens a turn; quiet stores it for
	// the parent's next turn without waking it (R108, R118).
	Notify(ctx context.Context, parentID string, msg sessionlog.UserMessage, quiet bool) error
}

// ManagerConfig configures a Manager.
type ManagerConfig struct {
	// Materializer builds the agents of children whose provider is not a
	// Materializer itself (an ACP provider builds its own). Required for
	// in-process providers.
	Materializer subagent.Materializer
	// Notices receives settlement notices and reports for root parents;
	// nil drops notices (logged) and fails reports (EParentUnavailable).
	Notices NoticeSink
	// ReportDelivery is the delivery of reports made with the report tool
	// (MaterializeRequest.Report): DeliveryNextStep (empty means that) or
	// DeliveryQuiet — a deployment policy (docs/seam.md §17).
	ReportDelivery string
	// Logger receives delivery and settlement faults. Required.
	Logger *slog.Logger
}

// ContinuableRequest is a continuable start (docs/seam.md §11): a one-shot
// request without outputSchema, plus the durable label and an optional
// caller-reserved child id. Capability flags are not consulted (R63).
type ContinuableRequest struct {
	Provider     string
	Label        string
	ChildID      string
	Prompt       []model.Block
	Parent       subagent.Parent
	AgentOptions *subagent.AgentOptions
	MaxDepth     *int
	ToolFilter   *subagent.ToolFilter
	Persona      *string
	// WakeParent makes the child's settlement notices open its parent's
	// turn; without it they are recorded quietly for the parent's next
	// turn (R78). The delegation tools set it — the parent's own agent
	// delegated the child — and a client asks for it with notifyParent
	// "wake". It is stored with the child (store.Session.WakeParent), so
	// every activation, on any replica and after a restart, follows it.
	WakeParent bool
	// Limits narrows the tree's limits, as Request.Limits.
	Limits *subagent.Limits
}

// ContinuableStarted identifies an accepted continuable start: the child,
// the task of its first activation and the accepted prompt (R57).
type ContinuableStarted struct {
	ChildID   string
	TaskID    string
	MessageID string
}

// FollowupResult says where accepted followup content went: Route is
// RouteSteered, RouteStarted, RouteQueued or RouteParked; TaskID the
// activation that runs it (none while parked), MessageID the message id
// the child logs it under.
type FollowupResult struct {
	Route     subagent.Route
	TaskID    string
	MessageID string
}

// Manager is the continuation manager of one process: it starts continuable
// children, routes followups, interrupts, settles activations and recovers
// undelivered messages after a restart. It shares the Service's provider
// registry, lifecycle bus, store and admission. Safe for concurrent use.
//
// Each child with anything live — an activation, followups awaiting their
// route, a cold resume owed — is owned by one loop of the resident engine
// (internal/resident, docs/architecture.md §5): every delivery, residency and settlement
// decision for it (R65) is a command its loop runs, one at a time. The
// loop also watches its agent's turn end (turnEnd), which settles the
// activation; a steer's admission is awaited off the loop and comes back
// as a command. Lifecycle listeners never run in a loop or under a lock: an
// edge a command decided is dispatched by its sender once the command
// returned (child.outbox), so a listener may call the Manager for the same
// child.
type Manager struct {
	svc      *subagent.Service
	ctl      *resident.Control
	store    store.Store
	mat      subagent.Materializer
	notices  NoticeSink
	delivery string // of the report tool
	log      *slog.Logger
	children *resident.Group[child, struct{}]

	draining atomic.Bool
	wg       sync.WaitGroup // settlements and steer receipts
}

// child is the in-process state of one child id, owned by its loop in
// Manager.children.
type child struct {
	key resident.Key
	// sess and desc cache the verified durable header and resume
	// descriptor (the first descriptor of the own suffix never changes).
	sess *store.Session
	desc *subagent.Descriptor
	// state says whether act is a live activation and whether a cold
	// resume is owed after it (see state.go); act is nil while idle.
	state childState
	act   *activation
	// waiters are the followup callers waiting for their message's route,
	// by message id.
	waiters map[string]chan<- answer
	// slot, when set, releases the live-run slot (Service.reserveLive) held
	// for the cold resume a command is about to start; coldResume hands it
	// to the activation.
	slot func()
	// disposed: the child was disposed (Manager.Dispose); it takes no more
	// messages.
	disposed bool
	// outbox holds the lifecycle dispatches a command decided, in order;
	// its sender runs them once the command returned
	// (resident.Policy.Outbox).
	outbox []func()
}

// answer is a followup's route, or why its message was not delivered.
type answer struct {
	res FollowupResult
	err error
}

// NewManager returns the continuation manager over svc.
func NewManager(svc *subagent.Service, cfg ManagerConfig) *Manager {
	m := &Manager{
		svc:      svc,
		ctl:      svc.Control(),
		store:    svc.Store(),
		mat:      cfg.Materializer,
		notices:  cfg.Notices,
		delivery: cfg.ReportDelivery,
		log:      cfg.Logger,
	}
	m.children = resident.NewGroup(resident.Policy[child, struct{}]{
		Kind:   "child",
		Leases: svc.Control().Leases(),
		New:    func(key resident.Key) *child { return &child{key: key, waiters: map[string]chan<- answer{}} },
		// A loop ends once nothing is live or owed; it drives the child,
		// under its lease, while an activation is live.
		Idle:    func(c *child) bool { return c.state == childIdle && len(c.waiters) == 0 },
		Driving: func(c *child) bool { return c.act != nil },
		Watch:   m.turnEnd,
		Owns:    func(sess store.Session) bool { return sess.ParentID != "" },
		Resume:  m.recoverIn,
		Stop:    m.stop,
		Outbox: func(c *child) []func() {
			out := c.outbox
			c.outbox = nil
			return out
		},
	})
	m.handle()
	m.handleDispose()
	svc.SetActivations(m)
	return m
}

// do runs f in key's loop, then — back in the caller, off the loop — the
// lifecycle dispatches f decided (child.outbox).
func (m *Manager) do(key resident.Key, f func(c *child)) {
	m.children.Do(key, f)
}

// liveActivation returns the live activation of key, if any.
func (m *Manager) liveActivation(key resident.Key) *activation {
	var act *activation
	m.children.Peek(key, func(c *child) { act = c.act })
	return act
}

// admitting returns EDraining once the Manager or its Service began to shut
// down (R81, R113).
func (m *Manager) admitting() error {
	if m.draining.Load() || m.svc.Draining() {
		return subagent.Errorf(subagent.EDraining, "the service is shutting down")
	}
	return nil
}

func (m *Manager) isDraining() bool { return m.admitting() != nil }

// closeAgent closes an agent that never became an activation.
func (m *Manager) closeAgent(ctx context.Context, childID string, ag subagent.ChildAgent) {
	if err := ag.Close(ctx); err != nil {
		m.log.ErrorContext(ctx, "close unpublished child agent", slog.String("child_id", childID), slog.Any("error", err))
	}
}
