package storetest

import (
	"encoding/json"
	"testing"

	"github.com/subagentd/subagentd/internal/store"
)

var residentTests = []test{
	{"ClaimByTwoOwnersOnlyOneWins", func(t *testing.T, s store.Store) {
		ctx := t.Context()
		r, claimed := claim(t, s, "sess", "a", 0, 30)
		if !claimed || r.Owner != "a" || !r.LeaseUntil.Equal(sec(30)) {
			t.Fatalf("first claim: %+v claimed %v; want a's until sec(30)", r, claimed)
		}
		r, claimed = claim(t, s, "sess", "b", 10, 40)
		if claimed || r.Owner != "a" || !r.LeaseUntil.Equal(sec(30)) {
			t.Fatalf("claim of a live lease by b: %+v claimed %v; want a's lease unchanged", r, claimed)
		}
		if r, claimed = claim(t, s, "sess", "a", 10, 50); !claimed || !r.LeaseUntil.Equal(sec(50)) {
			t.Fatalf("a claims its own lease again: %+v claimed %v; want extended", r, claimed)
		}
		got := must(s.GetResident(ctx, "sess"))(t)
		if got.Owner != "a" || !got.LeaseUntil.Equal(sec(50)) {
			t.Fatalf("GetResident: %+v", got)
		}
		_, err := s.GetResident(ctx, "other")
		isErr(t, err, store.ErrNotFound, "GetResident of an unleased session")
		_, err = s.GetResident(other(ctx), "sess")
		isErr(t, err, store.ErrNotFound, "GetResident in another tenant")
	}},
	{"ClaimAfterExpiry", func(t *testing.T, s store.Store) {
		claim(t, s, "sess", "a", 0, 30)
		if exp := must(s.ExpiredResidents(t.Context(), sec(30)))(t); len(exp) != 0 {
			t.Fatalf("expired at the lease's end: %+v; want none", exp)
		}
		exp := must(s.ExpiredResidents(t.Context(), sec(31)))(t)
		if len(exp) != 1 || exp[0].Owner != "a" || exp[0].SessionID != "sess" || exp[0].Tenant != store.DefaultTenant {
			t.Fatalf("expired after the lease's end: %+v", exp)
		}
		if r, claimed := claim(t, s, "sess", "b", 31, 60); !claimed || r.Owner != "b" {
			t.Fatalf("claim of a lapsed lease: %+v claimed %v; want b's", r, claimed)
		}
		if _, claimed := claim(t, s, "sess", "a", 31, 60); claimed {
			t.Fatal("a claimed back the lease b took over")
		}
	}},
	{"RenewCoversEveryLeaseOfTheOwner", func(t *testing.T, s store.Store) {
		ctx := t.Context()
		claim(t, s, "s1", "a", 0, 30)
		if _, _, err := s.ClaimResident(other(ctx), store.ClaimParams{SessionID: "s2", Owner: "a", Now: sec(0), Until: sec(30)}); err != nil {
			t.Fatal(err)
		}
		claim(t, s, "s3", "b", 0, 30)
		ok(t, s.RenewLeases(ctx, "a", sec(90)))
		for _, c := range []struct {
			ctx   func() store.Resident
			until int
		}{
			{func() store.Resident { return must(s.GetResident(ctx, "s1"))(t) }, 90},
			{func() store.Resident { return must(s.GetResident(other(ctx), "s2"))(t) }, 90},
			{func() store.Resident { return must(s.GetResident(ctx, "s3"))(t) }, 30},
		} {
			if r := c.ctx(); !r.LeaseUntil.Equal(sec(c.until)) {
				t.Fatalf("after renewing a's leases: %+v, want until sec(%d)", r, c.until)
			}
		}
	}},
	{"ReleaseOnlyOwn", func(t *testing.T, s store.Store) {
		ctx := t.Context()
		claim(t, s, "sess", "a", 0, 30)
		ok(t, s.ReleaseResident(ctx, "sess", "b"))
		if r := must(s.GetResident(ctx, "sess"))(t); r.Owner != "a" {
			t.Fatalf("b released a's lease: %+v", r)
		}
		ok(t, s.ReleaseResident(other(ctx), "sess", "a"))
		must(s.GetResident(ctx, "sess"))(t)
		ok(t, s.ReleaseResident(ctx, "sess", "a"))
		_, err := s.GetResident(ctx, "sess")
		isErr(t, err, store.ErrNotFound, "GetResident after release")
		if _, claimed := claim(t, s, "sess", "b", 1, 30); !claimed {
			t.Fatal("b could not claim a released lease")
		}
	}},
	{"FencedAppendAndSettlementFail", func(t *testing.T, s store.Store) {
		ctx := t.Context()
		newSession(t, s, "sess")
		claim(t, s, "sess", "a", 0, 30)
		asA := store.WithOwner(ctx, "a")
		must(s.AppendEvents(asA, "sess", ev("x", `{"by":"a"}`)))(t)
		act := store.Run{ID: "act", Kind: store.KindActivation, ChildID: "sess", State: store.StateRunning,
			StartedAt: sec(0), Owner: "a", LeaseUntil: sec(30)}
		startRun(t, s, act)
		claim(t, s, "sess", "b", 31, 60) // a's lease lapsed; b took over
		_, err := s.AppendEvents(asA, "sess", ev("x", `{"by":"a, late"}`))
		isErr(t, err, store.ErrFenced, "append of the former owner")
		_, err = s.EndRun(asA, "act", completed, endEvent("act", ""))
		isErr(t, err, store.ErrFenced, "settlement by the former owner")
		_, _, err = s.EndRunWithEvents(asA, store.EndRunParams{RunID: "act", Result: completed, End: endEvent("act", ""), Events: []store.NewEvent{ev("x", `{"by":"a, settling"}`)}})
		isErr(t, err, store.ErrFenced, "settlement with events by the former owner")
		if r := must(s.GetRun(ctx, "act"))(t); r.State != store.StateRunning {
			t.Fatalf("a fenced settlement changed the run: %+v", r)
		}
		must(s.AppendEvents(store.WithOwner(ctx, "b"), "sess", ev("x", `{"by":"b"}`)))(t)
		must(s.AppendEvents(ctx, "sess", ev("x", `{"by":"anyone, unfenced"}`)))(t)
		if evs := must(s.Events(ctx, "sess", -1, 10))(t); len(evs) != 3 {
			t.Fatalf("log after a fenced append: %d events, want 3", len(evs))
		}
		_, err = s.AppendEvents(store.WithOwner(ctx, "b"), "missing", ev("x", `{}`))
		isErr(t, err, store.ErrNotFound, "fenced append to an unknown session")
		// The reaper's settlement carries no owner.
		must(s.EndRun(ctx, "act", completed, endEvent("act", "")))(t)
	}},
	{"ControlsCarryRequestAndAnswer", func(t *testing.T, s store.Store) {
		ctx := t.Context()
		wake, stop := s.Subscribe(store.ControlTopic("a"))
		defer stop()
		for i, id := range []string{"c1", "c2"} {
			ok(t, s.SendControl(ctx, store.Control{ID: id, Target: "sess", Op: "interrupt",
				Payload: json.RawMessage(`{"parent":"p"}`), Owner: "a", CreatedAt: sec(i)}))
		}
		waitWake(t, wake, "SendControl")
		ok(t, s.SendControl(other(ctx), store.Control{ID: "c3", Target: "x", Op: "cancel", Owner: "a", CreatedAt: sec(5)}))
		ok(t, s.SendControl(ctx, store.Control{ID: "c4", Target: "x", Op: "cancel", Owner: "b", CreatedAt: sec(1)}))
		isErr(t, s.SendControl(ctx, store.Control{ID: "c1", Owner: "a"}), store.ErrConflict, "SendControl of a used id")
		list := must(s.Controls(ctx, "a"))(t)
		if len(list) != 3 || list[0].ID != "c1" || list[1].ID != "c2" || list[2].ID != "c3" || list[2].Tenant != otherTenant {
			t.Fatalf("a's controls: %+v; want c1, c2, c3 (of %s)", list, otherTenant)
		}
		if c := list[0]; c.Op != "interrupt" || c.Target != "sess" || string(canonJSON(t, c.Payload)) != `{"parent":"p"}` ||
			c.Answer != nil || !c.AnsweredAt.IsZero() {
			t.Fatalf("c1 as listed: %+v", c)
		}
		answered, stopA := s.Subscribe(store.AnswerTopic("c1"))
		defer stopA()
		ok(t, s.AnswerControl(ctx, "c1", json.RawMessage(`{"ok":true}`)))
		waitWake(t, answered, "AnswerControl")
		isErr(t, s.AnswerControl(ctx, "c1", json.RawMessage(`{}`)), store.ErrConflict, "AnswerControl twice")
		isErr(t, s.AnswerControl(ctx, "nope", json.RawMessage(`{}`)), store.ErrNotFound, "AnswerControl of an unknown id")
		isErr(t, s.AnswerControl(ctx, "c3", json.RawMessage(`{}`)), store.ErrNotFound, "AnswerControl in another tenant")
		c := must(s.GetControl(ctx, "c1"))(t)
		if string(canonJSON(t, c.Answer)) != `{"ok":true}` || c.AnsweredAt.IsZero() {
			t.Fatalf("c1 after its answer: %+v", c)
		}
		if list := must(s.Controls(ctx, "a"))(t); len(list) != 2 || list[0].ID != "c2" {
			t.Fatalf("a's controls after answering c1: %+v; want c2, c3", list)
		}
		ok(t, s.DeleteControl(ctx, "c1"))
		ok(t, s.DeleteControl(ctx, "c1"))
		_, err := s.GetControl(ctx, "c1")
		isErr(t, err, store.ErrNotFound, "GetControl after delete")
		ok(t, s.DeleteControl(ctx, "c2"))
		isErr(t, s.AnswerControl(ctx, "c2", json.RawMessage(`{}`)), store.ErrNotFound, "AnswerControl of a deleted request")
	}},
	{"Driving_NeedsALiveLeaseAndAnOpenTurn", func(t *testing.T, s store.Store) {
		ctx := t.Context()
		for _, id := range []string{"turning", "idle", "unleased"} {
			newSession(t, s, id)
		}
		turn := func(id, typ string) {
			t.Helper()
			must(s.AppendEvents(ctx, id, store.NewEvent{Type: typ, Data: json.RawMessage(`{"turn":1}`)}))(t)
		}
		turn("turning", store.TurnStartEvent)
		must(s.AppendEvents(ctx, "turning", store.NewEvent{Type: "assistant/chunk", Data: json.RawMessage(`{}`)}))(t)
		turn("idle", store.TurnStartEvent)
		turn("idle", store.TurnEndEvent)
		turn("unleased", store.TurnStartEvent)
		claim(t, s, "turning", "a", 0, 100)
		claim(t, s, "idle", "a", 0, 100)
		ids := []string{"turning", "idle", "unleased", "missing"}
		if got := must(s.Driving(ctx, ids, sec(50)))(t); len(got) != 1 || !got["turning"] {
			t.Fatalf("Driving at 50s = %v; want only the leased session with an open turn", got)
		}
		if got := must(s.Driving(ctx, ids, sec(200)))(t); len(got) != 0 {
			t.Fatalf("Driving after the lease ended = %v; want none (a turn a crash left open)", got)
		}
		if got := must(s.Driving(other(ctx), ids, sec(50)))(t); len(got) != 0 {
			t.Fatalf("Driving in another tenant = %v; want none", got)
		}
		turn("turning", store.TurnEndEvent)
		if got := must(s.Driving(ctx, ids, sec(50)))(t); len(got) != 0 {
			t.Fatalf("Driving after the turn ended = %v; want none", got)
		}
	}},
	{"SweepControls_DeletesOnlyOldRequestsOfEveryTenant", func(t *testing.T, s store.Store) {
		ctx := t.Context()
		ok(t, s.SendControl(ctx, store.Control{ID: "old", Target: "x", Op: "followup", Owner: "a", CreatedAt: sec(10)}))
		ok(t, s.SendControl(other(ctx), store.Control{ID: "old-other", Target: "y", Op: "followup", Owner: "a", CreatedAt: sec(20)}))
		ok(t, s.SendControl(ctx, store.Control{ID: "new", Target: "x", Op: "followup", Owner: "a", CreatedAt: sec(40)}))
		ok(t, s.AnswerControl(ctx, "old", json.RawMessage(`{}`)))
		if n := must(s.SweepControls(ctx, sec(30)))(t); n != 2 {
			t.Fatalf("SweepControls before 30s deleted %d requests, want the 2 older ones (answered or not, any tenant)", n)
		}
		_, err := s.GetControl(ctx, "old")
		isErr(t, err, store.ErrNotFound, "GetControl of a swept request")
		if list := must(s.Controls(ctx, "a"))(t); len(list) != 1 || list[0].ID != "new" {
			t.Fatalf("a's controls after the sweep: %+v; want only the new one", list)
		}
	}},
}

// claim claims sessionID for owner at sec(now) until sec(until).
func claim(t *testing.T, s store.Store, sessionID, owner string, now, until int) (store.Resident, bool) {
	t.Helper()
	r, claimed, err := s.ClaimResident(t.Context(), store.ClaimParams{SessionID: sessionID, Owner: owner, Now: sec(now), Until: sec(until)})
	if err != nil {
		t.Fatalf("ClaimResident(%s, %s): %v", sessionID, owner, err)
	}
	return r, claimed
}
