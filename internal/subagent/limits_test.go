package subagent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
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

// TestLimits_Resolve: limits are validated field by field (INVALID_REQUEST
// naming the field), a deadline is an RFC 3339 time or a positive Go
// duration from the root's creation, and idleTimeout a positive duration.
func TestLimits_Resolve(t *testing.T) {
	t.Parallel()
	created := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	n := func(v int64) *int64 { return &v }
	got, err := Limits{MaxDepth: n(0), TokenBudget: n(MaxSafeInteger), Deadline: "90m", IdleTimeout: "2s"}.Resolve(created)
	if err != nil {
		t.Fatal(err)
	}
	if *got.MaxDepth != 0 || *got.TokenBudget != MaxSafeInteger || !got.Deadline.Equal(created.Add(90*time.Minute)) ||
		*got.IdleTimeout != 2*time.Second || got.MaxChildren != nil || got.MaxConcurrent != nil {
		t.Fatalf("resolved %+v", got)
	}
	at, err := Limits{Deadline: "2031-02-03T04:05:06+01:00"}.Resolve(created)
	if err != nil || !at.Deadline.Equal(time.Date(2031, 2, 3, 3, 5, 6, 0, time.UTC)) || at.Deadline.Location() != time.UTC {
		t.Fatalf("RFC 3339 deadline resolved %v, %v", at.Deadline, err)
	}
	if zero, err := (Limits{}).Resolve(created); err != nil || !zero.IsZero() {
		t.Fatalf("no limits resolved %+v, %v", zero, err)
	}
	for field, l := range map[string]Limits{
		"limits.maxDepth":      {MaxDepth: n(-1)},
		"limits.maxChildren":   {MaxChildren: n(MaxSafeInteger + 1)},
		"limits.maxConcurrent": {MaxConcurrent: n(-5)},
		"limits.tokenBudget":   {TokenBudget: n(-1)},
		"limits.deadline":      {Deadline: "tomorrow"},
		"limits.idleTimeout":   {IdleTimeout: "-1s"},
	} {
		_, err := l.Resolve(created)
		var e *Error
		if !errors.As(err, &e) || e.Code != EInvalidRequest || e.Fields[field] == "" {
			t.Errorf("%+v: %v, want INVALID_REQUEST naming %s", l, err, field)
		}
	}
	for _, l := range []Limits{{Deadline: "0s"}, {IdleTimeout: "0s"}, {Deadline: strings.Repeat("9", MaxLimitText+1)}} {
		if _, err := l.Resolve(created); ErrorCode(err) != EInvalidRequest {
			t.Errorf("%+v: %v, want INVALID_REQUEST", l, err)
		}
	}
}
