package http

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/children"
	"github.com/subagentd/subagentd/internal/memstore"
	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/pg/pgtest"
	"github.com/subagentd/subagentd/internal/providers/spawn"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// notices returns the settlement notices in log, in order.
func notices(t *testing.T, log []store.Event) []sessionlog.UserMessage {
	t.Helper()
	var out []sessionlog.UserMessage
	for _, e := range log {
		if e.Type != sessionlog.EventUserMessage {
			continue
		}
		var m sessionlog.UserMessage
		if err := json.Unmarshal(e.Data, &m); err != nil {
			t.Fatal(err)
		}
		if m.Source.Kind == subagent.SourceSubagentSettled {
			out = append(out, m)
		}
	}
	return out
}

// countType counts the events of type typ in log.
func countType(log []store.Event, typ string) int {
	n := 0
	for _, e := range log {
		if e.Type == typ {
			n++
		}
	}
	return n
}

// TestNotices_R78_RESTChildWakesItsRootOnlyWhenAsked: a child a client
// starts under a root whose agent never ran notifies it quietly by
// default — the notice is in the root's log, naming the child's label, and
// no turn opens; one started with notifyParent "wake" opens the root's
// turn, which reads both notices. A notifyParent outside the enum is 400.
// On both stores.
func TestNotices_R78_RESTChildWakesItsRootOnlyWhenAsked(t *testing.T) {
	for name, st := range bothStores {
		t.Run(name, func(t *testing.T) {
			mdl := replying(nil)
			w := setupWorldWith(t, st(t), scriptedRoute("main", mdl))
			root := w.rootSession(t)
			w.wantProblem(t, http.StatusBadRequest, subagent.EInvalidRequest, call{method: http.MethodPost, path: "/v1/subagents", invalid: true,
				body: map[string]any{"provider": spawn.Name, "parentSessionId": root, "label": "x", "prompt": textPrompt("x"), "notifyParent": "loud"}})

			quiet := w.startChild(t, root, "quiet work", nil)
			w.settledTask(t, quiet.TaskID)
			// The notice precedes the recorded end (R76).
			log := w.sessionLog(t, root)
			if ns := notices(t, log); len(ns) != 1 || ns[0].Source.SenderSessionID != quiet.ChildID || ns[0].Source.Label != "researcher" {
				t.Fatalf("root notices %+v, want the quiet child's, with its label", ns)
			}
			if n := countType(log, sessionlog.EventTurnStart); n != 0 {
				t.Fatalf("a quiet notice opened %d root turns", n)
			}
			if rows, err := w.st.Pending(t.Context(), root); err != nil || len(rows) != 0 {
				t.Fatalf("root inbox %+v, %v: want the quiet notice logged, not pending", rows, err)
			}

			woken := w.startChild(t, root, "loud work", map[string]any{"notifyParent": "wake"})
			w.settledTask(t, woken.TaskID)
			eventually(t, "the root's turn on the waking notice", func() bool {
				return countType(w.sessionLog(t, root), sessionlog.EventTurnEnd) == 1
			})
			log = w.sessionLog(t, root)
			if ns := notices(t, log); len(ns) != 2 || ns[1].Source.SenderSessionID != woken.ChildID || ns[1].Source.Label != "researcher" {
				t.Fatalf("root notices %+v", ns)
			}
			var turn *model.Request
			for _, req := range mdl.Requests() {
				if strings.Contains(model.Text(req.Messages[len(req.Messages)-1].Content), woken.ChildID) {
					turn = &req
				}
			}
			if turn == nil || len(turn.Messages) != 2 || !strings.Contains(model.Text(turn.Messages[0].Content), quiet.ChildID) {
				t.Fatalf("the root's turn read %+v, want the quiet notice, then the waking one", turn)
			}
		})
	}
}

// TestNotices_R78_RootRestartedWithQuietNoticesPending: a quiet notice
// still in a root's durable inbox when its process stopped (accepted, not
// yet logged) is logged by the next process's recovery without opening a
// turn, and read by the root's next prompted turn; a waking one left
// beside it opens a turn at recovery. On both stores, the Postgres one
// reopened over the same database.
func TestNotices_R78_RootRestartedWithQuietNoticesPending(t *testing.T) {
	for name, stores := range map[string]func(t *testing.T) (before, after store.Store){
		"memstore": func(*testing.T) (store.Store, store.Store) { s := memstore.New(); return s, s },
		"pg": func(t *testing.T) (store.Store, store.Store) {
			url := pgtest.URL(t)
			return pgStoreAt(t, url), pgStoreAt(t, url)
		},
	} {
		t.Run(name, func(t *testing.T) {
			before, after := stores(t)
			ctx := t.Context()
			quietRoot := store.Session{ID: "quiet-root", Label: "root", CreatedAt: time.Now()}
			wakingRoot := store.Session{ID: "waking-root", Label: "root", CreatedAt: time.Now()}
			for _, s := range []store.Session{quietRoot, wakingRoot} {
				if err := before.CreateSession(ctx, s); err != nil {
					t.Fatal(err)
				}
			}
			// The rows Notify accepts, as the previous process left them.
			pending := func(root, child string, quiet bool) store.InboxMessage {
				t.Helper()
				row, err := children.InboxRow(root, sessionlog.UserMessage{
					Content: []model.Block{model.TextBlock("Background subagent " + child + " finished and will do no further work unless you send it more."),
						model.TextBlock("It left no closing message.")},
					Source: sessionlog.Source{Kind: subagent.SourceSubagentSettled, Form: "notice", SenderSessionID: child, Label: "researcher"}})
				if err != nil {
					t.Fatal(err)
				}
				row.Quiet = quiet
				if err := before.Enqueue(ctx, row); err != nil {
					t.Fatal(err)
				}
				return row
			}
			pending(quietRoot.ID, "kid-a", true)
			pending(quietRoot.ID, "kid-b", true)
			pending(wakingRoot.ID, "kid-c", false)

			mdl := replying(nil)
			w := setupWorldWith(t, []func(*Config){func(c *Config) { c.Store = after }}, scriptedRoute("main", mdl))
			if err := w.roots.Recover(ctx); err != nil {
				t.Fatal(err)
			}
			log := w.sessionLog(t, quietRoot.ID)
			if ns := notices(t, log); len(ns) != 2 || ns[0].Source.SenderSessionID != "kid-a" || ns[1].Source.SenderSessionID != "kid-b" {
				t.Fatalf("quiet root's notices after recovery %+v", ns)
			}
			if n := countType(log, sessionlog.EventTurnStart); n != 0 {
				t.Fatalf("quiet notices opened %d turns at recovery", n)
			}
			if rows, err := w.st.Pending(ctx, quietRoot.ID); err != nil || len(rows) != 0 {
				t.Fatalf("quiet root's inbox after recovery %+v, %v", rows, err)
			}
			eventually(t, "the waking notice's turn", func() bool {
				return countType(w.sessionLog(t, wakingRoot.ID), sessionlog.EventTurnEnd) == 1
			})

			w.want(t, http.StatusAccepted, call{method: http.MethodPost, path: "/v1/sessions/" + quietRoot.ID + "/messages",
				body: map[string]any{"content": textPrompt("what happened?")}})
			eventually(t, "the quiet root's prompted turn", func() bool {
				return countType(w.sessionLog(t, quietRoot.ID), sessionlog.EventTurnEnd) == 1
			})
			var turn *model.Request
			for _, req := range mdl.Requests() {
				if model.Text(req.Messages[len(req.Messages)-1].Content) == "what happened?" {
					turn = &req
				}
			}
			if turn == nil || len(turn.Messages) != 3 || !strings.Contains(model.Text(turn.Messages[0].Content), "kid-a") ||
				!strings.Contains(model.Text(turn.Messages[1].Content), "kid-b") {
				t.Fatalf("the prompted turn read %+v, want both quiet notices before the prompt", turn)
			}
			if n := countType(w.sessionLog(t, quietRoot.ID), sessionlog.EventTurnStart); n != 1 {
				t.Fatalf("%d turns of the quiet root, want the prompted one alone", n)
			}
		})
	}
}
