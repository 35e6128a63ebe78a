package delegate

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/children"
	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/model/scripted"
	"github.com/subagentd/subagentd/internal/providers/inprocess"
	"github.com/subagentd/subagentd/internal/providers/inprocess/inprocesstest"
	"github.com/subagentd/subagentd/internal/roots"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// continuableProvider is a fake provider that can also create continuable
// children.
type continuableProvider struct{ *fakeProvider }

func (p continuableProvider) Capabilities() subagent.Capabilities {
	c := p.fakeProvider.Capabilities()
	c.Resume = true
	return c
}

func (continuableProvider) PrepareContinuable(context.Context, subagent.ContinuableCreateRequest) (subagent.ContinuableSpec, error) {
	return subagent.ContinuableSpec{}, nil
}

// gated is a channel-per-prompt gate: the child's step for a prompt waits
// until the test opens it.
type gated map[string]chan struct{}

func (g gated) open(prompt string) { close(g[prompt]) }

// TestContinuable_5_1_5_2_BackgroundDelegationAndControlTools drives a root
// agent through a background delegation, its settlement notice, list_agents,
// send_message and interrupt_agent, all issued by the root's model.
func TestContinuable_5_1_5_2_BackgroundDelegationAndControlTools(t *testing.T) {
	t.Parallel()
	gates := gated{"task bg": make(chan struct{}), "more": make(chan struct{})}
	// One model serves the root and its continuable child (the real
	// in-process materializer resolves the same default route).
	root := scripted.Func(func(req model.Request) scripted.Step {
		last := req.Messages[len(req.Messages)-1]
		words := strings.Fields(lastText(req))
		switch {
		case gates[lastText(req)] != nil:
			return scripted.Step{Text: lastText(req) + " done", Gate: gates[lastText(req)]}
		case last.Role == model.RoleTool:
			return scripted.Step{Text: "ok"}
		case len(words) == 0:
		case words[0] == "start":
			return scripted.Step{ToolCalls: []model.ToolCall{call("c-bg", "subagent_bg", map[string]any{"description": "research", "prompt": "task bg"})}}
		case words[0] == "list":
			return scripted.Step{ToolCalls: []model.ToolCall{call("c-list", ListAgentsTool, map[string]any{})}}
		case words[0] == "send":
			return scripted.Step{ToolCalls: []model.ToolCall{call("c-send", SendMessageTool, map[string]any{"subagent_id": words[1], "message": "more"})}}
		case words[0] == "interrupt":
			return scripted.Step{ToolCalls: []model.ToolCall{call("c-int", InterruptAgentTool, map[string]any{"agent_id": words[1]})}}
		}
		return scripted.Step{Text: "noted"}
	})
	var mgr *children.Manager
	w := newWorld(t, root, func(c *ToolsConfig, roots *roots.Manager, deps inprocess.Deps) {
		mgr = children.NewManager(c.Seam.(*subagent.Service), children.ManagerConfig{
			Materializer: inprocess.NewMaterializer(deps), Notices: roots, Logger: c.Logger})
		c.Continuations = mgr
	})
	t.Cleanup(func() {
		if err := mgr.Shutdown(context.Background()); err != nil {
			t.Errorf("manager shutdown: %v", err)
		}
	})
	ctx := inprocesstest.Ctx(t)
	if err := w.Service.Register(ctx, continuableProvider{&fakeProvider{name: "bg"}}); err != nil {
		t.Fatal(err)
	}
	rootID := w.Parent.Session.ID
	result := func(callID string) sessionlog.ToolResultData {
		t.Helper()
		r, ok := w.toolResults(t, rootID)[callID]
		if !ok {
			t.Fatalf("no tool result %s", callID)
		}
		return r
	}

	w.prompt(t, "start", 1)
	started := model.Text(result("c-bg").Content)
	childID, ok := strings.CutPrefix(started, "started subagent ")
	if !ok || result("c-bg").IsError {
		t.Fatalf("background delegation answered %q", started)
	}
	desc := toolSpec(t, root.Requests()[0], "subagent_bg")
	if !contains(desc.Description, "runs in the background by default", "send_message") || !strings.Contains(string(desc.Parameters), "run_in_background") {
		t.Errorf("background tool wording: %s %s", desc.Description, desc.Parameters)
	}

	// The root's agent is closed while idle; the child it delegated wakes
	// it all the same (R78): its notice (R77) opens turn 2.
	if hdr, err := w.Store.GetSession(ctx, childID); err != nil || !hdr.WakeParent {
		t.Fatalf("delegated child's header %+v, %v: want WakeParent", hdr, err)
	}
	w.awaitIdle(t, rootID)
	if n, err := w.roots.CloseIdle(ctx, time.Now()); err != nil || n != 1 {
		t.Fatalf("CloseIdle = %d, %v", n, err)
	}
	gates.open("task bg")
	w.waitNotice(t, 2, "Background subagent "+childID+" finished and will do no further work unless you send it more.Its closing message:task bg done")
	waitRunEnds(t, w, childID, 1)
	if msgs := userMessages(t, w.Log(t, rootID)); msgs[1].Source.Label != "research" {
		t.Errorf("notice source %+v, want the child's label", msgs[1].Source)
	}

	w.prompt(t, "list", 3)
	if got, want := model.Text(result("c-list").Content), childID+" [ready] — research"; got != want {
		t.Errorf("list_agents = %q, want %q", got, want)
	}

	w.prompt(t, "send "+childID, 4)
	if got, want := model.Text(result("c-send").Content), "message queued as the next turn for subagent "+childID; got != want {
		t.Errorf("send_message = %q, want %q", got, want)
	}
	msgs := userMessages(t, w.Log(t, childID))
	if last := msgs[len(msgs)-1]; model.Text(last.Content) != "more" ||
		last.Source != (sessionlog.Source{Kind: subagent.SourceCoordinator, Form: "relay", SenderSessionID: rootID}) {
		t.Errorf("relayed message = %+v", last)
	}
	gates.open("more")
	w.waitNotice(t, 5, "Background subagent "+childID+" finished and will do no further work unless you send it more.Its closing message:more done")
	waitRunEnds(t, w, childID, 2)

	w.prompt(t, "interrupt "+childID, 6)
	if got, want := model.Text(result("c-int").Content), "interrupt requested for agent "+childID; got != want || result("c-int").IsError {
		t.Errorf("interrupt_agent = %q, want %q", got, want)
	}
	stranger := w.NewSession(t, store.Session{Label: "other root"})
	w.prompt(t, "interrupt "+stranger.ID, 7)
	if r := result("c-int"); !r.IsError || !strings.Contains(model.Text(r.Content), "not one of your subagents") {
		t.Errorf("interrupt of an unrelated session = %+v", r)
	}
	w.prompt(t, "send nope", 8)
	if r := result("c-send"); !r.IsError {
		t.Errorf("send_message to an unknown id = %+v", r)
	}
}

// waitNotice waits until root turn n ended and checks that its user
// message is a settlement notice with text want.
func (w *world) waitNotice(t *testing.T, n int, want string) {
	t.Helper()
	w.waitTurnEnd(t, w.Parent.Session.ID, n)
	msgs := userMessages(t, w.Log(t, w.Parent.Session.ID))
	if len(msgs) < n {
		t.Fatalf("%d user messages, want %d", len(msgs), n)
	}
	msg := msgs[n-1]
	if msg.Source.Kind != subagent.SourceSubagentSettled || msg.Source.Form != "notice" || model.Text(msg.Content) != want {
		t.Errorf("turn %d message = %+v, want the notice %q", n, msg, want)
	}
}

// waitRunEnds waits until child id's activations recorded n subagent/end
// events.
func waitRunEnds(t *testing.T, w *world, id string, n int) {
	t.Helper()
	wake, stop := w.Store.Subscribe(store.LifecycleTopic)
	defer stop()
	ctx := inprocesstest.Ctx(t)
	for {
		ends := 0
		for _, e := range w.RunEvents(t) {
			if e.ID == id && e.Type == subagent.EventEnd {
				ends++
			}
		}
		if ends >= n {
			return
		}
		select {
		case <-wake:
		case <-ctx.Done():
			t.Fatalf("child %s: %d of %d activations ended", id, ends, n)
		}
	}
}

// toolSpec returns the tool named name offered in req.
func toolSpec(t *testing.T, req model.Request, name string) model.ToolSpec {
	t.Helper()
	for _, s := range req.Tools {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("tool %s not offered", name)
	return model.ToolSpec{}
}

func TestRenderAgents_5_2_Projection(t *testing.T) {
	t.Parallel()
	entries := []children.ListEntry{
		{Kind: children.EntryChild, ID: "a", Mode: subagent.ModeContinuable, Label: "alpha", Activity: subagent.ActivityRunning, ParentID: "root", Depth: 1},
		{Kind: children.EntryChild, ID: "o", Mode: subagent.ModeOneShot, Label: "one-shot", ParentID: "root", Depth: 1},
		{Kind: children.EntryChild, ID: "b", Mode: subagent.ModeContinuable, Label: "beta", Activity: subagent.ActivityInactive, ParentID: "o", Depth: 2},
		{Kind: children.EntryDiagnostic, ID: "c", Reason: "corrupt", ParentID: "a", Depth: 2},
	}
	if got, want := RenderAgents(entries, false), "a [running] — alpha\nb [ready] — beta\nc [diagnostic: corrupt]"; got != want {
		t.Errorf("children:\n%s\nwant:\n%s", got, want)
	}
	if got, want := RenderAgents(entries, true),
		"a [running] parent=root depth=1 — alpha\nb [ready] parent=o depth=2 — beta\nc [diagnostic: corrupt] parent=a depth=2"; got != want {
		t.Errorf("descendants:\n%s\nwant:\n%s", got, want)
	}
	if got := RenderAgents(entries[1:2], false); got != "(no subagents)" {
		t.Errorf("only one-shot children: %q", got)
	}
	if got := RenderAgents(nil, true); got != "(no subagents)" {
		t.Errorf("empty: %q", got)
	}
}
