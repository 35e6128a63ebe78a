package children

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/model/scripted"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

func TestFollowup_R96_SteeredIntoTheNextModelRequest(t *testing.T) {
	t.Parallel()
	gate, reached := make(chan struct{}), make(chan struct{})
	mdl := scripted.New(scripted.Step{Text: "working", Gate: gate, Reached: reached}, scripted.Step{Text: "done"})
	e := newContEnv(t, mdl)
	res := e.start(t, e.req(t, "go"))
	<-reached
	out := e.followupAsync(t.Context(), res.ChildID, "also this")
	e.waitLog(t, res.ChildID, "the steer", steersSubmitted(1))
	close(gate)
	o := await(t, out)
	if o.err != nil || o.res.Route != subagent.RouteSteered || o.res.TaskID != res.TaskID || o.res.MessageID == "" {
		t.Fatalf("followup %+v, %v", o.res, o.err)
	}
	end := e.ended(t, res.TaskID)
	if end.StopReason != subagent.StopCompleted || model.Text(end.LastAssistantMessage) != "done" {
		t.Errorf("end %+v", end)
	}
	reqs := mdl.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d model requests", len(reqs))
	}
	last := reqs[1].Messages[len(reqs[1].Messages)-1]
	if last.Role != model.RoleUser || model.Text(last.Content) != "also this" {
		t.Errorf("the very next request ends with %+v", last)
	}
	if p, _ := e.st.Pending(t.Context(), res.ChildID); len(p) != 0 {
		t.Errorf("admitted followup still pending: %+v", p)
	}
}

func TestFollowup_R82_R88_StartedAfterSettlementKeepsTheLogAndOneDescriptor(t *testing.T) {
	t.Parallel()
	mdl := scripted.New(scripted.Step{Text: "first answer"}, scripted.Step{Text: "second answer"}, scripted.Step{Text: "third answer"})
	e := newContEnv(t, mdl)
	req := e.req(t, "one")
	persona := "Persona X"
	req.Persona = &persona
	res := e.start(t, req)
	e.ended(t, res.TaskID)
	e.settled(t, res.ChildID)
	before := e.log(t, res.ChildID)

	tasks := []string{res.TaskID}
	for i, text := range []string{"two", "three"} {
		f, err := e.m.Followup(t.Context(), "p1", res.ChildID, txt(text), sessionlog.Source{Kind: "coordinator", Form: "relay", SenderSessionID: "p1"})
		if err != nil || f.Route != subagent.RouteStarted || slices.Contains(tasks, f.TaskID) {
			t.Fatalf("followup %q: %+v, %v", text, f, err)
		}
		tasks = append(tasks, f.TaskID)
		end := e.ended(t, f.TaskID)
		// docs/seam.md §12: the resumed epoch reports only its own output.
		if want := []string{"second answer", "third answer"}[i]; end.StopReason != subagent.StopCompleted || model.Text(end.LastAssistantMessage) != want {
			t.Errorf("epoch %d end %+v, want output %q", i+2, end, want)
		}
		e.settled(t, res.ChildID)
	}
	after := e.log(t, res.ChildID)
	for i := range before {
		if after[i].Type != before[i].Type || string(after[i].Data) != string(before[i].Data) {
			t.Fatalf("event %d changed: %s %s -> %s %s", i, before[i].Type, before[i].Data, after[i].Type, after[i].Data)
		}
	}
	if n := countType(after, sessionlog.EventDescriptor); n != 1 {
		t.Errorf("%d descriptors, want exactly 1 (R88)", n)
	}
	if n := countType(after, sessionlog.EventApprovalPolicy); n != 1 {
		t.Errorf("%d policy events, want 1 (R88)", n)
	}
	if got := userTexts(t, after); !slices.Equal(got, []string{"one", "two", "three"}) {
		t.Errorf("user messages %v", got)
	}
	msgs := userMessages(t, after)
	if msgs[1].Source.Kind != "coordinator" || msgs[1].Source.SenderSessionID != "p1" {
		t.Errorf("source not kept: %+v", msgs[1].Source)
	}
	// The resumed child saw its whole history.
	reqs := mdl.Requests()
	if got := len(reqs[2].Messages); got != 5 {
		t.Errorf("third request has %d messages, want 5 (two earlier exchanges and the new prompt)", got)
	}
	// R88: resume reconstructs only from the descriptor.
	mr := e.mat.requests()
	if len(mr) != 3 {
		t.Fatalf("%d materializations", len(mr))
	}
	for _, r := range mr[1:] {
		if r.Create != nil || r.Options != (subagent.AgentOptions{Provider: "route-a", Model: "model-a"}) ||
			r.Descriptor.Persona == nil || *r.Descriptor.Persona != persona || r.Session.ID != res.ChildID {
			t.Errorf("resume request %+v", r)
		}
	}
	// R71: one start/end pair per epoch, new run ids, provider from the descriptor.
	evs := e.life.all()
	runs := map[string]int{}
	for _, ev := range evs {
		runs[ev.RunID]++
		if ev.Provider != "spawn" || !ev.Local || ev.ID != res.ChildID {
			t.Errorf("edge %+v", ev)
		}
	}
	if len(evs) != 6 || len(runs) != 3 {
		t.Errorf("%d edges over %d runs", len(evs), len(runs))
	}
}

func TestFollowup_R7_ColdResumeAfterTheProviderWasRemoved(t *testing.T) {
	t.Parallel()
	e := newContEnv(t, scripted.New(scripted.Step{Text: "a"}, scripted.Step{Text: "b"}))
	res := e.start(t, e.req(t, "one"))
	e.ended(t, res.TaskID)
	e.settled(t, res.ChildID)
	e.svc.Unregister(t.Context(), "spawn")
	f, err := e.m.Followup(t.Context(), "p1", res.ChildID, txt("two"), sessionlog.Source{})
	if err != nil || f.Route != subagent.RouteStarted {
		t.Fatalf("followup %+v, %v", f, err)
	}
	if end := e.ended(t, f.TaskID); end.Provider != "spawn" {
		t.Errorf("end provider %q", end.Provider)
	}
}

func TestFollowup_R90_SteerThatLosesTheRaceColdResumes(t *testing.T) {
	t.Parallel()
	gate, reached := make(chan struct{}), make(chan struct{})
	// The first turn fails before admitting the steer: the steer is
	// rejected, and must still be delivered, by a new activation.
	mdl := scripted.New(scripted.Step{Gate: gate, Reached: reached, Err: errors.New("model down")}, scripted.Step{Text: "recovered"})
	e := newContEnv(t, mdl)
	res := e.start(t, e.req(t, "go"))
	<-reached
	out := e.followupAsync(t.Context(), res.ChildID, "late")
	e.waitLog(t, res.ChildID, "the steer", steersSubmitted(1))
	close(gate)
	o := await(t, out)
	if o.err != nil || o.res.Route != subagent.RouteStarted || o.res.TaskID == res.TaskID {
		t.Fatalf("followup %+v, %v", o.res, o.err)
	}
	if end := e.ended(t, res.TaskID); end.StopReason != subagent.StopError {
		t.Errorf("first epoch %+v", end)
	}
	if end := e.ended(t, o.res.TaskID); end.StopReason != subagent.StopCompleted || model.Text(end.LastAssistantMessage) != "recovered" {
		t.Errorf("second epoch %+v", end)
	}
	evs := e.log(t, res.ChildID)
	msgs := userMessages(t, evs)
	if len(msgs) != 2 || model.Text(msgs[1].Content) != "late" || msgs[1].ID != o.res.MessageID {
		t.Errorf("user messages %+v", msgs)
	}
	if p, _ := e.st.Pending(t.Context(), res.ChildID); len(p) != 0 {
		t.Errorf("pending %+v", p)
	}
}

// TestFollowup_FiftyConcurrentWhileRunning: every followup is steered into
// the running turn, admitted in acceptance order, none twice.
func TestFollowup_FiftyConcurrentWhileRunning(t *testing.T) {
	t.Parallel()
	gate, reached := make(chan struct{}), make(chan struct{})
	mdl := scripted.New(scripted.Step{Text: "working", Gate: gate, Reached: reached}, scripted.Step{Text: "done"})
	e := newContEnv(t, mdl)
	res := e.start(t, e.req(t, "go"))
	<-reached
	outs := make([]<-chan followupOutcome, 50)
	for i := range outs {
		outs[i] = e.followupAsync(t.Context(), res.ChildID, fmt.Sprintf("f%02d", i))
	}
	e.waitLog(t, res.ChildID, "50 steers", steersSubmitted(50))
	close(gate)
	for _, out := range outs {
		if o := await(t, out); o.err != nil || o.res.Route != subagent.RouteSteered || o.res.TaskID != res.TaskID {
			t.Errorf("followup %+v, %v", o.res, o.err)
		}
	}
	e.ended(t, res.TaskID)
	checkDelivery(t, e, res, 50)
	if n := len(mdl.Requests()); n != 2 {
		t.Errorf("%d model requests: all 50 should join one step", n)
	}
}

// TestFollowup_FiftyConcurrentAcrossSettlements: followups race with the
// child's turns ending, so they are steered or start new activations;
// each is still delivered exactly once, in acceptance order.
func TestFollowup_R65_R72_R90_FiftyConcurrentAcrossSettlements(t *testing.T) {
	t.Parallel()
	e := newContEnv(t, scripted.Func(func(model.Request) scripted.Step { return scripted.Step{Text: "ok"} }))
	res := e.start(t, e.req(t, "go"))
	var wg sync.WaitGroup
	routes := make([]subagent.Route, 50)
	for i := range 50 {
		wg.Go(func() {
			f, err := e.m.Followup(t.Context(), "p1", res.ChildID, txt(fmt.Sprintf("f%02d", i)), sessionlog.Source{})
			if err != nil {
				t.Errorf("followup %d: %v", i, err)
			}
			routes[i] = f.Route
		})
	}
	wg.Wait()
	e.settled(t, res.ChildID)
	checkDelivery(t, e, res, 50)
	t.Logf("routes: %v", routes)
}

// checkDelivery asserts that the child logged the prompt and n followups,
// each once, in the order the inbox accepted them, and nothing is pending.
func checkDelivery(t *testing.T, e *contEnv, res ContinuableStarted, n int) {
	t.Helper()
	var ids []string
	for _, m := range userMessages(t, e.log(t, res.ChildID)) {
		ids = append(ids, m.ID)
	}
	accepted := e.st.accepted()
	if len(accepted) != n+1 || !slices.Equal(ids, accepted) {
		t.Errorf("logged %d messages %v,\naccepted %d %v", len(ids), ids, len(accepted), accepted)
	}
	if p, _ := e.st.Pending(t.Context(), res.ChildID); len(p) != 0 {
		t.Errorf("%d still pending", len(p))
	}
}

func TestFollowup_BadInputAppendsNothing(t *testing.T) {
	t.Parallel()
	e := newContEnv(t, scripted.New(scripted.Step{Text: "ok"}))
	res := e.start(t, e.req(t, "go"))
	e.ended(t, res.TaskID)
	e.settled(t, res.ChildID)
	// A one-shot child (descriptor mode one-shot), a child whose own suffix
	// has no descriptor (a fork seed holds an ancestor's), one with a
	// corrupt descriptor, one of an unknown version.
	for _, c := range []struct {
		id, mode string
		seedLen  int
		events   []string
	}{
		{"oneshot", subagent.ModeOneShot, 0, []string{`{"version":2,"mode":"one-shot","provider":"spawn"}`}},
		{"oneshot-unclassified", "", 0, []string{`{"version":2,"mode":"one-shot","provider":"spawn"}`}},
		{"seeded", subagent.ModeContinuable, 1, []string{`{"version":2,"mode":"continuable","provider":"fork","label":"x"}`}},
		{"corrupt", subagent.ModeContinuable, 0, []string{`{"version":2,"mode":"continuable","provider":"spawn"}`}},
		{"future", subagent.ModeContinuable, 0, []string{`{"version":3,"mode":"continuable","provider":"spawn","label":"x"}`}},
		{"bare", subagent.ModeContinuable, 0, nil},
	} {
		if err := e.st.CreateSession(t.Context(), store.Session{ID: c.id, ParentID: "p1", Origin: OriginSubagent, Mode: c.mode, SeedLength: c.seedLen}); err != nil {
			t.Fatal(err)
		}
		for _, d := range c.events {
			if _, err := e.st.AppendEvents(t.Context(), c.id, store.NewEvent{Type: sessionlog.EventDescriptor, Data: json.RawMessage(d)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := e.st.CreateSession(t.Context(), store.Session{ID: "other-parent"}); err != nil {
		t.Fatal(err)
	}
	logLen := func(id string) int {
		evs, err := e.st.Events(t.Context(), id, -1, 1000)
		if err != nil {
			return -1
		}
		return len(evs)
	}
	lengths := map[string]int{}
	for _, id := range []string{res.ChildID, "p1", "other-parent", "oneshot", "seeded", "corrupt", "future", "bare"} {
		lengths[id] = logLen(id)
	}
	edges := len(e.life.all())
	for _, tc := range []struct {
		name, parent, child string
		src                 sessionlog.Source
		code                string
	}{
		{"unknown child", "p1", "nobody", sessionlog.Source{}, subagent.ESessionNotFound},
		{"wrong parent (R84)", "other-parent", res.ChildID, sessionlog.Source{}, subagent.EForbidden},
		{"source grants nothing (R84)", "other-parent", res.ChildID, sessionlog.Source{Kind: "coordinator", SenderSessionID: "p1"}, subagent.EForbidden},
		{"root session", "p1", "p1", sessionlog.Source{}, subagent.EForbidden},
		{"one-shot child (R87)", "p1", "oneshot", sessionlog.Source{}, subagent.ENotResumable},
		{"one-shot descriptor (R87)", "p1", "oneshot-unclassified", sessionlog.Source{}, subagent.ENotResumable},
		{"ancestor descriptor only in the seed (R87)", "p1", "seeded", sessionlog.Source{}, subagent.ENotResumable},
		{"corrupt descriptor (R87, wrapped)", "p1", "corrupt", sessionlog.Source{}, subagent.ENotResumable},
		{"unsupported descriptor version (R87)", "p1", "future", sessionlog.Source{}, subagent.ENotResumable},
		{"no descriptor (R87)", "p1", "bare", sessionlog.Source{}, subagent.ENotResumable},
		{"no parent", "", res.ChildID, sessionlog.Source{}, subagent.EInvalidRequest},
		{"no content", "p1", res.ChildID, sessionlog.Source{}, subagent.EInvalidRequest},
		{"aborted before acceptance (R91)", "p1", res.ChildID, sessionlog.Source{}, subagent.EAborted},
	} {
		ctx, content := t.Context(), txt("hi")
		switch tc.name {
		case "no content":
			content = nil
		case "aborted before acceptance (R91)":
			cctx, cancel := context.WithCancel(ctx)
			cancel()
			ctx = cctx
		}
		_, err := e.m.Followup(ctx, tc.parent, tc.child, content, tc.src)
		if subagent.ErrorCode(err) != tc.code {
			t.Errorf("%s: %v, want %s", tc.name, err, tc.code)
		}
	}
	for id, n := range lengths {
		if got := logLen(id); got != n {
			t.Errorf("log of %s grew from %d to %d", id, n, got)
		}
	}
	if got := len(e.st.accepted()); got != 1 {
		t.Errorf("%d messages accepted, want only the first prompt", got)
	}
	if got := len(e.life.all()); got != edges {
		t.Errorf("lifecycle grew from %d to %d", edges, got)
	}
}

func TestFollowup_R89_ResumeFailuresWithdrawTheMessage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		err  error
		code string
	}{
		{"a service error propagates unchanged", subagent.Errorf(subagent.EInvalidRequest, "model route gone"), subagent.EInvalidRequest},
		{"any other error is NOT_RESUMABLE", errors.New("disk on fire"), subagent.ENotResumable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newContEnv(t, scripted.New(scripted.Step{Text: "ok"}))
			res := e.start(t, e.req(t, "go"))
			e.ended(t, res.TaskID)
			e.settled(t, res.ChildID)
			e.mat.mu.Lock()
			e.mat.err = tc.err
			e.mat.mu.Unlock()
			_, err := e.m.Followup(t.Context(), "p1", res.ChildID, txt("again"), sessionlog.Source{})
			wantCode(t, err, tc.code)
			if p, _ := e.st.Pending(t.Context(), res.ChildID); len(p) != 0 {
				t.Errorf("undelivered message still pending: %+v", p)
			}
			if n := len(e.life.all()); n != 2 {
				t.Errorf("%d lifecycle events", n)
			}
		})
	}
}

func TestFollowup_R81_DrainingRejects(t *testing.T) {
	t.Parallel()
	e := newContEnv(t, scripted.New(scripted.Step{Text: "ok"}))
	res := e.start(t, e.req(t, "go"))
	e.ended(t, res.TaskID)
	if err := e.svc.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	_, err := e.m.Followup(t.Context(), "p1", res.ChildID, txt("x"), sessionlog.Source{})
	wantCode(t, err, subagent.EDraining)
}

func TestInterrupt_R101_R103_ParkedMessagesRunFirstThenTheNewOne(t *testing.T) {
	t.Parallel()
	gate, reached := make(chan struct{}), make(chan struct{})
	e := newContEnv(t, gatedModel(gate, reached, "never"))
	res := e.start(t, e.req(t, "go"))
	<-reached
	out1 := e.followupAsync(t.Context(), res.ChildID, "parked 1")
	e.waitLog(t, res.ChildID, "the first steer", steersSubmitted(1))
	out2 := e.followupAsync(t.Context(), res.ChildID, "parked 2")
	e.waitLog(t, res.ChildID, "the second steer", steersSubmitted(2))
	if err := e.m.Interrupt(t.Context(), "p1", res.ChildID); err != nil {
		t.Fatal(err)
	}
	end := e.ended(t, res.TaskID)
	if end.StopReason != subagent.StopAborted {
		t.Errorf("interrupted epoch %+v", end)
	}
	// Their callers learn at once that the messages are parked: nothing
	// wakes the child until the next followup, and no caller waits for it.
	for _, out := range []<-chan followupOutcome{out1, out2} {
		if o := await(t, out); o.err != nil || o.res.Route != subagent.RouteParked || o.res.TaskID != "" || o.res.MessageID == "" {
			t.Errorf("parked followup %+v, %v; want route parked", o.res, o.err)
		}
	}
	e.settled(t, res.ChildID)
	// Parked: nothing runs until the next followup.
	if got := userTexts(t, e.log(t, res.ChildID)); !slices.Equal(got, []string{"go"}) {
		t.Errorf("user messages before the next followup %v", got)
	}
	if p, _ := e.st.Pending(t.Context(), res.ChildID); len(p) != 2 {
		t.Errorf("%d pending, want the 2 parked", len(p))
	}
	f, err := e.m.Followup(t.Context(), "p1", res.ChildID, txt("new"), sessionlog.Source{})
	if err != nil || f.Route != subagent.RouteStarted {
		t.Fatalf("followup %+v, %v", f, err)
	}
	e.ended(t, f.TaskID)
	evs := e.log(t, res.ChildID)
	if got := userTexts(t, evs); !slices.Equal(got, []string{"go", "parked 1", "parked 2", "new"}) {
		t.Errorf("user messages %v", got)
	}
	if got := turnEndKinds(t, evs); !slices.Equal(got, []string{sessionlog.ReasonAborted, sessionlog.ReasonCompleted, sessionlog.ReasonCompleted, sessionlog.ReasonCompleted}) {
		t.Errorf("turn ends %v", got)
	}
	var first sessionlog.TurnEndData
	for _, ev := range evs {
		if ev.Type == sessionlog.EventTurnEnd {
			_ = json.Unmarshal(ev.Data, &first)
			break
		}
	}
	if first.Reason.Cause == nil || first.Reason.Cause.Kind != sessionlog.CauseUser {
		t.Errorf("R101: aborted turn cause %+v", first.Reason.Cause)
	}
	ns := e.notices.waitFor(t, "two notices", func(ns []notice) bool { return len(ns) == 2 })
	if model.Text(ns[0].content[:1]) != fmt.Sprintf("Background subagent %s was stopped before it finished.", res.ChildID) {
		t.Errorf("notice %+v", ns[0].content)
	}
}

func TestInterrupt_R91_CallerGivingUpKeepsTheParkedMessage(t *testing.T) {
	t.Parallel()
	gate, reached := make(chan struct{}), make(chan struct{})
	e := newContEnv(t, gatedModel(gate, reached, "never"))
	res := e.start(t, e.req(t, "go"))
	<-reached
	ctx, cancel := context.WithCancel(t.Context())
	out := e.followupAsync(ctx, res.ChildID, "parked")
	e.waitLog(t, res.ChildID, "the steer", steersSubmitted(1))
	if err := e.m.Interrupt(t.Context(), "p1", res.ChildID); err != nil {
		t.Fatal(err)
	}
	e.ended(t, res.TaskID)
	cancel()
	// Answered parked at the interrupt (or, had the caller given up first,
	// EAborted): either way the message stays accepted.
	if o := await(t, out); o.res.Route != subagent.RouteParked && subagent.ErrorCode(o.err) != subagent.EAborted {
		t.Errorf("abandoned followup: %+v, %v", o.res, o.err)
	}
	f, err := e.m.Followup(t.Context(), "p1", res.ChildID, txt("new"), sessionlog.Source{})
	if err != nil {
		t.Fatal(err)
	}
	e.ended(t, f.TaskID)
	if got := userTexts(t, e.log(t, res.ChildID)); !slices.Equal(got, []string{"go", "parked", "new"}) {
		t.Errorf("user messages %v", got)
	}
}

func TestInterrupt_R98_R99_AuthorityAndNoops(t *testing.T) {
	t.Parallel()
	e := newContEnv(t, scripted.New(scripted.Step{Text: "ok"}))
	res := e.start(t, e.req(t, "go"))
	e.ended(t, res.TaskID)
	e.settled(t, res.ChildID)
	if err := e.st.CreateSession(t.Context(), store.Session{ID: "oneshot", ParentID: "p1", Origin: OriginSubagent, Mode: subagent.ModeOneShot}); err != nil {
		t.Fatal(err)
	}
	n := len(e.log(t, res.ChildID))
	wantCode(t, e.m.Interrupt(t.Context(), "p1", "nobody"), subagent.ESessionNotFound)
	wantCode(t, e.m.Interrupt(t.Context(), "someone-else", res.ChildID), subagent.EForbidden)
	for _, id := range []string{res.ChildID, "oneshot"} {
		if err := e.m.Interrupt(t.Context(), "p1", id); err != nil {
			t.Errorf("interrupt of settled %s: %v", id, err)
		}
	}
	if got := len(e.log(t, res.ChildID)); got != n {
		t.Errorf("log grew from %d to %d", n, got)
	}
	if got := len(e.life.all()); got != 2 {
		t.Errorf("%d lifecycle events", got)
	}
}

func TestInterrupt_R105_BeforeAnyOutputEndsAborted(t *testing.T) {
	t.Parallel()
	gate, reached := make(chan struct{}), make(chan struct{})
	e := newContEnv(t, gatedModel(gate, reached, "never"))
	res := e.start(t, e.req(t, "go"))
	<-reached
	if err := e.m.Interrupt(t.Context(), "p1", res.ChildID); err != nil {
		t.Fatal(err)
	}
	if end := e.ended(t, res.TaskID); end.StopReason != subagent.StopAborted || end.LastAssistantMessage != nil {
		t.Errorf("end %+v", end)
	}
	ns := e.notices.waitFor(t, "the notice", func(ns []notice) bool { return len(ns) == 1 })
	want := []string{fmt.Sprintf("Background subagent %s was stopped before it finished.", res.ChildID), "It left no closing message."}
	if got := []string{ns[0].content[0].Text, ns[0].content[1].Text}; len(ns[0].content) != 2 || !slices.Equal(got, want) {
		t.Errorf("notice %+v", ns[0].content)
	}
}

// rejectingSteer is a ChildAgent whose turn always ends before a steer
// gets in.
type rejectingSteer struct{ subagent.ChildAgent }

func (rejectingSteer) SubmitSteer(context.Context, sessionlog.UserMessage) (<-chan error, error) {
	return nil, fmt.Errorf("steer: %w: turn ended", subagent.ErrSteerRejected)
}

func TestFollowup_R90_SteerRejectedAtOnceWaitsForTheSettlement(t *testing.T) {
	t.Parallel()
	gate, reached := make(chan struct{}), make(chan struct{})
	e := newContEnv(t, gatedModel(gate, reached, "first"))
	e.mat.setWrap(func(a subagent.ChildAgent) subagent.ChildAgent { return rejectingSteer{a} })
	res := e.start(t, e.req(t, "go"))
	<-reached
	out := e.followupAsync(t.Context(), res.ChildID, "late")
	// Accepted durably, waiting for the running turn to end.
	e.st.waitAccepted(t, 2)
	close(gate)
	o := await(t, out)
	if o.err != nil || o.res.Route != subagent.RouteStarted || o.res.TaskID == res.TaskID {
		t.Fatalf("followup %+v, %v", o.res, o.err)
	}
	first := e.ended(t, res.TaskID)
	second := e.ended(t, o.res.TaskID)
	if first.StopReason != subagent.StopCompleted || model.Text(first.LastAssistantMessage) != "first" ||
		second.StopReason != subagent.StopCompleted || model.Text(second.LastAssistantMessage) != "ok" {
		t.Errorf("ends %+v, %+v", first, second)
	}
	if got := userTexts(t, e.log(t, res.ChildID)); !slices.Equal(got, []string{"go", "late"}) {
		t.Errorf("user messages %v", got)
	}
}
