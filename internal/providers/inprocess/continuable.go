package inprocess

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"unicode/utf8"

	"github.com/subagentd/subagentd/internal/agent"
	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
	"github.com/subagentd/subagentd/internal/telemetry"
)

// Materializer builds the live agents of continuable in-process children
// for the children.Manager (docs/seam.md §11–§14): the same composition as
// a one-shot child — model route, delegation statement (R50), persona and
// tool filter over the global tools — but no structured output and no
// descriptor hook, since the manager writes the continuable descriptor
// before the first turn (docs/seam.md §10). Instead every continuable child gets the
// report tool and its prompt section (docs/seam.md §17), scope-local, so no tool
// filter removes them. Safe for concurrent use.
type Materializer struct {
	d *Driver
}

var _ subagent.ChildPreparer = (*Materializer)(nil)

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
	cfg, err := m.config(ctx, req)
	if err != nil {
		return nil, err
	}
	if req.Create != nil {
		if err := req.Create(ctx); err != nil {
			return nil, err
		}
	}
	return m.build(ctx, cfg)
}

// PrepareChild is Materialize for a child not stored yet
// (subagent.ChildPreparer): the agent is built over req.Session and
// req.Log as they will be stored, and prompt is prepared as its first turn
// (agent.Agent.PrepareFollowup). Nothing is read or written.
func (m *Materializer) PrepareChild(ctx context.Context, req subagent.MaterializeRequest, prompt sessionlog.UserMessage) (subagent.PreparedChildAgent, error) {
	cfg, err := m.config(ctx, req)
	if err != nil {
		return subagent.PreparedChildAgent{}, err
	}
	planned := make([]store.Event, len(req.Log))
	for i, e := range req.Log {
		planned[i] = store.Event{Seq: int64(i), Type: e.Type, Time: e.Time, Data: e.Data}
	}
	cfg.Created = &agent.Created{Header: req.Session, Log: planned}
	a, err := m.build(ctx, cfg)
	if err != nil {
		return subagent.PreparedChildAgent{}, err
	}
	opening, err := a.PrepareFollowup(prompt)
	if err != nil {
		m.d.rollback(ctx, a)
		return subagent.PreparedChildAgent{}, fmt.Errorf("continuable child %s: prepare its prompt: %w", req.Session.ID, err)
	}
	return subagent.PreparedChildAgent{Agent: a, Opening: opening, Launch: a.Launch}, nil
}

// config checks req — route, tool filter, persona — and returns the
// agent's configuration, before anything is written.
func (m *Materializer) config(ctx context.Context, req subagent.MaterializeRequest) (agent.Config, error) {
	rt, modelName, err := m.d.resolve(req.Options)
	if err != nil {
		return agent.Config{}, err
	}
	telemetry.NameModelProvider(ctx, rt.Kind)
	filter, err := m.d.filter(req.Descriptor.ToolFilter)
	if err != nil {
		return agent.Config{}, err
	}
	persona := req.Descriptor.Persona
	if persona != nil && !utf8.ValidString(*persona) {
		return agent.Config{}, invalid("persona", "persona must be valid UTF-8")
	}
	id := req.Session.ID
	sections := []agent.Section{{Name: DelegationSection, Order: delegationOrder, Text: delegationText}}
	var locals []agent.Tool
	if req.Report != nil {
		sections = append(sections, agent.Section{Name: ReportSection, Order: reportOrder, Text: reportGuidance})
		locals = append(locals, reportTool(req.Report))
	}
	return agent.Config{
		ID:                id,
		Store:             m.d.deps.Store,
		Logger:            m.d.log.With(slog.String("child_id", id)),
		Model:             rt.Model,
		ModelName:         modelName,
		MaxTokens:         req.Options.MaxTokens,
		ModelProvider:     rt.Kind,
		Metrics:           m.d.deps.Metrics,
		Global:            m.d.deps.Tools,
		Filter:            filter,
		Local:             locals,
		Sections:          sections,
		Persona:           persona,
		DeploymentPersona: m.d.deps.DeploymentPersona,
		Vars:              m.d.deps.Vars,
		Gate:              m.d.deps.Gate,
	}, nil
}

// build makes the agent of cfg.
func (m *Materializer) build(ctx context.Context, cfg agent.Config) (*agent.Agent, error) {
	a, err := agent.New(ctx, cfg)
	if errors.Is(err, agent.ErrToolFilter) {
		// The registry changed since the filter was checked.
		return nil, &subagent.Error{Code: subagent.EInvalidRequest, Message: err.Error(), Err: err}
	}
	if err != nil {
		return nil, fmt.Errorf("continuable child %s: %w", cfg.ID, err)
	}
	return a, nil
}

// The report tool (docs/seam.md §17). Its texts are model-visible; the tests
// pin them.
const (
	// ReportTool is the report tool's name.
	ReportTool = "report"
	// ReportSection is the name of its child-scoped prompt section.
	ReportSection = "tool:report"

	reportOrder       = 117
	reportDescription = "Report selected content to the agent that started you. Call it once before you finish, " +
		"with a self-contained final result, and earlier for findings that change what that agent should do next. " +
		"That agent shares your workspace but not your transcript, tool output or reasoning, so include what it " +
		"needs. Reporting does not end your turn, and only your direct parent receives it. A failed call may still " +
		"have arrived: do not blindly repeat it."
	reportOutputParam = "Actionable content for the agent that started you, self-contained: it cannot see your transcript."
	reportGuidance    = "Before you finish, call " + ReportTool + " once with a self-contained final result for the " +
		"agent that started you, and call it earlier whenever a finding changes what that agent should do next. " +
		"A bare \"done\" gives it nothing to act on. Reporting never ends your turn."
)

// reportParams is the report tool's parameter schema.
var reportParams = func() json.RawMessage {
	raw, err := json.Marshal(map[string]any{"type": "object", "additionalProperties": false, "required": []string{"output"},
		"properties": map[string]any{"output": map[string]any{"type": "string", "description": reportOutputParam}}})
	if err != nil {
		panic(fmt.Sprintf("inprocess: marshal report schema: %v", err))
	}
	return raw
}()

// reportTool is the report tool over send, the manager's
// MaterializeRequest.Report: the output becomes one text block of the
// parent's message; an accepted report answers with its message id, a
// rejected one is an isError result with the manager's message.
func reportTool(send func(context.Context, []model.Block) (string, error)) agent.Tool {
	return agent.Tool{
		Name:        ReportTool,
		Description: reportDescription,
		Parameters:  reportParams,
		Run: func(ctx context.Context, call agent.Call) ([]model.Block, error) {
			if call.Agent == nil {
				return nil, errors.New(ReportTool + " requires a calling agent (exec.agent was undefined)")
			}
			var args struct {
				Output string `json:"output"`
			}
			if err := json.Unmarshal(call.Arguments, &args); err != nil || strings.TrimSpace(args.Output) == "" {
				return nil, errors.New("INVALID_ARGS: " + ReportTool + " needs a non-empty string output")
			}
			id, err := send(ctx, []model.Block{model.TextBlock(args.Output)})
			if err != nil {
				return nil, errors.New(subagent.ErrorMessage(err))
			}
			return []model.Block{model.TextBlock("report accepted by the agent that started you as message " + id)}, nil
		},
	}
}
