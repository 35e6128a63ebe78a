package memstore_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/memstore"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/store/storetest"
)

func TestStore(t *testing.T) {
	storetest.Run(t, func(*testing.T) store.Store { return memstore.New() })
}

// oneShot creates child id under root with a run r-id, settles it, and
// disposes it if dispose is set.
func oneShot(t *testing.T, s *memstore.Store, id string, dispose bool) {
	t.Helper()
	ctx := t.Context()
	if err := s.CreateSession(ctx, store.Session{ID: id, ParentID: "root", Origin: "subagent", Mode: store.KindOneShot}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendEvents(ctx, id, store.NewEvent{Type: "user/message", Data: []byte(`{"text":"hi"}`)}); err != nil {
		t.Fatal(err)
	}
	run := store.Run{ID: "r-" + id, Kind: store.KindOneShot, ChildID: id, ParentID: "root"}
	if _, err := s.StartRun(ctx, run, store.LifecycleEvent{Type: "subagent/start", RunID: run.ID}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.EndRun(ctx, run.ID, store.RunResult{StopReason: "completed"}, store.LifecycleEvent{Type: "subagent/end", RunID: run.ID}); err != nil {
		t.Fatal(err)
	}
	if dispose {
		if err := s.DisposeRun(ctx, run.ID); err != nil {
			t.Fatal(err)
		}
	}
}

// kept reports whether the store still has child id, its log and its run,
// and fails t if it has only some of them.
func kept(t *testing.T, s *memstore.Store, id string) bool {
	t.Helper()
	ctx := t.Context()
	_, sessErr := s.GetSession(ctx, id)
	_, logErr := s.Events(ctx, id, -1, 10)
	_, runErr := s.GetRun(ctx, "r-"+id)
	for _, err := range []error{sessErr, logErr, runErr} {
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			t.Fatal(err)
		}
	}
	if (sessErr == nil) != (runErr == nil) || (sessErr == nil) != (logErr == nil) {
		t.Fatalf("%s half evicted: session %v, log %v, run %v", id, sessErr, logErr, runErr)
	}
	return sessErr == nil
}

func TestRetention_EvictsOldestDisposedRunsBeyondCount(t *testing.T) {
	s := memstore.NewWithRetention(memstore.Retention{Runs: 2})
	ctx := t.Context()
	if err := s.CreateSession(ctx, store.Session{ID: "root"}); err != nil {
		t.Fatal(err)
	}
	oneShot(t, s, "settled", false)
	// With Runs 2 the slack (2/8) is none: every disposal past the second
	// evicts the oldest disposed run.
	for _, id := range []string{"a", "b", "c", "d"} {
		oneShot(t, s, id, true)
	}
	for id, want := range map[string]bool{"settled": true, "a": false, "b": false, "c": true, "d": true} {
		if got := kept(t, s, id); got != want {
			t.Errorf("%s kept = %v, want %v", id, got, want)
		}
	}
	if _, err := s.GetSession(ctx, "root"); err != nil {
		t.Fatalf("root session evicted: %v", err)
	}
	children, err := s.ListSessions(ctx, store.SessionFilter{ParentID: new("root")})
	if err != nil || len(children) != 3 {
		t.Fatalf("children of root after eviction: %v, %v; want settled, c, d", children, err)
	}
	runs, err := s.ListRuns(ctx, store.RunFilter{ParentID: "root"})
	if err != nil || len(runs) != 3 {
		t.Fatalf("runs of root after eviction: %v, %v", runs, err)
	}
}

func TestRetention_EvictsInBatchesPastTheSlack(t *testing.T) {
	s := memstore.NewWithRetention(memstore.Retention{Runs: 8}) // slack 1
	ids := []string{"a", "b", "c", "d", "e", "f", "g", "h", "i"}
	for _, id := range ids {
		oneShot(t, s, id, true)
	}
	if !kept(t, s, "a") {
		t.Fatal("nine disposed runs are within 8 + 8/8; the oldest was evicted")
	}
	oneShot(t, s, "j", true)
	for i, id := range append(ids, "j") {
		if got, want := kept(t, s, id), i >= 2; got != want {
			t.Errorf("%s kept = %v, want %v (the tenth disposal evicts down to 8)", id, got, want)
		}
	}
}

func TestRetention_EvictsDisposedRunsByAgeOnTheNextWrite(t *testing.T) {
	s := memstore.NewWithRetention(memstore.Retention{Age: time.Nanosecond})
	oneShot(t, s, "old", true)
	start := time.Now()
	for time.Since(start) <= time.Nanosecond {
	}
	oneShot(t, s, "new", false)
	if kept(t, s, "old") {
		t.Fatal("a run disposed longer than Age ago is still kept after the next write")
	}
	if !kept(t, s, "new") {
		t.Fatal("a settled run was evicted")
	}
}

func TestRetention_LifecycleKeepsTheNewestEvents(t *testing.T) {
	s := memstore.NewWithRetention(memstore.Retention{Events: 3})
	ctx := t.Context()
	for range 5 {
		if _, err := s.AppendLifecycle(ctx, store.LifecycleEvent{Type: "x"}); err != nil {
			t.Fatal(err)
		}
	}
	ids := func(after int64) []int64 {
		evs, err := s.Lifecycle(ctx, store.LifecycleFilter{After: after})
		if err != nil {
			t.Fatal(err)
		}
		var out []int64
		for _, e := range evs {
			out = append(out, e.ID)
		}
		return out
	}
	if got := ids(0); !slices.Equal(got, []int64{3, 4, 5}) {
		t.Fatalf("after 0: ids %v, want [3 4 5]", got)
	}
	if got := ids(4); !slices.Equal(got, []int64{5}) {
		t.Fatalf("after 4: ids %v, want [5]", got)
	}
	if id, err := s.LastLifecycleID(ctx); err != nil || id != 5 {
		t.Fatalf("LastLifecycleID = %d, %v; want 5", id, err)
	}
}
