package subagent

import (
	"context"
	"encoding/json"

	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/store"
)

// Stop reasons known to the service (docs/seam.md §6). The set is open: any
// other value is a failure (R32); use IsSuccess rather than comparing.
const (
	StopCompleted = "completed"
	StopAborted   = "aborted"
	StopError     = "error"
	StopMaxTokens = "max-tokens"
	StopRefusal   = "refusal"
	// StopBudgetExhausted: the tree spent its tokenBudget; the turn
	// stopped at its next step.
	StopBudgetExhausted = "budget_exhausted"
	// StopDeadlineExceeded: the tree's deadline passed.
	StopDeadlineExceeded = "deadline_exceeded"
)

// IsSuccess reports whether reason means the work finished. Only "completed"
// does; unknown reasons count as failures (R32).
func IsSuccess(reason string) bool { return reason == StopCompleted }

// Capabilities are what a provider supports, as /v1/providers shows it.
// The start-time features — OutputSchema, DepthLimit, ToolFilter, Persona
// — are the ones it enforces on the one-shot path (docs/seam.md §3),
// checked in that order. The runtime features (docs/seam.md §22) say how its
// children run: Steer, its runs accept confirmed steering (their Run is a
// Steerer); Resume, it creates continuable children that cold-resume (it
// is a ContinuableProvider, which Register checks); Local, its children
// are in-process agents with a local log.
type Capabilities struct {
	OutputSchema bool
	DepthLimit   bool
	ToolFilter   bool
	Persona      bool

	Steer  bool
	Resume bool
	Local  bool
}

// AgentOptions selects the child's model route (docs/seam.md §3, R45). Zero
// fields are absent. SubagentDepth is set by the service, never the caller.
type AgentOptions struct {
	Provider      string
	Model         string
	MaxTokens     int
	SubagentDepth *int
}

// Parent is the delegating agent as providers see it: its durable header and
// its live route options.
type Parent struct {
	Session store.Session
	Options AgentOptions
}

// Request is a one-shot start request (docs/seam.md §3). Optional fields are
// nil when absent.
type Request struct {
	Label        string
	Prompt       []model.Block
	Parent       Parent
	AgentOptions *AgentOptions
	OutputSchema json.RawMessage
	MaxDepth     *int
	ToolFilter   *ToolFilter
	Persona      *string
	// Limits narrows the tree's limits for the child and its subtree; a
	// wider value is clamped (internal/governance), never refused.
	Limits *Limits
}

// ResolvedRequest is what a provider's Start receives: the caller's request
// plus the one-shot descriptor snapshot (R10) and the child depth computed by
// the service (R33–R35).
type ResolvedRequest struct {
	Request
	Descriptor Descriptor
	ChildDepth int
	// Limits is the child's narrowing as its header stores it.
	Limits store.Limits
}

// Result is how a child ended (docs/seam.md §5). Output is never nil for a
// settled result ([] when there is none).
type Result struct {
	Output     []model.Block
	Structured json.RawMessage
	StopReason string
	Diagnostic string
	// Usage is the model usage of the child's work in this run, which the
	// run row records; UsageKnown is false when its provider reported none.
	Usage      store.Usage
	UsageKnown bool
}

// Run is a provider's published one-shot child. Providers return it from
// Start only once the child is ready (R12).
type Run interface {
	// ChildID is the child session id for local runs, else a fresh UUID.
	ChildID() string
	// Local reports whether the child is an in-process agent.
	Local() bool
	// Done is closed once the result has settled.
	Done() <-chan struct{}
	// Result returns the settled result; call it after Done is closed. An
	// error means an infrastructure fault that no stop reason represents.
	Result() (Result, error)
	// Cancel aborts remaining work; the result settles "aborted" unless the
	// child had already completed (R23, R25, R26). Idempotent.
	Cancel()
	// Dispose cancels, then waits until the result settled and every
	// resource is released (R28–R30). Idempotent; returns only release errors.
	Dispose(ctx context.Context) error
}

// Steerer is implemented by runs that accept confirmed steering: Steer
// returns the message id only after a model step admitted the content, and an
// *Error with ESteerRejected when the child is not running, was cancelled or
// disposed, already committed structured output, or settled first.
type Steerer interface {
	Steer(ctx context.Context, content []model.Block) (messageID string, err error)
}

// Provider is a named child transport (docs/seam.md §2).
type Provider interface {
	Name() string
	Description() string
	Capabilities() Capabilities
	// InheritsParentContext is descriptive: does the child see the parent's
	// completed turns? It drives model-facing wording only.
	InheritsParentContext() bool
	// Start creates and publishes a child. ctx is the request's cancellation
	// until publication: cancelled before or during setup, Start rolls back
	// and returns an error, publishing nothing (R11, R21, R22). After Start
	// returns, cancellation goes through Run.Cancel.
	Start(ctx context.Context, req ResolvedRequest) (Run, error)
}

// Prober is a Provider whose capabilities are learnt by starting its agent
// (acp.Provider); until then Capabilities reports the unknown ones as
// false. WaitProbe returns nil once they are known, the reason they cannot
// be learnt (its agent does not start), or ctx's error while they are still
// being learnt. Whoever reports or acts on a capability waits for it first,
// so that an unknown capability is never taken for "no".
type Prober interface {
	Provider
	WaitProbe(ctx context.Context) error
}

// Preparer is a Provider whose children the service stores itself, in
// the run's first commit: Prepare composes the child of req and writes
// nothing, and the service stores the child's session and the start of its
// log (setup events and the accepted prompt) with the run row and
// subagent/start in one write (store.StartRunWithSession) before the child
// runs. Start is what a caller without the service uses. ctx is the
// request's cancellation, as for Start; Prepare returns Start's errors.
type Preparer interface {
	Provider
	Prepare(ctx context.Context, req ResolvedRequest) (PreparedChild, error)
}

// PreparedChild is a child Prepare composed and nothing has stored yet.
type PreparedChild interface {
	// Session returns the child's header and the start of its log, to be
	// stored with its run.
	Session() (store.Session, []store.NewEvent)
	// Run is the child's run, which works once launched. Cancelled before
	// Launch, it settles aborted once launched; disposed before Launch,
	// the child is abandoned (its result settles at once) and Launch does
	// nothing.
	Run() Run
	// Launch starts the child over its log as stored. settle, if not nil,
	// is how the run stores the last events of the child's log together
	// with its settlement.
	Launch(log []store.Event, settle Settle)
}

// Settle settles a launched run with res and stores evs, the child's last
// log events, with its settlement and subagent/end in one write
// (store.EndRunWithEvents); it returns them as stored. The run's Result
// must then be res. On an error nothing was stored and the run settles as
// any other (its end recorded once its Result is known); an error
// matching store.ErrConflict means that the run was ended elsewhere.
type Settle func(ctx context.Context, res Result, evs []store.NewEvent) ([]store.Event, error)

// Lifecycle event types.
const (
	EventStart           = "subagent/start"
	EventEnd             = "subagent/end"
	EventProviderAdded   = "subagent/provider-added"
	EventProviderRemoved = "subagent/provider-removed"
)

// Event is a lifecycle event (docs/seam.md §4). Start and end of one run
// share RunID, Provider, ID and Local.
type Event struct {
	// Seq is the global lifecycle id assigned by the store; 0 before storage.
	Seq      int64
	Type     string
	RunID    string
	Provider string
	// ID is the child id.
	ID       string
	Local    bool
	ParentID string
	// RootID is the root session of the parent's tree (rootSessionId).
	RootID string
	TaskID string
	// StopReason and LastAssistantMessage are set on subagent/end only;
	// LastAssistantMessage is nil when the output was empty.
	StopReason           string
	LastAssistantMessage []model.Block
}
