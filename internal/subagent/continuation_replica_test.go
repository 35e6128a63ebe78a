package subagent

import (
	"io"
	"log/slog"
	"testing"

	"github.com/subagentd/subagentd/internal/sessionlog"
)

// While one replica drives a child's activation (its lease is live),
// another replica neither cold-resumes the child — a second agent over the
// same log would run messages twice — nor acknowledges an interrupt it
// cannot carry out: both answer OWNED_ELSEWHERE and nothing is appended.
// (DESIGN §5; routing the request to the owner is not built yet.)
func TestReplicas_ALiveActivationIsOwnedElsewhere(t *testing.T) {
	t.Parallel()
	gate, reached := make(chan struct{}), make(chan struct{})
	a := newContEnv(t, gatedModel(gate, reached, "working"))
	started := a.start(t, a.req(t, "first"))
	<-reached

	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	svcB := NewService(Config{Store: a.st, Logger: logger, Owner: "replica-2"})
	mgrB := NewManager(svcB, ManagerConfig{Materializer: &testMat{st: a.st, model: gatedModel(gate, make(chan struct{}), "b")}, Logger: logger})
	if err := svcB.Register(t.Context(), &contProvider{fakeProvider: &fakeProvider{name: "spawn", caps: contCaps}}); err != nil {
		t.Fatal(err)
	}
	before := len(a.log(t, started.ChildID))

	_, err := mgrB.Followup(t.Context(), "p1", started.ChildID, txt("second"), sessionlog.Source{Kind: SourceUser})
	wantCode(t, err, EOwnedElsewhere)
	wantCode(t, mgrB.Interrupt(t.Context(), "p1", started.ChildID), EOwnedElsewhere)
	if after := len(a.log(t, started.ChildID)); after != before {
		t.Fatalf("the child's log grew from %d to %d events on the other replica's refusal", before, after)
	}
	if pending, err := a.st.Pending(t.Context(), started.ChildID); err != nil || len(pending) != 0 {
		t.Fatalf("pending after the refusal: %v, %v; want the message withdrawn", pending, err)
	}

	close(gate)
	a.ended(t, started.TaskID)
	// Once the owner settled, the other replica may resume the child.
	res, err := mgrB.Followup(t.Context(), "p1", started.ChildID, txt("third"), sessionlog.Source{Kind: SourceUser})
	if err != nil || res.Route != RouteStarted {
		t.Fatalf("followup on the other replica after settlement: %+v, %v; want started", res, err)
	}
	if err := mgrB.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := svcB.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
}
