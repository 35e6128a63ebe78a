package sessionlog

// Session-log event types that only ACP children write. The agent's
// vocabulary (events.go) has no equivalent: an ACP agent runs its own
// tools, so there is no tool/call that the service executes and answers with
// a tool/result. Readers skip types they do not know.
const (
	// EventACPToolCall records a tool_call update: the agent started a tool.
	EventACPToolCall = "acp/tool-call"
	// EventACPToolCallUpdate records a tool_call_update: progress of one.
	EventACPToolCallUpdate = "acp/tool-call-update"
	// EventACPPlan records the agent's plan; each event replaces the last.
	EventACPPlan = "acp/plan"
	// EventACPPermission records how a session/request_permission was answered.
	EventACPPermission = "acp/permission"
)

// ACPToolCallData is the payload of acp/tool-call and acp/tool-call-update.
// Empty fields were not reported (an update carries only what changed). Raw
// tool input and output are deliberately not logged: they can hold whole
// files, and the log only needs to show what the agent is doing.
type ACPToolCallData struct {
	Turn       int    `json:"turn"`
	ToolCallID string `json:"toolCallId"`
	Title      string `json:"title,omitempty"`
	Kind       string `json:"kind,omitempty"`
	Status     string `json:"status,omitempty"`
}

// ACPPlanData is the payload of acp/plan.
type ACPPlanData struct {
	Turn    int            `json:"turn"`
	Entries []ACPPlanEntry `json:"entries"`
}

// ACPPlanEntry is one task of a plan.
type ACPPlanEntry struct {
	Content  string `json:"content"`
	Priority string `json:"priority,omitempty"`
	Status   string `json:"status,omitempty"`
}

// ACPPermissionData is the payload of acp/permission. Outcome is "selected"
// (OptionID and OptionKind set) or "cancelled".
type ACPPermissionData struct {
	Turn       int    `json:"turn"`
	ToolCallID string `json:"toolCallId"`
	Title      string `json:"title,omitempty"`
	Outcome    string `json:"outcome"`
	OptionID   string `json:"optionId,omitempty"`
	OptionKind string `json:"optionKind,omitempty"`
}

// EventACPSession records the ACP session a continuable child's agent keeps
// its conversation in, so that a later activation — after a restart too —
// resumes that session rather than starting a new one.
const EventACPSession = "acp/session"

// ACPSessionData is the payload of acp/session.
type ACPSessionData struct {
	SessionID string `json:"sessionId"`
}
