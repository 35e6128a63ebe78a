package delegate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/subagentd/subagentd/internal/agent"
	"github.com/subagentd/subagentd/internal/children"
	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// Control tool names (docs/seam.md §23).
const (
	SendMessageTool    = "send_message"
	InterruptAgentTool = "interrupt_agent"
	ListAgentsTool     = "list_agents"
)

// List scopes of list_agents.
const (
	ScopeChildren    = "children"
	ScopeDescendants = "descendants"
)

// Statuses list_agents shows: running while the child has a live
// activation, ready when it is stored and resumable with nothing to collect.
// There is no "idle" status — resident but not working — because an
// activation settles when its turn ends.
const (
	statusRunning = "running"
	statusReady   = "ready"
)

const (
	sendMessageDescription = "Send a message to one of your background subagents by its id, continuing the same conversation. " +
		"If the subagent is working, the message joins its current turn at its next step; otherwise it starts the " +
		"subagent's next turn. You get no answer from the subagent here, only the confirmation of delivery; you are " +
		"sent a notice when it finishes. A failure means the message was NOT delivered."
	interruptDescription = "Request cancellation of the current turn of one of your background agents: a direct subagent " +
		"or one further down your tree. Only the current turn stops: messages not yet delivered wait for your next " +
		"send_message, agents it started keep running, and it stays available. Returns once the request is accepted; " +
		"an agent that is not working is left as it is."
	listAgentsDescription = "List your background subagents by id and label, to recall them — not to poll: you are sent " +
		"a notice when one finishes. Status running: working now; ready: stored and resumable, nothing to collect. " +
		"Any direct subagent can receive send_message, whatever its status. Subagents that cannot be read appear as " +
		"diagnostics. With scope \"descendants\" the whole tree is listed in pre-order with each entry's parent and " +
		"depth; only depth-1 entries take send_message, deeper ones are interrupt_agent candidates only. " +
		"The list is a snapshot, not a delivery promise."
)

// controlTools returns send_message, interrupt_agent and list_agents. They
// are sequential tools: two messages to one child in one step are accepted
// in the model's order.
func (t *Tools) controlTools() []agent.Tool {
	str := func(desc string) map[string]any { return map[string]any{"type": "string", "description": desc} }
	return []agent.Tool{
		{
			Name:        SendMessageTool,
			Description: sendMessageDescription,
			Parameters: mustJSON(map[string]any{"type": "object", "additionalProperties": false,
				"required": []string{"subagent_id", "message"},
				"properties": map[string]any{
					"subagent_id": str("The id the subagent was started with (\"started subagent <id>\")."),
					"message":     str("The message: self-contained instructions or information for the subagent."),
				}}),
			Run: t.sendMessage,
		},
		{
			Name:        InterruptAgentTool,
			Description: interruptDescription,
			Parameters: mustJSON(map[string]any{"type": "object", "additionalProperties": false,
				"required":   []string{"agent_id"},
				"properties": map[string]any{"agent_id": str("The id of the agent whose current turn to stop.")}}),
			Run: t.interruptAgent,
		},
		{
			Name:        ListAgentsTool,
			Description: listAgentsDescription,
			Parameters: mustJSON(map[string]any{"type": "object", "additionalProperties": false,
				"properties": map[string]any{"scope": map[string]any{"type": "string",
					"enum": []string{ScopeChildren, ScopeDescendants}, "default": ScopeChildren,
					"description": "children (default): your direct subagents; descendants: your whole subagent tree."}}}),
			Run: t.listAgents,
		},
	}
}

// args decodes a control tool's arguments, requiring the calling agent.
func args[T any](name string, call agent.Call) (T, error) {
	var v T
	if call.Agent == nil {
		return v, fmt.Errorf("%s requires a calling agent (exec.agent was undefined)", name)
	}
	if err := json.Unmarshal(call.Arguments, &v); err != nil {
		return v, fmt.Errorf("INVALID_ARGS: %s arguments do not match its parameters", name)
	}
	return v, nil
}

// sendMessage is send_message: a followup from the calling agent, attributed
// as coordinator relay. The answer says honestly where the message went.
func (t *Tools) sendMessage(ctx context.Context, call agent.Call) ([]model.Block, error) {
	a, err := args[struct {
		SubagentID string `json:"subagent_id"`
		Message    string `json:"message"`
	}](SendMessageTool, call)
	if err != nil {
		return nil, err
	}
	if a.SubagentID == "" || strings.TrimSpace(a.Message) == "" {
		return nil, fmt.Errorf("INVALID_ARGS: %s needs subagent_id and a non-empty message", SendMessageTool)
	}
	caller := call.Agent.ID()
	res, err := t.conts.Followup(ctx, caller, a.SubagentID, text(a.Message),
		sessionlog.Source{Kind: subagent.SourceCoordinator, Form: "relay", SenderSessionID: caller})
	if err != nil {
		return nil, t.safe(ctx, "send_message", err)
	}
	switch res.Route {
	case subagent.RouteSteered:
		return text("message steered into the current turn of subagent " + a.SubagentID), nil
	case subagent.RouteParked:
		return text("message parked for subagent " + a.SubagentID + ": an interrupt stopped it; the message runs when you next send it a message"), nil
	}
	return text("message queued as the next turn for subagent " + a.SubagentID), nil
}

// interruptAgent is interrupt_agent. The caller may interrupt any agent
// below it (ancestor authority, docs/seam.md §23): the tool checks that the
// caller is on the target's durable parent chain, then asks the manager on
// behalf of the target's direct parent.
func (t *Tools) interruptAgent(ctx context.Context, call agent.Call) ([]model.Block, error) {
	a, err := args[struct {
		AgentID string `json:"agent_id"`
	}](InterruptAgentTool, call)
	if err != nil {
		return nil, err
	}
	if a.AgentID == "" {
		return nil, fmt.Errorf("INVALID_ARGS: %s needs agent_id", InterruptAgentTool)
	}
	parentID, err := t.descendantParent(ctx, call.Agent.ID(), a.AgentID)
	if err != nil {
		return nil, err
	}
	if err := t.conts.Interrupt(ctx, parentID, a.AgentID); err != nil {
		return nil, t.safe(ctx, "interrupt_agent", err)
	}
	return text("interrupt requested for agent " + a.AgentID), nil
}

// descendantParent returns the durable parent of targetID after checking
// that callerID is one of its ancestors. Self, siblings, unrelated and
// unknown sessions are refused with a message safe for the model.
func (t *Tools) descendantParent(ctx context.Context, callerID, targetID string) (string, error) {
	target, err := t.store.GetSession(ctx, targetID)
	if errors.Is(err, store.ErrNotFound) {
		return "", fmt.Errorf("agent %s is unavailable: no such session", targetID)
	}
	if err != nil {
		return "", t.safe(ctx, "interrupt_agent", err)
	}
	seen := map[string]bool{targetID: true}
	for id := target.ParentID; id != "" && !seen[id]; {
		if id == callerID {
			return target.ParentID, nil
		}
		seen[id] = true
		hdr, err := t.store.GetSession(ctx, id)
		if err != nil {
			break
		}
		id = hdr.ParentID
	}
	return "", fmt.Errorf("agent %s is not one of your subagents: only agents started below this session can be interrupted", targetID)
}

// listAgents is list_agents (docs/seam.md §23 projection and rendering).
func (t *Tools) listAgents(ctx context.Context, call agent.Call) ([]model.Block, error) {
	a, err := args[struct {
		Scope string `json:"scope"`
	}](ListAgentsTool, call)
	if err != nil {
		return nil, err
	}
	var entries []children.ListEntry
	switch a.Scope {
	case "", ScopeChildren:
		entries, err = t.conts.Children(ctx, call.Agent.ID())
	case ScopeDescendants:
		entries, err = t.conts.Descendants(ctx, call.Agent.ID())
	default:
		return nil, fmt.Errorf("INVALID_ARGS: scope must be %q or %q", ScopeChildren, ScopeDescendants)
	}
	if err != nil {
		return nil, t.safe(ctx, "list_agents", err)
	}
	return text(RenderAgents(entries, a.Scope == ScopeDescendants)), nil
}

// RenderAgents renders a listing as list_agents shows it: one line per entry
// in service order, "<id> [<status>] — <label>" or "<id> [diagnostic:
// <reason>]", with " parent=<id> depth=<n>" before the label (after the
// diagnostic bracket) when tree is set; one-shot children are left out;
// "(no subagents)" when nothing remains.
func RenderAgents(entries []children.ListEntry, tree bool) string {
	var lines []string
	for _, e := range entries {
		var b strings.Builder
		b.WriteString(e.ID)
		switch {
		case e.Kind == children.EntryDiagnostic:
			fmt.Fprintf(&b, " [diagnostic: %s]", e.Reason)
		case e.Mode == subagent.ModeContinuable:
			status := statusReady
			if e.Activity == subagent.ActivityRunning {
				status = statusRunning
			}
			fmt.Fprintf(&b, " [%s]", status)
		default:
			continue // one-shot children are not addressable
		}
		if tree {
			fmt.Fprintf(&b, " parent=%s depth=%d", e.ParentID, e.Depth)
		}
		if e.Kind != children.EntryDiagnostic {
			b.WriteString(" — " + e.Label)
		}
		lines = append(lines, b.String())
	}
	if len(lines) == 0 {
		return "(no subagents)"
	}
	return strings.Join(lines, "\n")
}
