package pg_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"

	"github.com/subagentd/subagentd/internal/children"
	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/model/scripted"
	"github.com/subagentd/subagentd/internal/pg"
	"github.com/subagentd/subagentd/internal/pg/pgtest"
	"github.com/subagentd/subagentd/internal/providers/inprocess/inprocesstest"
	"github.com/subagentd/subagentd/internal/roots"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// Quiet messages across a restart (R108, R118): a quiet report
// a crash left in a resident agent's inbox is delivered after the restart
// still without waking it — recovery starts nothing for it, and the next
// turn something else starts reads it first.

// quietReport is the inbox row of a quiet report from child k to
// recipient, as a crash leaves it: accepted, not yet in the log.
func quietReport(t *testing.T, recipient string) store.InboxMessage {
	t.Helper()
	row, err := children.InboxRow(recipient, sessionlog.UserMessage{Content: inprocesstest.Text("Background subagent k reported: found it"),
		Source: sessionlog.Source{Kind: subagent.SourceSubagentReport, Form: "relay", SenderSessionID: "k"}})
	if err != nil {
		t.Fatal(err)
	}
	row.Quiet = true
	return row
}

// pendingIDs returns the ids of session id's inbox rows.
func pendingIDs(t *testing.T, st store.Store, id string) []string {
	t.Helper()
	rows, err := st.Pending(inprocesstest.Ctx(t), id)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range rows {
		ids = append(ids, r.ID)
	}
	return ids
}

func TestRoots_R108_QuietReportLeftByACrashWakesNothingAfterRestart(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	ctx := inprocesstest.Ctx(t)
	mdl := scripted.Func(func(model.Request) scripted.Step { return scripted.Step{Text: "ok"} })
	// roots starts a process: a roots.Manager over its own pool on the database.
	roots := func() (*inprocesstest.Harness, *roots.Manager) {
		st, err := pg.New(ctx, openPool(t, url), discard())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(st.Close)
		h := inprocesstest.New(t, inprocesstest.Config{Routes: []model.Route{inprocesstest.Route("script", mdl)}, Store: st})
		r := roots.NewManager(roots.ManagerConfig{Store: st, Routes: h.Deps.Routes, Tools: h.Tools, Logger: h.Logger})
		t.Cleanup(func() {
			if err := r.Close(context.Background()); err != nil {
				t.Errorf("close roots: %v", err)
			}
		})
		return h, r
	}
	first, _ := roots()
	root := first.Parent.Session.ID
	report := quietReport(t, root)
	if err := first.Store.Enqueue(ctx, report); err != nil {
		t.Fatal(err)
	}

	second, next := roots()
	if err := next.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	// No agent loaded means no turn can start.
	if live, _ := next.Live(ctx, root); live {
		t.Error("recovering a quiet report loaded the root's agent")
	}
	if got := pendingIDs(t, second.Store, root); len(got) != 0 {
		t.Errorf("inbox after recovery %v, want the report delivered", got)
	}
	evs := second.Log(t, root)
	if msgs := inprocesstest.OfType(evs, sessionlog.EventUserMessage); len(msgs) != 1 ||
		inprocesstest.Decode[sessionlog.UserMessage](t, msgs[0]).ID != report.ID {
		t.Errorf("root log after recovery: %v, want the report as its one user message", inprocesstest.Types(evs))
	}
	if n := len(inprocesstest.OfType(evs, sessionlog.EventTurnStart)); n != 0 {
		t.Errorf("%d turns after recovering a quiet report", n)
	}

	if _, err := next.Prompt(ctx, root, inprocesstest.Text("question")); err != nil {
		t.Fatal(err)
	}
	second.WaitEvent(t, root, inprocesstest.Type(sessionlog.EventTurnEnd))
	reqs := mdl.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d model requests, want the prompt's one turn", len(reqs))
	}
	var got []string
	for _, m := range reqs[0].Messages {
		got = append(got, model.Text(m.Content))
	}
	if want := []string{"Background subagent k reported: found it", "question"}; !slices.Equal(got, want) {
		t.Errorf("the prompt's turn read %q, want %q", got, want)
	}
}

func TestManager_R108_QuietReportLeftByACrashWaitsForTheNextFollowup(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	ctx := inprocesstest.Ctx(t)
	first := newProcess(t, url)
	parent := first.h.Parent
	res := first.start(t, parent, "one")
	first.end(t, res.TaskID)
	report := quietReport(t, res.ChildID)
	if err := first.h.Store.Enqueue(ctx, report); err != nil {
		t.Fatal(err)
	}

	second := newProcess(t, url)
	if err := second.m.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	// Recover starts an activation before it returns, if it starts one.
	runs, err := second.h.Store.ListRuns(ctx, store.RunFilter{ChildID: res.ChildID})
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 1 || runs[0].State == store.StateRunning {
		data, _ := json.Marshal(runs)
		t.Errorf("runs after recovering a quiet report: %s, want only the first, settled", data)
	}
	if got := pendingIDs(t, second.h.Store, res.ChildID); !slices.Equal(got, []string{report.ID}) {
		t.Errorf("inbox after recovery %v, want the report still waiting", got)
	}

	f, err := second.m.Followup(ctx, parent.Session.ID, res.ChildID, inprocesstest.Text("two"), sessionlog.Source{})
	if err != nil || f.Route != subagent.RouteStarted {
		t.Fatalf("followup %+v, %v", f, err)
	}
	if end := second.end(t, f.TaskID); model.Text(end.LastAssistantMessage) != "re: two" {
		t.Errorf("the followup's epoch ended %+v", end)
	}
	if got, want := second.userTexts(t, res.ChildID), []string{"one", "Background subagent k reported: found it", "two"}; !slices.Equal(got, want) {
		t.Errorf("child user messages %q, want %q", got, want)
	}
	if got := pendingIDs(t, second.h.Store, res.ChildID); len(got) != 0 {
		t.Errorf("inbox after the followup %v", got)
	}
}
