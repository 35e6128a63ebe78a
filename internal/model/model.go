// Package model defines the streaming model interface that in-process agents
// call, the content and message types they exchange, and the route table that
// maps agentOptions.provider/model onto a concrete Model.
package model

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"strings"

	"github.com/subagentd/subagentd/internal/jsonstr"
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
	return b.appendText(nil), nil
}

// appendText appends {"type":…,"text":…}, as json.Marshal writes that
// struct, without reflection.
func (b Block) appendText(dst []byte) []byte {
	dst = append(dst, `{"type":`...)
	dst = jsonstr.Append(dst, b.Type)
	dst = append(dst, `,"text":`...)
	dst = jsonstr.Append(dst, b.Text)
	return append(dst, '}')
}

// MarshalBlocks returns what json.Marshal(blocks) returns, without
// reflection: null for nil, each Raw compacted and HTML-escaped as
// json.Marshal treats a MarshalJSON result. Returns an error when a Raw is
// not valid JSON.
func MarshalBlocks(blocks []Block) ([]byte, error) {
	if blocks == nil {
		return []byte("null"), nil
	}
	buf := bytes.NewBuffer(make([]byte, 0, 64*len(blocks)+2))
	buf.WriteByte('[')
	for i, b := range blocks {
		if i > 0 {
			buf.WriteByte(',')
		}
		if len(b.Raw) == 0 {
			buf.Write(b.appendText(buf.AvailableBuffer()))
			continue
		}
		if err := json.Compact(buf, b.Raw); err != nil {
			return nil, fmt.Errorf("content block %d: %w", i, err)
		}
	}
	buf.WriteByte(']')
	out := buf.Bytes()
	if bytes.ContainsAny(out, "<>&\u2028\u2029") {
		var esc bytes.Buffer
		json.HTMLEscape(&esc, out)
		out = esc.Bytes()
	}
	return out, nil
}

// UnmarshalJSON reads any JSON object with a string "type" field.
func (b *Block) UnmarshalJSON(data []byte) error {
	if typ, text, ok := plainText(data); ok {
		// The form every encoder of this service writes, decoded without
		// reflection; anything else takes the general path below.
		b.Type, b.Text = typ, text
		b.Raw = append(json.RawMessage(nil), data...)
		return nil
	}
	return b.unmarshalObject(data)
}

// unmarshalObject is UnmarshalJSON's general path, through encoding/json.
func (b *Block) unmarshalObject(data []byte) error {
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

// plainText parses data when it is exactly {"type":"…","text":"…"} or
// {"text":"…","type":"…"}, compact, with a non-empty type and both
// strings free of escapes (jsonstr.Plain): then it holds what
// UnmarshalJSON's general path would decode.
func plainText(data []byte) (typ, text string, ok bool) {
	rest, ok := bytes.CutPrefix(data, []byte(`{"`))
	if !ok {
		return "", "", false
	}
	typeFirst := bytes.HasPrefix(rest, []byte(`type":"`))
	if !typeFirst && !bytes.HasPrefix(rest, []byte(`text":"`)) {
		return "", "", false
	}
	first, rest, ok := plainString(rest[len(`type":"`):])
	if !ok {
		return "", "", false
	}
	key := []byte(`,"text":"`)
	if !typeFirst {
		key = []byte(`,"type":"`)
	}
	if rest, ok = bytes.CutPrefix(rest, key); !ok {
		return "", "", false
	}
	second, rest, ok := plainString(rest)
	if !ok || string(rest) != "}" {
		return "", "", false
	}
	if !typeFirst {
		first, second = second, first
	}
	if len(first) == 0 {
		return "", "", false
	}
	return string(first), string(second), true
}

// plainString returns the string up to the next '"' of data and what
// follows that quote, if the string is jsonstr.Plain.
func plainString(data []byte) (s, rest []byte, ok bool) {
	end := bytes.IndexByte(data, '"')
	if end < 0 || !jsonstr.Plain(data[:end]) {
		return nil, nil, false
	}
	return data[:end], data[end+1:], true
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
