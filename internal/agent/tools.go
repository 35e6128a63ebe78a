package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/subagentd/subagentd/internal/model"
)

// Tool is a model-callable function. Run receives the agent's turn context:
// it must return promptly once ctx is done. A returned error becomes an
// isError tool result whose text is the error message, so it must be safe to
// show to the model.
type Tool struct {
	Name        string
	Description string
	// Parameters is the JSON Schema object of the arguments; nil means
	// {"type":"object"}.
	Parameters json.RawMessage
	Run        func(ctx context.Context, call Call) ([]model.Block, error)
	// Concurrent marks the tool safe to run alongside sibling calls of the
	// same model response (delegation: docs/seam.md §23). Consecutive
	// concurrent calls run in parallel; their results are still logged in
	// the model's order.
	Concurrent bool
}

// Call is one invocation of a tool.
type Call struct {
	// Agent is the calling agent, so tools such as delegation can read its
	// id and log.
	Agent  *Agent
	CallID string
	// Arguments is the model's argument object (valid JSON; "{}" when the
	// model sent none).
	Arguments json.RawMessage
}

func (t Tool) spec() model.ToolSpec {
	params := t.Parameters
	if len(params) == 0 {
		params = json.RawMessage(`{"type":"object"}`)
	}
	return model.ToolSpec{Name: t.Name, Description: t.Description, Parameters: params}
}

// RunCodeTool is the reserved Code-Mode transport name, which a tool filter
// may never name (docs/seam.md §9).
const RunCodeTool = "run_code"

// Registry holds the deployment-global tools. Tools may be registered and
// unregistered at any time; agents see the change at their next step. It is
// safe for concurrent use.
type Registry struct {
	mu     sync.RWMutex
	byName map[string]Tool
	order  []string
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{byName: map[string]Tool{}}
}

// Register adds t. It returns an error if the name is empty, Run is nil, or
// a tool of that name is already registered.
func (r *Registry) Register(t Tool) error {
	if t.Name == "" || t.Run == nil {
		return fmt.Errorf("register tool %q: name and Run are required", t.Name)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.byName[t.Name]; dup {
		return fmt.Errorf("register tool %q: already registered", t.Name)
	}
	r.byName[t.Name] = t
	r.order = append(r.order, t.Name)
	return nil
}

// Unregister removes the tool named name; unknown names are ignored.
func (r *Registry) Unregister(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.byName[name]; !ok {
		return
	}
	delete(r.byName, name)
	r.order = slices.DeleteFunc(r.order, func(n string) bool { return n == name })
}

// Names lists the registered tool names in registration order.
func (r *Registry) Names() []string {
	if r == nil {
		return nil
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	return slices.Clone(r.order)
}

// tools returns the registered tools in registration order.
func (r *Registry) tools() []Tool {
	if r == nil {
		return nil
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]Tool, len(r.order))
	for i, n := range r.order {
		out[i] = r.byName[n]
	}
	return out
}

// Filter scopes which global tools an agent sees (docs/seam.md §9). A nil
// slice is an absent list; a non-nil empty Allow hides every global tool.
// It is evaluated live: a deny-only filter admits globals registered later.
type Filter struct {
	Allow []string
	Deny  []string
}

// ErrToolFilter is matched (errors.Is) by the error New returns for a tool
// filter that is empty or names an unknown global tool.
var ErrToolFilter = errors.New("invalid tool filter")

// filterError carries the refusal's wording as its message and matches
// ErrToolFilter.
type filterError struct{ msg string }

func (e *filterError) Error() string        { return e.msg }
func (e *filterError) Is(target error) bool { return target == ErrToolFilter }

// Check validates f against the global tools registered now: at least one
// list, and every name a registered global tool other than run_code
// (docs/seam.md §9). The error matches ErrToolFilter and says what is wrong. Callers that must refuse a filter before an agent exists use it.
func (f *Filter) Check(global *Registry) error {
	if f.Allow == nil && f.Deny == nil {
		return &filterError{"tool filter needs allow or deny"}
	}
	known := global.Names()
	for _, name := range slices.Concat(f.Allow, f.Deny) {
		if name == RunCodeTool || !slices.Contains(known, name) {
			return &filterError{fmt.Sprintf("tools.restrict() names unknown global tool %q; known global tools: %s",
				name, strings.Join(known, ", "))}
		}
	}
	return nil
}

// admits reports whether the global tool name passes f.
func (f *Filter) admits(name string) bool {
	if f == nil {
		return true
	}
	return (f.Allow == nil || slices.Contains(f.Allow, name)) &&
		(f.Deny == nil || !slices.Contains(f.Deny, name))
}

// lookup returns the visible tool named name.
func (a *Agent) lookup(name string) (Tool, bool) {
	for _, v := range a.visibleTools() {
		if v.Name == name {
			return v, true
		}
	}
	return Tool{}, false
}

// visibleTools returns the tools the model may see and call now: admitted
// globals in registration order, then scope-local tools, which are never
// filtered and shadow a global of the same name.
func (a *Agent) visibleTools() []Tool {
	locals, global := a.locals, a.global.tools()
	out := make([]Tool, 0, len(global)+len(locals))
	for _, t := range global {
		shadowed := slices.ContainsFunc(locals, func(l Tool) bool { return l.Name == t.Name })
		if !shadowed && a.filter.admits(t.Name) {
			out = append(out, t)
		}
	}
	return append(out, locals...)
}
