// Package echo is the offline default model: deterministic, no network. It
// streams "echo: <last user message>" word by word, and it drives tool use so
// that delegation and structured output work without a real model:
//
//   - a user line "/call <tool> <json-args>" makes it call that tool (when the
//     request offers it); after the tool result it answers
//     "echo: <tool result text>";
//   - when the request offers a structured_output tool, every answer ends with
//     a call to it whose arguments satisfy the tool's parameter schema;
//   - a user line "/sleep <duration>" (Go syntax, say 2s; at most MaxSleep)
//     makes it wait that long before it answers, or until the request's
//     context ends, so that steering, interrupts and cancellation can be
//     tried offline.
package echo

import (
	"bytes"
	"context"
	"encoding/json"
	"iter"
	"strconv"
	"strings"
	"time"

	"github.com/subagentd/subagentd/internal/model"
)

// StructuredOutputTool is the tool name echo answers with a schema-valid
// value.
const StructuredOutputTool = "structured_output"

// MaxSleep bounds a "/sleep" pause; a longer one waits MaxSleep.
const MaxSleep = 5 * time.Minute

// Model is the echo model. The zero value is ready to use and safe for
// concurrent use.
type Model struct{}

var _ model.Model = Model{}

// New returns the echo model.
func New() Model { return Model{} }

// Stream answers req deterministically; it stops with ctx.Err() when ctx
// ends during a "/sleep" pause or between chunks.
func (Model) Stream(ctx context.Context, req model.Request) iter.Seq2[model.Chunk, error] {
	return func(yield func(model.Chunk, error) bool) {
		if d := pause(req); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-ctx.Done():
				t.Stop()
				yield(model.Chunk{}, ctx.Err())
				return
			case <-t.C:
			}
		}
		send := func(c model.Chunk) bool {
			if err := ctx.Err(); err != nil {
				yield(model.Chunk{}, err)
				return false
			}
			return yield(c, nil)
		}
		text, calls := answer(req)
		out := 0
		for _, w := range strings.SplitAfter(text, " ") {
			if w == "" {
				continue
			}
			out++
			if !send(model.Chunk{Kind: model.ChunkText, Text: w}) {
				return
			}
		}
		for _, c := range calls {
			if !send(model.Chunk{Kind: model.ChunkToolCall, ToolCall: &c}) {
				return
			}
			out++
		}
		if !send(model.Chunk{Kind: model.ChunkUsage, Usage: &model.Usage{InputTokens: inputWords(req), OutputTokens: out}}) {
			return
		}
		finish := model.FinishStop
		if len(calls) > 0 {
			finish = model.FinishToolCalls
		}
		send(model.Chunk{Kind: model.ChunkFinish, FinishReason: finish})
	}
}

// answer decides the reply text and tool calls for req.
func answer(req model.Request) (string, []model.ToolCall) {
	offered := map[string]model.ToolSpec{}
	for _, t := range req.Tools {
		offered[t.Name] = t
	}
	callID := "echo-" + strconv.Itoa(len(req.Messages))
	var last model.Message
	if n := len(req.Messages); n > 0 {
		last = req.Messages[n-1]
	}
	lastText := model.Text(last.Content)
	if last.Role == model.RoleUser {
		if name, args, ok := parseCall(lastText); ok {
			if _, ok := offered[name]; ok {
				return "", []model.ToolCall{{ID: callID, Name: name, Arguments: args}}
			}
		}
	}
	reply := "echo: " + lastText
	spec, structured := offered[StructuredOutputTool]
	if !structured || (last.Role == model.RoleTool && toolName(req.Messages, last.ToolCallID) == StructuredOutputTool) {
		return reply, nil
	}
	// Value only returns decoded JSON data, which always marshals.
	args, _ := json.Marshal(Value(spec.Parameters))
	return reply, []model.ToolCall{{ID: callID, Name: StructuredOutputTool, Arguments: string(args)}}
}

// pause is how long req's "/sleep" line asks to wait: the first such line
// of the last message, when a user wrote it; 0 when there is none or its
// duration does not parse.
func pause(req model.Request) time.Duration {
	n := len(req.Messages)
	if n == 0 || req.Messages[n-1].Role != model.RoleUser {
		return 0
	}
	for line := range strings.Lines(model.Text(req.Messages[n-1].Content)) {
		rest, found := strings.CutPrefix(strings.TrimSpace(line), "/sleep ")
		if !found {
			continue
		}
		d, err := time.ParseDuration(strings.TrimSpace(rest))
		if err != nil {
			return 0
		}
		return min(max(d, 0), MaxSleep)
	}
	return 0
}

// parseCall finds the first line of the form "/call <tool> <json-args>"
// (args default to {}).
func parseCall(text string) (name, args string, ok bool) {
	for line := range strings.Lines(text) {
		rest, found := strings.CutPrefix(strings.TrimSpace(line), "/call ")
		if !found {
			continue
		}
		name, args, _ = strings.Cut(strings.TrimSpace(rest), " ")
		args = strings.TrimSpace(args)
		if args == "" {
			args = "{}"
		}
		return name, args, name != ""
	}
	return "", "", false
}

// toolName returns the name of the assistant tool call with id.
func toolName(msgs []model.Message, id string) string {
	for i := len(msgs) - 1; i >= 0; i-- {
		for _, c := range msgs[i].ToolCalls {
			if c.ID == id {
				return c.Name
			}
		}
	}
	return ""
}

func inputWords(req model.Request) int {
	n := words(req.System)
	for _, m := range req.Messages {
		n += words(model.Text(m.Content))
	}
	return n
}

// words is len(strings.Fields(s)) without building the slice: the system
// prompt alone is dozens of words, every step.
func words(s string) int {
	n := 0
	for range strings.FieldsSeq(s) {
		n++
	}
	return n
}

// Value returns a JSON value satisfying schema, a schema of the
// output-schema subset (docs/seam.md §9): const or the first enum value, the first oneOf branch, an
// object with its required properties, [] for arrays, "echo" for strings, 0
// for numbers, false for booleans, null otherwise.
func Value(schema json.RawMessage) any {
	dec := json.NewDecoder(bytes.NewReader(schema))
	dec.UseNumber()
	var node any
	if err := dec.Decode(&node); err != nil {
		return map[string]any{}
	}
	return value(node)
}

func value(node any) any {
	n, ok := node.(map[string]any)
	if !ok {
		return nil
	}
	if c, ok := n["const"]; ok {
		return c
	}
	if e, ok := n["enum"].([]any); ok && len(e) > 0 {
		return e[0]
	}
	if o, ok := n["oneOf"].([]any); ok && len(o) > 0 {
		return value(o[0])
	}
	switch n["type"] {
	case "object":
		obj := map[string]any{}
		props, _ := n["properties"].(map[string]any)
		req, _ := n["required"].([]any)
		for _, r := range req {
			if name, ok := r.(string); ok {
				obj[name] = value(props[name])
			}
		}
		return obj
	case "array":
		return []any{}
	case "string":
		return "echo"
	case "number", "integer":
		return 0
	case "boolean":
		return false
	}
	return nil
}
