package openai

import (
	"cmp"
	"crypto/rand"
	"encoding/json"
	"slices"
	"strings"

	sdk "github.com/openai/openai-go/v3"

	"github.com/subagentd/subagentd/internal/model"
)

// assembler folds the chunks of one stream: it turns content, refusal and
// reasoning deltas into chunks at once and collects tool-call fragments,
// usage and the finish reason for the end of the stream. Only choice 0 is
// read; requests never ask for more.
type assembler struct {
	calls   []toolCall // in order of their first fragment
	usage   *model.Usage
	finish  string // the raw finish_reason; empty until the server sends one
	refused bool
}

// add returns the chunks to yield now for c.
func (a *assembler) add(c sdk.ChatCompletionChunk) []model.Chunk {
	if c.JSON.Usage.Valid() {
		a.usage = &model.Usage{InputTokens: int(c.Usage.PromptTokens), OutputTokens: int(c.Usage.CompletionTokens)}
	}
	var out []model.Chunk
	for _, ch := range c.Choices {
		if ch.Index != 0 {
			continue
		}
		d := ch.Delta
		if r := reasoning(d.RawJSON()); r != "" {
			out = append(out, model.Chunk{Kind: model.ChunkReasoning, Text: r})
		}
		if d.Content != "" {
			out = append(out, model.Chunk{Kind: model.ChunkText, Text: d.Content})
		}
		if d.Refusal != "" {
			a.refused = true
			out = append(out, model.Chunk{Kind: model.ChunkText, Text: d.Refusal})
		}
		for _, tc := range d.ToolCalls {
			a.addCall(tc)
		}
		if ch.FinishReason != "" {
			a.finish = ch.FinishReason
		}
	}
	return out
}

// toolCall is a call being assembled, with the server's index for it.
type toolCall struct {
	index int64
	model.ToolCall
}

// addCall merges one tool-call fragment into the latest call with its
// index: the id and name usually come in the first fragment of an index
// only, the arguments in pieces. A fragment carrying a different id starts
// a new call, for servers that leave out the index (so it reads 0) or reuse
// it for parallel calls.
func (a *assembler) addCall(tc sdk.ChatCompletionChunkChoiceDeltaToolCall) {
	var call *model.ToolCall
	for i := len(a.calls) - 1; i >= 0; i-- {
		if a.calls[i].index == tc.Index {
			call = &a.calls[i].ToolCall
			break
		}
	}
	if call == nil || (tc.ID != "" && call.ID != "" && tc.ID != call.ID) {
		a.calls = append(a.calls, toolCall{index: tc.Index})
		call = &a.calls[len(a.calls)-1].ToolCall
	}
	if call.ID == "" {
		call.ID = tc.ID
	}
	if call.Name == "" {
		call.Name = tc.Function.Name
	}
	call.Arguments += tc.Function.Arguments
}

// reasoning returns the reasoning text of a delta, read from its raw JSON
// because the SDK does not model it: servers put it in reasoning_content
// (DeepSeek, llama.cpp) or reasoning (vLLM, Ollama).
func reasoning(raw string) string {
	if !strings.Contains(raw, `"reasoning`) {
		return ""
	}
	var d struct {
		ReasoningContent json.RawMessage `json:"reasoning_content"`
		Reasoning        json.RawMessage `json:"reasoning"`
	}
	if json.Unmarshal([]byte(raw), &d) != nil {
		return ""
	}
	// A field of another shape (null, an object) carries no text.
	var content, other string
	_ = json.Unmarshal(d.ReasoningContent, &content)
	_ = json.Unmarshal(d.Reasoning, &other)
	return cmp.Or(content, other)
}

// finished reports whether the server ended the step: a stream that stops
// before a finish reason was cut off.
func (a *assembler) finished() bool { return a.finish != "" }

// final returns the chunks that close a finished stream: the tool calls in
// index order (then arrival order), the usage when reported, and the finish
// reason.
func (a *assembler) final() []model.Chunk {
	var out []model.Chunk
	slices.SortStableFunc(a.calls, func(x, y toolCall) int { return cmp.Compare(x.index, y.index) })
	for _, tc := range a.calls {
		call := tc.ToolCall
		if call.ID == "" {
			// Some servers omit ids; tool results need one to refer to.
			call.ID = "call_" + rand.Text()
		}
		call.Arguments = cmp.Or(call.Arguments, "{}")
		out = append(out, model.Chunk{Kind: model.ChunkToolCall, ToolCall: &call})
	}
	if a.usage != nil {
		out = append(out, model.Chunk{Kind: model.ChunkUsage, Usage: a.usage})
	}
	return append(out, model.Chunk{Kind: model.ChunkFinish, FinishReason: a.reason()})
}

// reason maps the server's finish_reason. Some servers say "stop" after tool
// calls; the calls decide then.
func (a *assembler) reason() model.FinishReason {
	switch a.finish {
	case "length":
		return model.FinishMaxTokens
	case "content_filter":
		return model.FinishRefusal
	case "tool_calls", "function_call":
		return model.FinishToolCalls
	}
	switch {
	case len(a.calls) > 0:
		return model.FinishToolCalls
	case a.refused:
		return model.FinishRefusal
	default:
		return model.FinishStop
	}
}
