package subagent

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/memstore"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/store/storetest"
)

// fenceSetup starts one never-settling run on a service with a short lease
// over st, and its lease keeper.
func fenceSetup(t *testing.T, st store.Store) *RunHandle {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	svc := NewService(Config{Store: st, Logger: log, Owner: "replica-a", LeaseDuration: 300 * time.Millisecond})
	ctx := store.WithTenant(t.Context(), "acme")
	if err := svc.Register(ctx, &fakeProvider{name: "spawn", caps: allCaps}); err != nil {
		t.Fatal(err)
	}
	h, err := svc.Start(ctx, "spawn", Request{Parent: Parent{Session: store.Session{ID: "parent"}}})
	if err != nil {
		t.Fatal(err)
	}
	kctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); svc.KeepLeases(kctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return h
}

func TestKeepLeases_StopsDrivingRunsWhoseLeaseItCannotRenew(t *testing.T) {
	t.Parallel()
	st := &storetest.RenewStore{Store: memstore.New(), Fail: true, Calls: make(chan struct{}, 1)}
	h := fenceSetup(t, st)
	select {
	case <-h.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the run is still driven although its lease could not be renewed")
	}
	res, err := h.Result()
	if err != nil || res.StopReason != StopAborted {
		t.Fatalf("result = %+v, %v; want the run cancelled", res, err)
	}
}

func TestKeepLeases_KeepsDrivingRunsWhoseLeaseItRenews(t *testing.T) {
	t.Parallel()
	st := &storetest.RenewStore{Store: memstore.New(), Calls: make(chan struct{})}
	h := fenceSetup(t, st)
	// Six rounds span two leases: a fence would have fired by then.
	for range 6 {
		select {
		case <-st.Calls:
		case <-time.After(10 * time.Second):
			t.Fatal("the lease keeper stopped renewing")
		}
	}
	select {
	case <-h.Done():
		t.Fatal("a run whose lease is renewed was stopped")
	default:
	}
}
