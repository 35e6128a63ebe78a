// Package scripted is a deterministic model.Model for tests and demos: each
// Stream call plays one scripted Step, and every request is recorded so tests
// can assert what the model saw.
package scripted

import (
	"context"
	"errors"
	"iter"
	"strconv"
	"strings"
	"sync"

	"github.com/subagentd/subagentd/internal/model"
)

// ErrNoSteps is yielded by a Stream call after the script ran out.
var ErrNoSteps = errors.New("scripted model: no step left")

// Step is one scripted model answer. Chunks are yielded in this order:
// Reasoning, Text (split into word chunks), Err (ends the step), ToolCalls,
// Usage, finish.
type Step struct {
	// Text is streamed as several text-delta chunks, one per word (each
	// keeps its trailing space), so the chunks concatenate back to Text.
	Text string
	// Reasoning is streamed as one reasoning-delta chunk.
	Reasoning string
	// ToolCalls are yielded as one tool-call chunk each. A call without ID
	// gets "call-<n>" where n counts the model's calls from 1.
	ToolCalls []model.ToolCall
	// Err, when set, is yielded after Text and ends the step.
	Err error
	// Finish is the finish reason; empty means tool-calls when ToolCalls is
	// non-empty, else stop.
	Finish model.FinishReason
	// Usage, when set, is yielded as a usage chunk before finish.
	Usage *model.Usage
	// Reached, when set, is closed as soon as the step starts playing, before
	// it waits on Gate: a test's signal that the model has been called.
	Reached chan struct{}
	// Gate, when set, holds the step before anything is streamed until it is
	// closed; if ctx ends first the step yields ctx.Err().
	Gate <-chan struct{}
	// Pause, when set, holds the step after Text is streamed (before Err,
	// tool calls and finish) until it is closed or ctx ends (then the step
	// yields ctx.Err()): it lets tests cancel mid-stream.
	Pause <-chan struct{}
}

// Model plays Steps. It is safe for concurrent use.
type Model struct {
	mu       sync.Mutex
	steps    []Step
	fn       func(model.Request) Step
	requests []model.Request
	calls    int
}

var _ model.Model = (*Model)(nil)

// New returns a model that answers the i-th Stream call with steps[i] and
// yields ErrNoSteps once they are used up.
func New(steps ...Step) *Model {
	return &Model{steps: steps}
}

// Func returns a model that answers each Stream call with f(request). f may
// be called concurrently when the model is shared.
func Func(f func(model.Request) Step) *Model {
	return &Model{fn: f}
}

// Requests returns copies of the requests received so far, in call order.
func (m *Model) Requests() []model.Request {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]model.Request, len(m.requests))
	copy(out, m.requests)
	return out
}

// next records req and picks the step that answers it.
func (m *Model) next(req model.Request) (Step, error) {
	m.mu.Lock()
	req.Messages = append([]model.Message(nil), req.Messages...)
	req.Tools = append([]model.ToolSpec(nil), req.Tools...)
	m.requests = append(m.requests, req)
	fn := m.fn
	var st Step
	var err error
	if fn == nil {
		if len(m.steps) == 0 {
			err = ErrNoSteps
		} else {
			st, m.steps = m.steps[0], m.steps[1:]
		}
	}
	m.mu.Unlock()
	if fn != nil {
		st = fn(req)
	}
	return st, err
}

// nextCallID numbers calls that came without an id.
func (m *Model) nextCallID() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls++
	return "call-" + strconv.Itoa(m.calls)
}

// Stream plays the next step. It honours ctx between chunks.
func (m *Model) Stream(ctx context.Context, req model.Request) iter.Seq2[model.Chunk, error] {
	return func(yield func(model.Chunk, error) bool) {
		st, err := m.next(req)
		if err != nil {
			yield(model.Chunk{}, err)
			return
		}
		if st.Reached != nil {
			close(st.Reached)
		}
		if !wait(ctx, st.Gate, yield) {
			return
		}
		send := func(c model.Chunk) bool {
			if err := ctx.Err(); err != nil {
				yield(model.Chunk{}, err)
				return false
			}
			return yield(c, nil)
		}
		if st.Reasoning != "" && !send(model.Chunk{Kind: model.ChunkReasoning, Text: st.Reasoning}) {
			return
		}
		for _, w := range strings.SplitAfter(st.Text, " ") {
			if w == "" {
				continue
			}
			if !send(model.Chunk{Kind: model.ChunkText, Text: w}) {
				return
			}
		}
		if !wait(ctx, st.Pause, yield) {
			return
		}
		if st.Err != nil {
			yield(model.Chunk{}, st.Err)
			return
		}
		for _, tc := range st.ToolCalls {
			if tc.ID == "" {
				tc.ID = m.nextCallID()
			}
			if !send(model.Chunk{Kind: model.ChunkToolCall, ToolCall: &tc}) {
				return
			}
		}
		if st.Usage != nil {
			u := *st.Usage
			if !send(model.Chunk{Kind: model.ChunkUsage, Usage: &u}) {
				return
			}
		}
		finish := st.Finish
		if finish == "" {
			finish = model.FinishStop
			if len(st.ToolCalls) > 0 {
				finish = model.FinishToolCalls
			}
		}
		send(model.Chunk{Kind: model.ChunkFinish, FinishReason: finish})
	}
}

// wait blocks until gate is closed (true) or ctx ends (yields ctx.Err(),
// false). A nil gate does not block.
func wait(ctx context.Context, gate <-chan struct{}, yield func(model.Chunk, error) bool) bool {
	if gate == nil {
		return true
	}
	select {
	case <-gate:
		return true
	case <-ctx.Done():
		yield(model.Chunk{}, ctx.Err())
		return false
	}
}
