package http

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/agent"
	"github.com/subagentd/subagentd/internal/children"
	a2aface "github.com/subagentd/subagentd/internal/faces/a2a"
	mcpface "github.com/subagentd/subagentd/internal/faces/mcp"
	"github.com/subagentd/subagentd/internal/governance"
	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/model/echo"
	"github.com/subagentd/subagentd/internal/model/scripted"
	"github.com/subagentd/subagentd/internal/providers/fork"
	"github.com/subagentd/subagentd/internal/providers/inprocess"
	"github.com/subagentd/subagentd/internal/providers/spawn"
	"github.com/subagentd/subagentd/internal/roots"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// world is a server over the real seam: the service with the real spawn
// and fork providers, the continuation Manager over the in-process
// Materializer, root agents, and model routes.
type world struct {
	*testBundle
	mgr   *children.Manager
	roots *roots.Manager
}

// setupWorld starts a world whose model routes are routes, the first being
// the default (none: no model is configured).
func setupWorld(t *testing.T, routes ...model.Route) *world {
	t.Helper()
	return setupWorldWith(t, nil, routes...)
}

// setupWorldWith is setupWorld with opts adjusting the server's config.
func setupWorldWith(t *testing.T, opts []func(*Config), routes ...model.Route) *world {
	t.Helper()
	return setupWorldSeam(t, subagent.Config{}, opts, routes...)
}

// setupWorldSeam is setupWorldWith with seam's settings for the service
// (see startSeam).
func setupWorldSeam(t *testing.T, seam subagent.Config, opts []func(*Config), routes ...model.Route) *world {
	t.Helper()
	w := &world{}
	w.testBundle = startSeam(t, seam, func(b *testBundle, cfg *Config) {
		var table *model.Routes
		if len(routes) > 0 {
			var err error
			if table, err = model.NewRoutes(routes[0].Name, routes...); err != nil {
				t.Fatal(err)
			}
		}
		tools := agent.NewRegistry()
		limits := cfg.Limits.(*governance.Limits)
		deps := inprocess.Deps{Store: b.st, Routes: table, Tools: tools, Logger: b.log, Gate: limits}
		for _, p := range []subagent.Provider{spawn.New(deps), fork.New(deps)} {
			if err := b.svc.Register(t.Context(), p); err != nil {
				t.Fatal(err)
			}
		}
		w.roots = roots.NewManager(roots.ManagerConfig{Store: b.st, Routes: table, Tools: tools, Logger: b.log, Control: b.svc.Control(),
			Budget: limits})
		w.mgr = children.NewManager(b.svc, children.ManagerConfig{
			Materializer: inprocess.NewMaterializer(deps), Notices: w.roots, Logger: b.log})
		limits.DeliverTo(w.roots, w.mgr)
		cfg.Continuations, cfg.Roots, cfg.Routes = w.mgr, w.roots, table
		cfg.Trees = governance.NewTrees(governance.TreesConfig{Store: b.st, Runs: w.mgr, Roots: w.roots, Logger: b.log})
		cfg.Usage = governance.NewUsage(b.st)
		cfg.Sessions = roots.New(roots.Config{Store: b.st, Routes: table, Agents: w.roots, Limits: cfg.Limits})
		cfg.MCP = func(s *Server) http.Handler { return mcpface.NewHandler(mcpface.Config{API: s, Logger: b.log}) }
		cfg.A2A = func(s *Server) A2A { return a2aface.New(a2aface.Config{API: s, Logger: b.log, MaxWait: time.Second}) }
		withWebhooks(b, cfg, false)
		cfg.Approvals = governance.NewApprovals(governance.ApprovalsConfig{Store: b.st, Owner: "test", Logger: b.log})
		// Activations settle (and notify their roots) before the roots close.
		b.stops = append(b.stops, w.mgr.Shutdown, w.roots.Close)
	}, opts...)
	return w
}

// scriptedRoute is a route named name over m, whose default model is
// name+"-default".
func scriptedRoute(name string, m model.Model) model.Route {
	return model.Route{Name: name, Kind: "scripted", DefaultModel: name + "-default", Model: m}
}

// gate holds the model step of one prompt: reached is closed when the step
// starts, and the step streams nothing until open is closed (or its turn is
// cancelled).
type gate struct{ open, reached chan struct{} }

func newGate() gate { return gate{make(chan struct{}), make(chan struct{})} }

// replying is a model that answers "re: <text of the last message>", except
// that the step whose last message is a key of gates waits for that gate.
func replying(gates map[string]gate) *scripted.Model {
	return scripted.Func(func(req model.Request) scripted.Step {
		last := model.Text(req.Messages[len(req.Messages)-1].Content)
		if g, ok := gates[last]; ok {
			return scripted.Step{Text: "working on " + last, Gate: g.open, Reached: g.reached}
		}
		return scripted.Step{Text: "re: " + last}
	})
}

// await fails t unless ch is closed in time.
func await(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(streamTimeout):
		t.Fatalf("%s did not happen within %s", what, streamTimeout)
	}
}

// startChild starts a continuable spawn child of parent with prompt and
// extra body fields.
func (w *world) startChild(t *testing.T, parent, prompt string, extra map[string]any) createSubagentResponse {
	t.Helper()
	body := map[string]any{"provider": spawn.Name, "parentSessionId": parent, "label": "researcher", "prompt": textPrompt(prompt)}
	for k, v := range extra {
		body[k] = v
	}
	var out createSubagentResponse
	r := w.want(t, http.StatusCreated, call{method: http.MethodPost, path: "/v1/subagents", body: body})
	r.decode(t, &out)
	if loc := r.header.Get("Location"); loc != "/v1/subagents/"+out.ChildID {
		t.Fatalf("Location %q", loc)
	}
	return out
}

func followup(child, parent, text string) call {
	return call{method: http.MethodPost, path: "/v1/subagents/" + child + "/followup",
		body: map[string]any{"parentSessionId": parent, "content": textPrompt(text)}}
}

func interrupt(child, parent string) call {
	return call{method: http.MethodPost, path: "/v1/subagents/" + child + "/interrupt",
		body: map[string]any{"parentSessionId": parent}}
}

// followupOK sends c and returns the delivered followup.
func (w *world) followupOK(t *testing.T, c call) followupResponse {
	t.Helper()
	var out followupResponse
	w.want(t, http.StatusOK, c).decode(t, &out)
	return out
}

// settledTask waits until task id settled and returns its run.
func (w *world) settledTask(t *testing.T, id string) runJSON {
	t.Helper()
	var run runJSON
	w.want(t, http.StatusOK, call{method: http.MethodGet, path: "/v1/tasks/" + id + "?wait=30"}).decode(t, &run)
	if run.State != store.StateSettled || run.Kind != store.KindActivation || run.TaskID != id || run.Result == nil {
		t.Fatalf("task %s did not settle: %+v", id, run)
	}
	return run
}

// outputText is the text of a settled run's output.
func outputText(t *testing.T, run runJSON) string {
	t.Helper()
	var blocks []model.Block
	if err := json.Unmarshal(run.Result.Output, &blocks); err != nil {
		t.Fatal(err)
	}
	return model.Text(blocks)
}

// sessionLog returns session id's whole log from the store.
func (b *testBundle) sessionLog(t *testing.T, id string) []store.Event {
	t.Helper()
	var out []store.Event
	for after := int64(-1); ; {
		page, err := b.st.Events(t.Context(), id, after, 1000)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			return out
		}
		out = append(out, page...)
		after = page[len(page)-1].Seq
	}
}

// userTexts lists the texts of a log's user messages.
func userTexts(t *testing.T, log []store.Event) []string {
	t.Helper()
	var out []string
	for _, e := range log {
		if e.Type != sessionlog.EventUserMessage {
			continue
		}
		var m sessionlog.UserMessage
		if err := json.Unmarshal(e.Data, &m); err != nil {
			t.Fatal(err)
		}
		out = append(out, model.Text(m.Content))
	}
	return out
}

// untilEvent reads session stream s up to the first event of type typ
// whose data match accepts (nil: any) and returns it.
func untilEvent(t *testing.T, s *sseStream, typ string, match func(json.RawMessage) bool) sessionEventJSON {
	t.Helper()
	for {
		var e sessionEventJSON
		if err := json.Unmarshal(s.next(t).data, &e); err != nil {
			t.Fatal(err)
		}
		if e.Type == typ && (match == nil || match(e.Data)) {
			return e
		}
	}
}

// nextStepInsert matches the inbox splice that queues a steered message
// for the running turn's next model step.
func nextStepInsert(data json.RawMessage) bool {
	var d sessionlog.InboxSplicedData
	return json.Unmarshal(data, &d) == nil && d.Target == sessionlog.TargetNextStep && len(d.Inserted) > 0
}

// lifecycleJSON is the data of subagent/start and subagent/end frames.
type lifecycleJSON struct {
	RunID           string `json:"runId"`
	Provider        string `json:"provider"`
	ID              string `json:"id"`
	Local           bool   `json:"local"`
	ParentSessionID string `json:"parentSessionId"`
	RootSessionID   string `json:"rootSessionId"`
	TaskID          string `json:"taskId"`
	StopReason      string `json:"stopReason"`
}

// untilLifecycle reads lifecycle stream s up to the next frame of type typ.
func untilLifecycle(t *testing.T, s *sseStream, typ string) lifecycleJSON {
	t.Helper()
	for {
		f := s.next(t)
		if f.event != typ {
			continue
		}
		var e lifecycleJSON
		if err := json.Unmarshal(f.data, &e); err != nil {
			t.Fatal(err)
		}
		return e
	}
}

// TestSubagents_R57_R96_SteeredThenStarted: a continuable start answers
// once its prompt is accepted, with the task that subagent/start names; a
// followup to the running child is steered into its very next model
// request; after settlement a followup starts a new task that resumes the
// child from its log, which keeps its history and one descriptor.
func TestSubagents_R57_R96_SteeredThenStarted(t *testing.T) {
	first := newGate()
	mdl := replying(map[string]gate{"start": first})
	w := setupWorld(t, scriptedRoute("main", mdl))
	parent := w.rootSession(t)
	events := w.stream(t, "/v1/events?after=0&types=subagent/start,subagent/end", nil)

	created := w.startChild(t, parent, "start", map[string]any{"childId": "researcher-1", "maxDepth": 2})
	if created.ChildID != "researcher-1" || created.TaskID == "" || created.MessageID == "" {
		t.Fatalf("created %+v", created)
	}
	started := untilLifecycle(t, events, subagent.EventStart)
	if started.TaskID != created.TaskID || started.ID != created.ChildID || started.ParentSessionID != parent ||
		started.Provider != spawn.Name || !started.Local {
		t.Fatalf("subagent/start %+v, created %+v", started, created)
	}
	await(t, first.reached, "the child's first model call")

	var info subagentJSON
	w.want(t, http.StatusOK, call{method: http.MethodGet, path: "/v1/subagents/" + created.ChildID}).decode(t, &info)
	if info.Activity != activityRunning || info.TaskID != created.TaskID || info.Identity == nil ||
		info.Identity.Mode != subagent.ModeContinuable || info.Identity.Label != "researcher" || info.Identity.Provider != spawn.Name ||
		info.Session.ParentSessionID != parent || info.Session.Mode != subagent.ModeContinuable || info.Session.Activity != activityRunning {
		t.Fatalf("subagent %+v identity %+v", info, info.Identity)
	}

	child := w.stream(t, "/v1/sessions/"+created.ChildID+"/stream", nil)
	answer := w.async(t, followup(created.ChildID, parent, "also check the tests"))
	untilEvent(t, child, sessionlog.EventInboxSpliced, nextStepInsert)
	close(first.open)
	r := answer()
	var steered followupResponse
	r.decode(t, &steered)
	if r.status != http.StatusOK || steered.Route != subagent.RouteSteered || steered.TaskID != created.TaskID {
		t.Fatalf("followup %d %s", r.status, r.body)
	}
	if run := w.settledTask(t, created.TaskID); run.Result.StopReason != subagent.StopCompleted || outputText(t, run) != "re: also check the tests" {
		t.Fatalf("first task %+v", run.Result)
	}
	if end := untilLifecycle(t, events, subagent.EventEnd); end.TaskID != created.TaskID || end.RunID != started.RunID || end.StopReason != subagent.StopCompleted {
		t.Fatalf("subagent/end %+v", end)
	}
	reqs := mdl.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d model requests", len(reqs))
	}
	if last := reqs[1].Messages[len(reqs[1].Messages)-1]; model.Text(last.Content) != "also check the tests" {
		t.Fatalf("the request after the steer ends with %+v", last)
	}

	before := w.sessionLog(t, created.ChildID)
	resumed := w.followupOK(t, followup(created.ChildID, parent, "more"))
	if resumed.Route != subagent.RouteStarted || resumed.TaskID == created.TaskID {
		t.Fatalf("followup after settlement %+v", resumed)
	}
	if run := w.settledTask(t, resumed.TaskID); run.Result.StopReason != subagent.StopCompleted || outputText(t, run) != "re: more" {
		t.Fatalf("resumed task %+v", run.Result)
	}
	if s := untilLifecycle(t, events, subagent.EventStart); s.TaskID != resumed.TaskID || s.RunID == started.RunID {
		t.Fatalf("second subagent/start %+v", s)
	}
	if e := untilLifecycle(t, events, subagent.EventEnd); e.TaskID != resumed.TaskID {
		t.Fatalf("second subagent/end %+v", e)
	}
	after := w.sessionLog(t, created.ChildID)
	for i, e := range before {
		if after[i].Type != e.Type || string(after[i].Data) != string(e.Data) {
			t.Fatalf("event %d changed: %s %s -> %s %s", i, e.Type, e.Data, after[i].Type, after[i].Data)
		}
	}
	descriptors := 0
	for _, e := range after {
		if e.Type == sessionlog.EventDescriptor {
			descriptors++
		}
	}
	if got := userTexts(t, after); descriptors != 1 || !slices.Equal(got, []string{"start", "also check the tests", "more"}) {
		t.Fatalf("%d descriptors, user messages %q", descriptors, got)
	}
}

// TestSubagents_R103_InterruptThenFollowup: an interrupt ends the running
// turn aborted and parks the messages steered into it — their calls answer
// route parked at once — and the next followup runs them first, in order.
func TestSubagents_R103_InterruptThenFollowup(t *testing.T) {
	stuck := newGate()
	w := setupWorld(t, scriptedRoute("main", replying(map[string]gate{"go": stuck})))
	parent := w.rootSession(t)
	created := w.startChild(t, parent, "go", nil)
	await(t, stuck.reached, "the child's first model call")
	child := w.stream(t, "/v1/sessions/"+created.ChildID+"/stream", nil)
	parked1 := w.async(t, followup(created.ChildID, parent, "parked 1"))
	untilEvent(t, child, sessionlog.EventInboxSpliced, nextStepInsert)
	parked2 := w.async(t, followup(created.ChildID, parent, "parked 2"))
	untilEvent(t, child, sessionlog.EventInboxSpliced, nextStepInsert)

	var accepted acceptedJSON
	w.want(t, http.StatusAccepted, interrupt(created.ChildID, parent)).decode(t, &accepted)
	if !accepted.Accepted {
		t.Fatal("interrupt not accepted")
	}
	if run := w.settledTask(t, created.TaskID); run.Result.StopReason != subagent.StopAborted {
		t.Fatalf("interrupted task %+v", run.Result)
	}
	for _, answer := range []func() response{parked1, parked2} {
		var f followupResponse
		if r := answer(); r.status != http.StatusOK {
			t.Fatalf("parked followup %d %s", r.status, r.body)
		} else {
			r.decode(t, &f)
		}
		if f.Route != subagent.RouteParked || f.TaskID != "" || f.MessageID == "" {
			t.Fatalf("parked followup %+v, want route parked", f)
		}
	}
	next := w.followupOK(t, followup(created.ChildID, parent, "new"))
	if next.Route != subagent.RouteStarted {
		t.Fatalf("followup %+v", next)
	}
	if run := w.settledTask(t, next.TaskID); run.Result.StopReason != subagent.StopCompleted || outputText(t, run) != "re: new" {
		t.Fatalf("resumed task %+v", run.Result)
	}
	if got := userTexts(t, w.sessionLog(t, created.ChildID)); !slices.Equal(got, []string{"go", "parked 1", "parked 2", "new"}) {
		t.Fatalf("user messages %q", got)
	}
}

// TestSubagents_R84_R87_BadInputAppendsNothing: an unknown child is 404, a
// caller that is not the durable parent 403 (a claimed source grants
// nothing), a one-shot child 409 NOT_RESUMABLE; none of them, nor a
// rejected start, writes to any log or creates a session.
func TestSubagents_R84_R87_BadInputAppendsNothing(t *testing.T) {
	w := setupWorld(t, scriptedRoute("main", replying(nil)))
	parent, other := w.rootSession(t), w.rootSession(t)
	created := w.startChild(t, parent, "hello", map[string]any{"childId": "c-1"})
	w.settledTask(t, created.TaskID)
	var oneShot runJSON
	w.want(t, http.StatusCreated, call{method: http.MethodPost, path: "/v1/runs?wait=true", body: map[string]any{
		"provider": spawn.Name, "parentSessionId": parent, "prompt": textPrompt("once"),
	}}).decode(t, &oneShot)
	if oneShot.State != store.StateSettled {
		t.Fatalf("one-shot run %+v", oneShot)
	}
	ids := []string{parent, other, created.ChildID, oneShot.ChildSessionID}
	lengths := func() []int {
		var out []int
		for _, id := range ids {
			out = append(out, len(w.sessionLog(t, id)))
		}
		sessions, err := w.st.ListSessions(t.Context(), store.SessionFilter{Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		return append(out, len(sessions))
	}
	before := lengths()

	coordinator := followup(created.ChildID, other, "as coordinator")
	coordinator.body.(map[string]any)["source"] = map[string]any{"kind": "coordinator"}
	for _, tc := range []struct {
		name   string
		c      call
		status int
		code   string
	}{
		{"unknown child", followup("nope", parent, "x"), 404, subagent.ESessionNotFound},
		{"wrong parent", followup(created.ChildID, other, "x"), 403, subagent.EForbidden},
		{"source grants nothing", coordinator, 403, subagent.EForbidden},
		{"one-shot child", followup(oneShot.ChildSessionID, parent, "x"), 409, subagent.ENotResumable},
		{"interrupt unknown child", interrupt("nope", parent), 404, subagent.ESessionNotFound},
		{"interrupt wrong parent", interrupt(created.ChildID, other), 403, subagent.EForbidden},
		{"duplicate child", call{method: http.MethodPost, path: "/v1/subagents", body: map[string]any{
			"provider": spawn.Name, "parentSessionId": parent, "label": "again", "prompt": textPrompt("x"), "childId": "c-1"}}, 409, subagent.EDuplicateChild},
		{"unknown provider", call{method: http.MethodPost, path: "/v1/subagents", body: map[string]any{
			"provider": "nope", "parentSessionId": parent, "label": "x", "prompt": textPrompt("x")}}, 404, subagent.ENoProvider},
		{"unknown parent", call{method: http.MethodPost, path: "/v1/subagents", body: map[string]any{
			"provider": spawn.Name, "parentSessionId": "nope", "label": "x", "prompt": textPrompt("x")}}, 404, subagent.ESessionNotFound},
		{"negative maxDepth", call{method: http.MethodPost, path: "/v1/subagents", body: map[string]any{
			"provider": spawn.Name, "parentSessionId": parent, "label": "x", "prompt": textPrompt("x"), "maxDepth": -1}}, 422, subagent.EInvalidMaxDepth},
		{"depth exceeded", call{method: http.MethodPost, path: "/v1/subagents", body: map[string]any{
			"provider": spawn.Name, "parentSessionId": parent, "label": "x", "prompt": textPrompt("x"), "maxDepth": 0}}, 422, subagent.EDepthExceeded},
		{"unknown task", call{method: http.MethodGet, path: "/v1/tasks/nope"}, 404, subagent.ETaskNotFound},
		{"unknown subagent", call{method: http.MethodGet, path: "/v1/subagents/nope"}, 404, subagent.ESessionNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w.wantProblem(t, tc.status, tc.code, tc.c)
		})
	}
	// An interrupt of a settled child is an accepted no-op (R98).
	w.want(t, http.StatusAccepted, interrupt(created.ChildID, parent))
	if after := lengths(); !slices.Equal(after, before) {
		t.Fatalf("log lengths and session count %v, before %v", after, before)
	}
}

// TestSubagents_Validation: every field of the continuable routes is
// bounded, and the spec rejects what the server rejects.
func TestSubagents_Validation(t *testing.T) {
	w := setupWorld(t, scriptedRoute("main", replying(nil)))
	parent := w.rootSession(t)
	start := func(edit func(map[string]any)) call {
		body := map[string]any{"provider": spawn.Name, "parentSessionId": parent, "label": "x", "prompt": textPrompt("x")}
		edit(body)
		return call{method: http.MethodPost, path: "/v1/subagents", body: body, invalid: true}
	}
	send := func(edit func(map[string]any)) call {
		c := followup("c-1", parent, "x")
		edit(c.body.(map[string]any))
		c.invalid = true
		return c
	}
	specValid := func(c call) call { c.invalid = false; return c }
	blocks := make([]map[string]any, 65)
	for i := range blocks {
		blocks[i] = map[string]any{"type": "text", "text": "x"}
	}
	for _, tc := range []struct {
		name  string
		c     call
		field string
	}{
		{"label missing", start(func(b map[string]any) { delete(b, "label") }), "label"},
		{"label empty", start(func(b map[string]any) { b["label"] = "" }), "label"},
		{"label too long", start(func(b map[string]any) { b["label"] = strings.Repeat("l", 201) }), "label"},
		{"childId unsafe", start(func(b map[string]any) { b["childId"] = "../etc" }), "childId"},
		{"childId too long", start(func(b map[string]any) { b["childId"] = strings.Repeat("c", 129) }), "childId"},
		{"prompt too many blocks", start(func(b map[string]any) { b["prompt"] = blocks }), "prompt"},
		// The spec states the text bound in words only.
		{"prompt text too long", specValid(start(func(b map[string]any) { b["prompt"] = textPrompt(strings.Repeat("t", 256<<10+1)) })), "prompt"},
		{"outputSchema is one-shot only", start(func(b map[string]any) { b["outputSchema"] = map[string]any{"type": "object"} }), "outputSchema"},
		{"content empty", send(func(b map[string]any) { b["content"] = []any{} }), "content"},
		{"content too many blocks", send(func(b map[string]any) { b["content"] = blocks }), "content"},
		{"source kind unknown", send(func(b map[string]any) { b["source"] = map[string]any{"kind": "admin"} }), "source.kind"},
		{"parent missing", send(func(b map[string]any) { delete(b, "parentSessionId") }), "parentSessionId"},
		{"interrupt parent missing", call{method: http.MethodPost, path: "/v1/subagents/c-1/interrupt", body: map[string]any{}, invalid: true}, "parentSessionId"},
		{"prompt message empty", call{method: http.MethodPost, path: "/v1/sessions/" + parent + "/messages", body: map[string]any{"content": []any{}}, invalid: true}, "content"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := w.wantProblem(t, http.StatusBadRequest, subagent.EInvalidRequest, tc.c)
			if len(p.Errors) != 1 || p.Errors[0].Field != tc.field {
				t.Fatalf("errors %+v, want one for %s", p.Errors, tc.field)
			}
		})
	}
	if kids, err := w.st.ListSessions(t.Context(), store.SessionFilter{ParentID: &parent, Limit: 10}); err != nil || len(kids) != 0 {
		t.Fatalf("children %+v, %v", kids, err)
	}
}

// TestSubagents_NotReadyWithoutManager: a server wired without the
// continuation manager or root agents answers their routes NOT_READY.
func TestSubagents_NotReadyWithoutManager(t *testing.T) {
	b := setup(t)
	parent := b.rootSession(t)
	for _, c := range []call{
		{method: http.MethodPost, path: "/v1/subagents", body: map[string]any{"provider": "spawn", "parentSessionId": parent, "label": "x", "prompt": textPrompt("x")}},
		{method: http.MethodGet, path: "/v1/subagents/c"},
		followup("c", parent, "x"),
		interrupt("c", parent),
		{method: http.MethodGet, path: "/v1/tasks/t"},
		{method: http.MethodGet, path: "/v1/sessions/" + parent + "/children"},
		{method: http.MethodGet, path: "/v1/sessions/" + parent + "/descendants"},
		{method: http.MethodPost, path: "/v1/sessions/" + parent + "/messages", body: map[string]any{"content": textPrompt("x")}},
	} {
		if p := b.wantProblem(t, http.StatusServiceUnavailable, codeNotReady, c); !strings.Contains(p.Detail, "runs no") {
			t.Errorf("%s %s: detail %q", c.method, c.path, p.Detail)
		}
	}
}

// TestSessions_R121_R128_ChildrenAndDescendants lists continuable and
// one-shot children from the manager, with pages, and the tree below a
// root in pre-order with parents and depths.
func TestSessions_R121_R128_ChildrenAndDescendants(t *testing.T) {
	held := newGate()
	w := setupWorld(t, scriptedRoute("main", replying(map[string]gate{"research": held})))
	parent := w.rootSession(t)
	cont := w.startChild(t, parent, "research", nil)
	await(t, held.reached, "the continuable child's model call")
	run := func(parentID, label string) runJSON {
		var out runJSON
		w.want(t, http.StatusCreated, call{method: http.MethodPost, path: "/v1/runs?wait=true", body: map[string]any{
			"provider": spawn.Name, "parentSessionId": parentID, "prompt": textPrompt(label), "label": label,
		}}).decode(t, &out)
		if out.State != store.StateSettled {
			t.Fatalf("run %+v", out)
		}
		return out
	}
	oneShot := run(parent, "one-shot")
	grandchild := run(cont.ChildID, "grandchild")

	var list childListJSON
	w.want(t, http.StatusOK, call{method: http.MethodGet, path: "/v1/sessions/" + parent + "/children"}).decode(t, &list)
	yes, no := true, false
	want := []childEntryJSON{
		{Kind: children.EntryChild, ID: cont.ChildID, Mode: subagent.ModeContinuable, Label: "researcher", Activity: activityRunning, HasChildren: &yes, Provider: spawn.Name},
		{Kind: children.EntryChild, ID: oneShot.ChildSessionID, Mode: subagent.ModeOneShot, Label: "one-shot", Activity: activityInactive, HasChildren: &no, Provider: spawn.Name},
	}
	assertEntries(t, list.Entries, want)

	var page childListJSON
	w.want(t, http.StatusOK, call{method: http.MethodGet, path: "/v1/sessions/" + parent + "/children?limit=1"}).decode(t, &page)
	if len(page.Entries) != 1 || page.Entries[0].ID != cont.ChildID || page.NextCursor != cont.ChildID {
		t.Fatalf("first page %+v", page)
	}
	var last childListJSON
	w.want(t, http.StatusOK, call{method: http.MethodGet, path: "/v1/sessions/" + parent + "/children?limit=1&after=" + page.NextCursor}).decode(t, &last)
	if len(last.Entries) != 1 || last.Entries[0].ID != oneShot.ChildSessionID || last.NextCursor != "" {
		t.Fatalf("second page %+v", last)
	}
	w.wantProblem(t, http.StatusBadRequest, subagent.EInvalidRequest, call{method: http.MethodGet, path: "/v1/sessions/" + parent + "/children?after=unknown"})

	var tree childListJSON
	w.want(t, http.StatusOK, call{method: http.MethodGet, path: "/v1/sessions/" + parent + "/descendants"}).decode(t, &tree)
	want[0].ParentID, want[0].Depth = parent, 1
	want[1].ParentID, want[1].Depth = parent, 1
	assertEntries(t, tree.Entries, []childEntryJSON{want[0],
		{Kind: children.EntryChild, ID: grandchild.ChildSessionID, Mode: subagent.ModeOneShot, Label: "grandchild", Activity: activityInactive,
			HasChildren: &no, Provider: spawn.Name, ParentID: cont.ChildID, Depth: 2},
		want[1]})
	w.wantProblem(t, http.StatusNotFound, subagent.ESessionNotFound, call{method: http.MethodGet, path: "/v1/sessions/nope/descendants"})

	close(held.open)
	w.settledTask(t, cont.TaskID)
}

func assertEntries(t *testing.T, got, want []childEntryJSON) {
	t.Helper()
	eq := func(a, b childEntryJSON) bool {
		ha, hb := a.HasChildren, b.HasChildren
		a.HasChildren, b.HasChildren = nil, nil
		return a == b && (ha == nil) == (hb == nil) && (ha == nil || *ha == *hb)
	}
	if !slices.EqualFunc(got, want, eq) {
		t.Fatalf("entries:\n got %+v\nwant %+v", got, want)
	}
}

// TestSessions_PromptRunsTheRootAgent: a prompt is accepted with 202 and
// the root's turn streams on the session stream, its user message under
// the answered id; the session is running while the turn runs.
func TestSessions_PromptRunsTheRootAgent(t *testing.T) {
	held := newGate()
	w := setupWorld(t, scriptedRoute("main", replying(map[string]gate{"hi root": held})))
	root := w.rootSession(t)
	stream := w.stream(t, "/v1/sessions/"+root+"/stream", nil)
	var accepted promptResponse
	w.want(t, http.StatusAccepted, call{method: http.MethodPost, path: "/v1/sessions/" + root + "/messages",
		body: map[string]any{"content": textPrompt("hi root")}}).decode(t, &accepted)
	await(t, held.reached, "the root's model call")
	var sess sessionJSON
	w.want(t, http.StatusOK, call{method: http.MethodGet, path: "/v1/sessions/" + root}).decode(t, &sess)
	if sess.Activity != activityRunning {
		t.Fatalf("root session during its turn %+v", sess)
	}
	close(held.open)
	user := untilEvent(t, stream, sessionlog.EventUserMessage, nil)
	var msg sessionlog.UserMessage
	if err := json.Unmarshal(user.Data, &msg); err != nil || msg.ID != accepted.MessageID || model.Text(msg.Content) != "hi root" {
		t.Fatalf("user message %s (%v), accepted %+v", user.Data, err, accepted)
	}
	var text string
	for text != "working on hi root" {
		chunk := untilEvent(t, stream, sessionlog.EventAssistantChunk, nil)
		var data sessionlog.ChunkData
		if err := json.Unmarshal(chunk.Data, &data); err != nil {
			t.Fatal(err)
		}
		text += data.Chunk.Text
	}
	answer := untilEvent(t, stream, sessionlog.EventAssistantMessage, nil)
	var data sessionlog.AssistantMessageData
	if err := json.Unmarshal(answer.Data, &data); err != nil || model.Text(data.Message.Content) != "working on hi root" {
		t.Fatalf("assistant message %s (%v)", answer.Data, err)
	}
	untilEvent(t, stream, sessionlog.EventTurnEnd, nil)

	child := w.startChild(t, root, "x", nil)
	w.wantProblem(t, http.StatusBadRequest, subagent.EInvalidRequest, call{method: http.MethodPost, path: "/v1/sessions/" + child.ChildID + "/messages",
		body: map[string]any{"content": textPrompt("x")}})
	w.wantProblem(t, http.StatusNotFound, subagent.ESessionNotFound, call{method: http.MethodPost, path: "/v1/sessions/nope/messages",
		body: map[string]any{"content": textPrompt("x")}})
	w.settledTask(t, child.TaskID)
}

// TestSessions_UnknownRouteIs422: a root session naming a model route the
// server does not have is rejected at creation.
func TestSessions_UnknownRouteIs422(t *testing.T) {
	w := setupWorld(t, scriptedRoute("main", replying(nil)))
	p := w.wantProblem(t, http.StatusUnprocessableEntity, roots.EUnknownRoute, call{method: http.MethodPost, path: "/v1/sessions",
		body: map[string]any{"agentOptions": map[string]any{"provider": "nowhere"}}})
	if len(p.Errors) != 1 || p.Errors[0].Field != "agentOptions.provider" || !strings.Contains(p.Detail, `"nowhere"`) || !strings.Contains(p.Detail, "main") {
		t.Fatalf("problem %+v", p)
	}
	w.want(t, http.StatusCreated, call{method: http.MethodPost, path: "/v1/sessions",
		body: map[string]any{"agentOptions": map[string]any{"provider": "main"}}})
}

// TestProviders_RuntimeCapabilitiesAndModel: the in-process providers can
// steer and resume and show the default model route (echo marked offline);
// a provider that runs its own model shows none.
func TestProviders_RuntimeCapabilitiesAndModel(t *testing.T) {
	w := setupWorld(t, model.Route{Name: "echo", Kind: model.KindEcho, DefaultModel: "echo", Model: echo.New()},
		scriptedRoute("main", replying(nil)))
	w.register(t, &fakeProvider{name: "remote"})
	var list providerListJSON
	w.want(t, http.StatusOK, call{method: http.MethodGet, path: "/v1/providers"}).decode(t, &list)
	if len(list.Providers) != 3 {
		t.Fatalf("providers %+v", list.Providers)
	}
	echoModel := providerModelJSON{Route: "echo", Kind: model.KindEcho, Model: "echo", Offline: true}
	for i, name := range []string{spawn.Name, fork.Name} {
		p := list.Providers[i]
		if p.Name != name || !p.Steer || !p.Resume || !p.Local || p.Model == nil || *p.Model != echoModel {
			t.Errorf("provider %+v, model %+v", p, p.Model)
		}
	}
	if remote := list.Providers[2]; remote.Model != nil || remote.Steer || remote.Resume || remote.Local {
		t.Errorf("remote %+v", remote)
	}
	var one providerJSON
	w.want(t, http.StatusOK, call{method: http.MethodGet, path: "/v1/providers/spawn"}).decode(t, &one)
	if one.Model == nil || *one.Model != echoModel {
		t.Errorf("spawn %+v", one)
	}
}

// TestSubagents_ForkChildKnowsTheConversation: a continuable fork child
// starts from its parent's completed turns.
func TestSubagents_ForkChildKnowsTheConversation(t *testing.T) {
	mdl := replying(nil)
	w := setupWorld(t, scriptedRoute("main", mdl))
	root := w.rootSession(t)
	stream := w.stream(t, "/v1/sessions/"+root+"/stream", nil)
	w.want(t, http.StatusAccepted, call{method: http.MethodPost, path: "/v1/sessions/" + root + "/messages",
		body: map[string]any{"content": textPrompt("context")}})
	untilEvent(t, stream, sessionlog.EventTurnEnd, nil)
	created := w.startChild(t, root, "fork task", map[string]any{"provider": fork.Name})
	if run := w.settledTask(t, created.TaskID); outputText(t, run) != "re: fork task" {
		t.Fatalf("fork task %+v", run.Result)
	}
	var texts []string
	for _, m := range mdl.Requests()[1].Messages {
		texts = append(texts, model.Text(m.Content))
	}
	if !slices.Equal(texts, []string{"context", "re: context", "fork task"}) {
		t.Fatalf("the fork child's first request %q", texts)
	}
}

// TestSubagents_MaxLiveRunsCountsActivations: SUBAGENTD_MAX_LIVE_RUNS caps
// live activations too — a continuable start and a followup that would
// start an activation beyond it are 429 RATE_LIMITED with Retry-After, and
// a settled activation frees its slot.
func TestSubagents_MaxLiveRunsCountsActivations(t *testing.T) {
	gates := map[string]gate{"hold a": newGate(), "hold b": newGate()}
	w := setupWorldSeam(t, subagent.Config{MaxLiveRuns: 1}, nil, scriptedRoute("main", replying(gates)))
	parent := w.rootSession(t)
	a := w.startChild(t, parent, "hold a", nil)
	body := map[string]any{"provider": spawn.Name, "parentSessionId": parent, "label": "second", "prompt": textPrompt("b"), "childId": "b"}
	r := w.want(t, http.StatusTooManyRequests, call{method: http.MethodPost, path: "/v1/subagents", body: body})
	if p := r.problem(t); p.Code != subagent.ERateLimited || r.header.Get("Retry-After") == "" {
		t.Fatalf("refused start: %s, Retry-After %q", r.body, r.header.Get("Retry-After"))
	}
	w.wantProblem(t, http.StatusNotFound, subagent.ESessionNotFound, call{method: http.MethodGet, path: "/v1/sessions/b"})
	close(gates["hold a"].open)
	w.settledTask(t, a.TaskID)

	b := w.startChild(t, parent, "hold b", nil)
	r = w.want(t, http.StatusTooManyRequests, followup(a.ChildID, parent, "again"))
	if p := r.problem(t); p.Code != subagent.ERateLimited || r.header.Get("Retry-After") == "" {
		t.Fatalf("refused followup: %s, Retry-After %q", r.body, r.header.Get("Retry-After"))
	}
	close(gates["hold b"].open)
	w.settledTask(t, b.TaskID)
}
