package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel/codes"

	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/telemetry"
)

// logFailed is the turn/end error message when the session log cannot be
// written; the cause is logged, not shown.
const logFailed = "session log write failed"

// openTurnEvents returns the events that open the next turn for msg, the
// inbox head: turn/start, the claim of one next-turn message, and msg as
// the turn's user/message. claimTurnLocked applies them once logged.
func (a *Agent) openTurnEvents(msg sessionlog.UserMessage) []sessionlog.Entry {
	return []sessionlog.Entry{
		event(sessionlog.EventTurnStart, sessionlog.TurnData{Turn: a.turn + 1}),
		event(sessionlog.EventInboxSpliced, sessionlog.InboxSplicedData{Target: sessionlog.TargetNextTurn, Start: 0, RemovedCount: 1, Inserted: []sessionlog.UserMessage{}}),
		event(sessionlog.EventUserMessage, msg),
	}
}

// claimTurnLocked makes the logged openTurnEvents the current turn.
func (a *Agent) claimTurnLocked() *turnRun {
	a.turn++
	a.queue = a.queue[1:]
	ctx := a.base
	var inv *telemetry.Invocation
	if a.cfg.TurnAgent != "" {
		ctx, inv = telemetry.StartInvoke(ctx, telemetry.InvokeParams{Agent: a.cfg.TurnAgent, ConversationID: a.id})
	}
	ctx, cancel := context.WithCancel(ctx)
	a.cur = &turnRun{n: a.turn, ctx: ctx, cancel: cancel, inv: inv}
	return a.cur
}

// startDriver starts the goroutine that runs t and the turns queued after
// it. a.mu must be held.
func (a *Agent) startDriver(t *turnRun) {
	a.driving = true
	a.idle = make(chan struct{})
	a.wg.Add(1)
	go a.drive(t)
}

func (a *Agent) drive(t *turnRun) {
	defer a.wg.Done()
	for t != nil {
		a.runTurn(t)
		t = a.nextTurn()
	}
}

// nextTurn opens the turn of the next runnable queued message, or marks the
// agent idle and returns nil.
func (a *Agent) nextTurn() *turnRun {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.closed && !a.parked && len(a.queue) > 0 {
		err := a.appendLocked(a.openTurnEvents(a.queue[0])...)
		if err == nil {
			return a.claimTurnLocked()
		}
		a.log.Error("open next turn; inbox parked", "error", err)
		a.parked = true
	}
	a.driving = false
	close(a.idle)
	return nil
}

// runTurn runs steps until one concludes the turn, within its bounds.
func (a *Agent) runTurn(t *turnRun) {
	defer a.bound(t)()
	for step := 1; ; step++ {
		reason, more, stepEnd := a.runStep(t, step)
		if more {
			err := a.append(stepEnd...)
			if err == nil {
				continue
			}
			a.log.ErrorContext(t.ctx, "end step", "error", err)
			reason, stepEnd = failed(logFailed), nil
		}
		if a.conclude(t, reason, stepEnd) {
			return
		}
	}
}

// conclude logs stepEnd, what the step that ran last still has to log (its
// assistant/message when it ran no tools, and its step/end; none if it
// ended before the model was called), and ends turn t with reason in the
// same append, unless the turn would end cleanly while steers are pending:
// then it logs stepEnd alone and returns false, and they get one more step.
func (a *Agent) conclude(t *turnRun, reason sessionlog.TurnReason, stepEnd []sessionlog.Entry) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if reason.Kind == sessionlog.ReasonCompleted && len(a.steers) > 0 && t.ctx.Err() == nil && !a.capture.staged {
		err := a.appendLocked(stepEnd...)
		if err == nil {
			return false
		}
		a.log.ErrorContext(t.ctx, "end step", "error", err)
		reason, stepEnd = failed(logFailed), nil
	}
	err := a.endTurnLocked(append(stepEnd, event(sessionlog.EventTurnEnd, sessionlog.TurnEndData{Turn: t.n, Reason: reason}))...)
	if err != nil && len(stepEnd) > 0 {
		// What the step still had to log is lost: the turn fails, as on
		// any lost write, if its end can still be logged.
		a.log.ErrorContext(t.ctx, "end step", "error", err)
		reason = failed(logFailed)
		err = a.endTurnLocked(event(sessionlog.EventTurnEnd, sessionlog.TurnEndData{Turn: t.n, Reason: reason}))
	}
	if err != nil {
		a.log.ErrorContext(t.ctx, "end turn", "turn", t.n, "error", err)
	}
	t.cancel()
	t.inv.End(string(reason.Kind), nil)
	a.cur = nil
	a.rejectSteersLocked("turn ended")
	if err == nil {
		a.snapshotLocked()
	}
	if reason.Kind == sessionlog.ReasonError {
		a.log.WarnContext(t.ctx, "turn failed", "turn", t.n, "message", reason.Message)
	}
	return true
}

// aborted is the turn/end reason of a cancelled turn: the reason of the
// bound that stopped it, else aborted with its cause.
func (a *Agent) aborted(t *turnRun) sessionlog.TurnReason {
	a.mu.Lock()
	defer a.mu.Unlock()
	if t.stop != nil {
		return *t.stop
	}
	return sessionlog.TurnReason{Kind: sessionlog.ReasonAborted, Cause: &sessionlog.Cause{Kind: t.cause}}
}

func failed(msg string) sessionlog.TurnReason {
	return sessionlog.TurnReason{Kind: sessionlog.ReasonError, Message: msg}
}

// runStep runs step n of turn t: pre-step hook, prompt assembly, admission
// of pending steers, the model stream, and the tool calls. It returns the
// turn's reason, whether another step must follow, and, once the model was
// called, the step's last events still unlogged (see finishStep, then its
// step/end), for the caller to log together with the turn's end. A step
// logged ahead with its turn's opening (PrepareFollowup) is not entered
// again: its steers wait for the next step.
func (a *Agent) runStep(t *turnRun, n int) (sessionlog.TurnReason, bool, []sessionlog.Entry) {
	stepEnd := event(sessionlog.EventStepEnd, sessionlog.StepData{Turn: t.n, Step: n})
	entered := a.takeEntered(t, n)
	var open []sessionlog.Entry // what an entered step still has to log
	if entered {
		open = []sessionlog.Entry{stepEnd}
	}
	if t.ctx.Err() != nil {
		return a.aborted(t), false, open
	}
	if reason := a.gated(t); reason != nil {
		return *reason, false, open
	}
	var hook []sessionlog.Entry
	if !entered {
		hook = a.takeHook()
	}
	system, err := a.systemPrompt()
	if err == nil && a.cfg.Model == nil {
		err = errors.New("no model route is configured for this agent")
	}
	if err != nil {
		if err := a.append(hook...); err != nil {
			a.log.ErrorContext(t.ctx, "before-first-step hook", "error", err)
			return failed(logFailed), false, nil
		}
		return failed(err.Error()), false, open
	}
	tools := a.visibleTools()
	specs := make([]model.ToolSpec, 0, len(tools))
	for _, tool := range tools {
		specs = append(specs, tool.spec())
	}
	var msgs []model.Message
	if entered {
		msgs = a.historyMessages()
	} else {
		msgs, err = a.enterStep(t, n, hook)
	}
	switch {
	case err != nil && t.ctx.Err() != nil:
		return a.aborted(t), false, nil
	case err != nil:
		a.log.ErrorContext(t.ctx, "enter step", "error", err)
		return failed(logFailed), false, nil
	}
	req := model.Request{Model: a.cfg.ModelName, System: system, Messages: msgs, Tools: specs, MaxTokens: a.cfg.MaxTokens}
	res := a.stream(t, n, req)
	reason, more, pending := a.finishStep(t, n, res)
	return reason, more, append(pending, stepEnd)
}

// bound enforces Config.Gate's TurnBounds on turn t until the func it
// returns is called: a goroutine stops the turn at its deadline, or once
// it appended nothing for the idle bound.
func (a *Agent) bound(t *turnRun) (release func()) {
	if a.cfg.Gate == nil {
		return func() {}
	}
	b, err := a.cfg.Gate.Bounds(t.ctx, a.id)
	if err != nil {
		if t.ctx.Err() == nil {
			a.log.WarnContext(t.ctx, "turn bounds unread; the turn runs unbounded", "error", err)
		}
		return func() {}
	}
	if b.Deadline.IsZero() && b.Idle <= 0 {
		return func() {}
	}
	done := make(chan struct{})
	a.wg.Add(1)
	go a.watch(t, b, done)
	return func() { close(done) }
}

// watch stops turn t when bound b is reached, until done is closed or the
// turn ends.
func (a *Agent) watch(t *turnRun, b TurnBounds, done <-chan struct{}) {
	defer a.wg.Done()
	began := time.Now()
	var deadline, idle <-chan time.Time
	if !b.Deadline.IsZero() {
		dt := time.NewTimer(time.Until(b.Deadline))
		defer dt.Stop()
		deadline = dt.C
	}
	var it *time.Timer
	if b.Idle > 0 {
		it = time.NewTimer(b.Idle)
		defer it.Stop()
		idle = it.C
	}
	for {
		select {
		case <-done:
			return
		case <-t.ctx.Done():
			return
		case <-deadline:
			a.stopTurn(t, sessionlog.TurnReason{Kind: sessionlog.ReasonDeadlineExceeded,
				Message: "the tree's deadline " + b.Deadline.UTC().Format(time.RFC3339) + " passed"})
			return
		case <-idle:
			if rest := b.Idle - time.Since(a.lastAppend(began)); rest > 0 {
				it.Reset(rest)
				continue
			}
			a.stopTurn(t, failed(IdleTimeout))
			return
		}
	}
}

// lastAppend is when the log was last appended to, or since when it was
// not.
func (a *Agent) lastAppend(since time.Time) time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.appended.After(since) {
		return a.appended
	}
	return since
}

// stopTurn cancels turn t, if it still runs, to end with reason.
func (a *Agent) stopTurn(t *turnRun, reason sessionlog.TurnReason) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cur == t && t.ctx.Err() == nil {
		t.stop = &reason
		t.cancel()
		a.rejectSteersLocked("turn was stopped")
	}
}

// gated asks Config.Gate whether turn t may take its next step and
// returns the reason to end it with instead, nil to go on; a gate that
// fails is logged and lets the step run.
func (a *Agent) gated(t *turnRun) *sessionlog.TurnReason {
	if a.cfg.Gate == nil {
		return nil
	}
	reason, err := a.cfg.Gate.Step(t.ctx, a.id)
	if err != nil {
		if t.ctx.Err() == nil {
			a.log.WarnContext(t.ctx, "step gate failed; the step runs", "error", err)
		}
		return nil
	}
	return reason
}

// takeHook returns the BeforeFirstStep events the first time a step is
// entered, for enterStep to log in front of the step's start.
func (a *Agent) takeHook() []sessionlog.Entry {
	a.mu.Lock()
	skip := a.hookDone || a.cfg.BeforeFirstStep == nil
	a.hookDone = true
	a.mu.Unlock()
	if skip {
		return nil
	}
	return a.hookEntries()
}

// hookEntries calls the BeforeFirstStep hook, which must be set, and
// returns its events as entries.
func (a *Agent) hookEntries() []sessionlog.Entry {
	var hook []sessionlog.Entry
	for _, e := range a.cfg.BeforeFirstStep() {
		hook = append(hook, sessionlog.Entry{NewEvent: e})
	}
	return hook
}

// takeEntered reports, once, whether step n of turn t was logged ahead
// with the turn's opening.
func (a *Agent) takeEntered(t *turnRun, n int) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if n != 1 || a.entered != t.n {
		return false
	}
	a.entered = 0
	return true
}

// historyMessages returns the model history of the log.
func (a *Agent) historyMessages() []model.Message {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.history.Messages()
}

// enterFirstLocked returns the events that enter step 1 of turn ahead of
// the turn's start — the pre-step hook and step/start — and marks that step
// entered, or none when the step could not be entered now (no model, a
// system prompt that fails: the step then reports it). Steers cannot be
// pending before the turn starts. a.mu must be held.
func (a *Agent) enterFirstLocked(turn int) []sessionlog.Entry {
	if a.cfg.Model == nil {
		return nil
	}
	if _, err := a.systemPrompt(); err != nil {
		return nil
	}
	var evs []sessionlog.Entry
	if !a.hookDone && a.cfg.BeforeFirstStep != nil {
		evs = a.hookEntries()
	}
	a.hookDone = true
	a.entered = turn
	return append(evs, event(sessionlog.EventStepStart, sessionlog.StepData{Turn: turn, Step: 1}))
}

// enterStep admits the pending steers (claim splice plus their
// user/messages), logs step/start, releases the steers' callers and returns
// the model history. hook, the pre-step hook's events, goes first in the
// same append; it is logged alone if t was cancelled, in which case
// enterStep fails with t's context error.
func (a *Agent) enterStep(t *turnRun, n int, hook []sessionlog.Entry) ([]model.Message, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if cerr := t.ctx.Err(); cerr != nil {
		if err := a.appendLocked(hook...); err != nil {
			return nil, err
		}
		return nil, cerr
	}
	admitted := a.steers
	evs := hook
	if len(admitted) > 0 {
		evs = append(evs, event(sessionlog.EventInboxSpliced, sessionlog.InboxSplicedData{Target: sessionlog.TargetNextStep, Start: 0,
			RemovedCount: len(admitted), Inserted: []sessionlog.UserMessage{}}))
		for _, s := range admitted {
			evs = append(evs, event(sessionlog.EventUserMessage, s.msg))
		}
	}
	evs = append(evs, event(sessionlog.EventStepStart, sessionlog.StepData{Turn: t.n, Step: n}))
	if err := a.appendLocked(evs...); err != nil {
		return nil, err
	}
	a.steers = nil
	for _, s := range admitted {
		close(s.done)
	}
	return a.history.Messages(), nil
}

// streamed is what one model stream produced.
type streamed struct {
	text, reasoning string
	calls           []model.ToolCall
	usage           *sessionlog.UsageData
	finish          model.FinishReason
	err             error // the model's error
	logErr          error // a chunk could not be logged
	// unlogged are the stream's last chunks, which the chunk writer left
	// for the step's next append (see Config.ChunkLinger).
	unlogged []sessionlog.Entry
}

// stream runs the model and logs every chunk as assistant/chunk: when it
// returns, the chunks are in the log but for res.unlogged, which must go
// in front of whatever the step appends next.
func (a *Agent) stream(t *turnRun, n int, req model.Request) (res streamed) {
	chunks := a.newChunkWriter()
	ctx, chat := telemetry.StartChat(t.ctx, telemetry.ChatParams{Provider: a.cfg.ModelProvider, Model: req.Model})
	defer func() {
		res.unlogged, res.logErr = chunks.close()
		var in, out int
		if res.usage != nil {
			in, out = res.usage.InputTokens, res.usage.OutputTokens
		}
		a.cfg.Metrics.Tokens(a.cfg.ModelProvider, in, out)
		chat.End(in, out, res.err)
	}()
	for c, err := range a.cfg.Model.Stream(ctx, req) {
		if err != nil {
			res.err = err
			break
		}
		logged := sessionlog.Chunk{Type: string(c.Kind)}
		switch c.Kind {
		case model.ChunkText:
			res.text += c.Text
			logged.Text = c.Text
		case model.ChunkReasoning:
			res.reasoning += c.Text
			logged.Text = c.Text
		case model.ChunkToolCall:
			if c.ToolCall == nil {
				continue
			}
			tc := *c.ToolCall
			if tc.ID == "" {
				tc.ID = fmt.Sprintf("call_%d_%d_%d", t.n, n, len(res.calls)+1)
			}
			if tc.Arguments == "" {
				tc.Arguments = "{}"
			}
			res.calls = append(res.calls, tc)
			logged.CallID, logged.Name, logged.Arguments = tc.ID, tc.Name, tc.Arguments
		case model.ChunkUsage:
			if c.Usage == nil {
				continue
			}
			if res.usage == nil {
				res.usage = &sessionlog.UsageData{}
			}
			res.usage.InputTokens += c.Usage.InputTokens
			res.usage.OutputTokens += c.Usage.OutputTokens
			logged.InputTokens, logged.OutputTokens = c.Usage.InputTokens, c.Usage.OutputTokens
		case model.ChunkFinish:
			res.finish = c.FinishReason
			logged.FinishReason = string(c.FinishReason)
		default:
			logged.Text = c.Text
		}
		chunks.write(event(sessionlog.EventAssistantChunk, sessionlog.ChunkData{Turn: t.n, Step: n, Chunk: logged}))
	}
	return res
}

// content assembles the assistant message content: reasoning, text, then
// the given tool calls.
func (res streamed) content(calls []model.ToolCall) []model.Block {
	out := []model.Block{}
	if res.reasoning != "" {
		out = append(out, model.Block{Type: "reasoning", Text: res.reasoning})
	}
	if res.text != "" {
		out = append(out, model.TextBlock(res.text))
	}
	for _, c := range calls {
		out = append(out, sessionlog.ToolCallBlock(c))
	}
	return out
}

// finishStep logs the step's assistant/message and runs its tool calls,
// then decides how the turn goes on. A step without tool calls ends the
// turn: its message is returned unlogged, for the caller to log with the
// step's and the turn's end.
func (a *Agent) finishStep(t *turnRun, n int, res streamed) (sessionlog.TurnReason, bool, []sessionlog.Entry) {
	// msg is the step's message, behind the chunks still unlogged.
	msg := func(content []model.Block, interrupted bool) []sessionlog.Entry {
		return append(res.unlogged, event(sessionlog.EventAssistantMessage, sessionlog.AssistantMessageData{Turn: t.n, Step: n,
			Message: sessionlog.AssistantMessage{Role: "assistant", Content: content}, Usage: res.usage, Interrupted: interrupted}))
	}
	if res.logErr != nil {
		a.log.ErrorContext(t.ctx, "log chunk", "error", res.logErr)
		return failed(logFailed), false, nil
	}
	if res.err != nil || t.ctx.Err() != nil {
		// A cut stream keeps its partial text and reasoning; its tool calls
		// never run.
		pending := res.unlogged
		if partial := res.content(nil); len(partial) > 0 {
			pending = msg(partial, true)
		}
		if t.ctx.Err() != nil {
			return a.aborted(t), false, pending
		}
		a.log.WarnContext(t.ctx, "model stream failed", "turn", t.n, "step", n, "error", res.err)
		return failed(res.err.Error()), false, pending
	}
	calls := res.calls
	if res.finish == model.FinishMaxTokens || res.finish == model.FinishRefusal {
		calls = nil // truncated or declined: nothing to run
	}
	if len(calls) == 0 {
		return finishReason(res), false, msg(res.content(nil), false)
	}
	if err := a.append(msg(res.content(calls), false)...); err != nil {
		a.log.ErrorContext(t.ctx, "log message", "error", err)
		return failed(logFailed), false, nil
	}
	committed := false
	for i := 0; i < len(calls) && t.ctx.Err() == nil; {
		j := i + 1
		if a.concurrent(calls[i].Name) {
			for j < len(calls) && a.concurrent(calls[j].Name) {
				j++
			}
		}
		ok, err := a.runCalls(t, n, calls[i:j])
		if err != nil {
			a.log.ErrorContext(t.ctx, "log tool call", "tool", calls[i].Name, "error", err)
			return failed(logFailed), false, nil
		}
		committed = committed || ok
		i = j
	}
	if t.ctx.Err() != nil {
		return a.aborted(t), false, nil
	}
	return sessionlog.TurnReason{Kind: sessionlog.ReasonCompleted}, !committed, nil
}

// finishReason is the turn's reason after a step without tool calls to run.
func finishReason(res streamed) sessionlog.TurnReason {
	switch res.finish {
	case model.FinishMaxTokens:
		return sessionlog.TurnReason{Kind: sessionlog.ReasonMaxTokens}
	case model.FinishRefusal:
		return sessionlog.TurnReason{Kind: sessionlog.ReasonBlocked}
	}
	return sessionlog.TurnReason{Kind: sessionlog.ReasonCompleted}
}

// concurrent reports whether the visible tool name may run alongside its
// siblings. structured_output never does: the capture guard orders it.
func (a *Agent) concurrent(name string) bool {
	t, ok := a.lookup(name)
	return ok && t.Concurrent && name != StructuredOutputTool
}

// runCalls logs tool/call for each call, executes them — in parallel when
// there are several (a batch of concurrent tools) — and logs their
// tool/results in call order. It reports whether a call committed a
// structured capture; an error means the log could not be written.
func (a *Agent) runCalls(t *turnRun, n int, calls []model.ToolCall) (bool, error) {
	evs := make([]sessionlog.Entry, len(calls))
	for i, c := range calls {
		evs[i] = event(sessionlog.EventToolCall, sessionlog.ToolCallData{Turn: t.n, Step: n, CallID: c.ID, Name: c.Name, Arguments: c.Arguments})
	}
	if err := a.append(evs...); err != nil {
		return false, err
	}
	type outcome struct {
		content []model.Block
		isError bool
	}
	results := make([]outcome, len(calls))
	exec := func(i int) {
		c := calls[i]
		content, isError := a.execute(t, c.ID, c.Name, json.RawMessage(c.Arguments))
		if _, err := json.Marshal(content); err != nil {
			content, isError = []model.Block{model.TextBlock(fmt.Sprintf("tool %s returned unencodable content", c.Name))}, true
		}
		if content == nil {
			content = []model.Block{}
		}
		results[i] = outcome{content, isError}
	}
	if len(calls) == 1 {
		exec(0)
	} else {
		var wg sync.WaitGroup
		for i := range calls {
			wg.Go(func() { exec(i) })
		}
		wg.Wait()
	}
	var capture json.RawMessage
	for i, c := range calls {
		r := results[i]
		evs[i] = event(sessionlog.EventToolResult, sessionlog.ToolResultData{Turn: t.n, Step: n, CallID: c.ID, Name: c.Name, Content: r.content, IsError: r.isError})
		if c.Name == StructuredOutputTool && a.cfg.OutputSchema != nil && !r.isError {
			capture = json.RawMessage(c.Arguments)
		}
	}
	if err := a.append(evs...); err != nil {
		return false, err
	}
	if capture != nil {
		a.commitStructured(capture) // only once its result is logged (docs/seam.md §9)
	}
	return capture != nil, nil
}

// execute runs one call: the capture guard first, then structured_output,
// then a visible tool looked up now (the filter is live).
func (a *Agent) execute(t *turnRun, callID, name string, args json.RawMessage) ([]model.Block, bool) {
	errResult := func(msg string) ([]model.Block, bool) { return []model.Block{model.TextBlock(msg)}, true }
	if denial := a.guardDenial(name); denial != "" {
		return errResult(denial)
	}
	if name == StructuredOutputTool && a.cfg.OutputSchema != nil {
		return a.runStructured(args)
	}
	tool, ok := a.lookup(name)
	if !ok {
		return errResult("unknown tool " + name)
	}
	if !json.Valid(args) {
		return errResult("INVALID_ARGS: arguments are not valid JSON")
	}
	ctx, span := telemetry.StartTool(t.ctx, name, callID)
	defer span.End()
	content, err := a.runTool(ctx, tool, Call{Agent: a, CallID: callID, Arguments: args})
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
		return errResult(err.Error())
	}
	return content, false
}

// runTool runs tool, turning a panic into an error result.
func (a *Agent) runTool(ctx context.Context, tool Tool, call Call) (content []model.Block, err error) {
	defer func() {
		if r := recover(); r != nil {
			a.log.ErrorContext(ctx, "tool panicked", slog.String("tool", tool.Name), slog.Any("panic", r))
			content, err = nil, fmt.Errorf("tool %s failed", tool.Name)
		}
	}()
	return tool.Run(ctx, call)
}
