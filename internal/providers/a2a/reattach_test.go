package a2a

import (
	"context"
	"slices"
	"testing"
	"time"

	sdk "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/google/uuid"

	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/providers/turnlog"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// leftOpen writes the log a replica leaves when it dies while a turn's
// task runs: child id's first turn, opened with prompt, the task's a2a/task
// and — from an agent that streams — the text "before" that the task
// streamed first. The stream is then dropped; the task waits at the
// remote's gate. It returns the task.
func leftOpen(t *testing.T, p *Provider, b *bundle, id, prompt string) sdk.TaskID {
	t.Helper()
	ctx := context.Background()
	if err := b.store.CreateSession(ctx, store.Session{ID: id, ParentID: parentID, RootID: parentID, Origin: "subagent",
		Provider: "remote", Mode: subagent.ModeContinuable, CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	content := []model.Block{model.TextBlock(prompt)}
	write := func(evs ...turnlog.Event) {
		t.Helper()
		batch, _, err := turnlog.Encode(evs...)
		if err == nil {
			_, err = b.store.AppendEvents(ctx, id, batch...)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	write(turnlog.Event{Type: sessionlog.EventTurnStart, Data: sessionlog.TurnData{Turn: 1}},
		turnlog.Event{Type: sessionlog.EventUserMessage, Data: sessionlog.UserMessage{ID: uuid.NewString(), Role: "user", Content: content, Source: sessionlog.Source{Kind: "user"}}},
		turnlog.Event{Type: sessionlog.EventStepStart, Data: sessionlog.StepData{Turn: 1, Step: 1}})
	c, err := p.connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	noted := func(id sdk.TaskID, contextID string) {
		write(turnlog.Event{Type: sessionlog.EventA2ATask, Data: sessionlog.A2ATaskData{Turn: 1, TaskID: string(id), ContextID: contextID}})
	}
	req := &sdk.SendMessageRequest{Message: message(content)}
	if !c.streaming {
		req.Config = &sdk.SendMessageConfig{ReturnImmediately: true}
		res, err := c.client.SendMessage(ctx, req)
		task, ok := res.(*sdk.Task)
		if err != nil || !ok {
			t.Fatalf("message/send: %T, %v", res, err)
		}
		noted(task.ID, task.ContextID)
		return task.ID
	}
	sctx, drop := context.WithCancel(ctx)
	defer drop()
	var task sdk.TaskID
	for ev, err := range c.client.SendStreamingMessage(sctx, req) {
		if err != nil {
			t.Fatalf("message/stream: %v", err)
		}
		if task == "" {
			task = ev.TaskInfo().TaskID
			noted(task, ev.TaskInfo().ContextID)
		}
		if a, ok := ev.(*sdk.TaskArtifactUpdateEvent); ok && partsText(a.Artifact.Parts) == "before" {
			write(chunk(1, model.ChunkText, "before"))
			return task
		}
	}
	t.Fatal("the stream ended before the task streamed its text")
	return ""
}

// awaitEnd follows task over p's agent until it reached a final state.
func awaitEnd(t *testing.T, p *Provider, task sdk.TaskID) {
	t.Helper()
	c, err := p.connect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	for ev, err := range c.client.SubscribeToTask(ctx, &sdk.SubscribeToTaskRequest{ID: task}) {
		if err != nil {
			break // it ended before the subscription
		}
		if st, ok := ev.(*sdk.TaskStatusUpdateEvent); ok && st.Status.State.Terminal() {
			break
		}
	}
	got, err := c.client.GetTask(ctx, &sdk.GetTaskRequest{ID: task})
	if err != nil || !got.Status.State.Terminal() {
		t.Fatalf("task %s = %+v, %v; want it ended", task, got, err)
	}
}

// A turn whose replica died while its task ran is not cut off: the child's
// next agent rejoins the task — over SubscribeToTask, or tasks/get for an
// agent that cannot stream or a task that ended meanwhile — once
// reattached by the manager or at its next followup, which queues behind
// it. The log gets what it lacked of
// the task's text, once, and the task's real end; the followup is a
// message in the same context.
func TestContinuable_ResumeRejoinsTheTaskOfATurnLeftOpen(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		streaming  bool
		byFollowup bool
		// endedFirst: the task ends before the agent rejoins it.
		endedFirst bool
	}{
		{"streaming, reattached", true, false, false},
		{"streaming, ended before the rejoin", true, false, true},
		{"polled, by the followup", false, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rm := newRemote(t, tc.streaming)
			p, b := setup(t, rm)
			id := uuid.NewString()
			task := leftOpen(t, p, b, id, "gate after")
			if tc.endedFirst {
				close(rm.Gate)
				awaitEnd(t, p, task)
			}
			earlier, _, _ := rm.received()

			r := materialize(t, p, b, false, id)
			if !r.Detached() {
				t.Fatal("the agent of a log ending in an open turn with its task is not detached")
			}
			r.Track()
			next := sessionlog.UserMessage{ID: uuid.NewString(), Role: "user", Content: []model.Block{model.TextBlock("echo next")}, Source: sessionlog.Source{Kind: "user"}}
			if tc.byFollowup {
				if _, err := r.FollowupMessage(context.Background(), next); err != nil {
					t.Fatal(err)
				}
			} else {
				r.Reattach()
			}
			if !r.Running() || r.Detached() {
				t.Fatal("the rejoined turn does not run")
			}
			if !tc.endedFirst {
				close(rm.Gate)
			}
			idle(t, r)
			if !tc.byFollowup {
				if out := r.Outcome(); model.Text(out.Output) != "beforeafter" || out.End == nil || out.End.Reason.Kind != sessionlog.ReasonCompleted {
					t.Fatalf("the rejoined turn's outcome %+v, want completed with all of the task's text", out)
				}
				runTurn(t, r, "echo next")
			}

			if got := turnEnds(t, b, id); !slices.Equal(got, []string{"completed", "completed"}) {
				t.Fatalf("turn ends %v", got)
			}
			if text, _ := logText(t, b.store, id); text != "beforeafterecho: next" {
				t.Fatalf("log text %q, want each of the task's text once", text)
			}
			tasks := 0
			for _, e := range events(t, b.store, id) {
				if e.Type == sessionlog.EventA2ATask {
					tasks++
				}
			}
			if tasks != 2 {
				t.Fatalf("%d a2a/task events, want one per turn", tasks)
			}
			contexts, _ := rm.Seen()
			if len(contexts) != 2 || contexts[1][0] != contexts[0][1] {
				t.Fatalf("remote contexts %v, want the followup in the rejoined task's context", contexts)
			}
			calls, _, _ := rm.received()
			calls = calls[len(earlier):]
			// A streaming remote's ended task is read over SubscribeToTask
			// when the SDK still answers it there with its final state,
			// else with tasks/get: either reads it once.
			want := []string{"GetTask"}
			switch {
			case tc.streaming && tc.endedFirst:
				want = []string{"GetTask", "SubscribeToTask"}
			case tc.streaming:
				want = []string{"SubscribeToTask"}
			}
			if !slices.ContainsFunc(calls, func(c string) bool { return slices.Contains(want, c) }) {
				t.Fatalf("remote calls %v, want one of %v", calls, want)
			}
		})
	}
}

// A turn a crash left open before the agent named its task has nothing to
// rejoin: it is closed as cut off when the child resumes.
func TestContinuable_ResumeCutsOffATurnWithoutATask(t *testing.T) {
	t.Parallel()
	rm := newRemote(t, true)
	p, b := setup(t, rm)
	id := uuid.NewString()
	if err := b.store.CreateSession(context.Background(), store.Session{ID: id, ParentID: parentID, RootID: parentID, Origin: "subagent",
		Provider: "remote", Mode: subagent.ModeContinuable, CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	batch, _, err := turnlog.Encode(turnlog.Event{Type: sessionlog.EventTurnStart, Data: sessionlog.TurnData{Turn: 1}},
		turnlog.Event{Type: sessionlog.EventStepStart, Data: sessionlog.StepData{Turn: 1, Step: 1}})
	if err == nil {
		_, err = b.store.AppendEvents(context.Background(), id, batch...)
	}
	if err != nil {
		t.Fatal(err)
	}
	r := materialize(t, p, b, false, id)
	if r.Detached() {
		t.Fatal("a turn without a task is detached")
	}
	runTurn(t, r, "echo after")
	if got := turnEnds(t, b, id); !slices.Equal(got, []string{sessionlog.ReasonError, "completed"}) {
		t.Fatalf("turn ends %v, want the cut-off turn and the next", got)
	}
	for _, e := range events(t, b.store, id) {
		if d, err := sessionlog.Decode[sessionlog.TurnEndData](e); e.Type == sessionlog.EventTurnEnd && err == nil && d.Turn == 1 && d.Reason.Message != turnlog.CutOff.Diagnostic {
			t.Fatalf("turn 1 ended %+v, want cut off", d.Reason)
		}
	}
}

// Detach — what a replica that cannot renew the child's lease does — stops
// following the running turn's task without tasks/cancel and without
// writing its end: the task goes on at the remote, the turn stays open in
// the log, and the child's next agent rejoins it and logs the rest once.
func TestContinuable_DetachLeavesTheTaskToTheNextDriver(t *testing.T) {
	t.Parallel()
	rm := newRemote(t, true)
	p, b := setup(t, rm)
	id := uuid.NewString()
	r := materialize(t, p, b, true, id)
	msg := sessionlog.UserMessage{ID: uuid.NewString(), Role: "user", Content: []model.Block{model.TextBlock("gate after")}, Source: sessionlog.Source{Kind: "user"}}
	if _, err := r.FollowupMessage(context.Background(), msg); err != nil {
		t.Fatal(err)
	}
	waitForEvent(t, b.store, id, func(e store.Event) bool {
		d, err := sessionlog.Decode[sessionlog.ChunkData](e)
		return e.Type == sessionlog.EventAssistantChunk && err == nil && d.Chunk.Text == "before"
	})
	r.Detach()
	idle(t, r) // the turn's follower has stopped, and sent whatever it sends
	select {
	case task := <-rm.Cancelled():
		t.Fatalf("a detached turn sent tasks/cancel for %s", task)
	default:
	}
	if got := turnEnds(t, b, id); len(got) != 0 {
		t.Fatalf("a detached turn wrote its end: %v", got)
	}

	next := materialize(t, p, b, false, id)
	if !next.Detached() {
		t.Fatal("the next agent does not find the detached turn")
	}
	next.Track()
	next.Reattach()
	close(rm.Gate)
	idle(t, next)
	if got := turnEnds(t, b, id); !slices.Equal(got, []string{"completed"}) {
		t.Fatalf("turn ends %v, want the rejoined turn completed", got)
	}
	if text, _ := logText(t, b.store, id); text != "beforeafter" {
		t.Fatalf("log text %q, want each of the task's text once", text)
	}
}
