package children

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// replicaB builds a second replica over a's store: its own Service and
// Manager under another owner, serving control requests until the test
// ends. Its model answers "b".
func replicaB(t *testing.T, a *contEnv) (*subagent.Service, *Manager) {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	svcB := subagent.NewService(subagent.Config{Store: a.st, Logger: logger, Owner: "replica-2"})
	mgrB := NewManager(svcB, ManagerConfig{Materializer: &testMat{st: a.st, model: gatedModel(nil, make(chan struct{}), "b")}, Logger: logger})
	if err := svcB.Register(t.Context(), &contProvider{fakeProvider: &fakeProvider{name: "spawn", caps: contCaps}}); err != nil {
		t.Fatal(err)
	}
	serve(t, svcB)
	t.Cleanup(func() {
		ctx := context.WithoutCancel(t.Context())
		if err := mgrB.Shutdown(ctx); err != nil {
			t.Errorf("B's manager shutdown: %v", err)
		}
		if err := svcB.Shutdown(ctx); err != nil {
			t.Errorf("B's service shutdown: %v", err)
		}
	})
	return svcB, mgrB
}

// serve runs svc's KeepLeases (which serves its control requests) until
// the test ends.
func serve(t *testing.T, svc *subagent.Service) {
	ctx, stop := context.WithCancel(context.WithoutCancel(t.Context()))
	done := make(chan struct{})
	go func() { defer close(done); svc.KeepLeases(ctx) }()
	t.Cleanup(func() { stop(); <-done })
}

// While replica A drives a child's activation (it holds the child's
// resident lease), a followup and an interrupt taken by replica B are
// carried out by A (docs/architecture.md §5): the followup is steered into A's running
// turn and lands in the log once, B answers with A's route and task, and
// B never builds an agent of its own over the log.
func TestReplicas_FollowupAndInterruptThroughAnotherReplicaReachTheOwner(t *testing.T) {
	t.Parallel()
	gate, reached := make(chan struct{}), make(chan struct{})
	a := newContEnv(t, gatedModel(gate, reached, "working"))
	serve(t, a.svc)
	started := a.start(t, a.req(t, "first"))
	<-reached
	_, mgrB := replicaB(t, a)

	out := make(chan followupOutcome, 1)
	go func() {
		res, err := mgrB.Followup(t.Context(), "p1", started.ChildID, txt("second"), sessionlog.Source{Kind: subagent.SourceUser})
		out <- followupOutcome{res, err}
	}()
	a.waitLog(t, started.ChildID, "the steer B routed to A", steersSubmitted(1))
	close(gate)
	got := await(t, out)
	if got.err != nil || got.res.Route != subagent.RouteSteered || got.res.TaskID != started.TaskID || got.res.MessageID == "" {
		t.Fatalf("followup through B: %+v, %v; want steered into A's task %s", got.res, got.err, started.TaskID)
	}
	a.ended(t, started.TaskID)
	if n := countText(userTexts(t, a.log(t, started.ChildID)), "second"); n != 1 {
		t.Fatalf("the followup through B is in the log %d times, want once", n)
	}

	// A interrupt through B of an activation A drives stops it.
	gate2, reached2 := make(chan struct{}), make(chan struct{})
	a.mat.model = gatedModel(gate2, reached2, "again")
	defer close(gate2)
	res, err := a.m.Followup(t.Context(), "p1", started.ChildID, txt("third"), sessionlog.Source{Kind: subagent.SourceUser})
	if err != nil || res.Route != subagent.RouteStarted {
		t.Fatalf("followup on A: %+v, %v; want started", res, err)
	}
	<-reached2
	if err := mgrB.Interrupt(t.Context(), "p1", started.ChildID); err != nil {
		t.Fatalf("interrupt through B: %v", err)
	}
	if end := a.ended(t, res.TaskID); end.StopReason != subagent.StopAborted {
		t.Fatalf("A's activation after an interrupt through B ended %q, want aborted", end.StopReason)
	}
	wantCode(t, mgrB.Interrupt(t.Context(), "p9", started.ChildID), subagent.EForbidden)
}

// countText counts the texts equal to s.
func countText(texts []string, s string) int {
	return len(slices.DeleteFunc(slices.Clone(texts), func(x string) bool { return x != s }))
}

// An asynchronous followup taken by replica B for a child replica A drives
// goes to A as a control request and is answered once A stored it — while
// A's model step still holds, so before any step admitted it — and A
// announces its route (message/routed: steered into A's task), once; the
// log holds the message once.
func TestReplicas_AsyncFollowupThroughAnotherReplicaIsAnnouncedByTheOwner(t *testing.T) {
	t.Parallel()
	gate, reached := make(chan struct{}), make(chan struct{})
	a := newContEnv(t, gatedModel(gate, reached, "working"))
	serve(t, a.svc)
	started := a.start(t, a.req(t, "first"))
	<-reached
	_, mgrB := replicaB(t, a)

	id, err := mgrB.FollowupAsync(t.Context(), "p1", started.ChildID, txt("second"), sessionlog.Source{Kind: subagent.SourceUser})
	if err != nil || id == "" {
		t.Fatalf("async followup through B: %q, %v", id, err)
	}
	if rows, err := a.st.Pending(t.Context(), started.ChildID); err != nil || len(rows) != 1 || rows[0].ID != id {
		t.Fatalf("child inbox at B's answer: %+v, %v", rows, err)
	}
	if n := countText(userTexts(t, a.log(t, started.ChildID)), "second"); n != 0 {
		t.Fatalf("the message was logged %d times before a step admitted it", n)
	}
	_, err = mgrB.FollowupAsync(t.Context(), "p9", started.ChildID, txt("not yours"), sessionlog.Source{Kind: subagent.SourceUser})
	wantCode(t, err, subagent.EForbidden)

	close(gate)
	routed := waitRouted(t, a.st, id)
	if len(routed) != 1 || routed[0] != (messageRouted{MessageID: id, ChildSessionID: started.ChildID, ParentSessionID: "p1",
		RootSessionID: "p1", Outcome: string(subagent.RouteSteered), TaskID: started.TaskID}) {
		t.Fatalf("message/routed %+v", routed)
	}
	a.ended(t, started.TaskID)
	if n := countText(userTexts(t, a.log(t, started.ChildID)), "second"); n != 1 {
		t.Fatalf("the followup through B is in the log %d times, want once", n)
	}
}

// waitRouted waits until st's lifecycle log holds a message/routed event
// of message id and returns every such event's data.
func waitRouted(t *testing.T, st store.Store, id string) []messageRouted {
	t.Helper()
	wake, stop := st.Subscribe(store.LifecycleTopic)
	defer stop()
	deadline := time.After(10 * time.Second)
	for {
		evs, err := st.Lifecycle(t.Context(), store.LifecycleFilter{Types: []string{EventMessageRouted}, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		var out []messageRouted
		for _, e := range evs {
			var d messageRouted
			if err := json.Unmarshal(e.Payload, &d); err != nil {
				t.Fatal(err)
			}
			if d.MessageID == id {
				out = append(out, d)
			}
		}
		if len(out) > 0 {
			return out
		}
		select {
		case <-wake:
		case <-deadline:
			t.Fatalf("no message/routed of %s within 10s", id)
		}
	}
}
