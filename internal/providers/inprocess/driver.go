// Package inprocess is the shared driver of the in-process providers spawn
// and fork (docs/seam.md §9): it composes a one-shot child agent from its
// parent and the resolved request (R45–R51), publishes it, runs the prompt
// and reads the result from the child's own events.
//
// Every check that can fail on caller input runs before the child session is
// created, because the store is append-only: a child that was created cannot
// be taken back.
package inprocess

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/subagentd/subagentd/internal/agent"
	"github.com/subagentd/subagentd/internal/children"
	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/schema"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
	"github.com/subagentd/subagentd/internal/telemetry"
)

// DelegationSection is the name of the runtime-context statement every
// in-process child carries (R50).
const DelegationSection = "subagent:delegation"

const (
	delegationOrder = 120
	delegationText  = "You are a subagent working on a task delegated to you by another agent. " +
		"Your permission scope is fixed for this task: approval requests are rejected automatically " +
		"and nobody can grant you more. If something needs a permission or a tool you do not have, " +
		"do not retry it; report the limitation in your answer instead."
)

// Origin is the header origin of every child session.
const Origin = children.OriginSubagent

// Deps are the collaborators of the in-process providers.
type Deps struct {
	// Store holds the child sessions and their logs. Required.
	Store store.Store
	// Routes resolves the child's agentOptions; nil means no model is
	// configured, so every child turn ends with reason error.
	Routes *model.Routes
	// Tools is the deployment-global tool registry the child's tool filter
	// scopes (nil: no global tools).
	Tools *agent.Registry
	// DeploymentPersona is the persona a child without its own inherits.
	DeploymentPersona string
	// Vars are the prompt variables persona templates may reference, as
	// for root agents (docs/seam.md §9).
	Vars map[string]func() (string, bool)
	// Logger receives child failures (R27); nil discards them.
	Logger *slog.Logger
	// Metrics counts the tokens of the children's model calls; nil counts
	// nothing.
	Metrics *telemetry.Metrics
	// Gate, when set, is every child agent's step gate (a tree's limits,
	// internal/governance).
	Gate agent.Gate
}

// SeedFunc returns the events a child inherits from its parent: a balanced
// completed-turn prefix of the parent's log, contiguous from seq 0
// (docs/seam.md §8), or none for a fresh child.
type SeedFunc func(ctx context.Context, parent store.Session) ([]store.Event, error)

// Driver creates, publishes and runs in-process one-shot children. It keeps
// no state between starts and is safe for concurrent use.
type Driver struct {
	deps Deps
	log  *slog.Logger
}

// NewDriver returns a driver over d.
func NewDriver(d Deps) *Driver {
	log := d.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Driver{deps: d, log: log}
}

// Start composes the child of req, publishes it and returns its run with
// the prompt already accepted (R12): the child session exists with its
// header (R46), its seed and delegation policy events (R49) and the
// prompt's turn, all stored in one write, and its agent holds the
// delegation statement (R50), persona, tool filter, structured output
// runtime and one-shot descriptor hook (R48). seed is nil for a fresh
// child. A subagent.Service does not call Start: it stores what Prepare
// composed with the run row, in the same write.
//
// ctx is the request's cancellation until publication. Done on entry, or
// before the child is stored (while the seed is read), Start returns an
// EAborted *subagent.Error and creates nothing (R21, R22). Done once the
// child is stored — with its prompt accepted — the run is returned
// cancelled and settles aborted (R24).
//
// Returns EInvalidRequest for an unknown model route, an invalid maxTokens,
// a persona that is not UTF-8 or a tool filter naming an unknown global tool,
// EUnsupportedSchema for an output schema outside the subset, and other
// (internal) errors when the store fails. Nothing is created on any of
// them.
func (d *Driver) Start(ctx context.Context, req subagent.ResolvedRequest, seed SeedFunc) (subagent.Run, error) {
	p, err := d.Prepare(ctx, req, seed)
	if err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		p.abandon()
		return nil, abortedBefore(ctx)
	}
	hdr, evs := p.Session()
	log, err := d.deps.Store.CreateSessionWithEvents(p.run.base, hdr, evs...)
	if err != nil {
		p.abandon()
		return nil, fmt.Errorf("in-process child: create session: %w", err)
	}
	p.Launch(log, nil)
	if ctx.Err() != nil {
		p.run.Cancel() // published: an abort is a cancellation of the run (R24)
	}
	return p.run, nil
}

// Prepare composes the child of req as Start does, with its agent, and
// stores nothing: the returned child's Session is what Start would store,
// and its run works once launched (subagent.Preparer). Returns Start's
// errors; done on entry or while the seed is read, ctx makes it an
// EAborted *subagent.Error.
func (d *Driver) Prepare(ctx context.Context, req subagent.ResolvedRequest, seed SeedFunc) (*Prepared, error) {
	if ctx.Err() != nil {
		return nil, abortedBefore(ctx)
	}
	c, err := d.compose(req)
	if err != nil {
		return nil, err
	}
	telemetry.NameModelProvider(ctx, c.cfg.ModelProvider)
	if seed != nil {
		if c.seed, err = seed(ctx, req.Parent.Session); err != nil {
			if ctx.Err() != nil {
				return nil, abortedBefore(ctx)
			}
			return nil, fmt.Errorf("in-process child: read seed: %w", err)
		}
		if err := checkSeed(c.seed); err != nil {
			return nil, err
		}
	}
	if ctx.Err() != nil {
		return nil, abortedBefore(ctx)
	}
	// The agent's writes must not be cut half-way by the request's
	// cancellation.
	return d.prepare(context.WithoutCancel(ctx), c)
}

// child is a composed, not yet created child.
type child struct {
	id     string
	header store.Session
	cfg    agent.Config
	prompt []model.Block
	seed   []store.Event
	schema bool
}

// compose builds the child of req without touching the store: route and
// options (R45), header (R46), agent configuration (R47–R51). It returns
// every caller-input error Start documents.
func (d *Driver) compose(req subagent.ResolvedRequest) (child, error) {
	opts, err := childOptions(req)
	if err != nil {
		return child{}, err
	}
	rt, modelName, err := d.resolve(opts)
	if err != nil {
		return child{}, err
	}
	filter, err := d.filter(req.ToolFilter)
	if err != nil {
		return child{}, err
	}
	if req.Persona != nil && !utf8.ValidString(*req.Persona) {
		return child{}, invalid("persona", "persona must be valid UTF-8")
	}
	if req.OutputSchema != nil {
		if v := schema.Check(req.OutputSchema); len(v) > 0 {
			return child{}, subagent.Errorf(subagent.EUnsupportedSchema, "unsupported JSON schema: %s", strings.Join(v, "; "))
		}
	}
	descriptor, err := subagent.SnapshotDescriptor(req.Descriptor)
	if err != nil {
		return child{}, err
	}
	id := uuid.NewString()
	parent := req.Parent.Session
	c := child{
		id:     id,
		prompt: req.Prompt,
		schema: req.OutputSchema != nil,
		header: store.Session{
			ID:              id,
			ParentID:        parent.ID,
			RootID:          store.RootOf(parent),
			Origin:          Origin,
			DelegationDepth: *opts.SubagentDepth,
			Cwd:             parent.Cwd,
			Label:           req.Label,
			Provider:        req.Descriptor.Provider,
			Mode:            subagent.ModeOneShot,
			AgentProvider:   opts.Provider,
			AgentModel:      opts.Model,
			MaxTokens:       opts.MaxTokens,
			Persona:         req.Persona,
			CreatedAt:       time.Now(),
		},
	}
	c.cfg = agent.Config{
		ID:                id,
		Store:             d.deps.Store,
		Logger:            d.log.With(slog.String("child_id", id)),
		Model:             rt.Model,
		ModelName:         modelName,
		MaxTokens:         opts.MaxTokens,
		ModelProvider:     rt.Kind,
		Metrics:           d.deps.Metrics,
		Global:            d.deps.Tools,
		Filter:            filter,
		Sections:          []agent.Section{{Name: DelegationSection, Order: delegationOrder, Text: delegationText}},
		Persona:           req.Persona,
		DeploymentPersona: d.deps.DeploymentPersona,
		Vars:              d.deps.Vars,
		OutputSchema:      req.OutputSchema,
		Gate:              d.deps.Gate,
		// The one-shot descriptor goes inside the first turn, right before
		// the first model step (docs/seam.md §10).
		BeforeFirstStep: func() []store.NewEvent {
			return []store.NewEvent{{Type: sessionlog.EventDescriptor, Data: descriptor}}
		},
	}
	return c, nil
}

// childOptions merges the parent's route with the request's agentOptions
// field-wise and stamps the child depth (R45). Returns EInvalidRequest for
// a maxTokens that is not a positive safe integer.
func childOptions(req subagent.ResolvedRequest) (subagent.AgentOptions, error) {
	o, err := subagent.ChildOptions(req.Parent.Options, req.AgentOptions)
	if err != nil {
		return o, err
	}
	depth := req.ChildDepth
	o.SubagentDepth = &depth
	return o, nil
}

// resolve maps the child's route onto a model. An empty route name means
// the default route, as for root sessions. Returns EInvalidRequest for a
// route that is not configured.
func (d *Driver) resolve(o subagent.AgentOptions) (model.Route, string, error) {
	if d.deps.Routes == nil {
		if o.Provider != "" {
			return model.Route{}, "", invalid("agentOptions.provider", fmt.Sprintf("unknown model route %q (no model routes are configured)", o.Provider))
		}
		return model.Route{}, o.Model, nil
	}
	rt, name, err := d.deps.Routes.Resolve(o.Provider, o.Model)
	if errors.Is(err, model.ErrUnknownRoute) {
		return model.Route{}, "", invalid("agentOptions.provider", err.Error())
	}
	if err != nil {
		return model.Route{}, "", fmt.Errorf("in-process child: resolve model route: %w", err)
	}
	return rt, name, nil
}

// filter checks a tool filter against the global tools registered now
// (docs/seam.md §9, R48), before anything is created. Returns EInvalidRequest
// for a filter with no list, or one naming an unknown global tool or
// run_code.
func (d *Driver) filter(f *subagent.ToolFilter) (*agent.Filter, error) {
	if f == nil {
		return nil, nil
	}
	af := &agent.Filter{Allow: slices.Clone(f.Allow), Deny: slices.Clone(f.Deny)}
	if err := af.Check(d.deps.Tools); err != nil {
		return nil, invalid("toolFilter", err.Error())
	}
	return af, nil
}

// checkSeed enforces the seed contract: contiguous from seq 0.
func checkSeed(seed []store.Event) error {
	for i, e := range seed {
		if e.Seq != int64(i) {
			return fmt.Errorf("in-process child: seed event %d has seq %d; a seed must be contiguous from seq 0", i, e.Seq)
		}
	}
	return nil
}

// prepare builds the agent of c over its setup events — the seed verbatim,
// session/end-seed after it, the approval pin (R49) — and has it prepare
// the prompt's turn; nothing is stored.
func (d *Driver) prepare(ctx context.Context, c child) (*Prepared, error) {
	c.header.SeedLength = len(c.seed)
	setup := make([]store.NewEvent, 0, len(c.seed)+2)
	for _, e := range c.seed {
		setup = append(setup, store.NewEvent{Type: e.Type, Time: e.Time, Data: e.Data})
	}
	if len(c.seed) > 0 {
		setup = append(setup, store.NewEvent{Type: sessionlog.EventEndSeed, Data: []byte(`{}`)})
	}
	setup = append(setup, sessionlog.DelegationPin())
	planned := make([]store.Event, len(setup))
	for i, e := range setup {
		planned[i] = store.Event{Seq: int64(i), Type: e.Type, Time: e.Time, Data: e.Data}
	}
	r := newRun(ctx, d.deps.Store, c, c.cfg.Logger)
	c.cfg.Created = &agent.Created{Header: c.header, Log: planned}
	c.cfg.EndTurn = r.endTurn
	a, err := agent.New(ctx, c.cfg)
	if errors.Is(err, agent.ErrToolFilter) {
		// The registry changed since compose checked the filter.
		return nil, &subagent.Error{Code: subagent.EInvalidRequest, Message: err.Error(), Err: err}
	}
	if err != nil {
		return nil, fmt.Errorf("in-process child: %w", err)
	}
	// Result selection reads only the child's own events (R42): those the
	// agent logs from its prompt on, after the seed and the setup events.
	a.Track()
	r.agent = a
	prompt, err := a.PrepareFollowup(sessionlog.UserMessage{Content: c.prompt, Source: sessionlog.Source{Kind: "user"}})
	if err != nil {
		d.rollback(ctx, a)
		return nil, fmt.Errorf("in-process child: deliver prompt: %w", err)
	}
	return &Prepared{header: c.header, log: append(setup, prompt...), run: r}, nil
}

// Prepared is a child Prepare composed (subagent.PreparedChild).
type Prepared struct {
	header store.Session
	log    []store.NewEvent
	run    *run
}

var _ subagent.PreparedChild = (*Prepared)(nil)

// Session returns the child's header and its log up to the prompt's
// turn: setup events, the prompt's inbox insert and the opening of its
// turn.
func (p *Prepared) Session() (store.Session, []store.NewEvent) { return p.header, p.log }

// Run is the child's run.
func (p *Prepared) Run() subagent.Run { return p.run }

// Launch starts the prompt's turn over log, the child's log as stored;
// settle, if not nil, stores the turn's end with the run's settlement.
func (p *Prepared) Launch(log []store.Event, settle subagent.Settle) { p.run.launch(log, settle) }

// abandon releases a child that was never stored.
func (p *Prepared) abandon() {
	if err := p.run.Dispose(p.run.base); err != nil {
		p.run.log.ErrorContext(p.run.base, "abandon a child that was never stored", slog.Any("error", err))
	}
}

// rollback closes an unpublished child's agent.
func (d *Driver) rollback(ctx context.Context, a *agent.Agent) {
	if err := a.Close(ctx); err != nil {
		d.log.ErrorContext(ctx, "close unpublished child", slog.String("child_id", a.ID()), slog.Any("error", err))
	}
}

// abortedBefore is the start failure of a request that ended before any
// child existed.
func abortedBefore(ctx context.Context) error {
	return &subagent.Error{Code: subagent.EAborted, Message: "subagent request was aborted before child publication",
		Err: context.Cause(ctx)}
}

// invalid is an EInvalidRequest error about one request field.
func invalid(field, msg string) error {
	return &subagent.Error{Code: subagent.EInvalidRequest, Message: msg, Fields: map[string]string{field: msg}}
}
