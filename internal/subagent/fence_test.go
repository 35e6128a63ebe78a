package subagent

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/memstore"
	"github.com/subagentd/subagentd/internal/store"
)

// renewStore is a store whose RenewLeases reports each call on calls and
// fails while fail is set.
type renewStore struct {
	store.Store
	fail  bool
	calls chan struct{}
}

func (s *renewStore) RenewLeases(ctx context.Context, owner string, until time.Time) error {
	select {
	case s.calls <- struct{}{}:
	default:
	}
	if s.fail {
		return errors.New("database unreachable")
	}
	return s.Store.RenewLeases(ctx, owner, until)
}

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
	st := &renewStore{Store: memstore.New(), fail: true, calls: make(chan struct{}, 1)}
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
	st := &renewStore{Store: memstore.New(), calls: make(chan struct{})}
	h := fenceSetup(t, st)
	// Six rounds span two leases: a fence would have fired by then.
	for range 6 {
		select {
		case <-st.calls:
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

// A replica that cannot renew its leases also stops driving its resident
// agents: the turn of a continuable child's activation is cancelled and the
// activation settles, before another replica may take the child over.
func TestKeepLeases_StopsDrivingResidentAgentsWhoseLeaseItCannotRenew(t *testing.T) {
	t.Parallel()
	st := &renewStore{Store: memstore.New(), fail: true, calls: make(chan struct{}, 1)}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	svc := NewService(Config{Store: st, Logger: log, Owner: "replica-a", LeaseDuration: 300 * time.Millisecond})
	gate, reached := make(chan struct{}), make(chan struct{})
	defer close(gate)
	m := NewManager(svc, ManagerConfig{Materializer: &testMat{st: st, model: gatedModel(gate, reached, "working")}, Logger: log})
	if err := svc.Register(t.Context(), &contProvider{fakeProvider: &fakeProvider{name: "spawn", caps: contCaps}}); err != nil {
		t.Fatal(err)
	}
	ends := make(chan Event, 4)
	svc.Subscribe("", func(_ context.Context, e Event) error {
		if e.Type == EventEnd {
			ends <- e
		}
		return nil
	})
	if err := st.CreateSession(t.Context(), store.Session{ID: "p1"}); err != nil {
		t.Fatal(err)
	}
	started, err := m.StartContinuable(t.Context(), ContinuableRequest{Provider: "spawn", Label: "task", Prompt: txt("go"),
		Parent: Parent{Session: store.Session{ID: "p1"}}})
	if err != nil {
		t.Fatal(err)
	}
	<-reached
	kctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); svc.KeepLeases(kctx) }()
	defer func() { cancel(); <-done }()
	select {
	case e := <-ends:
		if e.TaskID != started.TaskID || e.StopReason != StopAborted {
			t.Fatalf("end %+v; want task %s aborted", e, started.TaskID)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the activation is still driven although its lease could not be renewed")
	}
	if err := m.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
}
