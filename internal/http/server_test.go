package http

import (
	"context"
	"errors"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/go-chi/chi/v5"

	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// chiParamRegexp matches the regexp part of a chi route parameter.
var chiParamRegexp = regexp.MustCompile(`\{([^}:]+):[^}]*\}`)

// TestRoutes_MatchSpec holds the router and api/openapi.yaml to the same
// set of paths and methods (chi.Walk feeds the drift test).
func TestRoutes_MatchSpec(t *testing.T) {
	b := setup(t)
	doc, _ := spec(t)
	var routes []string
	err := chi.Walk(b.srv.router, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		route = chiParamRegexp.ReplaceAllString(route, "{$1}")
		if route != "/" {
			route = strings.TrimSuffix(route, "/")
		}
		routes = append(routes, method+" "+route)
		return nil
	})
	if err != nil {
		t.Fatalf("walk: %v", err)
	}
	var documented []string
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			documented = append(documented, method+" "+path)
		}
	}
	slices.Sort(routes)
	slices.Sort(documented)
	if !slices.Equal(routes, documented) {
		for _, r := range routes {
			if !slices.Contains(documented, r) {
				t.Errorf("route %s is not in the spec", r)
			}
		}
		for _, d := range documented {
			if !slices.Contains(routes, d) {
				t.Errorf("spec operation %s has no route", d)
			}
		}
	}
}

func TestHealth(t *testing.T) {
	b := setup(t)
	var h healthJSON
	b.want(t, http.StatusOK, call{method: http.MethodGet, path: "/healthz"}).decode(t, &h)
	if h.Status != "ok" || h.Version != "test" {
		t.Fatalf("healthz = %+v", h)
	}
	b.want(t, http.StatusOK, call{method: http.MethodGet, path: "/readyz"})
}

// failingStore fails the calls a test picks.
type failingStore struct {
	store.Store
	ping       error
	getSession error
}

func (f *failingStore) Ping(ctx context.Context) error {
	if f.ping != nil {
		return f.ping
	}
	return f.Store.Ping(ctx)
}

func (f *failingStore) GetSession(ctx context.Context, id string) (store.Session, error) {
	if f.getSession != nil {
		return store.Session{}, f.getSession
	}
	return f.Store.GetSession(ctx, id)
}

func TestReady_StoreDown(t *testing.T) {
	fs := &failingStore{ping: errors.New("dial tcp 10.0.0.7:5432: connection refused")}
	b := setup(t, func(c *Config) { fs.Store = c.Store; c.Store = fs })
	p := b.wantProblem(t, http.StatusServiceUnavailable, codeNotReady, call{method: http.MethodGet, path: "/readyz"})
	if strings.Contains(p.Detail, "10.0.0.7") {
		t.Fatalf("detail leaks the store error: %q", p.Detail)
	}
}

// TestErrors_InternalIsOpaque: an unexpected error is INTERNAL with the
// detail "internal error"; the real error only reaches the log.
func TestErrors_InternalIsOpaque(t *testing.T) {
	secret := errors.New("pq: password authentication failed for user \"admin\"")
	fs := &failingStore{}
	b := setup(t, func(c *Config) { fs.Store = c.Store; c.Store = fs })
	id := b.rootSession(t)
	fs.getSession = secret
	p := b.wantProblem(t, http.StatusInternalServerError, subagent.EInternal, call{method: http.MethodGet, path: "/v1/sessions/" + id})
	if p.Detail != "internal error" || p.Errors != nil {
		t.Fatalf("problem = %+v", p)
	}
	if !strings.Contains(b.logs.String(), "password authentication failed") {
		t.Fatalf("the real error was not logged:\n%s", b.logs)
	}
}

// TestErrors_UnknownRoute: routes the spec does not have answer problems.
func TestErrors_UnknownRoute(t *testing.T) {
	b := setup(t)
	p := b.wantProblem(t, http.StatusNotFound, codeNotFound, call{method: http.MethodGet, path: "/v1/nothing/here", invalid: true})
	if !strings.Contains(p.Detail, "/v1/nothing/here") {
		t.Fatalf("detail %q", p.Detail)
	}
	b.wantProblem(t, http.StatusMethodNotAllowed, codeMethodNotAllowed, call{method: http.MethodPut, path: "/v1/providers", invalid: true})
}

func TestDocs(t *testing.T) {
	b := setup(t)
	r := b.want(t, http.StatusFound, call{method: http.MethodGet, path: "/docs"})
	if loc := r.header.Get("Location"); loc != "/docs/index.html" {
		t.Fatalf("Location %q", loc)
	}
	page := b.want(t, http.StatusOK, call{method: http.MethodGet, path: "/docs/index.html"})
	if !strings.Contains(string(page.body), "swagger-ui") {
		t.Fatalf("index.html is not Swagger UI: %.200s", page.body)
	}
	// html/template writes the URL as a JavaScript string, "/" escaped.
	if !strings.Contains(string(page.body), `url: "\/openapi.yaml"`) {
		t.Fatalf("Swagger UI does not load /openapi.yaml: %s", page.body)
	}
	b.want(t, http.StatusNotFound, call{method: http.MethodGet, path: "/docs/doc.json"})
	b.want(t, http.StatusOK, call{method: http.MethodGet, path: "/docs/swagger-ui-bundle.js"})
	b.want(t, http.StatusNotFound, call{method: http.MethodGet, path: "/docs/nope.js"})

	spec := b.want(t, http.StatusOK, call{method: http.MethodGet, path: "/openapi.yaml"})
	if !strings.HasPrefix(string(spec.body), "openapi: 3.1.0") {
		t.Fatalf("/openapi.yaml: %.40s", spec.body)
	}
}

func TestDashboard(t *testing.T) {
	files := fstest.MapFS{
		"index.html":  {Data: []byte("<!doctype html><title>dash</title>")},
		"app.js":      {Data: []byte("export {}")},
		"js/api.js":   {Data: []byte("export const api = 1")},
		"style.css":   {Data: []byte("body{}")},
		"js/sub/x.js": {Data: []byte("x")},
	}
	b := setup(t, func(c *Config) { c.Dashboard = files })
	if r := b.want(t, http.StatusOK, call{method: http.MethodGet, path: "/"}); string(r.body) != "<!doctype html><title>dash</title>" {
		t.Fatalf("/ = %s", r.body)
	}
	if r := b.want(t, http.StatusOK, call{method: http.MethodGet, path: "/js/api.js"}); !strings.Contains(r.header.Get("Content-Type"), "javascript") {
		t.Fatalf("/js/api.js Content-Type %q", r.header.Get("Content-Type"))
	}
	b.want(t, http.StatusOK, call{method: http.MethodGet, path: "/style.css"})
	// Every load asks again; an unchanged file comes back as a bodiless 304.
	for _, path := range []string{"/", "/js/api.js"} {
		r := b.want(t, http.StatusOK, call{method: http.MethodGet, path: path})
		tag := r.header.Get("ETag")
		if tag == "" || r.header.Get("Cache-Control") != "no-cache" {
			t.Fatalf("%s: ETag %q, Cache-Control %q; want an ETag and no-cache", path, tag, r.header.Get("Cache-Control"))
		}
		if again := b.want(t, http.StatusNotModified, call{method: http.MethodGet, path: path, header: map[string]string{"If-None-Match": tag}}); len(again.body) != 0 {
			t.Fatalf("%s with its ETag: %d bytes of body, want none", path, len(again.body))
		}
		if other := b.want(t, http.StatusOK, call{method: http.MethodGet, path: path, header: map[string]string{"If-None-Match": `"other"`}}); other.header.Get("ETag") != tag {
			t.Fatalf("%s: ETag %q, then %q", path, tag, other.header.Get("ETag"))
		}
	}
	b.wantProblem(t, http.StatusNotFound, codeNotFound, call{method: http.MethodGet, path: "/missing.js"})
	b.wantProblem(t, http.StatusNotFound, codeNotFound, call{method: http.MethodGet, path: "/js/missing.js"})
	// Deeper paths and directories are not dashboard files.
	b.wantProblem(t, http.StatusNotFound, codeNotFound, call{method: http.MethodGet, path: "/js/sub/x.js", invalid: true})
}

func TestDashboard_Placeholder(t *testing.T) {
	b := setup(t)
	r := b.want(t, http.StatusOK, call{method: http.MethodGet, path: "/"})
	if !strings.Contains(string(r.body), "/docs") {
		t.Fatalf("placeholder = %s", r.body)
	}
	b.wantProblem(t, http.StatusNotFound, codeNotFound, call{method: http.MethodGet, path: "/app.js"})
}

// TestMetrics: requests are counted by route pattern, and SSE clients
// have their series (the domain's are TestMetrics_Scenario's).
func TestMetrics(t *testing.T) {
	b := setup(t)
	id := b.rootSession(t)
	b.want(t, http.StatusOK, call{method: http.MethodGet, path: "/v1/sessions/" + id})
	s := b.stream(t, "/v1/sessions/"+id+"/stream", nil)
	_ = s
	body := string(b.want(t, http.StatusOK, call{method: http.MethodGet, path: "/metrics"}).body)
	for _, want := range []string{
		`subagentd_http_requests_total{method="GET",route="/v1/sessions/{id}",status="200"} 1`,
		`subagentd_http_requests_total{method="POST",route="/v1/sessions",status="201"} 1`,
		`subagentd_sse_clients{stream="session"} 1`,
		`go_goroutines`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if strings.Contains(body, id) {
		t.Errorf("a metric is labelled with a session id")
	}
}
