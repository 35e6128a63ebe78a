package a2a

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	sdk "github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/providers/turnlog"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/subagent"
)

// journal writes an event of a turn to the child log unless the turn is
// over, adding text to the turn's output once the event is stored; an
// error means the event was not stored, and its owner stops the turn.
type journal func(e turnlog.Event, text string) error

// follower follows the one remote task of a turn: it sends the turn's
// message, journals what the agent reports until the task reaches a final
// state, and cancels the task when stopped.
type follower struct {
	p       *Provider
	c       *conn
	log     *slog.Logger
	childID string
	turn    int
	journal journal
	// logCtx carries the child's tenant and the caller's trace, without
	// cancellation; callCtx is the context of the calls that follow the
	// task, and stopCalls ends the one in flight.
	logCtx    context.Context
	callCtx   context.Context
	stopCalls context.CancelFunc

	stopped  chan struct{} // closed by the first stop
	stopOnce sync.Once
	// bg counts the tasks/cancel call and the stop timer.
	bg sync.WaitGroup
	// timer ends the call of a follower stopped before the agent named
	// its task, after cancelGrace.
	timer *time.Timer

	// mu guards the fields below.
	mu sync.Mutex
	// taskID and contextID are what the agent named, once it did;
	// cancelSent says tasks/cancel went out.
	taskID     sdk.TaskID
	contextID  string
	cancelSent bool
	// wrote says text was journaled; finished that follow returned.
	wrote    bool
	finished bool
	// detached: stopped without tasks/cancel (detach).
	detached bool
	// artifacts is the text logged of each artifact, to skip what a
	// resubscription replays.
	artifacts map[sdk.ArtifactID]*artifactText
	// replay is the text of the turn that the child log held when this
	// follower rejoined its task, which the task's replay repeats: the
	// text that matches it is skipped, up to the first that does not.
	// replayStatus is the last status text the log held (a reasoning
	// chunk), which the replayed task's status repeats.
	replay       string
	replayStatus string
	// question is the message of the task's last input-required status
	// (input.go).
	question string
}

func newFollower(logCtx context.Context, p *Provider, c *conn, log *slog.Logger, childID string, turn int, j journal) *follower {
	callCtx, stop := context.WithCancel(logCtx)
	return &follower{
		p: p, c: c, log: log, childID: childID, turn: turn, journal: j, logCtx: logCtx, callCtx: callCtx, stopCalls: stop,
		stopped: make(chan struct{}), artifacts: map[sdk.ArtifactID]*artifactText{},
	}
}

// cancelGrace bounds how long a stopped follower's call waits for the
// agent to name its task, so that tasks/cancel can name it, and how long
// that call may take.
const cancelGrace = 10 * time.Second

// stop ends following without waiting for the agent: the call in flight
// ends, and tasks/cancel goes out for the task — once the agent named it,
// which the call waits for up to cancelGrace. Idempotent.
func (f *follower) stop() {
	f.stopOnce.Do(func() {
		close(f.stopped)
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.detached {
			f.stopCalls()
			return
		}
		if !f.cancelLocked() && !f.finished {
			f.bg.Add(1)
			f.timer = time.AfterFunc(cancelGrace, func() { defer f.bg.Done(); f.stopCalls() })
		}
	})
}

// detach ends following at once, as stop does, but leaves the task to run
// on the remote agent: no tasks/cancel goes out. Idempotent; after stop it
// does nothing.
func (f *follower) detach() {
	f.mu.Lock()
	if !f.isStopped() {
		f.detached = true
	}
	f.mu.Unlock()
	f.stop()
}

// cancelLocked sends tasks/cancel, once, when stopped and the task is
// known, and ends the call in flight; it reports whether the task is
// known. f.mu is held.
func (f *follower) cancelLocked() bool {
	if f.taskID == "" {
		return false
	}
	if f.isStopped() && !f.cancelSent && !f.finished && !f.detached {
		f.cancelSent = true
		f.stopCalls()
		if f.timer != nil && f.timer.Stop() {
			f.bg.Done()
		}
		id := f.taskID
		f.bg.Add(1)
		go func() {
			defer f.bg.Done()
			ctx, cancel := context.WithTimeout(f.logCtx, cancelGrace)
			defer cancel()
			if _, err := f.c.client.CancelTask(ctx, &sdk.CancelTaskRequest{ID: id}); err != nil {
				f.log.Warn("tasks/cancel of the A2A child's task failed", slog.String("task_id", string(id)), slog.Any("error", err))
			}
		}()
	}
	return true
}

// wait returns once the cancel and the stop timer are done.
func (f *follower) wait() { f.bg.Wait() }

// follow sends prompt in contextID ("" for a new context) and follows the
// task to its end. A stopped follower returns aborted. Once it returned,
// stop sends no tasks/cancel.
func (f *follower) follow(prompt []model.Block, contextID string) turnlog.Outcome {
	return f.run(func() turnlog.Outcome {
		msg := message(prompt)
		msg.ContextID = contextID
		req := &sdk.SendMessageRequest{Message: msg}
		if f.c.streaming {
			return f.stream(req)
		}
		return f.poll(req)
	})
}

// rejoin follows, to its end, the task of a turn that the replica which
// followed it left open: over SubscribeToTask, or tasks/get for an agent
// that cannot stream. The follower's task, context and replay are the
// log's (reattach.go).
func (f *follower) rejoin() turnlog.Outcome {
	return f.run(func() turnlog.Outcome {
		if f.c.streaming {
			return f.keepUp(f.subscribe(f.task()))
		}
		return f.pollFrom(nil)
	})
}

// run runs body, the following of the task, unless the follower was
// stopped before it began, and the answers to the questions the task asks
// on the way (input.go); it marks the follower finished.
func (f *follower) run(body func() turnlog.Outcome) turnlog.Outcome {
	defer func() {
		f.stopCalls()
		f.mu.Lock()
		defer f.mu.Unlock()
		// The task ended, or its cancel went out: nothing to wait for.
		f.finished = true
		if f.timer != nil && f.timer.Stop() {
			f.bg.Done()
		}
	}()
	if f.isStopped() {
		// Stopped before it began: the agent never hears of the turn.
		return aborted()
	}
	o := body()
	for o.Reason == needsInput && !f.isStopped() {
		o = f.answer()
	}
	if f.isStopped() {
		return aborted()
	}
	return o
}

// maxReattach bounds the resubscriptions after a stream was lost before
// the task ended: each that delivers an event starts the count again.
const maxReattach = 5

// reattachBackoff is the pause before the nth resubscription in a row.
func reattachBackoff(n int) time.Duration { return time.Duration(n) * 200 * time.Millisecond }

// stream follows the task over message/stream and, when that stream is
// lost before the task ended, as keepUp does.
func (f *follower) stream(req *sdk.SendMessageRequest) turnlog.Outcome {
	return f.keepUp(f.consume(f.c.client.SendStreamingMessage(f.callCtx, req)))
}

// keepUp returns end, the outcome a stream reached, or — when the stream
// was lost (got says whether it delivered any event, err how it ended)
// before the task ended — follows the task over tasks/resubscribe
// (SubscribeToTask) while the task is live, reading it with tasks/get once
// it is not.
func (f *follower) keepUp(end *turnlog.Outcome, got bool, err error) turnlog.Outcome {
	for lost := 0; ; {
		if end != nil {
			return *end
		}
		if f.isStopped() {
			return aborted()
		}
		id := f.task()
		if id == "" {
			return failed("the remote A2A agent's stream ended before it named its task: %v", streamErr(err))
		}
		if got {
			lost = 0
		}
		if lost++; lost > maxReattach {
			return failed("lost the remote A2A agent's stream of task %s %d times in a row: %v", id, maxReattach, streamErr(err))
		}
		f.log.Info("A2A stream lost; resubscribing", slog.String("task_id", string(id)), slog.Int("attempt", lost), slog.Any("error", err))
		if !f.pause(reattachBackoff(lost)) {
			return aborted()
		}
		end, got, err = f.subscribe(id)
	}
}

// subscribe follows task id over SubscribeToTask as consume does; a task
// that ended while no stream was open cannot be subscribed to
// (UnsupportedOperation, or not found among the live ones), so then it is
// read with tasks/get.
func (f *follower) subscribe(id sdk.TaskID) (end *turnlog.Outcome, got bool, err error) {
	end, got, err = f.consume(f.c.client.SubscribeToTask(f.callCtx, &sdk.SubscribeToTaskRequest{ID: id}))
	if end == nil && err != nil && !f.isStopped() {
		if t, gerr := f.c.client.GetTask(f.callCtx, &sdk.GetTaskRequest{ID: id}); gerr == nil {
			end = f.observe(t)
		}
	}
	return end, got, err
}

// streamErr is the account of how a stream ended without a final state.
func streamErr(err error) error {
	if err == nil {
		return errors.New("the stream closed")
	}
	return err
}

// consume journals the events of seq until the task reaches a final
// state (end), the stream ends or fails (err), or the follower is
// stopped. got says whether any event came.
func (f *follower) consume(seq iter.Seq2[sdk.Event, error]) (end *turnlog.Outcome, got bool, err error) {
	for ev, err := range seq {
		if err != nil {
			return nil, got, err
		}
		got = true
		if end := f.observe(ev); end != nil {
			return end, got, nil
		}
		if f.isStopped() {
			return nil, got, nil
		}
	}
	return nil, got, nil
}

// poll drives an agent that cannot stream: message/send, then as
// pollFrom.
func (f *follower) poll(req *sdk.SendMessageRequest) turnlog.Outcome {
	req.Config = &sdk.SendMessageConfig{ReturnImmediately: true}
	res, err := f.c.client.SendMessage(f.callCtx, req)
	if err != nil {
		return failed("message/send to the remote A2A agent failed: %v", err)
	}
	ev, ok := res.(sdk.Event)
	if !ok {
		return failed("the remote A2A agent answered message/send with %T", res)
	}
	return f.pollFrom(ev)
}

// pollFrom journals ev, when not nil, and then reads the task with
// tasks/get every PollInterval (the first read at once when ev is nil)
// until it reaches a final state.
func (f *follower) pollFrom(ev sdk.Event) turnlog.Outcome {
	for failures := 0; ; {
		if ev != nil {
			if end := f.observe(ev); end != nil {
				return *end
			}
		}
		id := f.task()
		if id == "" {
			return failed("the remote A2A agent answered message/send with neither a message nor a task")
		}
		if ev != nil && !f.pause(f.p.poll) {
			return aborted()
		}
		t, err := f.c.client.GetTask(f.callCtx, &sdk.GetTaskRequest{ID: id})
		if err != nil {
			if f.isStopped() {
				return aborted()
			}
			if failures++; failures > maxReattach {
				return failed("tasks/get of task %s failed %d times in a row: %v", id, maxReattach, err)
			}
			if ev = nil; !f.pause(f.p.poll) {
				return aborted()
			}
			continue
		}
		failures = 0
		ev = t
	}
}

// pause waits d, or returns false once the follower is stopped.
func (f *follower) pause(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-f.stopped:
		return false
	}
}

func (f *follower) isStopped() bool {
	select {
	case <-f.stopped:
		return true
	default:
		return false
	}
}

func (f *follower) task() sdk.TaskID {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.taskID
}

// context is the context the agent named for the task, "" until it did.
func (f *follower) context() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.contextID
}

func aborted() turnlog.Outcome { return turnlog.Outcome{Reason: subagent.StopAborted} }

func failed(format string, args ...any) turnlog.Outcome {
	return turnlog.Outcome{Reason: subagent.StopError, Diagnostic: fmt.Sprintf(format, args...)}
}

// observe journals one event of the remote agent and returns the outcome
// when it puts the task in a final state: a message outside a task, a
// terminal state, or a state that needs input this service cannot give.
func (f *follower) observe(ev sdk.Event) *turnlog.Outcome {
	switch ev := ev.(type) {
	case *sdk.Message:
		f.note(ev.TaskID, ev.ContextID)
		f.addText(partsText(ev.Parts))
		if ev.TaskID == "" {
			return &turnlog.Outcome{Reason: subagent.StopCompleted}
		}
	case *sdk.Task:
		f.note(ev.ID, ev.ContextID)
		for _, a := range ev.Artifacts {
			f.addArtifact(a, false)
		}
		return f.status(ev.Status)
	case *sdk.TaskArtifactUpdateEvent:
		f.note(ev.TaskID, ev.ContextID)
		if ev.Artifact != nil {
			f.addArtifact(ev.Artifact, ev.Append)
		}
	case *sdk.TaskStatusUpdateEvent:
		f.note(ev.TaskID, ev.ContextID)
		return f.status(ev.Status)
	}
	return nil
}

// status journals a task status and maps a final one (docs/seam.md §6):
// completed is completed, canceled aborted, failed and rejected an error
// with the agent's message; input-required is a question for a person
// (input.go), and auth-required an error saying what the agent waits for.
func (f *follower) status(s sdk.TaskStatus) *turnlog.Outcome {
	var text string
	if s.Message != nil {
		text = partsText(s.Message.Parts)
	}
	switch s.State {
	case sdk.TaskStateCompleted:
		f.mu.Lock()
		wrote := f.wrote
		f.mu.Unlock()
		if !wrote {
			// Some agents answer only in the final status.
			f.addText(text)
		}
		return &turnlog.Outcome{Reason: subagent.StopCompleted}
	case sdk.TaskStateCanceled:
		return &turnlog.Outcome{Reason: subagent.StopAborted}
	case sdk.TaskStateFailed, sdk.TaskStateRejected:
		return &turnlog.Outcome{Reason: subagent.StopError, Diagnostic: withText("the remote A2A agent's task "+stateName(s.State), text)}
	case sdk.TaskStateInputRequired, sdk.TaskStateAuthRequired:
		return f.inputStatus(s.State, text)
	}
	text = bound(clean(text), maxChunk)
	f.mu.Lock()
	replayed := f.replayStatus != "" && f.replayStatus == text
	f.replayStatus = ""
	f.mu.Unlock()
	if text != "" && !replayed {
		_ = f.journal(chunk(f.turn, model.ChunkReasoning, text), "")
	}
	return nil
}

// stateName is a task state as A2A's JSON-RPC v0.3 names it, the words
// people know: TASK_STATE_INPUT_REQUIRED is "input-required".
func stateName(s sdk.TaskState) string {
	return strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(string(s), "TASK_STATE_")), "_", "-")
}

func withText(what, text string) string {
	if text == "" {
		return what
	}
	return what + ": " + text
}

// note records the task and context the agent named, the first time, in
// the child log (sessionlog.EventA2ATask), and sends the cancel that
// waited for the task.
func (f *follower) note(id sdk.TaskID, contextID string) {
	if id == "" && contextID == "" {
		return
	}
	f.mu.Lock()
	if f.taskID != "" || id == "" && f.contextID != "" {
		f.mu.Unlock()
		return
	}
	f.taskID, f.contextID = sdk.TaskID(bound(clean(string(id)), maxID)), bound(clean(contextID), maxID)
	f.cancelLocked()
	d := sessionlog.A2ATaskData{Turn: f.turn, TaskID: string(f.taskID), ContextID: f.contextID}
	f.mu.Unlock()
	_ = f.journal(turnlog.Event{Type: sessionlog.EventA2ATask, Data: d}, "")
}

// maxID bounds the remote ids the log keeps.
const maxID = 256

// artifactText is the text logged of one artifact.
type artifactText struct {
	logged string
	// at is how far into logged the stream being read has come: a
	// replayed artifact starts again at 0.
	at int
}

// addArtifact logs the text of an artifact event that the log does not
// hold yet. A resubscription may replay a task from its start: an event
// that does not append starts its artifact over, and text that repeats
// what was logged of it is skipped.
func (f *follower) addArtifact(a *sdk.Artifact, appended bool) {
	text := partsText(a.Parts)
	f.mu.Lock()
	at := f.artifacts[a.ID]
	if at == nil {
		at = &artifactText{}
		f.artifacts[a.ID] = at
	}
	pos := at.at
	if !appended {
		pos = 0
	}
	rest := at.logged[pos:]
	n := 0
	for n < len(rest) && n < len(text) && rest[n] == text[n] {
		n++
	}
	for n > 0 && n < len(text) && !utf8.RuneStart(text[n]) {
		n--
	}
	fresh := text[n:]
	if fresh != "" {
		at.logged = at.logged[:pos+n] + fresh
	}
	at.at = pos + len(text)
	f.mu.Unlock()
	f.addText(fresh)
}

// addText journals text as the assistant's, in chunks of at most
// maxChunk bytes, but for what repeats the replay.
func (f *follower) addText(text string) {
	text = f.skipReplayed(clean(text))
	for text != "" {
		n := min(len(text), maxChunk)
		for n < len(text) && !utf8.RuneStart(text[n]) {
			n--
		}
		piece := text[:n]
		text = text[n:]
		if f.journal(chunk(f.turn, model.ChunkText, piece), piece) == nil {
			f.mu.Lock()
			f.wrote = true
			f.mu.Unlock()
		}
	}
}

// skipReplayed returns what of text the log does not hold yet: text that
// repeats the rest of f.replay is cut from it, and text that departs from
// it ends the replay.
func (f *follower) skipReplayed(text string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.replay == "" {
		return text
	}
	n := 0
	for n < len(f.replay) && n < len(text) && f.replay[n] == text[n] {
		n++
	}
	for n > 0 && n < len(text) && !utf8.RuneStart(text[n]) {
		n--
	}
	if n < len(text) {
		f.replay = ""
	} else {
		f.replay = f.replay[n:]
	}
	return text[n:]
}

// maxChunk bounds one assistant/chunk event's text, well within
// store.MaxEventBytes.
const maxChunk = 16 << 10

func chunk(turn int, kind model.ChunkKind, text string) turnlog.Event {
	return turnlog.Event{Type: sessionlog.EventAssistantChunk, Data: sessionlog.ChunkData{Turn: turn, Step: step,
		Chunk: sessionlog.Chunk{Type: string(kind), Text: text}}}
}

// partsText is the text of parts; data, file and raw parts have none.
func partsText(parts []*sdk.Part) string {
	var sb strings.Builder
	for _, p := range parts {
		if p != nil {
			sb.WriteString(p.Text())
		}
	}
	return sb.String()
}

// clean makes remote text storable: valid UTF-8, without NUL characters.
func clean(s string) string {
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "")
}

// bound cuts s to at most n bytes on a character boundary, marking a cut
// with "…".
func bound(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
