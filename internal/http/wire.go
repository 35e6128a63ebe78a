package http

import (
	"bytes"
	"encoding/json"
	"time"

	"github.com/subagentd/subagentd/internal/children"
	"github.com/subagentd/subagentd/internal/governance"
	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/roots"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// Wire types: the JSON of api/openapi.yaml. Domain types carry no JSON tags;
// these convert to and from them. Request structs carry the
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
	// Model is the route in-process children use by default; absent for
	// providers that run their own model (ACP) and without Config.Routes.
	Model *providerModelJSON `json:"model,omitempty"`
}

// providerModelJSON is a model route as /v1/providers shows it. Offline
// marks the deterministic echo model, which needs no model server.
type providerModelJSON struct {
	Route   string `json:"route"`
	Kind    string `json:"kind"`
	Model   string `json:"model"`
	Offline bool   `json:"offline,omitempty"`
}

// providerOut describes p; routes (nil: unknown) give the model of
// in-process providers.
func providerOut(p subagent.Provider, routes *model.Routes) providerJSON {
	c := p.Capabilities()
	out := providerJSON{
		Name:                  p.Name(),
		Description:           p.Description(),
		Capabilities:          capabilitiesJSON{c.OutputSchema, c.DepthLimit, c.ToolFilter, c.Persona},
		InheritsParentContext: p.InheritsParentContext(),
		Steer:                 c.Steer,
		Resume:                c.Resume,
		Local:                 c.Local,
	}
	if out.Local && routes != nil {
		def := routes.Default()
		out.Model = &providerModelJSON{Route: def.Name, Kind: def.Kind, Model: def.DefaultModel, Offline: def.Kind == model.KindEcho}
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

// toolFilterJSON is a tool filter. omitzero keeps `allow: []`, which hides
// every global tool, apart from an absent list.
type toolFilterJSON struct {
	Allow []string `json:"allow,omitzero" validate:"required_without=Deny,max=64,dive,min=1,max=128"`
	Deny  []string `json:"deny,omitzero" validate:"max=64,dive,min=1,max=128"`
}

// seam returns the filter as the seam takes it; nil stays nil.
func (f *toolFilterJSON) seam() *subagent.ToolFilter {
	if f == nil {
		return nil
	}
	return &subagent.ToolFilter{Allow: f.Allow, Deny: f.Deny}
}

// toolFilterOut is the wire form of a seam filter; nil stays nil.
func toolFilterOut(f *subagent.ToolFilter) *toolFilterJSON {
	if f == nil {
		return nil
	}
	return &toolFilterJSON{Allow: f.Allow, Deny: f.Deny}
}

type createSessionRequest struct {
	Label        string            `json:"label" validate:"max=200"`
	Cwd          string            `json:"cwd" validate:"omitempty,max=4096,startswith=/"`
	AgentOptions *agentOptionsJSON `json:"agentOptions"`
	Persona      *string           `json:"persona" validate:"omitempty,max=16384"`
	Approvals    *approvalsJSON    `json:"approvals"`
	Limits       *limitsJSON       `json:"limits"`
}

// approvalsJSON is a root's approvals policy; governance checks its values
// (PolicyParams), the wire only its sizes.
type approvalsJSON struct {
	Mode      string           `json:"mode" validate:"max=16"`
	Rules     []policyRuleJSON `json:"rules" validate:"max=64,dive"`
	Timeout   string           `json:"timeout" validate:"max=32"`
	OnTimeout string           `json:"onTimeout" validate:"max=16"`
}

type policyRuleJSON struct {
	Kind         string `json:"kind" validate:"max=16"`
	TitlePattern string `json:"titlePattern" validate:"max=512"`
	Decision     string `json:"decision" validate:"max=16"`
}

// params are the domain's parameters of req for a root session id.
func (req createSessionRequest) params(id string) roots.CreateParams {
	return roots.CreateParams{ID: id, Label: req.Label, Cwd: req.Cwd, Agent: req.AgentOptions.seam(), Persona: req.Persona,
		Approvals: req.Approvals.policy(), Limits: req.Limits.seam()}
}

// policyOutJSON is a root's approvals policy as GET /v1/sessions/{id}
// shows it (api/openapi.yaml ApprovalsPolicyInForce).
type policyOutJSON struct {
	Mode      string           `json:"mode,omitempty"`
	Rules     []policyRuleJSON `json:"rules"`
	Timeout   string           `json:"timeout,omitempty"`
	OnTimeout string           `json:"onTimeout,omitempty"`
	Always    []alwaysRuleJSON `json:"always"`
}

// alwaysRuleJSON is a rule an always decision added.
type alwaysRuleJSON struct {
	Kind       string `json:"kind"`
	Title      string `json:"title"`
	Decision   string `json:"decision"`
	ApprovalID string `json:"approvalId,omitempty"`
}

// policyOut is p on the wire; nil stays nil.
func policyOut(p *store.TreePolicy) *policyOutJSON {
	if p == nil {
		return nil
	}
	out := &policyOutJSON{Mode: p.Mode, Rules: []policyRuleJSON{}, OnTimeout: p.OnTimeout, Always: []alwaysRuleJSON{}}
	if p.Timeout > 0 {
		out.Timeout = p.Timeout.String()
	}
	for _, r := range p.Rules {
		out.Rules = append(out.Rules, policyRuleJSON(r))
	}
	for _, r := range p.Always {
		out.Always = append(out.Always, alwaysRuleJSON(r))
	}
	return out
}

// policy is a as governance takes it; nil stays nil.
func (a *approvalsJSON) policy() *governance.PolicyParams {
	if a == nil {
		return nil
	}
	p := &governance.PolicyParams{Mode: a.Mode, Timeout: a.Timeout, OnTimeout: a.OnTimeout}
	for _, r := range a.Rules {
		p.Rules = append(p.Rules, store.PolicyRule(r))
	}
	return p
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
	// Limits are the limits in force at the session: set on a created
	// root and on GET /v1/sessions/{id}, absent in listings.
	Limits *limitsOutJSON `json:"limits,omitempty"`
	// Approvals is a root's approvals policy on GET /v1/sessions/{id},
	// with the rules its tree's always decisions added.
	Approvals *policyOutJSON `json:"approvals,omitempty"`
	// Match is set in search results: the first event that matched.
	Match *matchJSON `json:"match,omitempty"`
}

// matchJSON is the event of a session's log a search matched.
type matchJSON struct {
	Seq     int64  `json:"seq"`
	Type    string `json:"type"`
	Snippet string `json:"snippet"`
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

// childEntryJSON is one row of a children or descendants listing; ParentID
// and Depth are set in descendants listings only.
type childEntryJSON struct {
	Kind        string `json:"kind"`
	ID          string `json:"id"`
	Mode        string `json:"mode,omitempty"`
	Label       string `json:"label,omitempty"`
	Activity    string `json:"activity,omitempty"`
	HasChildren *bool  `json:"hasChildren,omitempty"`
	Provider    string `json:"provider,omitempty"`
	Reason      string `json:"reason,omitempty"`
	ParentID    string `json:"parentId,omitempty"`
	Depth       int    `json:"depth,omitempty"`
}

func childEntryOut(e children.ListEntry) childEntryJSON {
	if e.Kind != children.EntryChild {
		return childEntryJSON{Kind: e.Kind, ID: e.ID, Reason: e.Reason, ParentID: e.ParentID, Depth: e.Depth}
	}
	return childEntryJSON{
		Kind: e.Kind, ID: e.ID, Mode: e.Mode, Label: e.Label, Activity: e.Activity,
		HasChildren: &e.HasChildren, Provider: e.Provider, ParentID: e.ParentID, Depth: e.Depth,
	}
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
	Prompt          []model.Block     `json:"prompt" validate:"required,min=1,max=64,blocktext=262144,blocktypes"`
	Label           string            `json:"label" validate:"max=200"`
	AgentOptions    *agentOptionsJSON `json:"agentOptions"`
	OutputSchema    json.RawMessage   `json:"outputSchema" validate:"max=65536"`
	MaxDepth        *int              `json:"maxDepth"`
	ToolFilter      *toolFilterJSON   `json:"toolFilter"`
	Persona         *string           `json:"persona" validate:"omitempty,max=16384"`
	OnDisconnect    string            `json:"onDisconnect" validate:"omitempty,oneof=continue cancel"`
	Limits          *limitsJSON       `json:"limits"`
}

// seamParent is the delegating parent as the seam sees it. The parent's
// live options are its header's route: a root session's own, or the route
// a provider recorded for a child.
func seamParent(parent store.Session) subagent.Parent {
	return subagent.Parent{
		Session: parent,
		Options: subagent.AgentOptions{Provider: parent.AgentProvider, Model: parent.AgentModel, MaxTokens: parent.MaxTokens},
	}
}

// seam returns the start request for parent.
func (c *createRunRequest) seam(parent store.Session) subagent.Request {
	req := subagent.Request{
		Label:        c.Label,
		Prompt:       c.Prompt,
		Parent:       seamParent(parent),
		AgentOptions: c.AgentOptions.seam(),
		MaxDepth:     c.MaxDepth,
		ToolFilter:   c.ToolFilter.seam(),
		Persona:      c.Persona,
		Limits:       c.Limits.seam(),
	}
	if len(c.OutputSchema) > 0 && !bytes.Equal(c.OutputSchema, []byte("null")) {
		req.OutputSchema = c.OutputSchema
	}
	return req
}

type runResultJSON struct {
	Output     json.RawMessage `json:"output"`
	Structured json.RawMessage `json:"structured,omitempty"`
	StopReason string          `json:"stopReason"`
	Diagnostic string          `json:"diagnostic,omitempty"`
	Usage      runUsageJSON    `json:"usage"`
}

// runUsageJSON is the model usage a run recorded when it settled.
type runUsageJSON struct {
	InputTokens  int64 `json:"inputTokens"`
	OutputTokens int64 `json:"outputTokens"`
	ModelCalls   int64 `json:"modelCalls"`
	Known        bool  `json:"known"`
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
	// PendingApprovals counts the approvals the run's agent waits on.
	PendingApprovals int `json:"pendingApprovals"`
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

		PendingApprovals: r.PendingApprovals,
	}
	if r.State == store.StateRunning {
		return out
	}
	out.EndedAt = nonZero(r.EndedAt)
	res := runResultJSON{Output: r.Output, StopReason: r.StopReason, Diagnostic: r.Diagnostic,
		Usage: runUsageJSON{InputTokens: r.Usage.InputTokens, OutputTokens: r.Usage.OutputTokens,
			ModelCalls: r.Usage.ModelCalls, Known: r.UsageKnown}}
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
	Content []model.Block `json:"content" validate:"required,min=1,max=64,blocktext=262144,blocktypes"`
}

type steerResponse struct {
	MessageID string `json:"messageId"`
}

type promptRequest struct {
	Content []model.Block `json:"content" validate:"required,min=1,max=64,blocktext=262144,blocktypes"`
}

type promptResponse struct {
	MessageID string `json:"messageId"`
}

// createSubagentRequest is a continuable start (docs/seam.md §11): a one-shot
// start without outputSchema and onDisconnect, with a required label and
// an optional caller-reserved child id.
type createSubagentRequest struct {
	Provider        string            `json:"provider" validate:"required,max=128"`
	ParentSessionID string            `json:"parentSessionId" validate:"required,max=128"`
	Label           string            `json:"label" validate:"required,max=200"`
	Prompt          []model.Block     `json:"prompt" validate:"required,min=1,max=64,blocktext=262144,blocktypes"`
	ChildID         *string           `json:"childId" validate:"omitempty,min=1,max=128,safeid"`
	AgentOptions    *agentOptionsJSON `json:"agentOptions"`
	MaxDepth        *int              `json:"maxDepth"`
	ToolFilter      *toolFilterJSON   `json:"toolFilter"`
	Persona         *string           `json:"persona" validate:"omitempty,max=16384"`
	// NotifyParent "wake" makes the child's settlement notices open its
	// parent's turn; "quiet", the default, records them for the parent's
	// next turn (R78).
	NotifyParent string      `json:"notifyParent" validate:"omitempty,oneof=wake quiet"`
	Limits       *limitsJSON `json:"limits"`
}

// notifyParentWake is the notifyParent value that wakes the parent.
const notifyParentWake = "wake"

// seam returns the continuable start request for parent.
func (c *createSubagentRequest) seam(parent store.Session) children.ContinuableRequest {
	return children.ContinuableRequest{
		Provider:     c.Provider,
		Label:        c.Label,
		ChildID:      deref(c.ChildID),
		Prompt:       c.Prompt,
		Parent:       seamParent(parent),
		AgentOptions: c.AgentOptions.seam(),
		MaxDepth:     c.MaxDepth,
		ToolFilter:   c.ToolFilter.seam(),
		Persona:      c.Persona,
		WakeParent:   c.NotifyParent == notifyParentWake,
		Limits:       c.Limits.seam(),
	}
}

type createSubagentResponse struct {
	ChildID   string `json:"childId"`
	TaskID    string `json:"taskId"`
	MessageID string `json:"messageId"`
}

// sourceJSON attributes a followup (docs/seam.md §1). A client may claim
// user or coordinator; either grants nothing: the authority is
// parentSessionId (R84).
type sourceJSON struct {
	Kind string `json:"kind" validate:"required,oneof=user coordinator"`
}

type followupRequest struct {
	ParentSessionID string        `json:"parentSessionId" validate:"required,max=128"`
	Content         []model.Block `json:"content" validate:"required,min=1,max=64,blocktext=262144,blocktypes"`
	Source          *sourceJSON   `json:"source"`
}

// source is the message source the child logs: user by default; a
// coordinator message is a relay from the parent session, as send_message
// writes it.
func (f *followupRequest) source() sessionlog.Source {
	if f.Source != nil && f.Source.Kind == subagent.SourceCoordinator {
		return sessionlog.Source{Kind: subagent.SourceCoordinator, Form: "relay", SenderSessionID: f.ParentSessionID}
	}
	return sessionlog.Source{Kind: subagent.SourceUser}
}

type followupResponse struct {
	Route     subagent.Route `json:"route"`
	TaskID    string         `json:"taskId,omitempty"`
	MessageID string         `json:"messageId"`
}

// followupAcceptedResponse answers a followup sent with Prefer:
// respond-async: accepted, not yet routed.
type followupAcceptedResponse struct {
	MessageID string `json:"messageId"`
	ChildID   string `json:"childId"`
	Route     string `json:"route"`
}

// routeAccepted is the route of a followup answered at acceptance.
const routeAccepted = "accepted"

// treeCancelResponse answers POST /v1/sessions/{id}/cancel.
type treeCancelResponse struct {
	Cancelled int `json:"cancelled"`
}

type interruptRequest struct {
	ParentSessionID string `json:"parentSessionId" validate:"required,max=128"`
}

type acceptedJSON struct {
	Accepted bool `json:"accepted"`
}

// identityJSON is a child's listing identity: the last valid descriptor
// of its log and that event's seq.
type identityJSON struct {
	Seq           int64           `json:"seq"`
	Mode          string          `json:"mode"`
	Provider      string          `json:"provider"`
	Label         string          `json:"label,omitempty"`
	AgentProvider string          `json:"agentProvider,omitempty"`
	AgentModel    string          `json:"agentModel,omitempty"`
	Persona       *string         `json:"persona,omitempty"`
	ToolFilter    *toolFilterJSON `json:"toolFilter,omitempty"`
}

// subagentJSON is GET /v1/subagents/{childId}: the header, the identity
// (absent when the log holds no valid descriptor), the activity and the
// live or most recent task.
type subagentJSON struct {
	ChildID  string        `json:"childId"`
	Activity string        `json:"activity"`
	TaskID   string        `json:"taskId,omitempty"`
	Identity *identityJSON `json:"identity,omitempty"`
	Session  sessionJSON   `json:"session"`
}

func subagentOut(info children.ChildInfo) subagentJSON {
	out := subagentJSON{
		ChildID:  info.Session.ID,
		Activity: info.Activity,
		TaskID:   info.TaskID,
		Session:  sessionOut(info.Session, info.Activity == subagent.ActivityRunning),
	}
	if id := info.Identity; id != nil {
		out.Identity = &identityJSON{
			Seq: id.Seq, Mode: id.Mode, Provider: id.Provider, Label: id.Label,
			AgentProvider: id.AgentProvider, AgentModel: id.AgentModel,
			Persona: id.Persona, ToolFilter: toolFilterOut(id.ToolFilter),
		}
	}
	return out
}

type healthJSON struct {
	Status  string `json:"status"`
	Version string `json:"version,omitempty"`
	// UnavailableProviders (readiness only) are the providers whose agent
	// could not be started to learn its capabilities.
	UnavailableProviders []unavailableProviderJSON `json:"unavailableProviders,omitempty"`
}

type unavailableProviderJSON struct {
	Name   string `json:"name"`
	Reason string `json:"reason"`
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
