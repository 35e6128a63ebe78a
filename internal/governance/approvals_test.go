package governance_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/governance"
	"github.com/subagentd/subagentd/internal/memstore"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// wait bounds every wait; nothing should take nearly as long.
const wait = 10 * time.Second

type testBundle struct {
	st  *memstore.Store
	ctx context.Context
}

// setup returns approvals over a store holding a root session, a child of
// it and, unless noRun, the child's running run "run-1".
func setup(t *testing.T, noRun bool) (*governance.Approvals, *testBundle) {
	t.Helper()
	b := &testBundle{st: memstore.New(), ctx: t.Context()}
	for _, s := range []store.Session{{ID: "root"}, {ID: "mid", ParentID: "root"}, {ID: "child", ParentID: "mid"}} {
		if err := b.st.CreateSession(b.ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	if !noRun {
		b.startRun(t)
	}
	return governance.NewApprovals(governance.ApprovalsConfig{Store: b.st, Owner: "me", Poll: time.Hour}), b
}

func (b *testBundle) startRun(t *testing.T) {
	t.Helper()
	_, err := b.st.StartRun(b.ctx, store.Run{ID: "run-1", Kind: store.KindOneShot, Provider: "acp", ChildID: "child", ParentID: "mid",
		Owner: "me", LeaseUntil: time.Now().Add(time.Hour)}, store.LifecycleEvent{Type: "subagent/start", RunID: "run-1", Payload: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
}

func ask(timeout time.Duration) governance.Ask {
	return governance.Ask{
		SessionID: "child", Provider: "acp", Timeout: timeout,
		ToolCall: store.ApprovalToolCall{ID: "call_2", Title: "Modify config.json", Kind: "edit", RawInput: json.RawMessage(`{"a":1}`)},
		Options: []store.ApprovalOption{
			{OptionID: "yes", Name: "Allow", Kind: governance.KindAllowOnce},
			{OptionID: "yes-all", Name: "Always", Kind: governance.KindAllowAlways},
			{OptionID: "no", Name: "Skip", Kind: governance.KindRejectOnce},
		},
	}
}

func code(err error) string { return subagent.ErrorCode(err) }

func TestOpen_RecordsTheTreeAndAnnounces(t *testing.T) {
	t.Parallel()
	a, b := setup(t, false)
	ap, err := a.Open(b.ctx, ask(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if ap.State != store.ApprovalPending || ap.RootSessionID != "root" || ap.ParentID != "mid" || ap.RunID != "run-1" ||
		ap.Owner != "me" || ap.ExpiresAt.IsZero() || len(ap.Options) != 3 {
		t.Fatalf("opened %+v", ap)
	}
	evs, err := b.st.Lifecycle(b.ctx, store.LifecycleFilter{Types: []string{governance.EventApprovalRequested}})
	if err != nil || len(evs) != 1 {
		t.Fatalf("requested events %+v, %v", evs, err)
	}
	var p map[string]any
	if err := json.Unmarshal(evs[0].Payload, &p); err != nil {
		t.Fatal(err)
	}
	if p["approvalId"] != ap.ID || p["rootSessionId"] != "root" || p["state"] != "pending" || evs[0].ParentID != "mid" {
		t.Fatalf("requested payload %v", p)
	}
	// The event belongs to the tree, so /v1/events?rootSessionId= streams it.
	if tree, err := b.st.Lifecycle(b.ctx, store.LifecycleFilter{RootID: "root"}); err != nil || len(tree) != 1 || tree[0].ID != evs[0].ID {
		t.Fatalf("the tree's lifecycle events %+v, %v; want the approval's", tree, err)
	}
}

// TestOpen_WaitsForTheRunsStart: an agent may ask before the start of its
// run is committed; Open waits for that commit's wake-up.
func TestOpen_WaitsForTheRunsStart(t *testing.T) {
	t.Parallel()
	a, b := setup(t, true)
	opened := make(chan store.Approval, 1)
	go func() {
		ap, err := a.Open(b.ctx, ask(0))
		if err != nil {
			t.Error(err)
		}
		opened <- ap
	}()
	// The approval cannot exist before the run: nothing is listed yet.
	if l, _ := b.st.ListApprovals(b.ctx, store.ApprovalFilter{}); len(l) != 0 {
		t.Fatalf("approvals before the run: %+v", l)
	}
	b.startRun(t)
	select {
	case ap := <-opened:
		if ap.RunID != "run-1" {
			t.Fatalf("opened %+v", ap)
		}
	case <-time.After(wait):
		t.Fatal("Open did not see the run start")
	}
	ctx, cancel := context.WithCancel(b.ctx)
	cancel()
	if _, err := a.Open(ctx, governance.Ask{SessionID: "child"}); err != nil && code(err) != subagent.EAborted {
		t.Fatalf("Open with an ended context: %v", err)
	}
}

func TestDecide_MapsOntoTheAgentsOptions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		d    governance.Decision
		want string // option id, or error code
	}{
		{"option", governance.Decision{OptionID: "no"}, "no"},
		{"allow prefers once", governance.Decision{Outcome: "allow"}, "yes"},
		{"allow always", governance.Decision{Outcome: "allow", Scope: "always"}, "yes-all"},
		{"reject", governance.Decision{Outcome: "reject", Scope: "once"}, "no"},
		{"no reject always", governance.Decision{Outcome: "reject", Scope: "always"}, subagent.EOptionUnavailable},
		{"unknown option", governance.Decision{OptionID: "maybe"}, subagent.EOptionUnavailable},
		{"both", governance.Decision{OptionID: "no", Outcome: "reject"}, subagent.EInvalidRequest},
		{"neither", governance.Decision{}, subagent.EInvalidRequest},
		{"bad outcome", governance.Decision{Outcome: "perhaps"}, subagent.EInvalidRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a, b := setup(t, false)
			ap, err := a.Open(b.ctx, ask(0))
			if err != nil {
				t.Fatal(err)
			}
			got, err := a.Decide(b.ctx, ap.ID, tt.d)
			if err != nil {
				if code(err) != tt.want {
					t.Fatalf("Decide: %v, want %s", err, tt.want)
				}
				if now, _ := a.Get(b.ctx, ap.ID); now.State != store.ApprovalPending {
					t.Fatalf("a refused decision closed the approval: %+v", now)
				}
				return
			}
			if got.State != store.ApprovalDecided || got.Decision == nil || got.Decision.OptionID != tt.want || got.Decision.By != store.DefaultTenant {
				t.Fatalf("decided %+v, want option %s by the tenant", got, tt.want)
			}
		})
	}
}

func TestDecide_FirstWinsAndWakesTheWaiter(t *testing.T) {
	t.Parallel()
	a, b := setup(t, false)
	ap, err := a.Open(b.ctx, ask(0))
	if err != nil {
		t.Fatal(err)
	}
	closed := make(chan store.Approval, 1)
	go func() {
		got, err := a.Await(b.ctx, ap, "")
		if err != nil {
			t.Error(err)
		}
		closed <- got
	}()
	if _, err := a.Decide(b.ctx, ap.ID, governance.Decision{Outcome: "allow", Reason: "ok"}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Decide(b.ctx, ap.ID, governance.Decision{Outcome: "reject"}); code(err) != subagent.EAlreadyDecided {
		t.Fatalf("second decision: %v, want ALREADY_DECIDED", err)
	}
	// Poll is an hour: only the decision's lifecycle wake-up can end the wait.
	select {
	case got := <-closed:
		if got.State != store.ApprovalDecided || got.Decision.OptionID != "yes" || got.Decision.Reason != "ok" {
			t.Fatalf("awaited %+v", got)
		}
	case <-time.After(wait):
		t.Fatal("Await missed the decision")
	}
	if _, err := a.Decide(b.ctx, "nope", governance.Decision{Outcome: "allow"}); code(err) != subagent.EApprovalNotFound {
		t.Fatalf("unknown approval: %v", err)
	}
	if _, err := a.Get(store.WithTenant(b.ctx, "acme"), ap.ID); code(err) != subagent.EApprovalNotFound {
		t.Fatalf("another tenant's approval: %v", err)
	}
}

func TestAwait_CancelledWhenTheTurnEnds(t *testing.T) {
	t.Parallel()
	a, b := setup(t, false)
	ap, err := a.Open(b.ctx, ask(0))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(b.ctx)
	cancel()
	got, err := a.Await(ctx, ap, "")
	if err != nil || got.State != store.ApprovalCancelled || got.Decision != nil {
		t.Fatalf("Await after the turn ended: %+v, %v", got, err)
	}
	if _, err := a.Decide(b.ctx, ap.ID, governance.Decision{Outcome: "allow"}); code(err) != subagent.EAlreadyDecided {
		t.Fatalf("decision after cancel: %v", err)
	}
}

func TestAwait_Timeout(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		onTimeout, option string
	}{{"reject", "no"}, {"cancel", ""}} {
		t.Run(tt.onTimeout, func(t *testing.T) {
			t.Parallel()
			a, b := setup(t, false)
			ap, err := a.Open(b.ctx, ask(time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			got, err := a.Await(b.ctx, ap, tt.onTimeout)
			if err != nil || got.State != store.ApprovalExpired {
				t.Fatalf("Await: %+v, %v", got, err)
			}
			switch {
			case tt.option == "" && got.Decision != nil:
				t.Fatalf("cancel on timeout chose %+v", got.Decision)
			case tt.option != "" && (got.Decision == nil || got.Decision.OptionID != tt.option || got.Decision.By != governance.ByTimeout):
				t.Fatalf("reject on timeout: %+v", got.Decision)
			}
		})
	}
}

func TestList_Pages(t *testing.T) {
	t.Parallel()
	a, b := setup(t, false)
	var ids []string
	for range 3 {
		ap, err := a.Open(b.ctx, ask(0))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, ap.ID)
	}
	var seen []string
	f := store.ApprovalFilter{Limit: 2, RootSessionID: "root"}
	for {
		page, err := a.List(b.ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		for _, ap := range page.Approvals {
			seen = append(seen, ap.ID)
		}
		if page.NextCursor == "" {
			break
		}
		f.AfterID = page.NextCursor
	}
	if len(seen) != 3 {
		t.Fatalf("paged %v, want %v", seen, ids)
	}
	if _, err := a.List(b.ctx, store.ApprovalFilter{AfterID: "nope"}); code(err) != subagent.EInvalidRequest {
		t.Fatalf("unknown cursor: %v", err)
	}
}

func TestRecover_CancelsTheApprovalsOfLostOwners(t *testing.T) {
	t.Parallel()
	a, b := setup(t, false)
	ap, err := a.Open(b.ctx, ask(0))
	if err != nil {
		t.Fatal(err)
	}
	// Its run is live: a sweep leaves it alone.
	if n, err := a.Recover(b.ctx, false); err != nil || n != 0 {
		t.Fatalf("Recover with a live run: %d, %v", n, err)
	}
	// The previous process of this replica owned it: a start-up closes it.
	if n, err := a.Recover(b.ctx, true); err != nil || n != 1 {
		t.Fatalf("Recover at start-up: %d, %v", n, err)
	}
	if got, _ := a.Get(b.ctx, ap.ID); got.State != store.ApprovalCancelled {
		t.Fatalf("after recovery: %+v", got)
	}

	// Another replica's approval whose run was closed (owner lost).
	other := governance.NewApprovals(governance.ApprovalsConfig{Store: b.st, Owner: "other", Poll: time.Hour})
	ap2, err := other.Open(b.ctx, ask(0))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.st.EndRun(b.ctx, "run-1", store.RunResult{StopReason: "error", Diagnostic: "owner lost"},
		store.LifecycleEvent{Type: "subagent/end", RunID: "run-1", Payload: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if n, err := a.Recover(b.ctx, false); err != nil || n != 1 {
		t.Fatalf("Recover after the run closed: %d, %v", n, err)
	}
	got, err := a.Get(b.ctx, ap2.ID)
	if err != nil || got.State != store.ApprovalCancelled {
		t.Fatalf("after recovery: %+v, %v", got, err)
	}
}

// A root session's approval (its agent's delegation) has no run: it stays
// while a replica drives the root's turn and is cancelled once none does.
func TestRecover_RootApprovalsFollowTheRootsTurn(t *testing.T) {
	t.Parallel()
	a, b := setup(t, true)
	rootAsk := ask(0)
	rootAsk.SessionID = "root"
	ap, err := a.Open(b.ctx, rootAsk)
	if err != nil {
		t.Fatal(err)
	}
	if ap.RunID != "" || ap.RootSessionID != "root" {
		t.Fatalf("opened %+v, want no run", ap)
	}
	now := time.Now()
	if _, ok, err := b.st.ClaimResident(b.ctx, store.ClaimParams{SessionID: "root", Owner: "me", Now: now, Until: now.Add(time.Hour)}); err != nil || !ok {
		t.Fatalf("claim: %v, %v", ok, err)
	}
	if _, err := b.st.AppendEvents(b.ctx, "root", store.NewEvent{Type: store.TurnStartEvent, Data: []byte(`{"turn":1}`)}); err != nil {
		t.Fatal(err)
	}
	if n, err := a.Recover(b.ctx, false); err != nil || n != 0 {
		t.Fatalf("Recover while the root's turn runs: %d, %v", n, err)
	}
	if _, err := b.st.AppendEvents(b.ctx, "root", store.NewEvent{Type: store.TurnEndEvent, Data: []byte(`{"turn":1}`)}); err != nil {
		t.Fatal(err)
	}
	if n, err := a.Recover(b.ctx, false); err != nil || n != 1 {
		t.Fatalf("Recover after the root's turn ended: %d, %v", n, err)
	}
	if got, _ := a.Get(b.ctx, ap.ID); got.State != store.ApprovalCancelled {
		t.Fatalf("after recovery: %+v", got)
	}
}
