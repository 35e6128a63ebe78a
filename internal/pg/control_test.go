package pg_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/agent"
	"github.com/subagentd/subagentd/internal/children"
	"github.com/subagentd/subagentd/internal/governance"
	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/model/scripted"
	"github.com/subagentd/subagentd/internal/pg"
	"github.com/subagentd/subagentd/internal/pg/pgtest"
	"github.com/subagentd/subagentd/internal/providers/inprocess"
	"github.com/subagentd/subagentd/internal/providers/inprocess/inprocesstest"
	"github.com/subagentd/subagentd/internal/providers/spawn"
	"github.com/subagentd/subagentd/internal/roots"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// Control across replicas (docs/architecture.md §5): two replicas, each a Service, a
// children.Manager and roots.Manager over a pool of its own on one database, with owners
// of their own. Requests taken by B for what A drives are carried out by
// A; a lease A stops renewing is taken over by B.

// replica is one replica of a control test.
type replica struct {
	*mgrProcess
	roots *roots.Manager
	// limits are the replica's tree limits: its roots' budget, which
	// delivers what a paused tree held back once raised.
	limits *governance.Limits
	stop   context.CancelFunc // stops its KeepLeases: it stops renewing
	kept   chan struct{}      // closed once KeepLeases returned
}

// gate is a model whose replies are held while it is shut: each call
// signals reached, then waits for open (or its context).
type gate struct {
	mu      sync.Mutex
	shut    chan struct{}
	reached chan string // the last prompt text of each held call
}

func newGate() *gate { return &gate{shut: make(chan struct{}), reached: make(chan string, 16)} }

// open lets every held and later call answer.
func (g *gate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.shut:
	default:
		close(g.shut)
	}
}

func (g *gate) model() model.Model {
	return scripted.Func(func(req model.Request) scripted.Step {
		last := model.Text(req.Messages[len(req.Messages)-1].Content)
		reached := make(chan struct{})
		go func() { <-reached; g.reached <- last }()
		return scripted.Step{Text: "re: " + last, Gate: g.shut, Reached: reached}
	})
}

// newReplica starts replica owner over url with model mdl and lease,
// serving control requests (KeepLeases) until stop.
func newReplica(t *testing.T, url, owner string, lease time.Duration, mdl model.Model) *replica {
	t.Helper()
	st, err := pg.New(t.Context(), openPool(t, url), discard())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	routes := []model.Route{inprocesstest.Route("script", mdl)}
	h := inprocesstest.New(t, inprocesstest.Config{Routes: routes, Store: st, Owner: owner, LeaseDuration: lease})
	p := &mgrProcess{h: h, ends: inprocesstest.WatchEnds(h.Service)}
	rs, err := model.NewRoutes("script", routes...)
	if err != nil {
		t.Fatal(err)
	}
	r := &replica{mgrProcess: p, kept: make(chan struct{}), limits: governance.NewLimits(st, h.Logger)}
	r.roots = roots.NewManager(roots.ManagerConfig{Store: st, Routes: rs, Tools: agent.NewRegistry(), Logger: h.Logger,
		Control: h.Service.Control(), Budget: r.limits})
	p.m = children.NewManager(h.Service, children.ManagerConfig{Materializer: inprocess.NewMaterializer(h.Deps),
		Notices: r.roots, Logger: h.Logger})
	r.limits.DeliverTo(r.roots, p.m)
	var ctx context.Context
	ctx, r.stop = context.WithCancel(context.WithoutCancel(inprocesstest.Ctx(t)))
	go func() { defer close(r.kept); h.Service.KeepLeases(ctx) }()
	t.Cleanup(func() {
		r.stop()
		<-r.kept
		bg := context.Background()
		if err := p.m.Shutdown(bg); err != nil {
			t.Errorf("%s: manager shutdown: %v", owner, err)
		}
		if err := r.roots.Close(bg); err != nil {
			t.Errorf("%s: roots close: %v", owner, err)
		}
		if err := h.Service.Shutdown(bg); err != nil {
			t.Errorf("%s: service shutdown: %v", owner, err)
		}
	})
	return r
}

// waitLog waits until session id's log satisfies pred.
func waitLog(t *testing.T, st store.Store, id, what string, pred func([]store.Event) bool) []store.Event {
	t.Helper()
	wake, stop := st.Subscribe(store.SessionTopic(id))
	defer stop()
	timeout := time.After(inprocesstest.Timeout)
	for {
		evs, err := st.Events(inprocesstest.Ctx(t), id, -1, 1000)
		if err != nil {
			t.Fatal(err)
		}
		if pred(evs) {
			return evs
		}
		select {
		case <-wake:
		case <-timeout:
			t.Fatalf("timed out waiting for %s in the log of %s", what, id)
		}
	}
}

// waitLifecycle waits until the lifecycle log holds an event of type typ
// in the tree of root.
func waitLifecycle(t *testing.T, st store.Store, root, typ string) {
	t.Helper()
	wake, stop := st.Subscribe(store.LifecycleTopic)
	defer stop()
	timeout := time.After(inprocesstest.Timeout)
	for {
		got, err := st.Lifecycle(inprocesstest.Ctx(t), store.LifecycleFilter{RootID: root, Types: []string{typ}})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) > 0 {
			return
		}
		select {
		case <-wake:
		case <-timeout:
			t.Fatalf("timed out waiting for %s in the tree of %s", typ, root)
		}
	}
}

// hasText reports whether the log holds a user/message with text s.
func hasText(t *testing.T, s string) func([]store.Event) bool {
	return func(evs []store.Event) bool { return countUser(t, evs, s) > 0 }
}

// countUser counts the user/messages of evs whose text is s.
func countUser(t *testing.T, evs []store.Event, s string) int {
	n := 0
	for _, e := range inprocesstest.OfType(evs, sessionlog.EventUserMessage) {
		if model.Text(inprocesstest.Decode[sessionlog.UserMessage](t, e).Content) == s {
			n++
		}
	}
	return n
}

// taskOwner returns the owner of the activation run of task.
func taskOwner(t *testing.T, st store.Store, task string) string {
	t.Helper()
	runs, err := st.ListRuns(inprocesstest.Ctx(t), store.RunFilter{TaskID: task})
	if err != nil || len(runs) != 1 {
		t.Fatalf("runs of task %s: %v, %v", task, runs, err)
	}
	return runs[0].Owner
}

// heldByA returns two replicas on a new database: A, whose model calls
// wait at g until g opens (at the latest when the test ends), and B, whose
// model is never let through.
func heldByA(t *testing.T) (a, b *replica, g *gate) {
	t.Helper()
	url, a, g := heldA(t, 0)
	b = newReplica(t, url, "replica-b", 0, newGate().model())
	t.Cleanup(g.open) // before B's cleanups too
	return a, b, g
}

// lapseLease is the lease of the tests that wait for A's lease to lapse:
// a third of it (a renewal's interval) is ample for a renewal on a loaded
// machine, so A is never fenced before the test stops it, and waiting for
// the lapse costs seconds.
const lapseLease = 3 * time.Second

// heldA returns a new database and replica A on it with lease (0: the
// default), whose model calls wait at g until g opens, at the latest when
// the test ends.
func heldA(t *testing.T, lease time.Duration) (url string, a *replica, g *gate) {
	t.Helper()
	url = pgtest.URL(t)
	g = newGate()
	a = newReplica(t, url, "replica-a", lease, g.model())
	t.Cleanup(g.open) // before A's own cleanups, which wait for held calls
	return url, a, g
}

func TestControl_FollowupThroughBIsSteeredIntoAsRunningChild(t *testing.T) {
	t.Parallel()
	a, b, g := heldByA(t)
	res := a.start(t, a.h.Parent, "one")
	<-g.reached

	type outcome struct {
		res children.FollowupResult
		err error
	}
	out := make(chan outcome, 1)
	go func() {
		f, err := b.m.Followup(inprocesstest.Ctx(t), a.h.Parent.Session.ID, res.ChildID, inprocesstest.Text("two"), sessionlog.Source{})
		out <- outcome{f, err}
	}()
	// A steered it into its running turn: the next-step inbox holds it.
	waitLog(t, a.h.Store, res.ChildID, "the steer of B's followup", func(evs []store.Event) bool {
		return slices.ContainsFunc(inprocesstest.OfType(evs, sessionlog.EventInboxSpliced), func(e store.Event) bool {
			d := inprocesstest.Decode[sessionlog.InboxSplicedData](t, e)
			return d.Target == sessionlog.TargetNextStep && len(d.Inserted) > 0
		})
	})
	g.open()
	var o outcome
	select {
	case o = <-out:
	case <-time.After(inprocesstest.Timeout):
		t.Fatal("the followup through B did not answer")
	}
	if o.err != nil || o.res.Route != subagent.RouteSteered || o.res.TaskID != res.TaskID {
		t.Fatalf("followup through B: %+v, %v; want steered into A's task %s", o.res, o.err, res.TaskID)
	}
	a.end(t, res.TaskID)
	evs := waitLog(t, a.h.Store, res.ChildID, "the followup", hasText(t, "two"))
	if n := countUser(t, evs, "two"); n != 1 {
		t.Fatalf("B's followup is %d times in the log, want once", n)
	}
	if owner := taskOwner(t, a.h.Store, res.TaskID); owner != "replica-a" {
		t.Fatalf("the task B steered into is driven by %q, want replica-a", owner)
	}
}

func TestControl_InterruptCancelAndDisposeThroughBStopAsWork(t *testing.T) {
	t.Parallel()
	a, b, g := heldByA(t)
	parentID := a.h.Parent.Session.ID

	res := a.start(t, a.h.Parent, "one")
	<-g.reached
	if err := b.m.Interrupt(inprocesstest.Ctx(t), parentID, res.ChildID); err != nil {
		t.Fatalf("interrupt through B: %v", err)
	}
	if end := a.end(t, res.TaskID); end.StopReason != subagent.StopAborted {
		t.Fatalf("A's activation after B's interrupt: %+v, want aborted", end)
	}

	f, err := a.m.Followup(inprocesstest.Ctx(t), parentID, res.ChildID, inprocesstest.Text("two"), sessionlog.Source{})
	if err != nil || f.Route != subagent.RouteStarted {
		t.Fatalf("followup on A: %+v, %v", f, err)
	}
	<-g.reached
	runs, err := a.h.Store.ListRuns(inprocesstest.Ctx(t), store.RunFilter{TaskID: f.TaskID})
	if err != nil || len(runs) != 1 {
		t.Fatalf("runs of task %s: %v, %v", f.TaskID, runs, err)
	}
	if err := b.h.Service.DisposeRun(inprocesstest.Ctx(t), runs[0].ID); err != nil {
		t.Fatalf("dispose through B of A's activation: %v", err)
	}
	if end := a.end(t, f.TaskID); end.StopReason != subagent.StopAborted {
		t.Fatalf("A's activation after B's dispose: %+v, want aborted", end)
	}
	if r, err := b.h.Store.GetRun(inprocesstest.Ctx(t), runs[0].ID); err != nil || r.State != store.StateDisposed {
		t.Fatalf("A's activation after B's dispose: %+v, %v; want disposed", r, err)
	}

	// A one-shot run of A, cancelled through B.
	h, err := a.h.Service.Start(inprocesstest.Ctx(t), spawn.Name, subagent.Request{Prompt: inprocesstest.Text("solo"), Parent: a.h.Parent})
	if err != nil {
		t.Fatal(err)
	}
	<-g.reached
	if err := b.h.Service.CancelRun(inprocesstest.Ctx(t), h.ID()); err != nil {
		t.Fatalf("cancel through B of A's run: %v", err)
	}
	select {
	case <-h.Done():
	case <-time.After(inprocesstest.Timeout):
		t.Fatal("A's run did not settle after B's cancel")
	}
	if r, err := h.Result(); err != nil || r.StopReason != subagent.StopAborted {
		t.Fatalf("A's run after B's cancel: %+v, %v; want aborted", r, err)
	}
}

func TestControl_PromptThroughBRunsOnTheReplicaDrivingTheRoot(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	g := newGate()
	g.open()
	a := newReplica(t, url, "replica-a", 0, g.model())
	b := newReplica(t, url, "replica-b", 0, g.model())
	rootID := a.h.Parent.Session.ID
	ctx := inprocesstest.Ctx(t)

	if _, err := a.roots.Prompt(ctx, rootID, inprocesstest.Text("hello")); err != nil {
		t.Fatal(err)
	}
	waitLog(t, a.h.Store, rootID, "A's first turn", hasText(t, "hello"))
	if live, _ := a.roots.Live(ctx, rootID); !live {
		t.Fatal("A has no live agent for the root it was prompted for")
	}
	id, err := b.roots.Prompt(ctx, rootID, inprocesstest.Text("via b"))
	if err != nil || id == "" {
		t.Fatalf("prompt through B: %q, %v", id, err)
	}
	evs := waitLog(t, a.h.Store, rootID, "the answer to B's prompt", func(evs []store.Event) bool {
		return slices.ContainsFunc(inprocesstest.OfType(evs, sessionlog.EventAssistantMessage), func(e store.Event) bool {
			return strings.Contains(string(e.Data), "re: via b")
		})
	})
	if n := countUser(t, evs, "via b"); n != 1 {
		t.Fatalf("B's prompt is %d times in the root's log, want once", n)
	}
	if live, _ := b.roots.Live(ctx, rootID); live {
		t.Fatal("B loaded an agent of its own for a root A drives")
	}
}

// TestControl_BudgetRaisedThroughBResumesTheRootADrives: a prompt taken
// by B for a root A drives, while the root's tree has spent its budget,
// waits in the root's inbox; a PATCH of the budget on B resumes the tree
// (tree/resumed, once) and the prompt runs on A, which drives the root.
func TestControl_BudgetRaisedThroughBResumesTheRootADrives(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	spends := scripted.Func(func(req model.Request) scripted.Step {
		last := model.Text(req.Messages[len(req.Messages)-1].Content)
		return scripted.Step{Text: "re: " + last, Usage: &model.Usage{InputTokens: 1, OutputTokens: 1}}
	})
	a := newReplica(t, url, "replica-a", 0, spends)
	b := newReplica(t, url, "replica-b", 0, spends)
	rootID := a.h.Parent.Session.ID
	ctx := inprocesstest.Ctx(t)
	if _, err := a.limits.Patch(ctx, rootID, governance.LimitsPatch{Set: subagent.Limits{TokenBudget: new(int64(2))}}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.roots.Prompt(ctx, rootID, inprocesstest.Text("hello")); err != nil {
		t.Fatal(err)
	}
	waitLog(t, a.h.Store, rootID, "A's turn", func(evs []store.Event) bool {
		return len(inprocesstest.OfType(evs, sessionlog.EventTurnEnd)) == 1
	})
	id, err := b.roots.Prompt(ctx, rootID, inprocesstest.Text("waits"))
	if err != nil {
		t.Fatalf("prompt through B: %v", err)
	}
	pending, err := a.h.Store.Pending(ctx, rootID)
	if err != nil || len(pending) != 1 || pending[0].ID != id {
		t.Fatalf("the spent tree's root inbox %+v (%v), want the prompt %s waiting", pending, err, id)
	}
	// The tree is paused by whichever replica finds it spent first: B
	// taking the prompt, or A's agent before the prompt's first step (B
	// may not have learnt the budget A set yet: a replica hears of another's
	// change of limits by NOTIFY, or a poll later). The raise comes after.
	waitLifecycle(t, a.h.Store, rootID, governance.EventTreePaused)
	tree, err := b.limits.Patch(ctx, rootID, governance.LimitsPatch{Set: subagent.Limits{TokenBudget: new(int64(100))}})
	if err != nil || tree.Exhausted() {
		t.Fatalf("raise through B: %+v, %v", tree, err)
	}
	evs := waitLog(t, a.h.Store, rootID, "the answer to the waiting prompt", func(evs []store.Event) bool {
		return slices.ContainsFunc(inprocesstest.OfType(evs, sessionlog.EventAssistantMessage), func(e store.Event) bool {
			return strings.Contains(string(e.Data), "re: waits")
		})
	})
	if n := countUser(t, evs, "waits"); n != 1 {
		t.Fatalf("the waiting prompt is %d times in the root's log, want once", n)
	}
	if live, _ := b.roots.Live(ctx, rootID); live {
		t.Fatal("B loaded an agent of its own for a root A drives")
	}
	for typ, want := range map[string]int{governance.EventTreePaused: 1, governance.EventTreeResumed: 1} {
		// B announced the resume: A reads it once B's commit reached it.
		waitLifecycle(t, a.h.Store, rootID, typ)
		got, err := a.h.Store.Lifecycle(ctx, store.LifecycleFilter{RootID: rootID, Types: []string{typ}})
		if err != nil || len(got) != want {
			t.Fatalf("%s events %v (%v), want %d", typ, got, err, want)
		}
	}
}

func TestControl_ALostLeaseIsTakenOverByBAndAIsFenced(t *testing.T) {
	t.Parallel()
	const lease = lapseLease
	url, a, g := heldA(t, lease)
	res := a.start(t, a.h.Parent, "one")
	<-g.reached
	runs, err := a.h.Store.ListRuns(inprocesstest.Ctx(t), store.RunFilter{TaskID: res.TaskID})
	if err != nil || len(runs) != 1 {
		t.Fatalf("runs of task %s: %v, %v", res.TaskID, runs, err)
	}
	// A accepted a message and stops renewing before delivering it (a
	// long pause, or a crash).
	row, err := children.InboxRow(res.ChildID, sessionlog.UserMessage{Content: inprocesstest.Text("two"), Source: sessionlog.Source{Kind: subagent.SourceUser}})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.h.Store.Enqueue(inprocesstest.Ctx(t), row); err != nil {
		t.Fatal(err)
	}
	a.stop()
	<-a.kept
	stopped := time.Now()

	open := newGate()
	open.open()
	b := newReplica(t, url, "replica-b", lease, open.model())
	end := b.end(t, runs[0].TaskID)
	if end.StopReason != subagent.StopError {
		t.Fatalf("A's activation closed by B: %+v, want error", end)
	}
	evs := waitLog(t, b.h.Store, res.ChildID, "delivery of A's undelivered message", hasText(t, "two"))
	if n := countUser(t, evs, "two"); n != 1 {
		t.Fatalf("A's undelivered message is %d times in the log, want once", n)
	}
	var resumed store.Run
	for _, r := range must(b.h.Store.ListRuns(inprocesstest.Ctx(t), store.RunFilter{ChildID: res.ChildID}))(t) {
		if r.Owner == "replica-b" {
			resumed = r
		}
	}
	if resumed.ID == "" {
		t.Fatal("B started no activation of A's child")
	}
	b.end(t, resumed.TaskID)
	t.Logf("B closed A's run and resumed its child %v after A stopped renewing (lease %v)", time.Since(stopped), lease)
	closed, err := b.h.Store.GetRun(inprocesstest.Ctx(t), runs[0].ID)
	if err != nil || closed.StopReason != subagent.StopError || !strings.Contains(closed.Diagnostic, "owner lost") {
		t.Fatalf("A's run: %+v, %v; want error, owner lost", closed, err)
	}
	ends, err := b.h.Store.Lifecycle(inprocesstest.Ctx(t), store.LifecycleFilter{Limit: 1000, Types: []string{subagent.EventEnd}})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(slices.DeleteFunc(ends, func(e store.LifecycleEvent) bool { return e.RunID != runs[0].ID })); n != 1 {
		t.Fatalf("A's run has %d subagent/end events, want 1", n)
	}

	// A wakes up: its agent's late writes are refused, so the log B
	// wrote does not change.
	before := len(must(b.h.Store.Events(inprocesstest.Ctx(t), res.ChildID, -1, 1000))(t))
	g.open()
	if err := a.m.Shutdown(inprocesstest.Ctx(t)); err != nil {
		t.Fatalf("A's shutdown: %v", err)
	}
	if after := len(must(a.h.Store.Events(inprocesstest.Ctx(t), res.ChildID, -1, 1000))(t)); after != before {
		t.Fatalf("A, fenced, still appended %d events to the child B took over", after-before)
	}
	_, err = a.h.Store.AppendEvents(store.WithOwner(inprocesstest.Ctx(t), "replica-a"), res.ChildID,
		store.NewEvent{Type: "test/late", Data: []byte(`{}`)})
	if !errors.Is(err, store.ErrFenced) {
		t.Fatalf("append of the fenced A: %v, want %v", err, store.ErrFenced)
	}
}

// must returns v, failing t on err.
func must[T any](v T, err error) func(*testing.T) T {
	return func(t *testing.T) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

// A request B took for a child of A that stops renewing (and serving) is
// carried out by B itself once A's lease lapsed: B claims the child and
// resumes it.
func TestControl_ARequestWaitingForALostOwnerIsCarriedOutByTheRequester(t *testing.T) {
	t.Parallel()
	const lease = lapseLease
	url, a, g := heldA(t, lease)
	res := a.start(t, a.h.Parent, "one")
	<-g.reached
	a.stop()
	<-a.kept
	open := newGate()
	open.open()
	b := newReplica(t, url, "replica-b", lease, open.model())

	asked := time.Now()
	f, err := b.m.Followup(inprocesstest.Ctx(t), a.h.Parent.Session.ID, res.ChildID, inprocesstest.Text("two"), sessionlog.Source{})
	if err != nil || f.Route != subagent.RouteStarted {
		t.Fatalf("followup through B for a lost owner: %+v, %v; want started", f, err)
	}
	t.Logf("B resumed the child %v after it was asked (lease %v)", time.Since(asked), lease)
	if owner := taskOwner(t, b.h.Store, f.TaskID); owner != "replica-b" {
		t.Fatalf("the resumed task is driven by %q, want replica-b", owner)
	}
	b.end(t, f.TaskID)
	evs := waitLog(t, b.h.Store, res.ChildID, "the followup", hasText(t, "two"))
	if n := countUser(t, evs, "two"); n != 1 {
		t.Fatalf("the followup is %d times in the log, want once", n)
	}
	if end := b.end(t, res.TaskID); end.StopReason != subagent.StopError {
		t.Fatalf("A's activation closed by B: %+v, want error", end)
	}
}

// The round trip of a control request — B writes it, A is woken, carries
// it out and answers, B reads the answer — measured with an interrupt that
// A refuses (wrong parent): it is routed to A while A drives the child,
// and answered with A's FORBIDDEN, as a local call would be.
func TestControl_RoundTripLatency(t *testing.T) {
	t.Parallel()
	a, b, g := heldByA(t)
	res := a.start(t, a.h.Parent, "one")
	<-g.reached
	if r := must(b.h.Store.GetResident(inprocesstest.Ctx(t), res.ChildID))(t); r.Owner != "replica-a" || !r.LeaseUntil.After(time.Now()) {
		t.Fatalf("the child's lease: %+v; want replica-a's, live", r)
	}
	const n = 40
	lat := make([]time.Duration, 0, n)
	for range n {
		began := time.Now()
		err := b.m.Interrupt(inprocesstest.Ctx(t), "not-the-parent", res.ChildID)
		lat = append(lat, time.Since(began))
		if subagent.ErrorCode(err) != subagent.EForbidden {
			t.Fatalf("interrupt through B with the wrong parent: %v, want %s", err, subagent.EForbidden)
		}
	}
	slices.Sort(lat)
	t.Logf("control round trip through another replica, %d requests: p50 %v, p99 %v, max %v",
		n, lat[n/2], lat[n*99/100], lat[n-1])
}
