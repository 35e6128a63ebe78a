package subagent

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/schema"
	"github.com/subagentd/subagentd/internal/store"
)

func TestStart_R9_ValidationOrder(t *testing.T) {
	t.Parallel()
	p := &fakeProvider{name: "spawn"}
	svc, b := setup(t, p)
	req := request()
	req.Label = "bad \xff label"
	req.OutputSchema = json.RawMessage(`{"type":"string"}`)
	req.MaxDepth = ptr(-1)
	req.ToolFilter = &ToolFilter{}
	req.Persona = ptr("persona")

	// Each step fixes the failure of the step before it.
	steps := []struct {
		name     string
		fix      func()
		provider string
		code     string
		contains string
	}{
		{"provider lookup", func() {}, "nope", ENoProvider, `"nope"`},
		{"outputSchema capability", func() {}, "spawn", EUnsupportedCapability, "outputSchema"},
		{"depthLimit capability", func() { p.caps.OutputSchema = true }, "spawn", EUnsupportedCapability, "depthLimit (maxDepth)"},
		{"toolFilter capability", func() { p.caps.DepthLimit = true }, "spawn", EUnsupportedCapability, "toolFilter"},
		{"persona capability", func() { p.caps.ToolFilter = true }, "spawn", EUnsupportedCapability, "persona"},
		{"maxDepth domain", func() { p.caps.Persona = true }, "spawn", EInvalidMaxDepth, "non-negative safe integer"},
		{"toolFilter shape", func() { req.MaxDepth = ptr(0) }, "spawn", EInvalidRequest, "toolFilter"},
		{"outputSchema subset", func() { req.ToolFilter = &ToolFilter{Allow: []string{}} }, "spawn", EUnsupportedSchema, "unsupported JSON schema: " + schema.ObjectRootViolation},
		{"descriptor snapshot", func() { req.OutputSchema = json.RawMessage(`{"type":"object"}`) }, "spawn", EInvalidRequest, "losslessly JSON-serializable"},
		{"child depth", func() { req.Label = "label" }, "spawn", EDepthExceeded, "subagent depth 1 exceeds maxDepth 0"},
	}
	for _, step := range steps {
		step.fix()
		_, err := svc.Start(t.Context(), step.provider, req)
		if ErrorCode(err) != step.code || !strings.Contains(ErrorMessage(err), step.contains) {
			t.Fatalf("%s: err = %v, want %s containing %q", step.name, err, step.code, step.contains)
		}
		if n := p.startCount(); n != 0 {
			t.Fatalf("%s: provider started %d times", step.name, n)
		}
	}
	req.MaxDepth = ptr(1)
	h, err := svc.Start(t.Context(), "spawn", req)
	if err != nil {
		t.Fatalf("valid request: %v", err)
	}
	if p.startCount() != 1 {
		t.Errorf("provider started %d times", p.startCount())
	}
	for _, e := range b.rec.all() {
		if e.Type == EventStart && e.RunID != h.ID() {
			t.Errorf("a rejected start dispatched %+v", e)
		}
	}
}

func TestStart_R9_UnsupportedSchemaListsEveryViolation(t *testing.T) {
	t.Parallel()
	svc, _ := setup(t, &fakeProvider{name: "spawn", caps: allCaps})
	req := request()
	req.OutputSchema = json.RawMessage(`{"type":"object","properties":{"a":{"type":"number","minimum":0},"b":{"type":"string","pattern":"x","format":"y"}}}`)
	_, err := svc.Start(t.Context(), "spawn", req)
	var se *Error
	if !errors.As(err, &se) || se.Code != EUnsupportedSchema {
		t.Fatalf("err = %v, want %s", err, EUnsupportedSchema)
	}
	const kw = " is not a supported keyword (subset: type/oneOf/properties/required/additionalProperties/items/enum/const + annotations)"
	want := "unsupported JSON schema: schema.properties.a.minimum" + kw + "; schema.properties.b.pattern" + kw + "; schema.properties.b.format" + kw
	if se.Message != want {
		t.Errorf("message\n got: %s\nwant: %s", se.Message, want)
	}
	wantFields := map[string]string{
		"outputSchema.properties.a.minimum": "schema.properties.a.minimum" + kw,
		"outputSchema.properties.b.pattern": "schema.properties.b.pattern" + kw,
		"outputSchema.properties.b.format":  "schema.properties.b.format" + kw,
	}
	if !reflect.DeepEqual(se.Fields, wantFields) {
		t.Errorf("fields = %v, want %v", se.Fields, wantFields)
	}
}

func TestStart_R10_ResolvedRequest(t *testing.T) {
	t.Parallel()
	p := &fakeProvider{name: "spawn", caps: allCaps}
	p.StartFn = func(_ context.Context, req ResolvedRequest) (Run, error) {
		// A provider scribbling on its request must not reach the caller.
		req.Prompt[0] = model.TextBlock("changed")
		*req.Persona = "changed"
		req.ToolFilter.Allow[0] = "changed"
		return newFakeRun("c1", true), nil
	}
	svc, _ := setup(t, p)
	req := request()
	req.Label = "review"
	req.AgentOptions = &AgentOptions{Provider: "local", Model: "m", SubagentDepth: ptr(42)}
	req.OutputSchema = json.RawMessage(`{"type":"object"}`)
	req.MaxDepth = ptr(3)
	req.ToolFilter = &ToolFilter{Allow: []string{"read"}}
	req.Persona = ptr("terse")
	orig := cloneRequest(req)
	if _, err := svc.Start(t.Context(), "spawn", req); err != nil {
		t.Fatal(err)
	}
	got := p.starts[0]
	if want := (Descriptor{Mode: ModeOneShot, Provider: "spawn", Label: "review"}); !reflect.DeepEqual(got.Descriptor, want) {
		t.Errorf("descriptor = %+v, want %+v", got.Descriptor, want)
	}
	if got.ChildDepth != 1 || *got.AgentOptions.SubagentDepth != 1 {
		t.Errorf("child depth = %d, agentOptions.subagentDepth = %d; want 1 (caller's 42 overwritten)", got.ChildDepth, *got.AgentOptions.SubagentDepth)
	}
	if got.Label != "review" || got.AgentOptions.Provider != "local" || *got.MaxDepth != 3 || string(got.OutputSchema) != `{"type":"object"}` {
		t.Errorf("caller fields changed: %+v", got.Request)
	}
	if !reflect.DeepEqual(req, orig) {
		t.Errorf("the caller's request was modified:\n got: %+v\nwant: %+v", req, orig)
	}
	if *req.AgentOptions.SubagentDepth != 42 {
		t.Error("the caller's agentOptions were modified")
	}
}

func TestStart_R11_ProviderFailurePublishesNothing(t *testing.T) {
	t.Parallel()
	boom := Errorf(EInvalidRequest, "prompt must hold text")
	p := &fakeProvider{name: "acp", StartFn: func(context.Context, ResolvedRequest) (Run, error) { return nil, boom }}
	svc, b := setup(t, p)
	h, err := svc.Start(t.Context(), "acp", request())
	if h != nil || !errors.Is(err, boom) || ErrorCode(err) != EInvalidRequest {
		t.Fatalf("Start = %v, %v; want nil and the provider's error", h, err)
	}
	if got := b.rec.types(); len(got) != 0 {
		t.Errorf("dispatched %v", got)
	}
	if n := len(b.store.events()); n != 1 { // provider-added only
		t.Errorf("lifecycle log has %d rows", n)
	}
}

func TestStart_R13_StartDispatchedBeforeReturn(t *testing.T) {
	t.Parallel()
	run := newFakeRun("child-1", true)
	p := &fakeProvider{name: "spawn", StartFn: func(context.Context, ResolvedRequest) (Run, error) { return run, nil }}
	svc, b := setup(t, p)
	ctx := store.WithTenant(t.Context(), "acme")
	h, err := svc.Start(ctx, "spawn", request())
	if err != nil {
		t.Fatal(err)
	}
	got := b.rec.all()
	if len(got) != 1 || got[0].Type != EventStart {
		t.Fatalf("when Start returned, listeners had seen %+v", got)
	}
	want := Event{Type: EventStart, RunID: h.ID(), Provider: "spawn", ID: "child-1", Local: true, ParentID: "p1", RootID: "p1"}
	want.Seq = got[0].Seq
	if !reflect.DeepEqual(got[0], want) {
		t.Errorf("start = %+v, want %+v", got[0], want)
	}
	if _, err := uuid.Parse(h.ID()); err != nil || h.ID() == "child-1" {
		t.Errorf("run id %q is not a fresh UUID", h.ID())
	}
	row, ok := b.store.run(h.ID())
	if !ok || row.Kind != store.KindOneShot || row.Owner != "replica-1" || row.State != store.StateRunning ||
		row.ChildID != "child-1" || row.ParentID != "p1" || !row.Local || row.Provider != "spawn" || !row.LeaseUntil.After(row.StartedAt) {
		t.Errorf("run row = %+v", row)
	}
	stored := b.store.events()
	last := stored[len(stored)-1]
	if last.Type != EventStart || last.ID != got[0].Seq || last.RunID != h.ID() || last.ParentID != "p1" {
		t.Errorf("stored start = %+v", last)
	}
	wantPayload := `{"runId":"` + h.ID() + `","provider":"spawn","id":"child-1","local":true,"parentSessionId":"p1","rootSessionId":"p1"}`
	if string(last.Payload) != wantPayload {
		t.Errorf("payload = %s, want %s", last.Payload, wantPayload)
	}
	if live, ok := svc.Run(store.WithTenant(t.Context(), "acme"), h.ID()); !ok || live != h {
		t.Error("the handle is not live")
	}
	if _, ok := svc.Run(store.WithTenant(t.Context(), "other"), h.ID()); ok {
		t.Error("another tenant sees the live handle")
	}
	if h.ProviderName() != "spawn" || h.ChildID() != "child-1" || h.ParentID() != "p1" || !h.Local() || h.Tenant() != "acme" {
		t.Errorf("handle = %s %s %s %v %s", h.ProviderName(), h.ChildID(), h.ParentID(), h.Local(), h.Tenant())
	}
	run.settle(Result{StopReason: StopCompleted}, nil)
	waitDone(t, h)
	if err := h.Dispose(t.Context()); err != nil {
		t.Fatal(err)
	}
	for i, tenant := range b.store.tenants[1:] { // after provider-added
		if tenant != "acme" {
			t.Errorf("write %d used tenant %q, want the Start call's", i, tenant)
		}
	}
}

func TestStart_R21_CancelledContextRejectsBeforeProvider(t *testing.T) {
	t.Parallel()
	p := &fakeProvider{name: "spawn"}
	svc, b := setup(t, p)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := svc.Start(ctx, "spawn", request())
	if ErrorCode(err) != EAborted || !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want %s wrapping context.Canceled", err, EAborted)
	}
	if p.startCount() != 0 || len(b.rec.all()) != 0 {
		t.Error("an aborted request reached the provider or dispatched events")
	}
}

func TestStart_R22_AbortDuringSetupPublishesNothing(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	p := &fakeProvider{name: "acp", StartFn: func(ctx context.Context, _ ResolvedRequest) (Run, error) {
		cancel() // the request goes away during the handshake
		<-ctx.Done()
		return nil, ctx.Err()
	}}
	svc, b := setup(t, p)
	if _, err := svc.Start(ctx, "acp", request()); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
	if got := b.rec.types(); len(got) != 0 {
		t.Errorf("dispatched %v", got)
	}
}

func TestStart_R36_ChildDepthReachesProvider(t *testing.T) {
	t.Parallel()
	p := &fakeProvider{name: "spawn", caps: allCaps}
	svc, _ := setup(t, p)
	req := request()
	req.Parent.Session.DelegationDepth = 2
	req.AgentOptions = &AgentOptions{}
	if _, err := svc.Start(t.Context(), "spawn", req); err != nil {
		t.Fatal(err)
	}
	if got := p.starts[0]; got.ChildDepth != 3 || *got.AgentOptions.SubagentDepth != 3 {
		t.Errorf("child depth %d / %v, want 3", got.ChildDepth, got.AgentOptions.SubagentDepth)
	}
}

func TestStart_StoreFailureDisposesRun(t *testing.T) {
	t.Parallel()
	run := newFakeRun("c", false)
	p := &fakeProvider{name: "acp", StartFn: func(context.Context, ResolvedRequest) (Run, error) { return run, nil }}
	svc, b := setup(t, p)
	b.store.failStartRun = errors.New("db down")
	if _, err := svc.Start(t.Context(), "acp", request()); err == nil {
		t.Fatal("Start succeeded without recording the run")
	}
	if _, disposes := run.counts(); disposes != 1 {
		t.Errorf("the unrecorded run was disposed %d times, want 1", disposes)
	}
	if got := b.rec.types(); len(got) != 0 {
		t.Errorf("dispatched %v", got)
	}
	if err := svc.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
}

func TestStart_ToolFilterShape(t *testing.T) {
	t.Parallel()
	svc, _ := setup(t, &fakeProvider{name: "spawn", caps: allCaps})
	req := request()
	req.ToolFilter = &ToolFilter{}
	_, err := svc.Start(t.Context(), "spawn", req)
	var e *Error
	if !errors.As(err, &e) || e.Code != EInvalidRequest || e.Fields["toolFilter"] == "" {
		t.Fatalf("err = %#v", err)
	}
	for _, f := range []*ToolFilter{{Allow: []string{}}, {Deny: []string{"x"}}} {
		req.ToolFilter = f
		if _, err := svc.Start(t.Context(), "spawn", req); err != nil {
			t.Errorf("filter %+v: %v", f, err)
		}
	}
}

func TestStart_DrainingAfterShutdown(t *testing.T) {
	t.Parallel()
	svc, _ := setup(t, &fakeProvider{name: "spawn"})
	if err := svc.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Start(t.Context(), "spawn", request()); ErrorCode(err) != EDraining {
		t.Fatalf("err = %v, want %s", err, EDraining)
	}
}

func TestStart_ProvidersSeeTheirOwnCapabilities(t *testing.T) {
	t.Parallel()
	// A provider with every capability accepts every optional field.
	p := &fakeProvider{name: "spawn", caps: allCaps}
	svc, _ := setup(t, p)
	req := request()
	req.OutputSchema = json.RawMessage(`{"type":"object"}`)
	req.MaxDepth = ptr(5)
	req.ToolFilter = &ToolFilter{Deny: []string{"x"}}
	req.Persona = ptr("")
	if _, err := svc.Start(t.Context(), "spawn", req); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(p.starts[0].ToolFilter.Deny, []string{"x"}) || *p.starts[0].Persona != "" {
		t.Errorf("resolved = %+v", p.starts[0].Request)
	}
}
