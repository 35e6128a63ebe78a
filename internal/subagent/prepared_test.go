package subagent

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/store"
)

func preparerSetup(t *testing.T, p *fakePreparer) (*Service, *testBundle) {
	t.Helper()
	p.name, p.caps, p.children = "spawn", allCaps, make(chan *fakePrepared, 1)
	svc, b := setup(t)
	if err := svc.Register(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	return svc, b
}

// TestStart_R13_PreparedChildIsStoredWithItsRun: a Preparer's child is
// stored with the run row and subagent/start in one write, launched over
// the stored log, and the handle comes back only after the start edge.
func TestStart_R13_PreparedChildIsStoredWithItsRun(t *testing.T) {
	t.Parallel()
	p := &fakePreparer{}
	svc, b := preparerSetup(t, p)
	h, err := svc.Start(t.Context(), "spawn", request())
	if err != nil {
		t.Fatal(err)
	}
	c := <-p.children
	if got := b.rec.types(); !slices.Equal(got, []string{EventProviderAdded, EventStart}) {
		t.Fatalf("dispatched %v before the handle returned, want provider-added and start", got)
	}
	if r, ok := b.store.run(h.ID()); !ok || r.ChildID != c.run.childID || !r.Local {
		t.Fatalf("run row %+v, %v", r, ok)
	}
	if len(c.log) != 1 || c.log[0].Type != "turn/start" {
		t.Fatalf("launched over %+v, want the stored turn/start", c.log)
	}
	if len(c.launched) != 1 {
		t.Fatal("the child was not launched")
	}
}

// TestStart_R14_SettleRecordsTheEndWithTheLogOnce: a run that settles
// through its Settle has its end and last events stored in that write;
// once the run is done, the end is dispatched once and not recorded again.
func TestStart_R14_SettleRecordsTheEndWithTheLogOnce(t *testing.T) {
	t.Parallel()
	p := &fakePreparer{}
	svc, b := preparerSetup(t, p)
	h, err := svc.Start(t.Context(), "spawn", request())
	if err != nil {
		t.Fatal(err)
	}
	c := <-p.children
	settle := <-c.launched
	res := Result{Output: []model.Block{model.TextBlock("done")}, StopReason: StopCompleted}
	log, err := settle(t.Context(), res, []store.NewEvent{{Type: "turn/end", Data: []byte(`{}`)}})
	if err != nil || len(log) != 1 || log[0].Seq != 100 {
		t.Fatalf("settle = %+v, %v", log, err)
	}
	if r, _ := b.store.run(h.ID()); r.State != store.StateSettled || r.StopReason != StopCompleted {
		t.Fatalf("run row after settle %+v", r)
	}
	c.run.settle(res, nil)
	waitDone(t, h)
	got, err := h.Result()
	if err != nil || got.StopReason != StopCompleted || model.Text(got.Output) != "done" {
		t.Fatalf("result %+v, %v", got, err)
	}
	var ends []store.LifecycleEvent
	for _, e := range b.store.events() {
		if e.Type == EventEnd {
			ends = append(ends, e)
		}
	}
	if len(ends) != 1 {
		t.Fatalf("%d ends recorded, want 1", len(ends))
	}
	if got := b.rec.types(); !slices.Equal(got, []string{EventProviderAdded, EventStart, EventEnd}) {
		t.Fatalf("dispatched %v", got)
	}
	if _, err := settle(t.Context(), res, nil); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("a second settle: %v, want a conflict", err)
	}
}

// TestStart_R22_AbortBeforeThePreparedChildIsStored: a cancellation after
// Prepare but before the write stores nothing, dispatches nothing and
// disposes the unlaunched child.
func TestStart_R22_AbortBeforeThePreparedChildIsStored(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	p := &fakePreparer{prepareFn: func(context.Context) { cancel() }}
	svc, b := preparerSetup(t, p)
	_, err := svc.Start(ctx, "spawn", request())
	if ErrorCode(err) != EAborted || !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want ABORTED wrapping context.Canceled", err)
	}
	c := <-p.children
	if _, disposes := c.run.counts(); disposes != 1 {
		t.Errorf("unlaunched child disposed %d times, want 1", disposes)
	}
	if len(c.launched) != 0 {
		t.Error("an aborted child was launched")
	}
	if got := b.rec.types(); !slices.Equal(got, []string{EventProviderAdded}) {
		t.Errorf("dispatched %v", got)
	}
	if evs := b.store.events(); len(evs) != 1 {
		t.Errorf("lifecycle %+v, want only provider-added", evs)
	}
}
