package inprocess

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"unicode/utf8"

	"github.com/subagentd/subagentd/internal/agent"
	"github.com/subagentd/subagentd/internal/subagent"
)

// Materializer builds the live agents of continuable in-process children
// for the subagent.Manager (seam-spec §2.8–§2.11): the same composition as
// a one-shot child — model route, delegation statement (R50), persona and
// tool filter over the global tools — but no structured output and no
// descriptor hook, since the manager writes the continuable descriptor
// before the first turn (§3.4). Safe for concurrent use.
type Materializer struct {
	d *Driver
}

var _ subagent.Materializer = (*Materializer)(nil)

// NewMaterializer returns the materializer over d.
func NewMaterializer(d Deps) *Materializer {
	return &Materializer{d: NewDriver(d)}
}

// Materialize resolves req's route, checks its descriptor's persona and
// tool filter, then — on creation — calls req.Create, and builds the agent
// over the child's log. On resume the agent continues where the log ends
// (turn numbering, crash repair); nothing is written but the agent's own
// repair. ctx's tenant scopes the agent for its whole life.
//
// Returns EInvalidRequest, before req.Create, for a route that is not
// configured, a persona that is not UTF-8 or a tool filter naming an
// unknown global tool; Create's error unchanged; other (internal) errors
// when the log cannot be read.
func (m *Materializer) Materialize(ctx context.Context, req subagent.MaterializeRequest) (subagent.ChildAgent, error) {
	mdl, modelName, err := m.d.resolve(req.Options)
	if err != nil {
		return nil, err
	}
	filter, err := m.d.filter(req.Descriptor.ToolFilter)
	if err != nil {
		return nil, err
	}
	persona := req.Descriptor.Persona
	if persona != nil && !utf8.ValidString(*persona) {
		return nil, invalid("persona", "persona must be valid UTF-8")
	}
	if req.Create != nil {
		if err := req.Create(ctx); err != nil {
			return nil, err
		}
	}
	id := req.Session.ID
	a, err := agent.New(ctx, agent.Config{
		ID:                id,
		Store:             m.d.deps.Store,
		Logger:            m.d.log.With(slog.String("child_id", id)),
		Model:             mdl,
		ModelName:         modelName,
		MaxTokens:         req.Options.MaxTokens,
		Global:            m.d.deps.Tools,
		Filter:            filter,
		Sections:          []agent.Section{{Name: DelegationSection, Order: delegationOrder, Text: delegationText}},
		Persona:           persona,
		DeploymentPersona: m.d.deps.DeploymentPersona,
		Vars:              m.d.deps.Vars,
	})
	if errors.Is(err, agent.ErrToolFilter) {
		// The registry changed since the filter was checked.
		return nil, &subagent.Error{Code: subagent.EInvalidRequest, Message: err.Error(), Err: err}
	}
	if err != nil {
		return nil, fmt.Errorf("continuable child %s: %w", id, err)
	}
	return a, nil
}
