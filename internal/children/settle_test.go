package children

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/model/scripted"
	"github.com/subagentd/subagentd/internal/resident"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

func TestActivation_R69_EpochStopReason(t *testing.T) {
	t.Parallel()
	ev := func(typ, data string) store.Event { return store.Event{Type: typ, Data: json.RawMessage(data)} }
	turn := func(reason string) []store.Event {
		return []store.Event{
			ev(sessionlog.EventTurnStart, `{"turn":1}`),
			ev(sessionlog.EventStepStart, `{"turn":1,"step":1}`),
			ev(sessionlog.EventTurnEnd, `{"turn":1,"reason":{"kind":"`+reason+`"}}`),
		}
	}
	dropped := ev(sessionlog.EventInboxSpliced, `{"target":"next-turn","start":0,"removedCount":1,"inserted":[],"outcome":"canceled"}`)
	for _, tc := range []struct {
		name   string
		events []store.Event
		want   string
	}{
		{"completed", turn("completed"), subagent.StopCompleted},
		{"max-tokens", turn("max-tokens"), subagent.StopMaxTokens},
		{"aborted", turn("aborted"), subagent.StopAborted},
		{"interrupted (crash repair, R133)", turn("interrupted"), subagent.StopAborted},
		{"error", turn("error"), subagent.StopError},
		{"blocked is refusal", turn("blocked"), subagent.StopRefusal},
		{"unknown is error (R32)", turn("sideways"), subagent.StopError},
		{"no accounting turn", nil, subagent.StopCompleted},
		{"work dropped unrun after a clean turn", append(turn("completed"), dropped), subagent.StopAborted},
		{"work dropped unrun, no turn", []store.Event{dropped}, subagent.StopAborted},
		{"a failure outranks a later cancellation", append(turn("error"), dropped), subagent.StopError},
	} {
		if got := EpochStopReason(sessionlog.OutcomeOf(tc.events)); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}

// failingClose is a ChildAgent whose Close fails.
type failingClose struct{ subagent.ChildAgent }

func (f failingClose) Close(ctx context.Context) error {
	_ = f.ChildAgent.Close(ctx)
	return errors.New("release failed")
}

func TestActivation_R70_TeardownFailureIsErrorWithoutOutput(t *testing.T) {
	t.Parallel()
	e := newContEnv(t, scripted.New(scripted.Step{Text: "fine answer"}))
	e.mat.wrap = func(a subagent.ChildAgent) subagent.ChildAgent { return failingClose{a} }
	res := e.start(t, e.req(t, "go"))
	end := e.ended(t, res.TaskID)
	if end.StopReason != subagent.StopError || end.LastAssistantMessage != nil {
		t.Errorf("end %+v", end)
	}
	ns := e.notices.waitFor(t, "the notice", func(ns []notice) bool { return len(ns) == 1 })
	if got := model.Text(ns[0].content); !strings.Contains(got, "failed before it finished") || !strings.Contains(got, "no closing message") {
		t.Errorf("notice %q", got)
	}
}

func TestNotice_R67_R74_R77_RootParentGetsTheOutcomeThroughTheSink(t *testing.T) {
	t.Parallel()
	e := newContEnv(t, scripted.New(scripted.Step{Text: "the result"}))
	endsAtNotice := -1
	e.notices.onNotify = func(sessionlog.UserMessage) { endsAtNotice = countEnds(e.life.all()) }
	res := e.start(t, e.req(t, "go"))
	ns := e.notices.waitFor(t, "the notice", func(ns []notice) bool { return len(ns) == 1 })
	if endsAtNotice != 0 {
		t.Errorf("R67: %d end edges were dispatched before the notice", endsAtNotice)
	}
	summary := fmt.Sprintf("Background subagent %s finished and will do no further work unless you send it more.", res.ChildID)
	n := ns[0]
	if n.parentID != "p1" || len(n.content) != 3 || n.content[0].Text != summary || n.content[1].Text != "Its closing message:" ||
		n.content[2].Text != "the result" {
		t.Errorf("notice %+v", n)
	}
	if n.quiet || n.src != (sessionlog.Source{Kind: subagent.SourceSubagentSettled, Form: "notice", Summary: summary, SenderSessionID: res.ChildID, Label: "task"}) {
		t.Errorf("source %+v", n.src)
	}
	e.ended(t, res.TaskID)
}

func countEnds(evs []subagent.Event) int {
	n := 0
	for _, ev := range evs {
		if ev.Type == subagent.EventEnd {
			n++
		}
	}
	return n
}

func TestNotice_R77_SummaryBoundedTo120Characters(t *testing.T) {
	t.Parallel()
	_, src := settlementNotice("018f2b6c-6f1d-4d7e-9a63-3d2b1c0e9f4a", "researcher", subagent.StopCompleted, nil)
	if n := utf8.RuneCountInString(src.Summary); n > 120 || strings.HasSuffix(src.Summary, "…") {
		t.Errorf("a UUID's summary (%d characters) was cut: %q", n, src.Summary)
	}
	if src.Label != "researcher" || src.SenderSessionID != "018f2b6c-6f1d-4d7e-9a63-3d2b1c0e9f4a" {
		t.Errorf("source %+v does not name the child by id and label", src)
	}
	long := strings.Repeat("ü", 200)
	content, src := settlementNotice(long, "", "sideways", nil)
	if n := utf8.RuneCountInString(src.Summary); n != 120 || !strings.HasSuffix(src.Summary, "…") {
		t.Errorf("summary of %d characters: %q", n, src.Summary)
	}
	if !strings.Contains(content[0].Text, "ended abnormally (sideways) before it finished.") {
		t.Errorf("unknown reason sentence %q", content[0].Text)
	}
	for reason, want := range map[string]string{
		subagent.StopAborted:   "was stopped before it finished.",
		subagent.StopMaxTokens: "ran out of room before it finished.",
		subagent.StopRefusal:   "declined the task.",
		subagent.StopError:     "failed before it finished.",
	} {
		if content, _ := settlementNotice("c", "", reason, nil); content[0].Text != "Background subagent c "+want {
			t.Errorf("%s: %q", reason, content[0].Text)
		}
	}
}

func TestNotice_R79_FailedDeliveryDoesNotBlockSettlement(t *testing.T) {
	t.Parallel()
	e := newContEnv(t, scripted.New(scripted.Step{Text: "ok"}))
	e.notices.fail = errors.New("parent gone")
	res := e.start(t, e.req(t, "go"))
	if end := e.ended(t, res.TaskID); end.StopReason != subagent.StopCompleted {
		t.Errorf("end %+v", end)
	}
	e.settled(t, res.ChildID)
	if !strings.Contains(e.logs.String(), "settlement notice was not delivered") {
		t.Error("the failed notice was not logged")
	}
}

func TestNotice_R78_ContinuableParentIsWokenByItsChildsNotice(t *testing.T) {
	t.Parallel()
	e := newContEnv(t, scripted.Func(func(model.Request) scripted.Step { return scripted.Step{Text: "ok"} }))
	parent := e.start(t, e.req(t, "be a parent"))
	e.ended(t, parent.TaskID)
	e.settled(t, parent.ChildID)
	req := e.req(t, "be a child")
	req.Parent = e.parent(t, parent.ChildID)
	kid := e.start(t, req)
	e.ended(t, kid.TaskID)
	// The parent starts a new activation that reads the notice.
	evs := e.waitLog(t, parent.ChildID, "the notice turn", func(evs []store.Event) bool {
		return slices.Equal(turnEndKinds(t, evs), []string{sessionlog.ReasonCompleted, sessionlog.ReasonCompleted})
	})
	msgs := userMessages(t, evs)
	if len(msgs) != 2 || msgs[1].Source.Kind != subagent.SourceSubagentSettled || msgs[1].Source.SenderSessionID != kid.ChildID {
		t.Fatalf("parent messages %+v", msgs)
	}
	e.settled(t, parent.ChildID)
	// Both of the parent's epochs notified the root through the sink.
	e.notices.waitFor(t, "the parent's two notices", func(ns []notice) bool {
		n := 0
		for _, x := range ns {
			if x.parentID == "p1" && x.src.SenderSessionID == parent.ChildID {
				n++
			}
		}
		return n == 2
	})
	sess, _ := e.st.GetSession(t.Context(), kid.ChildID)
	if sess.DelegationDepth != 2 {
		t.Errorf("grandchild depth %d", sess.DelegationDepth)
	}
}

func TestRecover_R130_AcceptedMessageIsDeliveredAfterARestart(t *testing.T) {
	t.Parallel()
	first := newContEnv(t, scripted.New(scripted.Step{Text: "before"}))
	res := first.start(t, first.req(t, "one"))
	first.ended(t, res.TaskID)
	first.settled(t, res.ChildID)
	// The process accepted a followup and died before delivering it.
	row, err := newRow(res.ChildID, txt("accepted before the crash"), sessionlog.Source{Kind: subagent.SourceUser})
	if err != nil {
		t.Fatal(err)
	}
	if err := first.st.Enqueue(t.Context(), row); err != nil {
		t.Fatal(err)
	}

	second := newContEnvOver(t, first.st, scripted.New(scripted.Step{Text: "after"}, scripted.Step{Text: "later"}))
	if err := second.m.Recover(t.Context()); err != nil {
		t.Fatal(err)
	}
	starts := second.life.waitFor(t, "the recovery activation", func(evs []subagent.Event) bool { return len(evs) >= 1 })
	end := second.ended(t, starts[0].TaskID)
	if end.StopReason != subagent.StopCompleted || model.Text(end.LastAssistantMessage) != "after" {
		t.Errorf("recovered epoch %+v", end)
	}
	second.settled(t, res.ChildID)
	f, err := second.m.Followup(t.Context(), "p1", res.ChildID, txt("three"), sessionlog.Source{})
	if err != nil || f.Route != subagent.RouteStarted {
		t.Fatalf("followup after recovery: %+v, %v", f, err)
	}
	second.ended(t, f.TaskID)
	evs := second.log(t, res.ChildID)
	if got := userTexts(t, evs); !slices.Equal(got, []string{"one", "accepted before the crash", "three"}) {
		t.Errorf("user messages %v", got)
	}
	if n := countType(evs, sessionlog.EventDescriptor); n != 1 {
		t.Errorf("%d descriptors", n)
	}
}

func TestRecover_R133_ClaimedButUnacknowledgedIsNotRedelivered(t *testing.T) {
	t.Parallel()
	first := newContEnv(t, scripted.New(scripted.Step{Text: "ok"}))
	res := first.start(t, first.req(t, "one"))
	first.ended(t, res.TaskID)
	first.settled(t, res.ChildID)
	// Crash after the child logged the message (its turn still open) and
	// before the inbox row was acknowledged.
	row, _ := newRow(res.ChildID, txt("claimed"), sessionlog.Source{Kind: subagent.SourceUser})
	msg, _ := RowMessage(row)
	data, _ := json.Marshal(msg)
	if err := first.st.Enqueue(t.Context(), row); err != nil {
		t.Fatal(err)
	}
	if _, err := first.st.AppendEvents(t.Context(), res.ChildID,
		store.NewEvent{Type: sessionlog.EventTurnStart, Data: json.RawMessage(`{"turn":2}`)},
		store.NewEvent{Type: sessionlog.EventUserMessage, Data: data}); err != nil {
		t.Fatal(err)
	}
	second := newContEnvOver(t, first.st, scripted.New())
	if err := second.m.Recover(t.Context()); err != nil {
		t.Fatal(err)
	}
	if p, _ := second.st.Pending(t.Context(), res.ChildID); len(p) != 0 {
		t.Errorf("pending %+v", p)
	}
	if n := len(second.life.all()); n != 0 {
		t.Errorf("%d lifecycle events: nothing was left to deliver", n)
	}
	if got := userTexts(t, second.log(t, res.ChildID)); !slices.Equal(got, []string{"one", "claimed"}) {
		t.Errorf("user messages %v", got)
	}
}

func TestRecover_R132_MessageLeftInTheAgentsOwnInboxRunsOnce(t *testing.T) {
	t.Parallel()
	first := newContEnv(t, scripted.New(scripted.Step{Text: "ok"}))
	res := first.start(t, first.req(t, "one"))
	first.ended(t, res.TaskID)
	first.settled(t, res.ChildID)
	// Crash after the message reached the agent's log-sourced inbox, behind
	// an open turn, before it ran.
	row, _ := newRow(res.ChildID, txt("queued"), sessionlog.Source{Kind: subagent.SourceUser})
	msg, _ := RowMessage(row)
	splice, _ := json.Marshal(sessionlog.InboxSplicedData{Target: sessionlog.TargetNextTurn, Inserted: []sessionlog.UserMessage{msg}})
	if err := first.st.Enqueue(t.Context(), row); err != nil {
		t.Fatal(err)
	}
	if _, err := first.st.AppendEvents(t.Context(), res.ChildID,
		store.NewEvent{Type: sessionlog.EventInboxSpliced, Data: splice}); err != nil {
		t.Fatal(err)
	}
	second := newContEnvOver(t, first.st, scripted.New(scripted.Step{Text: "ran"}))
	if err := second.m.Recover(t.Context()); err != nil {
		t.Fatal(err)
	}
	starts := second.life.waitFor(t, "the recovery activation", func(evs []subagent.Event) bool { return len(evs) >= 1 })
	second.ended(t, starts[0].TaskID)
	second.settled(t, res.ChildID)
	if got := userTexts(t, second.log(t, res.ChildID)); !slices.Equal(got, []string{"one", "queued"}) {
		t.Errorf("user messages %v", got)
	}
}

func TestShutdown_R113_StopsAdmissionAndKeepsAcceptedMessages(t *testing.T) {
	t.Parallel()
	gate, reached := make(chan struct{}), make(chan struct{})
	e := newContEnv(t, gatedModel(gate, reached, "never"))
	res := e.start(t, e.req(t, "go"))
	<-reached
	out := e.followupAsync(t.Context(), res.ChildID, "in flight")
	e.waitLog(t, res.ChildID, "the steer", steersSubmitted(1))
	if err := e.m.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	if end := e.ended(t, res.TaskID); end.StopReason != subagent.StopAborted {
		t.Errorf("end %+v", end)
	}
	_, err := e.m.StartContinuable(t.Context(), e.req(t, "more"))
	wantCode(t, err, subagent.EDraining)
	_, err = e.m.Followup(t.Context(), "p1", res.ChildID, txt("more"), sessionlog.Source{})
	wantCode(t, err, subagent.EDraining)
	if o := await(t, out); subagent.ErrorCode(o.err) != subagent.EAborted {
		t.Errorf("waiting followup: %+v, %v", o.res, o.err)
	}

	next := newContEnvOver(t, e.st, scripted.New(scripted.Step{Text: "resumed"}))
	if err := next.m.Recover(t.Context()); err != nil {
		t.Fatal(err)
	}
	starts := next.life.waitFor(t, "the recovery activation", func(evs []subagent.Event) bool { return len(evs) >= 1 })
	next.ended(t, starts[0].TaskID)
	if got := userTexts(t, next.log(t, res.ChildID)); !slices.Equal(got, []string{"go", "in flight"}) {
		t.Errorf("user messages %v", got)
	}
}

// failingFollowup is a ChildAgent whose inbox refuses messages.
type failingFollowup struct{ subagent.ChildAgent }

func (f failingFollowup) FollowupMessage(context.Context, sessionlog.UserMessage) (string, error) {
	return "", errors.New("inbox write failed")
}

func TestActivation_R73_DeliveryFailureWithdrawsTheMessage(t *testing.T) {
	t.Parallel()
	e := newContEnv(t, scripted.New(scripted.Step{Text: "ok"}))
	e.mat.setWrap(func(a subagent.ChildAgent) subagent.ChildAgent { return failingFollowup{a} })
	req := e.req(t, "go")
	req.ChildID = "kid"
	if _, err := e.m.StartContinuable(t.Context(), req); err == nil {
		t.Fatal("start succeeded though the prompt was not delivered")
	}
	if p, _ := e.st.Pending(t.Context(), "kid"); len(p) != 0 {
		t.Errorf("undelivered prompt still pending: %+v", p)
	}
	if evs := e.life.all(); len(evs) != 2 || evs[1].StopReason != subagent.StopAborted {
		t.Errorf("lifecycle %+v", evs)
	}
	if n := len(e.notices.all()); n != 0 {
		t.Errorf("R75: %d notices", n)
	}

	e.mat.setWrap(nil)
	req.ChildID = "kid2"
	res := e.start(t, req)
	e.ended(t, res.TaskID)
	e.settled(t, res.ChildID)
	e.mat.setWrap(func(a subagent.ChildAgent) subagent.ChildAgent { return failingFollowup{a} })
	if _, err := e.m.Followup(t.Context(), "p1", res.ChildID, txt("again"), sessionlog.Source{}); err == nil {
		t.Fatal("followup succeeded though it was not delivered")
	}
	if p, _ := e.st.Pending(t.Context(), res.ChildID); len(p) != 0 {
		t.Errorf("undelivered followup still pending: %+v", p)
	}
}

// countingCancel counts Cancel calls.
type countingCancel struct {
	subagent.ChildAgent
	mu      *sync.Mutex
	cancels *int
}

func (c countingCancel) Cancel(cause string, keepInbox bool) {
	c.mu.Lock()
	*c.cancels++
	c.mu.Unlock()
	c.ChildAgent.Cancel(cause, keepInbox)
}

func TestInterrupt_R101_R104_OneCancelPerActivation(t *testing.T) {
	t.Parallel()
	gate, reached := make(chan struct{}), make(chan struct{})
	e := newContEnv(t, gatedModel(gate, reached, "never"))
	var mu sync.Mutex
	cancels := 0
	e.mat.setWrap(func(a subagent.ChildAgent) subagent.ChildAgent { return countingCancel{a, &mu, &cancels} })
	res := e.start(t, e.req(t, "go"))
	<-reached
	for range 3 {
		if err := e.m.Interrupt(t.Context(), "p1", res.ChildID); err != nil {
			t.Fatal(err)
		}
	}
	e.ended(t, res.TaskID)
	e.settled(t, res.ChildID)
	mu.Lock()
	defer mu.Unlock()
	if cancels != 1 {
		t.Errorf("%d cancels, want exactly one", cancels)
	}
}

// TestNotice_R78_QuietUnlessStartedToWake: a child started without
// WakeParent — a client's start that did not ask for notifyParent "wake" —
// notifies its root quietly, every activation of it (the header carries
// the choice to cold resumes), and parks its notice in a continuable
// parent without starting it; the parent's next activation reads it.
func TestNotice_R78_QuietUnlessStartedToWake(t *testing.T) {
	t.Parallel()
	e := newContEnv(t, scripted.Func(func(model.Request) scripted.Step { return scripted.Step{Text: "ok"} }))
	req := e.req(t, "quiet one")
	req.WakeParent = false
	kid := e.start(t, req)
	e.ended(t, kid.TaskID)
	e.settled(t, kid.ChildID)
	if f, err := e.m.Followup(t.Context(), "p1", kid.ChildID, txt("again"), sessionlog.Source{}); err != nil || f.Route != subagent.RouteStarted {
		t.Fatalf("followup: %+v, %v", f, err)
	}
	ns := e.notices.waitFor(t, "two notices", func(ns []notice) bool { return len(ns) == 2 })
	for _, n := range ns {
		if !n.quiet || n.src.Kind != subagent.SourceSubagentSettled || n.src.Label != "task" {
			t.Errorf("notice %+v, want a quiet settlement notice naming the label", n)
		}
	}

	parent := e.start(t, e.req(t, "be a parent"))
	e.ended(t, parent.TaskID)
	e.settled(t, parent.ChildID)
	req = e.req(t, "be a quiet child")
	req.Parent, req.WakeParent = e.parent(t, parent.ChildID), false
	grandchild := e.start(t, req)
	e.ended(t, grandchild.TaskID)
	e.settled(t, grandchild.ChildID)
	if e.m.liveActivation(resident.Key{Tenant: store.DefaultTenant, ID: parent.ChildID}) != nil {
		t.Error("a quiet notice started the continuable parent")
	}
	if rows, err := e.st.Pending(t.Context(), parent.ChildID); err != nil || len(rows) != 1 || !rows[0].Quiet {
		t.Fatalf("parent inbox %+v, %v: want the notice as one quiet row", rows, err)
	}
	if f, err := e.m.Followup(t.Context(), "p1", parent.ChildID, txt("next"), sessionlog.Source{}); err != nil || f.Route != subagent.RouteStarted {
		t.Fatalf("followup to the parent: %+v, %v", f, err)
	}
	// The parked notice runs first, as a turn of its own, then the followup.
	evs := e.waitLog(t, parent.ChildID, "the parent's next turns", func(evs []store.Event) bool { return len(turnEndKinds(t, evs)) == 3 })
	if got := userMessages(t, evs); len(got) != 3 || got[1].Source.Kind != subagent.SourceSubagentSettled || got[1].Source.SenderSessionID != grandchild.ChildID {
		t.Errorf("parent messages %+v, want the parked notice before the followup", got)
	}
}
