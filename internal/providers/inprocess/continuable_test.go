package inprocess_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/agent"
	"github.com/subagentd/subagentd/internal/children"
	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/model/scripted"
	"github.com/subagentd/subagentd/internal/providers/fork"
	"github.com/subagentd/subagentd/internal/providers/inprocess"
	"github.com/subagentd/subagentd/internal/providers/inprocess/inprocesstest"
	"github.com/subagentd/subagentd/internal/providers/spawn"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// contProvider adds PrepareContinuable to an in-process provider, the way
// spawn (no seed) and fork (the parent's completed-turn prefix) provide it.
type contProvider struct {
	subagent.Provider
	seed func(ctx context.Context, parent store.Session) ([]store.Event, error)
}

func (p contProvider) PrepareContinuable(ctx context.Context, req subagent.ContinuableCreateRequest) (subagent.ContinuableSpec, error) {
	if p.seed == nil {
		return subagent.ContinuableSpec{}, nil
	}
	seed, err := p.seed(ctx, req.Parent.Session)
	return subagent.ContinuableSpec{Seed: seed}, err
}

// acceptOrder is the harness store recording the order the inbox accepted
// messages in.
type acceptOrder struct {
	store.Store
	mu  sync.Mutex
	ids []string
}

func (s *acceptOrder) Enqueue(ctx context.Context, m store.InboxMessage) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.Store.Enqueue(ctx, m); err != nil {
		return err
	}
	s.ids = append(s.ids, m.ID)
	return nil
}

func (s *acceptOrder) accepted() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.ids)
}

// contWorld is a Service with continuable spawn and fork providers and a
// Manager over the real in-process Materializer.
type contWorld struct {
	h    *inprocesstest.Harness
	st   *acceptOrder
	svc  *subagent.Service
	m    *children.Manager
	ends *inprocesstest.Ends
}

func newContWorld(t *testing.T, routes ...model.Route) *contWorld {
	t.Helper()
	h := inprocesstest.New(t, inprocesstest.Config{Routes: routes})
	w := &contWorld{h: h, st: &acceptOrder{Store: h.Store}}
	w.svc = subagent.NewService(subagent.Config{Store: w.st, Logger: h.Logger, Owner: "test"})
	forkSeed := func(ctx context.Context, parent store.Session) ([]store.Event, error) {
		return fork.Prefix(h.Log(t, parent.ID)), nil
	}
	for _, p := range []subagent.Provider{contProvider{Provider: spawn.New(h.Deps)}, contProvider{Provider: fork.New(h.Deps), seed: forkSeed}} {
		if err := w.svc.Register(inprocesstest.Ctx(t), p); err != nil {
			t.Fatal(err)
		}
	}
	w.ends = inprocesstest.WatchEnds(w.svc)
	w.m = children.NewManager(w.svc, children.ManagerConfig{Materializer: inprocess.NewMaterializer(h.Deps), Logger: h.Logger})
	t.Cleanup(func() {
		if err := w.m.Shutdown(context.Background()); err != nil {
			t.Errorf("manager shutdown: %v", err)
		}
		if err := w.svc.Shutdown(context.Background()); err != nil {
			t.Errorf("service shutdown: %v", err)
		}
	})
	return w
}

func (w *contWorld) request(prompt string) children.ContinuableRequest {
	return children.ContinuableRequest{Provider: spawn.Name, Label: "background task", Prompt: inprocesstest.Text(prompt), Parent: w.h.Parent}
}

func (w *contWorld) start(t *testing.T, req children.ContinuableRequest) children.ContinuableStarted {
	t.Helper()
	res, err := w.m.StartContinuable(inprocesstest.Ctx(t), req)
	if err != nil {
		t.Fatalf("StartContinuable: %v", err)
	}
	return res
}

// end waits for the subagent/end of taskID.
func (w *contWorld) end(t *testing.T, taskID string) subagent.Event {
	t.Helper()
	return w.ends.Wait(t, taskID)
}

// inactive waits until childID has no live activation.
func (w *contWorld) inactive(t *testing.T, childID string) {
	t.Helper()
	for {
		info, err := w.m.Child(inprocesstest.Ctx(t), childID)
		if err != nil {
			t.Fatal(err)
		}
		if info.Activity == subagent.ActivityInactive {
			return
		}
		w.end(t, info.TaskID)
	}
}

type contOutcome struct {
	res children.FollowupResult
	err error
}

func (w *contWorld) followup(t *testing.T, childID, text string) <-chan contOutcome {
	out := make(chan contOutcome, 1)
	go func() {
		res, err := w.m.Followup(inprocesstest.Ctx(t), w.h.Parent.Session.ID, childID, inprocesstest.Text(text), sessionlog.Source{Kind: "user"})
		out <- contOutcome{res, err}
	}()
	return out
}

func wait(t *testing.T, out <-chan contOutcome) contOutcome {
	t.Helper()
	select {
	case o := <-out:
		return o
	case <-time.After(inprocesstest.Timeout):
		t.Fatal("followup did not answer")
		return contOutcome{}
	}
}

// steers matches the n-th next-step inbox insert of a log.
func steers(n int) func(store.Event) bool {
	seen := 0
	return func(e store.Event) bool {
		var d sessionlog.InboxSplicedData
		if e.Type == sessionlog.EventInboxSpliced && json.Unmarshal(e.Data, &d) == nil && d.Target == sessionlog.TargetNextStep && len(d.Inserted) > 0 {
			seen++
		}
		return seen >= n
	}
}

func userTexts(t *testing.T, evs []store.Event) []string {
	t.Helper()
	var out []string
	for _, e := range inprocesstest.OfType(evs, sessionlog.EventUserMessage) {
		out = append(out, model.Text(inprocesstest.Decode[sessionlog.UserMessage](t, e).Content))
	}
	return out
}

func TestContinuable_R96_SteeredFollowupReachesTheVeryNextModelRequest(t *testing.T) {
	t.Parallel()
	gate, reached := make(chan struct{}), make(chan struct{})
	mdl := scripted.New(scripted.Step{Text: "working", Gate: gate, Reached: reached}, scripted.Step{Text: "done"})
	w := newContWorld(t, inprocesstest.Route("main", mdl))
	req := w.request("start")
	persona := "You are the researcher."
	req.Persona, req.AgentOptions = &persona, &subagent.AgentOptions{MaxTokens: 77}
	res := w.start(t, req)
	<-reached
	out := w.followup(t, res.ChildID, "also check the tests")
	w.h.WaitEvent(t, res.ChildID, steers(1))
	close(gate)
	o := wait(t, out)
	if o.err != nil || o.res.Route != subagent.RouteSteered || o.res.TaskID != res.TaskID {
		t.Fatalf("followup %+v, %v", o.res, o.err)
	}
	if end := w.end(t, res.TaskID); end.StopReason != subagent.StopCompleted || model.Text(end.LastAssistantMessage) != "done" {
		t.Errorf("end %+v", end)
	}
	reqs := mdl.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d model requests", len(reqs))
	}
	if last := reqs[1].Messages[len(reqs[1].Messages)-1]; model.Text(last.Content) != "also check the tests" {
		t.Errorf("the next request ends with %+v", last)
	}
	if !strings.Contains(reqs[0].System, persona) || !strings.Contains(reqs[0].System, "subagent working on a task delegated") ||
		reqs[0].MaxTokens != 77 || reqs[0].Model != "main-default" {
		t.Errorf("first request system %q, maxTokens %d, model %q", reqs[0].System, reqs[0].MaxTokens, reqs[0].Model)
	}
}

func TestContinuable_R82_R88_StartedFollowupResumesFromTheLogOnly(t *testing.T) {
	t.Parallel()
	main, other := scripted.New(), scripted.New(scripted.Step{Text: "first answer"}, scripted.Step{Text: "second answer"})
	w := newContWorld(t, inprocesstest.Route("main", main), inprocesstest.Route("other", other))
	for _, name := range []string{"read", "shell"} {
		if err := w.h.Tools.Register(agent.Tool{Name: name, Description: name, Run: noop}); err != nil {
			t.Fatal(err)
		}
	}
	req := w.request("one")
	persona := "Persona P."
	req.Persona = &persona
	req.AgentOptions = &subagent.AgentOptions{Provider: "other", MaxTokens: 77}
	req.ToolFilter = &subagent.ToolFilter{Deny: []string{"shell"}}
	res := w.start(t, req)
	w.end(t, res.TaskID)
	w.inactive(t, res.ChildID)
	before := w.h.Log(t, res.ChildID)

	f, err := w.m.Followup(inprocesstest.Ctx(t), w.h.Parent.Session.ID, res.ChildID, inprocesstest.Text("two"), sessionlog.Source{})
	if err != nil || f.Route != subagent.RouteStarted || f.TaskID == res.TaskID {
		t.Fatalf("followup %+v, %v", f, err)
	}
	if end := w.end(t, f.TaskID); model.Text(end.LastAssistantMessage) != "second answer" || end.Provider != spawn.Name {
		t.Errorf("resumed end %+v", end)
	}
	after := w.h.Log(t, res.ChildID)
	for i, e := range before {
		if after[i].Type != e.Type || string(after[i].Data) != string(e.Data) {
			t.Fatalf("event %d changed", i)
		}
	}
	if n := len(inprocesstest.OfType(after, sessionlog.EventDescriptor)); n != 1 {
		t.Errorf("%d descriptors", n)
	}
	if n := len(inprocesstest.OfType(after, sessionlog.EventApprovalPolicy)); n != 1 {
		t.Errorf("%d policy events", n)
	}
	if got := userTexts(t, after); !slices.Equal(got, []string{"one", "two"}) {
		t.Errorf("user messages %v", got)
	}
	reqs := other.Requests()
	if len(reqs) != 2 || len(main.Requests()) != 0 {
		t.Fatalf("requests: %d on other, %d on main", len(reqs), len(main.Requests()))
	}
	r := reqs[1]
	// The descriptor's route and persona, its tool filter, no budget (docs/seam.md §10).
	if r.MaxTokens != 0 || !strings.Contains(r.System, persona) || slices.Contains(toolNames(r), "shell") ||
		!slices.Contains(toolNames(r), "read") || len(r.Messages) != 3 {
		t.Errorf("resumed request: maxTokens %d, tools %v, %d messages, system %q", r.MaxTokens, toolNames(r), len(r.Messages), r.System)
	}
	hdr, err := w.h.Store.GetSession(inprocesstest.Ctx(t), res.ChildID)
	if err != nil || hdr.DelegationDepth != 1 || hdr.Mode != subagent.ModeContinuable || hdr.Cwd != inprocesstest.ParentCwd {
		t.Errorf("header %+v, %v", hdr, err)
	}
}

func TestContinuable_R43_R56_ForkSeedBeforeDescriptorAndResumeNeverReforks(t *testing.T) {
	t.Parallel()
	mdl := scripted.New(scripted.Step{Text: "forked answer"}, scripted.Step{Text: "resumed answer"})
	w := newContWorld(t, inprocesstest.Route("main", mdl))
	parentID := w.h.Parent.Session.ID
	turn := func(n int, text string) []store.NewEvent {
		um, _ := json.Marshal(sessionlog.UserMessage{ID: fmt.Sprintf("u%d", n), Role: "user", Content: inprocesstest.Text(text), Source: sessionlog.Source{Kind: "user"}})
		am, _ := json.Marshal(sessionlog.AssistantMessageData{Turn: n, Step: 1, Message: sessionlog.AssistantMessage{Role: "assistant", Content: inprocesstest.Text("re: " + text)}})
		return []store.NewEvent{
			{Type: sessionlog.EventTurnStart, Data: json.RawMessage(fmt.Sprintf(`{"turn":%d}`, n))},
			{Type: sessionlog.EventUserMessage, Data: um},
			{Type: sessionlog.EventStepStart, Data: json.RawMessage(fmt.Sprintf(`{"turn":%d,"step":1}`, n))},
			{Type: sessionlog.EventAssistantMessage, Data: am},
			{Type: sessionlog.EventStepEnd, Data: json.RawMessage(fmt.Sprintf(`{"turn":%d,"step":1}`, n))},
			{Type: sessionlog.EventTurnEnd, Data: json.RawMessage(fmt.Sprintf(`{"turn":%d,"reason":{"kind":"completed"}}`, n))},
		}
	}
	if _, err := w.h.Store.AppendEvents(inprocesstest.Ctx(t), parentID, turn(1, "old context")...); err != nil {
		t.Fatal(err)
	}
	req := w.request("fork task")
	req.Provider = fork.Name
	res := w.start(t, req)
	w.end(t, res.TaskID)
	w.inactive(t, res.ChildID)
	log := w.h.Log(t, res.ChildID)
	want := []string{sessionlog.EventTurnStart, sessionlog.EventUserMessage, sessionlog.EventStepStart, sessionlog.EventAssistantMessage,
		sessionlog.EventStepEnd, sessionlog.EventTurnEnd, sessionlog.EventEndSeed, sessionlog.EventDescriptor, sessionlog.EventEndSeed, sessionlog.EventApprovalPolicy}
	if got := inprocesstest.Types(log)[:len(want)]; !slices.Equal(got, want) {
		t.Fatalf("child log %v", got)
	}
	// The parent moves on; the child resumes from its own log only.
	if _, err := w.h.Store.AppendEvents(inprocesstest.Ctx(t), parentID, turn(2, "new parent context")...); err != nil {
		t.Fatal(err)
	}
	f, err := w.m.Followup(inprocesstest.Ctx(t), parentID, res.ChildID, inprocesstest.Text("continue"), sessionlog.Source{})
	if err != nil {
		t.Fatal(err)
	}
	w.end(t, f.TaskID)
	reqs := mdl.Requests()
	var texts []string
	for _, m := range reqs[1].Messages {
		texts = append(texts, model.Text(m.Content))
	}
	if !slices.Equal(texts, []string{"old context", "re: old context", "fork task", "forked answer", "continue"}) {
		t.Errorf("resumed history %q", texts)
	}
}

func TestContinuable_FiftyConcurrentFollowupsDeliveredInAcceptanceOrderOnce(t *testing.T) {
	t.Parallel()
	w := newContWorld(t, inprocesstest.Route("main", scripted.Func(func(model.Request) scripted.Step { return scripted.Step{Text: "ok"} })))
	res := w.start(t, w.request("go"))
	outs := make([]<-chan contOutcome, 50)
	for i := range outs {
		outs[i] = w.followup(t, res.ChildID, fmt.Sprintf("message %02d", i))
	}
	for _, out := range outs {
		if o := wait(t, out); o.err != nil || (o.res.Route != subagent.RouteSteered && o.res.Route != subagent.RouteStarted) {
			t.Errorf("followup %+v, %v", o.res, o.err)
		}
	}
	w.inactive(t, res.ChildID)
	var ids []string
	for _, e := range inprocesstest.OfType(w.h.Log(t, res.ChildID), sessionlog.EventUserMessage) {
		ids = append(ids, inprocesstest.Decode[sessionlog.UserMessage](t, e).ID)
	}
	// The prompt is accepted with the start, the followups into the inbox.
	if accepted := append([]string{res.MessageID}, w.st.accepted()...); len(ids) != 51 || !slices.Equal(ids, accepted) {
		t.Errorf("logged %d messages %v\naccepted %v", len(ids), ids, accepted)
	}
}

func TestContinuable_R103_InterruptThenFollowupRunsParkedMessagesFirst(t *testing.T) {
	t.Parallel()
	gate, reached := make(chan struct{}), make(chan struct{})
	calls := 0
	mdl := scripted.Func(func(model.Request) scripted.Step {
		calls++ // one child: its steps are sequential
		if calls == 1 {
			return scripted.Step{Text: "never", Gate: gate, Reached: reached}
		}
		return scripted.Step{Text: "ok"}
	})
	w := newContWorld(t, inprocesstest.Route("main", mdl))
	res := w.start(t, w.request("go"))
	<-reached
	out1 := w.followup(t, res.ChildID, "parked 1")
	w.h.WaitEvent(t, res.ChildID, steers(1))
	out2 := w.followup(t, res.ChildID, "parked 2")
	w.h.WaitEvent(t, res.ChildID, steers(2))
	if err := w.m.Interrupt(inprocesstest.Ctx(t), w.h.Parent.Session.ID, res.ChildID); err != nil {
		t.Fatal(err)
	}
	if end := w.end(t, res.TaskID); end.StopReason != subagent.StopAborted {
		t.Errorf("interrupted end %+v", end)
	}
	for _, out := range []<-chan contOutcome{out1, out2} {
		if o := wait(t, out); o.err != nil || o.res.Route != subagent.RouteParked {
			t.Errorf("parked %+v, %v; want route parked", o.res, o.err)
		}
	}
	w.inactive(t, res.ChildID)
	f := wait(t, w.followup(t, res.ChildID, "new"))
	if f.err != nil || f.res.Route != subagent.RouteStarted {
		t.Fatalf("followup %+v, %v", f.res, f.err)
	}
	w.end(t, f.res.TaskID)
	log := w.h.Log(t, res.ChildID)
	if got := userTexts(t, log); !slices.Equal(got, []string{"go", "parked 1", "parked 2", "new"}) {
		t.Errorf("user messages %v", got)
	}
	var ends []string
	for _, e := range inprocesstest.OfType(log, sessionlog.EventTurnEnd) {
		ends = append(ends, inprocesstest.Decode[sessionlog.TurnEndData](t, e).Reason.Kind)
	}
	if !slices.Equal(ends, []string{"aborted", "completed", "completed", "completed"}) {
		t.Errorf("turn ends %v", ends)
	}
}

func TestContinuable_BadInputAppendsNothing(t *testing.T) {
	t.Parallel()
	w := newContWorld(t, inprocesstest.Route("main", scripted.Func(func(model.Request) scripted.Step { return scripted.Step{Text: "ok"} })))
	ctx := inprocesstest.Ctx(t)
	parentID := w.h.Parent.Session.ID
	// Creation checks run before anything is written.
	req := w.request("x")
	req.AgentOptions = &subagent.AgentOptions{Provider: "nowhere"}
	if _, err := w.m.StartContinuable(ctx, req); subagent.ErrorCode(err) != subagent.EInvalidRequest {
		t.Errorf("unknown route: %v", err)
	}
	req = w.request("x")
	req.ToolFilter = &subagent.ToolFilter{Allow: []string{"no-such-tool"}}
	if _, err := w.m.StartContinuable(ctx, req); subagent.ErrorCode(err) != subagent.EInvalidRequest {
		t.Errorf("unknown tool: %v", err)
	}
	if kids := w.h.Children(t, parentID); len(kids) != 0 {
		t.Fatalf("children were created: %+v", kids)
	}

	res := w.start(t, w.request("go"))
	w.end(t, res.TaskID)
	w.inactive(t, res.ChildID)
	run, err := w.svc.Start(ctx, spawn.Name, subagent.Request{Prompt: inprocesstest.Text("one-shot"), Parent: w.h.Parent})
	if err != nil {
		t.Fatal(err)
	}
	inprocesstest.Settle(t, run)
	if err := run.Dispose(ctx); err != nil {
		t.Fatal(err)
	}
	other := w.h.NewSession(t, store.Session{})
	lens := map[string]int{}
	for _, id := range []string{res.ChildID, run.ChildID(), parentID, other.ID} {
		lens[id] = len(w.h.Log(t, id))
	}
	for _, tc := range []struct {
		name, parent, child, code string
	}{
		{"unknown child", parentID, "nobody", subagent.ESessionNotFound},
		{"wrong parent", other.ID, res.ChildID, subagent.EForbidden},
		{"one-shot child", parentID, run.ChildID(), subagent.ENotResumable},
	} {
		_, err := w.m.Followup(ctx, tc.parent, tc.child, inprocesstest.Text("hi"), sessionlog.Source{})
		if subagent.ErrorCode(err) != tc.code {
			t.Errorf("%s: %v, want %s", tc.name, err, tc.code)
		}
	}
	for id, n := range lens {
		if got := len(w.h.Log(t, id)); got != n {
			t.Errorf("log of %s grew from %d to %d", id, n, got)
		}
	}
	if got := len(w.st.accepted()); got != 0 {
		t.Errorf("%d followups accepted into the inbox", got)
	}
}
