package subagent

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/store"
)

// TestStart_MaxLiveRuns: a tenant's unsettled one-shot runs are capped
// (RATE_LIMITED, before the provider is asked), another tenant is not
// affected, a settled run frees its slot, and concurrent starts never
// exceed the cap.
func TestStart_MaxLiveRuns(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var runs []*fakeRun
	p := &fakeProvider{name: "spawn", StartFn: func(context.Context, ResolvedRequest) (Run, error) {
		mu.Lock()
		defer mu.Unlock()
		r := newFakeRun(fmt.Sprintf("child-%d", len(runs)), true)
		runs = append(runs, r)
		return r, nil
	}}
	svc := NewService(Config{Store: newFakeStore(), Logger: slog.New(slog.DiscardHandler), Owner: "r", MaxLiveRuns: 2})
	if err := svc.Register(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Shutdown(context.WithoutCancel(t.Context())) })
	acme := store.WithTenant(t.Context(), "acme")

	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			_, err := svc.Start(acme, "spawn", request())
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	started := 0
	for err := range errs {
		switch {
		case err == nil:
			started++
		case ErrorCode(err) == ERateLimited:
		default:
			t.Fatalf("start: %v", err)
		}
	}
	if started != 2 || p.startCount() != 2 {
		t.Fatalf("%d of 8 concurrent starts ran (%d reached the provider), want 2", started, p.startCount())
	}
	if _, err := svc.Start(store.WithTenant(t.Context(), "other"), "spawn", request()); err != nil {
		t.Fatalf("another tenant's start: %v", err)
	}
	h, ok := svc.Run(acme, firstRunID(t, svc, acme))
	if !ok {
		t.Fatal("no live run of acme")
	}
	h.run.(*fakeRun).settle(Result{StopReason: StopCompleted}, nil)
	select {
	case <-h.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the run did not settle")
	}
	if _, err := svc.Start(acme, "spawn", request()); err != nil {
		t.Fatalf("start after a run settled: %v", err)
	}
}

// firstRunID returns the id of one live run of ctx's tenant.
func firstRunID(t *testing.T, svc *Service, ctx context.Context) string {
	t.Helper()
	svc.mu.Lock()
	defer svc.mu.Unlock()
	for id, h := range svc.runs {
		if h.tenant == store.Tenant(ctx) {
			return id
		}
	}
	t.Fatal("no run")
	return ""
}
