package governance

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/memstore"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// fakeRuns records the tree's cancels and disposals; a cancel settles
// the run in the store, as the real one does before it returns.
type fakeRuns struct {
	st        store.Store
	mu        sync.Mutex
	cancelled []string
	disposed  []string
	// spawn, when set, is called on the first cancel of its key: a parent
	// that delegates once more while the tree is cancelled.
	spawn map[string]func()
}

func (f *fakeRuns) CancelRunForTree(ctx context.Context, runID, diagnostic string) (bool, error) {
	f.mu.Lock()
	f.cancelled = append(f.cancelled, runID)
	spawn := f.spawn[runID]
	delete(f.spawn, runID)
	f.mu.Unlock()
	if spawn != nil {
		spawn()
	}
	if diagnostic != DiagnosticCancelled {
		panic("diagnostic " + diagnostic)
	}
	_, err := f.st.EndRun(ctx, runID, store.RunResult{StopReason: subagent.StopAborted, Diagnostic: diagnostic, Output: json.RawMessage(`[]`)},
		store.LifecycleEvent{Type: subagent.EventEnd, RunID: runID, Payload: json.RawMessage(`{}`)})
	return err == nil, nil
}

func (f *fakeRuns) Dispose(_ context.Context, parent, child string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.disposed = append(f.disposed, parent+"/"+child)
	return nil
}

type fakeRoots struct {
	running  bool
	disposed []string
}

func (f *fakeRoots) StopTurn(context.Context, string) (bool, error) {
	was := f.running
	f.running = false
	return was, nil
}

func (f *fakeRoots) Dispose(_ context.Context, id string) error {
	f.disposed = append(f.disposed, id)
	return nil
}

// tree is root → a (one-shot run ra) → b (run rb); root → c (continuable,
// activation rc); another root's run rx is not in the tree.
func tree(t *testing.T) (*Trees, store.Store, *fakeRuns, *fakeRoots) {
	t.Helper()
	ctx := t.Context()
	st := memstore.New()
	at := time.Now()
	for _, s := range []store.Session{
		{ID: "root", CreatedAt: at}, {ID: "other", CreatedAt: at},
		{ID: "a", ParentID: "root", Mode: subagent.ModeOneShot, CreatedAt: at},
		{ID: "b", ParentID: "a", Mode: subagent.ModeOneShot, CreatedAt: at},
		{ID: "c", ParentID: "root", Mode: subagent.ModeContinuable, CreatedAt: at},
		{ID: "x", ParentID: "other", Mode: subagent.ModeOneShot, CreatedAt: at},
	} {
		if err := st.CreateSession(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range []store.Run{
		{ID: "ra", Kind: store.KindOneShot, ChildID: "a", ParentID: "root"},
		{ID: "rb", Kind: store.KindOneShot, ChildID: "b", ParentID: "a"},
		{ID: "rc", Kind: store.KindActivation, ChildID: "c", ParentID: "root", TaskID: "tc"},
		{ID: "rx", Kind: store.KindOneShot, ChildID: "x", ParentID: "other"},
	} {
		startRun(t, st, r)
	}
	runs, roots := &fakeRuns{st: st}, &fakeRoots{running: true}
	return NewTrees(TreesConfig{Store: st, Runs: runs, Roots: roots, Logger: slog.New(slog.DiscardHandler)}), st, runs, roots
}

func startRun(t *testing.T, st store.Store, r store.Run) {
	t.Helper()
	r.State, r.StartedAt, r.Provider, r.Owner, r.LeaseUntil = store.StateRunning, time.Now(), "spawn", "test", time.Now().Add(time.Hour)
	if _, err := st.StartRun(t.Context(), r, store.LifecycleEvent{Type: subagent.EventStart, RunID: r.ID, Payload: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
}

func TestCancel_DeepestFirstRootTurnLastAnnouncedOnce(t *testing.T) {
	trees, st, runs, roots := tree(t)
	n, err := trees.Cancel(t.Context(), "root")
	if err != nil || n != 4 {
		t.Fatalf("Cancel = %d, %v; want 4 (ra, rb, rc, the root's turn)", n, err)
	}
	if i := slices.Index(runs.cancelled, "rb"); i != 0 || len(runs.cancelled) != 3 || slices.Contains(runs.cancelled, "rx") {
		t.Fatalf("cancelled %v, want rb first, then ra and rc, never rx", runs.cancelled)
	}
	if roots.running {
		t.Fatal("the root's turn was not stopped")
	}
	evs, err := st.Lifecycle(t.Context(), store.LifecycleFilter{Types: []string{EventTreeCancelled}})
	if err != nil || len(evs) != 1 || string(evs[0].Payload) != `{"sessionId":"root","rootSessionId":"root","cancelled":4}` ||
		evs[0].ParentID != "root" || evs[0].RootID != "root" {
		t.Fatalf("tree/cancelled events %+v, %v", evs, err)
	}
	// A second cancel finds nothing live and says so.
	if n, err := trees.Cancel(t.Context(), "root"); err != nil || n != 0 {
		t.Fatalf("second Cancel = %d, %v", n, err)
	}
}

func TestCancel_WalksAgainForRunsStartedMeanwhile(t *testing.T) {
	trees, st, runs, _ := tree(t)
	// Cancelling rb makes a start a new run under it, as a parent in a
	// delegation tool call might.
	runs.spawn = map[string]func(){"rb": func() {
		startRun(t, st, store.Run{ID: "rb2", Kind: store.KindOneShot, ChildID: "b", ParentID: "a"})
	}}
	n, err := trees.Cancel(t.Context(), "root")
	if err != nil || n != 5 || !slices.Contains(runs.cancelled, "rb2") {
		t.Fatalf("Cancel = %d, %v, cancelled %v; want rb2 found by a second walk", n, err, runs.cancelled)
	}
}

func TestCancel_Subtree(t *testing.T) {
	trees, st, runs, roots := tree(t)
	n, err := trees.Cancel(t.Context(), "a")
	if err != nil || n != 1 || !slices.Equal(runs.cancelled, []string{"rb"}) || !roots.running {
		t.Fatalf("Cancel(a) = %d, %v, cancelled %v, root running %v; want only rb", n, err, runs.cancelled, roots.running)
	}
	// The event names the subtree and the tree it belongs to.
	evs, err := st.Lifecycle(t.Context(), store.LifecycleFilter{Types: []string{EventTreeCancelled}})
	if err != nil || len(evs) != 1 || evs[0].ParentID != "a" || evs[0].RootID != "root" {
		t.Fatalf("tree/cancelled events %+v, %v; want one of a, in root's tree", evs, err)
	}
}

func TestDispose(t *testing.T) {
	trees, _, runs, roots := tree(t)
	if err := trees.Dispose(t.Context(), "a"); subagent.ErrorCode(err) != subagent.EInvalidRequest {
		t.Fatalf("Dispose(child session) = %v, want INVALID_REQUEST", err)
	}
	if err := trees.Dispose(t.Context(), "nope"); subagent.ErrorCode(err) != subagent.ESessionNotFound {
		t.Fatalf("Dispose(unknown) = %v, want SESSION_NOT_FOUND", err)
	}
	if _, err := trees.Cancel(t.Context(), "nope"); subagent.ErrorCode(err) != subagent.ESessionNotFound {
		t.Fatalf("Cancel(unknown) = %v, want SESSION_NOT_FOUND", err)
	}
	if err := trees.Dispose(t.Context(), "root"); err != nil {
		t.Fatal(err)
	}
	if len(runs.cancelled) != 3 || !slices.Equal(runs.disposed, []string{"root/c"}) || !slices.Equal(roots.disposed, []string{"root"}) {
		t.Fatalf("cancelled %v, disposed children %v, roots %v", runs.cancelled, runs.disposed, roots.disposed)
	}
}
