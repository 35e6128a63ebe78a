package storetest

import (
	"encoding/json"
	"fmt"
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
	{"TreePolicyCreateGet", func(t *testing.T, s store.Store) {
		ctx := t.Context()
		_, err := s.TreePolicy(ctx, "root")
		isErr(t, err, store.ErrNotFound, "TreePolicy of a root without one")
		p := store.TreePolicy{RootID: "root", Mode: "ask", Timeout: 90 * time.Second, OnTimeout: "cancel",
			Rules: []store.PolicyRule{{Kind: "read", Decision: "allow"}, {Kind: "edit", TitlePattern: `\.go$`, Decision: "reject"}}}
		ok(t, s.CreateTreePolicy(ctx, p))
		want := p
		want.Tenant = store.DefaultTenant
		same(t, "policy", must(s.TreePolicy(ctx, "root"))(t), want, canonPolicy)
		isErr(t, s.CreateTreePolicy(ctx, store.TreePolicy{RootID: "root", Mode: "allow"}), store.ErrConflict, "a second CreateTreePolicy")
		_, err = s.TreePolicy(other(ctx), "root")
		isErr(t, err, store.ErrNotFound, "TreePolicy from another tenant")
		ok(t, s.CreateTreePolicy(ctx, store.TreePolicy{RootID: "bare"}))
		same(t, "bare policy", must(s.TreePolicy(ctx, "bare"))(t), store.TreePolicy{RootID: "bare", Tenant: store.DefaultTenant}, canonPolicy)
	}},
	{"CloseAlwaysAddsARule", func(t *testing.T, s store.Store) {
		ctx := t.Context()
		ok(t, s.CreateTreePolicy(ctx, store.TreePolicy{RootID: "root", Mode: "ask", Rules: []store.PolicyRule{{Kind: "read", Decision: "allow"}}}))
		d := &store.ApprovalDecision{OptionID: "allow", Kind: "allow_always", By: "default", At: sec(5)}
		closeAlways := func(id string, r store.AlwaysRule) error {
			_, _, err := s.CloseApproval(ctx, id, store.ApprovalClose{State: store.ApprovalDecided, Decision: d, Always: &r}, decided(id))
			return err
		}
		for i, id := range []string{"ap-1", "ap-2", "ap-3", "ap-4"} {
			must3(s.CreateApproval(ctx, newApproval(id, i), requested(id)))(t)
		}
		ok(t, closeAlways("ap-1", store.AlwaysRule{Kind: "edit", Title: "Write a.go", Decision: "allow", ApprovalID: "ap-1"}))
		ok(t, closeAlways("ap-2", store.AlwaysRule{Kind: "edit", Title: "Write b.go", Decision: "reject", ApprovalID: "ap-2"}))
		// The same kind and title again: replaced, and now the newest.
		ok(t, closeAlways("ap-3", store.AlwaysRule{Kind: "edit", Title: "Write a.go", Decision: "reject", ApprovalID: "ap-3"}))
		// A close that loses adds nothing.
		isErr(t, closeAlways("ap-1", store.AlwaysRule{Kind: "edit", Title: "Write c.go", Decision: "allow"}), store.ErrConflict, "a second close")
		want := store.TreePolicy{RootID: "root", Tenant: store.DefaultTenant, Mode: "ask", Rules: []store.PolicyRule{{Kind: "read", Decision: "allow"}},
			Always: []store.AlwaysRule{
				{Kind: "edit", Title: "Write a.go", Decision: "reject", ApprovalID: "ap-3"},
				{Kind: "edit", Title: "Write b.go", Decision: "reject", ApprovalID: "ap-2"},
			}}
		same(t, "policy", must(s.TreePolicy(ctx, "root"))(t), want, canonPolicy)
		// A close without a rule leaves the policy alone.
		must3(s.CloseApproval(ctx, "ap-4", store.ApprovalClose{State: store.ApprovalCancelled}, decided("ap-4")))(t)
		same(t, "policy after a plain close", must(s.TreePolicy(ctx, "root"))(t), want, canonPolicy)

		// A tree whose root set no policy gets one, without a mode.
		other := newApproval("ap-5", 9)
		other.RootSessionID = "root-2"
		must3(s.CreateApproval(ctx, other, requested("ap-5")))(t)
		ok(t, closeAlways("ap-5", store.AlwaysRule{Kind: "execute", Title: "ls", Decision: "allow", ApprovalID: "ap-5"}))
		same(t, "created policy", must(s.TreePolicy(ctx, "root-2"))(t), store.TreePolicy{RootID: "root-2", Tenant: store.DefaultTenant,
			Always: []store.AlwaysRule{{Kind: "execute", Title: "ls", Decision: "allow", ApprovalID: "ap-5"}}}, canonPolicy)
	}},
	{"AlwaysRulesAreBounded", func(t *testing.T, s store.Store) {
		ctx := t.Context()
		n := store.MaxAlwaysRules + 2
		for i := range n {
			id := fmt.Sprintf("ap-%03d", i)
			must3(s.CreateApproval(ctx, newApproval(id, i), requested(id)))(t)
			r := store.AlwaysRule{Kind: "edit", Title: fmt.Sprintf("Write %d", i), Decision: "allow", ApprovalID: id}
			must3(s.CloseApproval(ctx, id, store.ApprovalClose{State: store.ApprovalCancelled, Always: &r}, decided(id)))(t)
		}
		p := must(s.TreePolicy(ctx, "root"))(t)
		if len(p.Always) != store.MaxAlwaysRules || p.Always[0].Title != fmt.Sprintf("Write %d", n-1) ||
			p.Always[len(p.Always)-1].Title != "Write 2" {
			t.Fatalf("%d always rules, first %+v, last %+v; want the newest %d, newest first", len(p.Always), p.Always[0], p.Always[len(p.Always)-1], store.MaxAlwaysRules)
		}
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

// canonPolicy makes empty rule lists nil.
func canonPolicy(_ *testing.T, p store.TreePolicy) store.TreePolicy {
	if len(p.Rules) == 0 {
		p.Rules = nil
	}
	if len(p.Always) == 0 {
		p.Always = nil
	}
	return p
}
