package storetest

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/store"
)

// oneShot returns a running one-shot run of child under parent.
func oneShot(id, parent string, started time.Time) store.Run {
	return store.Run{
		ID: id, Kind: store.KindOneShot, Provider: "spawn", ChildID: "child-" + id, ParentID: parent,
		Local: true, State: store.StateRunning, StartedAt: started, Owner: "replica-1", LeaseUntil: sec(60),
	}
}

func startEvent(r store.Run) store.LifecycleEvent {
	return store.LifecycleEvent{
		Type: "subagent/start", ParentID: r.ParentID, RunID: r.ID, Time: r.StartedAt,
		Payload: json.RawMessage(fmt.Sprintf(`{"runId":%q}`, r.ID)),
	}
}

func endEvent(runID, parent string) store.LifecycleEvent {
	return store.LifecycleEvent{
		Type: "subagent/end", ParentID: parent, RunID: runID, Time: sec(10),
		Payload: json.RawMessage(`{"stopReason":"completed"}`),
	}
}

var completed = store.RunResult{
	StopReason: "completed",
	Output:     json.RawMessage(`[{"type":"text","text":"done"}]`),
	Structured: json.RawMessage(`{"score":3}`),
	Diagnostic: "ok",
	EndedAt:    sec(10),
}

// startRun starts r with its start event, failing t on error.
func startRun(t *testing.T, s store.Store, r store.Run) store.LifecycleEvent {
	t.Helper()
	return must(s.StartRun(t.Context(), r, startEvent(r)))(t)
}

// lifecycleCount returns how many lifecycle events the default tenant sees.
func lifecycleCount(t *testing.T, s store.Store) int {
	t.Helper()
	return len(must(s.Lifecycle(t.Context(), store.LifecycleFilter{Limit: 1000}))(t))
}

func runIDs(rs []store.Run) []string {
	ids := make([]string, len(rs))
	for i, r := range rs {
		ids[i] = r.ID
	}
	return ids
}

var runTests = []test{
	{"ListRuns_ChildIDs", func(t *testing.T, s store.Store) {
		ctx := t.Context()
		for i, id := range []string{"r1", "r2", "r3"} {
			startRun(t, s, oneShot(id, "p1", sec(i)))
		}
		got := must(s.ListRuns(ctx, store.RunFilter{ChildIDs: []string{"child-r1", "child-r3", "child-none"}}))(t)
		sameIDs(t, "ListRuns(ChildIDs r1, r3)", runIDs(got), []string{"r1", "r3"})
		got = must(s.ListRuns(ctx, store.RunFilter{ChildIDs: []string{"child-r2"}, State: store.StateSettled}))(t)
		sameIDs(t, "ListRuns(ChildIDs r2, settled)", runIDs(got), nil)
	}},
	{"StartRun_StoresRunningRunAndStartEvent", func(t *testing.T, s store.Store) {
		ctx := t.Context()
		r := store.Run{
			ID: "r1", Kind: store.KindActivation, Provider: "spawn", ChildID: "c1", ParentID: "p1",
			TaskID: "task-1", Local: true, StartedAt: t0, Owner: "replica-1", LeaseUntil: sec(30),
			// Settlement fields of a run being started are not stored.
			State: store.StateSettled, EndedAt: sec(5), StopReason: "completed", Output: json.RawMessage(`[]`),
			Structured: json.RawMessage(`{}`), Diagnostic: "stale",
		}
		start := startRun(t, s, r)
		if start.ID <= 0 {
			t.Fatalf("start event ID = %d, want > 0", start.ID)
		}
		wantStart := startEvent(r)
		wantStart.ID = start.ID
		same(t, "StartRun result", start, wantStart, canonLifecycle)
		sameList(t, "Lifecycle", must(s.Lifecycle(ctx, store.LifecycleFilter{}))(t), []store.LifecycleEvent{wantStart}, canonLifecycle)

		want := store.Run{
			ID: "r1", Kind: store.KindActivation, Provider: "spawn", ChildID: "c1", ParentID: "p1",
			TaskID: "task-1", Local: true, State: store.StateRunning, StartedAt: t0, Owner: "replica-1", LeaseUntil: sec(30),
			Tenant: store.DefaultTenant, // filled in on read
		}
		same(t, "GetRun", must(s.GetRun(ctx, "r1"))(t), want, canonRun)
	}},
	{"StartRun_KeepsTraceparent", func(t *testing.T, s store.Store) {
		ctx := t.Context()
		const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
		r := oneShot("r1", "p1", t0)
		r.Traceparent = tp
		startRun(t, s, r)
		c := oneShot("r2", "p1", sec(1))
		c.Traceparent = tp
		_, _, err := s.StartRunWithSession(ctx, store.StartRunParams{Session: child(c.ChildID, "p1", t0), Events: numbered(1), Run: c, Start: startEvent(c)})
		ok(t, err)
		startRun(t, s, oneShot("r3", "p1", sec(2))) // not traced
		for _, id := range []string{"r1", "r2"} {
			if got := must(s.GetRun(ctx, id))(t).Traceparent; got != tp {
				t.Fatalf("GetRun(%s).Traceparent = %q, want %q", id, got, tp)
			}
		}
		must(s.EndRun(ctx, "r1", completed, endEvent("r1", "p1")))(t)
		var got []string
		for _, r := range must(s.ListRuns(ctx, store.RunFilter{ParentID: "p1"}))(t) {
			got = append(got, r.Traceparent)
		}
		if want := []string{tp, tp, ""}; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("ListRuns traceparents (r1 settled, r2, r3 untraced) = %q, want %q", got, want)
		}
	}},
	{"StartRun_ZeroStartedAtIsNow", func(t *testing.T, s store.Store) {
		before := time.Now()
		r := oneShot("r1", "p1", time.Time{})
		must(s.StartRun(t.Context(), r, store.LifecycleEvent{Type: "subagent/start", RunID: "r1"}))(t)
		recent(t, "StartedAt", must(s.GetRun(t.Context(), "r1"))(t).StartedAt, before)
	}},
	{"StartRun_ExistingIDConflictsAndAppendsNothing", func(t *testing.T, s store.Store) {
		startRun(t, s, oneShot("r1", "p1", t0))
		_, err := s.StartRun(t.Context(), oneShot("r1", "p2", t0), startEvent(oneShot("r1", "p2", t0)))
		isErr(t, err, store.ErrConflict, "StartRun(r1 again)")
		if n := lifecycleCount(t, s); n != 1 {
			t.Fatalf("lifecycle holds %d events after a conflicting start, want 1", n)
		}
		if got := must(s.GetRun(t.Context(), "r1"))(t); got.ParentID != "p1" {
			t.Fatalf("conflicting start changed the run: parent %q", got.ParentID)
		}
	}},
	{"StartRun_FailedStartEventStoresNoRun", func(t *testing.T, s store.Store) {
		r := oneShot("r1", "p1", t0)
		start := startEvent(r)
		start.Payload = json.RawMessage(`{"bad":`)
		_, err := s.StartRun(t.Context(), r, start)
		isInvalid(t, err, "StartRun(invalid start payload)")
		_, err = s.GetRun(t.Context(), "r1")
		isErr(t, err, store.ErrNotFound, "GetRun after a failed StartRun")
	}},
	{"EndRun_R14_SettlesExactlyOnce", func(t *testing.T, s store.Store) {
		ctx := t.Context()
		r := oneShot("r1", "p1", t0)
		start := startRun(t, s, r)
		end := must(s.EndRun(ctx, "r1", completed, endEvent("r1", "p1")))(t)
		if end.ID <= start.ID {
			t.Fatalf("end event ID %d not after start event ID %d", end.ID, start.ID)
		}
		wantEnd := endEvent("r1", "p1")
		wantEnd.ID = end.ID
		same(t, "EndRun result", end, wantEnd, canonLifecycle)

		want := r
		want.Tenant = store.DefaultTenant
		want.State, want.EndedAt, want.StopReason = store.StateSettled, sec(10), "completed"
		want.Output, want.Structured, want.Diagnostic = completed.Output, completed.Structured, "ok"
		same(t, "GetRun after EndRun", must(s.GetRun(ctx, "r1"))(t), want, canonRun)

		again := store.RunResult{StopReason: "error", Diagnostic: "late", EndedAt: sec(20)}
		_, err := s.EndRun(ctx, "r1", again, endEvent("r1", "p1"))
		isErr(t, err, store.ErrConflict, "EndRun(r1 again)")
		same(t, "GetRun after a second EndRun", must(s.GetRun(ctx, "r1"))(t), want, canonRun)
		if n := lifecycleCount(t, s); n != 2 {
			t.Fatalf("lifecycle holds %d events, want start and one end", n)
		}
	}},
	{"EndRun_R14_ConcurrentEndsSettleOnce", func(t *testing.T, s store.Store) {
		startRun(t, s, oneShot("r1", "p1", t0))
		const enders = 8
		results := make(chan error, enders)
		var wg sync.WaitGroup
		for i := range enders {
			wg.Go(func() {
				res := completed
				res.Diagnostic = fmt.Sprint(i)
				_, err := s.EndRun(t.Context(), "r1", res, endEvent("r1", "p1"))
				results <- err
			})
		}
		wg.Wait()
		close(results)
		settled := 0
		for err := range results {
			if err == nil {
				settled++
			} else {
				isErr(t, err, store.ErrConflict, "a concurrent EndRun")
			}
		}
		if settled != 1 {
			t.Fatalf("%d concurrent EndRuns succeeded, want exactly 1", settled)
		}
		if n := lifecycleCount(t, s); n != 2 {
			t.Fatalf("lifecycle holds %d events, want start and one end", n)
		}
	}},
	{"EndRun_UnknownIsNotFoundAndAppendsNothing", func(t *testing.T, s store.Store) {
		_, err := s.EndRun(t.Context(), "nope", completed, endEvent("nope", "p1"))
		isErr(t, err, store.ErrNotFound, "EndRun(nope)")
		if n := lifecycleCount(t, s); n != 0 {
			t.Fatalf("lifecycle holds %d events after EndRun of an unknown run, want 0", n)
		}
	}},
	{"EndRun_FailedEndEventLeavesRunRunning", func(t *testing.T, s store.Store) {
		startRun(t, s, oneShot("r1", "p1", t0))
		end := endEvent("r1", "p1")
		end.Payload = json.RawMessage(`{"bad":`)
		_, err := s.EndRun(t.Context(), "r1", completed, end)
		isInvalid(t, err, "EndRun(invalid end payload)")
		if got := must(s.GetRun(t.Context(), "r1"))(t); got.State != store.StateRunning {
			t.Fatalf("run state after a failed EndRun = %q, want running", got.State)
		}
		must(s.EndRun(t.Context(), "r1", completed, endEvent("r1", "p1")))(t)
	}},
	{"EndRun_ZeroEndedAtIsNow", func(t *testing.T, s store.Store) {
		startRun(t, s, oneShot("r1", "p1", t0))
		before := time.Now()
		must(s.EndRun(t.Context(), "r1", store.RunResult{StopReason: "aborted"}, store.LifecycleEvent{Type: "subagent/end"}))(t)
		got := must(s.GetRun(t.Context(), "r1"))(t)
		recent(t, "EndedAt", got.EndedAt, before)
		if got.Output != nil || got.Structured != nil {
			t.Fatalf("run settled without output has Output %s, Structured %s; want nil", got.Output, got.Structured)
		}
	}},
	{"DisposeRun_SettledOnlyAndIdempotent", func(t *testing.T, s store.Store) {
		ctx := t.Context()
		startRun(t, s, oneShot("r1", "p1", t0))
		isErr(t, s.DisposeRun(ctx, "r1"), store.ErrConflict, "DisposeRun(running r1)")
		must(s.EndRun(ctx, "r1", completed, endEvent("r1", "p1")))(t)
		ok(t, s.DisposeRun(ctx, "r1"))
		ok(t, s.DisposeRun(ctx, "r1"))
		got := must(s.GetRun(ctx, "r1"))(t)
		if got.State != store.StateDisposed || got.StopReason != "completed" {
			t.Fatalf("disposed run = %s, want state disposed keeping its result", show(got))
		}
		_, err := s.EndRun(ctx, "r1", completed, endEvent("r1", "p1"))
		isErr(t, err, store.ErrConflict, "EndRun(disposed r1)")
		isErr(t, s.DisposeRun(ctx, "nope"), store.ErrNotFound, "DisposeRun(nope)")
	}},
	{"GetRun_UnknownIsNotFound", func(t *testing.T, s store.Store) {
		_, err := s.GetRun(t.Context(), "nope")
		isErr(t, err, store.ErrNotFound, "GetRun(nope)")
	}},
	{"GetRun_CopyOnReturn", func(t *testing.T, s store.Store) {
		ctx := t.Context()
		startRun(t, s, oneShot("r1", "p1", t0))
		must(s.EndRun(ctx, "r1", completed, endEvent("r1", "p1")))(t)
		got := must(s.GetRun(ctx, "r1"))(t)
		got.Output[1], got.Structured[1] = 'X', 'X'
		got = must(s.GetRun(ctx, "r1"))(t)
		same(t, "stored output", got.Output, completed.Output, canonJSON)
		same(t, "stored structured", got.Structured, completed.Structured, canonJSON)
	}},
	{"ListRuns_FiltersOrderAndCursor", func(t *testing.T, s store.Store) {
		ctx := t.Context()
		runs := []store.Run{
			oneShot("d", "p1", sec(3)),
			oneShot("b", "p1", sec(1)),
			oneShot("a", "p1", sec(1)), // ties with b on StartedAt
			oneShot("c", "p2", sec(2)),
			{ID: "e", Kind: store.KindActivation, ChildID: "k1", ParentID: "p2", TaskID: "t1", StartedAt: sec(4)},
			{ID: "f", Kind: store.KindActivation, ChildID: "k1", ParentID: "p2", TaskID: "t2", StartedAt: sec(5)},
		}
		for _, r := range runs {
			startRun(t, s, r)
		}
		must(s.EndRun(ctx, "b", completed, endEvent("b", "p1")))(t)
		must(s.EndRun(ctx, "e", completed, endEvent("e", "p2")))(t)
		for _, tc := range []struct {
			f    store.RunFilter
			want []string
		}{
			{store.RunFilter{}, []string{"a", "b", "c", "d", "e", "f"}},
			{store.RunFilter{ParentID: "p1"}, []string{"a", "b", "d"}},
			{store.RunFilter{ChildID: "k1"}, []string{"e", "f"}},
			{store.RunFilter{ChildID: "k1", TaskID: "t2"}, []string{"f"}},
			{store.RunFilter{State: store.StateRunning}, []string{"a", "c", "d", "f"}},
			{store.RunFilter{State: store.StateSettled, ParentID: "p1"}, []string{"b"}},
			{store.RunFilter{ParentID: "p1", AfterID: "a", Limit: 1}, []string{"b"}},
			{store.RunFilter{AfterID: "b", Limit: 2}, []string{"c", "d"}},
			{store.RunFilter{AfterID: "f"}, nil},
			{store.RunFilter{ParentID: "nope"}, nil},
		} {
			got := must(s.ListRuns(ctx, tc.f))(t)
			sameIDs(t, fmt.Sprintf("ListRuns(%+v)", tc.f), runIDs(got), tc.want)
		}
		_, err := s.ListRuns(ctx, store.RunFilter{AfterID: "nope"})
		isErr(t, err, store.ErrNotFound, "ListRuns(after nope)")
	}},
}
