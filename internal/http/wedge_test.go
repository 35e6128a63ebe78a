package http

import (
	"net/http"
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// bothStores gives a world's options for each store: the default
// memstore, and Postgres.
var bothStores = map[string]func(t *testing.T) []func(*Config){
	"memstore": func(*testing.T) []func(*Config) { return nil },
	"pg": func(t *testing.T) []func(*Config) {
		s := pgStore(t)
		return []func(*Config){func(c *Config) { c.Store = s }}
	},
}

// TestSessions_RefusedPromptLeavesTheChildsLease: a prompt to a running
// continuable child's session is refused 400 without touching the lease
// the child's loop holds, so the child's turn still appends and settles
// completed, and a later followup and interrupt are answered — on both
// stores, with the resident leases of a real deployment.
func TestSessions_RefusedPromptLeavesTheChildsLease(t *testing.T) {
	for name, st := range bothStores {
		t.Run(name, func(t *testing.T) {
			held, later := newGate(), newGate()
			w := setupWorldWith(t, st(t), scriptedRoute("main", replying(map[string]gate{"hold": held, "later": later})))
			parent := w.rootSession(t)
			child := w.startChild(t, parent, "hold", nil)
			await(t, held.reached, "the child's model call")

			w.wantProblem(t, http.StatusBadRequest, subagent.EInvalidRequest, call{method: http.MethodPost,
				path: "/v1/sessions/" + child.ChildID + "/messages", body: map[string]any{"content": textPrompt("x")}})
			lease, err := w.st.GetResident(t.Context(), child.ChildID)
			if err != nil || lease.Owner != "test" {
				t.Fatalf("child's lease after the refused prompt: %+v, %v", lease, err)
			}

			close(held.open)
			if run := w.settledTask(t, child.TaskID); run.Result.StopReason != subagent.StopCompleted {
				t.Fatalf("child's first task %+v", run.Result)
			}
			next := w.followupOK(t, followup(child.ChildID, parent, "later"))
			if next.Route != subagent.RouteStarted {
				t.Fatalf("followup after settlement %+v", next)
			}
			await(t, later.reached, "the followup's model call")
			w.want(t, http.StatusAccepted, interrupt(child.ChildID, parent))
			if run := w.settledTask(t, next.TaskID); run.Result.StopReason != subagent.StopAborted {
				t.Fatalf("interrupted task %+v", run.Result)
			}
		})
	}
}

// TestSubagents_FencedActivationSettlesOnce: when a running child's lease
// is lost under its loop, its turn's writes are fenced; the activation
// still settles — the loop reclaims the lease — with exactly one
// subagent/end, no endless retry, and the child answers the next
// followup.
func TestSubagents_FencedActivationSettlesOnce(t *testing.T) {
	for name, st := range bothStores {
		t.Run(name, func(t *testing.T) {
			held := newGate()
			w := setupWorldWith(t, st(t), scriptedRoute("main", replying(map[string]gate{"hold": held})))
			parent := w.rootSession(t)
			child := w.startChild(t, parent, "hold", nil)
			await(t, held.reached, "the child's model call")
			if err := w.st.ReleaseResident(t.Context(), child.ChildID, "test"); err != nil {
				t.Fatal(err)
			}
			close(held.open)
			run := w.settledTask(t, child.TaskID)
			ends, err := w.st.Lifecycle(t.Context(), store.LifecycleFilter{Types: []string{subagent.EventEnd}, Limit: 1000})
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, e := range ends {
				if e.RunID == run.RunID {
					n++
				}
			}
			if n != 1 {
				t.Fatalf("%d subagent/end rows for the fenced activation %s", n, run.RunID)
			}
			next := w.followupOK(t, followup(child.ChildID, parent, "again"))
			if next.Route != subagent.RouteStarted {
				t.Fatalf("followup after the fenced settlement %+v", next)
			}
			if run := w.settledTask(t, next.TaskID); run.Result.StopReason != subagent.StopCompleted {
				t.Fatalf("task after the fenced one %+v", run.Result)
			}
			// The loop releases the lease after the settling command.
			eventually(t, "the settled child's lease released", func() bool {
				lease, err := w.st.GetResident(t.Context(), child.ChildID)
				return err != nil || !lease.LeaseUntil.After(time.Now())
			})
		})
	}
}
