package children

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/model/scripted"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// addChild stores a child session of parent created at minute min, with
// the identity hdr (mode, label, provider; zero for none) on its header and
// the given descriptor payloads in its log.
func addChild(t *testing.T, e *contEnv, id, parent, origin string, min int, hdr store.Session, descriptors ...string) {
	t.Helper()
	at := time.Date(2026, 1, 1, 0, min, 0, 0, time.UTC)
	if err := e.st.CreateSession(t.Context(), store.Session{ID: id, ParentID: parent, Origin: origin, CreatedAt: at,
		Mode: hdr.Mode, Label: hdr.Label, Provider: hdr.Provider}); err != nil {
		t.Fatal(err)
	}
	for _, d := range descriptors {
		if _, err := e.st.AppendEvents(t.Context(), id, store.NewEvent{Type: sessionlog.EventDescriptor, Data: json.RawMessage(d)}); err != nil {
			t.Fatal(err)
		}
	}
}

const (
	oneShotDesc = `{"version":2,"mode":"one-shot","provider":"spawn","label":"quick"}`
	contDesc    = `{"version":2,"mode":"continuable","provider":"acp","label":"long"}`
)

var (
	oneShotHdr = store.Session{Mode: subagent.ModeOneShot, Provider: "spawn", Label: "quick"}
	contHdr    = store.Session{Mode: subagent.ModeContinuable, Provider: "acp", Label: "long"}
	noHdr      = store.Session{}
)

func ids(entries []ListEntry) []string {
	var out []string
	for _, e := range entries {
		out = append(out, e.ID)
	}
	return out
}

func TestChildren_R121_R125_FromDurableHeadersAndDescriptors(t *testing.T) {
	t.Parallel()
	gate, reached := make(chan struct{}), make(chan struct{})
	e := newContEnv(t, gatedModel(gate, reached, "done"))
	addChild(t, e, "b-oneshot", "p1", OriginSubagent, 1, oneShotHdr, oneShotDesc)
	addChild(t, e, "a-cont", "p1", OriginSubagent, 1, contHdr, contDesc) // same time: id order
	addChild(t, e, "c-corrupt", "p1", OriginSubagent, 2, noHdr)
	addChild(t, e, "d-ordinary", "p1", "", 3, contHdr, contDesc)
	// The header is the listing identity: the log is not read (R122).
	addChild(t, e, "e-header-wins", "p1", OriginSubagent, 4, contHdr, oneShotDesc)
	addChild(t, e, "f-no-header-identity", "p1", OriginSubagent, 5, noHdr, contDesc)
	addChild(t, e, "grandchild", "a-cont", OriginSubagent, 6, oneShotHdr, oneShotDesc)
	addChild(t, e, "ordinary-grandchild", "b-oneshot", "", 6, noHdr)
	req := e.req(t, "go")
	req.ChildID = "z-live"
	res := e.start(t, req)
	<-reached

	got, err := e.m.Children(t.Context(), "p1")
	if err != nil {
		t.Fatal(err)
	}
	want := []ListEntry{
		{Kind: EntryChild, ID: "a-cont", Mode: subagent.ModeContinuable, Label: "long", Provider: "acp", Activity: subagent.ActivityInactive, HasChildren: true},
		{Kind: EntryChild, ID: "b-oneshot", Mode: subagent.ModeOneShot, Label: "quick", Provider: "spawn", Activity: subagent.ActivityInactive},
		{Kind: EntryDiagnostic, ID: "c-corrupt", Reason: DiagnosticCorrupt},
		{Kind: EntryChild, ID: "e-header-wins", Mode: subagent.ModeContinuable, Label: "long", Provider: "acp", Activity: subagent.ActivityInactive},
		{Kind: EntryDiagnostic, ID: "f-no-header-identity", Reason: DiagnosticCorrupt},
		{Kind: EntryChild, ID: "z-live", Mode: subagent.ModeContinuable, Label: "task", Provider: "spawn", Activity: subagent.ActivityRunning},
	}
	if !slices.Equal(got, want) {
		t.Errorf("children\n got %+v\nwant %+v", got, want)
	}
	close(gate)
	e.ended(t, res.TaskID)
	e.settled(t, res.ChildID)
	// Listed again, the settled child is inactive.
	got, err = e.m.Children(t.Context(), "p1")
	if err != nil {
		t.Fatal(err)
	}
	if last := got[len(got)-1]; last.ID != "z-live" || last.Activity != subagent.ActivityInactive {
		t.Errorf("settled child %+v", last)
	}
	if got, err := e.m.Children(t.Context(), "nobody"); err != nil || len(got) != 0 {
		t.Errorf("R129: unknown parent: %v, %v", got, err)
	}
}

func TestChildren_R123_LiveChildWithoutIdentityIsOmitted(t *testing.T) {
	t.Parallel()
	e := newContEnv(t, scripted.New())
	addChild(t, e, "running-oneshot", "p1", OriginSubagent, 1, noHdr)
	run := newFakeRun("running-oneshot", true)
	e.prov.StartFn = func(context.Context, subagent.ResolvedRequest) (subagent.Run, error) { return run, nil }
	h, err := e.svc.Start(t.Context(), "spawn", request())
	if err != nil {
		t.Fatal(err)
	}
	if got, err := e.m.Children(t.Context(), "p1"); err != nil || len(got) != 0 {
		t.Errorf("a live child before its descriptor: %+v, %v", got, err)
	}
	run.settle(subagent.Result{StopReason: subagent.StopCompleted}, nil)
	waitDone(t, h)
	got, err := e.m.Children(t.Context(), "p1")
	if err != nil || len(got) != 1 || got[0].Kind != EntryDiagnostic || got[0].Reason != DiagnosticCorrupt {
		t.Errorf("a settled child without a descriptor: %+v, %v", got, err)
	}
}

func TestDescendants_R128_PreOrderWithParentAndDepth(t *testing.T) {
	t.Parallel()
	e := newContEnv(t, scripted.New())
	addChild(t, e, "a", "p1", OriginSubagent, 1, contHdr)
	addChild(t, e, "b", "p1", OriginSubagent, 2, oneShotHdr)
	addChild(t, e, "a1", "a", OriginSubagent, 3, contHdr)
	addChild(t, e, "a1x", "a1", OriginSubagent, 4, noHdr)
	addChild(t, e, "b-ordinary", "b", "", 5, noHdr)
	addChild(t, e, "b2", "b-ordinary", OriginSubagent, 6, contHdr)
	got, err := e.m.Descendants(t.Context(), "p1")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ids(got), []string{"a", "a1", "a1x", "b", "b2"}) {
		t.Fatalf("order %v", ids(got))
	}
	for _, row := range got {
		want := map[string][2]any{"a": {"p1", 1}, "a1": {"a", 2}, "a1x": {"a1", 3}, "b": {"p1", 1}, "b2": {"b-ordinary", 3}}[row.ID]
		if row.ParentID != want[0] || row.Depth != want[1] {
			t.Errorf("%s: parent %s depth %d, want %v", row.ID, row.ParentID, row.Depth, want)
		}
	}
	if got[2].Kind != EntryDiagnostic || got[2].Reason != DiagnosticCorrupt {
		t.Errorf("a1x %+v", got[2])
	}
}

func TestChild_InfoAndTask(t *testing.T) {
	t.Parallel()
	gate, reached := make(chan struct{}), make(chan struct{})
	e := newContEnv(t, gatedModel(gate, reached, "done"))
	res := e.start(t, e.req(t, "go"))
	<-reached
	info, err := e.m.Child(t.Context(), res.ChildID)
	if err != nil || info.Activity != subagent.ActivityRunning || info.TaskID != res.TaskID || info.Identity == nil ||
		info.Identity.Mode != subagent.ModeContinuable || info.Session.ParentID != "p1" {
		t.Fatalf("live child %+v, %v", info, err)
	}
	if run, err := e.m.Task(t.Context(), res.TaskID); err != nil || run.State != store.StateRunning {
		t.Errorf("running task %+v, %v", run, err)
	}
	close(gate)
	e.ended(t, res.TaskID)
	e.settled(t, res.ChildID)
	info, err = e.m.Child(t.Context(), res.ChildID)
	if err != nil || info.Activity != subagent.ActivityInactive || info.TaskID != res.TaskID {
		t.Errorf("settled child %+v, %v", info, err)
	}
	_, err = e.m.Child(t.Context(), "p1")
	wantCode(t, err, subagent.ESessionNotFound)
	_, err = e.m.Task(t.Context(), "no-task")
	wantCode(t, err, subagent.ETaskNotFound)
	// A followup makes the new task the child's current one.
	f, err := e.m.Followup(t.Context(), "p1", res.ChildID, txt("more"), sessionlog.Source{})
	if err != nil {
		t.Fatal(err)
	}
	e.ended(t, f.TaskID)
	e.settled(t, res.ChildID)
	if info, _ := e.m.Child(t.Context(), res.ChildID); info.TaskID != f.TaskID {
		t.Errorf("current task %s, want %s", info.TaskID, f.TaskID)
	}
}
