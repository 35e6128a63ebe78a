package storetest

import (
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/store"
)

// call returns an event that records one model call and, when reported,
// its tokens, as sessionlog.Encode marks a step's start and message.
func call(in, out int64, reported bool) []store.NewEvent {
	msg := ev("assistant/message", `{"turn":1,"step":1}`)
	if reported {
		msg.Usage = store.Usage{InputTokens: in, OutputTokens: out, Reported: 1}
	}
	start := ev("step/start", `{"turn":1,"step":1}`)
	start.Usage = store.Usage{ModelCalls: 1}
	return []store.NewEvent{start, msg}
}

// activation returns a running activation of continuable child under
// parent.
func activation(id, child, parent string, started time.Time) store.Run {
	r := oneShot(id, parent, started)
	r.Kind, r.ChildID, r.TaskID = store.KindActivation, child, "task-"+id
	return r
}

// settledWith returns completed with usage u, known or not.
func settledWith(u store.Usage, known bool) store.RunResult {
	res := completed
	res.Usage, res.UsageKnown = u, known
	return res
}

// usageByID returns the usages by session id, failing t on a duplicate.
func usageByID(t *testing.T, us []store.SessionUsage) map[string]store.SessionUsage {
	t.Helper()
	out := map[string]store.SessionUsage{}
	for _, u := range us {
		if _, dup := out[u.SessionID]; dup {
			t.Fatalf("SessionUsage lists %s twice: %v", u.SessionID, us)
		}
		out[u.SessionID] = u
	}
	return out
}

var usageTests = []test{
	{"RootID_InheritedFromTheStoredParent", func(t *testing.T, s store.Store) {
		ctx := t.Context()
		ok(t, s.CreateSession(ctx, store.Session{ID: "root", CreatedAt: t0}))
		ok(t, s.CreateSession(ctx, child("kid", "root", sec(1))))
		must(s.CreateSessionWithEvents(ctx, child("grandkid", "kid", sec(2)), numbered(1)...))(t)
		r := oneShot("r1", "grandkid", sec(3))
		must2(s.StartRunWithSession(ctx, store.StartRunParams{Session: child(r.ChildID, "grandkid", sec(3)), Events: numbered(1), Run: r, Start: startEvent(r)}))(t)
		ok(t, s.CreateSession(ctx, child("orphan", "nowhere", sec(4))))
		explicit := child("explicit", "nowhere", sec(5))
		explicit.RootID = "chosen"
		ok(t, s.CreateSession(ctx, explicit))
		for id, want := range map[string]string{"root": "root", "kid": "root", "grandkid": "root",
			r.ChildID: "root", "orphan": "nowhere", "explicit": "chosen"} {
			if got := must(s.GetSession(ctx, id))(t).RootID; got != want {
				t.Errorf("GetSession(%s).RootID = %q, want %q", id, got, want)
			}
		}
		kids := must(s.ListSessions(ctx, store.SessionFilter{ParentID: ptr("root")}))(t)
		if len(kids) != 1 || kids[0].RootID != "root" {
			t.Fatalf("ListSessions(parent root) = %v, want kid with root root", kids)
		}
	}},
	{"SessionUsage_SumsLogsAndRunsOfTheSessionOrItsTree", func(t *testing.T, s store.Store) {
		ctx := t.Context()
		ok(t, s.CreateSession(ctx, store.Session{ID: "root", CreatedAt: t0}))
		// The root's own turns: two calls, one reported.
		must(s.AppendEvents(ctx, "root", append(call(10, 3, true), call(0, 0, false)...)...))(t)

		// A one-shot child: a seed that records usage (a fork's) does not
		// count; its settlement's events and the run's usage do.
		seed := call(1000, 1000, true)
		r1 := oneShot("r1", "root", sec(1))
		must2(s.StartRunWithSession(ctx, store.StartRunParams{Session: child(r1.ChildID, "root", sec(1)), Events: seed, Run: r1, Start: startEvent(r1)}))(t)
		must(s.AppendEvents(ctx, r1.ChildID, call(5, 7, true)...))(t)
		must2(s.EndRunWithEvents(ctx, store.EndRunParams{RunID: "r1", Result: settledWith(store.Usage{InputTokens: 9, OutputTokens: 11, ModelCalls: 2, Reported: 2}, true), End: endEvent("r1", "root"), Events: call(4, 4, true)}))(t)

		// A continuable child: a known activation, an unknown one (its
		// provider reported none), one running under a live lease, one
		// running under a lapsed lease.
		ok(t, s.CreateSession(ctx, child("kid", "root", sec(2))))
		for i, id := range []string{"a1", "a2", "a3", "a4"} {
			a := activation(id, "kid", "root", sec(3+i))
			if id == "a4" {
				a.LeaseUntil = sec(-60)
			}
			startRun(t, s, a)
		}
		must(s.EndRun(ctx, "a1", settledWith(store.Usage{InputTokens: 100, OutputTokens: 50, ModelCalls: 3, Reported: 3}, true), endEvent("a1", "root")))(t)
		must(s.EndRun(ctx, "a2", settledWith(store.Usage{ModelCalls: 1}, false), endEvent("a2", "root")))(t)

		// A grandchild below the one-shot child, and a session of another tree.
		ok(t, s.CreateSession(ctx, child("grandkid", r1.ChildID, sec(8))))
		ok(t, s.CreateSession(ctx, store.Session{ID: "elsewhere", CreatedAt: sec(9)}))
		ok(t, s.CreateSession(ctx, child("stranger", "elsewhere", sec(9))))

		self := must(s.SessionUsage(ctx, "root", false, sec(0)))(t)
		want := store.SessionUsage{SessionID: "root", Log: store.Usage{InputTokens: 10, OutputTokens: 3, ModelCalls: 2, Reported: 1}}
		sameList(t, "SessionUsage(root, self)", self, []store.SessionUsage{want}, plain[store.SessionUsage])

		tree := must(s.SessionUsage(ctx, "root", true, sec(0)))(t)
		wantTree := []store.SessionUsage{want,
			{SessionID: r1.ChildID, ParentID: "root", Log: store.Usage{InputTokens: 9, OutputTokens: 11, ModelCalls: 2, Reported: 2},
				Runs: store.Usage{InputTokens: 9, OutputTokens: 11, ModelCalls: 2, Reported: 2}, RunCount: 1},
			{SessionID: "kid", ParentID: "root", Runs: store.Usage{InputTokens: 100, OutputTokens: 50, ModelCalls: 4, Reported: 3},
				Unknown: 1, RunCount: 4, LiveRuns: 1},
			{SessionID: "grandkid", ParentID: r1.ChildID},
		}
		sameList(t, "SessionUsage(root, tree)", tree, wantTree, plain[store.SessionUsage])
		usageByID(t, tree)

		sub := must(s.SessionUsage(ctx, r1.ChildID, true, sec(0)))(t)
		sameList(t, "SessionUsage(one-shot child, tree)", sub, []store.SessionUsage{wantTree[1], wantTree[3]}, plain[store.SessionUsage])

		_, err := s.SessionUsage(ctx, "nowhere", true, sec(0))
		isErr(t, err, store.ErrNotFound, "SessionUsage(unknown)")
		_, err = s.SessionUsage(other(ctx), "root", false, sec(0))
		isErr(t, err, store.ErrNotFound, "SessionUsage(another tenant's)")
	}},
	{"Lifecycle_RootIDKeepsOneTree", func(t *testing.T, s store.Store) {
		ctx := t.Context()
		inTree := func(e store.LifecycleEvent, root string) store.LifecycleEvent {
			e.RootID = root
			return e
		}
		evs := appendAll(t, s,
			lifecycleEvent("subagent/provider-added", "", ""),
			inTree(lifecycleEvent("subagent/start", "p1", "r1"), "tree-a"),
			inTree(lifecycleEvent("subagent/start", "c1", "r2"), "tree-a"),
			inTree(lifecycleEvent("subagent/start", "p2", "r3"), "tree-b"),
			inTree(lifecycleEvent("subagent/end", "p1", "r1"), "tree-a"),
		)
		for _, e := range evs[1:] {
			if e.RootID == "" {
				t.Fatalf("AppendLifecycle dropped the RootID: %v", e)
			}
		}
		want := []store.LifecycleEvent{evs[1], evs[2], evs[4]}
		sameList(t, "Lifecycle(root tree-a)", must(s.Lifecycle(ctx, store.LifecycleFilter{RootID: "tree-a"}))(t), want, canonLifecycle)
		sameList(t, "Lifecycle(root tree-a, after its first)",
			must(s.Lifecycle(ctx, store.LifecycleFilter{RootID: "tree-a", After: evs[1].ID}))(t), want[1:], canonLifecycle)
		sameList(t, "Lifecycle(root tree-a, type end)",
			must(s.Lifecycle(ctx, store.LifecycleFilter{RootID: "tree-a", Types: []string{"subagent/end"}}))(t), want[2:], canonLifecycle)
		sameList(t, "Lifecycle(all)", must(s.Lifecycle(ctx, store.LifecycleFilter{}))(t), evs, canonLifecycle)
		sameList(t, "Lifecycle(root tree-a, other tenant)", must(s.Lifecycle(other(ctx), store.LifecycleFilter{RootID: "tree-a"}))(t), nil, canonLifecycle)

		// A run's start and end carry its RootID, and so does its row.
		r := oneShot("r9", "p9", sec(1))
		r.RootID = "tree-c"
		start := startEvent(r)
		start.RootID = "tree-c"
		must(s.StartRun(ctx, r, start))(t)
		end := endEvent("r9", "p9")
		end.RootID = "tree-c"
		must(s.EndRun(ctx, "r9", completed, end))(t)
		got := must(s.Lifecycle(ctx, store.LifecycleFilter{RootID: "tree-c"}))(t)
		if len(got) != 2 || got[0].Type != "subagent/start" || got[1].Type != "subagent/end" {
			t.Fatalf("Lifecycle(root tree-c) = %v, want the run's start and end", got)
		}
		if row := must(s.GetRun(ctx, "r9"))(t); row.RootID != "tree-c" {
			t.Fatalf("GetRun(r9).RootID = %q, want tree-c", row.RootID)
		}
	}},
	{"EndRun_RecordsTheRunsUsage", func(t *testing.T, s store.Store) {
		ctx := t.Context()
		startRun(t, s, oneShot("r1", "p1", t0))
		u := store.Usage{InputTokens: 12, OutputTokens: 34, ModelCalls: 3, Reported: 2}
		must(s.EndRun(ctx, "r1", settledWith(u, false), endEvent("r1", "p1")))(t)
		got := must(s.GetRun(ctx, "r1"))(t)
		if got.Usage != u || got.UsageKnown {
			t.Fatalf("GetRun(r1) usage = %+v known %v, want %+v known false", got.Usage, got.UsageKnown, u)
		}
		startChildRun(t, s, "r2", 1)
		must2(s.EndRunWithEvents(ctx, store.EndRunParams{RunID: "r2", Result: settledWith(u, true), End: endEvent("r2", "p1"), Events: numbered(1)}))(t)
		got = must(s.GetRun(ctx, "r2"))(t)
		if got.Usage != u || !got.UsageKnown {
			t.Fatalf("GetRun(r2) usage = %+v known %v, want %+v known true", got.Usage, got.UsageKnown, u)
		}
	}},
}

// must2 is must for calls with two results.
func must2[A, B any](a A, b B, err error) func(t *testing.T) (A, B) {
	return func(t *testing.T) (A, B) {
		t.Helper()
		ok(t, err)
		return a, b
	}
}

// plain is the canon of values compared as they are.
func plain[T any](_ *testing.T, v T) T { return v }
