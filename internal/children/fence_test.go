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
	end, _ := fencedActivation(t, nil)
	if end.StopReason != subagent.StopAborted {
		t.Fatalf("end %+v; want aborted", end)
	}
}

// detaching is an agent whose running turn's work goes on without it
// (subagent.Detacher): Detach notes the call and ends the local turn, as
// an A2A child stops following its remote task.
type detaching struct {
	subagent.ChildAgent
	detached chan struct{}
}

func (d *detaching) Detach() {
	close(d.detached)
	d.ChildAgent.Cancel("detached", true)
}

// A fenced replica detaches a Detacher's running turn instead of
// cancelling it — its work goes on for the child's next driver — and the
// activation ends error with DetachedDiagnostic.
func TestKeepLeases_DetachesATurnWhoseWorkGoesOn(t *testing.T) {
	t.Parallel()
	d := &detaching{detached: make(chan struct{})}
	end, st := fencedActivation(t, func(ag subagent.ChildAgent) subagent.ChildAgent { d.ChildAgent = ag; return d })
	select {
	case <-d.detached:
	default:
		t.Fatal("the fenced replica did not detach the turn")
	}
	run, err := st.GetRun(t.Context(), end.RunID)
	if err != nil {
		t.Fatal(err)
	}
	if end.StopReason != subagent.StopError || run.Diagnostic != DetachedDiagnostic {
		t.Fatalf("end %s, diagnostic %q; want error, %q", end.StopReason, run.Diagnostic, DetachedDiagnostic)
	}
}

// fencedActivation starts a continuable child whose agent (wrapped by wrap,
// if set) is in a model step, then runs the lease keeper over a store that
// cannot renew leases, and returns the activation's subagent/end.
func fencedActivation(t *testing.T, wrap func(subagent.ChildAgent) subagent.ChildAgent) (subagent.Event, store.Store) {
	t.Helper()
	st := &storetest.RenewStore{Store: memstore.New(), Fail: true}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	svc := subagent.NewService(subagent.Config{Store: st, Logger: log, Owner: "replica-a", LeaseDuration: 300 * time.Millisecond})
	gate, reached := make(chan struct{}), make(chan struct{})
	t.Cleanup(func() { close(gate) })
	mat := &testMat{st: st, model: gatedModel(gate, reached, "working")}
	if wrap != nil {
		mat.setWrap(wrap)
	}
	m := NewManager(svc, ManagerConfig{Materializer: mat, Logger: log})
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
	var end subagent.Event
	select {
	case end = <-ends:
		if end.TaskID != started.TaskID {
			t.Fatalf("end %+v; want task %s", end, started.TaskID)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the activation is still driven although its lease could not be renewed")
	}
	if err := m.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	return end, st
}
