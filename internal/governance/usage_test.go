package governance

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// fakeStore answers SessionUsage with rows (or err), recording the call.
type fakeStore struct {
	rows []store.SessionUsage
	err  error
	tree bool
}

func (f *fakeStore) SessionUsage(_ context.Context, _ string, tree bool, _ time.Time) ([]store.SessionUsage, error) {
	f.tree = tree
	if f.err != nil {
		return nil, f.err
	}
	if !tree {
		return f.rows[:1], nil
	}
	return f.rows, nil
}

func TestUsage_SelfAndTree(t *testing.T) {
	t.Parallel()
	st := &fakeStore{rows: []store.SessionUsage{
		// The root: its own turns in its log, no runs.
		{SessionID: "root", Log: store.Usage{InputTokens: 10, OutputTokens: 2, ModelCalls: 1, Reported: 1}},
		// A child: its log repeats its runs' usage and is not counted again.
		{SessionID: "a", ParentID: "root", Log: store.Usage{InputTokens: 5, OutputTokens: 5, ModelCalls: 2, Reported: 2},
			Runs: store.Usage{InputTokens: 5, OutputTokens: 5, ModelCalls: 2, Reported: 2}, RunCount: 2, LiveRuns: 1},
		// A child whose provider reported nothing for one run.
		{SessionID: "b", ParentID: "a", Runs: store.Usage{InputTokens: 1, OutputTokens: 1, ModelCalls: 1, Reported: 1},
			RunCount: 2, Unknown: 1},
	}}
	u := NewUsage(st)
	self, err := u.Session(t.Context(), "root", "")
	if err != nil || st.tree {
		t.Fatalf("Session(root, self) = %v, tree %v", err, st.tree)
	}
	want := Report{Totals: Totals{InputTokens: 10, OutputTokens: 2, ModelCalls: 1, Known: true}}
	if !reflect.DeepEqual(self, want) {
		t.Fatalf("self = %+v, want %+v", self, want)
	}
	tree, err := u.Session(t.Context(), "root", ScopeTree)
	if err != nil || !st.tree {
		t.Fatalf("Session(root, tree) = %v, tree %v", err, st.tree)
	}
	want = Report{
		Totals: Totals{InputTokens: 16, OutputTokens: 8, ModelCalls: 4, Runs: 4, LiveRuns: 1, Known: false},
		Children: []SessionTotals{
			{"a", Totals{InputTokens: 5, OutputTokens: 5, ModelCalls: 2, Runs: 2, LiveRuns: 1, Known: true}},
			{"b", Totals{InputTokens: 1, OutputTokens: 1, ModelCalls: 1, Runs: 2, Known: false}},
		},
	}
	if !reflect.DeepEqual(tree, want) {
		t.Fatalf("tree = %+v, want %+v", tree, want)
	}
}

func TestUsage_UnreportedCallOfARootIsUnknown(t *testing.T) {
	t.Parallel()
	u := NewUsage(&fakeStore{rows: []store.SessionUsage{{SessionID: "root", Log: store.Usage{InputTokens: 3, ModelCalls: 2, Reported: 1}}}})
	rep, err := u.Session(t.Context(), "root", ScopeSelf)
	if err != nil || rep.Known || rep.ModelCalls != 2 || rep.InputTokens != 3 {
		t.Fatalf("Session = %+v, %v; want 2 calls, 3 input tokens, unknown", rep, err)
	}
}

func TestUsage_Errors(t *testing.T) {
	t.Parallel()
	u := NewUsage(&fakeStore{err: store.ErrNotFound})
	if _, err := u.Session(t.Context(), "x", "subtree"); subagent.ErrorCode(err) != subagent.EInvalidRequest {
		t.Errorf("bad scope: %v, want %s", err, subagent.EInvalidRequest)
	}
	if _, err := u.Session(t.Context(), "x", ScopeTree); subagent.ErrorCode(err) != subagent.ESessionNotFound {
		t.Errorf("unknown session: %v, want %s", err, subagent.ESessionNotFound)
	}
	broken := errors.New("boom")
	if _, err := NewUsage(&fakeStore{err: broken}).Session(t.Context(), "x", ""); !errors.Is(err, broken) {
		t.Errorf("store failure: %v, want it wrapped", err)
	}
}
