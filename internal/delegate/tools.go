package delegate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"github.com/subagentd/subagentd/internal/agent"
	"github.com/subagentd/subagentd/internal/children"
	"github.com/subagentd/subagentd/internal/governance"
	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// DefaultMaxDepth caps model-driven delegation chains (docs/seam.md §23:
// maxDepth 3 by default): a root's children are depth 1, and depth 4 is
// refused with "subagent depth 4 exceeds maxDepth 3".
const DefaultMaxDepth = 3

// SpawnTool is the tool name of the spawn provider; every other provider p
// gets "subagent_<p>" (ToolName).
const SpawnTool = "subagent"

// spawnProvider is the provider whose tool is SpawnTool.
const spawnProvider = "spawn"

// Seam is the part of *subagent.Service the delegation tools drive.
type Seam interface {
	// Provider returns the provider registered as name.
	Provider(name string) (subagent.Provider, bool)
	// Providers returns the registered providers in registration order.
	Providers() []subagent.Provider
	// Subscribe adds a lifecycle listener; "" receives every event,
	// provider-added/-removed included.
	Subscribe(parentID string, l subagent.Listener) (unsubscribe func())
	// Start starts a one-shot run; its errors are *subagent.Error values
	// whose messages are safe to show.
	Start(ctx context.Context, provider string, req subagent.Request) (*subagent.RunHandle, error)
}

var _ Seam = (*subagent.Service)(nil)

// Continuations is the part of *children.Manager the tools drive: background
// delegation and the control tools of docs/seam.md §23.
type Continuations interface {
	// StartContinuable creates a continuable child and accepts its prompt.
	StartContinuable(ctx context.Context, req children.ContinuableRequest) (children.ContinuableStarted, error)
	// Followup delivers content to a continuable child of parentSessionID.
	Followup(ctx context.Context, parentSessionID, childID string, content []model.Block, src sessionlog.Source) (children.FollowupResult, error)
	// Interrupt stops the current turn of a continuable child of
	// parentSessionID.
	Interrupt(ctx context.Context, parentSessionID, childID string) error
	// Children lists the direct subagent children of parentID.
	Children(ctx context.Context, parentID string) ([]children.ListEntry, error)
	// Descendants lists every subagent below rootID in pre-order.
	Descendants(ctx context.Context, rootID string) ([]children.ListEntry, error)
}

var _ Continuations = (*children.Manager)(nil)

// ToolsConfig configures Tools.
type ToolsConfig struct {
	// Seam starts the children. Required.
	Seam Seam
	// Continuations runs background children and the control tools; nil
	// means foreground delegation only, without send_message,
	// interrupt_agent and list_agents.
	Continuations Continuations
	// Store reads the calling agent's session header. Required.
	Store store.Store
	// Registry is the deployment-global tool registry the tools go into,
	// the one root agents and in-process children read. Required.
	Registry *agent.Registry
	// MaxDepth caps the depth of children the tools start; nil means
	// DefaultMaxDepth. It is sent only to providers with the depthLimit
	// capability; the others manage depth themselves (docs/seam.md §23).
	MaxDepth *int
	// Logger receives tool (un)mounting and internal failures. Required.
	Logger *slog.Logger
	// Approvals answers each delegation by the policy of the caller's
	// tree (kind delegate) and asks a person where it says ask; nil
	// delegates without asking.
	Approvals governance.Approver
}

// Tools keeps the model-facing tools of docs/seam.md §23 in the global
// registry: one delegation tool per registered provider, mirroring
// provider-added and provider-removed (R8), and, with Continuations, the
// control tools send_message, interrupt_agent and list_agents.
//
// One tool per provider, rather than one tool with a provider parameter,
// because docs/seam.md §23 binds each tool instance to one provider and never
// has a provider parameter: each tool's wording is derived from its own
// provider (a fork child sees the conversation, a spawn child does not), and
// a model picks between differently described tools more reliably than
// between enum values of one parameter. The spawn provider's tool is named
// "subagent", every other provider p's "subagent_<p>".
type Tools struct {
	seam     Seam
	conts    Continuations
	store    store.Store
	registry *agent.Registry
	maxDepth int
	log      *slog.Logger
	// approvals is ToolsConfig.Approvals.
	approvals governance.Approver

	mu      sync.Mutex
	started bool
	stopped bool
	unsub   func()
	mounted map[string]string // provider name → tool name
	control []string          // registered control tool names

	// probes are the goroutines that describe a tool again once its
	// provider's capabilities are known (redescribe); Stop ends their
	// waits (endProbes) and waits for them.
	probes    sync.WaitGroup
	endProbes context.CancelFunc
	probeCtx  context.Context
}

// NewTools returns Tools for cfg; Start mounts them.
func NewTools(cfg ToolsConfig) *Tools {
	depth := DefaultMaxDepth
	if cfg.MaxDepth != nil {
		depth = *cfg.MaxDepth
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Tools{seam: cfg.Seam, conts: cfg.Continuations, store: cfg.Store, registry: cfg.Registry, maxDepth: depth,
		log: cfg.Logger, approvals: cfg.Approvals, mounted: map[string]string{}, probeCtx: ctx, endProbes: cancel}
}

// ToolName is the delegation tool name of the provider named provider.
func ToolName(provider string) string {
	if provider == spawnProvider {
		return SpawnTool
	}
	return SpawnTool + "_" + provider
}

// Start registers the control tools (with Continuations), subscribes to
// provider events and mounts a delegation tool for every provider registered
// now; later registrations and removals are mirrored (R8). Returns an error
// if a tool cannot be registered (its name is taken) or if Tools were
// already started; what was registered is removed again.
func (t *Tools) Start(ctx context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.started {
		return errors.New("delegation tools: already started")
	}
	t.started = true
	if t.conts != nil {
		for _, tool := range t.controlTools() {
			if err := t.registry.Register(tool); err != nil {
				t.stopLocked()
				return fmt.Errorf("control tool %s: %w", tool.Name, err)
			}
			t.control = append(t.control, tool.Name)
		}
	}
	// Subscribe before listing, so that no registration falls between the
	// two; mounting is idempotent, so one seen twice is harmless.
	t.unsub = t.seam.Subscribe("", t.onEvent)
	for _, p := range t.seam.Providers() {
		if err := t.mountLocked(p); err != nil {
			t.stopLocked()
			return err
		}
	}
	return nil
}

// Stop unsubscribes and removes every mounted tool. Idempotent.
func (t *Tools) Stop() {
	t.mu.Lock()
	t.stopLocked()
	t.mu.Unlock()
	t.probes.Wait()
}

func (t *Tools) stopLocked() {
	if t.stopped {
		return
	}
	t.stopped = true
	t.endProbes()
	if t.unsub != nil {
		t.unsub()
	}
	for p, name := range t.mounted {
		t.registry.Unregister(name)
		delete(t.mounted, p)
	}
	for _, name := range t.control {
		t.registry.Unregister(name)
	}
	t.control = nil
}

// onEvent mirrors provider registrations. An error on provider-added rolls
// the provider's registration back (R3): a provider whose tool cannot exist
// does not exist either.
func (t *Tools) onEvent(ctx context.Context, e subagent.Event) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return nil
	}
	switch e.Type {
	case subagent.EventProviderAdded:
		p, ok := t.seam.Provider(e.Provider)
		if !ok {
			return nil // already removed again
		}
		return t.mountLocked(p)
	case subagent.EventProviderRemoved:
		if name, ok := t.mounted[e.Provider]; ok {
			t.registry.Unregister(name)
			delete(t.mounted, e.Provider)
			t.log.InfoContext(ctx, "delegation tool removed", slog.String("tool", name), slog.String("provider", e.Provider))
		}
	}
	return nil
}

// mountLocked (re-)registers p's tool with wording derived from p now,
// and, while p still learns its capabilities, describes it again once it
// knows them (redescribe).
func (t *Tools) mountLocked(p subagent.Provider) error {
	tool := t.tool(p)
	if _, ok := t.mounted[p.Name()]; ok {
		t.registry.Unregister(tool.Name)
	}
	if err := t.registry.Register(tool); err != nil {
		delete(t.mounted, p.Name())
		return fmt.Errorf("delegation tool for provider %q: %w", p.Name(), err)
	}
	t.mounted[p.Name()] = tool.Name
	t.log.Info("delegation tool mounted", slog.String("tool", tool.Name), slog.String("provider", p.Name()))
	if pr, ok := p.(subagent.Prober); ok && probing(pr) {
		t.probes.Go(func() { t.redescribe(pr) })
	}
	return nil
}

// probing reports whether p is still learning its capabilities.
func probing(p subagent.Prober) bool {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return errors.Is(p.WaitProbe(ctx), context.Canceled)
}

// redescribe waits until p's capabilities are known, or cannot be, and
// mounts the tool of the provider then registered under p's name again,
// so that its description offers what p turned out to support. Stop ends
// the wait.
func (t *Tools) redescribe(p subagent.Prober) {
	if err := p.WaitProbe(t.probeCtx); err != nil && t.probeCtx.Err() != nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return
	}
	if _, ok := t.mounted[p.Name()]; !ok {
		return
	}
	cur, ok := t.seam.Provider(p.Name())
	if !ok {
		return
	}
	if err := t.mountLocked(cur); err != nil {
		t.log.Error("describe a delegation tool again", slog.String("provider", p.Name()), slog.Any("error", err))
	}
}

// delegateArgs are the delegation tool's arguments.
type delegateArgs struct {
	Description     string `json:"description"`
	Prompt          string `json:"prompt"`
	RunInBackground *bool  `json:"run_in_background"`
}

// delegation is how one mounted tool delegates: its name and its
// provider.
type delegation struct {
	tool string
	p    subagent.Provider
}

// background reports whether a tool of a provider with caps runs children
// in the background: when a continuation manager is configured and the
// provider can create continuable children.
func (t *Tools) background(caps subagent.Capabilities) bool {
	return caps.Resume && t.conts != nil
}

// tool builds the delegation tool of p, described with the capabilities p
// knows now. It runs children in the background by default when they
// allow it (background); otherwise it always waits for the result.
func (t *Tools) tool(p subagent.Provider) agent.Tool {
	d := delegation{tool: ToolName(p.Name()), p: p}
	background := t.background(p.Capabilities())
	description, promptParam := toolDescription(p, background)
	props := map[string]any{
		"description": map[string]any{"type": "string", "description": descriptionParam},
		"prompt":      map[string]any{"type": "string", "description": promptParam},
	}
	if background {
		props["run_in_background"] = map[string]any{"type": "boolean", "description": backgroundParam}
	}
	schema := mustJSON(map[string]any{"type": "object", "properties": props,
		"required": []string{"description", "prompt"}, "additionalProperties": false})
	return agent.Tool{
		Name:        d.tool,
		Description: description,
		Parameters:  schema,
		Concurrent:  true, // sibling delegations run side by side (docs/seam.md §23)
		Run: func(ctx context.Context, call agent.Call) ([]model.Block, error) {
			return t.delegate(ctx, d, call)
		},
	}
}

// mustJSON marshals a static schema.
func mustJSON(v any) json.RawMessage {
	raw, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("delegate: marshal tool schema: %v", err))
	}
	return raw
}

// delegate runs one delegation call (docs/seam.md §23): background
// when the provider supports it and run_in_background is not false, else
// foreground. A provider that is still learning its capabilities is
// waited for first (capabilities), and a delegation the approvals policy
// asks about waits for a person before the child exists (approve).
func (t *Tools) delegate(ctx context.Context, d delegation, call agent.Call) ([]model.Block, error) {
	if call.Agent == nil {
		return nil, fmt.Errorf("%s requires a calling agent (exec.agent was undefined)", d.tool)
	}
	var args delegateArgs
	if err := json.Unmarshal(call.Arguments, &args); err != nil {
		return nil, fmt.Errorf("INVALID_ARGS: %s arguments must be an object with string description and prompt", d.tool)
	}
	if strings.TrimSpace(args.Prompt) == "" {
		return nil, fmt.Errorf("INVALID_ARGS: %s needs a non-empty prompt", d.tool)
	}
	caps, err := capabilities(ctx, d.p)
	if err != nil {
		return nil, err
	}
	provider, can := d.p.Name(), t.background(caps)
	background := can && (args.RunInBackground == nil || *args.RunInBackground)
	if !can && args.RunInBackground != nil && *args.RunInBackground {
		return nil, fmt.Errorf("run_in_background is not available for %s: provider %s cannot run continuable children here", d.tool, provider)
	}
	parent, err := t.parent(ctx, call.Agent.ID())
	if err != nil {
		return nil, err
	}
	if err := t.approve(ctx, parent.Session.ID, call.CallID, provider, args.Prompt, call.Arguments, call.Agent); err != nil {
		return nil, err
	}
	prompt := []model.Block{model.TextBlock(args.Prompt)}
	var maxDepth *int
	if caps.DepthLimit {
		maxDepth = &t.maxDepth
	}
	if background {
		started, err := t.conts.StartContinuable(ctx, children.ContinuableRequest{Provider: provider,
			Label: args.Description, Prompt: prompt, Parent: parent, MaxDepth: maxDepth, WakeParent: true})
		if err != nil {
			return nil, t.safe(ctx, "start", err)
		}
		return text("started subagent " + started.ChildID), nil
	}
	return t.foreground(ctx, provider, subagent.Request{Label: args.Description, Prompt: prompt, Parent: parent, MaxDepth: maxDepth})
}

// capabilities returns p's capabilities once they are known, waiting
// within the calling turn for a provider still learning them
// (subagent.Prober). A provider whose agent cannot be started has them
// unknown, reported as false; its start then fails with the reason.
// Returns ctx's error when the turn ends first.
func capabilities(ctx context.Context, p subagent.Provider) (subagent.Capabilities, error) {
	if pr, ok := p.(subagent.Prober); ok {
		if err := pr.WaitProbe(ctx); err != nil && ctx.Err() != nil {
			return subagent.Capabilities{}, fmt.Errorf("%s: the calling turn ended while its capabilities were being learnt: %w", p.Name(), ctx.Err())
		}
	}
	return p.Capabilities(), nil
}

// text is a tool result of one text block.
func text(s string) []model.Block { return []model.Block{model.TextBlock(s)} }

// parent is the calling agent as the seam sees it: its durable header and
// the route options recorded there (a child's header holds its resolved
// route and depth).
func (t *Tools) parent(ctx context.Context, id string) (subagent.Parent, error) {
	hdr, err := t.store.GetSession(ctx, id)
	if err != nil {
		t.log.ErrorContext(ctx, "delegation: read calling session", slog.String("session_id", id), slog.Any("error", err))
		return subagent.Parent{}, fmt.Errorf("subagent: cannot read the calling session %s", id)
	}
	return subagent.Parent{Session: hdr, Options: subagent.AgentOptions{
		Provider: hdr.AgentProvider, Model: hdr.AgentModel, MaxTokens: hdr.MaxTokens}}, nil
}

// foreground starts a one-shot run, waits for its result and always disposes
// it (docs/seam.md §23). ctx is the calling turn: when it ends the run
// is cancelled and reported as cancelled.
func (t *Tools) foreground(ctx context.Context, provider string, req subagent.Request) ([]model.Block, error) {
	h, err := t.seam.Start(ctx, provider, req)
	if err != nil {
		return nil, t.safe(ctx, "start", err)
	}
	select {
	case <-h.Done():
	case <-ctx.Done():
		h.Cancel()
	}
	// Dispose waits for settlement, so the result is there afterwards; it
	// must run to the end even though the turn may be cancelled.
	disposeErr := h.Dispose(context.WithoutCancel(ctx))
	res, resErr := h.Result()
	switch {
	case resErr != nil && disposeErr != nil:
		return nil, fmt.Errorf("subagent run failed: %v; dispose failed: %v",
			t.safe(ctx, "result", resErr), t.safe(ctx, "dispose", disposeErr))
	case resErr != nil:
		return nil, fmt.Errorf("subagent run failed: %v", t.safe(ctx, "result", resErr))
	case disposeErr != nil:
		return nil, fmt.Errorf("dispose failed: %v", t.safe(ctx, "dispose", disposeErr))
	case !subagent.IsSuccess(res.StopReason):
		return nil, errors.New(FailureText(res))
	}
	return text(model.Text(res.Output)), nil
}

// safe returns err as the model may see it: a seam error's message, or
// "internal error" (logged) for anything else.
func (t *Tools) safe(ctx context.Context, op string, err error) error {
	if subagent.ErrorCode(err) == subagent.EInternal {
		t.log.ErrorContext(ctx, "delegation "+op+" failed", slog.Any("error", err))
	}
	return errors.New(subagent.ErrorMessage(err))
}
