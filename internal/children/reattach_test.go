package children

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// reattacher is a continuable provider whose children's turns outlive
// their replica.
type reattacher struct{ *contProvider }

func (reattacher) ReattachesTurns() {}

// detachedAgent is an agent materialized over a log ending in a turn its
// last owner left open: Reattach runs that turn (here a turn of the real
// agent) and closes rejoined.
type detachedAgent struct {
	subagent.ChildAgent
	detached atomic.Bool
	rejoined chan struct{}
}

func (d *detachedAgent) Detached() bool { return d.detached.Load() }

func (d *detachedAgent) Reattach() {
	d.detached.Store(false)
	msg := sessionlog.UserMessage{ID: uuid.NewString(), Role: "user", Content: txt("rejoined"), Source: sessionlog.Source{Kind: "user"}}
	if _, err := d.ChildAgent.FollowupMessage(context.Background(), msg); err == nil {
		close(d.rejoined)
	}
}

// The takeover of a child whose owner's lease lapsed, with nothing in its
// inbox, resumes it when its provider is a Reattacher: the cold resume
// starts an activation whose running turn is the one the agent rejoins,
// and that turn's end settles it. A child of another provider with an
// empty inbox is only released.
func TestReattach_TakeoverStartsAnActivationForADetachedTurn(t *testing.T) {
	t.Parallel()
	a := newContEnv(t, gatedModel(nil, make(chan struct{}), "first"))
	if err := a.svc.Register(t.Context(), reattacher{&contProvider{fakeProvider: &fakeProvider{name: "remote", caps: contCaps}}}); err != nil {
		t.Fatal(err)
	}
	remote := a.start(t, ContinuableRequest{Provider: "remote", Label: "remote", Prompt: txt("first"), Parent: a.parent(t, "p1")})
	local := a.start(t, a.req(t, "first"))
	a.ended(t, remote.TaskID)
	a.ended(t, local.TaskID)
	ag := &detachedAgent{rejoined: make(chan struct{})}
	ag.detached.Store(true)
	a.mat.setWrap(func(c subagent.ChildAgent) subagent.ChildAgent { ag.ChildAgent = c; return ag })
	before := len(a.mat.requests())

	// Once their loops gave their leases back, both children are as a
	// replica that died driving them leaves them: leased to it, lapsed.
	wctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := a.m.children.Wait(wctx); err != nil {
		t.Fatalf("the children's loops did not end: %v", err)
	}
	now := time.Now()
	for _, id := range []string{remote.ChildID, local.ChildID} {
		if _, claimed, err := a.st.ClaimResident(t.Context(), store.ClaimParams{SessionID: id, Owner: "replica-dead", Now: now.Add(-time.Minute), Until: now.Add(-time.Second)}); err != nil || !claimed {
			t.Fatalf("claim %s for the dead replica: %v, %v", id, claimed, err)
		}
	}
	if err := a.svc.Control().TakeOverLapsed(t.Context(), now); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ag.rejoined:
	case <-time.After(10 * time.Second):
		t.Fatal("the takeover did not reattach the detached turn")
	}
	evs := a.life.waitFor(t, "the reattaching activation", func(evs []subagent.Event) bool {
		return slices.ContainsFunc(evs, func(ev subagent.Event) bool {
			return ev.Type == subagent.EventStart && ev.ID == remote.ChildID && ev.TaskID != remote.TaskID
		})
	})
	start := evs[slices.IndexFunc(evs, func(ev subagent.Event) bool {
		return ev.Type == subagent.EventStart && ev.ID == remote.ChildID && ev.TaskID != remote.TaskID
	})]
	if end := a.ended(t, start.TaskID); end.StopReason != subagent.StopCompleted {
		t.Fatalf("the reattaching activation ended %+v, want completed", end)
	}
	reqs := a.mat.requests()[before:]
	if len(reqs) != 1 || reqs[0].Session.ID != remote.ChildID {
		t.Fatalf("the takeover materialized %d agents, want only the remote child's", len(reqs))
	}
}
