package delegate

import (
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/model/scripted"
	"github.com/subagentd/subagentd/internal/providers/inprocess/inprocesstest"
	"github.com/subagentd/subagentd/internal/roots"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// historyModel answers with the number of messages it saw and the last text.
func historyModel() *scripted.Model {
	return scripted.Func(func(req model.Request) scripted.Step {
		return scripted.Step{Text: "saw " + lastText(req)}
	})
}

func TestRoots_PromptRunsTurnAndColdLoadsAfterCloseIdle(t *testing.T) {
	t.Parallel()
	m := historyModel()
	w := newWorld(t, m)
	ctx := inprocesstest.Ctx(t)
	root := w.Parent.Session.ID

	w.prompt(t, "one", 1)
	if live, _ := w.roots.Live(ctx, root); !live {
		t.Fatal("no live agent after a prompt")
	}
	w.awaitIdle(t, root)
	n, err := w.roots.CloseIdle(ctx, time.Now())
	if err != nil || n != 1 {
		t.Fatalf("CloseIdle = %d, %v, want 1 closed", n, err)
	}
	if live, _ := w.roots.Live(ctx, root); live {
		t.Fatal("agent still live after CloseIdle")
	}
	w.prompt(t, "two", 2) // cold load: turn numbering continues from the log
	reqs := m.Requests()
	last := reqs[len(reqs)-1]
	if len(last.Messages) != 3 || model.Text(last.Messages[0].Content) != "one" || model.Text(last.Messages[1].Content) != "saw one" {
		t.Errorf("history after cold load = %+v", last.Messages)
	}
	if last.Model != "script-default" {
		t.Errorf("model = %q, want the default route's model", last.Model)
	}
}

func TestRoots_CloseIdleKeepsRecentAndRunning(t *testing.T) {
	t.Parallel()
	gate := make(chan struct{})
	m := scripted.Func(func(req model.Request) scripted.Step { return scripted.Step{Text: "ok", Gate: gate} })
	w := newWorld(t, m)
	ctx := inprocesstest.Ctx(t)
	root := w.Parent.Session.ID
	before := time.Now()
	if _, err := w.roots.Prompt(ctx, root, inprocesstest.Text("x")); err != nil {
		t.Fatal(err)
	}
	// Its last use is after before and before after; the cutoffs keep a
	// minute's distance from both, so no clock tick decides.
	recent, old := before.Add(-time.Minute), time.Now().Add(time.Minute)
	if n, err := w.roots.CloseIdle(ctx, old); n != 0 || err != nil {
		t.Errorf("CloseIdle of a running agent = %d, %v, want 0", n, err)
	}
	close(gate)
	w.waitTurnEnd(t, root, 1)
	w.awaitIdle(t, root)
	if n, err := w.roots.CloseIdle(ctx, recent); n != 0 || err != nil {
		t.Errorf("CloseIdle of an idle agent used after the cutoff = %d, %v, want 0", n, err)
	}
	if live, _ := w.roots.Live(ctx, root); !live {
		t.Fatal("an idle agent used after the cutoff was closed")
	}
	if n, err := w.roots.CloseIdle(ctx, old); n != 1 || err != nil {
		t.Errorf("CloseIdle of an idle agent last used before the cutoff = %d, %v, want 1", n, err)
	}
	if live, _ := w.roots.Live(ctx, root); live {
		t.Fatal("an idle agent last used before the cutoff is still live")
	}
}

func TestRoots_PromptErrors(t *testing.T) {
	t.Parallel()
	w := newWorld(t, historyModel())
	ctx := inprocesstest.Ctx(t)
	child := w.NewSession(t, store.Session{ParentID: w.Parent.Session.ID, Origin: "subagent", DelegationDepth: 1})
	badRoute := w.NewSession(t, store.Session{AgentProvider: "nope"})
	tests := []struct {
		name, id, code string
	}{
		{"unknown session", "missing", subagent.ESessionNotFound},
		{"child session", child.ID, subagent.EInvalidRequest},
		{"unknown route", badRoute.ID, subagent.EInvalidRequest},
	}
	for _, tt := range tests {
		if _, err := w.roots.Prompt(ctx, tt.id, inprocesstest.Text("x")); subagent.ErrorCode(err) != tt.code {
			t.Errorf("%s: err = %v, want %s", tt.name, err, tt.code)
		}
	}
	// Other tenants do not see the session.
	other := store.WithTenant(ctx, "other")
	if _, err := w.roots.Prompt(other, w.Parent.Session.ID, inprocesstest.Text("x")); subagent.ErrorCode(err) != subagent.ESessionNotFound {
		t.Errorf("other tenant: err = %v", err)
	}
	if err := w.roots.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := w.roots.Prompt(ctx, w.Parent.Session.ID, inprocesstest.Text("x")); subagent.ErrorCode(err) != subagent.EDraining {
		t.Errorf("after Close: err = %v, want DRAINING", err)
	}
}

// notice is a settlement notice as the continuation manager sends it.
func notice(child string) sessionlog.UserMessage {
	summary := "Background subagent " + child + " finished and will do no further work unless you send it more."
	return sessionlog.UserMessage{ID: uuid.NewString(), Role: "user",
		Content: []model.Block{model.TextBlock(summary), model.TextBlock("It left no closing message.")},
		Source:  sessionlog.Source{Kind: "subagent-settled", Form: "notice", Summary: summary, SenderSessionID: child}}
}

// userMessages returns the user/message payloads of a log.
func userMessages(t *testing.T, evs []store.Event) []sessionlog.UserMessage {
	t.Helper()
	var out []sessionlog.UserMessage
	for _, e := range inprocesstest.OfType(evs, sessionlog.EventUserMessage) {
		out = append(out, inprocesstest.Decode[sessionlog.UserMessage](t, e))
	}
	return out
}

// TestRoots_R78_QuietNoticeWithoutLiveAgentIsSeenAtNextTurn: a quiet
// notice to a root whose agent never ran is logged without loading it,
// and read by the next turn.
func TestRoots_R78_QuietNoticeWithoutLiveAgentIsSeenAtNextTurn(t *testing.T) {
	t.Parallel()
	m := historyModel()
	w := newWorld(t, m)
	ctx := inprocesstest.Ctx(t)
	root := w.Parent.Session.ID
	msg := notice("kid-1")
	if err := w.roots.Notify(ctx, root, msg, true); err != nil {
		t.Fatal(err)
	}
	if live, _ := w.roots.Live(ctx, root); live {
		t.Fatal("a quiet notice loaded the agent")
	}
	if evs := w.Log(t, root); len(evs) != 1 || evs[0].Type != sessionlog.EventUserMessage {
		t.Fatalf("log = %v, want the notice alone", inprocesstest.Types(evs))
	}
	w.prompt(t, "next", 1)
	req := m.Requests()[0]
	if len(req.Messages) != 2 || model.Text(req.Messages[0].Content) != model.Text(msg.Content) {
		t.Errorf("first turn's history = %+v, want the notice before the prompt", req.Messages)
	}
	if msgs := userMessages(t, w.Log(t, root)); msgs[0].Source != msg.Source {
		t.Errorf("notice source = %+v", msgs[0].Source)
	}
	for _, quiet := range []bool{true, false} {
		if err := w.roots.Notify(ctx, "missing", msg, quiet); subagent.ErrorCode(err) != subagent.ESessionNotFound {
			t.Errorf("unknown parent (quiet %v): %v", quiet, err)
		}
		child := w.NewSession(t, store.Session{ParentID: root, Origin: "subagent", DelegationDepth: 1})
		if err := w.roots.Notify(ctx, child.ID, msg, quiet); subagent.ErrorCode(err) != subagent.EInvalidRequest {
			t.Errorf("child parent (quiet %v): %v", quiet, err)
		}
	}
}

// TestRoots_R78_WakingNoticeWithoutLiveAgentOpensTurn: a waking notice to
// a root whose agent never ran — or was closed idle — loads the agent,
// which opens a turn with it, once.
func TestRoots_R78_WakingNoticeWithoutLiveAgentOpensTurn(t *testing.T) {
	t.Parallel()
	m := historyModel()
	w := newWorld(t, m)
	ctx := inprocesstest.Ctx(t)
	root := w.Parent.Session.ID
	first := notice("kid-1")
	if err := w.roots.Notify(ctx, root, first, false); err != nil {
		t.Fatal(err)
	}
	w.waitTurnEnd(t, root, 1)
	if n, err := w.roots.CloseIdle(ctx, time.Now()); err != nil || n != 1 {
		t.Fatalf("CloseIdle = %d, %v", n, err)
	}
	second := notice("kid-2")
	if err := w.roots.Notify(ctx, root, second, false); err != nil {
		t.Fatal(err)
	}
	w.waitTurnEnd(t, root, 2)
	msgs := userMessages(t, w.Log(t, root))
	if len(msgs) != 2 || msgs[0].Source != first.Source || msgs[1].Source != second.Source {
		t.Errorf("user messages = %+v, want each notice once, as a turn of its own", msgs)
	}
	if rows, err := w.Store.Pending(ctx, root); err != nil || len(rows) != 0 {
		t.Errorf("inbox after the turns: %+v, %v", rows, err)
	}
}

func TestRoots_R78_NoticeToIdleAgentOpensTurn(t *testing.T) {
	t.Parallel()
	m := historyModel()
	w := newWorld(t, m)
	ctx := inprocesstest.Ctx(t)
	root := w.Parent.Session.ID
	w.prompt(t, "one", 1)
	msg := notice("kid-2")
	if err := w.roots.Notify(ctx, root, msg, false); err != nil {
		t.Fatal(err)
	}
	w.waitTurnEnd(t, root, 2)
	msgs := userMessages(t, w.Log(t, root))
	if len(msgs) != 2 || msgs[1].Source != msg.Source {
		t.Errorf("user messages = %+v, want the notice as turn 2", msgs)
	}
}

func TestRoots_R78_NoticeToBusyAgentJoinsNextStep(t *testing.T) {
	t.Parallel()
	gate := make(chan struct{})
	m := scripted.Func(func(req model.Request) scripted.Step {
		if lastText(req) == "work" {
			return scripted.Step{Text: "working", Gate: gate}
		}
		return scripted.Step{Text: "noted"}
	})
	w := newWorld(t, m)
	ctx, root := w.busyRoot(t, "work")
	msg := notice("kid-3")
	if err := w.roots.Notify(ctx, root, msg, false); err != nil {
		t.Fatal(err)
	}
	// The steer is in the next-step inbox before the step may end.
	w.WaitEvent(t, root, func(e store.Event) bool {
		if e.Type != sessionlog.EventInboxSpliced {
			return false
		}
		var d sessionlog.InboxSplicedData
		return json.Unmarshal(e.Data, &d) == nil && d.Target == sessionlog.TargetNextStep && len(d.Inserted) == 1
	})
	close(gate)
	end := w.waitTurnEnd(t, root, 1)
	if end.Reason.Kind != sessionlog.ReasonCompleted {
		t.Errorf("turn end = %+v", end)
	}
	evs := w.Log(t, root)
	if n := len(inprocesstest.OfType(evs, sessionlog.EventTurnStart)); n != 1 {
		t.Errorf("%d turns, want the notice inside the running turn", n)
	}
	msgs := userMessages(t, evs)
	if len(msgs) != 2 || msgs[1].Source != msg.Source {
		t.Errorf("user messages = %+v", msgs)
	}
	reqs := m.Requests()
	if len(reqs) != 2 || lastText(reqs[1]) != model.Text(msg.Content) {
		t.Errorf("%d model steps; the second did not end with the notice", len(reqs))
	}
}

func TestRoots_CloseEndsRunningTurnAndKeepsNotices(t *testing.T) {
	t.Parallel()
	m := scripted.Func(func(req model.Request) scripted.Step { return scripted.Step{Text: "never", Gate: make(chan struct{})} })
	w := newWorld(t, m)
	ctx, root := w.busyRoot(t, "x")
	msg := notice("kid-4")
	if err := w.roots.Notify(ctx, root, msg, false); err != nil {
		t.Fatal(err)
	}
	if err := w.roots.Close(ctx); err != nil {
		t.Fatal(err)
	}
	end := w.waitTurnEnd(t, root, 1)
	if end.Reason.Kind != sessionlog.ReasonAborted || end.Reason.Cause == nil || end.Reason.Cause.Kind != sessionlog.CauseDisposed {
		t.Errorf("turn end = %+v, want aborted by disposal", end)
	}
	// The steer was rejected by the close and the notice went to the log.
	var found bool
	for _, m := range userMessages(t, w.Log(t, root)) {
		found = found || m.ID == msg.ID && m.Source == msg.Source
	}
	if !found {
		t.Errorf("notice lost: %v", inprocesstest.Types(w.Log(t, root)))
	}
	if err := w.roots.Notify(ctx, root, msg, false); err != nil {
		t.Errorf("notice after Close: %v", err)
	}
}

// TestRoots_R78_NoticeSteerRejectedBecomesTurn checks that a notice steered
// into a turn that then fails is not lost: it opens the next turn.
func TestRoots_R78_NoticeSteerRejectedBecomesTurn(t *testing.T) {
	t.Parallel()
	gate := make(chan struct{})
	m := scripted.Func(func(req model.Request) scripted.Step {
		if lastText(req) == "work" {
			return scripted.Step{Gate: gate, Err: errors.New("model down")}
		}
		return scripted.Step{Text: "noted"}
	})
	w := newWorld(t, m)
	ctx, root := w.busyRoot(t, "work")
	msg := notice("kid-5")
	if err := w.roots.Notify(ctx, root, msg, false); err != nil {
		t.Fatal(err)
	}
	close(gate)
	if end := w.waitTurnEnd(t, root, 1); end.Reason.Kind != sessionlog.ReasonError {
		t.Errorf("turn 1 end = %+v, want error", end)
	}
	w.waitTurnEnd(t, root, 2)
	msgs := userMessages(t, w.Log(t, root))
	if len(msgs) != 2 || msgs[1].Source != msg.Source {
		t.Errorf("user messages = %+v, want the notice as turn 2", msgs)
	}
}

// TestRoots_R110_RejectedNoticesKeepTheirOrder: notices steered into a turn
// that then fails are delivered again in the order they were accepted; and
// while a queued prompt could start another turn, a later notice waits for
// the earlier one's admission instead of joining a turn the earlier one may
// already have been rejected from.
func TestRoots_R110_RejectedNoticesKeepTheirOrder(t *testing.T) {
	t.Parallel()
	for _, queued := range []bool{false, true} {
		fail := make(chan struct{})
		m := scripted.Func(func(req model.Request) scripted.Step {
			if lastText(req) == "work" {
				return scripted.Step{Gate: fail, Err: errors.New("model down")}
			}
			return scripted.Step{Text: "noted"}
		})
		w := newWorld(t, m)
		ctx := inprocesstest.Ctx(t)
		root := w.Parent.Session.ID
		prompts := []string{"work"}
		if queued {
			prompts = append(prompts, "queued")
		}
		for _, p := range prompts {
			if _, err := w.roots.Prompt(ctx, root, inprocesstest.Text(p)); err != nil {
				t.Fatal(err)
			}
		}
		w.WaitEvent(t, root, inprocesstest.Type(sessionlog.EventStepStart))
		first, second := notice("kid-a"), notice("kid-b")
		for _, n := range []sessionlog.UserMessage{first, second} {
			if err := w.roots.Notify(ctx, root, n, false); err != nil {
				t.Fatal(err)
			}
		}
		steered := 0
		for _, e := range inprocesstest.OfType(w.Log(t, root), sessionlog.EventInboxSpliced) {
			if d := inprocesstest.Decode[sessionlog.InboxSplicedData](t, e); d.Target == sessionlog.TargetNextStep {
				steered += len(d.Inserted)
			}
		}
		if want := map[bool]int{false: 2, true: 1}[queued]; steered != want {
			t.Errorf("queued prompt %t: %d notices steered before the turn ended, want %d", queued, steered, want)
		}
		close(fail)
		w.WaitEvent(t, root, func(e store.Event) bool {
			return e.Type == sessionlog.EventUserMessage && inprocesstest.Decode[sessionlog.UserMessage](t, e).ID == second.ID
		})
		var ids []string
		for _, msg := range userMessages(t, w.Log(t, root)) {
			if msg.ID == first.ID || msg.ID == second.ID {
				ids = append(ids, msg.ID)
			}
		}
		if len(ids) != 2 || ids[0] != first.ID {
			t.Errorf("queued prompt %t: notices logged as %q, want %s then %s", queued, ids, first.ID, second.ID)
		}
	}
}

// TestRoots_MailboxPromptsAQueuedAtCloseRunOnceAfterRecover checks the
// durable mailbox of roots: prompts a busy root accepted are inbox rows
// until the log holds them, so a shutdown that discards the agent's queue
// loses none — the next process's Recover runs each once, and a second
// Recover runs nothing again.
func TestRoots_MailboxPromptsQueuedAtCloseRunOnceAfterRecover(t *testing.T) {
	t.Parallel()
	hold := make(chan struct{}) // never closed: the first turn runs until Close
	m := scripted.Func(func(req model.Request) scripted.Step {
		if lastText(req) == "hold" {
			return scripted.Step{Text: "never", Gate: hold}
		}
		return scripted.Step{Text: "saw " + lastText(req)}
	})
	w := newWorld(t, m)
	ctx, root := w.busyRoot(t, "hold")
	var ids []string
	for _, text := range []string{"a", "b"} {
		id, err := w.roots.Prompt(ctx, root, inprocesstest.Text(text))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	pendingIDs := func() []string {
		t.Helper()
		rows, err := w.Store.Pending(ctx, root)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, r := range rows {
			out = append(out, r.ID)
		}
		return out
	}
	if got := pendingIDs(); !slices.Equal(got, ids) {
		t.Fatalf("inbox of the busy root = %v, want the queued prompts %v", got, ids)
	}
	if err := w.roots.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if got := pendingIDs(); !slices.Equal(got, ids) {
		t.Fatalf("inbox after Close = %v, want the prompts it discarded unrun %v", got, ids)
	}

	cfg := roots.ManagerConfig{Store: w.Store, Routes: w.Deps.Routes, Tools: w.Tools, Logger: w.Logger}
	next := roots.NewManager(cfg)
	if err := next.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	w.waitTurnEnd(t, root, 3)
	if err := next.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if got := pendingIDs(); len(got) != 0 {
		t.Fatalf("inbox after the recovered turns = %v, want empty", got)
	}
	again := roots.NewManager(cfg)
	if err := again.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if err := again.Close(ctx); err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	var texts []string
	for _, msg := range userMessages(t, w.Log(t, root)) {
		count[msg.ID]++
		texts = append(texts, model.Text(msg.Content))
	}
	if strings.Join(texts, ",") != "hold,a,b" || count[ids[0]] != 1 || count[ids[1]] != 1 {
		t.Fatalf("root log user messages %v (by id %v), want hold, a, b once each", texts, count)
	}
}

// TestRoots_R108_AQuietNoticeAwaitingAdmissionIsAQuietRow: a quiet notice
// steered into a busy root's turn waits for admission as a quiet inbox row
// — what a crash then leaves recovery delivers without waking the root —
// and a waking one as a waking row.
func TestRoots_R108_AQuietNoticeAwaitingAdmissionIsAQuietRow(t *testing.T) {
	t.Parallel()
	hold := make(chan struct{}) // never closed: the turn runs until Close
	w := newWorld(t, scripted.Func(func(model.Request) scripted.Step { return scripted.Step{Text: "never", Gate: hold} }))
	ctx, root := w.busyRoot(t, "hold")
	for _, quiet := range []bool{true, false} {
		msg := sessionlog.UserMessage{Content: inprocesstest.Text(strconv.FormatBool(quiet)), Source: reportSource("k")}
		if err := w.roots.Notify(ctx, root, msg, quiet); err != nil {
			t.Fatal(err)
		}
	}
	rows, err := w.Store.Pending(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	var got []bool
	for _, r := range rows {
		got = append(got, r.Quiet)
	}
	if !slices.Equal(got, []bool{true, false}) {
		t.Errorf("inbox rows quiet %v, want the quiet notice's row quiet, the other not", got)
	}
}
