package children

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"

	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/model/scripted"
	"github.com/subagentd/subagentd/internal/resident"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

func TestContinuable_R54_R57_R58_AnswersAtAcceptanceBeforeTheModelRuns(t *testing.T) {
	t.Parallel()
	gate, reached := make(chan struct{}), make(chan struct{})
	e := newContEnv(t, gatedModel(gate, reached, "done"))
	res := e.start(t, e.req(t, "hello"))
	// The model is still held: the answer did not wait for it.
	if res.ChildID == "" || res.TaskID == "" || res.MessageID == "" {
		t.Fatalf("started %+v", res)
	}
	if p, _ := e.st.Pending(t.Context(), res.ChildID); len(p) != 0 {
		t.Errorf("accepted prompt still pending: %+v", p)
	}
	msgs := userMessages(t, e.log(t, res.ChildID))
	if len(msgs) != 1 || msgs[0].ID != res.MessageID || msgs[0].Source.Kind != subagent.SourceUser {
		t.Errorf("user messages %+v, want the prompt as %s from the user (R58)", msgs, res.MessageID)
	}
	// R71: the start edge carrying the task id was dispatched before the answer.
	evs := e.life.all()
	if len(evs) != 1 || evs[0].Type != subagent.EventStart || evs[0].TaskID != res.TaskID || evs[0].ID != res.ChildID ||
		!evs[0].Local || evs[0].Provider != "spawn" || evs[0].ParentID != "p1" {
		t.Errorf("lifecycle %+v", evs)
	}
	close(gate)
	end := e.ended(t, res.TaskID)
	if end.StopReason != subagent.StopCompleted || model.Text(end.LastAssistantMessage) != "done" || end.RunID != evs[0].RunID {
		t.Errorf("end %+v", end)
	}
	run, err := e.m.Task(t.Context(), res.TaskID)
	if err != nil || run.Kind != store.KindActivation || run.State != store.StateSettled || run.StopReason != subagent.StopCompleted {
		t.Errorf("Task: %+v, %v", run, err)
	}
	if n := e.prov.startCount(); n != 0 {
		t.Errorf("R54: the provider's one-shot Start was called %d times", n)
	}
}

func TestContinuable_R56_CreationLogAndDescriptorBeforeFirstTurn(t *testing.T) {
	t.Parallel()
	e := newContEnv(t, scripted.New(scripted.Step{Text: "ok"}))
	seed := []store.Event{
		{Seq: 0, Type: sessionlog.EventTurnStart, Data: json.RawMessage(`{"turn":1}`)},
		{Seq: 1, Type: sessionlog.EventUserMessage, Data: json.RawMessage(`{"id":"u0","role":"user","content":[{"type":"text","text":"earlier"}],"source":{"kind":"user"}}`)},
		{Seq: 2, Type: sessionlog.EventTurnEnd, Data: json.RawMessage(`{"turn":1,"reason":{"kind":"completed"}}`)},
	}
	e.prov.prepare = func(_ context.Context, req subagent.ContinuableCreateRequest) (subagent.ContinuableSpec, error) {
		if req.SessionID != "kid" || req.Parent.Session.ID != "p1" {
			t.Errorf("prepare request %+v", req)
		}
		return subagent.ContinuableSpec{Seed: seed}, nil
	}
	req := e.req(t, "go")
	req.ChildID = "kid"
	req.AgentOptions = &subagent.AgentOptions{Model: "model-b", MaxTokens: 77}
	persona := "Be terse."
	req.Persona = &persona
	res := e.start(t, req)
	e.ended(t, res.TaskID)

	evs := e.log(t, "kid")
	want := []string{sessionlog.EventTurnStart, sessionlog.EventUserMessage, sessionlog.EventTurnEnd, sessionlog.EventEndSeed,
		sessionlog.EventDescriptor, sessionlog.EventEndSeed, sessionlog.EventApprovalPolicy, sessionlog.EventInboxSpliced, sessionlog.EventTurnStart}
	var got []string
	for _, ev := range evs[:len(want)] {
		got = append(got, ev.Type)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("creation log %v, want %v", got, want)
	}
	if string(evs[6].Data) != `{"policy":"never","source":"delegation"}` {
		t.Errorf("policy %s", evs[6].Data)
	}
	var turn sessionlog.TurnData
	if err := json.Unmarshal(evs[8].Data, &turn); err != nil || turn.Turn != 2 {
		t.Errorf("first own turn %s: numbering continues after the seed", evs[8].Data)
	}
	// Route: the request's model, the parent's provider; no budget (docs/seam.md §10).
	if string(evs[4].Data) != `{"version":2,"mode":"continuable","provider":"spawn","label":"task","agentProvider":"route-a","agentModel":"model-b","persona":"Be terse."}` {
		t.Errorf("descriptor %s", evs[4].Data)
	}
	sess, err := e.st.GetSession(t.Context(), "kid")
	if err != nil {
		t.Fatal(err)
	}
	if sess.ParentID != "p1" || sess.Origin != OriginSubagent || sess.DelegationDepth != 1 || sess.SeedLength != 3 ||
		sess.Mode != subagent.ModeContinuable || sess.Label != "task" || sess.Provider != "spawn" || sess.MaxTokens != 77 {
		t.Errorf("header %+v", sess)
	}
	mr := e.mat.requests()
	if len(mr) != 1 || mr[0].Create == nil || mr[0].Options != (subagent.AgentOptions{Provider: "route-a", Model: "model-b", MaxTokens: 77}) {
		t.Errorf("materialize requests %+v", mr)
	}
}

func TestContinuable_R56_UndeclaredFieldsOmitted(t *testing.T) {
	t.Parallel()
	e := newContEnv(t, scripted.New(scripted.Step{Text: "ok"}))
	if err := e.st.CreateSession(t.Context(), store.Session{ID: "bare"}); err != nil {
		t.Fatal(err)
	}
	req := e.req(t, "go")
	req.Parent = e.parent(t, "bare")
	req.ToolFilter = &subagent.ToolFilter{Deny: []string{"shell"}}
	res := e.start(t, req)
	e.ended(t, res.TaskID)
	d := e.log(t, res.ChildID)[0]
	if d.Type != sessionlog.EventDescriptor || string(d.Data) != `{"version":2,"mode":"continuable","provider":"spawn","label":"task","toolFilter":{"deny":["shell"]}}` {
		t.Errorf("first event %s %s", d.Type, d.Data)
	}
}

func TestContinuable_R53_ValidationOrderCreatesNothing(t *testing.T) {
	t.Parallel()
	neg, zero := -1, 0
	for _, tc := range []struct {
		name string
		mod  func(e *contEnv, r *ContinuableRequest)
		code string
		// prepares: the check comes after PrepareContinuable.
		prepares bool
	}{
		{"maxDepth domain before provider lookup", func(_ *contEnv, r *ContinuableRequest) { r.MaxDepth, r.Provider = &neg, "nope" }, subagent.EInvalidMaxDepth, false},
		{"depth cap before provider lookup (R38)", func(_ *contEnv, r *ContinuableRequest) { r.MaxDepth, r.Provider = &zero, "nope" }, subagent.EDepthExceeded, false},
		{"label required", func(_ *contEnv, r *ContinuableRequest) { r.Label = "" }, subagent.EInvalidRequest, false},
		{"prompt required", func(_ *contEnv, r *ContinuableRequest) { r.Prompt = nil }, subagent.EInvalidRequest, false},
		{"tool filter needs a list", func(_ *contEnv, r *ContinuableRequest) { r.ToolFilter = &subagent.ToolFilter{} }, subagent.EInvalidRequest, false},
		{"descriptor must be lossless", func(_ *contEnv, r *ContinuableRequest) { r.Label = "\xff" }, subagent.EInvalidRequest, false},
		{"unknown provider", func(_ *contEnv, r *ContinuableRequest) { r.Provider = "nope" }, subagent.ENoProvider, false},
		{"R55 provider without PrepareContinuable", func(e *contEnv, r *ContinuableRequest) { r.Provider = "oneshot" }, subagent.EUnsupportedCapability, false},
		{"materializer rejects before Create", func(e *contEnv, r *ContinuableRequest) {
			e.mat.err = subagent.Errorf(subagent.EInvalidRequest, "unknown model route")
		}, subagent.EInvalidRequest, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newContEnv(t, scripted.New())
			oneshot := &fakeProvider{name: "oneshot"}
			if err := e.svc.Register(t.Context(), oneshot); err != nil {
				t.Fatal(err)
			}
			prepared := false
			e.prov.prepare = func(context.Context, subagent.ContinuableCreateRequest) (subagent.ContinuableSpec, error) {
				prepared = true
				return subagent.ContinuableSpec{}, nil
			}
			req := e.req(t, "go")
			req.ChildID = "kid"
			tc.mod(e, &req)
			_, err := e.m.StartContinuable(t.Context(), req)
			wantCode(t, err, tc.code)
			if prepared != tc.prepares {
				t.Errorf("prepared %v, want %v", prepared, tc.prepares)
			}
			if _, err := e.st.GetSession(t.Context(), "kid"); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("child session exists: %v", err)
			}
			if n := len(e.life.all()); n != 0 || oneshot.startCount() != 0 || e.prov.startCount() != 0 {
				t.Errorf("%d lifecycle events, %d/%d one-shot starts (R54)", n, oneshot.startCount(), e.prov.startCount())
			}
		})
	}
}

func TestContinuable_R53_DrainingRejects(t *testing.T) {
	t.Parallel()
	e := newContEnv(t, scripted.New())
	if err := e.m.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	_, err := e.m.StartContinuable(t.Context(), e.req(t, "go"))
	wantCode(t, err, subagent.EDraining)
}

func TestContinuable_R59_AbortBeforeAcceptanceLeavesNothing(t *testing.T) {
	t.Parallel()
	e := newContEnv(t, scripted.New())
	ctx, cancel := context.WithCancel(t.Context())
	e.prov.prepare = func(context.Context, subagent.ContinuableCreateRequest) (subagent.ContinuableSpec, error) {
		cancel() // the caller gives up while the provider prepares
		return subagent.ContinuableSpec{}, nil
	}
	req := e.req(t, "go")
	req.ChildID = "kid"
	_, err := e.m.StartContinuable(ctx, req)
	wantCode(t, err, subagent.EAborted)
	if _, err := e.st.GetSession(t.Context(), "kid"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("child session: %v", err)
	}
	if n := len(e.life.all()); n != 0 {
		t.Errorf("%d lifecycle events", n)
	}
	if n := len(e.notices.all()); n != 0 {
		t.Errorf("%d notices", n)
	}
}

func TestContinuable_R60_FailureAfterStartEdgeClosesThePair(t *testing.T) {
	t.Parallel()
	e := newContEnv(t, scripted.New())
	e.st.failEnqueue = errors.New("inbox down")
	req := e.req(t, "go")
	req.ChildID = "kid"
	if _, err := e.m.StartContinuable(t.Context(), req); err == nil {
		t.Fatal("start succeeded without accepting its prompt")
	}
	evs := e.life.all()
	if len(evs) != 2 || evs[0].Type != subagent.EventStart || evs[1].Type != subagent.EventEnd || evs[1].StopReason != subagent.StopAborted ||
		evs[0].RunID != evs[1].RunID || evs[1].LastAssistantMessage != nil {
		t.Errorf("lifecycle %+v", evs)
	}
	if n := len(e.notices.all()); n != 0 {
		t.Errorf("R75: %d notices for a child that never accepted a message", n)
	}
	if n := countType(e.log(t, "kid"), sessionlog.EventTurnStart); n != 0 {
		t.Errorf("%d turns", n)
	}
	if e.m.liveActivation(resident.Key{Tenant: store.DefaultTenant, ID: "kid"}) != nil {
		t.Error("rolled-back activation is live")
	}
}

func TestContinuable_R61_CallerCancelAfterAcceptanceChangesNothing(t *testing.T) {
	t.Parallel()
	gate, reached := make(chan struct{}), make(chan struct{})
	e := newContEnv(t, gatedModel(gate, reached, "finished"))
	ctx, cancel := context.WithCancel(t.Context())
	res, err := e.m.StartContinuable(ctx, e.req(t, "go"))
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	<-reached
	close(gate)
	if end := e.ended(t, res.TaskID); end.StopReason != subagent.StopCompleted {
		t.Errorf("end %+v", end)
	}
}

func TestContinuable_R62_ReservedIDDuplicateWhileLiveAndAfterSettlement(t *testing.T) {
	t.Parallel()
	gate, reached := make(chan struct{}), make(chan struct{})
	e := newContEnv(t, gatedModel(gate, reached, "done"))
	req := e.req(t, "go")
	req.ChildID = "kid"
	res := e.start(t, req)
	if _, err := e.m.StartContinuable(t.Context(), req); subagent.ErrorCode(err) != subagent.EDuplicateChild {
		t.Errorf("live duplicate: %v", err)
	}
	close(gate)
	e.ended(t, res.TaskID)
	e.settled(t, "kid")
	if _, err := e.m.StartContinuable(t.Context(), req); subagent.ErrorCode(err) != subagent.EDuplicateChild {
		t.Errorf("persisted duplicate: %v", err)
	}
	if n := len(e.mat.requests()); n != 1 {
		t.Errorf("%d materializations, want 1", n)
	}
}

func TestContinuable_R63_CapabilityFlagsNotConsulted(t *testing.T) {
	t.Parallel()
	e := newContEnv(t, scripted.New(scripted.Step{Text: "ok"}))
	req := e.req(t, "go")
	persona, depth := "p", 5
	req.Persona, req.MaxDepth, req.ToolFilter = &persona, &depth, &subagent.ToolFilter{Allow: []string{}}
	res := e.start(t, req) // the provider advertises no capability
	e.ended(t, res.TaskID)
}

func TestContinuable_R38_DepthFromParentHeader(t *testing.T) {
	t.Parallel()
	e := newContEnv(t, scripted.New())
	if err := e.st.CreateSession(t.Context(), store.Session{ID: "deep", ParentID: "p1", Origin: OriginSubagent, DelegationDepth: 2}); err != nil {
		t.Fatal(err)
	}
	req := e.req(t, "go")
	req.Parent = e.parent(t, "deep")
	cap2 := 2
	req.MaxDepth = &cap2
	_, err := e.m.StartContinuable(t.Context(), req)
	wantCode(t, err, subagent.EDepthExceeded)
	if subagent.ErrorMessage(err) != "subagent depth 3 exceeds maxDepth 2" {
		t.Errorf("message %q", subagent.ErrorMessage(err))
	}
}

// TestStart_ListenerMayCallTheManagerForTheSameChild: lifecycle listeners
// run outside the child's loop, so one that interrupts the child it just
// saw start neither deadlocks nor sees its end before its start.
func TestStart_ListenerMayCallTheManagerForTheSameChild(t *testing.T) {
	t.Parallel()
	gate, reached := make(chan struct{}), make(chan struct{})
	e := newContEnv(t, gatedModel(gate, reached, "never"))
	interrupted := make(chan error, 1)
	e.svc.Subscribe("", func(ctx context.Context, ev subagent.Event) error {
		if ev.Type == subagent.EventStart {
			interrupted <- e.m.Interrupt(ctx, "p1", ev.ID)
		}
		return nil
	})
	res := e.start(t, e.req(t, "go"))
	if err := <-interrupted; err != nil {
		t.Fatalf("interrupt from the start listener: %v", err)
	}
	evs := e.life.waitFor(t, "the start and end", func(evs []subagent.Event) bool { return len(evs) >= 2 })
	if evs[0].Type != subagent.EventStart || evs[1].Type != subagent.EventEnd || evs[1].TaskID != res.TaskID || evs[1].StopReason != subagent.StopAborted {
		t.Fatalf("lifecycle %+v, want the start, then the end aborted", evs)
	}
}

// ownMatProvider is a continuable provider that builds its children's
// agents itself, as an external agent provider does.
type ownMatProvider struct {
	*contProvider
	*testMat
}

// TestStart_ProviderWithItsOwnMaterializerBuildsItsChildren: a continuable
// provider that is a Materializer builds its children's agents, on start
// and on cold resume; the Manager's materializer builds none of them.
func TestStart_ProviderWithItsOwnMaterializerBuildsItsChildren(t *testing.T) {
	t.Parallel()
	e := newContEnv(t, scripted.Func(func(model.Request) scripted.Step { return scripted.Step{Text: "ok"} }))
	own := &testMat{st: e.st, model: scripted.Func(func(model.Request) scripted.Step { return scripted.Step{Text: "own"} })}
	p := ownMatProvider{contProvider: &contProvider{fakeProvider: &fakeProvider{name: "own", caps: contCaps}}, testMat: own}
	if err := e.svc.Register(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	req := e.req(t, "go")
	req.Provider = "own"
	res := e.start(t, req)
	e.ended(t, res.TaskID)
	e.settled(t, res.ChildID)
	f, err := e.m.Followup(t.Context(), "p1", res.ChildID, txt("again"), sessionlog.Source{})
	if err != nil || f.Route != subagent.RouteStarted {
		t.Fatalf("followup %+v, %v", f, err)
	}
	if end := e.ended(t, f.TaskID); model.Text(end.LastAssistantMessage) != "own" {
		t.Errorf("resumed epoch %+v, want the provider's agent", end)
	}
	if n, m := len(own.requests()), len(e.mat.requests()); n != 2 || m != 0 {
		t.Errorf("the provider built %d agents and the manager %d, want 2 and 0", n, m)
	}
}
