package storetest

import (
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/store"
)

// newApproval returns a pending approval with id, created at sec(n).
func newApproval(id string, n int) store.Approval {
	return store.Approval{
		ID: id, SessionID: "child-" + id, ParentID: "root", RootSessionID: "root", RunID: "run-" + id,
		Provider: "acp", Owner: "replica-a",
		ToolCall: store.ApprovalToolCall{ID: "tc-1", Title: "Write notes.md", Kind: "edit",
			Locations: json.RawMessage(`[{"path": "/w/notes.md"}]`), RawInput: json.RawMessage(`{"content": "x"}`)},
		Options: []store.ApprovalOption{
			{OptionID: "allow", Name: "Allow", Kind: "allow_once"},
			{OptionID: "reject", Name: "Reject", Kind: "reject_once"},
		},
		CreatedAt: sec(n), ExpiresAt: sec(n + 60),
	}
}

func requested(id string) store.LifecycleEvent {
	return store.LifecycleEvent{Type: "approval/requested", ParentID: "root", RunID: "run-" + id, Payload: json.RawMessage(`{"approvalId":"` + id + `"}`)}
}

func decided(id string) store.LifecycleEvent {
	return store.LifecycleEvent{Type: "approval/decided", ParentID: "root", RunID: "run-" + id, Payload: json.RawMessage(`{"approvalId":"` + id + `"}`)}
}

func canonApproval(t *testing.T, a store.Approval) store.Approval {
	a.CreatedAt, a.ExpiresAt = utc(a.CreatedAt), utc(a.ExpiresAt)
	a.ToolCall.Locations, a.ToolCall.RawInput = canonJSON(t, a.ToolCall.Locations), canonJSON(t, a.ToolCall.RawInput)
	if a.Decision != nil {
		d := *a.Decision
		d.At = utc(d.At)
		a.Decision = &d
	}
	return a
}

var approvalTests = []test{
	{"RunsCountPending", func(t *testing.T, s store.Store) {
		ctx := t.Context()
		run := store.Run{ID: "run-ap-1", Kind: store.KindOneShot, Provider: "acp", ChildID: "child-ap-1", ParentID: "root", StartedAt: t0}
		must(s.StartRun(ctx, run, store.LifecycleEvent{Type: "subagent/start", RunID: run.ID, Payload: []byte(`{}`)}))(t)
		pending := func(want int) {
			t.Helper()
			if got := must(s.GetRun(ctx, run.ID))(t); got.PendingApprovals != want {
				t.Fatalf("GetRun: %d pending approvals, want %d", got.PendingApprovals, want)
			}
			if l := must(s.ListRuns(ctx, store.RunFilter{ChildID: run.ChildID}))(t); len(l) != 1 || l[0].PendingApprovals != want {
				t.Fatalf("ListRuns: %s, want %d pending approvals", show(l), want)
			}
		}
		pending(0)
		must3(s.CreateApproval(ctx, newApproval("ap-1", 1), requested("ap-1")))(t)
		second := newApproval("ap-2", 2)
		second.RunID = run.ID
		must3(s.CreateApproval(ctx, second, requested("ap-2")))(t)
		pending(2)
		must3(s.CloseApproval(ctx, "ap-1", store.ApprovalClose{State: store.ApprovalCancelled}, decided("ap-1")))(t)
		pending(1)
		_, _, err := s.CloseApproval(ctx, "ap-1", store.ApprovalClose{State: store.ApprovalCancelled}, decided("ap-1"))
		isErr(t, err, store.ErrConflict, "a second close")
		pending(1)
	}},
	{"CreateGetList", func(t *testing.T, s store.Store) {
		ctx := t.Context()
		wake, stop := s.Subscribe(store.LifecycleTopic)
		defer stop()
		a := newApproval("ap-1", 1)
		a.State, a.Decision = store.ApprovalDecided, &store.ApprovalDecision{OptionID: "x"} // ignored
		got, ev, err := s.CreateApproval(ctx, a, requested("ap-1"))
		ok(t, err)
		waitWake(t, wake, "CreateApproval")
		want := newApproval("ap-1", 1)
		want.Tenant, want.State = store.DefaultTenant, store.ApprovalPending
		same(t, "created", got, want, canonApproval)
		same(t, "get", must(s.GetApproval(ctx, "ap-1"))(t), want, canonApproval)
		if ev.ID == 0 || ev.Type != "approval/requested" {
			t.Fatalf("requested event = %+v, want it stored with an id", ev)
		}
		life := must(s.Lifecycle(ctx, store.LifecycleFilter{After: ev.ID - 1}))(t)
		if len(life) != 1 || life[0].ID != ev.ID || life[0].RunID != "run-ap-1" {
			t.Fatalf("lifecycle = %+v, want the requested event", life)
		}
		_, _, err = s.CreateApproval(other(ctx), newApproval("ap-1", 2), requested("ap-1"))
		isErr(t, err, store.ErrConflict, "CreateApproval of an existing id")
		_, err = s.GetApproval(other(ctx), "ap-1")
		isErr(t, err, store.ErrNotFound, "GetApproval from another tenant")
		_, err = s.GetApproval(ctx, "nope")
		isErr(t, err, store.ErrNotFound, "GetApproval of an unknown id")
		bad := newApproval("ap-bad", 1)
		bad.ToolCall.RawInput = json.RawMessage(`{`)
		_, _, err = s.CreateApproval(ctx, bad, requested("ap-bad"))
		isInvalid(t, err, "CreateApproval with invalid JSON")
		if _, err := s.GetApproval(ctx, "ap-bad"); err == nil {
			t.Fatal("a refused approval was stored")
		}

		second := newApproval("ap-0", 2)
		second.SessionID, second.RootSessionID = "child-x", "root-2"
		second.ToolCall.Locations, second.ToolCall.RawInput, second.ExpiresAt = nil, nil, time.Time{}
		must3(s.CreateApproval(ctx, second, requested("ap-0")))(t)
		all := must(s.ListApprovals(ctx, store.ApprovalFilter{}))(t)
		if len(all) != 2 || all[0].ID != "ap-1" || all[1].ID != "ap-0" {
			t.Fatalf("list = %s, want ap-1 then ap-0", show(all))
		}
		if !all[1].ExpiresAt.IsZero() || all[1].ToolCall.RawInput != nil {
			t.Fatalf("absent fields came back set: %s", show(all[1]))
		}
		page := must(s.ListApprovals(ctx, store.ApprovalFilter{AfterID: "ap-1", Limit: 5}))(t)
		if len(page) != 1 || page[0].ID != "ap-0" {
			t.Fatalf("page after ap-1 = %s", show(page))
		}
		if l := must(s.ListApprovals(ctx, store.ApprovalFilter{Limit: 1}))(t); len(l) != 1 || l[0].ID != "ap-1" {
			t.Fatalf("limit 1 = %s", show(l))
		}
		for _, f := range []store.ApprovalFilter{{RootSessionID: "root-2"}, {SessionID: "child-x"}, {RunID: "run-ap-0"}} {
			if l := must(s.ListApprovals(ctx, f))(t); len(l) != 1 || l[0].ID != "ap-0" {
				t.Fatalf("filter %+v = %s, want ap-0", f, show(l))
			}
		}
		if l := must(s.ListApprovals(ctx, store.ApprovalFilter{State: store.ApprovalDecided}))(t); len(l) != 0 {
			t.Fatalf("decided = %s, want none", show(l))
		}
		if l := must(s.ListApprovals(other(ctx), store.ApprovalFilter{}))(t); len(l) != 0 {
			t.Fatalf("another tenant lists %s", show(l))
		}
		_, err = s.ListApprovals(ctx, store.ApprovalFilter{AfterID: "nope"})
		isErr(t, err, store.ErrNotFound, "ListApprovals after an unknown cursor")
		pending := must(s.PendingApprovals(ctx))(t)
		if len(pending) != 2 || pending[0].ID != "ap-1" || pending[0].Tenant != store.DefaultTenant {
			t.Fatalf("pending = %s", show(pending))
		}
	}},
	{"CloseFirstWins", func(t *testing.T, s store.Store) {
		ctx := t.Context()
		must3(s.CreateApproval(ctx, newApproval("ap-1", 1), requested("ap-1")))(t)
		before := must(s.LastLifecycleID(ctx))(t)
		d := &store.ApprovalDecision{OptionID: "allow", Kind: "allow_once", By: "default", Reason: "looks fine", At: sec(5)}
		_, _, err := s.CloseApproval(other(ctx), "ap-1", store.ApprovalClose{State: store.ApprovalDecided, Decision: d}, decided("ap-1"))
		isErr(t, err, store.ErrNotFound, "CloseApproval from another tenant")
		_, _, err = s.CloseApproval(ctx, "nope", store.ApprovalClose{State: store.ApprovalCancelled}, decided("nope"))
		isErr(t, err, store.ErrNotFound, "CloseApproval of an unknown id")

		// Concurrent closes: exactly one wins, and only its event is logged.
		const n = 6
		var wg sync.WaitGroup
		errs := make([]error, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c := store.ApprovalClose{State: store.ApprovalDecided, Decision: d}
				if i%2 == 1 {
					c = store.ApprovalClose{State: store.ApprovalCancelled}
				}
				_, _, errs[i] = s.CloseApproval(ctx, "ap-1", c, decided("ap-1"))
			}()
		}
		wg.Wait()
		won := -1
		for i, err := range errs {
			if err == nil {
				if won >= 0 {
					t.Fatalf("closes %d and %d both won", won, i)
				}
				won = i
				continue
			}
			isErr(t, err, store.ErrConflict, "a losing CloseApproval")
		}
		if won < 0 {
			t.Fatal("no close won")
		}
		got := must(s.GetApproval(ctx, "ap-1"))(t)
		want := newApproval("ap-1", 1)
		want.Tenant = store.DefaultTenant
		if won%2 == 0 {
			want.State, want.Decision = store.ApprovalDecided, d
		} else {
			want.State = store.ApprovalCancelled
		}
		same(t, "closed", got, want, canonApproval)
		life := must(s.Lifecycle(ctx, store.LifecycleFilter{After: before}))(t)
		if len(life) != 1 || life[0].Type != "approval/decided" {
			t.Fatalf("lifecycle after the closes = %s, want one approval/decided", show(life))
		}
		if p := must(s.PendingApprovals(ctx))(t); len(p) != 0 {
			t.Fatalf("pending after close = %s", show(p))
		}
		_, _, err = s.CloseApproval(ctx, "ap-1", store.ApprovalClose{State: store.ApprovalExpired}, decided("ap-1"))
		isErr(t, err, store.ErrConflict, "CloseApproval of a closed approval")
	}},
}

// must3 is must for calls that return two values and an error.
func must3[A, B any](a A, b B, err error) func(t *testing.T) A {
	return func(t *testing.T) A {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
}
