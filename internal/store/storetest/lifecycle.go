package storetest

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/store"
)

var leaseTests = []test{
	{"RenewLeases_RunningRunsOfOwnerInEveryTenant", func(t *testing.T, s store.Store) {
		ctx := t.Context()
		lease := func(id, owner string) store.Run {
			r := oneShot(id, "p1", t0)
			r.Owner, r.LeaseUntil = owner, sec(10)
			return r
		}
		startRun(t, s, lease("mine", "A"))
		startRun(t, s, lease("settled", "A"))
		must(s.EndRun(ctx, "settled", completed, endEvent("settled", "p1")))(t)
		startRun(t, s, lease("theirs", "B"))
		must(s.StartRun(other(ctx), lease("mine-acme", "A"), startEvent(lease("mine-acme", "A"))))(t)

		ok(t, s.RenewLeases(ctx, "A", sec(100)))
		for _, tc := range []struct {
			ctx   bool // other tenant
			id    string
			until time.Time
		}{
			{false, "mine", sec(100)},
			{false, "settled", sec(10)},
			{false, "theirs", sec(10)},
			{true, "mine-acme", sec(100)},
		} {
			c := ctx
			if tc.ctx {
				c = other(ctx)
			}
			if got := must(s.GetRun(c, tc.id))(t).LeaseUntil; !got.Equal(tc.until) {
				t.Fatalf("LeaseUntil of %s after RenewLeases(A) = %v, want %v", tc.id, got, tc.until)
			}
		}
	}},
	{"ExpiredRuns_RunningRunsWithEndedLeaseInEveryTenant", func(t *testing.T, s store.Store) {
		ctx := t.Context()
		lease := func(id string, started time.Time, until time.Time) store.Run {
			r := oneShot(id, "p1", started)
			r.LeaseUntil = until
			return r
		}
		startRun(t, s, lease("late", sec(2), sec(50)))
		startRun(t, s, lease("early", sec(1), sec(10)))
		startRun(t, s, lease("settled", sec(0), sec(10)))
		must(s.EndRun(ctx, "settled", completed, endEvent("settled", "p1")))(t)
		startRun(t, s, lease("unleased", sec(0), time.Time{}))
		acme := lease("acme", sec(3), sec(10))
		must(s.StartRun(other(ctx), acme, startEvent(acme)))(t)

		for _, tc := range []struct {
			now  time.Time
			want []string
		}{
			{sec(10), nil}, // a lease ending exactly now has not ended before now
			{sec(11), []string{"early", "acme"}},
			{sec(51), []string{"early", "late", "acme"}},
		} {
			got := must(s.ExpiredRuns(ctx, tc.now))(t)
			sameIDs(t, fmt.Sprintf("ExpiredRuns(%v)", tc.now), runIDs(got), tc.want)
		}
		got := must(s.ExpiredRuns(ctx, sec(11)))(t)
		same(t, "ExpiredRuns(...)[1]", got[1], func() store.Run { r := acme; r.State, r.Tenant = store.StateRunning, otherTenant; return r }(), canonRun)
	}},
}

func lifecycleEvent(typ, parent, run string) store.LifecycleEvent {
	return store.LifecycleEvent{
		Type: typ, ParentID: parent, RunID: run, Time: t0,
		Payload: json.RawMessage(fmt.Sprintf(`{"type":%q,"run":%q}`, typ, run)),
	}
}

// appendAll appends evs in order and returns them with their ids.
func appendAll(t *testing.T, s store.Store, evs ...store.LifecycleEvent) []store.LifecycleEvent {
	t.Helper()
	out := make([]store.LifecycleEvent, len(evs))
	for i, e := range evs {
		out[i] = must(s.AppendLifecycle(t.Context(), e))(t)
	}
	return out
}

var lifecycleTests = []test{
	{"LastLifecycleID_NewestOfTheTenant", func(t *testing.T, s store.Store) {
		ctx := t.Context()
		if id := must(s.LastLifecycleID(ctx))(t); id != 0 {
			t.Fatalf("LastLifecycleID of an empty log = %d, want 0", id)
		}
		a := must(s.AppendLifecycle(ctx, lifecycleEvent("subagent/provider-added", "", "")))(t)
		b := must(s.AppendLifecycle(ctx, lifecycleEvent("subagent/provider-added", "", "")))(t)
		must(s.AppendLifecycle(other(ctx), lifecycleEvent("subagent/provider-added", "", "")))(t)
		if a.ID >= b.ID {
			t.Fatalf("ids %d then %d", a.ID, b.ID)
		}
		if id := must(s.LastLifecycleID(ctx))(t); id != b.ID {
			t.Fatalf("LastLifecycleID = %d, want %d (another tenant's later event does not count)", id, b.ID)
		}
	}},
	{"AppendLifecycle_IncreasingIDsAndReplayAfter", func(t *testing.T, s store.Store) {
		ctx := t.Context()
		evs := appendAll(t, s,
			lifecycleEvent("subagent/provider-added", "", ""),
			lifecycleEvent("subagent/start", "p1", "r1"),
			lifecycleEvent("subagent/end", "p1", "r1"),
			lifecycleEvent("subagent/provider-removed", "", ""),
		)
		for i, e := range evs {
			if e.ID <= 0 || (i > 0 && e.ID <= evs[i-1].ID) {
				t.Fatalf("lifecycle ids %d, … not increasing from 1", e.ID)
			}
			want := lifecycleEvent(e.Type, e.ParentID, e.RunID)
			want.ID = e.ID
			same(t, "AppendLifecycle result", e, want, canonLifecycle)
		}
		sameList(t, "Lifecycle(after 0)", must(s.Lifecycle(ctx, store.LifecycleFilter{}))(t), evs, canonLifecycle)
		sameList(t, "Lifecycle(after 2nd)", must(s.Lifecycle(ctx, store.LifecycleFilter{After: evs[1].ID}))(t), evs[2:], canonLifecycle)
		sameList(t, "Lifecycle(after 1st, limit 2)", must(s.Lifecycle(ctx, store.LifecycleFilter{After: evs[0].ID, Limit: 2}))(t), evs[1:3], canonLifecycle)
		sameList(t, "Lifecycle(after last)", must(s.Lifecycle(ctx, store.LifecycleFilter{After: evs[3].ID}))(t), nil, canonLifecycle)
	}},
	{"Lifecycle_FiltersByParentAndTypes", func(t *testing.T, s store.Store) {
		ctx := t.Context()
		evs := appendAll(t, s,
			lifecycleEvent("subagent/start", "p1", "r1"),
			lifecycleEvent("subagent/start", "p2", "r2"),
			lifecycleEvent("subagent/provider-added", "", ""),
			lifecycleEvent("subagent/end", "p1", "r1"),
			lifecycleEvent("subagent/end", "p2", "r2"),
		)
		pick := func(is ...int) []store.LifecycleEvent {
			var out []store.LifecycleEvent
			for _, i := range is {
				out = append(out, evs[i])
			}
			return out
		}
		for _, tc := range []struct {
			f    store.LifecycleFilter
			want []store.LifecycleEvent
		}{
			{store.LifecycleFilter{ParentID: "p1"}, pick(0, 3)},
			{store.LifecycleFilter{Types: []string{"subagent/end"}}, pick(3, 4)},
			{store.LifecycleFilter{Types: []string{"subagent/provider-added", "subagent/end"}}, pick(2, 3, 4)},
			{store.LifecycleFilter{ParentID: "p2", Types: []string{"subagent/end"}}, pick(4)},
			{store.LifecycleFilter{ParentID: "p2", After: evs[1].ID}, pick(4)},
			{store.LifecycleFilter{ParentID: "p1", Limit: 1}, pick(0)},
			{store.LifecycleFilter{Types: []string{"nope"}}, nil},
		} {
			sameList(t, fmt.Sprintf("Lifecycle(%+v)", tc.f), must(s.Lifecycle(ctx, tc.f))(t), tc.want, canonLifecycle)
		}
	}},
	{"Lifecycle_DefaultLimit100", func(t *testing.T, s store.Store) {
		for range 101 {
			must(s.AppendLifecycle(t.Context(), lifecycleEvent("subagent/provider-added", "", "")))(t)
		}
		if n := len(must(s.Lifecycle(t.Context(), store.LifecycleFilter{}))(t)); n != 100 {
			t.Fatalf("Lifecycle(Limit 0) returned %d events, want 100", n)
		}
	}},
	{"AppendLifecycle_ZeroTimeIsNowAndNilPayloadStaysNil", func(t *testing.T, s store.Store) {
		before := time.Now()
		e := must(s.AppendLifecycle(t.Context(), store.LifecycleEvent{Type: "subagent/provider-added"}))(t)
		recent(t, "Time", e.Time, before)
		got := must(s.Lifecycle(t.Context(), store.LifecycleFilter{}))(t)
		sameList(t, "Lifecycle", got, []store.LifecycleEvent{e}, canonLifecycle)
		if got[0].Payload != nil {
			t.Fatalf("nil payload came back as %s", got[0].Payload)
		}
	}},
	{"AppendLifecycle_InvalidPayloadIsRejected", func(t *testing.T, s store.Store) {
		_, err := s.AppendLifecycle(t.Context(), store.LifecycleEvent{Type: "x", Payload: json.RawMessage(`nope`)})
		isInvalid(t, err, "AppendLifecycle(invalid payload)")
		if n := lifecycleCount(t, s); n != 0 {
			t.Fatalf("lifecycle holds %d events, want 0", n)
		}
	}},
}
