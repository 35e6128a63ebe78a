package children

import (
	"context"
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

// TestReport_R110_SettlementWaitsForAReportBeingDelivered: a report
// accepted while the child runs is still being delivered when the child's
// turn ends; the activation settles — notice, then subagent/end — only
// after it, so the parent receives the report first.
func TestReport_R110_SettlementWaitsForAReportBeingDelivered(t *testing.T) {
	t.Parallel()
	gate, reached := make(chan struct{}), make(chan struct{})
	e := newContEnv(t, gatedModel(gate, reached, "answer"))
	inReport, releaseReport := make(chan struct{}), make(chan struct{})
	e.notices.onNotify = func(msg sessionlog.UserMessage) {
		if msg.Source.Kind == subagent.SourceSubagentReport {
			close(inReport)
			<-releaseReport
		}
	}
	agents := make(chan subagent.ChildAgent, 1)
	e.mat.setWrap(func(a subagent.ChildAgent) subagent.ChildAgent {
		agents <- a
		return a
	})
	res := e.start(t, e.req(t, "go"))
	<-reached
	reported := make(chan error, 1)
	var id string
	go func() {
		var err error
		id, err = e.m.ReportFrom(t.Context(), res.ChildID, txt("finding"), subagent.DeliveryQuiet)
		reported <- err
	}()
	<-inReport
	close(gate)
	// The turn has ended; the report in flight must keep the activation
	// from settling.
	<-(<-agents).Idle()
	var settling bool
	e.m.do(resident.Key{Tenant: store.DefaultTenant, ID: res.ChildID}, func(c *child) { settling = c.act == nil || c.act.state == actSettling })
	if settling {
		t.Error("the activation began to settle while a report was still being delivered")
	}
	close(releaseReport)
	if err := <-reported; err != nil {
		t.Fatalf("ReportFrom: %v", err)
	}
	e.ended(t, res.TaskID)
	ns := e.notices.all()
	if len(ns) != 2 || ns[0].src.Kind != subagent.SourceSubagentReport || ns[1].src.Kind != subagent.SourceSubagentSettled {
		t.Fatalf("the parent received %+v, want the report then the notice", ns)
	}
	if r := ns[0]; r.id != id || !r.quiet || r.parentID != "p1" || r.src.SenderSessionID != res.ChildID ||
		model.Text(r.content) != "Background subagent "+res.ChildID+" reported:finding" {
		t.Errorf("report delivered as %+v, id %s", r, id)
	}
	if ns[1].quiet {
		t.Error("the settlement notice did not wake the parent")
	}
}

// TestReport_R108_QuietReportParksInAContinuableParent: a quiet report to
// a continuable parent that is not live is accepted into its durable inbox,
// as a quiet row, without starting it; the next waking message delivers it
// first. A report
// after Shutdown is refused (R106, DRAINING).
func TestReport_R108_QuietReportParksInAContinuableParent(t *testing.T) {
	t.Parallel()
	hold := make(chan struct{})
	e := newContEnv(t, scripted.Func(func(req model.Request) scripted.Step {
		if model.Text(req.Messages[len(req.Messages)-1].Content) == "be a child" {
			return scripted.Step{Text: "child done", Gate: hold}
		}
		return scripted.Step{Text: "ok"}
	}))
	parent := e.start(t, e.req(t, "be a parent"))
	e.ended(t, parent.TaskID)
	e.settled(t, parent.ChildID)

	kidReq := e.req(t, "be a child")
	kidReq.Parent = e.parent(t, parent.ChildID)
	kid := e.start(t, kidReq)
	if _, err := e.m.ReportFrom(t.Context(), kid.ChildID, txt("parked"), subagent.DeliveryQuiet); err != nil {
		t.Fatalf("quiet report: %v", err)
	}
	if e.m.liveActivation(resident.Key{Tenant: store.DefaultTenant, ID: parent.ChildID}) != nil {
		t.Error("a quiet report started the parent")
	}
	// Quiet in the inbox too, so that a restart does not wake the parent.
	if rows, err := e.st.Pending(t.Context(), parent.ChildID); err != nil || len(rows) != 1 || !rows[0].Quiet {
		t.Errorf("parent inbox %+v, %v: want the report as one quiet row", rows, err)
	}
	close(hold)
	evs := e.waitLog(t, parent.ChildID, "the kid's notice", func(evs []store.Event) bool {
		return slices.ContainsFunc(userMessages(t, evs), func(m sessionlog.UserMessage) bool { return m.Source.Kind == subagent.SourceSubagentSettled })
	})
	got := userTexts(t, evs)
	if len(got) != 3 || got[1] != "Background subagent "+kid.ChildID+" reported:parked" {
		t.Errorf("parent user messages %q, want the parked report before the notice", got)
	}

	if err := e.m.Shutdown(context.WithoutCancel(t.Context())); err != nil {
		t.Fatal(err)
	}
	_, err := e.m.ReportFrom(t.Context(), kid.ChildID, txt("late"), "")
	wantCode(t, err, subagent.EDraining)
}

// TestSteerActivation_R96_StrictAndScopedToItsTenant: SteerActivation
// admits content into the running turn of a live activation of the
// caller's tenant; another tenant's, an unknown or a settled run is
// RUN_NOT_FOUND, empty content INVALID_REQUEST.
func TestSteerActivation_R96_StrictAndScopedToItsTenant(t *testing.T) {
	t.Parallel()
	gate, reached := make(chan struct{}), make(chan struct{})
	e := newContEnv(t, gatedModel(gate, reached, "first"))
	res := e.start(t, e.req(t, "go"))
	<-reached
	run, err := e.m.Task(t.Context(), res.TaskID)
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.m.SteerActivation(store.WithTenant(t.Context(), "other"), run.ID, txt("x"))
	wantCode(t, err, subagent.ERunNotFound)
	_, err = e.m.SteerActivation(t.Context(), run.ID, nil)
	wantCode(t, err, subagent.EInvalidRequest)

	steered := make(chan error, 1)
	var id string
	go func() {
		var err error
		id, err = e.m.SteerActivation(t.Context(), run.ID, txt("steered"))
		steered <- err
	}()
	e.waitLog(t, res.ChildID, "the steer", steersSubmitted(1))
	close(gate)
	if err := <-steered; err != nil {
		t.Fatalf("SteerActivation: %v", err)
	}
	e.ended(t, res.TaskID)
	msgs := userMessages(t, e.log(t, res.ChildID))
	if last := msgs[len(msgs)-1]; last.ID != id || model.Text(last.Content) != "steered" {
		t.Errorf("child logged %+v, want the steer %s", last, id)
	}
	e.settled(t, res.ChildID)
	_, err = e.m.SteerActivation(t.Context(), run.ID, txt("late"))
	wantCode(t, err, subagent.ERunNotFound)
	if errors.Is(err, subagent.ErrSteerRejected) {
		t.Error("a settled run reached the agent")
	}
}
