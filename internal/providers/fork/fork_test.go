package fork_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"

	"github.com/subagentd/subagentd/internal/agent"
	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/model/scripted"
	"github.com/subagentd/subagentd/internal/providers/fork"
	"github.com/subagentd/subagentd/internal/providers/inprocess/inprocesstest"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// harness is an inprocesstest harness whose default route plays the
// child's steps.
func harness(t *testing.T, child ...scripted.Step) (*inprocesstest.Harness, *scripted.Model) {
	t.Helper()
	m := scripted.New(child...)
	return inprocesstest.New(t, inprocesstest.Config{Routes: []model.Route{inprocesstest.Route("main", m)}}), m
}

// runParent drives the harness's parent session with a root agent over m:
// one turn per prompt, then closes it. filter scopes the parent's tools.
func runParent(t *testing.T, h *inprocesstest.Harness, m model.Model, filter *agent.Filter, prompts ...string) {
	t.Helper()
	ctx := inprocesstest.Ctx(t)
	a, err := agent.New(ctx, agent.Config{ID: h.Parent.Session.ID, Store: h.Store, Logger: h.Logger,
		Model: m, ModelName: "parent", Global: h.Tools, Filter: filter})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := a.Close(ctx); err != nil {
			t.Error(err)
		}
	}()
	for _, p := range prompts {
		if _, err := a.Followup(ctx, inprocesstest.Text(p), sessionlog.Source{Kind: "user"}); err != nil {
			t.Fatal(err)
		}
		if err := a.WaitIdle(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// answers is a parent model answering each step with the next text.
func answers(texts ...string) *scripted.Model {
	steps := make([]scripted.Step, len(texts))
	for i, s := range texts {
		steps[i] = scripted.Step{Text: s}
	}
	return scripted.New(steps...)
}

// lastTurnEnd is the index of the last turn/end in evs, or -1.
func lastTurnEnd(evs []store.Event) int {
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].Type == sessionlog.EventTurnEnd {
			return i
		}
	}
	return -1
}

func TestFork_Provider(t *testing.T) {
	t.Parallel()
	h, _ := harness(t)
	p := fork.New(h.Deps)
	want := subagent.Capabilities{OutputSchema: true, DepthLimit: true, ToolFilter: true, Persona: true,
		Steer: true, Resume: true, Local: true}
	if p.Name() != fork.Name || p.Capabilities() != want || !p.InheritsParentContext() || p.Description() == "" {
		t.Errorf("provider %q caps %+v inherits %v description %q", p.Name(), p.Capabilities(), p.InheritsParentContext(), p.Description())
	}
}

// TestFork_R43_ContinuableSeedIsThePrefixAndWritesNothing: a continuable
// fork child is prepared from the parent's completed-turn prefix, and
// preparing creates nothing (docs/seam.md §11).
func TestFork_R43_ContinuableSeedIsThePrefixAndWritesNothing(t *testing.T) {
	t.Parallel()
	h, _ := harness(t)
	runParent(t, h, answers("one"), nil, "first")
	parent := h.Log(t, h.Parent.Session.ID)
	cp, ok := fork.New(h.Deps).(subagent.ContinuableProvider)
	if !ok {
		t.Fatal("fork is not a ContinuableProvider")
	}
	spec, err := cp.PrepareContinuable(inprocesstest.Ctx(t), subagent.ContinuableCreateRequest{SessionID: "c", Parent: h.Parent})
	if err != nil {
		t.Fatal(err)
	}
	if want := fork.Prefix(parent); len(spec.Seed) != len(want) || len(want) == 0 || spec.Seed[len(want)-1].Seq != want[len(want)-1].Seq {
		t.Errorf("seed %v, want the prefix %v", inprocesstest.Types(spec.Seed), inprocesstest.Types(want))
	}
	if n := len(h.Log(t, h.Parent.Session.ID)); n != len(parent) || len(h.Children(t, h.Parent.Session.ID)) != 0 {
		t.Errorf("preparing wrote: parent log %d -> %d events, children %+v", len(parent), n, h.Children(t, h.Parent.Session.ID))
	}
	req := subagent.ContinuableCreateRequest{SessionID: "c", Parent: h.Parent}
	req.Parent.Session.ID = "missing"
	if _, err := cp.PrepareContinuable(inprocesstest.Ctx(t), req); subagent.ErrorCode(err) != subagent.ESessionNotFound {
		t.Errorf("unknown parent: %v, want SESSION_NOT_FOUND", err)
	}
}

func TestFork_R39_SeedEndsAtLastTurnEnd(t *testing.T) {
	t.Parallel()
	h, _ := harness(t, scripted.Step{Text: "child answer"})
	runParent(t, h, answers("one", "two"), nil, "first", "second")
	// Log-only events after the last turn/end are not part of the seed.
	if _, err := h.Store.AppendEvents(inprocesstest.Ctx(t), h.Parent.Session.ID,
		store.NewEvent{Type: "custom/note", Data: json.RawMessage(`{"note":"after"}`)}); err != nil {
		t.Fatal(err)
	}
	parent := h.Log(t, h.Parent.Session.ID)
	k := lastTurnEnd(parent)
	if k < 0 || k == len(parent)-1 {
		t.Fatalf("parent log %v: want a turn/end followed by a log-only event", inprocesstest.Types(parent))
	}
	run := h.Start(t, fork.Name, h.Request("summarise"))
	inprocesstest.Settle(t, run)
	hdr, err := h.Store.GetSession(inprocesstest.Ctx(t), run.ChildID())
	if err != nil {
		t.Fatal(err)
	}
	if hdr.SeedLength != k+1 {
		t.Fatalf("seedLength %d, want %d (through the last turn/end)", hdr.SeedLength, k+1)
	}
	child := h.Log(t, run.ChildID())
	if child[k].Type != sessionlog.EventTurnEnd || child[k+1].Type != sessionlog.EventEndSeed || child[k+2].Type != sessionlog.EventApprovalPolicy {
		t.Errorf("child log around the seed end: %v", inprocesstest.Types(child[k:min(len(child), k+3)]))
	}
	if n := len(inprocesstest.OfType(child, "custom/note")); n != 0 {
		t.Errorf("child inherited %d events from after the last turn/end", n)
	}
}

func TestFork_R39_NoTurnEndMeansNoSeed(t *testing.T) {
	t.Parallel()
	h, m := harness(t, scripted.Step{Text: "fresh"})
	if _, err := h.Store.AppendEvents(inprocesstest.Ctx(t), h.Parent.Session.ID,
		store.NewEvent{Type: "custom/note", Data: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	run := h.Start(t, fork.Name, h.Request("go"))
	if res := inprocesstest.Settle(t, run); res.StopReason != subagent.StopCompleted || model.Text(res.Output) != "fresh" {
		t.Fatalf("result %+v", res)
	}
	hdr, _ := h.Store.GetSession(inprocesstest.Ctx(t), run.ChildID())
	child := h.Log(t, run.ChildID())
	if hdr.SeedLength != 0 || child[0].Type != sessionlog.EventApprovalPolicy || len(inprocesstest.OfType(child, sessionlog.EventEndSeed)) != 0 {
		t.Errorf("seedLength %d, log %v: want a spawn-like child", hdr.SeedLength, inprocesstest.Types(child))
	}
	if msgs := m.Requests()[0].Messages; len(msgs) != 1 || model.Text(msgs[0].Content) != "go" {
		t.Errorf("fresh child's model saw %+v, want only its prompt", msgs)
	}
}

func TestFork_R40_OpenDelegatingTurnIsExcluded(t *testing.T) {
	t.Parallel()
	h, child := harness(t, scripted.Step{Text: "child answer"})
	type delegated struct {
		run *subagent.RunHandle
		res subagent.Result
	}
	got := make(chan delegated, 1)
	err := h.Tools.Register(agent.Tool{Name: "delegate", Run: func(ctx context.Context, call agent.Call) ([]model.Block, error) {
		run, err := h.Service.Start(ctx, fork.Name, h.Request("look deeper"))
		if err != nil {
			return nil, err
		}
		<-run.Done()
		res, _ := run.Result()
		got <- delegated{run, res}
		return res.Output, run.Dispose(context.Background())
	}})
	if err != nil {
		t.Fatal(err)
	}
	parentModel := scripted.New(
		scripted.Step{Text: "hi"},
		scripted.Step{Text: "delegating", ToolCalls: []model.ToolCall{{Name: "delegate"}}},
		scripted.Step{Text: "parent done"})
	runParent(t, h, parentModel, nil, "hello", "dig in")
	d := <-got
	if d.res.StopReason != subagent.StopCompleted || model.Text(d.res.Output) != "child answer" {
		t.Fatalf("child result %+v", d.res)
	}
	hdr, _ := h.Store.GetSession(inprocesstest.Ctx(t), d.run.ChildID())
	seed := h.Log(t, d.run.ChildID())[:hdr.SeedLength]
	if n := len(inprocesstest.OfType(seed, sessionlog.EventTurnStart)); n != 1 || seed[len(seed)-1].Type != sessionlog.EventTurnEnd {
		t.Fatalf("seed %v: want exactly the completed first turn", inprocesstest.Types(seed))
	}
	open := 0
	for _, e := range seed {
		switch e.Type {
		case sessionlog.EventStepStart, sessionlog.EventToolCall:
			open++
		case sessionlog.EventStepEnd, sessionlog.EventToolResult:
			open--
		}
	}
	if open != 0 {
		t.Errorf("seed has %d unclosed steps or tool calls", open)
	}
	for _, e := range inprocesstest.OfType(h.Log(t, d.run.ChildID()), sessionlog.EventTurnEnd) {
		if r := inprocesstest.Decode[sessionlog.TurnEndData](t, e); r.Reason.Kind == sessionlog.ReasonInterrupted {
			t.Errorf("child log needed crash repair: %+v", r)
		}
	}
	var texts []string
	for _, m := range child.Requests()[0].Messages {
		texts = append(texts, string(m.Role)+":"+model.Text(m.Content))
	}
	if want := []string{"user:hello", "assistant:hi", "user:look deeper"}; !slices.Equal(texts, want) {
		t.Errorf("child model saw %v, want %v", texts, want)
	}
}

func TestFork_R41_SeedCopiedVerbatimAndTurnsContinue(t *testing.T) {
	t.Parallel()
	h, _ := harness(t, scripted.Step{Text: "child"})
	runParent(t, h, answers("one", "two"), nil, "first", "second")
	parent := h.Log(t, h.Parent.Session.ID)
	run := h.Start(t, fork.Name, h.Request("third"))
	inprocesstest.Settle(t, run)
	hdr, _ := h.Store.GetSession(inprocesstest.Ctx(t), run.ChildID())
	child := h.Log(t, run.ChildID())
	if hdr.SeedLength != len(parent) {
		t.Fatalf("seedLength %d, want the whole settled parent log (%d)", hdr.SeedLength, len(parent))
	}
	for i, p := range parent {
		c := child[i]
		if c.Seq != p.Seq || c.Type != p.Type || !c.Time.Equal(p.Time) || string(c.Data) != string(p.Data) {
			t.Fatalf("child event %d = %+v, want the parent's %+v", i, c, p)
		}
	}
	starts := inprocesstest.OfType(child[hdr.SeedLength:], sessionlog.EventTurnStart)
	if len(starts) != 1 || inprocesstest.Decode[sessionlog.TurnData](t, starts[0]).Turn != 3 {
		t.Errorf("child's own turns %v, want one turn numbered 3", starts)
	}
	if id, found, err := sessionlog.ResumeDescriptor(inprocesstest.Ctx(t), h.Store, hdr); err != nil || !found || id.Mode != subagent.ModeOneShot {
		t.Errorf("own-suffix descriptor %+v found=%v err=%v", id, found, err)
	}
}

func TestFork_R42_OutputComesOnlyFromTheChild(t *testing.T) {
	t.Parallel()
	h, _ := harness(t, scripted.Step{Err: errors.New("model unavailable")})
	runParent(t, h, answers("the parent's answer"), nil, "question")
	run := h.Start(t, fork.Name, h.Request("go"))
	res := inprocesstest.Settle(t, run)
	if res.StopReason != subagent.StopError || len(res.Output) != 0 {
		t.Errorf("result %+v, want error with no output (never the parent's answer)", res)
	}
	for _, e := range h.RunEvents(t) {
		if e.Type == subagent.EventEnd && e.LastAssistantMessage != nil {
			t.Errorf("end event carries %v", e.LastAssistantMessage)
		}
	}
}

func TestFork_R44_ChildGetsAFreshToolScope(t *testing.T) {
	t.Parallel()
	h, m := harness(t, scripted.Step{Text: "child"})
	for _, name := range []string{"read", "write"} {
		if err := h.Tools.Register(agent.Tool{Name: name, Run: func(context.Context, agent.Call) ([]model.Block, error) {
			return nil, nil
		}}); err != nil {
			t.Fatal(err)
		}
	}
	runParent(t, h, answers("done"), &agent.Filter{Deny: []string{"write"}}, "work")
	inprocesstest.Settle(t, h.Start(t, fork.Name, h.Request("go")))
	var names []string
	for _, s := range m.Requests()[0].Tools {
		names = append(names, s.Name)
	}
	if !slices.Equal(names, []string{"read", "write"}) {
		t.Errorf("fork child sees tools %v, want every global tool", names)
	}
}

func TestFork_StructuredOutputInASeededChild(t *testing.T) {
	t.Parallel()
	h, _ := harness(t, scripted.Step{ToolCalls: []model.ToolCall{{Name: agent.StructuredOutputTool, Arguments: `{"ok":true}`}}})
	runParent(t, h, answers("context"), nil, "setup")
	req := h.Request("judge")
	req.OutputSchema = json.RawMessage(`{"type":"object","properties":{"ok":{"type":"boolean"}},"required":["ok"]}`)
	res := inprocesstest.Settle(t, h.Start(t, fork.Name, req))
	if res.StopReason != subagent.StopCompleted || string(res.Structured) != `{"ok":true}` {
		t.Errorf("result %+v", res)
	}
}

// A capture in the parent's seed is the parent's answer, not the child's:
// the child still gets to record its own (R42 applied to R51).
func TestFork_SeededParentCaptureDoesNotBlockTheChildsOwn(t *testing.T) {
	t.Parallel()
	schema := json.RawMessage(`{"type":"object","properties":{"ok":{"type":"boolean"}},"required":["ok"]}`)
	h, _ := harness(t, scripted.Step{ToolCalls: []model.ToolCall{{ID: "c1", Name: agent.StructuredOutputTool, Arguments: `{"ok":true}`}}})
	ctx := inprocesstest.Ctx(t)
	parent, err := agent.New(ctx, agent.Config{ID: h.Parent.Session.ID, Store: h.Store, Logger: h.Logger, Global: h.Tools,
		OutputSchema: schema, Model: scripted.New(scripted.Step{ToolCalls: []model.ToolCall{{ID: "p1", Name: agent.StructuredOutputTool, Arguments: `{"ok":false}`}}})})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := parent.Followup(ctx, inprocesstest.Text("decide"), sessionlog.Source{Kind: "user"}); err != nil {
		t.Fatal(err)
	}
	if err := parent.WaitIdle(ctx); err != nil {
		t.Fatal(err)
	}
	if v, ok := parent.Structured(); !ok || string(v) != `{"ok":false}` {
		t.Fatalf("parent capture = %s %v", v, ok)
	}
	if err := parent.Close(ctx); err != nil {
		t.Fatal(err)
	}
	req := h.Request("judge again")
	req.OutputSchema = schema
	res := inprocesstest.Settle(t, h.Start(t, fork.Name, req))
	if res.StopReason != subagent.StopCompleted || string(res.Structured) != `{"ok":true}` {
		t.Errorf("result %+v, want completed with the child's own capture", res)
	}
}

func TestFork_UnknownParentIsSessionNotFound(t *testing.T) {
	t.Parallel()
	h, _ := harness(t)
	req := h.Request("go")
	req.Parent.Session.ID = "missing"
	_, err := h.Service.Start(inprocesstest.Ctx(t), fork.Name, req)
	if subagent.ErrorCode(err) != subagent.ESessionNotFound {
		t.Errorf("err %v, want SESSION_NOT_FOUND", err)
	}
	if kids := h.Children(t, "missing"); len(kids) != 0 {
		t.Errorf("children %+v", kids)
	}
}

func TestFork_R22_AbortWhileReadingTheSeedCreatesNothing(t *testing.T) {
	t.Parallel()
	hooks := &inprocesstest.Hooks{}
	h := inprocesstest.New(t, inprocesstest.Config{
		Routes: []model.Route{inprocesstest.Route("main", scripted.New())}, Hooks: hooks})
	runParent(t, h, answers("one"), nil, "first")
	ctx, cancel := context.WithCancel(inprocesstest.Ctx(t))
	defer cancel()
	hooks.OnEvents = func(string) { cancel() }
	_, err := h.Service.Start(ctx, fork.Name, h.Request("go"))
	if subagent.ErrorCode(err) != subagent.EAborted || !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want ABORTED wrapping context.Canceled", err)
	}
	h.AssertNothingPublished(t)
}

func TestFork_Prefix(t *testing.T) {
	t.Parallel()
	ev := func(typ string) store.Event { return store.Event{Type: typ} }
	cases := []struct {
		log  []store.Event
		want int
	}{
		{nil, 0},
		{[]store.Event{ev(sessionlog.EventTurnStart), ev(sessionlog.EventUserMessage)}, 0},
		{[]store.Event{ev(sessionlog.EventTurnStart), ev(sessionlog.EventTurnEnd)}, 2},
		{[]store.Event{ev(sessionlog.EventTurnStart), ev(sessionlog.EventTurnEnd), ev(sessionlog.EventTurnStart), ev(sessionlog.EventTurnEnd),
			ev(sessionlog.EventApprovalPolicy), ev(sessionlog.EventTurnStart), ev(sessionlog.EventStepStart)}, 4},
	}
	for _, tc := range cases {
		if got := fork.Prefix(tc.log); len(got) != tc.want || (tc.want == 0 && got != nil) {
			t.Errorf("Prefix(%v) has %d events, want %d", inprocesstest.Types(tc.log), len(got), tc.want)
		}
	}
}
