package inprocess_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
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

// newHarness is a harness whose default route "main" plays steps.
func newHarness(t *testing.T, steps ...scripted.Step) (*inprocesstest.Harness, *scripted.Model) {
	t.Helper()
	m := scripted.New(steps...)
	return inprocesstest.New(t, inprocesstest.Config{Routes: []model.Route{inprocesstest.Route("main", m)}}), m
}

func ptr[T any](v T) *T { return &v }

func noop(context.Context, agent.Call) ([]model.Block, error) { return inprocesstest.Text("ok"), nil }

func TestCompose_R45_OptionsMerge(t *testing.T) {
	t.Parallel()
	main, alt := scripted.New(scripted.Step{Text: "a"}, scripted.Step{Text: "b"}), scripted.New(scripted.Step{Text: "c"})
	h := inprocesstest.New(t, inprocesstest.Config{Routes: []model.Route{
		inprocesstest.Route("main", main), inprocesstest.Route("alt", alt)}})
	h.Parent.Options = subagent.AgentOptions{Provider: "main", Model: "parent-model", MaxTokens: 100}

	cases := []struct {
		name      string
		opts      *subagent.AgentOptions
		m         *scripted.Model
		wantRoute string
		wantModel string
		wantMax   int
	}{
		{"parent route inherited", nil, main, "main", "parent-model", 100},
		{"request model overrides", &subagent.AgentOptions{Model: "child-model", SubagentDepth: ptr(7)}, main, "main", "child-model", 100},
		{"request route and cap override", &subagent.AgentOptions{Provider: "alt", MaxTokens: 50}, alt, "alt", "parent-model", 50},
	}
	for _, tc := range cases {
		req := h.Request("go")
		req.AgentOptions = tc.opts
		before := len(tc.m.Requests())
		run := h.Start(t, spawn.Name, req)
		if res := inprocesstest.Settle(t, run); res.StopReason != subagent.StopCompleted {
			t.Fatalf("%s: stop reason %q (%s)", tc.name, res.StopReason, res.Diagnostic)
		}
		got := tc.m.Requests()[before]
		if got.Model != tc.wantModel || got.MaxTokens != tc.wantMax {
			t.Errorf("%s: model request %q/%d, want %q/%d", tc.name, got.Model, got.MaxTokens, tc.wantModel, tc.wantMax)
		}
		hdr, err := h.Store.GetSession(inprocesstest.Ctx(t), run.ChildID())
		if err != nil {
			t.Fatal(err)
		}
		if hdr.AgentProvider != tc.wantRoute || hdr.AgentModel != tc.wantModel || hdr.MaxTokens != tc.wantMax || hdr.DelegationDepth != 1 {
			t.Errorf("%s: header route %q/%q/%d depth %d, want %q/%q/%d depth 1", tc.name,
				hdr.AgentProvider, hdr.AgentModel, hdr.MaxTokens, hdr.DelegationDepth, tc.wantRoute, tc.wantModel, tc.wantMax)
		}
	}
}

func TestCompose_R45_RoutelessParentGetsOnlyDepth(t *testing.T) {
	t.Parallel()
	h := inprocesstest.New(t, inprocesstest.Config{}) // no model routes at all
	run := h.Start(t, spawn.Name, h.Request("go"))
	res := inprocesstest.Settle(t, run)
	if res.StopReason != subagent.StopError || !strings.Contains(res.Diagnostic, "no model route") {
		t.Errorf("result %+v, want error about the missing route", res)
	}
	hdr, err := h.Store.GetSession(inprocesstest.Ctx(t), run.ChildID())
	if err != nil {
		t.Fatal(err)
	}
	if hdr.AgentProvider != "" || hdr.AgentModel != "" || hdr.MaxTokens != 0 || hdr.DelegationDepth != 1 {
		t.Errorf("header %+v: want no invented route and depth 1", hdr)
	}
}

func TestCompose_R45_DefaultRouteWithoutInventingOne(t *testing.T) {
	t.Parallel()
	h, m := newHarness(t, scripted.Step{Text: "done"})
	run := h.Start(t, spawn.Name, h.Request("go"))
	if res := inprocesstest.Settle(t, run); res.StopReason != subagent.StopCompleted {
		t.Fatalf("stop reason %q", res.StopReason)
	}
	if got := m.Requests()[0].Model; got != "main-default" {
		t.Errorf("model %q, want the default route's default model", got)
	}
	hdr, _ := h.Store.GetSession(inprocesstest.Ctx(t), run.ChildID())
	if hdr.AgentProvider != "" || hdr.AgentModel != "" {
		t.Errorf("header records route %q/%q, want none", hdr.AgentProvider, hdr.AgentModel)
	}
}

func TestCompose_R45_UnknownRouteRejectsBeforeCreation(t *testing.T) {
	t.Parallel()
	h, _ := newHarness(t)
	req := h.Request("go")
	req.AgentOptions = &subagent.AgentOptions{Provider: "nope"}
	_, err := h.Service.Start(inprocesstest.Ctx(t), spawn.Name, req)
	if subagent.ErrorCode(err) != subagent.EInvalidRequest || !strings.Contains(err.Error(), `unknown model route "nope"`) {
		t.Fatalf("err %v, want INVALID_REQUEST unknown model route", err)
	}
	h.AssertNothingPublished(t)
}

func TestCompose_R46_ChildHeader(t *testing.T) {
	t.Parallel()
	h, _ := newHarness(t, scripted.Step{Text: "done"})
	req := h.Request("go")
	req.Label = "look around"
	run := h.Start(t, spawn.Name, req)
	inprocesstest.Settle(t, run)
	hdr, err := h.Store.GetSession(inprocesstest.Ctx(t), run.ChildID())
	if err != nil {
		t.Fatal(err)
	}
	want := store.Session{ID: run.ChildID(), ParentID: h.Parent.Session.ID, RootID: h.Parent.Session.ID, Origin: inprocess.Origin,
		DelegationDepth: 1, Cwd: inprocesstest.ParentCwd, Label: "look around", Provider: spawn.Name, Mode: subagent.ModeOneShot}
	hdr.CreatedAt = want.CreatedAt
	if !sessionsEqual(hdr, want) {
		t.Errorf("header\n got %+v\nwant %+v", hdr, want)
	}
	if !run.Local() || run.ChildID() == "" {
		t.Errorf("run local=%v id=%q, want a local run with the child session id", run.Local(), run.ChildID())
	}
}

func sessionsEqual(a, b store.Session) bool {
	pa, pb := a.Persona, b.Persona
	a.Persona, b.Persona = nil, nil
	return a == b && (pa == nil) == (pb == nil) && (pa == nil || *pa == *pb)
}

func TestCompose_R36_HeaderDepthFollowsParent(t *testing.T) {
	t.Parallel()
	h, _ := newHarness(t, scripted.Step{Text: "a"}, scripted.Step{Text: "b"})
	cases := []struct {
		header  int
		runtime *int
		want    int
	}{{2, nil, 3}, {2, ptr(1), 3}, {1, ptr(4), 5}}
	for _, tc := range cases {
		parent := h.NewSession(t, store.Session{DelegationDepth: tc.header})
		req := subagent.Request{Prompt: inprocesstest.Text("go"), Parent: subagent.Parent{Session: parent,
			Options: subagent.AgentOptions{SubagentDepth: tc.runtime}}}
		run := h.Start(t, spawn.Name, req)
		inprocesstest.Settle(t, run)
		hdr, _ := h.Store.GetSession(inprocesstest.Ctx(t), run.ChildID())
		if hdr.DelegationDepth != tc.want {
			t.Errorf("parent header %d runtime %v: child depth %d, want %d", tc.header, tc.runtime, hdr.DelegationDepth, tc.want)
		}
	}
}

func TestCompose_R48_ToolFilterScopesGlobalTools(t *testing.T) {
	t.Parallel()
	h, m := newHarness(t,
		scripted.Step{ToolCalls: []model.ToolCall{{Name: "write", Arguments: `{}`}}},
		scripted.Step{Text: "done"})
	for _, name := range []string{"read", "write"} {
		if err := h.Tools.Register(agent.Tool{Name: name, Run: noop}); err != nil {
			t.Fatal(err)
		}
	}
	req := h.Request("go")
	req.ToolFilter = &subagent.ToolFilter{Deny: []string{"write"}}
	run := h.Start(t, spawn.Name, req)
	if res := inprocesstest.Settle(t, run); res.StopReason != subagent.StopCompleted {
		t.Fatalf("stop reason %q", res.StopReason)
	}
	if got := toolNames(m.Requests()[0]); !slices.Equal(got, []string{"read"}) {
		t.Errorf("child sees tools %v, want [read]", got)
	}
	res := inprocesstest.Decode[sessionlog.ToolResultData](t, inprocesstest.OfType(h.Log(t, run.ChildID()), sessionlog.EventToolResult)[0])
	if !res.IsError || !strings.Contains(model.Text(res.Content), "unknown tool write") {
		t.Errorf("forged call to a filtered tool: %+v, want an unknown-tool error", res)
	}
}

func toolNames(r model.Request) []string {
	var out []string
	for _, s := range r.Tools {
		out = append(out, s.Name)
	}
	return out
}

func TestCompose_R48_PersonaShadowsDeploymentPersona(t *testing.T) {
	t.Parallel()
	m := scripted.Func(func(model.Request) scripted.Step { return scripted.Step{Text: "done"} })
	h := inprocesstest.New(t, inprocesstest.Config{Routes: []model.Route{inprocesstest.Route("main", m)},
		DeploymentPersona: "DEPLOYMENT PERSONA"})
	cases := []struct {
		persona *string
		want    string
		absent  string
	}{
		{nil, "DEPLOYMENT PERSONA", ""},
		{ptr("You are a careful reviewer."), "You are a careful reviewer.", "DEPLOYMENT PERSONA"},
		{ptr(""), "", "DEPLOYMENT PERSONA"},
	}
	for i, tc := range cases {
		req := h.Request("go")
		req.Persona = tc.persona
		inprocesstest.Settle(t, h.Start(t, spawn.Name, req))
		system := m.Requests()[i].System
		if !strings.Contains(system, tc.want) || (tc.absent != "" && strings.Contains(system, tc.absent)) {
			t.Errorf("persona %v: system prompt %q", tc.persona, system)
		}
	}
}

func TestCompose_PersonaTemplateErrorSurfacesAtAssembly(t *testing.T) {
	t.Parallel()
	h, m := newHarness(t)
	req := h.Request("go")
	req.Persona = ptr("Hello {{who}}")
	run := h.Start(t, spawn.Name, req) // docs/seam.md §9: not a start-time error
	res := inprocesstest.Settle(t, run)
	if res.StopReason != subagent.StopError || !strings.Contains(res.Diagnostic, `unknown variable "who"`) {
		t.Errorf("result %+v, want error naming the variable", res)
	}
	if n := len(m.Requests()); n != 0 {
		t.Errorf("model was called %d times", n)
	}
}

func TestCompose_R49_ApprovalPinnedBeforePublication(t *testing.T) {
	t.Parallel()
	h, _ := newHarness(t, scripted.Step{Text: "done"})
	run := h.Start(t, spawn.Name, h.Request("go"))
	inprocesstest.Settle(t, run)
	log := h.Log(t, run.ChildID())
	if log[0].Type != sessionlog.EventApprovalPolicy {
		t.Fatalf("first child event %s, want approval/policy; log %v", log[0].Type, inprocesstest.Types(log))
	}
	if p := inprocesstest.Decode[sessionlog.PolicyData](t, log[0]); p != (sessionlog.PolicyData{Policy: "never", Source: "delegation"}) {
		t.Errorf("policy %+v", p)
	}
	if n := len(inprocesstest.OfType(log, "sandbox/mode")); n != 0 {
		t.Errorf("%d sandbox/mode events; there is no sandbox service", n)
	}
}

func TestCompose_R50_DelegationStatementInPromptOrder(t *testing.T) {
	t.Parallel()
	m := scripted.New(scripted.Step{ToolCalls: []model.ToolCall{{Name: agent.StructuredOutputTool, Arguments: `{"a":"x"}`}}})
	h := inprocesstest.New(t, inprocesstest.Config{Routes: []model.Route{inprocesstest.Route("main", m)},
		DeploymentPersona: "PERSONA"})
	req := h.Request("go")
	req.OutputSchema = json.RawMessage(`{"type":"object","properties":{"a":{"type":"string"}},"required":["a"]}`)
	inprocesstest.Settle(t, h.Start(t, spawn.Name, req))
	system := m.Requests()[0].System
	persona := strings.Index(system, "PERSONA")
	delegation := strings.Index(system, "approval requests are rejected automatically")
	structured := strings.Index(system, "structured_output")
	if persona < 0 || delegation < 0 || structured < 0 || !(persona < delegation && delegation < structured) {
		t.Errorf("system prompt sections out of order (persona 0, %s 120, structured 190):\n%s", inprocess.DelegationSection, system)
	}
	for _, want := range []string{"permission scope is fixed", "report the limitation"} {
		if !strings.Contains(system, want) {
			t.Errorf("delegation statement lacks %q", want)
		}
	}
}

func TestCompose_R51_StructuredOutput(t *testing.T) {
	t.Parallel()
	schema := json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`)
	t.Run("capture is the structured result", func(t *testing.T) {
		t.Parallel()
		h, m := newHarness(t,
			scripted.Step{ToolCalls: []model.ToolCall{{Name: agent.StructuredOutputTool, Arguments: `{"n":"x"}`}}},
			scripted.Step{Text: "recording", ToolCalls: []model.ToolCall{{Name: agent.StructuredOutputTool, Arguments: `{"n":3}`}}})
		req := h.Request("count")
		req.OutputSchema = schema
		res := inprocesstest.Settle(t, h.Start(t, spawn.Name, req))
		if res.StopReason != subagent.StopCompleted || string(res.Structured) != `{"n":3}` {
			t.Errorf("result %+v, want completed with {\"n\":3}", res)
		}
		if n := len(m.Requests()); n != 2 {
			t.Errorf("%d model requests, want 2 (an invalid call retried in-turn, then no step after the capture)", n)
		}
	})
	t.Run("clean turn without capture is error, no re-prompt", func(t *testing.T) {
		t.Parallel()
		h, m := newHarness(t, scripted.Step{Text: "the answer is 3"})
		req := h.Request("count")
		req.OutputSchema = schema
		res := inprocesstest.Settle(t, h.Start(t, spawn.Name, req))
		if res.StopReason != subagent.StopError || res.Structured != nil || model.Text(res.Output) != "the answer is 3" {
			t.Errorf("result %+v, want error with the text output and no structured value", res)
		}
		if n := len(m.Requests()); n != 1 {
			t.Errorf("%d model requests, want exactly 1", n)
		}
	})
	t.Run("cancel wins over the missing capture", func(t *testing.T) {
		t.Parallel()
		reached := make(chan struct{})
		h, _ := newHarness(t, scripted.Step{Reached: reached, Gate: make(chan struct{})})
		req := h.Request("count")
		req.OutputSchema = schema
		run := h.Start(t, spawn.Name, req)
		<-reached
		run.Cancel()
		if res := inprocesstest.Settle(t, run); res.StopReason != subagent.StopAborted {
			t.Errorf("stop reason %q, want aborted", res.StopReason)
		}
	})
}

// TestCompose_DescriptorInsideFirstTurn checks docs/seam.md §10: the one-shot
// descriptor is appended inside the first turn, before its first step.
func TestCompose_DescriptorInsideFirstTurn(t *testing.T) {
	t.Parallel()
	h, _ := newHarness(t, scripted.Step{Text: "done"})
	req := h.Request("go")
	req.Label = "scan"
	run := h.Start(t, spawn.Name, req)
	inprocesstest.Settle(t, run)
	log := h.Log(t, run.ChildID())
	types := inprocesstest.Types(log)
	want := []string{sessionlog.EventApprovalPolicy, sessionlog.EventInboxSpliced, sessionlog.EventTurnStart, sessionlog.EventInboxSpliced,
		sessionlog.EventUserMessage, sessionlog.EventDescriptor, sessionlog.EventStepStart}
	if len(types) < len(want) || !slices.Equal(types[:len(want)], want) {
		t.Fatalf("child log %v, want it to start %v", types, want)
	}
	id := sessionlog.IdentityDescriptor(log)
	if id == nil || id.Mode != subagent.ModeOneShot || id.Provider != spawn.Name || id.Label != "scan" {
		t.Errorf("identity %+v", id)
	}
	msg := inprocesstest.Decode[sessionlog.UserMessage](t, log[4])
	if msg.Source.Kind != "user" || model.Text(msg.Content) != "go" {
		t.Errorf("prompt message %+v, want the verbatim prompt from source user", msg)
	}
}
