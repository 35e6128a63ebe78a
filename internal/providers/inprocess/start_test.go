package inprocess_test

import (
	"context"
	"encoding/json"
	"errors"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/subagentd/subagentd/internal/agent"
	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/model/scripted"
	"github.com/subagentd/subagentd/internal/providers/inprocess"
	"github.com/subagentd/subagentd/internal/providers/inprocess/inprocesstest"
	"github.com/subagentd/subagentd/internal/providers/spawn"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// goroutines is the goroutine count that tests compare after disposal.
// Tests using it do not run in parallel.
func goroutines() int { return runtime.NumGoroutine() }

// TestStart_R11_BadInputPublishesNothing runs each bad request through the
// service: it fails with the code of R9, and no child session, lifecycle
// event or goroutine is left behind.
func TestStart_R11_BadInputPublishesNothing(t *testing.T) {
	cases := []struct {
		name string
		edit func(*subagent.Request)
		code string
	}{
		{"schema not object-rooted", func(r *subagent.Request) { r.OutputSchema = json.RawMessage(`{"type":"string"}`) },
			subagent.EUnsupportedSchema},
		{"schema keyword outside the subset", func(r *subagent.Request) {
			r.OutputSchema = json.RawMessage(`{"type":"object","properties":{"a":{"type":"integer","minimum":1}}}`)
		}, subagent.EUnsupportedSchema},
		{"negative maxDepth", func(r *subagent.Request) { r.MaxDepth = ptr(-1) }, subagent.EInvalidMaxDepth},
		{"maxDepth exceeded", func(r *subagent.Request) { r.MaxDepth = ptr(0) }, subagent.EDepthExceeded},
		{"malformed parent runtime depth", func(r *subagent.Request) { r.Parent.Options.SubagentDepth = ptr(-1) },
			subagent.EInvalidMaxDepth},
		{"tool filter names an unknown tool", func(r *subagent.Request) {
			r.ToolFilter = &subagent.ToolFilter{Allow: []string{"read", "nope"}}
		}, subagent.EInvalidRequest},
		{"tool filter names run_code", func(r *subagent.Request) {
			r.ToolFilter = &subagent.ToolFilter{Deny: []string{agent.RunCodeTool}}
		}, subagent.EInvalidRequest},
		{"empty tool filter", func(r *subagent.Request) { r.ToolFilter = &subagent.ToolFilter{} }, subagent.EInvalidRequest},
		{"persona not UTF-8", func(r *subagent.Request) { r.Persona = ptr("be \xff") }, subagent.EInvalidRequest},
		{"label not UTF-8", func(r *subagent.Request) { r.Label = "\xfe" }, subagent.EInvalidRequest},
		{"negative maxTokens", func(r *subagent.Request) { r.AgentOptions = &subagent.AgentOptions{MaxTokens: -5} },
			subagent.EInvalidRequest},
		{"unknown model route", func(r *subagent.Request) { r.AgentOptions = &subagent.AgentOptions{Provider: "nope"} },
			subagent.EInvalidRequest},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			baseline := goroutines()
			h, m := newHarness(t)
			if err := h.Tools.Register(agent.Tool{Name: "read", Run: noop}); err != nil {
				t.Fatal(err)
			}
			req := h.Request("go")
			tc.edit(&req)
			run, err := h.Service.Start(inprocesstest.Ctx(t), spawn.Name, req)
			if run != nil || subagent.ErrorCode(err) != tc.code {
				t.Fatalf("start: run %v, err %v; want code %s", run, err, tc.code)
			}
			h.AssertNothingPublished(t)
			if n := len(m.Requests()); n != 0 {
				t.Errorf("model called %d times", n)
			}
			inprocesstest.WaitGoroutines(t, baseline)
		})
	}
}

// TestStart_R48_DriverChecksBeforeCreating calls the provider directly,
// without the service's checks: the driver itself rejects bad composition
// before any session exists.
func TestStart_R48_DriverChecksBeforeCreating(t *testing.T) {
	t.Parallel()
	h, _ := newHarness(t)
	p := spawn.New(h.Deps)
	bad := []subagent.ResolvedRequest{
		{Request: subagent.Request{OutputSchema: json.RawMessage(`{"type":"array"}`)}},
		{Request: subagent.Request{ToolFilter: &subagent.ToolFilter{Allow: []string{"ghost"}}}},
		{Request: subagent.Request{ToolFilter: &subagent.ToolFilter{}}},
	}
	for _, req := range bad {
		req.Prompt, req.Parent, req.ChildDepth = inprocesstest.Text("go"), h.Parent, 1
		req.Descriptor = subagent.Descriptor{Mode: subagent.ModeOneShot, Provider: spawn.Name}
		if run, err := p.Start(inprocesstest.Ctx(t), req); run != nil || err == nil {
			t.Errorf("start %+v: run %v err %v, want a rejection", req, run, err)
		}
	}
	h.AssertNothingPublished(t)
}

func TestStart_R21_AbortedBeforeStartCreatesNothing(t *testing.T) {
	t.Parallel()
	h, m := newHarness(t)
	ctx, cancel := context.WithCancel(inprocesstest.Ctx(t))
	cancel()
	req := subagent.ResolvedRequest{Request: h.Request("go"), ChildDepth: 1,
		Descriptor: subagent.Descriptor{Mode: subagent.ModeOneShot, Provider: spawn.Name}}
	_, err := spawn.New(h.Deps).Start(ctx, req)
	if subagent.ErrorCode(err) != subagent.EAborted || subagent.ErrorMessage(err) != "subagent request was aborted before child publication" {
		t.Errorf("provider start: %v", err)
	}
	if _, err := h.Service.Start(ctx, spawn.Name, h.Request("go")); subagent.ErrorCode(err) != subagent.EAborted {
		t.Errorf("service start: %v", err)
	}
	h.AssertNothingPublished(t)
	if n := len(m.Requests()); n != 0 {
		t.Errorf("model called %d times", n)
	}
}

func hookHarness(t *testing.T, steps ...scripted.Step) (*inprocesstest.Harness, *inprocesstest.Hooks) {
	t.Helper()
	hooks := &inprocesstest.Hooks{}
	h := inprocesstest.New(t, inprocesstest.Config{
		Routes: []model.Route{inprocesstest.Route("main", scripted.New(steps...))}, Hooks: hooks})
	return h, hooks
}

// TestStart_R24_AbortAsTheChildIsStoredIsACancelledRun: the child, its
// prompt's turn and the run are stored in one write, so a cancellation
// that lands as they are stored is after publication: the run is returned
// and settles aborted, its turn ended aborted in the log.
func TestStart_R24_AbortAsTheChildIsStoredIsACancelledRun(t *testing.T) {
	t.Parallel()
	h, hs := hookHarness(t, scripted.Step{Text: "never sent"})
	ctx, cancel := context.WithCancel(inprocesstest.Ctx(t))
	defer cancel()
	hs.OnCreate = func(store.Session) { cancel() }
	run, err := h.Service.Start(ctx, spawn.Name, h.Request("go"))
	if err != nil {
		t.Fatalf("start: %v; an abort once the child is stored is a cancellation", err)
	}
	t.Cleanup(func() { _ = run.Dispose(context.Background()) })
	res := inprocesstest.Settle(t, run)
	if res.StopReason != subagent.StopAborted || len(res.Output) != 0 {
		t.Errorf("result %+v, want aborted with no output", res)
	}
	if evs := h.RunEvents(t); len(evs) != 2 {
		t.Errorf("lifecycle %+v, want start and end", evs)
	}
	ends := inprocesstest.OfType(h.Log(t, run.ChildID()), sessionlog.EventTurnEnd)
	if len(ends) != 1 || !strings.Contains(string(ends[0].Data), `"aborted"`) {
		t.Errorf("turn ends %+v, want one, aborted", ends)
	}
}

// TestStart_R22_DriverAbortBeforeStoringCreatesNothing calls the provider
// directly: a cancellation while the child is composed (here: the
// parent's seed is read) stores nothing.
func TestStart_R22_DriverAbortBeforeStoringCreatesNothing(t *testing.T) {
	t.Parallel()
	h, m := newHarness(t)
	ctx, cancel := context.WithCancel(inprocesstest.Ctx(t))
	defer cancel()
	req := subagent.ResolvedRequest{Request: h.Request("go"), ChildDepth: 1,
		Descriptor: subagent.Descriptor{Mode: subagent.ModeOneShot, Provider: spawn.Name}}
	seed := func(context.Context, store.Session) ([]store.Event, error) {
		cancel()
		return nil, nil
	}
	run, err := inprocess.NewDriver(h.Deps).Start(ctx, req, seed)
	if run != nil || subagent.ErrorCode(err) != subagent.EAborted || !errors.Is(err, context.Canceled) {
		t.Fatalf("start: run %v err %v; want ABORTED wrapping context.Canceled", run, err)
	}
	h.AssertNothingPublished(t)
	if n := len(m.Requests()); n != 0 {
		t.Errorf("model called %d times", n)
	}
}

// TestStart_ConcurrentChildren runs 200 one-shot children at once through
// spawn: every run gets one start and one later end, run ids are unique,
// and nothing is left running after disposal.
func TestStart_ConcurrentChildren(t *testing.T) {
	const n = 200
	baseline := goroutines()
	m := scripted.Func(func(req model.Request) scripted.Step {
		return scripted.Step{Text: "done: " + model.Text(req.Messages[len(req.Messages)-1].Content)}
	})
	h := inprocesstest.New(t, inprocesstest.Config{Routes: []model.Route{inprocesstest.Route("main", m)}})
	ctx := inprocesstest.Ctx(t)
	runs := make([]*subagent.RunHandle, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { runs[i], errs[i] = h.Service.Start(ctx, spawn.Name, h.Request("task")) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("start %d: %v", i, err)
		}
	}
	for _, run := range runs {
		if res := inprocesstest.Settle(t, run); res.StopReason != subagent.StopCompleted || model.Text(res.Output) != "done: task" {
			t.Fatalf("run %s: %+v", run.ID(), res)
		}
	}
	for _, run := range runs {
		wg.Go(func() {
			if err := run.Dispose(ctx); err != nil {
				t.Errorf("dispose %s: %v", run.ID(), err)
			}
		})
	}
	wg.Wait()

	started, ended := map[string]int{}, map[string]int{}
	for i, e := range h.RunEvents(t) {
		switch e.Type {
		case subagent.EventStart:
			if _, dup := started[e.RunID]; dup {
				t.Fatalf("duplicate start for run %s", e.RunID)
			}
			started[e.RunID] = i
		case subagent.EventEnd:
			s, ok := started[e.RunID]
			if !ok || s > i {
				t.Fatalf("end of run %s before its start", e.RunID)
			}
			if _, dup := ended[e.RunID]; dup {
				t.Fatalf("duplicate end for run %s", e.RunID)
			}
			ended[e.RunID] = i
		}
	}
	if len(started) != n || len(ended) != n {
		t.Errorf("%d starts and %d ends, want %d each", len(started), len(ended), n)
	}
	if kids := h.Children(t, h.Parent.Session.ID); len(kids) != n {
		t.Errorf("%d child sessions, want %d", len(kids), n)
	}
	inprocesstest.WaitGoroutines(t, baseline)
}
