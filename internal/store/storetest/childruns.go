package storetest

import (
	"testing"

	"github.com/subagentd/subagentd/internal/store"
)

// startChildRun stores run id with its child session, whose log starts
// with n numbered events, and returns the run.
func startChildRun(t *testing.T, s store.Store, id string, n int) store.Run {
	t.Helper()
	r := oneShot(id, "p1", t0)
	_, _, err := s.StartRunWithSession(t.Context(), store.StartRunParams{Session: child(r.ChildID, "p1", t0), Events: numbered(n), Run: r, Start: startEvent(r)})
	ok(t, err)
	return r
}

// wantEvents fails t unless the session's log is want.
func wantEvents(t *testing.T, s store.Store, sessionID string, want []store.Event) {
	t.Helper()
	sameList(t, "Events("+sessionID+")", must(s.Events(t.Context(), sessionID, -1, 0))(t), want, canonEvent)
}

// asStored returns evs as a log stores them from seq from on.
func asStored(evs []store.NewEvent, from int64) []store.Event {
	out := make([]store.Event, len(evs))
	for i, e := range evs {
		out[i] = store.Event{Seq: from + int64(i), Type: e.Type, Time: e.Time, Data: e.Data}
	}
	return out
}

// childRunTests cover the one-commit start and settlement of a one-shot
// run together with its child's log.
var childRunTests = []test{
	{"StartRunWithSession_StoresChildRunAndStartAtOnce", func(t *testing.T, s store.Store) {
		ctx := t.Context()
		sessWake, stopS := s.Subscribe(store.SessionTopic("child-r1"))
		defer stopS()
		lifeWake, stopL := s.Subscribe(store.LifecycleTopic)
		defer stopL()
		r := oneShot("r1", "p1", t0)
		hdr := child(r.ChildID, "p1", t0)
		log, start, err := s.StartRunWithSession(ctx, store.StartRunParams{Session: hdr, Events: numbered(3), Run: r, Start: startEvent(r)})
		ok(t, err)
		waitWake(t, sessWake, "StartRunWithSession (session)")
		waitWake(t, lifeWake, "StartRunWithSession (lifecycle)")
		want := asStored(numbered(3), 0)
		sameList(t, "StartRunWithSession log", log, want, canonEvent)
		wantEvents(t, s, r.ChildID, want)
		same(t, "GetSession", must(s.GetSession(ctx, r.ChildID))(t), hdr, canonSession)
		wantRun := r
		wantRun.Tenant = store.DefaultTenant
		same(t, "GetRun", must(s.GetRun(ctx, "r1"))(t), wantRun, canonRun)
		wantStart := startEvent(r)
		wantStart.ID = start.ID
		same(t, "start", start, wantStart, canonLifecycle)
		stored := must(s.Lifecycle(ctx, store.LifecycleFilter{}))(t)
		sameList(t, "Lifecycle", stored, []store.LifecycleEvent{wantStart}, canonLifecycle)
		checkSeqs(t, "AppendEvents after", must(s.AppendEvents(ctx, r.ChildID, numbered(1)...))(t), 3)
	}},
	{"StartRunWithSession_ConflictOrBadEventStoresNothing", func(t *testing.T, s store.Store) {
		ctx := t.Context()
		newSession(t, s, "child-r1")
		r := oneShot("r1", "p1", t0)
		_, _, err := s.StartRunWithSession(ctx, store.StartRunParams{Session: child(r.ChildID, "p1", t0), Events: numbered(2), Run: r, Start: startEvent(r)})
		isErr(t, err, store.ErrConflict, "StartRunWithSession(existing session)")
		_, err = s.GetRun(ctx, "r1")
		isErr(t, err, store.ErrNotFound, "GetRun after a conflicting session")
		wantEvents(t, s, "child-r1", []store.Event{})

		startRun(t, s, oneShot("r2", "p1", t0))
		r3 := oneShot("r2", "p1", t0)
		r3.ChildID = "child-r3"
		_, _, err = s.StartRunWithSession(ctx, store.StartRunParams{Session: child("child-r3", "p1", t0), Events: numbered(2), Run: r3, Start: startEvent(r3)})
		isErr(t, err, store.ErrConflict, "StartRunWithSession(existing run)")
		_, err = s.GetSession(ctx, "child-r3")
		isErr(t, err, store.ErrNotFound, "GetSession after a conflicting run")

		r4 := oneShot("r4", "p1", t0)
		_, _, err = s.StartRunWithSession(ctx, store.StartRunParams{Session: child(r4.ChildID, "p1", t0), Events: []store.NewEvent{ev("x", `{bad`)}, Run: r4, Start: startEvent(r4)})
		isErr(t, err, store.ErrInvalid, "StartRunWithSession(bad event)")
		_, err = s.GetSession(ctx, r4.ChildID)
		isErr(t, err, store.ErrNotFound, "GetSession after a bad event")
		_, err = s.GetRun(ctx, "r4")
		isErr(t, err, store.ErrNotFound, "GetRun after a bad event")
		if n := lifecycleCount(t, s); n != 1 {
			t.Fatalf("lifecycle holds %d events, want only r2's start", n)
		}
	}},
	{"EndRunWithEvents_R14_AppendsAndSettlesOnce", func(t *testing.T, s store.Store) {
		ctx := t.Context()
		r := startChildRun(t, s, "r1", 2)
		sessWake, stopS := s.Subscribe(store.SessionTopic(r.ChildID))
		defer stopS()
		lifeWake, stopL := s.Subscribe(store.LifecycleTopic)
		defer stopL()
		tail := []store.NewEvent{ev("step/end", `{"step":1}`), ev("turn/end", `{"turn":1}`)}
		end, log, err := s.EndRunWithEvents(ctx, store.EndRunParams{RunID: "r1", Result: completed, End: endEvent("r1", "p1"), Events: tail})
		ok(t, err)
		waitWake(t, sessWake, "EndRunWithEvents (session)")
		waitWake(t, lifeWake, "EndRunWithEvents (lifecycle)")
		want := asStored(tail, 2)
		sameList(t, "EndRunWithEvents log", log, want, canonEvent)
		wantEvents(t, s, r.ChildID, append(asStored(numbered(2), 0), want...))
		wantEnd := endEvent("r1", "p1")
		wantEnd.ID = end.ID
		same(t, "end", end, wantEnd, canonLifecycle)
		got := must(s.GetRun(ctx, "r1"))(t)
		if got.State != store.StateSettled || got.StopReason != "completed" {
			t.Fatalf("run after EndRunWithEvents: %+v", got)
		}

		_, log, err = s.EndRunWithEvents(ctx, store.EndRunParams{RunID: "r1", Result: completed, End: endEvent("r1", "p1"), Events: []store.NewEvent{ev("late", `{}`)}})
		isErr(t, err, store.ErrConflict, "EndRunWithEvents(r1 again)")
		if len(log) != 0 {
			t.Fatalf("a refused end returned events %+v", log)
		}
		if n := len(must(s.Events(ctx, r.ChildID, -1, 0))(t)); n != 4 {
			t.Fatalf("a refused end left %d events, want 4", n)
		}
		_, err = s.EndRun(ctx, "r1", completed, endEvent("r1", "p1"))
		isErr(t, err, store.ErrConflict, "EndRun after EndRunWithEvents")
		if n := lifecycleCount(t, s); n != 2 {
			t.Fatalf("lifecycle holds %d events, want start and one end", n)
		}
	}},
	{"EndRunWithEvents_NoSessionOrBadEventStoresNothing", func(t *testing.T, s store.Store) {
		ctx := t.Context()
		startRun(t, s, oneShot("r1", "p1", t0)) // its child has no session
		_, _, err := s.EndRunWithEvents(ctx, store.EndRunParams{RunID: "r1", Result: completed, End: endEvent("r1", "p1"), Events: numbered(1)})
		isErr(t, err, store.ErrNotFound, "EndRunWithEvents(child without a session)")
		if got := must(s.GetRun(ctx, "r1"))(t); got.State != store.StateRunning {
			t.Fatalf("run state after a refused end = %q, want running", got.State)
		}
		_, _, err = s.EndRunWithEvents(ctx, store.EndRunParams{RunID: "nope", Result: completed, End: endEvent("nope", "p1"), Events: numbered(1)})
		isErr(t, err, store.ErrNotFound, "EndRunWithEvents(unknown run)")

		r := startChildRun(t, s, "r2", 1)
		_, _, err = s.EndRunWithEvents(ctx, store.EndRunParams{RunID: "r2", Result: completed, End: endEvent("r2", "p1"), Events: []store.NewEvent{ev("x", `{bad`)}})
		isErr(t, err, store.ErrInvalid, "EndRunWithEvents(bad event)")
		wantEvents(t, s, r.ChildID, asStored(numbered(1), 0))
		if got := must(s.GetRun(ctx, "r2"))(t); got.State != store.StateRunning {
			t.Fatalf("run state after a bad event = %q, want running", got.State)
		}
		if n := lifecycleCount(t, s); n != 2 {
			t.Fatalf("lifecycle holds %d events, want the two starts", n)
		}
		// Without events it is EndRun.
		_, log, err := s.EndRunWithEvents(ctx, store.EndRunParams{RunID: "r2", Result: completed, End: endEvent("r2", "p1")})
		ok(t, err)
		if len(log) != 0 {
			t.Fatalf("an end without events returned %+v", log)
		}
	}},
}
