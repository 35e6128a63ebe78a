package spawn_test

import (
	"testing"

	"github.com/subagentd/subagentd/internal/agent"
	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/model/scripted"
	"github.com/subagentd/subagentd/internal/providers/inprocess/inprocesstest"
	"github.com/subagentd/subagentd/internal/providers/spawn"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/subagent"
)

func TestSpawn_Provider(t *testing.T) {
	t.Parallel()
	h := inprocesstest.New(t, inprocesstest.Config{})
	p := spawn.New(h.Deps)
	want := subagent.Capabilities{OutputSchema: true, DepthLimit: true, ToolFilter: true, Persona: true,
		Steer: true, Resume: true, Local: true}
	if p.Name() != spawn.Name || p.Capabilities() != want || p.InheritsParentContext() || p.Description() == "" {
		t.Errorf("provider %q caps %+v inherits %v description %q", p.Name(), p.Capabilities(), p.InheritsParentContext(), p.Description())
	}
	cp, ok := p.(subagent.ContinuableProvider)
	if !ok {
		t.Fatalf("%T is not a ContinuableProvider", p)
	}
	spec, err := cp.PrepareContinuable(inprocesstest.Ctx(t), subagent.ContinuableCreateRequest{SessionID: "c", Parent: h.Parent})
	if err != nil || spec.Seed != nil {
		t.Errorf("PrepareContinuable = %+v, %v; want a fresh child", spec, err)
	}
}

// TestSpawn_FreshChildDoesNotSeeTheParent checks docs/seam.md §2: a spawn
// child's own session starts empty before its prompt, even when the parent
// has completed turns.
func TestSpawn_FreshChildDoesNotSeeTheParent(t *testing.T) {
	t.Parallel()
	m := scripted.New(scripted.Step{Text: "child answer"})
	h := inprocesstest.New(t, inprocesstest.Config{Routes: []model.Route{inprocesstest.Route("main", m)}})
	ctx := inprocesstest.Ctx(t)
	parent, err := agent.New(ctx, agent.Config{ID: h.Parent.Session.ID, Store: h.Store,
		Model: scripted.New(scripted.Step{Text: "parent answer"})})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := parent.Followup(ctx, inprocesstest.Text("parent question"), sessionlog.Source{Kind: "user"}); err != nil {
		t.Fatal(err)
	}
	if err := parent.WaitIdle(ctx); err != nil {
		t.Fatal(err)
	}
	if err := parent.Close(ctx); err != nil {
		t.Fatal(err)
	}

	run := h.Start(t, spawn.Name, h.Request("child question"))
	res := inprocesstest.Settle(t, run)
	if res.StopReason != subagent.StopCompleted || model.Text(res.Output) != "child answer" {
		t.Fatalf("result %+v", res)
	}
	if run.ChildID() == h.Parent.Session.ID {
		t.Fatal("child shares the parent's session")
	}
	hdr, err := h.Store.GetSession(ctx, run.ChildID())
	if err != nil || hdr.ParentID != h.Parent.Session.ID || hdr.SeedLength != 0 {
		t.Fatalf("child header %+v, %v", hdr, err)
	}
	if first := h.Log(t, run.ChildID())[0]; first.Type != sessionlog.EventApprovalPolicy {
		t.Errorf("child log starts with %s", first.Type)
	}
	msgs := m.Requests()[0].Messages
	if len(msgs) != 1 || model.Text(msgs[0].Content) != "child question" {
		t.Errorf("child model saw %+v, want only its prompt", msgs)
	}
}
