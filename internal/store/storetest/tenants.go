package storetest

import (
	"testing"

	"github.com/subagentd/subagentd/internal/store"
)

var tenantTests = []test{
	{"OtherTenantsSessionsAreNotFound", func(t *testing.T, s store.Store) {
		ctx, acme := t.Context(), other(t.Context())
		ok(t, s.CreateSession(acme, store.Session{ID: "a1", CreatedAt: t0}))
		ok(t, s.CreateSession(acme, child("a2", "a1", sec(1))))
		must(s.AppendEvents(acme, "a1", numbered(2)...))(t)
		newSession(t, s, "d1")

		_, err := s.GetSession(ctx, "a1")
		isErr(t, err, store.ErrNotFound, "GetSession(other tenant's session)")
		_, err = s.AppendEvents(ctx, "a1", numbered(1)...)
		isErr(t, err, store.ErrNotFound, "AppendEvents(other tenant's session)")
		_, err = s.Events(ctx, "a1", -1, 0)
		isErr(t, err, store.ErrNotFound, "Events(other tenant's session)")
		_, err = s.EventsBefore(ctx, "a1", 10, 0)
		isErr(t, err, store.ErrNotFound, "EventsBefore(other tenant's session)")
		_, err = s.ListSessions(ctx, store.SessionFilter{AfterID: "a1"})
		isErr(t, err, store.ErrNotFound, "ListSessions(after other tenant's session)")
		sameIDs(t, "ListSessions(default tenant)", listIDs(must(s.ListSessions(ctx, store.SessionFilter{}))(t)), []string{"d1"})
		sameIDs(t, "ListSessions(children of other tenant's session)", listIDs(must(s.ListSessions(ctx, store.SessionFilter{ParentID: ptr("a1")}))(t)), nil)

		sameIDs(t, "ListSessions(acme)", listIDs(must(s.ListSessions(acme, store.SessionFilter{}))(t)), []string{"a1", "a2"})
		checkSeqs(t, "acme's log", must(s.AppendEvents(acme, "a1", numbered(1)...))(t), 2)
	}},
	{"OtherTenantsRunsAndLifecycleAreInvisible", func(t *testing.T, s store.Store) {
		ctx, acme := t.Context(), other(t.Context())
		r := oneShot("r1", "p1", t0)
		must(s.StartRun(acme, r, startEvent(r)))(t)
		must(s.AppendLifecycle(acme, lifecycleEvent("subagent/provider-added", "", "")))(t)

		_, err := s.GetRun(ctx, "r1")
		isErr(t, err, store.ErrNotFound, "GetRun(other tenant's run)")
		_, err = s.EndRun(ctx, "r1", completed, endEvent("r1", "p1"))
		isErr(t, err, store.ErrNotFound, "EndRun(other tenant's run)")
		isErr(t, s.DisposeRun(ctx, "r1"), store.ErrNotFound, "DisposeRun(other tenant's run)")
		_, err = s.ListRuns(ctx, store.RunFilter{AfterID: "r1"})
		isErr(t, err, store.ErrNotFound, "ListRuns(after other tenant's run)")
		sameIDs(t, "ListRuns(default tenant)", runIDs(must(s.ListRuns(ctx, store.RunFilter{}))(t)), nil)
		if n := lifecycleCount(t, s); n != 0 {
			t.Fatalf("default tenant sees %d of acme's lifecycle events", n)
		}

		if got := must(s.GetRun(acme, "r1"))(t); got.State != store.StateRunning {
			t.Fatalf("acme's run state = %q after the default tenant's EndRun, want running", got.State)
		}
		if n := len(must(s.Lifecycle(acme, store.LifecycleFilter{}))(t)); n != 2 {
			t.Fatalf("acme sees %d lifecycle events, want 2", n)
		}
	}},
	{"OtherTenantsInboxIsInvisible", func(t *testing.T, s store.Store) {
		ctx, acme := t.Context(), other(t.Context())
		ok(t, s.Enqueue(acme, followup("m1", "c")))
		if got := must(s.Pending(ctx, "c"))(t); len(got) != 0 {
			t.Fatalf("default tenant sees acme's inbox: %s", show(got))
		}
		ok(t, s.Ack(ctx, "c", "m1"))
		sameList(t, "acme's Pending after another tenant's Ack", must(s.Pending(acme, "c"))(t), []store.InboxMessage{followup("m1", "c")}, canonInbox)
	}},
}
