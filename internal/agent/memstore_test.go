package agent

import (
	"context"
	"slices"
	"testing"

	"github.com/subagentd/subagentd/internal/memstore"
	"github.com/subagentd/subagentd/internal/model/echo"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
)

// TestMemstore_TurnsAndColdResumeOnTheRealStore runs the agent over the
// in-memory Store the service uses by default, in a tenant: the log it
// writes is the store's, and a second agent resumes from it.
func TestMemstore_TurnsAndColdResumeOnTheRealStore(t *testing.T) {
	t.Parallel()
	ctx := store.WithTenant(context.Background(), "acme")
	st := memstore.New()
	if err := st.CreateSession(ctx, store.Session{ID: "root"}); err != nil {
		t.Fatal(err)
	}
	cfg := Config{ID: "root", Store: st, Logger: testLogger(t), Model: echo.New()}
	first, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	followup(t, first, "one")
	waitIdle(t, first)
	if err := first.Close(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	stored, err := st.Events(ctx, "root", -1, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(types(stored), types(first.Events())) {
		t.Fatalf("store log %v differs from the mirror %v", types(stored), types(first.Events()))
	}
	checkSeqs(t, stored)

	second, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = second.Close(context.Background()) })
	followup(t, second, "two")
	waitIdle(t, second)
	starts := ofType[sessionlog.TurnData](t, second.Events(), sessionlog.EventTurnStart)
	if len(starts) != 2 || starts[1].Turn != 2 {
		t.Errorf("turn/start %+v", starts)
	}
	if _, err := New(context.Background(), cfg); err == nil {
		t.Error("the session is visible to another tenant")
	}
}

// TestMemstore_ColdResumeReadsFromTheSnapshot: over the real in-memory
// Store, a new agent loads the log from the newest snapshot on.
func TestMemstore_ColdResumeReadsFromTheSnapshot(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := memstore.New()
	if err := st.CreateSession(ctx, store.Session{ID: "root"}); err != nil {
		t.Fatal(err)
	}
	first, err := New(ctx, Config{ID: "root", Store: st, Logger: testLogger(t), Model: echo.New(), SnapshotEvery: 1})
	if err != nil {
		t.Fatal(err)
	}
	followup(t, first, "one")
	waitIdle(t, first)
	if err := first.Close(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	second, err := New(ctx, Config{ID: "root", Store: st, Logger: testLogger(t), Model: echo.New()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = second.Close(testCtx(t)) })
	evs := second.Events()
	if len(evs) != 1 || evs[0].Type != sessionlog.EventSnapshot || evs[0].Seq != int64(len(first.Events())-1) {
		t.Fatalf("loaded %v, want only the snapshot that ends the log", types(evs))
	}
	followup(t, second, "two")
	waitIdle(t, second)
	if got := userTexts(t, second.Events()); !slices.Equal(got, []string{"two"}) {
		t.Errorf("second agent logged %v", got)
	}
}
