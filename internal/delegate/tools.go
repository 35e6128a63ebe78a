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
	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// DefaultMaxDepth caps model-driven delegation chains (seam-spec §5.1:
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

// ToolsConfig configures Tools.
type ToolsConfig struct {
	// Seam starts the children. Required.
	Seam Seam
	// Store reads the calling agent's session header. Required.
	Store store.Store
	// Registry is the deployment-global tool registry the tools go into,
	// the one root agents and in-process children read. Required.
	Registry *agent.Registry
	// MaxDepth caps the depth of children the tools start; nil means
	// DefaultMaxDepth. It is sent only to providers with the depthLimit
	// capability; the others manage depth themselves (seam-spec §5.1
	// "provider-managed").
	MaxDepth *int
	Logger   *slog.Logger
}

// Tools keeps one delegation tool per registered provider in the global
// registry, mirroring provider-added and provider-removed (R8).
//
// One tool per provider, rather than one tool with a provider parameter,
// because seam-spec §5.1 binds each tool instance to one provider and never
// has a provider parameter: each tool's wording is derived from its own
// provider (a fork child sees the conversation, a spawn child does not), and
// a model picks between differently described tools more reliably than
// between enum values of one parameter. The spawn provider's tool is named
// "subagent", every other provider p's "subagent_<p>".
type Tools struct {
	seam     Seam
	store    store.Store
	registry *agent.Registry
	maxDepth int
	log      *slog.Logger

	mu      sync.Mutex
	started bool
	stopped bool
	unsub   func()
	mounted map[string]string // provider name → tool name
}

// NewTools returns Tools for cfg; Start mounts them.
func NewTools(cfg ToolsConfig) *Tools {
	depth := DefaultMaxDepth
	if cfg.MaxDepth != nil {
		depth = *cfg.MaxDepth
	}
	return &Tools{seam: cfg.Seam, store: cfg.Store, registry: cfg.Registry, maxDepth: depth,
		log: cfg.Logger, mounted: map[string]string{}}
}

// ToolName is the delegation tool name of the provider named provider.
func ToolName(provider string) string {
	if provider == spawnProvider {
		return SpawnTool
	}
	return SpawnTool + "_" + provider
}

// Start subscribes to provider events and mounts a tool for every provider
// registered now; later registrations and removals are mirrored (R8).
// Returns an error if a tool cannot be registered (its name is taken) or
// if Tools were already started.
func (t *Tools) Start(ctx context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.started {
		return errors.New("delegation tools: already started")
	}
	t.started = true
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
	defer t.mu.Unlock()
	t.stopLocked()
}

func (t *Tools) stopLocked() {
	if t.stopped {
		return
	}
	t.stopped = true
	if t.unsub != nil {
		t.unsub()
	}
	for p, name := range t.mounted {
		t.registry.Unregister(name)
		delete(t.mounted, p)
	}
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

// mountLocked (re-)registers p's tool with wording derived from p now.
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
	return nil
}

// delegateArgs are the delegation tool's arguments.
type delegateArgs struct {
	Description     string `json:"description"`
	Prompt          string `json:"prompt"`
	RunInBackground *bool  `json:"run_in_background"`
}

// tool builds the delegation tool of p.
func (t *Tools) tool(p subagent.Provider) agent.Tool {
	name, provider := ToolName(p.Name()), p.Name()
	description, promptParam := toolDescription(p, false)
	params := map[string]any{
		"type": "object",
		"properties": map[string]any{
			"description": map[string]any{"type": "string", "description": descriptionParam},
			"prompt":      map[string]any{"type": "string", "description": promptParam},
		},
		"required":             []string{"description", "prompt"},
		"additionalProperties": false,
	}
	schema, err := json.Marshal(params)
	if err != nil {
		panic(fmt.Sprintf("delegate: marshal tool schema: %v", err)) // static shape
	}
	depthLimit := p.Capabilities().DepthLimit
	return agent.Tool{
		Name:        name,
		Description: description,
		Parameters:  schema,
		Run: func(ctx context.Context, call agent.Call) ([]model.Block, error) {
			return t.delegate(ctx, name, provider, depthLimit, call)
		},
	}
}

// delegate runs one delegation call (seam-spec §5.1 execution).
func (t *Tools) delegate(ctx context.Context, name, provider string, depthLimit bool, call agent.Call) ([]model.Block, error) {
	if call.Agent == nil {
		return nil, fmt.Errorf("%s requires a calling agent (exec.agent was undefined)", name)
	}
	var args delegateArgs
	if err := json.Unmarshal(call.Arguments, &args); err != nil {
		return nil, fmt.Errorf("INVALID_ARGS: %s arguments must be an object with string description and prompt", name)
	}
	if strings.TrimSpace(args.Prompt) == "" {
		return nil, fmt.Errorf("INVALID_ARGS: %s needs a non-empty prompt", name)
	}
	if args.RunInBackground != nil && *args.RunInBackground {
		return nil, fmt.Errorf("run_in_background is not available for %s: provider %s cannot run continuable children here", name, provider)
	}
	parent, err := t.parent(ctx, call.Agent.ID())
	if err != nil {
		return nil, err
	}
	req := subagent.Request{Label: args.Description, Prompt: []model.Block{model.TextBlock(args.Prompt)}, Parent: parent}
	if depthLimit {
		req.MaxDepth = &t.maxDepth
	}
	return t.foreground(ctx, provider, req)
}

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
// it (seam-spec §5.1 step 6). ctx is the calling turn: when it ends the run
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
	return []model.Block{model.TextBlock(model.Text(res.Output))}, nil
}

// safe returns err as the model may see it: a seam error's message, or
// "internal error" (logged) for anything else.
func (t *Tools) safe(ctx context.Context, op string, err error) error {
	if subagent.ErrorCode(err) == subagent.EInternal {
		t.log.ErrorContext(ctx, "delegation "+op+" failed", slog.Any("error", err))
	}
	return errors.New(subagent.ErrorMessage(err))
}
