package pg_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/subagentd/subagentd/internal/children"
	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/model/scripted"
	"github.com/subagentd/subagentd/internal/pg"
	"github.com/subagentd/subagentd/internal/pg/pgtest"
	"github.com/subagentd/subagentd/internal/providers/inprocess"
	"github.com/subagentd/subagentd/internal/providers/inprocess/inprocesstest"
	"github.com/subagentd/subagentd/internal/providers/spawn"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/subagent"
)

// The continuation manager over Postgres: the in-process materializer and
// spawn children, each "process" a manager over its own pool on one
// database. internal/subagent tests the manager over memstore only.

// mgrProcess is one process: a service, its manager and the subagent/end
// events it dispatched, by task id.
type mgrProcess struct {
	h    *inprocesstest.Harness
	m    *children.Manager
	ends *inprocesstest.Ends
}

// newProcess starts a process over the database at url whose children
// answer "re: " and their last prompt.
func newProcess(t *testing.T, url string) *mgrProcess {
	t.Helper()
	st, err := pg.New(t.Context(), openPool(t, url), discard())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	mdl := scripted.Func(func(req model.Request) scripted.Step {
		return scripted.Step{Text: "re: " + model.Text(req.Messages[len(req.Messages)-1].Content)}
	})
	h := inprocesstest.New(t, inprocesstest.Config{Routes: []model.Route{inprocesstest.Route("script", mdl)}, Store: st})
	p := &mgrProcess{h: h, ends: inprocesstest.WatchEnds(h.Service)}
	p.m = children.NewManager(h.Service, children.ManagerConfig{Materializer: inprocess.NewMaterializer(h.Deps), Logger: h.Logger})
	t.Cleanup(func() {
		if err := p.m.Shutdown(context.Background()); err != nil {
			t.Errorf("manager shutdown: %v", err)
		}
		if err := h.Service.Shutdown(context.Background()); err != nil {
			t.Errorf("service shutdown: %v", err)
		}
	})
	return p
}

// start starts a continuable spawn child of parent with prompt.
func (p *mgrProcess) start(t *testing.T, parent subagent.Parent, prompt string) children.ContinuableStarted {
	t.Helper()
	res, err := p.m.StartContinuable(inprocesstest.Ctx(t), children.ContinuableRequest{
		Provider: spawn.Name, Label: "worker", Prompt: inprocesstest.Text(prompt), Parent: parent})
	if err != nil {
		t.Fatalf("StartContinuable: %v", err)
	}
	return res
}

// end waits for the subagent/end of taskID, or the first end when taskID
// is empty.
func (p *mgrProcess) end(t *testing.T, taskID string) subagent.Event {
	t.Helper()
	return p.ends.Wait(t, taskID)
}

// userTexts returns the texts of the user/messages of session id.
func (p *mgrProcess) userTexts(t *testing.T, id string) []string {
	t.Helper()
	var out []string
	for _, e := range inprocesstest.OfType(p.h.Log(t, id), sessionlog.EventUserMessage) {
		out = append(out, model.Text(inprocesstest.Decode[sessionlog.UserMessage](t, e).Content))
	}
	return out
}

func TestManager_R82_R130_StartedFollowupAndRecoveryAfterRestart(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	first := newProcess(t, url)
	parent := first.h.Parent
	res := first.start(t, parent, "one")
	first.end(t, res.TaskID)
	f, err := first.m.Followup(inprocesstest.Ctx(t), parent.Session.ID, res.ChildID, inprocesstest.Text("two"), sessionlog.Source{})
	if err != nil || f.Route != subagent.RouteStarted {
		t.Fatalf("followup %+v, %v", f, err)
	}
	first.end(t, f.TaskID)
	// Accepted, then the process died before delivering it.
	row, err := children.InboxRow(res.ChildID, sessionlog.UserMessage{Content: inprocesstest.Text("three"), Source: sessionlog.Source{Kind: subagent.SourceUser}})
	if err != nil {
		t.Fatal(err)
	}
	if err := first.h.Store.Enqueue(inprocesstest.Ctx(t), row); err != nil {
		t.Fatal(err)
	}

	second := newProcess(t, url)
	if err := second.m.Recover(inprocesstest.Ctx(t)); err != nil {
		t.Fatal(err)
	}
	if end := second.end(t, ""); model.Text(end.LastAssistantMessage) != "re: three" {
		t.Errorf("recovered epoch %+v", end)
	}
	g, err := second.m.Followup(inprocesstest.Ctx(t), parent.Session.ID, res.ChildID, inprocesstest.Text("four"), sessionlog.Source{})
	if err != nil || g.Route != subagent.RouteStarted {
		t.Fatalf("followup after restart %+v, %v", g, err)
	}
	second.end(t, g.TaskID)
	if got := second.userTexts(t, res.ChildID); !slices.Equal(got, []string{"one", "two", "three", "four"}) {
		t.Errorf("user messages %v", got)
	}
	if n := len(inprocesstest.OfType(second.h.Log(t, res.ChildID), sessionlog.EventDescriptor)); n != 1 {
		t.Errorf("%d descriptors", n)
	}
	if p, _ := second.h.Store.Pending(inprocesstest.Ctx(t), res.ChildID); len(p) != 0 {
		t.Errorf("pending %+v", p)
	}
	if run, err := second.m.Task(inprocesstest.Ctx(t), g.TaskID); err != nil || run.StopReason != subagent.StopCompleted {
		t.Errorf("task %+v, %v", run, err)
	}
}

func TestManager_FiftyConcurrentFollowupsEachDeliveredOnce(t *testing.T) {
	t.Parallel()
	p := newProcess(t, pgtest.URL(t))
	parent := p.h.Parent
	res := p.start(t, parent, "go")
	var wg sync.WaitGroup
	ids, tasks := make([]string, 50), make([]string, 50)
	for i := range 50 {
		wg.Go(func() {
			f, err := p.m.Followup(inprocesstest.Ctx(t), parent.Session.ID, res.ChildID, inprocesstest.Text(fmt.Sprintf("f%02d", i)), sessionlog.Source{})
			if err != nil {
				t.Errorf("followup %d: %v", i, err)
			}
			ids[i], tasks[i] = f.MessageID, f.TaskID
		})
	}
	wg.Wait()
	// Once the activation that took each message has ended, its turn ran.
	for _, task := range tasks {
		p.end(t, task)
	}
	seen := map[string]int{}
	for _, e := range inprocesstest.OfType(p.h.Log(t, res.ChildID), sessionlog.EventUserMessage) {
		seen[inprocesstest.Decode[sessionlog.UserMessage](t, e).ID]++
	}
	for i, id := range ids {
		if seen[id] != 1 {
			t.Errorf("followup %d (%s) is in the log %d times, want once", i, id, seen[id])
		}
	}
	if pending, _ := p.h.Store.Pending(inprocesstest.Ctx(t), res.ChildID); len(pending) != 0 {
		t.Errorf("pending %+v", pending)
	}
}

func TestManager_BadInputAppendsNothing(t *testing.T) {
	t.Parallel()
	p := newProcess(t, pgtest.URL(t))
	parent := p.h.Parent
	res := p.start(t, parent, "go")
	p.end(t, res.TaskID)
	n := len(p.h.Log(t, res.ChildID))
	ctx := inprocesstest.Ctx(t)
	if _, err := p.m.Followup(ctx, parent.Session.ID, "nobody", inprocesstest.Text("x"), sessionlog.Source{}); subagent.ErrorCode(err) != subagent.ESessionNotFound {
		t.Errorf("unknown child: %v", err)
	}
	if _, err := p.m.Followup(ctx, "someone", res.ChildID, inprocesstest.Text("x"), sessionlog.Source{}); subagent.ErrorCode(err) != subagent.EForbidden {
		t.Errorf("wrong parent: %v", err)
	}
	if got := len(p.h.Log(t, res.ChildID)); got != n {
		t.Errorf("log grew from %d to %d", n, got)
	}
	if pending, _ := p.h.Store.Pending(ctx, res.ChildID); len(pending) != 0 {
		t.Errorf("pending %+v", pending)
	}
}
