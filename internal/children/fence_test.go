package children

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/memstore"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/store/storetest"
	"github.com/subagentd/subagentd/internal/subagent"
)

// A replica that cannot renew its leases also stops driving its resident
// agents: the turn of a continuable child's activation is cancelled and the
// activation settles, before another replica may take the child over.
func TestKeepLeases_StopsDrivingResidentAgentsWhoseLeaseItCannotRenew(t *testing.T) {
	t.Parallel()
	st := &storetest.RenewStore{Store: memstore.New(), Fail: true}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	svc := subagent.NewService(subagent.Config{Store: st, Logger: log, Owner: "replica-a", LeaseDuration: 300 * time.Millisecond})
	gate, reached := make(chan struct{}), make(chan struct{})
	defer close(gate)
	m := NewManager(svc, ManagerConfig{Materializer: &testMat{st: st, model: gatedModel(gate, reached, "working")}, Logger: log})
	if err := svc.Register(t.Context(), &contProvider{fakeProvider: &fakeProvider{name: "spawn", caps: contCaps}}); err != nil {
		t.Fatal(err)
	}
	ends := make(chan subagent.Event, 4)
	svc.Subscribe("", func(_ context.Context, e subagent.Event) error {
		if e.Type == subagent.EventEnd {
			ends <- e
		}
		return nil
	})
	if err := st.CreateSession(t.Context(), store.Session{ID: "p1"}); err != nil {
		t.Fatal(err)
	}
	started, err := m.StartContinuable(t.Context(), ContinuableRequest{Provider: "spawn", Label: "task", Prompt: txt("go"),
		Parent: subagent.Parent{Session: store.Session{ID: "p1"}}})
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
		if e.TaskID != started.TaskID || e.StopReason != subagent.StopAborted {
			t.Fatalf("end %+v; want task %s aborted", e, started.TaskID)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the activation is still driven although its lease could not be renewed")
	}
	if err := m.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
}
