package agent

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/schema"
)

// StructuredOutputTool is the name of the scope-local capture tool installed
// by Config.OutputSchema (docs/seam.md §9).
const StructuredOutputTool = "structured_output"

// Model-visible texts of the structured output runtime.
const (
	structuredDescription = "Record the final result of this task. Call this tool exactly once, " +
		"when you are done, with arguments that exactly match its parameter schema."
	structuredInstruction = "You must finish this task by calling the `structured_output` tool with " +
		"arguments that match its schema. A plain text answer does not count as your result."
	// StructuredRecorded is the result text of an accepted capture.
	StructuredRecorded = "Structured output recorded."
)

// capture is the structured output state of an agent. It is monotonic:
// once staged, every later tool call is denied.
type capture struct {
	staged    bool
	committed bool
	value     json.RawMessage
}

// structuredTool is the capture tool as the model sees it. Its execution is
// handled by runStructured, not by Run.
func (a *Agent) structuredTool() Tool {
	return Tool{Name: StructuredOutputTool, Description: structuredDescription, Parameters: a.cfg.OutputSchema}
}

// guardDenial returns the denial text for a call made after a capture, or ""
// when no capture is staged or committed.
func (a *Agent) guardDenial(name string) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.capture.staged && !a.capture.committed {
		return ""
	}
	return fmt.Sprintf("structured output already recorded: the run is complete, so `%s` is not executed", name)
}

// runStructured validates a structured_output call. Valid arguments are
// staged and the result is the recorded notice; the caller commits the
// stage once the result is logged. Violations give an INVALID_ARGS error
// result the model may retry after.
func (a *Agent) runStructured(args json.RawMessage) (content []model.Block, isError bool) {
	if v := schema.Validate(a.cfg.OutputSchema, args); len(v) > 0 {
		return []model.Block{model.TextBlock("INVALID_ARGS: " + strings.Join(v, "; "))}, true
	}
	a.mu.Lock()
	a.capture.staged = true
	a.mu.Unlock()
	return []model.Block{model.TextBlock(StructuredRecorded)}, false
}

// commitStructured promotes the staged capture to committed with value.
func (a *Agent) commitStructured(value json.RawMessage) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.capture.committed = true
	a.capture.value = append(json.RawMessage(nil), value...)
}

// Structured returns the committed structured_output capture, if any.
func (a *Agent) Structured() (json.RawMessage, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.capture.committed {
		return nil, false
	}
	return append(json.RawMessage(nil), a.capture.value...), true
}
