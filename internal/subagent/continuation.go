package subagent

import (
	"context"

	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
)

// Continuable children (docs/seam.md §11–§20, §22).
//
// A continuable child is a durable child session whose log carries a
// continuable descriptor before its first turn. The Manager drives it in
// residencies called activations: each is one live agent, one run row
// of kind activation with a fresh task id, and one subagent/start …
// subagent/end pair. Two deliberate choices shape it (docs/seam.md §22):
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

// Route says where an accepted followup went: RouteSteered, RouteStarted,
// RouteParked or RouteQueued (R83, R94, R96, docs/seam.md §22).
type Route string

// The four followup routes.
const (
	// RouteSteered: the content was admitted into the running turn's next
	// model step.
	RouteSteered Route = "steered"
	// RouteStarted: the content runs as its own turn of a new activation
	// that cold-resumed the child, behind the messages accepted before it.
	RouteStarted Route = "started"
	// RouteParked: the content was accepted while an interrupt stopped the
	// child's turn; it waits, durably, and runs first when the next
	// followup starts the child (R102–R103). No task runs it yet. So does
	// content sent while the child's tree is paused, until its budget is
	// raised.
	RouteParked Route = "parked"
	// RouteQueued: the child's running turn takes no content (a Queuer,
	// such as an ACP agent); the content runs as the next turn of the same
	// activation once that turn ends.
	RouteQueued Route = "queued"
)

// Child activity in listings and ChildInfo (docs/seam.md §19).
const (
	ActivityRunning  = "running"
	ActivityInactive = "inactive"
)

// Message source kinds (docs/seam.md §1): the manager writes the first
// three; SourceCoordinator marks a model-issued send_message relayed by
// the delegation tools.
const (
	SourceUser            = "user"
	SourceSubagentSettled = "subagent-settled"
	SourceSubagentReport  = "subagent-report"
	SourceCoordinator     = "coordinator"
)

// Report deliveries (docs/seam.md §17, R108).
const (
	// DeliveryNextStep wakes the parent: the report joins its running
	// turn at the next model step, or starts a turn. The default.
	DeliveryNextStep = "next-step"
	// DeliveryQuiet stores the report for the parent's next turn without
	// waking it.
	DeliveryQuiet = "quiet"
)

// ContinuableCreateRequest is what a ContinuableProvider prepares a child
// from (docs/seam.md §11): the child id the manager reserved and the parent.
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
// (docs/seam.md §11, R54–R55). Its one-shot Start is never called for them;
// the Manager owns the child's agent, built by its Materializer.
type ContinuableProvider interface {
	Provider
	// PrepareContinuable returns the creation data of the child req
	// reserves. It must not create anything. ctx is the request's
	// cancellation.
	PrepareContinuable(ctx context.Context, req ContinuableCreateRequest) (ContinuableSpec, error)
}

// ChildAgent is the live agent of an activation, as the Manager drives it.
// *agent.Agent (internal/agent) implements it; see its methods for the
// contract.
type ChildAgent interface {
	// FollowupMessage inserts msg, whose id the manager issued (the durable
	// inbox row id), as the next turn; on an idle agent it opens that turn
	// (logging msg as user/message) before returning.
	FollowupMessage(ctx context.Context, msg sessionlog.UserMessage) (string, error)
	// SubmitSteer inserts msg into the running turn's next-step inbox and
	// returns at once, or fails matching ErrSteerRejected; the
	// channel then receives nil once a step admitted msg, else the
	// rejection.
	SubmitSteer(ctx context.Context, msg sessionlog.UserMessage) (<-chan error, error)
	// Steer is confirmed steering (R96): it returns the message id once a
	// model step of the running turn admitted content, an error matching
	// ErrSteerRejected when it was not, or ctx's error (the content
	// withdrawn).
	Steer(ctx context.Context, content []model.Block, src sessionlog.Source) (string, error)
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
	// Track starts the outcome fold of the events the agent appends from
	// now on: the activation's own (R69).
	Track()
	// Outcome returns the outcome of the events appended since Track.
	Outcome() sessionlog.Outcome
	// Close cancels with cause disposed, discards the inbox and waits for
	// the agent to stop.
	Close(ctx context.Context) error
}

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
	// the descriptor's agentProvider and agentModel, never a budget (docs/seam.md §10).
	Options AgentOptions
	// Create is set on creation only. The materializer calls it after every
	// check of its own passed and before it builds the agent; it writes the
	// child's header and creation log. Resume writes nothing (R88).
	// PrepareChild gets Log instead.
	Create func(ctx context.Context) error
	// Log, for PrepareChild only, is the child's creation log as it will
	// be stored with its header: the seed, the continuable descriptor and
	// the delegation pin.
	Log []store.NewEvent
	// Report sends content to the child's durable parent as this
	// activation (ReportFrom with the manager's delivery policy) and
	// returns the message id; the materializer offers it to the child's
	// model as the report tool (docs/seam.md §17). It answers EForbidden
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

// ChildPreparer is a Materializer that can build a new child's agent
// before anything of the child is stored, so that the child's header and
// creation log, the opening of its first turn, and its first activation's
// run row and subagent/start are one commit (store.StartRunWithSession),
// as a one-shot run's start is. The in-process materializer is one; an
// external agent's is not (its process starts before the child is
// created).
type ChildPreparer interface {
	Materializer
	// PrepareChild checks req as Materialize does, builds the agent over
	// req.Session and req.Log without reading or writing the store, and
	// prepares prompt, whose id the manager issued, as its first turn.
	PrepareChild(ctx context.Context, req MaterializeRequest, prompt sessionlog.UserMessage) (PreparedChildAgent, error)
}

// PreparedChildAgent is a new child's agent that writes nothing until
// Launch.
type PreparedChildAgent struct {
	Agent ChildAgent
	// Opening is what follows the creation log: the events that insert
	// the prompt, open its turn and enter its first step.
	Opening []store.NewEvent
	// Launch runs the first turn over log, the child's whole log as
	// stored (the creation log, then Opening).
	Launch func(log []store.Event)
}

// Queuer marks a ChildAgent whose running turn takes no steering (ACP has
// no mid-turn injection): a followup to it is queued as its next turn with
// FollowupMessage and answered RouteQueued at once.
type Queuer interface {
	ChildAgent
	QueuesFollowups()
}
