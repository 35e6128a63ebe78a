package inprocess_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/subagentd/subagentd/internal/agent"
	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/model/scripted"
	"github.com/subagentd/subagentd/internal/providers/inprocess/inprocesstest"
	"github.com/subagentd/subagentd/internal/providers/spawn"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

func TestRun_CompletesWithFinalOutput(t *testing.T) {
	t.Parallel()
	h, _ := newHarness(t,
		scripted.Step{Text: "looking", ToolCalls: []model.ToolCall{{Name: "read"}}},
		scripted.Step{Text: "found it"})
	if err := h.Tools.Register(agent.Tool{Name: "read", Run: noop}); err != nil {
		t.Fatal(err)
	}
	run := h.Start(t, spawn.Name, h.Request("find it"))
	res := inprocesstest.Settle(t, run)
	if res.StopReason != subagent.StopCompleted || model.Text(res.Output) != "found it" || res.Diagnostic != "" {
		t.Errorf("result %+v, want completed with the last message", res)
	}
	evs := h.RunEvents(t)
	if len(evs) != 2 || evs[0].Type != subagent.EventStart || evs[1].Type != subagent.EventEnd ||
		evs[0].RunID != run.ID() || evs[1].RunID != run.ID() || evs[1].ID != run.ChildID() || !evs[1].Local ||
		model.Text(evs[1].LastAssistantMessage) != "found it" {
		t.Errorf("lifecycle %+v", evs)
	}
}

func TestStart_R20_ChildExistsWhenStartFires(t *testing.T) {
	t.Parallel()
	h, _ := newHarness(t, scripted.Step{Text: "done"})
	type seen struct {
		hdr store.Session
		err error
		log []store.Event
	}
	got := make(chan seen, 1)
	unsubscribe := h.Service.Subscribe(h.Parent.Session.ID, func(ctx context.Context, e subagent.Event) error {
		if e.Type == subagent.EventStart {
			hdr, err := h.Store.GetSession(ctx, e.ID)
			log, _ := h.Store.Events(ctx, e.ID, -1, 100)
			got <- seen{hdr, err, log}
		}
		return nil
	})
	defer unsubscribe()
	run := h.Start(t, spawn.Name, h.Request("go"))
	s := <-got
	if s.err != nil || s.hdr.ID != run.ChildID() {
		t.Fatalf("child session at subagent/start: %+v, %v", s.hdr, s.err)
	}
	if inserted := inprocesstest.OfType(s.log, sessionlog.EventInboxSpliced); len(inserted) == 0 {
		t.Errorf("prompt not yet accepted at subagent/start: %v", inprocesstest.Types(s.log))
	}
	inprocesstest.Settle(t, run)
}

func TestRun_R23_CancelAfterPublicationKeepsPartialOutput(t *testing.T) {
	t.Parallel()
	h, _ := newHarness(t, scripted.Step{Text: "partial answer", Pause: make(chan struct{})})
	run := h.Start(t, spawn.Name, h.Request("go"))
	h.WaitEvent(t, run.ChildID(), func(e store.Event) bool {
		return e.Type == sessionlog.EventAssistantChunk && strings.Contains(string(e.Data), "answer")
	})
	run.Cancel()
	run.Cancel() // idempotent
	res := inprocesstest.Settle(t, run)
	if res.StopReason != subagent.StopAborted || model.Text(res.Output) != "partial answer" {
		t.Errorf("result %+v, want aborted with the partial text", res)
	}
	end := inprocesstest.Decode[sessionlog.TurnEndData](t, inprocesstest.OfType(h.Log(t, run.ChildID()), sessionlog.EventTurnEnd)[0])
	if end.Reason.Kind != sessionlog.ReasonAborted || end.Reason.Cause == nil || end.Reason.Cause.Kind != sessionlog.CauseParent {
		t.Errorf("turn/end reason %+v, want aborted by parent", end.Reason)
	}
}

func TestRun_R25_CompletedStaysCompletedAfterCancel(t *testing.T) {
	t.Parallel()
	h, _ := newHarness(t, scripted.Step{Text: "done"})
	run := h.Start(t, spawn.Name, h.Request("go"))
	before := inprocesstest.Settle(t, run)
	run.Cancel()
	if err := run.Dispose(inprocesstest.Ctx(t)); err != nil {
		t.Fatal(err)
	}
	after, _ := run.Result()
	if before.StopReason != subagent.StopCompleted || after.StopReason != subagent.StopCompleted {
		t.Errorf("stop reasons %q then %q, want completed", before.StopReason, after.StopReason)
	}
}

func TestRun_R27_ModelFailureSettlesErrorWithDiagnostic(t *testing.T) {
	t.Parallel()
	long := "upstream said: " + strings.Repeat("é", 3000)
	h, _ := newHarness(t,
		scripted.Step{Err: errors.New("model route failed: 502 bad gateway")},
		scripted.Step{Text: "half", Err: errors.New(long)})
	for _, want := range []struct{ diag, output string }{{"model route failed: 502 bad gateway", ""}, {"", "half"}} {
		run := h.Start(t, spawn.Name, h.Request("go"))
		res := inprocesstest.Settle(t, run) // fails t when Result fails
		if res.StopReason != subagent.StopError || model.Text(res.Output) != want.output {
			t.Errorf("result %+v, want error with output %q", res, want.output)
		}
		if len(res.Diagnostic) > subagent.MaxDiagnosticBytes {
			t.Errorf("diagnostic of %d bytes", len(res.Diagnostic))
		}
		if want.diag != "" && res.Diagnostic != want.diag {
			t.Errorf("diagnostic %q, want %q", res.Diagnostic, want.diag)
		}
		if want.diag == "" && !strings.HasSuffix(res.Diagnostic, subagent.DiagnosticSuffix) {
			t.Errorf("long diagnostic not truncated: %d bytes", len(res.Diagnostic))
		}
	}
	ends := 0
	for _, e := range h.RunEvents(t) {
		if e.Type == subagent.EventEnd {
			ends++
			if e.StopReason != subagent.StopError {
				t.Errorf("end stop reason %q", e.StopReason)
			}
		}
	}
	if ends != 2 {
		t.Errorf("%d end events, want 2", ends)
	}
}

func TestRun_MaxTokensAndRefusal(t *testing.T) {
	t.Parallel()
	h, _ := newHarness(t,
		scripted.Step{Text: "cut", Finish: model.FinishMaxTokens},
		scripted.Step{Text: "no", Finish: model.FinishRefusal})
	for _, want := range []string{subagent.StopMaxTokens, subagent.StopRefusal} {
		if res := inprocesstest.Settle(t, h.Start(t, spawn.Name, h.Request("go"))); res.StopReason != want {
			t.Errorf("stop reason %q, want %q", res.StopReason, want)
		}
	}
}

func TestRun_R28_R29_DisposeIsIdempotentAndQuiescent(t *testing.T) {
	baseline := goroutines()
	h, _ := newHarness(t, scripted.Step{Gate: make(chan struct{}), Reached: make(chan struct{})})
	run, err := h.Service.Start(inprocesstest.Ctx(t), spawn.Name, h.Request("go"))
	if err != nil {
		t.Fatal(err)
	}
	h.WaitEvent(t, run.ChildID(), inprocesstest.Type(sessionlog.EventStepStart))
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range errs {
		wg.Go(func() { errs[i] = run.Dispose(inprocesstest.Ctx(t)) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatalf("dispose: %v", err)
		}
	}
	select {
	case <-run.Done():
	default:
		t.Fatal("dispose returned before the run settled")
	}
	if res, _ := run.Result(); res.StopReason != subagent.StopAborted {
		t.Errorf("stop reason %q, want aborted", res.StopReason)
	}
	log := h.Log(t, run.ChildID())
	ends := inprocesstest.OfType(log, sessionlog.EventTurnEnd)
	if len(ends) != 1 {
		t.Fatalf("%d turn/end events after dispose, want 1", len(ends))
	}
	if end := inprocesstest.Decode[sessionlog.TurnEndData](t, ends[0]); end.Reason.Cause == nil || end.Reason.Cause.Kind != sessionlog.CauseParent {
		t.Errorf("turn/end %+v, want aborted by parent", end.Reason)
	}
	if _, ok := h.Service.Run(t.Context(), run.ID()); ok {
		t.Error("service still holds the disposed run")
	}
	inprocesstest.WaitGoroutines(t, baseline)
	// R31: the disposed child stays listable as an inactive one-shot child.
	kids := h.Children(t, h.Parent.Session.ID)
	if len(kids) != 1 || kids[0].ID != run.ChildID() {
		t.Fatalf("children after dispose %+v", kids)
	}
	if id := sessionlog.IdentityDescriptor(log); id == nil || id.Mode != subagent.ModeOneShot {
		t.Errorf("identity after dispose %+v", id)
	}
	if err := run.Dispose(inprocesstest.Ctx(t)); err != nil {
		t.Errorf("second dispose: %v", err)
	}
	if n := len(inprocesstest.OfType(h.Log(t, run.ChildID()), sessionlog.EventTurnEnd)); n != 1 {
		t.Errorf("second dispose tore down again: %d turn/end events", n)
	}
}

func TestRun_SteerIsAdmittedIntoTheRunningTurn(t *testing.T) {
	t.Parallel()
	gate := make(chan struct{})
	h, m := newHarness(t, scripted.Step{Gate: gate, Text: "first"}, scripted.Step{Text: "steered"})
	run := h.Start(t, spawn.Name, h.Request("go"))
	h.WaitEvent(t, run.ChildID(), inprocesstest.Type(sessionlog.EventStepStart))
	type steered struct {
		id  string
		err error
	}
	done := make(chan steered, 1)
	go func() {
		id, err := run.Steer(inprocesstest.Ctx(t), inprocesstest.Text("also check the tests"))
		done <- steered{id, err}
	}()
	h.WaitEvent(t, run.ChildID(), func(e store.Event) bool {
		return e.Type == sessionlog.EventInboxSpliced && strings.Contains(string(e.Data), sessionlog.TargetNextStep)
	})
	close(gate)
	s := <-done
	if s.err != nil || s.id == "" {
		t.Fatalf("steer: %q %v", s.id, s.err)
	}
	if res := inprocesstest.Settle(t, run); res.StopReason != subagent.StopCompleted || model.Text(res.Output) != "steered" {
		t.Errorf("result %+v", res)
	}
	last := m.Requests()[1].Messages
	if model.Text(last[len(last)-1].Content) != "also check the tests" {
		t.Errorf("second step did not see the steer: %+v", last)
	}
	_, err := run.Steer(inprocesstest.Ctx(t), inprocesstest.Text("too late"))
	if subagent.ErrorCode(err) != subagent.ESteerRejected {
		t.Errorf("steer after settlement: %v, want STEER_REJECTED", err)
	}
}
