package a2a

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// materialize creates a continuable child of p, as the manager would, and
// returns its live agent, closed when the test ends.
func materialize(t *testing.T, p *Provider, b *bundle, create bool, id string) *liveChild {
	t.Helper()
	req := subagent.MaterializeRequest{Session: store.Session{ID: id, ParentID: parentID, RootID: parentID, Origin: "subagent", Provider: "remote", Mode: subagent.ModeContinuable, CreatedAt: time.Now()}}
	if create {
		req.Create = func(ctx context.Context) error { return b.store.CreateSession(ctx, req.Session) }
	}
	ag, err := p.Materialize(context.Background(), req)
	if err != nil {
		t.Fatalf("Materialize: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		if err := ag.Close(ctx); err != nil {
			t.Error(err)
		}
	})
	return ag.(*liveChild)
}

// turn sends text as a followup and returns once its turn ended.
func runTurn(t *testing.T, r *liveChild, text string) {
	t.Helper()
	msg := sessionlog.UserMessage{ID: uuid.NewString(), Role: "user", Content: []model.Block{model.TextBlock(text)}, Source: sessionlog.Source{Kind: "user"}}
	if _, err := r.FollowupMessage(context.Background(), msg); err != nil {
		t.Fatal(err)
	}
	idle(t, r)
}

func idle(t *testing.T, r *liveChild) {
	t.Helper()
	select {
	case <-r.Idle():
	case <-time.After(wait):
		t.Fatal("the turn did not end")
	}
}

// turnEnds are the reasons of the child log's turn ends, in order.
func turnEnds(t *testing.T, b *bundle, id string) []string {
	t.Helper()
	var out []string
	for _, e := range events(t, b.store, id) {
		if e.Type == sessionlog.EventTurnEnd {
			d, err := sessionlog.Decode[sessionlog.TurnEndData](e)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, d.Reason.Kind)
		}
	}
	return out
}

// A continuable child is one A2A context: its second turn — also from a
// new activation that resumes it from its log — is a message in the
// context the first turn's task named.
func TestContinuable_FollowupsKeepTheContext(t *testing.T) {
	t.Parallel()
	rm := newRemote(t, true)
	p, b := setup(t, rm)
	id := uuid.NewString()
	r := materialize(t, p, b, true, id)
	r.Track()
	runTurn(t, r, "echo one")
	if out := r.Outcome(); model.Text(out.Output) != "echo: one" {
		t.Fatalf("first turn's outcome %+v", out)
	}
	runTurn(t, r, "echo two")
	// A later activation reads the context from the log.
	again := materialize(t, p, b, false, id)
	runTurn(t, again, "echo three")

	contexts, _ := rm.Seen()
	if len(contexts) != 3 || contexts[0][0] != "" || contexts[0][1] == "" {
		t.Fatalf("remote contexts %v, want a new one first", contexts)
	}
	for _, c := range contexts[1:] {
		if c[0] != contexts[0][1] || c[1] != contexts[0][1] {
			t.Fatalf("remote contexts %v, want every later message in %s", contexts, contexts[0][1])
		}
	}
	if got := turnEnds(t, b, id); !slices.Equal(got, []string{"completed", "completed", "completed"}) {
		t.Fatalf("turn ends %v", got)
	}
	if text, _ := logText(t, b.store, id); text != "echo: oneecho: twoecho: three" {
		t.Fatalf("log text %q", text)
	}
}

// Interrupt is tasks/cancel: the hanging turn ends aborted with its
// cause, and the next followup is a new task in the same context.
func TestContinuable_CancelSendsTasksCancel(t *testing.T) {
	t.Parallel()
	rm := newRemote(t, true)
	p, b := setup(t, rm)
	id := uuid.NewString()
	r := materialize(t, p, b, true, id)
	msg := sessionlog.UserMessage{ID: uuid.NewString(), Role: "user", Content: []model.Block{model.TextBlock("hang")}, Source: sessionlog.Source{Kind: "user"}}
	if _, err := r.FollowupMessage(context.Background(), msg); err != nil {
		t.Fatal(err)
	}
	waitForEvent(t, b.store, id, func(e store.Event) bool {
		d, err := sessionlog.Decode[sessionlog.ChunkData](e)
		return e.Type == sessionlog.EventAssistantChunk && err == nil && d.Chunk.Text == "working"
	})
	r.Cancel(sessionlog.CauseParent, true)
	select {
	case <-rm.Cancelled():
	case <-time.After(wait):
		t.Fatal("the remote received no tasks/cancel")
	}
	idle(t, r)
	runTurn(t, r, "echo after")
	if got := turnEnds(t, b, id); !slices.Equal(got, []string{sessionlog.ReasonAborted, "completed"}) {
		t.Fatalf("turn ends %v", got)
	}
	contexts, _ := rm.Seen()
	if len(contexts) != 2 || contexts[1][0] != contexts[0][1] {
		t.Fatalf("remote contexts %v, want the followup in the first context", contexts)
	}
}

// A turn whose tree's deadline passes while its remote task hangs ends
// deadline_exceeded and sends tasks/cancel.
func TestContinuable_DeadlineEndsTheTurn(t *testing.T) {
	t.Parallel()
	rm := newRemote(t, true)
	p, b := setup(t, rm)
	p.deadlines = deadlineAt(time.Now().Add(time.Second))
	id := uuid.NewString()
	r := materialize(t, p, b, true, id)
	msg := sessionlog.UserMessage{ID: uuid.NewString(), Role: "user", Content: []model.Block{model.TextBlock("hang")}, Source: sessionlog.Source{Kind: "user"}}
	if _, err := r.FollowupMessage(context.Background(), msg); err != nil {
		t.Fatal(err)
	}
	select {
	case <-rm.Cancelled():
	case <-time.After(wait):
		t.Fatal("the remote received no tasks/cancel")
	}
	idle(t, r)
	if got := turnEnds(t, b, id); !slices.Equal(got, []string{sessionlog.ReasonDeadlineExceeded}) {
		t.Fatalf("turn ends %v, want deadline_exceeded", got)
	}
}
