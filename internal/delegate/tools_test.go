package delegate

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/agent"
	"github.com/subagentd/subagentd/internal/children"
	"github.com/subagentd/subagentd/internal/governance"
	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/model/scripted"
	"github.com/subagentd/subagentd/internal/providers/fork"
	"github.com/subagentd/subagentd/internal/providers/inprocess"
	"github.com/subagentd/subagentd/internal/providers/inprocess/inprocesstest"
	"github.com/subagentd/subagentd/internal/providers/spawn"
	"github.com/subagentd/subagentd/internal/roots"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// callTool runs the delegation tool of provider p as the harness's root
// agent would.
func (w *world) callTool(t *testing.T, ctx context.Context, p subagent.Provider, args map[string]any) ([]model.Block, error) {
	t.Helper()
	a, err := agent.New(ctx, agent.Config{ID: w.Parent.Session.ID, Store: w.Store, Global: w.Tools})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close(context.Background()) })
	raw, _ := json.Marshal(args)
	return w.tools.tool(p).Run(ctx, agent.Call{Agent: a, CallID: "c1", Arguments: raw})
}

func TestTools_R8_MirrorProviderAddedAndRemoved(t *testing.T) {
	t.Parallel()
	w := newWorld(t, scripted.New())
	ctx := inprocesstest.Ctx(t)
	if got := w.Tools.Names(); !slices.Equal(got, []string{SpawnTool, "subagent_fork"}) {
		t.Fatalf("tools at start = %v", got)
	}
	if err := w.Service.Register(ctx, &fakeProvider{name: "remote"}); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(w.Tools.Names(), "subagent_remote") {
		t.Fatalf("tools after provider-added = %v", w.Tools.Names())
	}
	w.Service.Unregister(ctx, "remote")
	if slices.Contains(w.Tools.Names(), "subagent_remote") {
		t.Fatalf("tools after provider-removed = %v", w.Tools.Names())
	}
	// Re-registration re-derives the wording from the new provider object.
	if err := w.Service.Register(ctx, &fakeProvider{name: "remote", inherits: true}); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(w.Tools.Names(), "subagent_remote") {
		t.Fatalf("tools after re-registration = %v", w.Tools.Names())
	}
	w.tools.Stop()
	w.tools.Stop() // idempotent
	if got := w.Tools.Names(); len(got) != 0 {
		t.Errorf("tools after Stop = %v", got)
	}
	if err := w.Service.Register(ctx, &fakeProvider{name: "late"}); err != nil {
		t.Fatal(err)
	}
	if got := w.Tools.Names(); len(got) != 0 {
		t.Errorf("a stopped Tools mounted %v", got)
	}
}

func TestTools_R3_ToolNameTakenRollsProviderBack(t *testing.T) {
	t.Parallel()
	w := newWorld(t, scripted.New())
	ctx := inprocesstest.Ctx(t)
	if err := w.Tools.Register(agent.Tool{Name: "subagent_clash", Run: func(context.Context, agent.Call) ([]model.Block, error) { return nil, nil }}); err != nil {
		t.Fatal(err)
	}
	if err := w.Service.Register(ctx, &fakeProvider{name: "clash"}); err == nil {
		t.Fatal("Register succeeded although the tool name is taken")
	}
	if _, ok := w.Service.Provider("clash"); ok {
		t.Error("provider stayed registered without its tool")
	}
}

func TestDelegate_5_1_ForegroundResults(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		result  subagent.Result
		want    string
		isError bool
	}{
		{"completed", subagent.Result{StopReason: subagent.StopCompleted, Output: []model.Block{model.TextBlock("all "), model.TextBlock("done")}},
			"all done", false},
		{"completed without output", subagent.Result{StopReason: subagent.StopCompleted, Output: []model.Block{}}, "", false},
		{"aborted", subagent.Result{StopReason: subagent.StopAborted, Output: []model.Block{}}, "subagent run was cancelled", true},
		{"error", subagent.Result{StopReason: subagent.StopError, Diagnostic: "boom", Output: []model.Block{}},
			"subagent run failed\nDiagnostic: boom", true},
		{"max-tokens", subagent.Result{StopReason: subagent.StopMaxTokens, Output: []model.Block{model.TextBlock("par")}},
			"subagent run hit its token limit before finishing\nPartial output before the run ended:\npar", true},
		{"refusal", subagent.Result{StopReason: subagent.StopRefusal, Output: []model.Block{}}, "subagent declined the task", true},
		{"unknown", subagent.Result{StopReason: "exploded", Output: []model.Block{}}, "subagent run ended abnormally (exploded)", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, scripted.New())
			ctx := inprocesstest.Ctx(t)
			p := &fakeProvider{name: "remote", result: tt.result}
			if err := w.Service.Register(ctx, p); err != nil {
				t.Fatal(err)
			}
			out, err := w.callTool(t, ctx, p, map[string]any{"description": "d", "prompt": "do it"})
			if tt.isError {
				if err == nil || err.Error() != tt.want {
					t.Errorf("error = %v, want %q", err, tt.want)
				}
				return
			}
			if err != nil || len(out) != 1 || model.Text(out) != tt.want {
				t.Errorf("result = %+v, %v, want %q", out, err, tt.want)
			}
			// The run was disposed before the tool answered.
			runs := w.RunEvents(t)
			if len(runs) != 2 {
				t.Errorf("lifecycle = %+v, want start and end", runs)
			}
		})
	}
}

func TestDelegate_5_1_RequestFromCallingAgent(t *testing.T) {
	t.Parallel()
	w := newWorld(t, scripted.New())
	ctx := inprocesstest.Ctx(t)
	limited := &fakeProvider{name: "limited", caps: subagent.Capabilities{DepthLimit: true}, result: subagent.Result{StopReason: subagent.StopCompleted}}
	managed := &fakeProvider{name: "managed", result: subagent.Result{StopReason: subagent.StopCompleted}}
	for _, p := range []*fakeProvider{limited, managed} {
		if err := w.Service.Register(ctx, p); err != nil {
			t.Fatal(err)
		}
		if _, err := w.callTool(t, ctx, p, map[string]any{"description": "short label", "prompt": "the task"}); err != nil {
			t.Fatal(err)
		}
	}
	req := limited.requests()[0]
	if req.Label != "short label" || model.Text(req.Prompt) != "the task" || req.Parent.Session.ID != w.Parent.Session.ID ||
		req.MaxDepth == nil || *req.MaxDepth != DefaultMaxDepth || req.ChildDepth != 1 || req.Descriptor.Provider != "limited" {
		t.Errorf("request to a depthLimit provider = %+v", req)
	}
	if req := managed.requests()[0]; req.MaxDepth != nil {
		t.Errorf("provider-managed depth got maxDepth %d", *req.MaxDepth)
	}
}

func TestDelegate_5_1_Rejections(t *testing.T) {
	t.Parallel()
	zero := 0
	w := newWorld(t, scripted.New(), func(c *ToolsConfig, _ *roots.Manager, _ inprocess.Deps) { c.MaxDepth = &zero })
	ctx := inprocesstest.Ctx(t)
	sp, _ := w.Service.Provider(spawn.Name)
	tests := []struct {
		name string
		args map[string]any
		want string
	}{
		{"start rejected", map[string]any{"description": "d", "prompt": "p"}, "subagent depth 1 exceeds maxDepth 0"},
		{"background unavailable", map[string]any{"description": "d", "prompt": "p", "run_in_background": true}, "run_in_background is not available"},
		{"empty prompt", map[string]any{"description": "d", "prompt": " "}, "INVALID_ARGS"},
		{"wrong argument type", map[string]any{"description": "d", "prompt": 3}, "INVALID_ARGS"},
	}
	for _, tt := range tests {
		_, err := w.callTool(t, ctx, sp, tt.args)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error = %v, want %q", tt.name, err, tt.want)
		}
	}
	_, err := w.tools.tool(sp).Run(ctx, agent.Call{Arguments: []byte(`{}`)})
	if err == nil || err.Error() != "subagent requires a calling agent (exec.agent was undefined)" {
		t.Errorf("no calling agent: %v", err)
	}
	if evs := w.RunEvents(t); len(evs) != 0 {
		t.Errorf("rejected calls published runs: %+v", evs)
	}
}

// TestDelegate_5_1_CancelledTurnCancelsChild checks that ending the calling
// turn cancels a foreground child: the call reports it cancelled and the run
// is settled and disposed.
func TestDelegate_5_1_CancelledTurnCancelsChild(t *testing.T) {
	t.Parallel()
	reached := make(chan struct{})
	m := scripted.Func(func(req model.Request) scripted.Step {
		return scripted.Step{Reached: reached, Gate: make(chan struct{})}
	})
	w := newWorld(t, m)
	ctx, cancel := context.WithCancel(inprocesstest.Ctx(t))
	fk, _ := w.Service.Provider(fork.Name)
	go func() {
		<-reached
		cancel()
	}()
	_, err := w.callTool(t, ctx, fk, map[string]any{"description": "d", "prompt": "wait forever"})
	if err == nil || err.Error() != "subagent run was cancelled" {
		t.Fatalf("error = %v, want the cancelled headline", err)
	}
	evs := w.RunEvents(t)
	if len(evs) != 2 || evs[1].StopReason != subagent.StopAborted {
		t.Errorf("lifecycle = %+v, want an aborted end", evs)
	}
	if _, live := w.Service.Run(t.Context(), evs[0].RunID); live {
		t.Error("run not disposed")
	}
}

// probingProvider learns whether it can resume only once its probe ends
// (subagent.Prober): until the test closes known it reports Resume false,
// and every WaitProbe that waits sends on waits first.
type probingProvider struct {
	*fakeProvider
	waits chan struct{}
	known chan struct{}
}

func (p *probingProvider) Capabilities() subagent.Capabilities {
	c := p.fakeProvider.Capabilities()
	select {
	case <-p.known:
		c.Resume = true
	default:
	}
	return c
}

func (p *probingProvider) WaitProbe(ctx context.Context) error {
	select {
	case <-p.known:
		return nil
	default:
	}
	if ctx.Err() == nil {
		p.waits <- struct{}{}
	}
	select {
	case <-p.known:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// startingConts is a continuation manager that only starts continuable
// children, answering child id "bg-child" and passing each request on.
type startingConts struct {
	Continuations
	started chan children.ContinuableRequest
}

func (c *startingConts) StartContinuable(_ context.Context, req children.ContinuableRequest) (children.ContinuableStarted, error) {
	c.started <- req
	return children.ContinuableStarted{ChildID: "bg-child"}, nil
}

// TestTools_BackgroundWaitsForTheCapabilityProbe: a provider still
// learning whether it can resume is never taken for one that cannot. A
// delegation called meanwhile waits for the probe and then runs in the
// background, and the tool is described again, offering
// run_in_background, once the probe ended.
func TestTools_BackgroundWaitsForTheCapabilityProbe(t *testing.T) {
	t.Parallel()
	conts := &startingConts{started: make(chan children.ContinuableRequest, 1)}
	m := scripted.Func(func(model.Request) scripted.Step { return scripted.Step{Text: "ok"} })
	w := newWorld(t, m, func(c *ToolsConfig, _ *roots.Manager, _ inprocess.Deps) { c.Continuations = conts })
	ctx := inprocesstest.Ctx(t)
	p := &probingProvider{fakeProvider: &fakeProvider{name: "probe"}, waits: make(chan struct{}, 4), known: make(chan struct{})}
	if err := w.Service.Register(ctx, p); err != nil {
		t.Fatal(err)
	}
	await := func(what string) {
		t.Helper()
		select {
		case <-p.waits:
		case <-time.After(inprocesstest.Timeout):
			t.Fatalf("%s did not wait for the probe within %s", what, inprocesstest.Timeout)
		}
	}
	await("the mounted tool")
	w.prompt(t, "before", 1)
	if spec := toolSpec(t, m.Requests()[0], "subagent_probe"); strings.Contains(string(spec.Parameters), "run_in_background") {
		t.Errorf("while probing the tool offers run_in_background: %s", spec.Parameters)
	}

	type result struct {
		out []model.Block
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := w.callTool(t, ctx, p, map[string]any{"description": "d", "prompt": "go", "run_in_background": true})
		done <- result{out, err}
	}()
	await("the delegation call")
	close(p.known)
	var res result
	select {
	case res = <-done:
	case <-time.After(inprocesstest.Timeout):
		t.Fatalf("the delegation did not return within %s", inprocesstest.Timeout)
	}
	if res.err != nil || model.Text(res.out) != "started subagent bg-child" {
		t.Fatalf("delegation = %v, %v; want a background start", model.Text(res.out), res.err)
	}
	if req := <-conts.started; req.Provider != "probe" || req.Label != "d" {
		t.Errorf("continuable request = %+v", req)
	}

	w.tools.probes.Wait() // the tool has been described again
	w.prompt(t, "after", 2)
	reqs := m.Requests()
	if spec := toolSpec(t, reqs[len(reqs)-1], "subagent_probe"); !strings.Contains(string(spec.Parameters), "run_in_background") {
		t.Errorf("once probed the tool does not offer run_in_background: %s", spec.Parameters)
	}
}

// TestDelegate_TreeLimitsRefuseAToolStart: a delegation tool call meets
// its tree's limits on the start path every face shares — a spent budget,
// a parent with its maxChildren — and the model reads why; nothing is
// published.
func TestDelegate_TreeLimitsRefuseAToolStart(t *testing.T) {
	t.Parallel()
	w := newWorldWith(t, inprocesstest.Config{Routes: []model.Route{inprocesstest.Route("script", scripted.New())},
		Governor: func(st store.Store) subagent.Governor { return governance.NewLimits(st, slog.New(slog.DiscardHandler)) }})
	ctx := inprocesstest.Ctx(t)
	sp, _ := w.Service.Provider(spawn.Name)
	zero := int64(0)
	for _, tt := range []struct {
		limits store.Limits
		want   string
	}{
		{store.Limits{TokenBudget: &zero}, "the tree spent 0 of its tokenBudget 0; raise it to resume"},
		{store.Limits{MaxChildren: &zero}, "already has 0 children, all its tree's maxChildren 0 allows"},
	} {
		if err := w.Store.SetSessionLimits(ctx, w.Parent.Session.ID, tt.limits); err != nil {
			t.Fatal(err)
		}
		_, err := w.callTool(t, ctx, sp, map[string]any{"description": "d", "prompt": "p"})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("limits %+v: error = %v, want %q", tt.limits, err, tt.want)
		}
	}
	if evs := w.RunEvents(t); len(evs) != 0 {
		t.Errorf("refused calls published runs: %+v", evs)
	}
}
