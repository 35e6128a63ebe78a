package subagent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/memstore"
	"github.com/subagentd/subagentd/internal/store"
)

// leaseSetup starts one run, owned by "replica-a", that never settles on
// its own, in tenant "acme".
func leaseSetup(t *testing.T, st store.Store) (*Service, *RunHandle) {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	a := NewService(Config{Store: st, Logger: log, Owner: "replica-a"})
	ctx := store.WithTenant(t.Context(), "acme")
	if err := a.Register(ctx, &fakeProvider{name: "spawn", caps: allCaps}); err != nil {
		t.Fatal(err)
	}
	h, err := a.Start(ctx, "spawn", Request{Parent: Parent{Session: store.Session{ID: "parent"}}})
	if err != nil {
		t.Fatal(err)
	}
	return a, h
}

// waitEnd returns the first subagent/end the recorder sees.
func waitEnd(t *testing.T, rec *recorder) Event {
	t.Helper()
	for {
		select {
		case e := <-rec.seen:
			if e.Type == EventEnd {
				return e
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no subagent/end within 10s")
		}
	}
}

// endsOf returns the durable subagent/end rows of runID in tenant.
func endsOf(t *testing.T, st store.Store, runID, tenant string) []store.LifecycleEvent {
	t.Helper()
	evs, err := st.Lifecycle(store.WithTenant(t.Context(), tenant), store.LifecycleFilter{Types: []string{EventEnd}, After: 0})
	if err != nil {
		t.Fatal(err)
	}
	var out []store.LifecycleEvent
	for _, e := range evs {
		if e.RunID == runID {
			out = append(out, e)
		}
	}
	return out
}

func TestRecoverOwned_ClosesRunsOfThePreviousIncarnationOnce(t *testing.T) {
	t.Parallel()
	st := memstore.New()
	a, h := leaseSetup(t, st)

	// A restarted "replica-a" shares the store; the old process is gone.
	b := NewService(Config{Store: st, Logger: a.log, Owner: "replica-a"})
	rec := newRecorder()
	b.Subscribe("", rec.listen)
	if err := b.RecoverOwned(t.Context()); err != nil {
		t.Fatal(err)
	}
	end := waitEnd(t, rec)
	if end.RunID != h.ID() || end.StopReason != StopError || end.ParentID != "parent" || end.Provider != "spawn" {
		t.Fatalf("end = %+v, want the run %s closed with error", end, h.ID())
	}
	got, err := st.GetRun(store.WithTenant(t.Context(), "acme"), h.ID())
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf(OwnerLostDiagnostic, "replica-a"); got.State != store.StateSettled || got.Diagnostic != want {
		t.Fatalf("run row = %s %q, want settled %q", got.State, got.Diagnostic, want)
	}
	// A second recovery, and the old handle settling late, add no end.
	if err := b.RecoverOwned(t.Context()); err != nil {
		t.Fatal(err)
	}
	h.Cancel()
	<-h.Done()
	if n := len(endsOf(t, st, h.ID(), "acme")); n != 1 {
		t.Fatalf("%d subagent/end rows for %s, want exactly 1", n, h.ID())
	}
}

func TestKeepLeases_OtherReplicaClosesExpiredRunsAndRenewsItsOwn(t *testing.T) {
	t.Parallel()
	st := memstore.New()
	_, orphan := leaseSetup(t, st) // replica-a never renews: its lease lapses

	b := NewService(Config{Store: st, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Owner: "replica-b", LeaseDuration: 60 * time.Millisecond})
	if err := b.Register(t.Context(), &fakeProvider{name: "spawn", caps: allCaps}); err != nil {
		t.Fatal(err)
	}
	ctx := store.WithTenant(t.Context(), "acme")
	own, err := b.Start(ctx, "spawn", Request{Parent: Parent{Session: store.Session{ID: "parent"}}})
	if err != nil {
		t.Fatal(err)
	}
	// Make replica-a's lease lapse now rather than in 30 s.
	if err := st.RenewLeases(t.Context(), "replica-a", time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	b.Subscribe("", rec.listen)
	kctx, stop := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { b.KeepLeases(kctx); close(done) }()
	end := waitEnd(t, rec)
	if end.RunID != orphan.ID() {
		t.Fatalf("closed %s, want only the orphan %s", end.RunID, orphan.ID())
	}
	// Several renewal periods later b's own run is still running: its
	// lease keeps being extended.
	deadline := time.Now().Add(300 * time.Millisecond)
	for time.Now().Before(deadline) {
		r, err := st.GetRun(ctx, own.ID())
		if err != nil {
			t.Fatal(err)
		}
		if r.State != store.StateRunning {
			t.Fatalf("own run %s was closed: %+v", own.ID(), r)
		}
		select {
		case e := <-rec.seen:
			t.Fatalf("unexpected event %+v", e)
		case <-time.After(20 * time.Millisecond):
		}
	}
	stop()
	<-done
}

// A settled run nobody disposes is disposed by the service after
// RetainSettled, so the process does not grow with forgotten runs; its
// durable row stays readable, marked disposed.
func TestRetainSettled_ForgottenRunsAreDisposed(t *testing.T) {
	t.Parallel()
	st := memstore.New()
	svc := NewService(Config{Store: st, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Owner: "r", RetainSettled: time.Millisecond})
	p := &fakeProvider{name: "spawn", caps: allCaps}
	if err := svc.Register(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	h, err := svc.Start(t.Context(), "spawn", Request{Parent: Parent{Session: store.Session{ID: "parent"}}})
	if err != nil {
		t.Fatal(err)
	}
	h.run.(*fakeRun).settle(Result{StopReason: StopCompleted}, nil)
	select {
	case <-h.disposed:
	case <-time.After(10 * time.Second):
		t.Fatal("a settled run was not disposed after RetainSettled")
	}
	if _, live := svc.Run(t.Context(), h.ID()); live {
		t.Fatal("the expired run is still a live handle")
	}
	r, err := st.GetRun(t.Context(), h.ID())
	if err != nil || r.State != store.StateDisposed || r.StopReason != StopCompleted {
		t.Fatalf("run row %+v, %v; want disposed with its result", r, err)
	}
	if cancels, disposes := h.run.(*fakeRun).counts(); disposes != 1 || cancels < 1 {
		t.Fatalf("provider run cancelled %d and disposed %d times, want disposed once", cancels, disposes)
	}
}

// flakyEnds fails the first n EndRun calls, as a database that blips would.
type flakyEnds struct {
	store.Store
	mu   sync.Mutex
	left int
}

func (s *flakyEnds) EndRun(ctx context.Context, id string, res store.RunResult, e store.LifecycleEvent) (store.LifecycleEvent, error) {
	s.mu.Lock()
	fail := s.left > 0
	s.left--
	s.mu.Unlock()
	if fail {
		return store.LifecycleEvent{}, errors.New("connection reset")
	}
	return s.Store.EndRun(ctx, id, res, e)
}

// A transient store failure does not lose the end: it is retried until
// recorded, then dispatched once with its stored id (exactly one end, also
// across restarts — a row left running would be reaped as lost later).
func TestRecordEnd_RetriesATransientStoreFailure(t *testing.T) {
	t.Parallel()
	st := &flakyEnds{Store: memstore.New(), left: 2}
	svc := NewService(Config{Store: st, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Owner: "r"})
	if err := svc.Register(t.Context(), &fakeProvider{name: "spawn", caps: allCaps}); err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	svc.Subscribe("", rec.listen)
	h, err := svc.Start(t.Context(), "spawn", Request{Parent: Parent{Session: store.Session{ID: "parent"}}})
	if err != nil {
		t.Fatal(err)
	}
	h.run.(*fakeRun).settle(Result{StopReason: StopCompleted}, nil)
	end := waitEnd(t, rec)
	if end.Seq == 0 {
		t.Fatalf("end dispatched without a stored id: %+v", end)
	}
	if r, err := st.GetRun(t.Context(), h.ID()); err != nil || r.State != store.StateSettled {
		t.Fatalf("run row %+v, %v; want settled", r, err)
	}
	if n := len(endsOf(t, st, h.ID(), store.DefaultTenant)); n != 1 {
		t.Fatalf("%d end rows, want 1", n)
	}
}
