package http

import (
	"bytes"
	"encoding/json"
	"time"

	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// Wire types: the JSON of api/openapi.yaml. Domain types carry no JSON tags
// (STYLE A.2); these convert to and from them. Request structs carry the
// validate tags that bound every field.

type capabilitiesJSON struct {
	OutputSchema bool `json:"outputSchema"`
	DepthLimit   bool `json:"depthLimit"`
	ToolFilter   bool `json:"toolFilter"`
	Persona      bool `json:"persona"`
}

type providerJSON struct {
	Name                  string           `json:"name"`
	Description           string           `json:"description"`
	Capabilities          capabilitiesJSON `json:"capabilities"`
	InheritsParentContext bool             `json:"inheritsParentContext"`
	Steer                 bool             `json:"steer"`
	Resume                bool             `json:"resume"`
	Local                 bool             `json:"local"`
}

// RuntimeCapabilities is implemented by providers that advertise runtime
// features (DESIGN §1). A provider without it advertises none of them.
type RuntimeCapabilities interface {
	// CanSteer reports whether the provider's runs accept confirmed steering.
	CanSteer() bool
	// CanResume reports whether children can be continuable and cold-resumed.
	CanResume() bool
	// IsLocal reports whether children are in-process agents.
	IsLocal() bool
}

func providerOut(p subagent.Provider) providerJSON {
	c := p.Capabilities()
	out := providerJSON{
		Name:                  p.Name(),
		Description:           p.Description(),
		Capabilities:          capabilitiesJSON{c.OutputSchema, c.DepthLimit, c.ToolFilter, c.Persona},
		InheritsParentContext: p.InheritsParentContext(),
	}
	if rc, ok := p.(RuntimeCapabilities); ok {
		out.Steer, out.Resume, out.Local = rc.CanSteer(), rc.CanResume(), rc.IsLocal()
	}
	return out
}

type providerListJSON struct {
	Providers []providerJSON `json:"providers"`
}

// agentOptionsJSON is a model route, in requests and in session headers.
type agentOptionsJSON struct {
	Provider  *string `json:"provider,omitempty" validate:"omitempty,min=1,max=128"`
	Model     *string `json:"model,omitempty" validate:"omitempty,min=1,max=256"`
	MaxTokens *int    `json:"maxTokens,omitempty" validate:"omitempty,min=1,max=1000000"`
}

// seam returns the options as the seam takes them; nil stays nil.
func (o *agentOptionsJSON) seam() *subagent.AgentOptions {
	if o == nil {
		return nil
	}
	return &subagent.AgentOptions{Provider: deref(o.Provider), Model: deref(o.Model), MaxTokens: deref(o.MaxTokens)}
}

// agentOptionsOut returns the route of a session header, nil when it has none.
func agentOptionsOut(provider, model string, maxTokens int) *agentOptionsJSON {
	o := agentOptionsJSON{Provider: nonZero(provider), Model: nonZero(model), MaxTokens: nonZero(maxTokens)}
	if o == (agentOptionsJSON{}) {
		return nil
	}
	return &o
}

type toolFilterJSON struct {
	Allow []string `json:"allow,omitempty" validate:"required_without=Deny,max=64,dive,min=1,max=128"`
	Deny  []string `json:"deny,omitempty" validate:"max=64,dive,min=1,max=128"`
}

type createSessionRequest struct {
	Label        string            `json:"label" validate:"max=200"`
	Cwd          string            `json:"cwd" validate:"omitempty,max=4096,startswith=/"`
	AgentOptions *agentOptionsJSON `json:"agentOptions"`
	Persona      *string           `json:"persona" validate:"omitempty,max=16384"`
}

type sessionJSON struct {
	ID              string            `json:"id"`
	ParentSessionID string            `json:"parentSessionId,omitempty"`
	Origin          string            `json:"origin,omitempty"`
	DelegationDepth int               `json:"delegationDepth"`
	SeedLength      int               `json:"seedLength"`
	Cwd             string            `json:"cwd,omitempty"`
	Label           string            `json:"label,omitempty"`
	Provider        string            `json:"provider,omitempty"`
	Mode            string            `json:"mode,omitempty"`
	AgentOptions    *agentOptionsJSON `json:"agentOptions,omitempty"`
	Persona         *string           `json:"persona,omitempty"`
	CreatedAt       time.Time         `json:"createdAt"`
	Activity        string            `json:"activity"`
}

// Activity values.
const (
	activityRunning  = "running"
	activityInactive = "inactive"
)

func sessionOut(s store.Session, running bool) sessionJSON {
	return sessionJSON{
		ID:              s.ID,
		ParentSessionID: s.ParentID,
		Origin:          s.Origin,
		DelegationDepth: s.DelegationDepth,
		SeedLength:      s.SeedLength,
		Cwd:             s.Cwd,
		Label:           s.Label,
		Provider:        s.Provider,
		Mode:            s.Mode,
		AgentOptions:    agentOptionsOut(s.AgentProvider, s.AgentModel, s.MaxTokens),
		Persona:         s.Persona,
		CreatedAt:       s.CreatedAt,
		Activity:        activity(running),
	}
}

func activity(running bool) string {
	if running {
		return activityRunning
	}
	return activityInactive
}

type sessionListJSON struct {
	Sessions   []sessionJSON `json:"sessions"`
	NextCursor string        `json:"nextCursor,omitempty"`
}

// sessionEventJSON is the envelope of one session-log event, in pages and
// as the data of session stream frames.
type sessionEventJSON struct {
	Seq  int64           `json:"seq"`
	Type string          `json:"type"`
	Time time.Time       `json:"time"`
	Data json.RawMessage `json:"data"`
}

func sessionEventOut(e store.Event) sessionEventJSON {
	data := e.Data
	if len(data) == 0 {
		data = json.RawMessage("null")
	}
	return sessionEventJSON{Seq: e.Seq, Type: e.Type, Time: e.Time, Data: data}
}

type sessionEventPageJSON struct {
	Events  []sessionEventJSON `json:"events"`
	HasMore bool               `json:"hasMore"`
}

type childEntryJSON struct {
	Kind        string `json:"kind"`
	ID          string `json:"id"`
	Mode        string `json:"mode,omitempty"`
	Label       string `json:"label,omitempty"`
	Activity    string `json:"activity,omitempty"`
	HasChildren *bool  `json:"hasChildren,omitempty"`
	Provider    string `json:"provider,omitempty"`
	Reason      string `json:"reason,omitempty"`
}

type childListJSON struct {
	Entries    []childEntryJSON `json:"entries"`
	NextCursor string           `json:"nextCursor,omitempty"`
}

// onDisconnect values.
const (
	onDisconnectContinue = "continue"
	onDisconnectCancel   = "cancel"
)

type createRunRequest struct {
	Provider        string            `json:"provider" validate:"required,max=128"`
	ParentSessionID string            `json:"parentSessionId" validate:"required,max=128"`
	Prompt          []model.Block     `json:"prompt" validate:"required,min=1,max=64,blocktext=262144"`
	Label           string            `json:"label" validate:"max=200"`
	AgentOptions    *agentOptionsJSON `json:"agentOptions"`
	OutputSchema    json.RawMessage   `json:"outputSchema" validate:"max=65536"`
	MaxDepth        *int              `json:"maxDepth"`
	ToolFilter      *toolFilterJSON   `json:"toolFilter"`
	Persona         *string           `json:"persona" validate:"omitempty,max=16384"`
	OnDisconnect    string            `json:"onDisconnect" validate:"omitempty,oneof=continue cancel"`
}

// seam returns the start request for parent. The parent's live options are
// its header's route: a root session's own, or the route a provider
// recorded for a child.
func (c *createRunRequest) seam(parent store.Session) subagent.Request {
	req := subagent.Request{
		Label:  c.Label,
		Prompt: c.Prompt,
		Parent: subagent.Parent{
			Session: parent,
			Options: subagent.AgentOptions{Provider: parent.AgentProvider, Model: parent.AgentModel, MaxTokens: parent.MaxTokens},
		},
		AgentOptions: c.AgentOptions.seam(),
		MaxDepth:     c.MaxDepth,
		Persona:      c.Persona,
	}
	if len(c.OutputSchema) > 0 && !bytes.Equal(c.OutputSchema, []byte("null")) {
		req.OutputSchema = c.OutputSchema
	}
	if c.ToolFilter != nil {
		req.ToolFilter = &subagent.ToolFilter{Allow: c.ToolFilter.Allow, Deny: c.ToolFilter.Deny}
	}
	return req
}

type runResultJSON struct {
	Output     json.RawMessage `json:"output"`
	Structured json.RawMessage `json:"structured,omitempty"`
	StopReason string          `json:"stopReason"`
	Diagnostic string          `json:"diagnostic,omitempty"`
}

type runJSON struct {
	RunID           string         `json:"runId"`
	Kind            string         `json:"kind"`
	Provider        string         `json:"provider"`
	ChildSessionID  string         `json:"childSessionId"`
	ParentSessionID string         `json:"parentSessionId"`
	TaskID          string         `json:"taskId,omitempty"`
	Local           bool           `json:"local"`
	State           string         `json:"state"`
	StartedAt       time.Time      `json:"startedAt"`
	EndedAt         *time.Time     `json:"endedAt,omitempty"`
	Result          *runResultJSON `json:"result,omitempty"`
}

func runOut(r store.Run) runJSON {
	out := runJSON{
		RunID:           r.ID,
		Kind:            r.Kind,
		Provider:        r.Provider,
		ChildSessionID:  r.ChildID,
		ParentSessionID: r.ParentID,
		TaskID:          r.TaskID,
		Local:           r.Local,
		State:           r.State,
		StartedAt:       r.StartedAt,
	}
	if r.State == store.StateRunning {
		return out
	}
	out.EndedAt = nonZero(r.EndedAt)
	res := runResultJSON{Output: r.Output, StopReason: r.StopReason, Diagnostic: r.Diagnostic}
	if len(res.Output) == 0 || bytes.Equal(res.Output, []byte("null")) {
		res.Output = json.RawMessage("[]")
	}
	if len(r.Structured) > 0 && !bytes.Equal(r.Structured, []byte("null")) {
		res.Structured = r.Structured
	}
	out.Result = &res
	return out
}

type runListJSON struct {
	Runs       []runJSON `json:"runs"`
	NextCursor string    `json:"nextCursor,omitempty"`
}

type steerRequest struct {
	Content []model.Block `json:"content" validate:"required,min=1,max=64,blocktext=262144"`
}

type steerResponse struct {
	MessageID string `json:"messageId"`
}

type healthJSON struct {
	Status  string `json:"status"`
	Version string `json:"version,omitempty"`
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// nonZero returns &v, or nil for the zero value.
func nonZero[T comparable](v T) *T {
	var zero T
	if v == zero {
		return nil
	}
	return &v
}
