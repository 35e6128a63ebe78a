package http

import (
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/subagentd/subagentd/internal/roots"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

func TestProviders_R2_RegistrationOrder(t *testing.T) {
	b := setup(t)
	b.register(t, &fakeProvider{name: "spawn", caps: allCaps(), local: true, steer: true})
	b.register(t, &fakeProvider{name: "acp"})
	var list providerListJSON
	b.want(t, http.StatusOK, call{method: http.MethodGet, path: "/v1/providers"}).decode(t, &list)
	if len(list.Providers) != 2 || list.Providers[0].Name != "spawn" || list.Providers[1].Name != "acp" {
		t.Fatalf("providers = %+v", list.Providers)
	}
	spawn := list.Providers[0]
	if !spawn.Capabilities.OutputSchema || !spawn.Steer || !spawn.Local || spawn.Resume {
		t.Fatalf("spawn = %+v", spawn)
	}

	var one providerJSON
	b.want(t, http.StatusOK, call{method: http.MethodGet, path: "/v1/providers/acp"}).decode(t, &one)
	if one.Name != "acp" || one.Capabilities != (capabilitiesJSON{}) || one.Local {
		t.Fatalf("acp = %+v", one)
	}
	b.wantProblem(t, http.StatusNotFound, subagent.ENoProvider, call{method: http.MethodGet, path: "/v1/providers/codex"})
}

func TestProviders_EmptyList(t *testing.T) {
	b := setup(t)
	r := b.want(t, http.StatusOK, call{method: http.MethodGet, path: "/v1/providers"})
	if strings.TrimSpace(string(r.body)) != `{"providers":[]}` {
		t.Fatalf("body %s", r.body)
	}
}

func TestSessions_CreateAndGet(t *testing.T) {
	b := setup(t)
	persona := ""
	var s sessionJSON
	r := b.want(t, http.StatusCreated, call{method: http.MethodPost, path: "/v1/sessions", body: map[string]any{
		"label": "research", "cwd": "/srv/work",
		"agentOptions": map[string]any{"provider": "echo", "model": "echo-1", "maxTokens": 1000},
		"persona":      persona,
	}})
	r.decode(t, &s)
	if r.header.Get("Location") != "/v1/sessions/"+s.ID {
		t.Fatalf("Location %q", r.header.Get("Location"))
	}
	if s.Label != "research" || s.Cwd != "/srv/work" || s.AgentOptions == nil || *s.AgentOptions.MaxTokens != 1000 ||
		s.Persona == nil || *s.Persona != "" || s.Activity != activityInactive || s.ParentSessionID != "" || s.CreatedAt.IsZero() {
		t.Fatalf("session = %+v", s)
	}
	var got sessionJSON
	b.want(t, http.StatusOK, call{method: http.MethodGet, path: "/v1/sessions/" + s.ID}).decode(t, &got)
	if got.ID != s.ID || !got.CreatedAt.Equal(s.CreatedAt) || *got.AgentOptions.Model != "echo-1" {
		t.Fatalf("get = %+v, created %+v", got, s)
	}
	b.wantProblem(t, http.StatusNotFound, subagent.ESessionNotFound, call{method: http.MethodGet, path: "/v1/sessions/nope"})
}

// TestSessions_CreateValidation: every field is bounded; unknown fields,
// malformed JSON and oversized bodies are rejected with field errors.
// A root session's cwd — which its children and ACP agents inherit — must
// be an existing directory inside a workspace root (docs/architecture.md §10).
func TestSessions_CwdInsideWorkspaceRoots(t *testing.T) {
	root := t.TempDir()
	inside := filepath.Join(root, "project")
	if err := os.Mkdir(inside, 0o755); err != nil {
		t.Fatal(err)
	}
	b := setup(t, func(c *Config) { c.Sessions = roots.New(roots.Config{Store: c.Store, WorkspaceRoots: []string{root}}) })
	// Outside, missing, not a directory, escaping by "..": one answer, so
	// that clients cannot probe the server's files.
	file := filepath.Join(root, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, cwd := range []string{t.TempDir(), "/etc", filepath.Join(root, "missing"), file, filepath.Join(inside, "..", "..")} {
		p := b.wantProblem(t, 400, subagent.EInvalidRequest, call{method: http.MethodPost, path: "/v1/sessions", body: map[string]any{"cwd": cwd}})
		if len(p.Errors) != 1 || p.Errors[0].Field != "cwd" || p.Errors[0].Message != "must be an existing directory inside the workspace roots" {
			t.Fatalf("cwd %s: errors %+v, want the one fixed message for cwd", cwd, p.Errors)
		}
	}
	b.want(t, http.StatusCreated, call{method: http.MethodPost, path: "/v1/sessions", body: map[string]any{"cwd": inside}})
}

func TestSessions_CreateValidation(t *testing.T) {
	b := setup(t)
	for _, tc := range []struct {
		name string
		body any
		// notJSON: the body is not one JSON value, or not one the spec can
		// tell apart from a valid one (validated as {})
		notJSON bool
		status  int
		code    string
		field   string
	}{
		{"unknown field", map[string]any{"labels": "x"}, false, 400, subagent.EInvalidRequest, "labels"},
		{"label too long", map[string]any{"label": strings.Repeat("x", 201)}, false, 400, subagent.EInvalidRequest, "label"},
		{"relative cwd", map[string]any{"cwd": "srv"}, false, 400, subagent.EInvalidRequest, "cwd"},
		{"maxTokens zero", map[string]any{"agentOptions": map[string]any{"maxTokens": 0}}, false, 400, subagent.EInvalidRequest, "agentOptions.maxTokens"},
		{"maxTokens too big", map[string]any{"agentOptions": map[string]any{"maxTokens": 1000001}}, false, 400, subagent.EInvalidRequest, "agentOptions.maxTokens"},
		{"maxTokens not integer", map[string]any{"agentOptions": map[string]any{"maxTokens": 1.5}}, false, 400, subagent.EInvalidRequest, "agentOptions.maxTokens"},
		{"persona too long", map[string]any{"persona": strings.Repeat("p", 16385)}, false, 400, subagent.EInvalidRequest, "persona"},
		{"label wrong type", map[string]any{"label": 3}, false, 400, subagent.EInvalidRequest, "label"},
		{"malformed", []byte(`{"label":`), true, 400, subagent.EInvalidRequest, ""},
		{"not an object", []byte(`[1]`), false, 400, subagent.EInvalidRequest, ""},
		{"two objects", []byte(`{} {}`), true, 400, subagent.EInvalidRequest, ""},
		{"over 1 MiB", map[string]any{"label": strings.Repeat("x", 1<<20)}, false, 413, subagent.EPayloadTooLarge, ""},
		// Postgres stores neither; both stores and the API refuse them alike.
		{"NUL in a string", []byte(`{"label":"a\u0000b"}`), true, 400, subagent.EInvalidRequest, ""},
		{"lone surrogate", []byte(`{"label":"a\ud800b"}`), true, 400, subagent.EInvalidRequest, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := b.wantProblem(t, tc.status, tc.code, call{method: http.MethodPost, path: "/v1/sessions", body: tc.body, invalid: !tc.notJSON, notJSON: tc.notJSON})
			if tc.field != "" && (len(p.Errors) != 1 || p.Errors[0].Field != tc.field) {
				t.Fatalf("errors = %+v, want one for %s", p.Errors, tc.field)
			}
		})
	}
}

// TestSessions_ListPagination walks the list page by page with nextCursor
// and filters roots and children.
func TestSessions_ListPagination(t *testing.T) {
	b := setup(t)
	p := b.register(t, &fakeProvider{name: "spawn", caps: allCaps(), local: true})
	var ids []string
	for range 5 {
		ids = append(ids, b.rootSession(t))
	}
	run := b.startRun(t, "spawn", ids[0], nil)

	var got []string
	cursor := ""
	for pages := 0; ; pages++ {
		path := "/v1/sessions?root=true&limit=2"
		if cursor != "" {
			path += "&after=" + cursor
		}
		var list sessionListJSON
		b.want(t, http.StatusOK, call{method: http.MethodGet, path: path}).decode(t, &list)
		for _, s := range list.Sessions {
			got = append(got, s.ID)
		}
		if list.NextCursor == "" {
			if pages != 2 {
				t.Fatalf("%d pages, want 3", pages+1)
			}
			break
		}
		cursor = list.NextCursor
	}
	if strings.Join(got, ",") != strings.Join(ids, ",") {
		t.Fatalf("roots %v, want %v", got, ids)
	}

	var children sessionListJSON
	b.want(t, http.StatusOK, call{method: http.MethodGet, path: "/v1/sessions?parentSessionId=" + ids[0]}).decode(t, &children)
	if len(children.Sessions) != 1 || children.Sessions[0].ID != run.ChildSessionID ||
		children.Sessions[0].Activity != activityRunning || children.Sessions[0].Origin != "subagent" {
		t.Fatalf("children = %+v", children)
	}
	p.run(run.ChildSessionID).complete(t, "done")

	b.wantProblem(t, http.StatusBadRequest, subagent.EInvalidRequest, call{method: http.MethodGet, path: "/v1/sessions?after=unknown"})
	b.wantProblem(t, http.StatusBadRequest, subagent.EInvalidRequest, call{method: http.MethodGet, path: "/v1/sessions?root=true&parentSessionId=" + ids[0]})
	b.wantProblem(t, http.StatusBadRequest, subagent.EInvalidRequest, call{method: http.MethodGet, path: "/v1/sessions?limit=1001", invalid: true})
	b.wantProblem(t, http.StatusBadRequest, subagent.EInvalidRequest, call{method: http.MethodGet, path: "/v1/sessions?limit=0", invalid: true})
}

func TestSessions_EventsPage(t *testing.T) {
	b := setup(t)
	p := b.register(t, &fakeProvider{name: "spawn", caps: allCaps(), local: true})
	parent := b.rootSession(t)
	run := b.startRun(t, "spawn", parent, nil)
	fr := p.run(run.ChildSessionID)
	for i := range 3 {
		fr.logEvent(t, "turn/start", map[string]int{"turn": i})
	}
	// descriptor, user/message, 3 × turn/start
	var page sessionEventPageJSON
	b.want(t, http.StatusOK, call{method: http.MethodGet, path: "/v1/sessions/" + run.ChildSessionID + "/events?limit=2"}).decode(t, &page)
	if len(page.Events) != 2 || !page.HasMore || page.Events[0].Seq != 0 || page.Events[0].Type != sessionlog.EventDescriptor {
		t.Fatalf("first page = %+v", page)
	}
	b.want(t, http.StatusOK, call{method: http.MethodGet, path: "/v1/sessions/" + run.ChildSessionID + "/events?after=1&limit=3"}).decode(t, &page)
	if len(page.Events) != 3 || page.HasMore || page.Events[0].Seq != 2 || string(page.Events[2].Data) != `{"turn":2}` {
		t.Fatalf("second page = %+v", page)
	}
	// Backwards from the end: the newest page, then the page before it.
	b.want(t, http.StatusOK, call{method: http.MethodGet, path: "/v1/sessions/" + run.ChildSessionID + "/events?before=9007199254740991&limit=2"}).decode(t, &page)
	if len(page.Events) != 2 || !page.HasMore || page.Events[0].Seq != 3 || string(page.Events[1].Data) != `{"turn":2}` {
		t.Fatalf("newest page = %+v", page)
	}
	b.want(t, http.StatusOK, call{method: http.MethodGet, path: "/v1/sessions/" + run.ChildSessionID + "/events?before=3&limit=2"}).decode(t, &page)
	if len(page.Events) != 2 || !page.HasMore || page.Events[0].Seq != 1 || page.Events[1].Seq != 2 {
		t.Fatalf("page before seq 3 = %+v", page)
	}
	b.want(t, http.StatusOK, call{method: http.MethodGet, path: "/v1/sessions/" + run.ChildSessionID + "/events?before=1&limit=2"}).decode(t, &page)
	if len(page.Events) != 1 || page.HasMore || page.Events[0].Seq != 0 {
		t.Fatalf("page before seq 1 = %+v", page)
	}
	b.want(t, http.StatusOK, call{method: http.MethodGet, path: "/v1/sessions/" + run.ChildSessionID + "/events?before=0"}).decode(t, &page)
	if len(page.Events) != 0 || page.HasMore {
		t.Fatalf("page before seq 0 = %+v", page)
	}
	b.wantProblem(t, http.StatusNotFound, subagent.ESessionNotFound, call{method: http.MethodGet, path: "/v1/sessions/nope/events"})
	b.wantProblem(t, http.StatusNotFound, subagent.ESessionNotFound, call{method: http.MethodGet, path: "/v1/sessions/nope/events?before=5"})
	b.wantProblem(t, http.StatusBadRequest, subagent.EInvalidRequest, call{method: http.MethodGet, path: "/v1/sessions/" + parent + "/events?after=-2", invalid: true})
	for _, q := range []string{"before=-1", "before=9007199254740992", "before=x"} {
		b.wantProblem(t, http.StatusBadRequest, subagent.EInvalidRequest, call{method: http.MethodGet, path: "/v1/sessions/" + parent + "/events?" + q, invalid: true})
	}
	// The spec says in words that they are exclusive; its schema cannot.
	b.wantProblem(t, http.StatusBadRequest, subagent.EInvalidRequest, call{method: http.MethodGet, path: "/v1/sessions/" + parent + "/events?before=3&after=1"})
	fr.complete(t, "ok")
}

func TestSessions_Children(t *testing.T) {
	b := setupWorld(t).testBundle
	p := b.register(t, &fakeProvider{name: "fake", caps: allCaps(), local: true})
	parent := b.rootSession(t)
	first := b.startRun(t, "fake", parent, map[string]any{"label": "first"})
	second := b.startRun(t, "fake", parent, nil)
	grandchild := b.startRun(t, "fake", first.ChildSessionID, nil)
	b.finish(t, p, second, "done")

	var list childListJSON
	b.want(t, http.StatusOK, call{method: http.MethodGet, path: "/v1/sessions/" + parent + "/children"}).decode(t, &list)
	if len(list.Entries) != 2 {
		t.Fatalf("entries = %+v", list.Entries)
	}
	e0, e1 := list.Entries[0], list.Entries[1]
	if e0.Kind != "child" || e0.ID != first.ChildSessionID || e0.Label != "first" || e0.Mode != subagent.ModeOneShot ||
		e0.Activity != activityRunning || !*e0.HasChildren || e0.Provider != "fake" {
		t.Fatalf("first entry = %+v", e0)
	}
	if e1.ID != second.ChildSessionID || e1.Activity != activityInactive || *e1.HasChildren {
		t.Fatalf("second entry = %+v", e1)
	}
	b.wantProblem(t, http.StatusNotFound, subagent.ESessionNotFound, call{method: http.MethodGet, path: "/v1/sessions/nope/children"})
	p.run(first.ChildSessionID).complete(t, "done")
	p.run(grandchild.ChildSessionID).complete(t, "done")
}

// TestSessions_DiagnosticChild: a settled child without a descriptor is
// listed as a corrupt diagnostic entry, not hidden (R123).
func TestSessions_DiagnosticChild(t *testing.T) {
	b := setupWorld(t).testBundle
	parent := b.rootSession(t)
	if err := b.st.CreateSession(t.Context(), store.Session{ID: "odd", ParentID: parent, Origin: "subagent"}); err != nil {
		t.Fatal(err)
	}
	var list childListJSON
	b.want(t, http.StatusOK, call{method: http.MethodGet, path: "/v1/sessions/" + parent + "/children"}).decode(t, &list)
	if len(list.Entries) != 1 || list.Entries[0] != (childEntryJSON{Kind: "diagnostic", ID: "odd", Reason: "corrupt"}) {
		t.Fatalf("entries = %+v", list.Entries)
	}
}

func TestParams_PathIDBound(t *testing.T) {
	b := setup(t)
	long := strings.Repeat("a", maxIDLength+1)
	p := b.wantProblem(t, http.StatusBadRequest, subagent.EInvalidRequest, call{method: http.MethodGet, path: "/v1/sessions/" + long, invalid: true})
	if p.Errors[0].Field != "id" || !strings.Contains(p.Errors[0].Message, strconv.Itoa(maxIDLength)) {
		t.Fatalf("problem = %+v", p)
	}
}
