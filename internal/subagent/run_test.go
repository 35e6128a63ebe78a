package subagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/store"
)

// runProvider returns a provider whose every Start publishes the next run
// of runs.
func runProvider(name string, runs ...*fakeRun) *fakeProvider {
	var mu sync.Mutex
	return &fakeProvider{name: name, caps: allCaps, StartFn: func(context.Context, ResolvedRequest) (Run, error) {
		mu.Lock()
		defer mu.Unlock()
		r := runs[0]
		runs = runs[1:]
		return r, nil
	}}
}

// ends returns the recorded subagent/end events.
func ends(r *recorder) []Event {
	var out []Event
	for _, e := range r.all() {
		if e.Type == EventEnd {
			out = append(out, e)
		}
	}
	return out
}

func TestRun_R6_RemovalDoesNotRevokeRuns(t *testing.T) {
	t.Parallel()
	run := newFakeRun("c1", true)
	svc, b := setup(t, runProvider("spawn", run))
	h, err := svc.Start(t.Context(), "spawn", request())
	if err != nil {
		t.Fatal(err)
	}
	svc.Unregister(t.Context(), "spawn")
	if _, cancels := run.counts(); cancels != 0 {
		t.Fatal("unregistering the provider touched its run")
	}
	run.settle(Result{Output: []model.Block{model.TextBlock("done")}, StopReason: StopCompleted}, nil)
	waitDone(t, h)
	if got := ends(b.rec); len(got) != 1 || got[0].Provider != "spawn" || got[0].StopReason != StopCompleted {
		t.Errorf("end = %+v", got)
	}
	if err := h.Dispose(t.Context()); err != nil {
		t.Fatal(err)
	}
}

func TestRun_R14_EndExactlyOnceAfterStart(t *testing.T) {
	t.Parallel()
	// The result is settled before the provider even returns the run.
	run := newFakeRun("c1", true)
	run.settle(Result{StopReason: StopCompleted}, nil)
	svc, b := setup(t, runProvider("spawn", run))
	h, err := svc.Start(t.Context(), "spawn", request())
	if err != nil {
		t.Fatal(err)
	}
	waitDone(t, h)
	h.Cancel()
	if err := h.Dispose(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got, want := b.rec.types(), []string{EventStart, EventEnd}; !slices.Equal(got, want) {
		t.Errorf("events = %v, want start then one end", got)
	}
	var stored []string
	for _, e := range b.store.events() {
		stored = append(stored, e.Type)
	}
	if want := []string{EventProviderAdded, EventStart, EventEnd}; !slices.Equal(stored, want) {
		t.Errorf("lifecycle log = %v, want %v", stored, want)
	}
	all := b.rec.all()
	if start, end := all[0], all[1]; end.Seq <= start.Seq {
		t.Errorf("end seq %d not after start seq %d", end.Seq, start.Seq)
	}
}

func TestRun_R15_LastAssistantMessageOnlyWhenNonEmpty(t *testing.T) {
	t.Parallel()
	withOutput, empty := newFakeRun("a", true), newFakeRun("b", true)
	svc, b := setup(t, runProvider("spawn", withOutput, empty))
	h1, _ := svc.Start(t.Context(), "spawn", request())
	h2, _ := svc.Start(t.Context(), "spawn", request())
	out := []model.Block{model.TextBlock("answer")}
	withOutput.settle(Result{Output: out, StopReason: StopMaxTokens, Diagnostic: "ceiling"}, nil)
	empty.settle(Result{StopReason: StopCompleted, Diagnostic: "dropped on success"}, nil)
	waitDone(t, h1)
	waitDone(t, h2)

	payloads := map[string]string{}
	for _, e := range b.store.events() {
		if e.Type == EventEnd {
			payloads[e.RunID] = string(e.Payload)
		}
	}
	if want := fmt.Sprintf(`{"runId":%q,"provider":"spawn","id":"a","local":true,"parentSessionId":"p1","rootSessionId":"p1","stopReason":"max-tokens","lastAssistantMessage":[{"type":"text","text":"answer"}]}`, h1.ID()); payloads[h1.ID()] != want {
		t.Errorf("end payload\n got: %s\nwant: %s", payloads[h1.ID()], want)
	}
	if p := payloads[h2.ID()]; strings.Contains(p, "lastAssistantMessage") {
		t.Errorf("empty output still carries lastAssistantMessage: %s", p)
	}
	for _, e := range ends(b.rec) {
		if e.RunID == h2.ID() && e.LastAssistantMessage != nil {
			t.Errorf("dispatched end carries %v", e.LastAssistantMessage)
		}
	}
	// The recorded results.
	r1, _ := b.store.run(h1.ID())
	if r1.State != store.StateSettled || r1.StopReason != StopMaxTokens || string(r1.Output) != `[{"type":"text","text":"answer"}]` || r1.Diagnostic != "ceiling" {
		t.Errorf("run row = %+v", r1)
	}
	r2, _ := b.store.run(h2.ID())
	if string(r2.Output) != `[]` || r2.Diagnostic != "" {
		t.Errorf("run row of an empty completed result = %+v", r2)
	}
	res, err := h2.Result()
	if err != nil || res.Output == nil || len(res.Output) != 0 {
		t.Errorf("Result() = %+v, %v; want [] output", res, err)
	}
}

func TestRun_R16_ResultErrorEndsError(t *testing.T) {
	t.Parallel()
	run := newFakeRun("c1", false)
	svc, b := setup(t, runProvider("acp", run))
	h, _ := svc.Start(t.Context(), "acp", request())
	if _, err := h.Result(); !errors.Is(err, ErrNotSettled) {
		t.Errorf("Result before settlement: %v", err)
	}
	fault := errors.New("transport exploded")
	run.settle(Result{Output: []model.Block{model.TextBlock("partial")}}, fault)
	waitDone(t, h)
	end := ends(b.rec)[0]
	if end.StopReason != StopError || end.LastAssistantMessage != nil {
		t.Errorf("end = %+v, want error without message", end)
	}
	res, err := h.Result()
	if !errors.Is(err, fault) || res.StopReason != StopError {
		t.Errorf("Result() = %+v, %v; want the original error", res, err)
	}
	row, _ := b.store.run(h.ID())
	if row.StopReason != StopError || row.Diagnostic != "internal error" || string(row.Output) != "[]" {
		t.Errorf("run row = %+v", row)
	}
}

func TestRun_R17_RunIDsUniqueFieldsShared(t *testing.T) {
	t.Parallel()
	a, c := newFakeRun("same-child", true), newFakeRun("same-child", true)
	svc, b := setup(t, runProvider("spawn", a, c))
	h1, _ := svc.Start(t.Context(), "spawn", request())
	h2, _ := svc.Start(t.Context(), "spawn", request())
	if h1.ID() == h2.ID() {
		t.Fatal("two runs share a run id")
	}
	a.settle(Result{StopReason: StopCompleted}, nil)
	c.settle(Result{StopReason: StopCompleted}, nil)
	waitDone(t, h1)
	waitDone(t, h2)
	starts := map[string]Event{}
	for _, e := range b.rec.all() {
		switch e.Type {
		case EventStart:
			starts[e.RunID] = e
		case EventEnd:
			s := starts[e.RunID]
			if s.Provider != e.Provider || s.ID != e.ID || s.Local != e.Local || s.ParentID != e.ParentID {
				t.Errorf("start %+v and end %+v disagree", s, e)
			}
		}
	}
	if len(starts) != 2 {
		t.Errorf("%d distinct run ids", len(starts))
	}
}

func TestBus_R18_ParentScoping(t *testing.T) {
	t.Parallel()
	ra, rb := newFakeRun("a", true), newFakeRun("b", true)
	svc, _ := setup(t, runProvider("spawn", ra, rb))
	onlyA := newRecorder()
	svc.Subscribe("A", onlyA.listen)
	reqA, reqB := request(), request()
	reqA.Parent, reqB.Parent = parent("A"), parent("B")
	hA, _ := svc.Start(t.Context(), "spawn", reqA)
	hB, _ := svc.Start(t.Context(), "spawn", reqB)
	ra.settle(Result{StopReason: StopCompleted}, nil)
	rb.settle(Result{StopReason: StopCompleted}, nil)
	waitDone(t, hA)
	waitDone(t, hB)
	for _, e := range onlyA.all() {
		if e.RunID != hA.ID() || e.ParentID != "A" {
			t.Errorf("listener of A saw %+v", e)
		}
	}
	if got := onlyA.types(); !slices.Equal(got, []string{EventStart, EventEnd}) {
		t.Errorf("listener of A saw %v", got)
	}
}

// panicky is a panic value whose rendering panics.
type panicky struct{}

func (panicky) Error() string { panic("cannot render") }

func TestBus_R19_ListenerContainment(t *testing.T) {
	t.Parallel()
	run := newFakeRun("c1", true)
	svc, b := setup(t, runProvider("spawn", run))
	svc.Subscribe("", func(context.Context, Event) error { return errors.New("listener error") })
	svc.Subscribe("p1", func(context.Context, Event) error { panic(errors.New("listener panic")) })
	svc.Subscribe("", func(context.Context, Event) error { panic(panicky{}) })
	svc.Subscribe("p1", func(context.Context, Event) error { panic(42) })
	last := newRecorder()
	svc.Subscribe("p1", last.listen)

	h, err := svc.Start(t.Context(), "spawn", request())
	if err != nil {
		t.Fatalf("failing listeners affected the start: %v", err)
	}
	run.settle(Result{Output: []model.Block{model.TextBlock("ok")}, StopReason: StopCompleted}, nil)
	waitDone(t, h)
	if got := last.types(); !slices.Equal(got, []string{EventStart, EventEnd}) {
		t.Errorf("the last listener saw %v", got)
	}
	res, err := h.Result()
	if err != nil || res.StopReason != StopCompleted {
		t.Errorf("result = %+v, %v", res, err)
	}
	logs := b.logs.String()
	for _, want := range []string{"listener error", "listener panic", unrenderable, "42"} {
		if !strings.Contains(logs, want) {
			t.Errorf("log lacks %q:\n%s", want, logs)
		}
	}
	if err := h.Dispose(t.Context()); err != nil {
		t.Fatal(err)
	}
}

func TestRender_UnrenderableStringer(t *testing.T) {
	t.Parallel()
	if got := render(panicky{}); got != unrenderable {
		t.Errorf("render = %q", got)
	}
}

func TestRun_R23_CancelAfterPublication(t *testing.T) {
	t.Parallel()
	run := newFakeRun("c1", true)
	run.partial = []model.Block{model.TextBlock("half an answer")}
	svc, b := setup(t, runProvider("spawn", run))
	h, _ := svc.Start(t.Context(), "spawn", request())
	h.Cancel()
	waitDone(t, h)
	res, err := h.Result()
	if err != nil || res.StopReason != StopAborted || model.Text(res.Output) != "half an answer" {
		t.Errorf("result = %+v, %v; want aborted keeping the partial output", res, err)
	}
	if _, ok := svc.Run(t.Context(), h.ID()); !ok {
		t.Error("a cancelled run is no longer published")
	}
	if end := ends(b.rec); len(end) != 1 || end[0].StopReason != StopAborted {
		t.Errorf("end = %+v", end)
	}
}

func TestRun_R28_DisposeIdempotent(t *testing.T) {
	t.Parallel()
	run := newFakeRun("c1", true)
	svc, b := setup(t, runProvider("spawn", run))
	h, _ := svc.Start(t.Context(), "spawn", request())
	var wg sync.WaitGroup
	errs := make([]error, 5)
	for i := range errs {
		wg.Go(func() { errs[i] = h.Dispose(t.Context()) })
	}
	wg.Wait()
	if err := h.Dispose(t.Context()); err != nil {
		t.Error(err)
	}
	for _, err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if _, disposes := run.counts(); disposes != 1 {
		t.Errorf("provider Dispose called %d times, want 1", disposes)
	}
	if n := len(ends(b.rec)); n != 1 {
		t.Errorf("%d ends", n)
	}
}

func TestRun_R29_DisposeWaitsForSettlementAndRelease(t *testing.T) {
	t.Parallel()
	run := newFakeRun("c1", false)
	releasing, release := make(chan struct{}), make(chan struct{})
	run.releaseFn = func(context.Context) error {
		close(releasing)
		<-release
		return nil
	}
	svc, b := setup(t, runProvider("acp", run))
	h, _ := svc.Start(t.Context(), "acp", request())
	disposed := make(chan error, 1)
	go func() { disposed <- h.Dispose(t.Context()) }()
	<-releasing
	select {
	case err := <-disposed:
		t.Fatalf("Dispose returned %v before the provider released its resources", err)
	default:
	}
	if cancels, _ := run.counts(); cancels == 0 {
		t.Error("Dispose did not cancel")
	}
	close(release)
	if err := <-disposed; err != nil {
		t.Fatal(err)
	}
	if n := len(ends(b.rec)); n != 1 {
		t.Errorf("Dispose returned with %d ends dispatched", n)
	}
}

func TestRun_R29_DisposeOutlivesCallerContext(t *testing.T) {
	t.Parallel()
	run := newFakeRun("c1", false)
	release := make(chan struct{})
	run.releaseFn = func(context.Context) error { <-release; return nil }
	svc, _ := setup(t, runProvider("acp", run))
	h, _ := svc.Start(t.Context(), "acp", request())
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := h.Dispose(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Dispose(cancelled ctx) = %v", err)
	}
	close(release)
	if err := h.Dispose(t.Context()); err != nil {
		t.Fatalf("the background disposal failed: %v", err)
	}
}

func TestRun_R30_DisposeErrorSeparateFromResult(t *testing.T) {
	t.Parallel()
	run := newFakeRun("c1", false)
	fault, releaseErr := errors.New("result fault"), errors.New("kill failed")
	run.releaseFn = func(context.Context) error { return releaseErr }
	svc, _ := setup(t, runProvider("acp", run))
	h, _ := svc.Start(t.Context(), "acp", request())
	run.settle(Result{}, fault)
	err := h.Dispose(t.Context())
	if !errors.Is(err, releaseErr) || errors.Is(err, fault) {
		t.Errorf("Dispose = %v; want the release error only", err)
	}
	if _, err := h.Result(); !errors.Is(err, fault) {
		t.Errorf("Result err = %v; want the result fault", err)
	}
}

func TestRun_R31_DisposedRunLeavesLiveSetKeepsRecord(t *testing.T) {
	t.Parallel()
	run := newFakeRun("c1", true)
	svc, b := setup(t, runProvider("spawn", run))
	h, _ := svc.Start(t.Context(), "spawn", request())
	run.settle(Result{Output: []model.Block{model.TextBlock("x")}, StopReason: StopCompleted}, nil)
	if err := h.Dispose(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, ok := svc.Run(t.Context(), h.ID()); ok {
		t.Error("a disposed run is still live")
	}
	row, ok := b.store.run(h.ID())
	if !ok || row.State != store.StateDisposed || string(row.Output) != `[{"type":"text","text":"x"}]` {
		t.Errorf("run row = %+v", row)
	}
}

func TestStopReason_R32_UnknownIsFailure(t *testing.T) {
	t.Parallel()
	for reason, want := range map[string]bool{
		StopCompleted: true, StopAborted: false, StopError: false, StopMaxTokens: false,
		StopRefusal: false, "interrupted": false, "": false,
	} {
		if IsSuccess(reason) != want {
			t.Errorf("IsSuccess(%q) = %v", reason, !want)
		}
	}
}

func TestRun_MissingStopReasonBecomesError(t *testing.T) {
	t.Parallel()
	run := newFakeRun("c1", true)
	svc, _ := setup(t, runProvider("spawn", run))
	h, _ := svc.Start(t.Context(), "spawn", request())
	run.settle(Result{Diagnostic: strings.Repeat("d", 5000)}, nil)
	waitDone(t, h)
	res, _ := h.Result()
	if res.StopReason != StopError || len(res.Diagnostic) != MaxDiagnosticBytes {
		t.Errorf("result = %q, %d-byte diagnostic", res.StopReason, len(res.Diagnostic))
	}
}

func TestRun_Steer(t *testing.T) {
	t.Parallel()
	plain := newFakeRun("a", true)
	steerable := &steerRun{fakeRun: newFakeRun("b", true)}
	p := &fakeProvider{name: "spawn", caps: allCaps}
	runs := []Run{plain, steerable}
	p.StartFn = func(context.Context, ResolvedRequest) (Run, error) {
		r := runs[0]
		runs = runs[1:]
		return r, nil
	}
	svc, _ := setup(t, p)
	h1, _ := svc.Start(t.Context(), "spawn", request())
	h2, _ := svc.Start(t.Context(), "spawn", request())
	content := []model.Block{model.TextBlock("also check tests")}
	if _, err := h1.Steer(t.Context(), content); ErrorCode(err) != EUnsupportedCapability {
		t.Errorf("steer of a plain run: %v", err)
	}
	id, err := h2.Steer(t.Context(), content)
	if err != nil || id != "msg-1" || !reflect.DeepEqual(steerable.steered, [][]model.Block{content}) {
		t.Errorf("steer = %q, %v", id, err)
	}
	h2.Cancel()
	waitDone(t, h2)
	if _, err := h2.Steer(t.Context(), content); ErrorCode(err) != ESteerRejected {
		t.Errorf("steer after settlement: %v", err)
	}
}

func TestService_ShutdownSettlesEveryRun(t *testing.T) {
	t.Parallel()
	r1, r2 := newFakeRun("a", true), newFakeRun("b", false)
	svc, b := setup(t, runProvider("spawn", r1, r2))
	h1, _ := svc.Start(t.Context(), "spawn", request())
	h2, _ := svc.Start(t.Context(), "spawn", request())
	if err := svc.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, h := range []*RunHandle{h1, h2} {
		select {
		case <-h.Done():
		default:
			t.Errorf("run %s not settled after Shutdown", h.ID())
		}
	}
	if got := ends(b.rec); len(got) != 2 || got[0].StopReason != StopAborted || got[1].StopReason != StopAborted {
		t.Errorf("ends = %+v", got)
	}
	for _, r := range []*fakeRun{r1, r2} {
		if _, disposes := r.counts(); disposes != 1 {
			t.Errorf("run %s released %d times", r.childID, disposes)
		}
	}
	if err := h1.Dispose(t.Context()); err != nil {
		t.Errorf("Dispose after Shutdown: %v", err)
	}
}

func TestRun_EndAlreadyRecordedElsewhere(t *testing.T) {
	t.Parallel()
	run := newFakeRun("c1", false)
	svc, b := setup(t, runProvider("acp", run))
	h, _ := svc.Start(t.Context(), "acp", request())
	// Another replica closed the run after this one lost its lease.
	b.store.mu.Lock()
	row := b.store.runs[h.ID()]
	row.State = store.StateSettled
	b.store.runs[h.ID()] = row
	b.store.mu.Unlock()
	run.settle(Result{StopReason: StopCompleted}, nil)
	waitDone(t, h)
	if n := len(ends(b.rec)); n != 0 {
		t.Errorf("dispatched %d ends for a run another replica ended", n)
	}
}

func TestEventPayload_RoundTrip(t *testing.T) {
	t.Parallel()
	for _, e := range []Event{
		{Type: EventStart, RunID: "r", Provider: "spawn", ID: "c", Local: false, ParentID: "p", TaskID: "t"},
		{Type: EventEnd, RunID: "r", Provider: "spawn", ID: "c", Local: true, ParentID: "p", StopReason: "weird",
			LastAssistantMessage: []model.Block{model.TextBlock("x")}},
		{Type: EventProviderRemoved, Provider: "acp"},
	} {
		payload, err := EventPayload(e)
		if err != nil {
			t.Fatal(err)
		}
		got, err := ParseEvent(store.LifecycleEvent{ID: 7, Type: e.Type, Payload: payload})
		if err != nil {
			t.Fatal(err)
		}
		e.Seq = 7
		// Blocks come back with their raw JSON.
		for i := range got.LastAssistantMessage {
			got.LastAssistantMessage[i].Raw = nil
		}
		if !reflect.DeepEqual(got, e) {
			t.Errorf("round trip of %s:\n got %+v\nwant %+v\npayload %s", e.Type, got, e, payload)
		}
	}
	if p, _ := EventPayload(Event{Type: EventStart, Local: false}); !strings.Contains(string(p), `"local":false`) {
		t.Errorf("local=false must be explicit: %s", p)
	}
	if _, err := ParseEvent(store.LifecycleEvent{Payload: json.RawMessage(`[`)}); err == nil {
		t.Error("ParseEvent accepted a broken payload")
	}
}
