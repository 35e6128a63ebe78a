package subagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/subagentd/subagentd/internal/agent"
	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/resident"
	"github.com/subagentd/subagentd/internal/store"
)

// Continuable children (seam-spec §1.15–§1.19, §2.8–§2.17, DESIGN §1).
//
// A continuable child is a durable child session whose log carries a
// continuable descriptor before its first turn. The Manager drives it in
// residency epochs called activations: each is one live agent, one run row
// of kind activation with a fresh task id, and one subagent/start …
// subagent/end pair. This service deliberately differs from the reference
// on two points, both from DESIGN §1:
//
//   - A followup to a running child is steered into its open turn with
//     confirmed admission (route "steered"); a followup to a child that is
//     not running starts a new activation that cold-resumes it from its log
//     (route "started"). A steer that loses the race against the turn's end
//     waits for the settlement and then cold-resumes: accepted content is
//     never dropped. An activation runs one turn per message it was
//     started with — usually one — and settles when they have ended.
//   - Every accepted message is first stored in the durable inbox
//     (store.Enqueue) and acknowledged only once the child logged it as a
//     user/message, so a message accepted before a crash is delivered after
//     the restart (Recover) instead of being lost (R132).

// Followup routes (seam-spec §2.12 R96, DESIGN §1).
const (
	// RouteSteered: the content was admitted into the running turn's next
	// model step.
	RouteSteered = "steered"
	// RouteStarted: the content runs as its own turn of a new activation
	// that cold-resumed the child, behind the messages accepted before it.
	RouteStarted = "started"
	// RouteParked: the content was accepted while an interrupt stopped the
	// child's turn; it waits, durably, and runs first when the next
	// followup starts the child (R102–R103). No task runs it yet.
	RouteParked = "parked"
	// RouteQueued: the child's running turn takes no content (a Queuer,
	// such as an ACP agent); the content runs as the next turn of the same
	// activation once that turn ends.
	RouteQueued = "queued"
)

// Child activity in listings and ChildInfo (seam-spec §1.20).
const (
	ActivityRunning  = "running"
	ActivityInactive = "inactive"
)

// Message source kinds the manager writes (seam-spec §1.19).
const (
	SourceUser            = "user"
	SourceSubagentSettled = "subagent-settled"
	SourceSubagentReport  = "subagent-report"
)

// Report deliveries (seam-spec §1.18, R108).
const (
	// DeliveryNextStep wakes the parent: the report joins its running
	// turn at the next model step, or starts a turn. The default.
	DeliveryNextStep = "next-step"
	// DeliveryQuiet stores the report for the parent's next turn without
	// waking it.
	DeliveryQuiet = "quiet"
)

// ContinuableCreateRequest is what a ContinuableProvider prepares a child
// from (seam-spec §1.15): the child id the manager reserved and the parent.
type ContinuableCreateRequest struct {
	SessionID string
	Parent    Parent
}

// ContinuableSpec is a provider's creation data for a continuable child.
// Seed is a balanced completed-turn prefix of the parent's log, contiguous
// from seq 0 (a fork child), or nil for a fresh child. It is pure data.
type ContinuableSpec struct {
	Seed []store.Event
}

// ContinuableProvider is a Provider that can create continuable children
// (seam-spec §1.15, R54–R55). Its one-shot Start is never called for them;
// the Manager owns the child's agent, built by its Materializer.
type ContinuableProvider interface {
	Provider
	// PrepareContinuable returns the creation data of the child req
	// reserves. It must not create anything. ctx is the request's
	// cancellation.
	PrepareContinuable(ctx context.Context, req ContinuableCreateRequest) (ContinuableSpec, error)
}

// ChildAgent is the live agent of an activation, as the Manager drives it.
// *agent.Agent implements it; see its methods for the contract.
type ChildAgent interface {
	// FollowupMessage inserts msg, whose id the manager issued (the durable
	// inbox row id), as the next turn; on an idle agent it opens that turn
	// (logging msg as user/message) before returning.
	FollowupMessage(ctx context.Context, msg agent.UserMessage) (string, error)
	// SubmitSteer inserts msg into the running turn's next-step inbox and
	// returns at once, or fails matching agent.ErrSteerRejected; the
	// channel then receives nil once a step admitted msg, else the
	// rejection.
	SubmitSteer(ctx context.Context, msg agent.UserMessage) (<-chan error, error)
	// Steer is confirmed steering (R96): it returns the message id once a
	// model step of the running turn admitted content, an error matching
	// agent.ErrSteerRejected when it was not, or ctx's error (the content
	// withdrawn).
	Steer(ctx context.Context, content []model.Block, src agent.Source) (string, error)
	// Cancel aborts the running turn with cause; keepInbox parks queued
	// messages instead of discarding them.
	Cancel(cause string, keepInbox bool)
	// Running reports whether a turn runs or is about to.
	Running() bool
	// Idle returns a channel closed once no turn runs and nothing
	// runnable is queued; the next turn gets a new one. The child's loop
	// watches it: the turn's end is what settles an activation.
	Idle() <-chan struct{}
	// Events returns the session log as the agent wrote and loaded it.
	Events() []store.Event
	// Close cancels with cause disposed, discards the inbox and waits for
	// the agent to stop.
	Close(ctx context.Context) error
}

var _ ChildAgent = (*agent.Agent)(nil)

// MaterializeRequest is what a Materializer builds a child's agent from.
type MaterializeRequest struct {
	// Session is the child's durable header: to be written by Create on
	// creation, as stored on resume.
	Session store.Session
	// Descriptor is the child's continuable descriptor: the creation
	// snapshot, or the resume fold of its log (R87). Its Persona and
	// ToolFilter apply to the agent (R88).
	Descriptor Descriptor
	// Options is the child's model route for this activation: on creation
	// the parent's route overridden by the request's (R45); on resume only
	// the descriptor's agentProvider and agentModel, never a budget (§1.8).
	Options AgentOptions
	// Create is set on creation only. The materializer calls it after every
	// check of its own passed and before it builds the agent; it writes the
	// child's header and creation log. Resume writes nothing (R88).
	Create func(ctx context.Context) error
	// Report sends content to the child's durable parent as this
	// activation (ReportFrom with the manager's delivery policy) and
	// returns the message id; the materializer offers it to the child's
	// model as the report tool (seam-spec §5.3). It answers EUnauthorized
	// once another activation of the child is resident.
	Report func(ctx context.Context, content []model.Block) (string, error)
}

// Materializer builds the live agent of a continuable child over its
// durable session (internal/providers/inprocess implements it for
// in-process children). A ContinuableProvider that is also a Materializer
// builds its own children's agents — an external agent process, say —
// instead of the Manager's (see Manager.materializer). It checks
// everything that can fail on the request — route, persona, tool filter —
// before calling req.Create, so that a rejected creation writes nothing;
// errors that callers may see are *Error values (EInvalidRequest). ctx's
// tenant scopes the agent for its whole life.
type Materializer interface {
	Materialize(ctx context.Context, req MaterializeRequest) (ChildAgent, error)
}

// Queuer marks a ChildAgent whose running turn takes no steering (ACP has
// no mid-turn injection): a followup to it is queued as its next turn with
// FollowupMessage and answered RouteQueued at once.
type Queuer interface {
	ChildAgent
	QueuesFollowups()
}

// materializer builds the agents of provider's children: the provider's own
// Materializer when it has one (ACP), else the manager's.
func (m *Manager) materializer(provider string) Materializer {
	if p, ok := m.svc.Provider(provider); ok {
		if mat, ok := p.(Materializer); ok {
			return mat
		}
	}
	return m.mat
}

// NoticeSink delivers settlement notices (seam-spec §2.10) and child
// reports (§2.14) to parents the Manager does not drive: root sessions
// (*delegate.Roots implements it). Notices and reports to continuable
// parents go through the Manager's own inbox.
type NoticeSink interface {
	// Notify accepts msg, whose id the Manager issued, for root parentID.
	// Messages to one parent must reach it in the order Notify accepted
	// them (R110). Without quiet the parent is woken: msg joins its
	// running turn at the next step, or opens a turn; quiet stores it for
	// the parent's next turn without waking it (R108, R118).
	Notify(ctx context.Context, parentID string, msg agent.UserMessage, quiet bool) error
}

// ManagerConfig configures a Manager.
type ManagerConfig struct {
	// Materializer builds the agents of children whose provider is not a
	// Materializer itself (an ACP provider builds its own). Required for
	// in-process providers.
	Materializer Materializer
	// Notices receives settlement notices and reports for root parents;
	// nil drops notices (logged) and fails reports (EParentUnavailable).
	Notices NoticeSink
	// ReportDelivery is the delivery of reports made with the report tool
	// (MaterializeRequest.Report): DeliveryNextStep (empty means that) or
	// DeliveryQuiet — a deployment policy (seam-spec §5.3).
	ReportDelivery string
	// Logger receives delivery and settlement faults. Required.
	Logger *slog.Logger
}

// ContinuableRequest is a continuable start (seam-spec §1.15): a one-shot
// request without outputSchema, plus the durable label and an optional
// caller-reserved child id. Capability flags are not consulted (R63).
type ContinuableRequest struct {
	Provider     string
	Label        string
	ChildID      string
	Prompt       []model.Block
	Parent       Parent
	AgentOptions *AgentOptions
	MaxDepth     *int
	ToolFilter   *ToolFilter
	Persona      *string
}

// ContinuableStarted identifies an accepted continuable start: the child,
// the task of its first activation and the accepted prompt (R57).
type ContinuableStarted struct {
	ChildID   string
	TaskID    string
	MessageID string
}

// FollowupResult says where accepted followup content went: Route is
// RouteSteered or RouteStarted, TaskID the activation that runs it,
// MessageID the message id the child logs it under.
type FollowupResult struct {
	Route     string
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
// (internal/resident, DESIGN §2): every delivery, residency and settlement
// decision for it (R65) is a command its loop runs, one at a time. The
// loop also watches its agent's turn end (turnEnd), which settles the
// activation; a steer's admission is awaited off the loop and comes back
// as a command. Lifecycle listeners never run in a loop or under a lock: an
// edge a command decided is dispatched by its sender once the command
// returned (child.outbox), so a listener may call the Manager for the same
// child.
type Manager struct {
	svc      *Service
	store    store.Store
	mat      Materializer
	notices  NoticeSink
	delivery string // of the report tool
	log      *slog.Logger
	children *resident.Group[childKey, child, struct{}]

	mu       sync.Mutex
	runs     map[string]*activation // live activations by run id
	draining bool
	wg       sync.WaitGroup // settlements and steer receipts
}

// childKey identifies a child across tenants.
type childKey struct{ tenant, id string }

// child is the in-process state of one child id, owned by its loop in
// Manager.children.
type child struct {
	key childKey
	// sess and desc cache the verified durable header and resume
	// descriptor (the first descriptor of the own suffix never changes).
	sess *store.Session
	desc *Descriptor
	act  *activation
	// waiters are the followup callers waiting for their message's route,
	// by message id.
	waiters map[string]chan<- answer
	// wake: a cold resume is owed once the live activation has settled.
	wake bool
	// slot, when set, releases the live-run slot (Service.reserveLive) held
	// for the cold resume a command is about to start; coldResume hands it
	// to the activation.
	slot func()
	// outbox holds the lifecycle dispatches a command decided, in order;
	// do runs them once the command returned.
	outbox []func()
	// held: this replica holds c's resident lease (hold, unhold).
	held bool
}

// answer is a followup's route, or why its message was not delivered.
type answer struct {
	res FollowupResult
	err error
}

// NewManager returns the continuation manager over svc.
func NewManager(svc *Service, cfg ManagerConfig) *Manager {
	m := &Manager{
		svc:      svc,
		store:    svc.store,
		mat:      cfg.Materializer,
		notices:  cfg.Notices,
		delivery: cfg.ReportDelivery,
		log:      cfg.Logger,
		runs:     map[string]*activation{},
	}
	m.children = resident.NewGroup(resident.Policy[childKey, child, struct{}]{
		New: func(key childKey) *child { return &child{key: key, waiters: map[string]chan<- answer{}} },
		// A loop ends once nothing is live or owed.
		Idle:  func(c *child) bool { return c.act == nil && len(c.waiters) == 0 && !c.wake },
		Watch: m.turnEnd,
	})
	m.handle()
	return m
}

// do runs f in key's loop, then — back in the caller, off the loop — the
// lifecycle dispatches f decided.
func (m *Manager) do(key childKey, f func(c *child)) {
	var out []func()
	m.children.Do(key, func(c *child) {
		f(c)
		m.unhold(c)
		out, c.outbox = c.outbox, nil
	})
	for _, dispatch := range out {
		dispatch()
	}
}

// liveActivation returns the live activation of key, if any.
func (m *Manager) liveActivation(key childKey) *activation {
	var act *activation
	m.children.Peek(key, func(c *child) { act = c.act })
	return act
}

// admitting returns EDraining once the Manager or its Service began to shut
// down (R81, R113).
func (m *Manager) admitting() error {
	m.mu.Lock()
	draining := m.draining
	m.mu.Unlock()
	m.svc.mu.Lock()
	draining = draining || m.svc.draining
	m.svc.mu.Unlock()
	if draining {
		return Errorf(EDraining, "the service is shutting down")
	}
	return nil
}

// StartContinuable creates a continuable child and accepts its prompt
// (seam-spec §2.8). It answers once the prompt is durably accepted into the
// child's inbox and handed to its first activation — before any model
// request (R57).
//
// The checks, in order (R53): admission (EDraining); maxDepth domain
// (EInvalidMaxDepth); the child id — the caller's or a fresh UUID — is not
// live (EDuplicateChild); child depth and cap (EInvalidMaxDepth,
// EDepthExceeded); label, prompt and maxTokens (EInvalidRequest); the
// continuable descriptor snapshot (EInvalidRequest); the provider
// (ENoProvider) and its PrepareContinuable (EUnsupportedCapability, R55);
// ctx (EAborted); then, in the child's loop, live and persisted ids again
// (EDuplicateChild, R62), a free live-run slot of the tenant (ERateLimited,
// Config.MaxLiveRuns; the activation holds it until it settles) and the
// materializer's checks. Capability flags are
// not consulted (R63) and the provider's Start is never called (R54).
//
// ctx is the caller's cancellation until acceptance (R61). A failure before
// acceptance leaves no live agent, no accepted message and no notice
// (R59); when it comes after the activation's start edge, that edge gets
// its end (R60). The durable log is append-only: a failure after the child
// session was written leaves it in the store without a turn.
func (m *Manager) StartContinuable(ctx context.Context, req ContinuableRequest) (ContinuableStarted, error) {
	if err := m.admitting(); err != nil {
		return ContinuableStarted{}, err
	}
	if err := checkMaxDepth(req.MaxDepth); err != nil {
		return ContinuableStarted{}, err
	}
	childID := req.ChildID
	if childID == "" {
		childID = uuid.NewString()
	}
	key := childKey{store.Tenant(ctx), childID}
	if m.liveActivation(key) != nil {
		return ContinuableStarted{}, duplicateChild(childID)
	}
	depth, err := ChildDepth(req.Parent, req.MaxDepth)
	if err != nil {
		return ContinuableStarted{}, err
	}
	opts, err := continuableRoute(req)
	if err != nil {
		return ContinuableStarted{}, err
	}
	desc := Descriptor{Mode: ModeContinuable, Provider: req.Provider, Label: req.Label,
		AgentProvider: opts.Provider, AgentModel: opts.Model, Persona: clonePtr(req.Persona)}
	if f := req.ToolFilter; f != nil {
		desc.ToolFilter = &ToolFilter{Allow: slices.Clone(f.Allow), Deny: slices.Clone(f.Deny)}
	}
	raw, err := SnapshotDescriptor(desc)
	if err != nil {
		return ContinuableStarted{}, err
	}
	p, ok := m.svc.Provider(req.Provider)
	if !ok {
		return ContinuableStarted{}, Errorf(ENoProvider, "no subagent provider named %q", req.Provider)
	}
	cp, ok := p.(ContinuableProvider)
	if !ok {
		return ContinuableStarted{}, Errorf(EUnsupportedCapability, "provider %q does not support continuable children", req.Provider)
	}
	spec, err := cp.PrepareContinuable(ctx, ContinuableCreateRequest{SessionID: childID, Parent: req.Parent})
	if err != nil {
		if ctx.Err() != nil {
			return ContinuableStarted{}, abortedBeforeAcceptance(ctx)
		}
		return ContinuableStarted{}, fmt.Errorf("prepare continuable %s child: %w", req.Provider, err)
	}
	for i, e := range spec.Seed {
		if e.Seq != int64(i) {
			return ContinuableStarted{}, fmt.Errorf("prepare continuable %s child: seed event %d has seq %d, want contiguous from 0", req.Provider, i, e.Seq)
		}
	}
	if ctx.Err() != nil {
		return ContinuableStarted{}, abortedBeforeAcceptance(ctx)
	}

	var res ContinuableStarted
	m.do(key, func(c *child) { res, err = m.startIn(ctx, c, req, desc, raw, spec, depth, opts) })
	return res, err
}

// startIn is StartContinuable from the admission check on, run in the
// child's loop.
func (m *Manager) startIn(ctx context.Context, c *child, req ContinuableRequest, desc Descriptor, raw json.RawMessage,
	spec ContinuableSpec, depth int, opts AgentOptions) (ContinuableStarted, error) {
	key, childID := c.key, c.key.id
	if err := m.admitting(); err != nil {
		return ContinuableStarted{}, err
	}
	if c.act != nil {
		return ContinuableStarted{}, duplicateChild(childID)
	}
	switch _, err := m.store.GetSession(ctx, childID); {
	case err == nil:
		return ContinuableStarted{}, duplicateChild(childID)
	case !errors.Is(err, store.ErrNotFound):
		return ContinuableStarted{}, fmt.Errorf("start continuable child %s: %w", childID, err)
	}
	// The live-run slot is taken before anything is written; the activation
	// holds it from begin on, and rollback or settle gives it back.
	release, err := m.svc.reserveLive(key.tenant, false)
	if err != nil {
		return ContinuableStarted{}, err
	}
	var act *activation
	defer func() {
		if act == nil {
			release()
		}
	}()
	parent := req.Parent.Session
	header := store.Session{
		ID: childID, ParentID: parent.ID, Origin: OriginSubagent, DelegationDepth: depth,
		SeedLength: len(spec.Seed), Cwd: parent.Cwd, Label: req.Label, Provider: req.Provider,
		Mode: ModeContinuable, AgentProvider: opts.Provider, AgentModel: opts.Model,
		MaxTokens: opts.MaxTokens, Persona: clonePtr(req.Persona), CreatedAt: time.Now(),
	}
	// This replica drives the child from here: its lease first.
	if err := m.hold(ctx, c); err != nil {
		return ContinuableStarted{}, duplicateChild(childID)
	}
	// Store writes must not be cut half-way by the caller's cancellation;
	// ctx is checked between the steps instead. The child's writes are
	// fenced by its lease.
	base := m.svc.ctl.Fenced(context.WithoutCancel(ctx))
	inc := &incarnation{}
	ag, err := m.materializer(req.Provider).Materialize(base, MaterializeRequest{Session: header, Descriptor: desc, Options: opts,
		Create: func(ctx context.Context) error { return m.create(ctx, header, spec.Seed, raw) },
		Report: m.reporter(key, inc)})
	if errors.Is(err, store.ErrConflict) {
		return ContinuableStarted{}, duplicateChild(childID)
	}
	if err != nil {
		return ContinuableStarted{}, fmt.Errorf("start continuable child %s: %w", childID, err)
	}
	if ctx.Err() != nil {
		m.closeAgent(base, childID, ag)
		return ContinuableStarted{}, abortedBeforeAcceptance(ctx)
	}
	act, err = m.begin(base, c, ag, header, desc, inc, release)
	if err != nil {
		act = nil
		m.closeAgent(base, childID, ag)
		return ContinuableStarted{}, err
	}
	if ctx.Err() != nil {
		m.rollback(act)
		return ContinuableStarted{}, abortedBeforeAcceptance(ctx)
	}
	row, err := newRow(childID, req.Prompt, agent.Source{Kind: SourceUser})
	if err == nil {
		err = m.store.Enqueue(base, row)
	}
	if err != nil {
		m.rollback(act)
		return ContinuableStarted{}, fmt.Errorf("accept prompt of continuable child %s: %w", childID, err)
	}
	// Accepted: from here the caller's cancellation changes nothing (R61).
	if err := m.open(act, row); err != nil {
		m.ack(base, childID, row.ID) // withdrawn: the caller sees the error (R73)
		m.rollback(act)
		return ContinuableStarted{}, err
	}
	c.sess, c.desc = &header, &desc
	m.activate(c, act)
	return ContinuableStarted{ChildID: childID, TaskID: act.taskID, MessageID: row.ID}, nil
}

// OriginSubagent is the header origin of every child session.
const OriginSubagent = "subagent"

// continuableRoute is the child's route for its first activation: the
// parent's provider, model and maxTokens, overridden field-wise by the
// request's (R45, R56). Returns EInvalidRequest for an empty label or
// prompt, content that is not JSON, or a negative maxTokens.
func continuableRoute(req ContinuableRequest) (AgentOptions, error) {
	switch {
	case req.Label == "":
		return AgentOptions{}, &Error{Code: EInvalidRequest, Message: "a continuable child needs a label",
			Fields: map[string]string{"label": "required"}}
	case len(req.Prompt) == 0:
		return AgentOptions{}, &Error{Code: EInvalidRequest, Message: "a continuable child needs a prompt",
			Fields: map[string]string{"prompt": "required"}}
	}
	if _, err := json.Marshal(req.Prompt); err != nil {
		return AgentOptions{}, &Error{Code: EInvalidRequest, Message: "prompt content is not valid JSON",
			Fields: map[string]string{"prompt": "not valid JSON"}, Err: err}
	}
	return ChildOptions(req.Parent.Options, req.AgentOptions)
}

// create writes a continuable child's header and creation log (seam-spec
// §3.4): the seed verbatim, session/end-seed after it, the descriptor,
// session/end-seed, and the delegation approval pin (R49) — all before the
// first turn, so the descriptor is in the own suffix (seq >= seedLength)
// and never reaches the model.
func (m *Manager) create(ctx context.Context, header store.Session, seed []store.Event, descriptor json.RawMessage) error {
	if err := m.store.CreateSession(ctx, header); err != nil {
		return fmt.Errorf("create child session: %w", err)
	}
	endSeed := store.NewEvent{Type: agent.EventEndSeed, Data: json.RawMessage(`{}`)}
	var evs []store.NewEvent
	for _, e := range seed {
		evs = append(evs, store.NewEvent{Type: e.Type, Time: e.Time, Data: e.Data})
	}
	if n := len(seed); n > 0 && seed[n-1].Type != agent.EventEndSeed {
		evs = append(evs, endSeed)
	}
	evs = append(evs,
		store.NewEvent{Type: EventDescriptor, Data: descriptor},
		endSeed,
		store.NewEvent{Type: agent.EventApprovalPolicy, Data: json.RawMessage(`{"policy":"never","source":"delegation"}`)})
	if _, err := m.store.AppendEvents(ctx, header.ID, evs...); err != nil {
		return fmt.Errorf("write child creation log: %w", err)
	}
	return nil
}

// Followup delivers content to continuable child childID on behalf of its
// durable direct parent (seam-spec §2.11, DESIGN §1). The message is stored
// in the durable inbox before anything else happens, then: a running child
// gets it steered into its open turn and the call answers RouteSteered once
// a model step admitted it; otherwise — the child is not live, its turn is
// ending, or it was interrupted — the call answers RouteStarted once a new
// activation that cold-resumed the child took it, behind every message
// accepted before it (R90, R103). Cold resume rebuilds the agent from the
// descriptor alone and never re-appends descriptor or policy (R86–R88).
//
// Returns, before anything is stored or appended: EDraining;
// EInvalidRequest for an empty parent id, or content that is empty or not
// JSON;
// ESessionNotFound for an unknown child; EUnauthorized when parentSessionID
// is not the child's durable parent (src grants nothing, R84); ENotResumable
// for a one-shot child or one without a supported continuable descriptor in
// its own suffix (R87); EAborted when ctx is already done (R91);
// ERateLimited when the child has no live activation and the tenant no
// free live-run slot (Config.MaxLiveRuns) for the one it would start. After
// acceptance: a cold resume that fails returns
// its error (a *Error unchanged, anything else as ENotResumable, R89) and
// the message is withdrawn, so an error always means not delivered — except
// EAborted: when ctx ends, or the manager shuts down, while the message
// waits for its route (a message parked by an interrupt waits for the next
// followup), the message stays accepted and will still be delivered (R91).
//
// A child another replica drives gets the followup there (see Control),
// and this call answers what that replica answered.
func (m *Manager) Followup(ctx context.Context, parentSessionID, childID string, content []model.Block, src agent.Source) (FollowupResult, error) {
	if err := m.admitting(); err != nil {
		return FollowupResult{}, err
	}
	if parentSessionID == "" {
		return FollowupResult{}, &Error{Code: EInvalidRequest, Message: "parentSessionId is required",
			Fields: map[string]string{"parentSessionId": "required"}}
	}
	if src.Kind == "" {
		src.Kind = SourceUser
	}
	if len(content) == 0 {
		return FollowupResult{}, &Error{Code: EInvalidRequest, Message: "content is required",
			Fields: map[string]string{"content": "required"}}
	}
	row, err := newRow(childID, content, src)
	if err != nil {
		return FollowupResult{}, &Error{Code: EInvalidRequest, Message: "content is not valid JSON",
			Fields: map[string]string{"content": "not valid JSON"}, Err: err}
	}
	if ctx.Err() != nil {
		return FollowupResult{}, followupAborted(ctx)
	}
	return m.followupRow(ctx, parentSessionID, row)
}

// followup is Followup of row on this replica, which drives the child or
// is about to. A row stored already (a request retried after the replica
// it was sent to was lost) is taken as accepted.
func (m *Manager) followup(ctx context.Context, parentSessionID string, row store.InboxMessage) (FollowupResult, error) {
	childID := row.ChildID
	key := childKey{store.Tenant(ctx), childID}
	w := make(chan answer, 1)
	var err error
	m.do(key, func(c *child) {
		// Admission again in the child's loop: a Shutdown that began since
		// must not find a new activation it never cancels (R113, R117).
		if err = m.admitting(); err != nil {
			return
		}
		if err = m.resumable(ctx, c, parentSessionID); err != nil {
			return
		}
		if ctx.Err() != nil {
			err = followupAborted(ctx)
			return
		}
		// A followup that will start an activation needs a live-run slot,
		// before anything is written; one for a live activation does not.
		if c.act == nil {
			if c.slot, err = m.svc.reserveLive(key.tenant, false); err != nil {
				return
			}
		}
		defer m.releaseSlot(c)
		if err = m.store.Enqueue(ctx, row); err != nil && !errors.Is(err, store.ErrConflict) {
			err = fmt.Errorf("accept followup for %s: %w", childID, err)
			return
		}
		err = nil
		c.waiters[row.ID] = w
		// A cold resume that finds the child held by another replica
		// withdraws the row and answers ErrHeldElsewhere: Route sends the
		// followup there.
		m.route(context.WithoutCancel(ctx), c, row, true)
	})
	if err != nil {
		return FollowupResult{}, err
	}

	select {
	case a := <-w:
		return a.res, a.err
	case <-ctx.Done():
	}
	m.do(key, func(c *child) { delete(c.waiters, row.ID) })
	select {
	case a := <-w: // answered before we unregistered
		return a.res, a.err
	default:
		return FollowupResult{}, &Error{Code: EAborted, Err: context.Cause(ctx),
			Message: "stopped waiting for the followup's delivery; the message was accepted and will still be delivered"}
	}
}

// resumable checks, for a followup, that c exists, belongs to parentID and
// can be resumed, caching what it read. It runs in c's loop. Returns
// ESessionNotFound, EUnauthorized or ENotResumable.
func (m *Manager) resumable(ctx context.Context, c *child, parentID string) error {
	sess, err := m.header(ctx, c)
	if err != nil {
		return err
	}
	if sess.ParentID != parentID {
		return Errorf(EUnauthorized, "subagent %q belongs to another parent session", c.key.id)
	}
	if c.desc != nil {
		return nil
	}
	notResumable := func(err error) error {
		return &Error{Code: ENotResumable, Err: err, Message: fmt.Sprintf(
			"subagent %q has no supported continuation state; do not retry sending it messages", c.key.id)}
	}
	if sess.Mode == ModeOneShot {
		return notResumable(nil)
	}
	d, found, err := ResumeDescriptor(ctx, m.store, sess)
	if err != nil {
		return notResumable(err)
	}
	if !found || d.Mode != ModeContinuable {
		return notResumable(nil)
	}
	c.desc = &d
	return nil
}

// header returns c's durable header, cached. It runs in c's loop. Returns
// ESessionNotFound.
func (m *Manager) header(ctx context.Context, c *child) (store.Session, error) {
	if c.sess != nil {
		return *c.sess, nil
	}
	sess, err := m.store.GetSession(ctx, c.key.id)
	if errors.Is(err, store.ErrNotFound) {
		return store.Session{}, Errorf(ESessionNotFound, "subagent %q not found", c.key.id)
	}
	if err != nil {
		return store.Session{}, fmt.Errorf("read subagent %s: %w", c.key.id, err)
	}
	c.sess = &sess
	return sess, nil
}

// Interrupt stops the current turn of continuable child childID on behalf
// of a human presenting its durable parent's address (seam-spec §2.13,
// user authority). The turn ends aborted with cause user (R101) and returns
// before it has unwound. Messages accepted but not yet admitted stay parked
// in the durable inbox and run first, in order, when the next followup
// starts the child again (R102–R103); their followup calls answer then.
// Unlike the reference, the interrupted activation then settles (it emits
// its subagent/end and notice) instead of staying resident: residency is
// not observable through the API, and the parked messages are durable.
// Nothing cascades to the child's own children.
//
// A child that is not live, a one-shot child, or an activation already
// settling is an accepted no-op (R98, R104). Returns ESessionNotFound for
// an unknown child and EUnauthorized when parentSessionID is not its
// durable parent — checked for live and settled children alike. A child
// another replica drives is interrupted there (see Control).
func (m *Manager) Interrupt(ctx context.Context, parentSessionID, childID string) error {
	_, err := Route(ctx, m.svc.ctl, childID, opInterrupt, parentSessionID, func() (struct{}, error) {
		var err error
		m.do(childKey{store.Tenant(ctx), childID}, func(c *child) { err = m.interrupt(ctx, c, parentSessionID) })
		return struct{}{}, err
	})
	return err
}

// interrupt is Interrupt in c's loop.
func (m *Manager) interrupt(ctx context.Context, c *child, parentSessionID string) error {
	childID := c.key.id
	sess, err := m.header(ctx, c)
	if err != nil {
		return err
	}
	if sess.ParentID != parentSessionID {
		return Errorf(EUnauthorized, "subagent %q belongs to another parent session", childID)
	}
	act := c.act
	if act == nil {
		return nil // not running: a no-op (R98)
	}
	if act.closing || act.interrupted {
		return nil
	}
	act.interrupted = true
	act.agent.Cancel(agent.CauseUser, true)
	return nil
}

// Recover cold-resumes, at start-up, every child that has undelivered
// messages in the durable inbox — accepted before the previous process
// stopped — and delivers them in acceptance order; a message the child had
// already logged is acknowledged, not delivered twice. Root sessions are
// left to Roots. Failures are logged per child and returned joined; the
// other children are still recovered.
func (m *Manager) Recover(ctx context.Context) error {
	return RecoverInboxes(ctx, m.store, m.log, func(ctx context.Context, sess store.Session) error {
		if sess.ParentID == "" {
			return nil // a root session
		}
		return m.recoverChild(ctx, sess.ID)
	})
}

// recoverChild cold-resumes one child with pending messages unless it is
// already live.
func (m *Manager) recoverChild(ctx context.Context, childID string) error {
	var err error
	m.do(childKey{store.Tenant(ctx), childID}, func(c *child) {
		if c.act != nil {
			return
		}
		var sess store.Session
		if sess, err = m.header(ctx, c); err != nil {
			return
		}
		if err = m.resumable(ctx, c, sess.ParentID); err != nil {
			return
		}
		err = m.resume(ctx, c)
	})
	return err
}

// Shutdown stops admission (EDraining for every later start, followup and
// report), cancels the turn of every live activation keeping its inbox, and
// waits until each has settled (subagent/end emitted); their notices no
// longer wake parents (R118). Messages not yet admitted stay in the durable
// inbox for Recover after the restart, and followup calls still waiting for
// them return EAborted; durable sessions are untouched. Returns ctx's error
// when it ends first.
func (m *Manager) Shutdown(ctx context.Context) error {
	m.mu.Lock()
	m.draining = true
	m.mu.Unlock()
	var acts []*activation
	m.children.Each(func(c *child) {
		if act := c.act; act != nil {
			act.agent.Cancel(agent.CauseDisposed, true)
			acts = append(acts, act)
		}
	})
	for _, act := range acts {
		select {
		case <-act.done:
		case <-ctx.Done():
			return fmt.Errorf("shutdown: waiting for activations to settle: %w", ctx.Err())
		}
	}
	// Followups still waiting for a route (parked, or owed to an activation
	// that will not start now) are released; their messages stay accepted.
	m.children.Each(func(c *child) {
		for id, w := range c.waiters {
			w <- answer{err: &Error{Code: EAborted,
				Message: "the service is shutting down; the followup was accepted and will be delivered when the child next runs"}}
			delete(c.waiters, id)
		}
	})
	done := make(chan struct{})
	go func() { m.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("shutdown: waiting for deliveries: %w", ctx.Err())
	}
}

func (m *Manager) isDraining() bool { return m.admitting() != nil }

// closeAgent closes an agent that never became an activation.
func (m *Manager) closeAgent(ctx context.Context, childID string, ag ChildAgent) {
	if err := ag.Close(ctx); err != nil {
		m.log.ErrorContext(ctx, "close unpublished child agent", slog.String("child_id", childID), slog.Any("error", err))
	}
}

func duplicateChild(id string) error {
	return Errorf(EDuplicateChild, "subagent %q already exists", id)
}

func followupAborted(ctx context.Context) error {
	return &Error{Code: EAborted, Message: "the followup was aborted before it was accepted", Err: context.Cause(ctx)}
}

func abortedBeforeAcceptance(ctx context.Context) error {
	return &Error{Code: EAborted, Message: "subagent request was aborted before its prompt was accepted", Err: context.Cause(ctx)}
}
