package http

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

func textPrompt(s string) []map[string]any { return []map[string]any{{"type": "text", "text": s}} }

// TestCreateRun_R13_ReadyBeforeAnswer: the 201 comes after the child is
// published and its subagent/start is in the lifecycle log.
func TestCreateRun_R13_ReadyBeforeAnswer(t *testing.T) {
	b := setup(t)
	p := b.register(t, &fakeProvider{name: "spawn", caps: allCaps(), local: true})
	parent := b.rootSession(t)
	r := b.want(t, http.StatusCreated, call{method: http.MethodPost, path: "/v1/runs", body: map[string]any{
		"provider": "spawn", "parentSessionId": parent, "prompt": textPrompt("hello"), "label": "greet",
	}})
	var run runJSON
	r.decode(t, &run)
	if r.header.Get("Location") != "/v1/runs/"+run.RunID {
		t.Fatalf("Location %q", r.header.Get("Location"))
	}
	if run.State != store.StateRunning || run.Provider != "spawn" || run.ParentSessionID != parent || !run.Local ||
		run.Kind != store.KindOneShot || run.Result != nil || run.ChildSessionID == "" {
		t.Fatalf("run = %+v", run)
	}
	evs, err := b.st.Lifecycle(t.Context(), store.LifecycleFilter{Types: []string{subagent.EventStart}})
	if err != nil || len(evs) != 1 || evs[0].RunID != run.RunID {
		t.Fatalf("lifecycle = %+v, %v", evs, err)
	}
	child, err := b.st.GetSession(t.Context(), run.ChildSessionID)
	if err != nil || child.ParentID != parent || child.DelegationDepth != 1 {
		t.Fatalf("child = %+v, %v", child, err)
	}
	p.run(run.ChildSessionID).complete(t, "hi")
}

// TestCreateRun_OutlivesRequest: the provider is started under the
// server's context with the request's tenant, so the run cannot end with
// the request.
func TestCreateRun_OutlivesRequest(t *testing.T) {
	b := setup(t)
	p := b.register(t, &fakeProvider{name: "spawn", caps: allCaps(), local: true})
	run := b.startRun(t, "spawn", b.rootSession(t), nil)
	fr := p.run(run.ChildSessionID)
	if fr.startCtx.Done() != nil {
		t.Fatal("the provider's start context can be cancelled")
	}
	if got := store.Tenant(fr.startCtx); got != store.DefaultTenant {
		t.Fatalf("tenant %q", got)
	}
	fr.complete(t, "done")
	var got runJSON
	b.want(t, http.StatusOK, call{method: http.MethodGet, path: "/v1/runs/" + run.RunID + "?wait=10"}).decode(t, &got)
	if got.State != store.StateSettled || got.Result.StopReason != subagent.StopCompleted {
		t.Fatalf("run = %+v", got)
	}
}

// TestCreateRun_R9_Rejections: the seam's validation errors map onto their
// statuses, and nothing is started.
func TestCreateRun_R9_Rejections(t *testing.T) {
	b := setup(t)
	b.register(t, &fakeProvider{name: "spawn", caps: allCaps(), local: true})
	b.register(t, &fakeProvider{name: "acp"})
	parent := b.rootSession(t)
	body := func(provider string, extra map[string]any) map[string]any {
		m := map[string]any{"provider": provider, "parentSessionId": parent, "prompt": textPrompt("x")}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	for _, tc := range []struct {
		name   string
		body   map[string]any
		status int
		code   string
	}{
		{"R5 unknown provider", body("codex", nil), 404, subagent.ENoProvider},
		{"unknown parent", map[string]any{"provider": "spawn", "parentSessionId": "nope", "prompt": textPrompt("x")}, 404, subagent.ESessionNotFound},
		{"R9 capability outputSchema", body("acp", map[string]any{"outputSchema": map[string]any{"type": "object"}}), 422, subagent.EUnsupportedCapability},
		{"R9 capability persona", body("acp", map[string]any{"persona": "p"}), 422, subagent.EUnsupportedCapability},
		{"R9 maxDepth domain", body("spawn", map[string]any{"maxDepth": -1}), 422, subagent.EInvalidMaxDepth},
		{"R35 depth exceeded", body("spawn", map[string]any{"maxDepth": 0}), 422, subagent.EDepthExceeded},
		{"R9 schema subset", body("spawn", map[string]any{"outputSchema": map[string]any{"type": "object", "minProperties": 1}}), 422, subagent.EUnsupportedSchema},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b.wantProblem(t, tc.status, tc.code, call{method: http.MethodPost, path: "/v1/runs", body: tc.body})
		})
	}
	runs, err := b.st.ListRuns(t.Context(), store.RunFilter{})
	if err != nil || len(runs) != 0 {
		t.Fatalf("runs = %+v, %v", runs, err)
	}
}

func TestCreateRun_UnsupportedSchemaListsViolations(t *testing.T) {
	b := setup(t)
	b.register(t, &fakeProvider{name: "spawn", caps: allCaps(), local: true})
	p := b.wantProblem(t, http.StatusUnprocessableEntity, subagent.EUnsupportedSchema, call{method: http.MethodPost, path: "/v1/runs", body: map[string]any{
		"provider": "spawn", "parentSessionId": b.rootSession(t), "prompt": textPrompt("x"),
		"outputSchema": map[string]any{"type": "object", "properties": map[string]any{"a": map[string]any{"type": "string", "pattern": "x"}}},
	}})
	if len(p.Errors) == 0 || !strings.HasPrefix(p.Errors[0].Field, "outputSchema") {
		t.Fatalf("problem = %+v", p)
	}
}

// TestCreateRun_Bounds: every field of the start request is bounded.
func TestCreateRun_Bounds(t *testing.T) {
	b := setup(t)
	b.register(t, &fakeProvider{name: "spawn", caps: allCaps(), local: true})
	parent := b.rootSession(t)
	many := make([]map[string]any, 65)
	for i := range many {
		many[i] = map[string]any{"type": "text", "text": "x"}
	}
	names := make([]string, 65)
	for i := range names {
		names[i] = "tool"
	}
	body := func(extra map[string]any) map[string]any {
		m := map[string]any{"provider": "spawn", "parentSessionId": parent, "prompt": textPrompt("x")}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	for _, tc := range []struct {
		name  string
		body  map[string]any
		field string
		// specBlind: bounds the spec cannot state (summed text, schema size)
		specBlind bool
	}{
		{"no prompt", map[string]any{"provider": "spawn", "parentSessionId": parent}, "prompt", false},
		{"empty prompt", body(map[string]any{"prompt": []any{}}), "prompt", false},
		{"65 blocks", body(map[string]any{"prompt": many}), "prompt", false},
		{"text over 256 KiB", body(map[string]any{"prompt": []map[string]any{
			{"type": "text", "text": strings.Repeat("a", 200<<10)}, {"type": "text", "text": strings.Repeat("b", 100<<10)},
		}}), "prompt", true},
		{"label 201", body(map[string]any{"label": strings.Repeat("l", 201)}), "label", false},
		{"provider 129", body(map[string]any{"provider": strings.Repeat("p", 129)}), "provider", false},
		{"parent id 129", body(map[string]any{"parentSessionId": strings.Repeat("p", 129)}), "parentSessionId", false},
		{"toolFilter empty", body(map[string]any{"toolFilter": map[string]any{}}), "toolFilter.allow", false},
		{"toolFilter 65 names", body(map[string]any{"toolFilter": map[string]any{"deny": names}}), "toolFilter.deny", false},
		{"toolFilter long name", body(map[string]any{"toolFilter": map[string]any{"allow": []string{strings.Repeat("n", 129)}}}), "toolFilter.allow[0]", false},
		{"outputSchema over 64 KiB", body(map[string]any{"outputSchema": map[string]any{"type": "object", "description": strings.Repeat("d", 64<<10)}}), "outputSchema", true},
		{"onDisconnect", body(map[string]any{"onDisconnect": "abort"}), "onDisconnect", false},
		{"maxTokens", body(map[string]any{"agentOptions": map[string]any{"maxTokens": 0}}), "agentOptions.maxTokens", false},
		{"persona", body(map[string]any{"persona": strings.Repeat("p", 16385)}), "persona", false},
		{"unknown field", body(map[string]any{"signal": true}), "signal", false},
		{"maxDepth fraction", body(map[string]any{"maxDepth": 1.5}), "maxDepth", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := b.wantProblem(t, http.StatusBadRequest, subagent.EInvalidRequest, call{method: http.MethodPost, path: "/v1/runs", body: tc.body, invalid: !tc.specBlind})
			if len(p.Errors) != 1 || p.Errors[0].Field != tc.field {
				t.Fatalf("errors = %+v, want one for %s", p.Errors, tc.field)
			}
		})
	}
	b.wantProblem(t, http.StatusBadRequest, subagent.EInvalidRequest, call{method: http.MethodPost, path: "/v1/runs", body: map[string]any{
		"provider": "spawn", "parentSessionId": parent, "prompt": []map[string]any{{"text": "no type"}},
	}, invalid: true})
	b.wantProblem(t, http.StatusBadRequest, subagent.EInvalidRequest, call{method: http.MethodPost, path: "/v1/runs?wait=soon", body: body(nil), invalid: true})
}

// TestCreateRun_WaitTrue answers with the settled run.
func TestCreateRun_WaitTrue(t *testing.T) {
	b := setup(t)
	p := b.register(t, &fakeProvider{name: "spawn", caps: allCaps(), local: true})
	parent := b.rootSession(t)
	answer := b.async(t, call{method: http.MethodPost, path: "/v1/runs?wait=true", body: map[string]any{
		"provider": "spawn", "parentSessionId": parent, "prompt": textPrompt("q"),
	}})
	(<-p.started).complete(t, "the answer")
	r := answer()
	if r.status != http.StatusCreated {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	var run runJSON
	r.decode(t, &run)
	if run.State != store.StateSettled || run.Result == nil || run.Result.StopReason != subagent.StopCompleted ||
		string(run.Result.Output) != `[{"type":"text","text":"the answer"}]` || run.EndedAt == nil {
		t.Fatalf("run = %+v result %+v", run, run.Result)
	}
}

// TestCreateRun_PreferWaitRunsOut: Prefer: wait=N answers with the running
// run once N seconds passed, and says which wait it applied.
func TestCreateRun_PreferWaitRunsOut(t *testing.T) {
	b := setup(t)
	p := b.register(t, &fakeProvider{name: "spawn", caps: allCaps(), local: true})
	r := b.want(t, http.StatusCreated, call{method: http.MethodPost, path: "/v1/runs", header: map[string]string{"Prefer": "respond-async, wait=1"}, body: map[string]any{
		"provider": "spawn", "parentSessionId": b.rootSession(t), "prompt": textPrompt("q"),
	}})
	var run runJSON
	r.decode(t, &run)
	if run.State != store.StateRunning || r.header.Get("Preference-Applied") != "wait=1" {
		t.Fatalf("run %+v, Preference-Applied %q", run, r.header.Get("Preference-Applied"))
	}
	p.run(run.ChildSessionID).complete(t, "late")
}

func TestServer_PreferWaitIsBounded(t *testing.T) {
	s := &Server{maxWait: DefaultMaxWait}
	for header, want := range map[string]string{"wait=10": "wait=10", "wait=100000": "wait=300", "Wait = 5": "wait=5", "handling=lenient": "", "wait=-1": "", "wait=x": ""} {
		if _, got := s.preferWait(header); got != want {
			t.Errorf("preferWait(%q) applied %q, want %q", header, got, want)
		}
	}
}

// TestCreateRun_OnDisconnectCancel: a client that waits and disconnects
// cancels the run when it asked for onDisconnect "cancel".
func TestCreateRun_OnDisconnectCancel(t *testing.T) {
	b := setup(t)
	p := b.register(t, &fakeProvider{name: "spawn", caps: allCaps(), local: true})
	parent := b.rootSession(t)
	ctx, cancel := context.WithCancel(t.Context())
	req := b.request(t, call{method: http.MethodPost, path: "/v1/runs?wait=true", ctx: ctx, body: map[string]any{
		"provider": "spawn", "parentSessionId": parent, "prompt": textPrompt("q"), "onDisconnect": "cancel",
	}})
	errc := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	fr := <-p.started
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("the request was answered")
	}
	fr.waitCancelled(t)
	var run runJSON
	b.want(t, http.StatusOK, call{method: http.MethodGet, path: "/v1/runs/" + runID(t, b, parent) + "?wait=10"}).decode(t, &run)
	if run.Result == nil || run.Result.StopReason != subagent.StopAborted {
		t.Fatalf("run = %+v", run)
	}
}

// runID returns the id of the only run of parent.
func runID(t *testing.T, b *testBundle, parent string) string {
	t.Helper()
	var list runListJSON
	b.want(t, http.StatusOK, call{method: http.MethodGet, path: "/v1/runs?parentSessionId=" + parent}).decode(t, &list)
	if len(list.Runs) != 1 {
		t.Fatalf("runs of %s = %+v", parent, list.Runs)
	}
	return list.Runs[0].RunID
}

// TestGetRun_WaitLongPolls: ?wait=N answers as soon as the run settles.
func TestGetRun_WaitLongPolls(t *testing.T) {
	b := setup(t)
	p := b.register(t, &fakeProvider{name: "spawn", caps: allCaps(), local: true})
	run := b.startRun(t, "spawn", b.rootSession(t), nil)
	answer := b.async(t, call{method: http.MethodGet, path: "/v1/runs/" + run.RunID + "?wait=300"})
	p.run(run.ChildSessionID).complete(t, "done")
	var r runJSON
	answer().decode(t, &r)
	if r.State != store.StateSettled || r.Result.StopReason != subagent.StopCompleted {
		t.Fatalf("run = %+v", r)
	}
	b.wantProblem(t, http.StatusNotFound, subagent.ERunNotFound, call{method: http.MethodGet, path: "/v1/runs/nope?wait=1"})
	b.wantProblem(t, http.StatusBadRequest, subagent.EInvalidRequest, call{method: http.MethodGet, path: "/v1/runs/" + run.RunID + "?wait=301", invalid: true})
}

// TestGetRun_WaitOnStoreOnly: a run this process has no handle for (another
// replica's) is waited for through the lifecycle log's wake-ups.
func TestGetRun_WaitOnStoreOnly(t *testing.T) {
	b := setup(t)
	ctx := t.Context()
	parent := b.rootSession(t)
	if _, err := b.st.StartRun(ctx, store.Run{ID: "remote-1", Kind: store.KindOneShot, Provider: "acp", ChildID: "c1", ParentID: parent, Owner: "other"},
		store.LifecycleEvent{Type: subagent.EventStart, ParentID: parent, RunID: "remote-1", Payload: json.RawMessage(`{"runId":"remote-1","provider":"acp","id":"c1","local":false,"parentSessionId":"` + parent + `"}`)}); err != nil {
		t.Fatal(err)
	}
	answer := b.async(t, call{method: http.MethodGet, path: "/v1/runs/remote-1?wait=300"})
	if _, err := b.st.EndRun(ctx, "remote-1", store.RunResult{StopReason: "error", Output: json.RawMessage(`[]`), Diagnostic: "owner lost"},
		store.LifecycleEvent{Type: subagent.EventEnd, ParentID: parent, RunID: "remote-1", Payload: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	var run runJSON
	answer().decode(t, &run)
	if run.State != store.StateSettled || run.Result.Diagnostic != "owner lost" || string(run.Result.Output) != "[]" {
		t.Fatalf("run = %+v", run)
	}
	// Cancelling or steering it here cannot reach it, but it settled:
	// cancel is a no-op, steer is rejected, dispose marks it.
	b.want(t, http.StatusAccepted, call{method: http.MethodPost, path: "/v1/runs/remote-1/cancel"})
	b.wantProblem(t, http.StatusConflict, subagent.ESteerRejected, call{method: http.MethodPost, path: "/v1/runs/remote-1/steer", body: map[string]any{"content": textPrompt("x")}})
	b.want(t, http.StatusNoContent, call{method: http.MethodDelete, path: "/v1/runs/remote-1"})
}

func TestSteer(t *testing.T) {
	b := setup(t)
	steerable := b.register(t, &fakeProvider{name: "spawn", caps: allCaps(), local: true, steer: true})
	b.register(t, &fakeProvider{name: "acp"})
	parent := b.rootSession(t)
	run := b.startRun(t, "spawn", parent, nil)
	steer := func(id string) call {
		return call{method: http.MethodPost, path: "/v1/runs/" + id + "/steer", body: map[string]any{"content": textPrompt("focus")}}
	}
	var resp steerResponse
	b.want(t, http.StatusOK, steer(run.RunID)).decode(t, &resp)
	if resp.MessageID != "steer-1" {
		t.Fatalf("steer = %+v", resp)
	}
	remote := b.startRun(t, "acp", parent, nil)
	b.wantProblem(t, http.StatusUnprocessableEntity, subagent.EUnsupportedCapability, steer(remote.RunID))
	b.wantProblem(t, http.StatusNotFound, subagent.ERunNotFound, steer("nope"))
	b.wantProblem(t, http.StatusBadRequest, subagent.EInvalidRequest, call{method: http.MethodPost, path: "/v1/runs/" + run.RunID + "/steer", body: map[string]any{"content": []any{}}, invalid: true})

	b.finish(t, steerable, run, "done")
	b.wantProblem(t, http.StatusConflict, subagent.ESteerRejected, steer(run.RunID))
}

// TestCancel_R23: cancelling a live run answers 202 and the run settles
// aborted; cancelling again or after settlement changes nothing.
func TestCancel_R23(t *testing.T) {
	b := setup(t)
	p := b.register(t, &fakeProvider{name: "spawn", caps: allCaps(), local: true})
	run := b.startRun(t, "spawn", b.rootSession(t), nil)
	b.want(t, http.StatusAccepted, call{method: http.MethodPost, path: "/v1/runs/" + run.RunID + "/cancel"})
	p.run(run.ChildSessionID).waitCancelled(t)
	var got runJSON
	b.want(t, http.StatusOK, call{method: http.MethodGet, path: "/v1/runs/" + run.RunID + "?wait=10"}).decode(t, &got)
	if got.Result == nil || got.Result.StopReason != subagent.StopAborted {
		t.Fatalf("run = %+v", got)
	}
	b.want(t, http.StatusAccepted, call{method: http.MethodPost, path: "/v1/runs/" + run.RunID + "/cancel"}).decode(t, &got)
	if got.State != store.StateSettled {
		t.Fatalf("run = %+v", got)
	}
	b.wantProblem(t, http.StatusNotFound, subagent.ERunNotFound, call{method: http.MethodPost, path: "/v1/runs/nope/cancel"})
}

// TestDispose_R28: DELETE cancels, waits for settlement and marks the run
// disposed; it is idempotent.
func TestDispose_R28(t *testing.T) {
	b := setup(t)
	p := b.register(t, &fakeProvider{name: "spawn", caps: allCaps(), local: true})
	run := b.startRun(t, "spawn", b.rootSession(t), nil)
	b.want(t, http.StatusNoContent, call{method: http.MethodDelete, path: "/v1/runs/" + run.RunID})
	p.run(run.ChildSessionID).waitCancelled(t)
	var got runJSON
	b.want(t, http.StatusOK, call{method: http.MethodGet, path: "/v1/runs/" + run.RunID}).decode(t, &got)
	if got.State != store.StateDisposed || got.Result.StopReason != subagent.StopAborted {
		t.Fatalf("run = %+v", got)
	}
	b.want(t, http.StatusNoContent, call{method: http.MethodDelete, path: "/v1/runs/" + run.RunID})
	b.wantProblem(t, http.StatusNotFound, subagent.ERunNotFound, call{method: http.MethodDelete, path: "/v1/runs/nope"})
}

// TestListRuns filters by parent, child and state, and pages.
func TestListRuns(t *testing.T) {
	b := setup(t)
	p := b.register(t, &fakeProvider{name: "spawn", caps: allCaps(), local: true})
	parent, other := b.rootSession(t), b.rootSession(t)
	r1 := b.startRun(t, "spawn", parent, nil)
	r2 := b.startRun(t, "spawn", parent, nil)
	b.startRun(t, "spawn", other, nil)
	b.finish(t, p, r1, "done")

	list := func(query string) runListJSON {
		var l runListJSON
		b.want(t, http.StatusOK, call{method: http.MethodGet, path: "/v1/runs" + query}).decode(t, &l)
		return l
	}
	if l := list("?parentSessionId=" + parent); len(l.Runs) != 2 || l.Runs[0].RunID != r1.RunID || l.Runs[1].RunID != r2.RunID {
		t.Fatalf("by parent = %+v", l)
	}
	if l := list("?state=settled"); len(l.Runs) != 1 || l.Runs[0].RunID != r1.RunID || l.Runs[0].Result == nil {
		t.Fatalf("settled = %+v", l)
	}
	if l := list("?childSessionId=" + r2.ChildSessionID); len(l.Runs) != 1 || l.Runs[0].RunID != r2.RunID {
		t.Fatalf("by child = %+v", l)
	}
	first := list("?limit=2")
	if len(first.Runs) != 2 || first.NextCursor != first.Runs[1].RunID {
		t.Fatalf("page 1 = %+v", first)
	}
	if rest := list("?limit=2&after=" + first.NextCursor); len(rest.Runs) != 1 || rest.NextCursor != "" {
		t.Fatalf("page 2 = %+v", rest)
	}
	b.wantProblem(t, http.StatusBadRequest, subagent.EInvalidRequest, call{method: http.MethodGet, path: "/v1/runs?state=done", invalid: true})
}
