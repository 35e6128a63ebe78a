package acp

// Session-log event types that only ACP children write. The agent vocabulary
// (internal/agent/events.go) has no equivalent: an ACP agent runs its own
// tools, so there is no tool/call that the service executes and answers with
// a tool/result. Readers skip types they do not know.
const (
	// EventToolCall records a tool_call update: the agent started a tool.
	EventToolCall = "acp/tool-call"
	// EventToolCallUpdate records a tool_call_update: progress of one.
	EventToolCallUpdate = "acp/tool-call-update"
	// EventPlan records the agent's plan; each event replaces the last.
	EventPlan = "acp/plan"
	// EventPermission records how a session/request_permission was answered.
	EventPermission = "acp/permission"
)

// ToolCallData is the payload of acp/tool-call and acp/tool-call-update.
// Empty fields were not reported (an update carries only what changed). Raw
// tool input and output are deliberately not logged: they can hold whole
// files, and the log only needs to show what the agent is doing.
type ToolCallData struct {
	Turn       int    `json:"turn"`
	ToolCallID string `json:"toolCallId"`
	Title      string `json:"title,omitempty"`
	Kind       string `json:"kind,omitempty"`
	Status     string `json:"status,omitempty"`
}

// PlanData is the payload of acp/plan.
type PlanData struct {
	Turn    int         `json:"turn"`
	Entries []PlanEntry `json:"entries"`
}

// PlanEntry is one task of a plan.
type PlanEntry struct {
	Content  string `json:"content"`
	Priority string `json:"priority,omitempty"`
	Status   string `json:"status,omitempty"`
}

// PermissionData is the payload of acp/permission. Outcome is "selected"
// (OptionID and OptionKind set) or "cancelled".
type PermissionData struct {
	Turn       int    `json:"turn"`
	ToolCallID string `json:"toolCallId"`
	Title      string `json:"title,omitempty"`
	Outcome    string `json:"outcome"`
	OptionID   string `json:"optionId,omitempty"`
	OptionKind string `json:"optionKind,omitempty"`
}
