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
