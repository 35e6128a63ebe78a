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
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// run is a published A2A child: one remote task. Its result settles
// exactly once, first come: the task's final state, a failure to follow
// it, or a local cancellation, which never waits for the agent (R26) and
// sends tasks/cancel once the task is known.
type run struct {
	p       *Provider
	c       *conn
	log     *slog.Logger
	childID string
	// logCtx carries the start request's values (its tenant, its trace)
	// without its cancellation: the child outlives the request.
	logCtx context.Context
	// callCtx is the context of the calls that follow the task; stopCalls
	// ends the one in flight.
	callCtx   context.Context
	stopCalls context.CancelFunc

	done       chan struct{} // closed once the result settled
	cancelled  chan struct{} // closed by the first cancel
	cancelOnce sync.Once
	driveDone  chan struct{}
	// bg counts the tasks/cancel call and the stream's stop timer.
	bg sync.WaitGroup

	disposeOnce sync.Once
	disposed    chan struct{}

	// mu guards the fields below and serialises log writes, so that nothing
	// is appended after the turn/end that settlement writes.
	mu        sync.Mutex
	logging   bool // the child session exists
	logFailed bool // a write to the child log failed: the turn fails
	settled   bool
	result    subagent.Result
	text      turnlog.Output
	// taskID is the remote task, once the agent named it; cancelWanted
	// says a cancel waits for it, cancelSent that tasks/cancel went out.
	taskID       sdk.TaskID
	cancelWanted bool
	cancelSent   bool
	// artifacts is the text logged of each artifact, to skip what a
	// resubscription replays.
	artifacts map[sdk.ArtifactID]*artifactText
}

var _ subagent.Run = (*run)(nil)

func newRun(logCtx context.Context, p *Provider, c *conn, childID string) *run {
	callCtx, stop := context.WithCancel(logCtx)
	return &run{
		p: p, c: c, log: p.log.With(slog.String("child_id", childID)), childID: childID,
		logCtx: logCtx, callCtx: callCtx, stopCalls: stop,
		done: make(chan struct{}), cancelled: make(chan struct{}), driveDone: make(chan struct{}),
		disposed: make(chan struct{}), artifacts: map[sdk.ArtifactID]*artifactText{},
	}
}

// ChildID is the child session's id, minted by the service.
func (r *run) ChildID() string { return r.childID }

// Local is false: the child is a remote agent.
func (r *run) Local() bool { return false }

// Done is closed once the result has settled.
func (r *run) Done() <-chan struct{} { return r.done }

// Result waits for settlement and returns the result. It never fails:
// remote failures and lost connections settle as stop reason "error".
func (r *run) Result() (subagent.Result, error) {
	<-r.done
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.result, nil
}

// Cancel settles the run "aborted" at once, unless it already settled,
// and sends tasks/cancel without waiting for the agent (R23, R26).
func (r *run) Cancel() { r.cancel(sessionlog.CauseParent) }

// cancelGrace bounds how long a cancelled run's call waits for the agent
// to name its task, so that tasks/cancel can name it.
const cancelGrace = 10 * time.Second

func (r *run) cancel(cause string) {
	r.stop(turnlog.Outcome{Reason: subagent.StopAborted, Cause: cause})
}

// stop settles the run with o at once, unless it already settled, and
// sends tasks/cancel once the task is known, without waiting for the
// agent. Only the first call does anything.
func (r *run) stop(o turnlog.Outcome) {
	r.cancelOnce.Do(func() {
		close(r.cancelled)
		r.settle(o)
		r.mu.Lock()
		r.cancelWanted = true
		id := r.cancelTaskLocked()
		r.mu.Unlock()
		if id == "" {
			r.bg.Add(1)
			stop := time.AfterFunc(cancelGrace, func() { defer r.bg.Done(); r.stopCalls() })
			go func() {
				<-r.driveDone
				if stop.Stop() {
					r.bg.Done()
				}
			}()
		}
	})
}

// cancelTaskLocked sends tasks/cancel, once, when a cancel was wanted and
// the task is known; it returns the task it cancels. r.mu is held.
func (r *run) cancelTaskLocked() sdk.TaskID {
	if !r.cancelWanted || r.cancelSent || r.taskID == "" {
		return ""
	}
	r.cancelSent = true
	id := r.taskID
	r.bg.Add(1)
	go func() {
		defer r.bg.Done()
		// The call that follows the task ends once the cancel was
		// answered: the agent's last events are of no use to a settled run.
		defer r.stopCalls()
		ctx, cancel := context.WithTimeout(r.logCtx, cancelGrace)
		defer cancel()
		if _, err := r.c.client.CancelTask(ctx, &sdk.CancelTaskRequest{ID: id}); err != nil {
			r.log.Warn("tasks/cancel of the A2A child's task failed", slog.String("task_id", string(id)), slog.Any("error", err))
		}
	}()
	return id
}

// Dispose cancels (sending tasks/cancel), then waits until the call that
// followed the task and the cancel have returned. Every call returns the
// same outcome; ctx only bounds how long this call waits.
func (r *run) Dispose(ctx context.Context) error {
	r.disposeOnce.Do(func() {
		r.cancel(sessionlog.CauseDisposed)
		go func() {
			<-r.driveDone
			r.bg.Wait()
			close(r.disposed)
		}()
	})
	select {
	case <-r.disposed:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("dispose A2A child %s: %w", r.childID, ctx.Err())
	}
}

// drive sends the prompt and follows the task to its end, then settles
// with it; a local cancel has settled already.
func (r *run) drive(prompt []model.Block) {
	defer close(r.driveDone)
	defer r.stopCalls()
	req := &sdk.SendMessageRequest{Message: message(prompt)}
	var o turnlog.Outcome
	if r.c.streaming {
		o = r.stream(req)
	} else {
		o = r.poll(req)
	}
	r.settle(o)
}

// maxReattach bounds the resubscriptions after a stream was lost before
// the task ended: each that delivers an event starts the count again.
const maxReattach = 5

// reattachBackoff is the pause before the nth resubscription in a row.
func reattachBackoff(n int) time.Duration { return time.Duration(n) * 200 * time.Millisecond }

// stream follows the task over message/stream and, when that stream is
// lost before the task ended, over tasks/resubscribe (SubscribeToTask)
// while the task is live, reading it with tasks/get once it is not.
func (r *run) stream(req *sdk.SendMessageRequest) turnlog.Outcome {
	end, got, err := r.consume(r.c.client.SendStreamingMessage(r.callCtx, req))
	for lost := 0; ; {
		if end != nil {
			return *end
		}
		if r.isCancelled() {
			return aborted()
		}
		id := r.task()
		if id == "" {
			return failed("the remote A2A agent's stream ended before it named its task: %v", streamErr(err))
		}
		if got {
			lost = 0
		}
		if lost++; lost > maxReattach {
			return failed("lost the remote A2A agent's stream of task %s %d times in a row: %v", id, maxReattach, streamErr(err))
		}
		r.log.Info("A2A stream lost; resubscribing", slog.String("task_id", string(id)), slog.Int("attempt", lost), slog.Any("error", err))
		if !r.pause(reattachBackoff(lost)) {
			return aborted()
		}
		end, got, err = r.consume(r.c.client.SubscribeToTask(r.callCtx, &sdk.SubscribeToTaskRequest{ID: id}))
		if end == nil && err != nil && !r.isCancelled() {
			// A task that ended while no stream was open cannot be
			// subscribed to (UnsupportedOperation): read it.
			t, gerr := r.c.client.GetTask(r.callCtx, &sdk.GetTaskRequest{ID: id})
			if gerr == nil {
				end = r.observe(t)
			}
		}
	}
}

// streamErr is the account of how a stream ended without a final state.
func streamErr(err error) error {
	if err == nil {
		return errors.New("the stream closed")
	}
	return err
}

// consume journals the events of seq until the task reaches a final
// state (end), the stream ends or fails (err), or the run is cancelled.
// got says whether any event came.
func (r *run) consume(seq iter.Seq2[sdk.Event, error]) (end *turnlog.Outcome, got bool, err error) {
	for ev, err := range seq {
		if err != nil {
			return nil, got, err
		}
		got = true
		if end := r.observe(ev); end != nil {
			return end, got, nil
		}
		if r.isCancelled() {
			return nil, got, nil
		}
	}
	return nil, got, nil
}

// poll drives an agent that cannot stream: message/send, then tasks/get
// every PollInterval until the task reaches a final state.
func (r *run) poll(req *sdk.SendMessageRequest) turnlog.Outcome {
	req.Config = &sdk.SendMessageConfig{ReturnImmediately: true}
	res, err := r.c.client.SendMessage(r.callCtx, req)
	if err != nil {
		if r.isCancelled() {
			return aborted()
		}
		return failed("message/send to the remote A2A agent failed: %v", err)
	}
	ev, ok := res.(sdk.Event)
	if !ok {
		return failed("the remote A2A agent answered message/send with %T", res)
	}
	failures := 0
	for {
		if end := r.observe(ev); end != nil {
			return *end
		}
		id := r.task()
		if id == "" {
			return failed("the remote A2A agent answered message/send with neither a message nor a task")
		}
		if !r.pause(r.p.poll) {
			return aborted()
		}
		t, err := r.c.client.GetTask(r.callCtx, &sdk.GetTaskRequest{ID: id})
		if err != nil {
			if r.isCancelled() {
				return aborted()
			}
			if failures++; failures > maxReattach {
				return failed("tasks/get of task %s failed %d times in a row: %v", id, maxReattach, err)
			}
			continue
		}
		failures = 0
		ev = t
	}
}

// pause waits d, or returns false once the run is cancelled.
func (r *run) pause(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.cancelled:
		return false
	}
}

func (r *run) isCancelled() bool {
	select {
	case <-r.cancelled:
		return true
	default:
		return false
	}
}

func (r *run) task() sdk.TaskID {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.taskID
}

func aborted() turnlog.Outcome { return turnlog.Outcome{Reason: subagent.StopAborted} }

func failed(format string, args ...any) turnlog.Outcome {
	return turnlog.Outcome{Reason: subagent.StopError, Diagnostic: fmt.Sprintf(format, args...)}
}

// observe journals one event of the remote agent and returns the outcome
// when it puts the task in a final state: a message outside a task, a
// terminal state, or a state that needs input this service cannot give.
func (r *run) observe(ev sdk.Event) *turnlog.Outcome {
	switch ev := ev.(type) {
	case *sdk.Message:
		r.addText(partsText(ev.Parts))
		if ev.TaskID == "" {
			return &turnlog.Outcome{Reason: subagent.StopCompleted}
		}
		r.noteTask(ev.TaskID, ev.ContextID)
	case *sdk.Task:
		r.noteTask(ev.ID, ev.ContextID)
		for _, a := range ev.Artifacts {
			r.addArtifact(a, false)
		}
		return r.status(ev.Status)
	case *sdk.TaskArtifactUpdateEvent:
		r.noteTask(ev.TaskID, ev.ContextID)
		if ev.Artifact != nil {
			r.addArtifact(ev.Artifact, ev.Append)
		}
	case *sdk.TaskStatusUpdateEvent:
		r.noteTask(ev.TaskID, ev.ContextID)
		return r.status(ev.Status)
	}
	return nil
}

// status journals a task status and maps a final one (docs/seam.md §6):
// completed is completed, canceled aborted, failed and rejected an error
// with the agent's message, and input-required or auth-required an error
// saying what the agent waits for — this service does not relay a remote
// agent's questions.
func (r *run) status(s sdk.TaskStatus) *turnlog.Outcome {
	var text string
	if s.Message != nil {
		text = partsText(s.Message.Parts)
	}
	switch s.State {
	case sdk.TaskStateCompleted:
		r.finalText(text)
		return &turnlog.Outcome{Reason: subagent.StopCompleted}
	case sdk.TaskStateCanceled:
		return &turnlog.Outcome{Reason: subagent.StopAborted}
	case sdk.TaskStateFailed, sdk.TaskStateRejected:
		return &turnlog.Outcome{Reason: subagent.StopError, Diagnostic: withText("the remote A2A agent's task "+stateName(s.State), text)}
	case sdk.TaskStateInputRequired, sdk.TaskStateAuthRequired:
		return &turnlog.Outcome{Reason: subagent.StopError, Diagnostic: withText(
			"the remote A2A agent needs input ("+stateName(s.State)+"), which subagentd does not relay to it yet", text)}
	}
	if text != "" {
		r.record(chunk(model.ChunkReasoning, text))
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

// finalText adds a completed status's message to the output when the task
// produced no text of its own: some agents answer only there.
func (r *run) finalText(text string) {
	r.mu.Lock()
	empty := len(r.text.Blocks()) == 0
	r.mu.Unlock()
	if empty {
		r.addText(text)
	}
}

// noteTask records the task the agent named, the first time, in the child
// log (sessionlog.EventA2ATask), and sends the cancel that waited for it.
func (r *run) noteTask(id sdk.TaskID, contextID string) {
	if id == "" {
		return
	}
	r.mu.Lock()
	if r.taskID != "" {
		r.mu.Unlock()
		return
	}
	r.taskID = id
	r.cancelTaskLocked()
	r.mu.Unlock()
	r.record(turnlog.Event{Type: sessionlog.EventA2ATask, Data: sessionlog.A2ATaskData{
		Turn: turn, TaskID: bound(clean(string(id)), maxID), ContextID: bound(clean(contextID), maxID)}})
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
func (r *run) addArtifact(a *sdk.Artifact, appended bool) {
	text := partsText(a.Parts)
	r.mu.Lock()
	at := r.artifacts[a.ID]
	if at == nil {
		at = &artifactText{}
		r.artifacts[a.ID] = at
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
	r.mu.Unlock()
	r.addText(fresh)
}

// addText logs text as the assistant's and adds it to the output.
func (r *run) addText(text string) {
	text = clean(text)
	for text != "" {
		piece := bound(text, maxChunk)
		if len(piece) < len(text) {
			piece = text[:len(piece)-len("…")]
		}
		text = text[len(piece):]
		if r.record(chunk(model.ChunkText, piece)) == nil {
			r.mu.Lock()
			r.text.Add(piece)
			r.mu.Unlock()
		}
	}
}

// maxChunk bounds one assistant/chunk event's text, well within
// store.MaxEventBytes.
const maxChunk = 16 << 10

func chunk(kind model.ChunkKind, text string) turnlog.Event {
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

// record appends e to the child log unless the turn is over; a failed
// write stops the turn and is returned.
func (r *run) record(e turnlog.Event) error {
	r.mu.Lock()
	var err error
	if r.logging && !r.settled && !r.logFailed {
		err = r.appendLocked(e)
	}
	r.mu.Unlock()
	if err != nil {
		r.log.Error("cannot write the A2A child log; stopping its turn", slog.String("event", e.Type), slog.Any("error", err))
		r.stop(turnlog.Outcome{Reason: subagent.StopError, Diagnostic: turnlog.LogFailed})
	}
	return err
}

// appendLocked writes evs to the child log, which must exist, in one
// append; call it with mu held. A failure is remembered: the turn then
// fails.
func (r *run) appendLocked(evs ...turnlog.Event) error {
	batch, _, err := turnlog.Encode(evs...)
	if err == nil {
		_, err = r.p.store.AppendEvents(r.logCtx, r.childID, batch...)
	}
	if err != nil {
		r.logFailed = true
		return fmt.Errorf("write log of A2A child %s: %w", r.childID, err)
	}
	return nil
}

// settle records the result once, with the text streamed so far as
// output, closes the turn in the child log and then closes done, so a
// reader woken by Done finds the log complete.
func (r *run) settle(o turnlog.Outcome) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.settled {
		return
	}
	r.settled = true
	if r.logFailed {
		o = turnlog.Outcome{Reason: subagent.StopError, Diagnostic: turnlog.LogFailed}
	}
	o.Diagnostic = subagent.TruncateDiagnostic(clean(o.Diagnostic))
	output := r.text.Blocks()
	var usage store.Usage
	if r.logging {
		o, _ = turnlog.CloseTurn(r.appendLocked, r.log, turn, output, o)
		// The agent's model calls are its own: the prompt counts as one.
		usage.ModelCalls = 1
	}
	r.result = subagent.Result{Output: output, StopReason: o.Reason, Diagnostic: o.Diagnostic, Usage: usage}
	close(r.done)
}
