package delegate

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/children"
	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/model/scripted"
	"github.com/subagentd/subagentd/internal/providers/inprocess"
	"github.com/subagentd/subagentd/internal/providers/inprocess/inprocesstest"
	"github.com/subagentd/subagentd/internal/roots"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// reportWorld is a world whose continuable children run under a Manager
// over the real in-process Materializer (recorded), with the root agents as
// its NoticeSink unless the test's options say otherwise.
type reportWorld struct {
	*world
	mgr *children.Manager
	mat *recordingMat
}

// recordingMat is the in-process Materializer recording every request, so a
// test can report as one particular activation (MaterializeRequest.Report).
type recordingMat struct {
	subagent.Materializer
	mu   sync.Mutex
	reqs []subagent.MaterializeRequest
}

func (m *recordingMat) Materialize(ctx context.Context, req subagent.MaterializeRequest) (subagent.ChildAgent, error) {
	m.mu.Lock()
	m.reqs = append(m.reqs, req)
	m.mu.Unlock()
	return m.Materializer.Materialize(ctx, req)
}

// reporters returns the Report funcs of child id's materializations, oldest
// first.
func (m *recordingMat) reporters(id string) []func(context.Context, []model.Block) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []func(context.Context, []model.Block) (string, error)
	for _, r := range m.reqs {
		if r.Session.ID == id {
			out = append(out, r.Report)
		}
	}
	return out
}

// newReportWorld builds a reportWorld over model m; opts adjust the
// manager's configuration (its Notices are the root agents).
func newReportWorld(t *testing.T, m model.Model, opts ...func(*children.ManagerConfig)) *reportWorld {
	t.Helper()
	w := &reportWorld{}
	w.world = newWorld(t, m, func(c *ToolsConfig, roots *roots.Manager, deps inprocess.Deps) {
		w.mat = &recordingMat{Materializer: inprocess.NewMaterializer(deps)}
		cfg := children.ManagerConfig{Materializer: w.mat, Notices: roots, Logger: c.Logger}
		for _, o := range opts {
			o(&cfg)
		}
		w.mgr = children.NewManager(c.Seam.(*subagent.Service), cfg)
		c.Continuations = w.mgr
	})
	// Registered after the roots' Close, so it runs first: activations
	// settle and notify their roots before those close.
	t.Cleanup(func() {
		if err := w.mgr.Shutdown(context.Background()); err != nil {
			t.Errorf("manager shutdown: %v", err)
		}
	})
	return w
}

// start starts a continuable spawn child of parent with prompt (childID
// reserved when not empty), as the parent's delegation tool does — its
// notices wake the parent — and returns its id.
func (w *reportWorld) start(t *testing.T, parent subagent.Parent, childID, prompt string) string {
	t.Helper()
	res, err := w.mgr.StartContinuable(inprocesstest.Ctx(t), children.ContinuableRequest{Provider: spawnProvider,
		Label: "helper", ChildID: childID, Prompt: inprocesstest.Text(prompt), Parent: parent, WakeParent: true})
	if err != nil {
		t.Fatalf("StartContinuable: %v", err)
	}
	return res.ChildID
}

// asParent is stored session id as a delegating parent.
func (w *reportWorld) asParent(t *testing.T, id string) subagent.Parent {
	t.Helper()
	hdr, err := w.Store.GetSession(inprocesstest.Ctx(t), id)
	if err != nil {
		t.Fatal(err)
	}
	return subagent.Parent{Session: hdr}
}

// waitLog blocks until session id's log satisfies pred and returns it.
func (w *reportWorld) waitLog(t *testing.T, id, what string, pred func([]store.Event) bool) []store.Event {
	t.Helper()
	wake, stop := w.Store.Subscribe(store.SessionTopic(id))
	defer stop()
	timeout := time.After(inprocesstest.Timeout)
	for {
		if evs := w.Log(t, id); pred(evs) {
			return evs
		}
		select {
		case <-wake:
		case <-timeout:
			t.Fatalf("session %s: timed out waiting for %s", id, what)
		}
	}
}

// offers reports whether req offers the tool named name.
func offers(req model.Request, name string) bool {
	return slices.ContainsFunc(req.Tools, func(s model.ToolSpec) bool { return s.Name == name })
}

// reportText is the text of the parent message a report of output from
// child becomes (R107).
func reportText(child, output string) string {
	return "Background subagent " + child + " reported:" + output
}

// reportSource is the source of a report from child (R107).
func reportSource(child string) sessionlog.Source {
	return sessionlog.Source{Kind: subagent.SourceSubagentReport, Form: "relay", SenderSessionID: child}
}

// texts lists the texts of msgs.
func texts(msgs []sessionlog.UserMessage) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = model.Text(m.Content)
	}
	return out
}

// nextStepInserts counts the messages steered into a next-step inbox.
func nextStepInserts(evs []store.Event) int {
	n := 0
	for _, e := range inprocesstest.OfType(evs, sessionlog.EventInboxSpliced) {
		var d sessionlog.InboxSplicedData
		if json.Unmarshal(e.Data, &d) == nil && d.Target == sessionlog.TargetNextStep {
			n += len(d.Inserted)
		}
	}
	return n
}

// settledText is the text of child's settlement notice after a completed
// epoch whose closing message is output.
func settledText(child, output string) string {
	return "Background subagent " + child + " finished and will do no further work unless you send it more.Its closing message:" + output
}

// TestReport_R107_R108_QuietWaitsForTheNextTurnNextStepWakes: a quiet
// report is stored in an idle root's log without starting a turn and read
// by its next turn; a next-step report opens a turn of an idle root. Both
// are the relay message of R107 under the returned id, and neither ends
// the reporting child's turn (R109).
func TestReport_R107_R108_QuietWaitsForTheNextTurnNextStepWakes(t *testing.T) {
	t.Parallel()
	hold := make(chan struct{})
	m := scripted.Func(func(req model.Request) scripted.Step {
		if offers(req, inprocess.ReportTool) {
			return scripted.Step{Text: "investigated", Gate: hold}
		}
		return scripted.Step{Text: "noted " + lastText(req)}
	})
	w := newReportWorld(t, m)
	ctx := inprocesstest.Ctx(t)
	root := w.Parent.Session.ID
	w.prompt(t, "hello", 1)
	child := w.start(t, w.Parent, "", "investigate")
	w.WaitEvent(t, child, inprocesstest.Type(sessionlog.EventStepStart))

	quietID, err := w.mgr.ReportFrom(ctx, child, inprocesstest.Text("quiet finding"), subagent.DeliveryQuiet)
	if err != nil {
		t.Fatalf("quiet report: %v", err)
	}
	evs := w.Log(t, root)
	msgs := userMessages(t, evs)
	got := msgs[len(msgs)-1]
	if got.ID != quietID || got.Source != reportSource(child) || len(got.Content) != 2 ||
		got.Content[0].Text != "Background subagent "+child+" reported:" || got.Content[1].Text != "quiet finding" {
		t.Errorf("quiet report logged as %+v, id %s", got, quietID)
	}
	if n := len(inprocesstest.OfType(evs, sessionlog.EventTurnStart)); n != 1 {
		t.Errorf("%d root turns after a quiet report, want 1", n)
	}
	if live, _ := w.roots.Live(ctx, root); live {
		t.Error("the idle root agent stayed live behind a log it did not write")
	}

	w.prompt(t, "again", 2)
	reqs := m.Requests()
	turn2 := reqs[len(reqs)-1]
	if n := len(turn2.Messages); n < 2 || model.Text(turn2.Messages[n-2].Content) != reportText(child, "quiet finding") || lastText(turn2) != "again" {
		t.Errorf("turn 2 did not read the quiet report before its prompt: %+v", turn2.Messages)
	}

	nextID, err := w.mgr.ReportFrom(ctx, child, inprocesstest.Text("urgent finding"), subagent.DeliveryNextStep)
	if err != nil {
		t.Fatalf("next-step report: %v", err)
	}
	w.waitTurnEnd(t, root, 3)
	msgs = userMessages(t, w.Log(t, root))
	if got := msgs[len(msgs)-1]; got.ID != nextID || model.Text(got.Content) != reportText(child, "urgent finding") || got.Source != reportSource(child) {
		t.Errorf("turn 3 ran %+v, want the next-step report %s", got, nextID)
	}

	// R109: the child's first turn is still open.
	if ends := inprocesstest.OfType(w.Log(t, child), sessionlog.EventTurnEnd); len(ends) != 0 {
		t.Errorf("reporting ended the child's turn: %d turn ends", len(ends))
	}
	close(hold)
	w.waitTurnEnd(t, root, 4)
	msgs = userMessages(t, w.Log(t, root))
	if got := model.Text(msgs[len(msgs)-1].Content); got != settledText(child, "investigated") {
		t.Errorf("turn 4 ran %q, want the settlement notice", got)
	}
}

// TestReport_R109_R110_BusyRootReadsReportsBeforeTheNoticeInOneStep: a
// child that reports twice and then finishes while its root is busy puts
// both reports and then its settlement notice into the root's next step,
// in that order, as one batch; the report tool answers with the ids the
// root logs, and reporting never ended the child's turn.
func TestReport_R109_R110_BusyRootReadsReportsBeforeTheNoticeInOneStep(t *testing.T) {
	t.Parallel()
	busy := make(chan struct{})
	m := scripted.Func(func(req model.Request) scripted.Step {
		last := req.Messages[len(req.Messages)-1]
		switch {
		case offers(req, inprocess.ReportTool) && lastText(req) == "task":
			return scripted.Step{ToolCalls: []model.ToolCall{call("r1", inprocess.ReportTool, map[string]any{"output": "first"})}}
		case offers(req, inprocess.ReportTool) && last.ToolCallID == "r1":
			return scripted.Step{ToolCalls: []model.ToolCall{call("r2", inprocess.ReportTool, map[string]any{"output": "second"})}}
		case offers(req, inprocess.ReportTool):
			return scripted.Step{Text: "final answer"}
		case lastText(req) == "work":
			return scripted.Step{Text: "working", Gate: busy}
		}
		return scripted.Step{Text: "noted"}
	})
	w := newReportWorld(t, m)
	_, root := w.busyRoot(t, "work")
	child := w.start(t, w.Parent, "", "task")
	waitRunEnds(t, w.world, child, 1)
	w.waitLog(t, root, "two reports and a notice steered into the busy root", func(evs []store.Event) bool {
		return nextStepInserts(evs) == 3
	})
	close(busy)
	if end := w.waitTurnEnd(t, root, 1); end.Reason.Kind != sessionlog.ReasonCompleted {
		t.Errorf("root turn end %+v", end)
	}

	evs := w.Log(t, root)
	msgs := userMessages(t, evs)
	want := []string{"work", reportText(child, "first"), reportText(child, "second"), settledText(child, "final answer")}
	if got := texts(msgs); !slices.Equal(got, want) {
		t.Fatalf("root user messages %q, want %q", got, want)
	}
	if n := len(inprocesstest.OfType(evs, sessionlog.EventTurnStart)); n != 1 {
		t.Errorf("%d root turns, want the reports and the notice inside the running one", n)
	}
	var rootReqs []model.Request
	for _, r := range m.Requests() {
		if !offers(r, inprocess.ReportTool) {
			rootReqs = append(rootReqs, r)
		}
	}
	if len(rootReqs) != 2 {
		t.Fatalf("%d root model steps, want 2: the batch costs one step", len(rootReqs))
	}
	batch := rootReqs[1].Messages[len(rootReqs[1].Messages)-3:]
	for i, msg := range batch {
		if model.Text(msg.Content) != want[i+1] {
			t.Errorf("step 2 message %d = %q, want %q", i, model.Text(msg.Content), want[i+1])
		}
	}

	results := w.toolResults(t, child)
	for i, id := range []string{"r1", "r2"} {
		r := results[id]
		if want := "report accepted by the agent that started you as message " + msgs[i+1].ID; r.IsError || model.Text(r.Content) != want {
			t.Errorf("report %s answered %+v, want %q", id, r, want)
		}
		if msgs[i+1].Source != reportSource(child) {
			t.Errorf("report %s source %+v", id, msgs[i+1].Source)
		}
	}
	childEvs := w.Log(t, child)
	if ends := inprocesstest.OfType(childEvs, sessionlog.EventTurnEnd); len(ends) != 1 ||
		inprocesstest.Decode[sessionlog.TurnEndData](t, ends[0]).Reason.Kind != sessionlog.ReasonCompleted {
		t.Errorf("child turns: %v", inprocesstest.Types(childEvs))
	}
}

// TestReport_R110_R111_QuietPolicyToAnOfflineRoot: with the quiet report
// policy, a report to a root without a live agent is stored in its log,
// ahead of the child's later settlement notice — quiet too, since a client
// started the child without asking to wake the root — without starting a
// turn, and the child's settlement does not retract it.
func TestReport_R110_R111_QuietPolicyToAnOfflineRoot(t *testing.T) {
	t.Parallel()
	m := scripted.Func(func(req model.Request) scripted.Step {
		if lastText(req) == "task" {
			return scripted.Step{ToolCalls: []model.ToolCall{call("r1", inprocess.ReportTool, map[string]any{"output": "kept"})}}
		}
		return scripted.Step{Text: "done"}
	})
	w := newReportWorld(t, m, func(c *children.ManagerConfig) { c.ReportDelivery = subagent.DeliveryQuiet })
	root := w.Parent.Session.ID
	res, err := w.mgr.StartContinuable(inprocesstest.Ctx(t), children.ContinuableRequest{Provider: spawnProvider,
		Label: "helper", Prompt: inprocesstest.Text("task"), Parent: w.Parent})
	if err != nil {
		t.Fatal(err)
	}
	child := res.ChildID
	waitRunEnds(t, w.world, child, 1)
	evs := w.Log(t, root)
	want := []string{reportText(child, "kept"), settledText(child, "done")}
	if got := texts(userMessages(t, evs)); !slices.Equal(got, want) {
		t.Errorf("root log user messages %q, want %q", got, want)
	}
	if n := len(inprocesstest.OfType(evs, sessionlog.EventTurnStart)); n != 0 {
		t.Errorf("%d root turns, want none", n)
	}
}

// blockingSink holds the settlement notice of child id in Notify until
// release is closed, after closing reached.
type blockingSink struct {
	children.NoticeSink
	id               string
	reached, release chan struct{}
}

func (s *blockingSink) Notify(ctx context.Context, parentID string, msg sessionlog.UserMessage, quiet bool) error {
	if msg.Source.Kind == subagent.SourceSubagentSettled && msg.Source.SenderSessionID == s.id {
		close(s.reached)
		<-s.release
	}
	return s.NoticeSink.Notify(ctx, parentID, msg, quiet)
}

// TestReport_R106_WhoMayReport: only a resident continuable activation of
// this service reports, with live content, a known delivery and a caller
// that has not given up; a stale activation's report tool is refused while
// a newer one is resident; an activation that began to settle is closing;
// a parent that does not exist is unavailable; a drained manager refuses.
func TestReport_R106_WhoMayReport(t *testing.T) {
	t.Parallel()
	hold := make(chan struct{})
	m := scripted.Func(func(req model.Request) scripted.Step {
		if lastText(req) == "hold" {
			return scripted.Step{Text: "held", Gate: hold}
		}
		return scripted.Step{Text: "done"}
	})
	sink := &blockingSink{id: "closing", reached: make(chan struct{}), release: make(chan struct{})}
	w := newReportWorld(t, m, func(c *children.ManagerConfig) {
		sink.NoticeSink = c.Notices
		c.Notices = sink
	})
	ctx := inprocesstest.Ctx(t)
	root := w.Parent.Session.ID
	text := inprocesstest.Text("finding")

	// A one-shot child (which is never offered the tool) and a settled
	// continuable child.
	oneShot := w.Start(t, spawnProvider, w.Request("once"))
	inprocesstest.Settle(t, oneShot)
	settled := w.start(t, w.Parent, "", "once more")
	waitRunEnds(t, w.world, settled, 1)
	for _, r := range m.Requests() {
		if offers(r, inprocess.ReportTool) != (lastText(r) == "once more") {
			t.Errorf("request ending %q offers report: %t", lastText(r), offers(r, inprocess.ReportTool))
		}
	}
	live := w.start(t, w.Parent, "live", "hold")
	w.WaitEvent(t, live, inprocesstest.Type(sessionlog.EventStepStart))
	cancelled, cancel := context.WithCancel(ctx)
	cancel()

	for _, tc := range []struct {
		name, id, delivery string
		ctx                context.Context
		content            []model.Block
		code               string
	}{
		{"root session", root, "", ctx, text, subagent.EForbidden},
		{"unknown id", "nobody", "", ctx, text, subagent.EForbidden},
		{"one-shot child", oneShot.ChildID(), "", ctx, text, subagent.EForbidden},
		{"settled child", settled, "", ctx, text, subagent.EForbidden},
		{"aborted caller", live, "", cancelled, text, subagent.EAborted},
		{"obsolete delivery", live, "wakeup", ctx, text, subagent.EInvalidRequest},
		{"no content", live, "", ctx, nil, subagent.EInvalidRequest},
	} {
		if _, err := w.mgr.ReportFrom(tc.ctx, tc.id, tc.content, tc.delivery); subagent.ErrorCode(err) != tc.code {
			t.Errorf("%s: err %v, want %s", tc.name, err, tc.code)
		}
	}
	if n := len(userMessages(t, w.Log(t, root))); n != 1 {
		t.Errorf("rejected reports reached the root: %d user messages, want the settled child's notice", n)
	}

	// A stale activation: the first activation's report tool after a
	// followup started a second one.
	w.followup(t, root, settled, "hold")
	reporters := w.mat.reporters(settled)
	if len(reporters) != 2 {
		t.Fatalf("%d materializations of %s, want 2", len(reporters), settled)
	}
	if _, err := reporters[0](ctx, text); subagent.ErrorCode(err) != subagent.EForbidden {
		t.Errorf("stale activation's report: %v, want UNAUTHORIZED", err)
	}
	if _, err := reporters[1](ctx, text); err != nil {
		t.Errorf("resident activation's report: %v", err)
	}

	// An activation whose settlement began.
	w.start(t, w.Parent, "closing", "quick")
	select {
	case <-sink.reached:
	case <-ctx.Done():
		t.Fatal("the closing child's notice was not sent")
	}
	_, err := w.mgr.ReportFrom(ctx, "closing", text, "")
	close(sink.release)
	if subagent.ErrorCode(err) != subagent.EActivationClosing {
		t.Errorf("settling child's report: %v, want ACTIVATION_CLOSING", err)
	}

	// A parent that does not exist.
	ghost := w.start(t, subagent.Parent{Session: store.Session{ID: "ghost"}}, "", "hold")
	w.WaitEvent(t, ghost, inprocesstest.Type(sessionlog.EventStepStart))
	if _, err := w.mgr.ReportFrom(ctx, ghost, text, ""); subagent.ErrorCode(err) != subagent.EParentUnavailable ||
		!errors.Is(err, store.ErrNotFound) || subagent.ErrorMessage(err) != "direct parent is not live; report was not delivered" {
		t.Errorf("report to a missing parent: %v", err)
	}

	close(hold)
	if err := w.mgr.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := w.mgr.ReportFrom(ctx, live, text, ""); subagent.ErrorCode(err) != subagent.EDraining {
		t.Errorf("after shutdown: %v, want DRAINING", err)
	}
}

// followup sends text to child from parent and fails t unless it was
// accepted.
func (w *reportWorld) followup(t *testing.T, parent, child, text string) children.FollowupResult {
	t.Helper()
	res, err := w.mgr.Followup(inprocesstest.Ctx(t), parent, child, inprocesstest.Text(text), sessionlog.Source{Kind: subagent.SourceUser})
	if err != nil {
		t.Fatalf("followup %q: %v", text, err)
	}
	return res
}

// failingSink fails every delivery.
type failingSink struct{ err error }

func (s failingSink) Notify(context.Context, string, sessionlog.UserMessage, bool) error {
	return s.err
}

// TestReport_R111_FailedParentSendIsParentUnavailable: a delivery the
// parent side rejects is PARENT_UNAVAILABLE with the cause, the report
// tool shows the model that message, and the child carries on.
func TestReport_R111_FailedParentSendIsParentUnavailable(t *testing.T) {
	t.Parallel()
	m := scripted.Func(func(req model.Request) scripted.Step {
		if lastText(req) == "task" {
			return scripted.Step{ToolCalls: []model.ToolCall{call("r1", inprocess.ReportTool, map[string]any{"output": "lost"})}}
		}
		return scripted.Step{Text: "carried on"}
	})
	gone := errors.New("parent agent gone")
	w := newReportWorld(t, m, func(c *children.ManagerConfig) { c.Notices = failingSink{gone} })
	child := w.start(t, w.Parent, "", "task")
	waitRunEnds(t, w.world, child, 1)
	r := w.toolResults(t, child)["r1"]
	if !r.IsError || model.Text(r.Content) != "direct parent is not live; report was not delivered" {
		t.Errorf("report tool answered %+v", r)
	}
	if end := w.waitTurnEnd(t, child, 1); end.Reason.Kind != sessionlog.ReasonCompleted {
		t.Errorf("child turn end %+v", end)
	}

	hold := make(chan struct{})
	defer close(hold)
	m2 := scripted.Func(func(model.Request) scripted.Step { return scripted.Step{Text: "x", Gate: hold} })
	w2 := newReportWorld(t, m2, func(c *children.ManagerConfig) { c.Notices = failingSink{gone} })
	held := w2.start(t, w2.Parent, "", "hold")
	w2.WaitEvent(t, held, inprocesstest.Type(sessionlog.EventStepStart))
	if _, err := w2.mgr.ReportFrom(inprocesstest.Ctx(t), held, inprocesstest.Text("lost"), ""); subagent.ErrorCode(err) != subagent.EParentUnavailable || !errors.Is(err, gone) {
		t.Errorf("ReportFrom: %v, want PARENT_UNAVAILABLE caused by %v", err, gone)
	}
}

// TestReport_R108_R110_R112_NestedReportsGoOneEdgeUp: a grandchild's
// reports reach its continuable parent only — never the root: a quiet one
// is stored in the parent's durable inbox without waking it, and delivered,
// in order, when the grandchild's next-step report (the report tool) wakes
// it, both ahead of the grandchild's settlement notice.
func TestReport_R108_R110_R112_NestedReportsGoOneEdgeUp(t *testing.T) {
	t.Parallel()
	hold := make(chan struct{})
	m := scripted.Func(func(req model.Request) scripted.Step {
		switch lastText(req) {
		case "grand task":
			return scripted.Step{ToolCalls: []model.ToolCall{call("r1", inprocess.ReportTool, map[string]any{"output": "deep finding"})}, Gate: hold}
		case "parent task":
			return scripted.Step{Text: "parent ok"}
		}
		return scripted.Step{Text: "noted"}
	})
	w := newReportWorld(t, m)
	ctx := inprocesstest.Ctx(t)
	root := w.Parent.Session.ID
	child := w.start(t, w.Parent, "", "parent task")
	waitRunEnds(t, w.world, child, 1)
	grand := w.start(t, w.asParent(t, child), "", "grand task")
	w.WaitEvent(t, grand, inprocesstest.Type(sessionlog.EventStepStart))

	if _, err := w.mgr.ReportFrom(ctx, grand, inprocesstest.Text("parked note"), subagent.DeliveryQuiet); err != nil {
		t.Fatalf("quiet report: %v", err)
	}
	info, err := w.mgr.Child(ctx, child)
	if err != nil {
		t.Fatal(err)
	}
	if info.Activity != subagent.ActivityInactive {
		t.Errorf("a quiet report woke the parent: activity %s", info.Activity)
	}

	close(hold)
	waitRunEnds(t, w.world, grand, 1)
	notice := settledText(grand, "noted")
	evs := w.waitLog(t, child, "the grandchild's notice", func(evs []store.Event) bool {
		return slices.Contains(texts(userMessages(t, evs)), notice)
	})
	want := []string{"parent task", reportText(grand, "parked note"), reportText(grand, "deep finding"), notice}
	if got := texts(userMessages(t, evs)); !slices.Equal(got, want) {
		t.Errorf("parent's user messages %q, want %q", got, want)
	}
	if r := w.toolResults(t, grand)["r1"]; r.IsError || !strings.HasPrefix(model.Text(r.Content), "report accepted by the agent that started you as message ") {
		t.Errorf("grandchild's report tool answered %+v", r)
	}
	for _, msg := range userMessages(t, w.Log(t, root)) {
		if msg.Source.SenderSessionID == grand {
			t.Errorf("the root received %q from the grandchild", model.Text(msg.Content))
		}
	}
}

// TestReportTool_5_3_DelegatedChildReportsToItsRoot: a background child
// started by the root's model through the delegation tool is offered the
// report tool and its prompt section (the root is offered neither); its
// report reaches the root as a relay before its settlement notice.
func TestReportTool_5_3_DelegatedChildReportsToItsRoot(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	m := scripted.Func(func(req model.Request) scripted.Step {
		last := req.Messages[len(req.Messages)-1]
		switch {
		case lastText(req) == "delegate":
			return scripted.Step{ToolCalls: []model.ToolCall{call("d1", SpawnTool, map[string]any{"description": "research", "prompt": "find it"})}}
		case lastText(req) == "find it":
			return scripted.Step{Gate: release, ToolCalls: []model.ToolCall{call("r1", inprocess.ReportTool, map[string]any{"output": "found it early"})}}
		case last.ToolCallID == "r1":
			return scripted.Step{Text: "all done"}
		case last.Role == model.RoleTool:
			return scripted.Step{Text: "started"}
		}
		return scripted.Step{Text: "ack"}
	})
	w := newReportWorld(t, m)
	root := w.Parent.Session.ID
	w.prompt(t, "delegate", 1)
	started := model.Text(w.toolResults(t, root)["d1"].Content)
	child, ok := strings.CutPrefix(started, "started subagent ")
	if !ok {
		t.Fatalf("delegation answered %q", started)
	}
	close(release)
	waitRunEnds(t, w.world, child, 1)
	evs := w.waitLog(t, root, "the notice", func(evs []store.Event) bool {
		return slices.Contains(texts(userMessages(t, evs)), settledText(child, "all done"))
	})
	msgs := userMessages(t, evs)
	want := []string{"delegate", reportText(child, "found it early"), settledText(child, "all done")}
	if got := texts(msgs); !slices.Equal(got, want) {
		t.Fatalf("root user messages %q, want %q", got, want)
	}
	if r := w.toolResults(t, child)["r1"]; r.IsError || model.Text(r.Content) != "report accepted by the agent that started you as message "+msgs[1].ID {
		t.Errorf("report tool answered %+v, want the id of %+v", r, msgs[1])
	}
	for _, r := range m.Requests() {
		child := model.Text(r.Messages[0].Content) == "find it"
		if offers(r, inprocess.ReportTool) != child || strings.Contains(r.System, "Reporting never ends your turn.") != child {
			t.Errorf("request ending %q: report offered %t, system %q", lastText(r), offers(r, inprocess.ReportTool), r.System)
		}
		if child {
			spec := toolSpec(t, r, inprocess.ReportTool)
			if !contains(spec.Description, "agent that started you", "does not end your turn", "only your direct parent") ||
				!strings.Contains(string(spec.Parameters), `"required":["output"]`) {
				t.Errorf("report tool spec %s %s", spec.Description, spec.Parameters)
			}
		}
	}
}

// TestReportTool_5_3_SurvivesTheToolFilter: the report tool is scope-local:
// an allow-nothing filter hides every global tool but not report.
func TestReportTool_5_3_SurvivesTheToolFilter(t *testing.T) {
	t.Parallel()
	m := scripted.Func(func(model.Request) scripted.Step { return scripted.Step{Text: "done"} })
	w := newReportWorld(t, m)
	res, err := w.mgr.StartContinuable(inprocesstest.Ctx(t), children.ContinuableRequest{Provider: spawnProvider,
		Label: "filtered", Prompt: inprocesstest.Text("filtered task"), Parent: w.Parent, ToolFilter: &subagent.ToolFilter{Allow: []string{}}})
	if err != nil {
		t.Fatal(err)
	}
	waitRunEnds(t, w.world, res.ChildID, 1)
	reqs := m.Requests()
	if len(reqs) != 1 || len(reqs[0].Tools) != 1 || reqs[0].Tools[0].Name != inprocess.ReportTool {
		t.Errorf("filtered child was offered %+v, want report alone", reqs[0].Tools)
	}
}
