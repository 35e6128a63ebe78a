package sessionlog

import (
	"encoding/json"

	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/store"
)

// Session-log event types of turns, steps, messages and the inbox
// (docs/seam.md §1), written by the agent and the providers. The vocabulary is open:
// readers must skip types they do not know.
const (
	EventTurnStart        = store.TurnStartEvent
	EventTurnEnd          = store.TurnEndEvent
	EventStepStart        = "step/start"
	EventStepEnd          = "step/end"
	EventUserMessage      = "user/message"
	EventAssistantChunk   = "assistant/chunk"
	EventAssistantMessage = "assistant/message"
	EventToolCall         = "tool/call"
	EventToolResult       = "tool/result"
	EventInboxSpliced     = "agent/inbox/spliced"
	EventEndSeed          = "session/end-seed"
	EventApprovalPolicy   = "approval/policy"
)

// Turn end reason kinds (turn/end reason.kind). Open set.
const (
	ReasonCompleted   = "completed"
	ReasonAborted     = "aborted"
	ReasonBlocked     = "blocked"
	ReasonError       = "error"
	ReasonMaxTokens   = "max-tokens"
	ReasonInterrupted = "interrupted"
	// ReasonBudgetExhausted and ReasonDeadlineExceeded end a turn whose
	// tree spent its token budget or passed its deadline, at its next
	// step (internal/governance).
	ReasonBudgetExhausted  = "budget_exhausted"
	ReasonDeadlineExceeded = "deadline_exceeded"
)

// Cancel causes (turn/end reason.reason.kind for aborted turns).
const (
	CauseUser     = "user"
	CauseParent   = "parent"
	CauseDisposed = "disposed"
)

// TurnData is the payload of turn/start.
type TurnData struct {
	Turn int `json:"turn"`
}

// TurnEndData is the payload of turn/end.
type TurnEndData struct {
	Turn   int        `json:"turn"`
	Reason TurnReason `json:"reason"`
}

// TurnReason says why a turn ended. Cause is set for aborted turns; Message
// (safe to show) for error turns.
type TurnReason struct {
	Kind    string `json:"kind"`
	Cause   *Cause `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	Code    string `json:"code,omitempty"`
}

// Cause is who cancelled a turn.
type Cause struct {
	Kind string `json:"kind"`
}

// StepData is the payload of step/start and step/end.
type StepData struct {
	Turn int `json:"turn"`
	Step int `json:"step"`
}

// Source attributes a user-role message (docs/seam.md §1). It grants nothing.
type Source struct {
	Kind            string `json:"kind"`
	Form            string `json:"form,omitempty"`
	Summary         string `json:"summary,omitempty"`
	SenderSessionID string `json:"senderSessionId,omitempty"`
	// Label is the sender's label, so that a reader can name it: set on
	// settlement notices (R77).
	Label string `json:"label,omitempty"`
}

// UserMessage is the payload of user/message and the unit of the inbox.
type UserMessage struct {
	ID      string        `json:"id"`
	Role    string        `json:"role"` // always "user"
	Content []model.Block `json:"content"`
	Source  Source        `json:"source"`
}

// ChunkData is the payload of assistant/chunk.
type ChunkData struct {
	Turn  int   `json:"turn"`
	Step  int   `json:"step"`
	Chunk Chunk `json:"chunk"`
}

// Chunk is one stream delta as logged. Type is a model.ChunkKind value.
type Chunk struct {
	Type         string `json:"type"`
	Text         string `json:"text,omitempty"`
	CallID       string `json:"callId,omitempty"`
	Name         string `json:"name,omitempty"`
	Arguments    string `json:"arguments,omitempty"`
	InputTokens  int    `json:"inputTokens,omitempty"`
	OutputTokens int    `json:"outputTokens,omitempty"`
	FinishReason string `json:"finishReason,omitempty"`
}

// AssistantMessageData is the payload of assistant/message. Content holds
// text blocks and {"type":"tool-call","callId","name","arguments"} blocks; it
// may be empty (a usage-only record).
type AssistantMessageData struct {
	Turn        int              `json:"turn"`
	Step        int              `json:"step"`
	Message     AssistantMessage `json:"message"`
	Usage       *UsageData       `json:"usage,omitempty"`
	Interrupted bool             `json:"interrupted,omitempty"`
}

// AssistantMessage is the assembled message of one step.
type AssistantMessage struct {
	Role    string        `json:"role"` // always "assistant"
	Content []model.Block `json:"content"`
}

// UsageData counts the tokens of one step.
type UsageData struct {
	InputTokens  int `json:"inputTokens"`
	OutputTokens int `json:"outputTokens"`
}

// ToolCallData is the payload of tool/call. Arguments is raw JSON text.
type ToolCallData struct {
	Turn      int    `json:"turn"`
	Step      int    `json:"step"`
	CallID    string `json:"callId"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// ToolResultData is the payload of tool/result.
type ToolResultData struct {
	Turn    int           `json:"turn"`
	Step    int           `json:"step"`
	CallID  string        `json:"callId"`
	Name    string        `json:"name"`
	Content []model.Block `json:"content"`
	IsError bool          `json:"isError,omitempty"`
}

// Inbox splice targets.
const (
	TargetNextTurn = "next-turn"
	TargetNextStep = "next-step"
)

// InboxSplicedData is the payload of agent/inbox/spliced: an insert
// (Inserted set), a claim (RemovedCount, no Outcome) or a cancel (Outcome
// "canceled").
type InboxSplicedData struct {
	Target       string        `json:"target"`
	Start        int           `json:"start"`
	RemovedCount int           `json:"removedCount,omitempty"`
	Inserted     []UserMessage `json:"inserted"`
	Outcome      string        `json:"outcome,omitempty"`
}

// OutcomeCanceled marks an inbox splice that discarded accepted messages.
const OutcomeCanceled = "canceled"

// PolicyData is the payload of approval/policy.
type PolicyData struct {
	Policy string `json:"policy"`
	Source string `json:"source"`
}

// DelegationPin is the approval/policy event that pins a delegated child
// to approval policy never (R49), written in its creation log before its
// first turn.
func DelegationPin() store.NewEvent {
	return store.NewEvent{Type: EventApprovalPolicy, Data: json.RawMessage(`{"policy":"never","source":"delegation"}`), Marshaled: true}
}
