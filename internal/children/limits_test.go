package children

import (
	"context"
	"errors"
	"testing"

	"github.com/subagentd/subagentd/internal/memstore"
	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/model/scripted"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// TestMaxLiveRuns_CountsActivations: one cap counts one-shot runs and
// continuable activations. A continuable start, a one-shot start and a
// followup that would start an activation are refused beyond it, before
// anything is written; a followup steered into a live activation needs no
// slot; an activation's settlement frees its slot, and so does a one-shot
// run's.
func TestMaxLiveRuns_CountsActivations(t *testing.T) {
	t.Parallel()
	gates := map[string]chan struct{}{"hold-a": make(chan struct{}), "hold-b": make(chan struct{})}
	mdl := scripted.Func(func(req model.Request) scripted.Step {
		last := req.Messages[len(req.Messages)-1]
		if g, ok := gates[model.Text(last.Content)]; ok && last.Role == model.RoleUser {
			return scripted.Step{Text: "held", Gate: g}
		}
		return scripted.Step{Text: "ok"}
	})
	e := newContEnvWith(t, &spyStore{Store: memstore.New()}, mdl, subagent.Config{MaxLiveRuns: 1})

	a := e.start(t, e.req(t, "hold-a"))
	refusedB := e.req(t, "x")
	refusedB.ChildID = "b"
	_, err := e.m.StartContinuable(t.Context(), refusedB)
	wantCode(t, err, subagent.ERateLimited)
	if _, err := e.st.GetSession(t.Context(), "b"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a refused continuable start wrote its child: %v", err)
	}
	_, err = e.svc.Start(t.Context(), "spawn", request())
	wantCode(t, err, subagent.ERateLimited)

	// Steered into the live activation: no slot needed.
	out := e.followupAsync(t.Context(), a.ChildID, "more")
	e.waitLog(t, a.ChildID, "the steer", steersSubmitted(1))
	close(gates["hold-a"])
	if o := await(t, out); o.err != nil || o.res.Route != subagent.RouteSteered {
		t.Fatalf("followup into the live activation: %+v, %v", o.res, o.err)
	}
	e.ended(t, a.TaskID)
	e.settled(t, a.ChildID)

	// The settled activation gave its slot back; b now holds it.
	b := e.start(t, e.req(t, "hold-b"))
	accepted := len(e.st.accepted())
	_, err = e.m.Followup(t.Context(), "p1", a.ChildID, txt("again"), sessionlog.Source{})
	wantCode(t, err, subagent.ERateLimited)
	if n := len(e.st.accepted()); n != accepted {
		t.Fatalf("a refused followup was accepted into the inbox (%d rows, want %d)", n, accepted)
	}
	if p, err := e.st.Pending(t.Context(), a.ChildID); err != nil || len(p) != 0 {
		t.Fatalf("a refused followup left %d pending rows (%v)", len(p), err)
	}
	close(gates["hold-b"])
	e.ended(t, b.TaskID)
	e.settled(t, b.ChildID)

	// A one-shot run takes the slot until it settles.
	run := newFakeRun("one-shot", true)
	e.prov.StartFn = func(context.Context, subagent.ResolvedRequest) (subagent.Run, error) { return run, nil }
	h, err := e.svc.Start(t.Context(), "spawn", request())
	if err != nil {
		t.Fatalf("one-shot start with a free slot: %v", err)
	}
	_, err = e.m.Followup(t.Context(), "p1", a.ChildID, txt("again"), sessionlog.Source{})
	wantCode(t, err, subagent.ERateLimited)
	run.settle(subagent.Result{StopReason: subagent.StopCompleted}, nil)
	<-h.Done()
	if o, err := e.m.Followup(t.Context(), "p1", a.ChildID, txt("again"), sessionlog.Source{}); err != nil || o.Route != subagent.RouteStarted {
		t.Fatalf("followup with a free slot: %+v, %v", o, err)
	}
}
