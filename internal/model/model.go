// Package model defines the streaming model interface that in-process agents
// call, the content and message types they exchange, and the route table that
// maps agentOptions.provider/model onto a concrete Model.
package model

import (
	"context"
	"encoding/json"
	"errors"
	"iter"
	"strings"
)

// Block is one content block. Text blocks carry Text; every block keeps its
// original JSON object in Raw so that block types the service does not
// interpret (reasoning, tool-call, tool-result, image) round-trip unchanged.
type Block struct {
	Type string
	Text string
	Raw  json.RawMessage
}

// TextBlock returns a text block holding s.
func TextBlock(s string) Block { return Block{Type: "text", Text: s} }

// MarshalJSON writes Raw when present and otherwise {"type":…,"text":…}.
func (b Block) MarshalJSON() ([]byte, error) {
	if len(b.Raw) > 0 {
		return b.Raw, nil
	}
	return json.Marshal(struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}{b.Type, b.Text})
}

// UnmarshalJSON reads any JSON object with a string "type" field.
func (b *Block) UnmarshalJSON(data []byte) error {
	var head struct {
		Type *string `json:"type"`
		Text *string `json:"text"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return errors.New("content block must be an object")
	}
	if head.Type == nil || *head.Type == "" {
		return errors.New(`content block needs a string "type"`)
	}
	b.Type = *head.Type
	b.Text = ""
	if head.Text != nil {
		b.Text = *head.Text
	}
	if b.Type == "text" && head.Text == nil {
		return errors.New(`text block needs a string "text"`)
	}
	b.Raw = append(json.RawMessage(nil), data...)
	return nil
}

// Text concatenates the text of every text block.
func Text(blocks []Block) string {
	var sb strings.Builder
	for _, b := range blocks {
		if b.Type == "text" {
			sb.WriteString(b.Text)
		}
	}
	return sb.String()
}

// Role is who authored a message in model history.
type Role string

const (
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
)

// Message is one entry of the model history. Assistant messages may carry
// ToolCalls; tool messages answer one call by ToolCallID.
type Message struct {
	Role       Role
	Content    []Block
	ToolCalls  []ToolCall
	ToolCallID string
	IsError    bool
}

// ToolCall is a model's request to run a tool. Arguments is raw JSON text.
type ToolCall struct {
	ID        string
	Name      string
	Arguments string
}

// ToolSpec is a tool as the model sees it. Parameters is a JSON Schema object.
type ToolSpec struct {
	Name        string
	Description string
	Parameters  json.RawMessage
}

// Request is one model step.
type Request struct {
	Model     string
	System    string
	Messages  []Message
	Tools     []ToolSpec
	MaxTokens int
}

// ChunkKind names a stream delta; the values are the assistant/chunk kinds of
// the session log.
type ChunkKind string

const (
	ChunkText      ChunkKind = "text-delta"
	ChunkReasoning ChunkKind = "reasoning-delta"
	ChunkToolCall  ChunkKind = "tool-call"
	ChunkUsage     ChunkKind = "usage"
	ChunkFinish    ChunkKind = "finish"
)

// FinishReason says why a step ended.
type FinishReason string

const (
	FinishStop      FinishReason = "stop"
	FinishToolCalls FinishReason = "tool-calls"
	FinishMaxTokens FinishReason = "max-tokens"
	FinishRefusal   FinishReason = "refusal"
)

// Usage counts tokens of one step.
type Usage struct {
	InputTokens  int
	OutputTokens int
}

// Chunk is one streamed delta. Exactly one of Text, ToolCall, Usage or
// FinishReason is meaningful, according to Kind. A ChunkToolCall carries a
// complete call: adapters assemble partial deltas before yielding.
type Chunk struct {
	Kind         ChunkKind
	Text         string
	ToolCall     *ToolCall
	Usage        *Usage
	FinishReason FinishReason
}

// Model streams one step. Implementations stop promptly when ctx is done and
// then yield ctx.Err(). An error yielded mid-stream ends the step; its
// message must be safe to show (no keys, no request bodies).
type Model interface {
	Stream(ctx context.Context, req Request) iter.Seq2[Chunk, error]
}
