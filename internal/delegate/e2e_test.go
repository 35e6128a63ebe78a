package delegate

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/subagentd/subagentd/internal/children"
	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/model/scripted"
	"github.com/subagentd/subagentd/internal/providers/fork"
	"github.com/subagentd/subagentd/internal/providers/inprocess"
	"github.com/subagentd/subagentd/internal/providers/inprocess/inprocesstest"
	"github.com/subagentd/subagentd/internal/providers/spawn"
	"github.com/subagentd/subagentd/internal/roots"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/subagent"
)

// delegatingModel answers "go" with one spawn and one fork delegation in
// the same step, sums tool results up once they are in, and answers
// anything else with what it did and how much history it saw. The two
// children's steps are held until both have started, so the test only ends
// if the sibling delegations run in parallel.
func delegatingModel() *scripted.Model {
	spawnReached, forkReached, both := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		<-spawnReached
		<-forkReached
		close(both)
	}()
	return scripted.Func(func(req model.Request) scripted.Step {
		last := req.Messages[len(req.Messages)-1]
		step := scripted.Step{Text: fmt.Sprintf("did %s (%d messages)", lastText(req), len(req.Messages))}
		switch {
		case lastText(req) == "task spawn":
			step.Reached, step.Gate = spawnReached, both
			return step
		case lastText(req) == "task fork":
			step.Reached, step.Gate = forkReached, both
			return step
		case last.Role == model.RoleTool:
			var parts []string
			for _, m := range req.Messages {
				if m.Role == model.RoleTool {
					parts = append(parts, model.Text(m.Content))
				}
			}
			return scripted.Step{Text: "summary: " + strings.Join(parts, " | ")}
		case lastText(req) == "go":
			return scripted.Step{ToolCalls: []model.ToolCall{
				call("c-spawn", SpawnTool, map[string]any{"description": "spawn child", "prompt": "task spawn"}),
				call("c-fork", ToolName(fork.Name), map[string]any{"description": "fork child", "prompt": "task fork", "run_in_background": false}),
			}}
		}
		return step
	})
}

// TestEndToEnd_RootDelegatesToSpawnAndForkInOneStep is delegation's
// end-to-end check: a root session's model calls subagent twice in one step
// (spawn and fork), the two children run in parallel (docs/seam.md §23), and
// the root gets both results as tool results in the next step; the
// lifecycle log holds both start/end pairs and the root has both children.
func TestEndToEnd_RootDelegatesToSpawnAndForkInOneStep(t *testing.T) {
	t.Parallel()
	m := delegatingModel()
	w := newWorld(t, m)
	root := w.Parent.Session.ID

	w.prompt(t, "hello", 1)
	w.prompt(t, "go", 2)

	results := w.toolResults(t, root)
	for id, want := range map[string]string{"c-spawn": "did task spawn (1 messages)", "c-fork": "did task fork (3 messages)"} {
		r, ok := results[id]
		if !ok || r.IsError || model.Text(r.Content) != want {
			t.Errorf("tool result %s = %+v, want %q", id, r, want)
		}
	}
	var rootFinal, forkFirst *model.Request
	for _, req := range m.Requests() {
		switch {
		case strings.HasPrefix(lastText(req), "did task fork"):
			rootFinal = &req
		case lastText(req) == "task fork" && forkFirst == nil:
			forkFirst = &req
		}
	}
	if rootFinal == nil || len(rootFinal.Messages) != 6 {
		t.Fatalf("root's step after the delegations: %+v", rootFinal)
	}
	if forkFirst == nil || model.Text(forkFirst.Messages[0].Content) != "hello" {
		t.Errorf("fork child did not start from the root's completed turn: %+v", forkFirst)
	}
	tools := []string{}
	for _, spec := range rootFinal.Tools {
		tools = append(tools, spec.Name)
	}
	if !slices.Contains(tools, SpawnTool) || !slices.Contains(tools, "subagent_fork") {
		t.Errorf("root tools = %v", tools)
	}

	evs := w.RunEvents(t)
	runs := map[string][]subagent.Event{}
	for _, e := range evs {
		if e.ParentID != root {
			t.Errorf("event %+v has another parent", e)
		}
		runs[e.RunID] = append(runs[e.RunID], e)
	}
	providers := []string{}
	for id, pair := range runs {
		if len(pair) != 2 || pair[0].Type != subagent.EventStart || pair[1].Type != subagent.EventEnd ||
			pair[1].StopReason != subagent.StopCompleted {
			t.Errorf("run %s lifecycle = %+v, want one start then one completed end", id, pair)
			continue
		}
		providers = append(providers, pair[0].Provider)
	}
	slices.Sort(providers)
	if !slices.Equal(providers, []string{fork.Name, spawn.Name}) {
		t.Errorf("runs by provider = %v, want fork and spawn", providers)
	}
	// The children catalog (GET /v1/sessions/{id}/children) lists both.
	mgr := children.NewManager(w.Service, children.ManagerConfig{Materializer: inprocess.NewMaterializer(w.Deps), Logger: w.Logger})
	entries, err := mgr.Children(inprocesstest.Ctx(t), root)
	if err != nil {
		t.Fatal(err)
	}
	kids := []string{}
	for _, e := range entries {
		if e.Kind != children.EntryChild || e.Mode != subagent.ModeOneShot || e.Activity != subagent.ActivityInactive {
			t.Errorf("child entry %+v", e)
		}
		kids = append(kids, e.Provider+":"+e.Label)
	}
	slices.Sort(kids)
	if want := []string{"fork:fork child", "spawn:spawn child"}; !slices.Equal(kids, want) {
		t.Errorf("children = %v, want %v", kids, want)
	}
}

// TestEndToEnd_R34_GrandchildrenWhileDepthAllows checks that children see
// the delegation tool and delegate further, and that the depth cap refuses
// the level beyond it with the seam's message as an isError result.
func TestEndToEnd_R34_GrandchildrenWhileDepthAllows(t *testing.T) {
	t.Parallel()
	chain := func() *scripted.Model {
		return scripted.Func(func(req model.Request) scripted.Step {
			last := req.Messages[len(req.Messages)-1]
			switch {
			case last.Role == model.RoleTool:
				return scripted.Step{Text: "up: " + model.Text(last.Content)}
			case lastText(req) == "go":
				return scripted.Step{ToolCalls: []model.ToolCall{call("c1", SpawnTool, map[string]any{"description": "level 1", "prompt": "level1"})}}
			case lastText(req) == "level1":
				return scripted.Step{ToolCalls: []model.ToolCall{call("c2", SpawnTool, map[string]any{"description": "level 2", "prompt": "level2"})}}
			}
			return scripted.Step{Text: "leaf"}
		})
	}
	for _, tt := range []struct {
		name     string
		maxDepth *int
		want     string
	}{
		{"default cap allows depth 2", nil, "up: up: leaf"},
		{"cap 1 refuses depth 2", func() *int { one := 1; return &one }(), "up: up: subagent depth 2 exceeds maxDepth 1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, chain(), func(c *ToolsConfig, _ *roots.Manager, _ inprocess.Deps) { c.MaxDepth = tt.maxDepth })
			w.prompt(t, "go", 1)
			evs := w.Log(t, w.Parent.Session.ID)
			msgs := inprocesstest.OfType(evs, sessionlog.EventAssistantMessage)
			last := inprocesstest.Decode[sessionlog.AssistantMessageData](t, msgs[len(msgs)-1])
			if got := model.Text(last.Message.Content); got != tt.want {
				t.Errorf("root answer = %q, want %q", got, tt.want)
			}
		})
	}
}
