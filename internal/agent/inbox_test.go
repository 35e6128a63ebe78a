package agent

import (
	"context"
	"encoding/json"
	"errors"
	"iter"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/model/scripted"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// stallModel streams text, closes stalled, then blocks until ctx ends.
type stallModel struct {
	text    string
	stalled chan struct{}
}

func (m stallModel) Stream(ctx context.Context, _ model.Request) iter.Seq2[model.Chunk, error] {
	return func(yield func(model.Chunk, error) bool) {
		if !yield(model.Chunk{Kind: model.ChunkText, Text: m.text}, nil) {
			return
		}
		close(m.stalled) // the chunk is logged: yield returned
		<-ctx.Done()
		yield(model.Chunk{}, ctx.Err())
	}
}

// firstBlocks answers the first request with a step that blocks until its
// turn is cancelled (reached closes when it is called), and every later one
// with "ok".
func firstBlocks(reached chan struct{}) *scripted.Model {
	calls := 0 // only the driver goroutine calls the model
	return scripted.Func(func(model.Request) scripted.Step {
		calls++
		if calls == 1 {
			return scripted.Step{Text: "never", Gate: make(chan struct{}), Reached: reached}
		}
		return scripted.Step{Text: "ok"}
	})
}

func TestCancel_R101_PartialTextLoggedInterrupted(t *testing.T) {
	t.Parallel()
	stalled := make(chan struct{})
	a := newAgent(t, nil, Config{Model: stallModel{text: "half an ans", stalled: stalled}})
	followup(t, a, "hi")
	<-stalled
	a.Cancel(sessionlog.CauseParent, false)
	waitIdle(t, a)
	evs := a.Events()
	am := ofType[sessionlog.AssistantMessageData](t, evs, sessionlog.EventAssistantMessage)
	if len(am) != 1 || !am[0].Interrupted || model.Text(am[0].Message.Content) != "half an ans" {
		t.Errorf("assistant/message %+v", am)
	}
	got := types(evs)
	if want := []string{sessionlog.EventAssistantMessage, sessionlog.EventStepEnd, sessionlog.EventTurnEnd}; !slices.Equal(got[len(got)-3:], want) {
		t.Errorf("tail %v", got)
	}
	var raw json.RawMessage
	for _, e := range evs {
		if e.Type == sessionlog.EventTurnEnd {
			raw = e.Data
		}
	}
	if string(raw) != `{"turn":1,"reason":{"kind":"aborted","reason":{"kind":"parent"}}}` {
		t.Errorf("turn/end %s", raw)
	}
}

func TestCancel_ToolSeesCancellation(t *testing.T) {
	t.Parallel()
	started := make(chan struct{})
	global := NewRegistry()
	if err := global.Register(Tool{Name: "wait", Run: func(ctx context.Context, _ Call) ([]model.Block, error) {
		close(started)
		<-ctx.Done()
		return nil, ctx.Err()
	}}); err != nil {
		t.Fatal(err)
	}
	m := scripted.New(scripted.Step{ToolCalls: []model.ToolCall{{Name: "wait"}, {Name: "wait"}}})
	a := newAgent(t, nil, Config{Model: m, Global: global})
	followup(t, a, "hi")
	<-started
	a.Cancel(sessionlog.CauseUser, false)
	waitIdle(t, a)
	evs := a.Events()
	if n := len(ofType[sessionlog.ToolCallData](t, evs, sessionlog.EventToolCall)); n != 1 {
		t.Errorf("%d tool calls started after cancel, want only the first", n)
	}
	res := ofType[sessionlog.ToolResultData](t, evs, sessionlog.EventToolResult)
	if len(res) != 1 || !res[0].IsError {
		t.Errorf("results %+v", res)
	}
	te := ofType[sessionlog.TurnEndData](t, evs, sessionlog.EventTurnEnd)
	if len(te) != 1 || te[0].Reason.Kind != sessionlog.ReasonAborted || te[0].Reason.Cause.Kind != sessionlog.CauseUser {
		t.Errorf("turn/end %+v", te)
	}
	if len(m.Requests()) != 1 {
		t.Error("a step followed the cancelled one")
	}
}

func TestCancel_R105_BeforeFirstStepEndsTurnAborted(t *testing.T) {
	t.Parallel()
	a := newAgent(t, nil, Config{Model: firstBlocks(make(chan struct{}))})
	followup(t, a, "hi")
	a.Cancel(sessionlog.CauseUser, false)
	waitIdle(t, a)
	evs := a.Events()
	if ends := turnEnds(t, evs); !slices.Equal(ends, []string{sessionlog.ReasonAborted}) {
		t.Errorf("turn ends %v", ends)
	}
	if got := userTexts(t, evs); !slices.Equal(got, []string{"hi"}) {
		t.Errorf("claimed %v", got)
	}
}

func TestCancel_R102_R103_ParkedInboxRunsFirstOnNextFollowup(t *testing.T) {
	t.Parallel()
	reached := make(chan struct{})
	a := newAgent(t, nil, Config{Model: firstBlocks(reached)})
	followup(t, a, "a")
	<-reached
	followup(t, a, "b")
	followup(t, a, "c")
	a.Cancel(sessionlog.CauseUser, true)
	waitIdle(t, a)
	evs := a.Events()
	if ends := turnEnds(t, evs); !slices.Equal(ends, []string{sessionlog.ReasonAborted}) || a.Running() {
		t.Fatalf("after interrupt: turn ends %v running %v", ends, a.Running())
	}
	if got := userTexts(t, evs); !slices.Equal(got, []string{"a"}) {
		t.Errorf("parked messages ran: %v", got)
	}
	for _, d := range ofType[sessionlog.InboxSplicedData](t, evs, sessionlog.EventInboxSpliced) {
		if d.Outcome == sessionlog.OutcomeCanceled {
			t.Errorf("interrupt discarded queued work: %+v", d)
		}
	}

	followup(t, a, "d")
	waitIdle(t, a)
	evs = a.Events()
	if got := userTexts(t, evs); !slices.Equal(got, []string{"a", "b", "c", "d"}) {
		t.Errorf("user messages %v", got)
	}
	if ends := turnEnds(t, evs); !slices.Equal(ends, []string{sessionlog.ReasonAborted, sessionlog.ReasonCompleted, sessionlog.ReasonCompleted, sessionlog.ReasonCompleted}) {
		t.Errorf("turn ends %v", ends)
	}
}

func TestCancel_R103_WakeDuringUnwindIsLatched(t *testing.T) {
	t.Parallel()
	started, release := make(chan struct{}), make(chan struct{})
	global := NewRegistry()
	if err := global.Register(Tool{Name: "slow", Run: func(ctx context.Context, _ Call) ([]model.Block, error) {
		close(started)
		<-ctx.Done()
		<-release // still unwinding after the cancel
		return nil, ctx.Err()
	}}); err != nil {
		t.Fatal(err)
	}
	calls := 0
	m := scripted.Func(func(model.Request) scripted.Step {
		calls++
		if calls == 1 {
			return scripted.Step{ToolCalls: []model.ToolCall{{Name: "slow"}}}
		}
		return scripted.Step{Text: "ok"}
	})
	a := newAgent(t, nil, Config{Model: m, Global: global})
	followup(t, a, "a")
	<-started
	followup(t, a, "b")
	a.Cancel(sessionlog.CauseUser, true)
	followup(t, a, "c") // arrives while the aborted turn unwinds
	close(release)
	waitIdle(t, a)
	evs := a.Events()
	if got := userTexts(t, evs); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Errorf("user messages %v", got)
	}
	if ends := turnEnds(t, evs); !slices.Equal(ends, []string{sessionlog.ReasonAborted, sessionlog.ReasonCompleted, sessionlog.ReasonCompleted}) {
		t.Errorf("turn ends %v", ends)
	}
}

func TestCancel_WithoutKeepInboxDiscardsQueue(t *testing.T) {
	t.Parallel()
	reached := make(chan struct{})
	a := newAgent(t, nil, Config{Model: firstBlocks(reached)})
	followup(t, a, "a")
	<-reached
	followup(t, a, "b")
	followup(t, a, "c")
	a.Cancel(sessionlog.CauseUser, false)
	waitIdle(t, a)
	var canceled []sessionlog.InboxSplicedData
	for _, d := range ofType[sessionlog.InboxSplicedData](t, a.Events(), sessionlog.EventInboxSpliced) {
		if d.Outcome == sessionlog.OutcomeCanceled {
			canceled = append(canceled, d)
		}
	}
	if len(canceled) != 1 || canceled[0].Target != sessionlog.TargetNextTurn || canceled[0].Start != 0 || canceled[0].RemovedCount != 2 {
		t.Errorf("cancel splices %+v", canceled)
	}
	followup(t, a, "d")
	waitIdle(t, a)
	if got := userTexts(t, a.Events()); !slices.Equal(got, []string{"a", "d"}) {
		t.Errorf("user messages %v", got)
	}
}

// TestClose_NoGoroutineLeak is not parallel: it counts goroutines.
func TestClose_NoGoroutineLeak(t *testing.T) {
	before := runtime.NumGoroutine()
	st := newFakeStore()
	if err := st.CreateSession(context.Background(), store.Session{ID: "s"}); err != nil {
		t.Fatal(err)
	}
	reached := make(chan struct{})
	a, err := New(context.Background(), Config{ID: "s", Store: st, Logger: testLogger(t), Model: firstBlocks(reached)})
	if err != nil {
		t.Fatal(err)
	}
	followup(t, a, "a")
	followup(t, a, "b")
	<-reached
	steerErr := make(chan error)
	go func() {
		_, err := a.Steer(context.Background(), text("s"), userSrc)
		steerErr <- err
	}()
	st.waitEvent(t, "s", isSplice(sessionlog.TargetNextStep, 0, ""))
	if err := a.Close(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if err := <-steerErr; !errors.Is(err, subagent.ErrSteerRejected) {
		t.Errorf("pending steer: %v", err)
	}
	if err := a.Close(testCtx(t)); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := a.Followup(context.Background(), text("late"), userSrc); !errors.Is(err, ErrClosed) {
		t.Errorf("Followup after Close: %v", err)
	}
	ends := ofType[sessionlog.TurnEndData](t, a.Events(), sessionlog.EventTurnEnd)
	if len(ends) != 1 || ends[0].Reason.Cause == nil || ends[0].Reason.Cause.Kind != sessionlog.CauseDisposed {
		t.Errorf("turn ends %+v", ends)
	}
	// The driver has returned from Close's point of view; let the scheduler
	// retire it and the steer goroutine.
	for i := 0; i < 100_000 && runtime.NumGoroutine() > before; i++ {
		runtime.Gosched()
	}
	if after := runtime.NumGoroutine(); after > before {
		buf := make([]byte, 1<<16)
		t.Errorf("goroutines: %d before, %d after Close\n%s", before, after, buf[:runtime.Stack(buf, true)])
	}
}

func TestSteer_R96_AdmittedIntoOneMoreStep(t *testing.T) {
	t.Parallel()
	st := newFakeStore()
	gate, reached := make(chan struct{}), make(chan struct{})
	m := scripted.New(scripted.Step{Text: "first", Gate: gate, Reached: reached}, scripted.Step{Text: "second"})
	a := newAgent(t, st, Config{Model: m})
	followup(t, a, "go")
	<-reached
	type result struct {
		id  string
		err error
	}
	done := make(chan result)
	go func() {
		id, err := a.Steer(context.Background(), text("also this"), sessionlog.Source{Kind: "coordinator", Form: "relay"})
		done <- result{id, err}
	}()
	st.waitEvent(t, "s", isSplice(sessionlog.TargetNextStep, 0, ""))
	close(gate)
	r := <-done
	if r.err != nil || r.id == "" {
		t.Fatalf("Steer: %q, %v", r.id, r.err)
	}
	// Admission means the message is logged and its step started.
	evs := a.Events()
	i := slices.IndexFunc(evs, func(e store.Event) bool {
		var m sessionlog.UserMessage
		return e.Type == sessionlog.EventUserMessage && json.Unmarshal(e.Data, &m) == nil && m.ID == r.id
	})
	if i < 0 || !slices.ContainsFunc(evs[i:], func(e store.Event) bool { return e.Type == sessionlog.EventStepStart }) {
		t.Fatalf("steer message not admitted into a started step: %v", types(evs))
	}
	if !isSplice(sessionlog.TargetNextStep, 1, "")(evs[i-1]) {
		t.Errorf("event before the steer message: %s %s", evs[i-1].Type, evs[i-1].Data)
	}
	waitIdle(t, a)
	evs = a.Events()
	steps := ofType[sessionlog.StepData](t, evs, sessionlog.EventStepStart)
	if len(steps) != 2 || steps[1] != (sessionlog.StepData{Turn: 1, Step: 2}) {
		t.Errorf("steps %+v", steps)
	}
	if ends := turnEnds(t, evs); !slices.Equal(ends, []string{sessionlog.ReasonCompleted}) {
		t.Errorf("turn ends %v", ends)
	}
	req := m.Requests()[1]
	if last := req.Messages[len(req.Messages)-1]; last.Role != model.RoleUser || model.Text(last.Content) != "also this" {
		t.Errorf("second request ends with %+v", last)
	}
}

func TestSteer_R96_Rejections(t *testing.T) {
	t.Parallel()
	t.Run("idle", func(t *testing.T) {
		t.Parallel()
		a := newAgent(t, nil, Config{Model: scripted.New()})
		if _, err := a.Steer(context.Background(), text("x"), userSrc); !errors.Is(err, subagent.ErrSteerRejected) {
			t.Errorf("err %v", err)
		}
		if n := len(a.Events()); n != 0 {
			t.Errorf("%d events written", n)
		}
	})
	t.Run("cancelled while pending", func(t *testing.T) {
		t.Parallel()
		st := newFakeStore()
		reached := make(chan struct{})
		a := newAgent(t, st, Config{Model: firstBlocks(reached)})
		followup(t, a, "go")
		<-reached
		errc := make(chan error)
		go func() {
			_, err := a.Steer(context.Background(), text("x"), userSrc)
			errc <- err
		}()
		st.waitEvent(t, "s", isSplice(sessionlog.TargetNextStep, 0, ""))
		a.Cancel(sessionlog.CauseUser, true)
		if err := <-errc; !errors.Is(err, subagent.ErrSteerRejected) {
			t.Errorf("err %v", err)
		}
		st.waitEvent(t, "s", isSplice(sessionlog.TargetNextStep, 1, sessionlog.OutcomeCanceled))
		if _, err := a.Steer(context.Background(), text("y"), userSrc); !errors.Is(err, subagent.ErrSteerRejected) {
			t.Errorf("steer into a cancelled turn: %v", err)
		}
	})
	t.Run("turn ends first", func(t *testing.T) {
		t.Parallel()
		st := newFakeStore()
		gate, reached := make(chan struct{}), make(chan struct{})
		m := scripted.New(scripted.Step{Text: "cut", Gate: gate, Reached: reached, Finish: model.FinishMaxTokens})
		a := newAgent(t, st, Config{Model: m})
		followup(t, a, "go")
		<-reached
		errc := make(chan error)
		go func() {
			_, err := a.Steer(context.Background(), text("x"), userSrc)
			errc <- err
		}()
		st.waitEvent(t, "s", isSplice(sessionlog.TargetNextStep, 0, ""))
		close(gate)
		if err := <-errc; !errors.Is(err, subagent.ErrSteerRejected) {
			t.Errorf("err %v", err)
		}
		waitIdle(t, a)
		if ends := turnEnds(t, a.Events()); !slices.Equal(ends, []string{sessionlog.ReasonMaxTokens}) || len(m.Requests()) != 1 {
			t.Errorf("turn ends %v after %d requests", ends, len(m.Requests()))
		}
	})
	t.Run("structured output recorded", func(t *testing.T) {
		t.Parallel()
		gate, reached := make(chan struct{}), make(chan struct{})
		m := scripted.New(
			scripted.Step{ToolCalls: []model.ToolCall{captureCall(`{"answer":"a"}`)}},
			scripted.Step{Text: "later", Gate: gate, Reached: reached},
		)
		a := newAgent(t, nil, Config{Model: m, OutputSchema: answerSchema})
		followup(t, a, "one")
		waitIdle(t, a)
		followup(t, a, "two")
		<-reached
		if _, err := a.Steer(context.Background(), text("x"), userSrc); !errors.Is(err, subagent.ErrSteerRejected) ||
			!strings.Contains(err.Error(), "structured output already recorded") {
			t.Errorf("err %v", err)
		}
		close(gate)
	})
}

func TestSteer_CallerCancelWithdrawsMessage(t *testing.T) {
	t.Parallel()
	st := newFakeStore()
	gate, reached := make(chan struct{}), make(chan struct{})
	m := scripted.New(scripted.Step{Text: "only", Gate: gate, Reached: reached}, scripted.Step{Text: "unused"})
	a := newAgent(t, st, Config{Model: m})
	followup(t, a, "go")
	<-reached
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error)
	go func() {
		_, err := a.Steer(ctx, text("x"), userSrc)
		errc <- err
	}()
	st.waitEvent(t, "s", isSplice(sessionlog.TargetNextStep, 0, ""))
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("err %v", err)
	}
	close(gate)
	waitIdle(t, a)
	evs := a.Events()
	if !slices.ContainsFunc(evs, isSplice(sessionlog.TargetNextStep, 1, sessionlog.OutcomeCanceled)) {
		t.Errorf("no withdraw splice: %v", types(evs))
	}
	if got := userTexts(t, evs); !slices.Equal(got, []string{"go"}) || len(m.Requests()) != 1 {
		t.Errorf("user messages %v, %d requests", got, len(m.Requests()))
	}
}
