package http

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/subagentd/subagentd/internal/memstore"
	"github.com/subagentd/subagentd/internal/pg"
	"github.com/subagentd/subagentd/internal/pg/pgtest"
	"github.com/subagentd/subagentd/internal/roots"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// The tokens of the two tenants of these tests.
const (
	tokenA = "alpha-token-0123456789"
	tokenB = "bravo-token-0123456789"
)

func testTokens() []store.Token {
	return []store.Token{
		{Tenant: "alpha", Hash: sha256.Sum256([]byte(tokenA))},
		{Tenant: "bravo", Hash: sha256.Sum256([]byte(tokenB))},
	}
}

func withTokens(cfg *Config) { cfg.Tokens = testTokens() }

func bearer(token string) map[string]string {
	return map[string]string{"Authorization": "Bearer " + token}
}

// with returns c sending token.
func with(token string, c call) call {
	h := bearer(token)
	for k, v := range c.header {
		h[k] = v
	}
	c.header = h
	return c
}

// stores are the stores the tenant tests run against.
var stores = []struct {
	name string
	open func(t *testing.T) store.Store
}{
	{"memstore", func(*testing.T) store.Store { return memstore.New() }},
	{"postgres", pgStore},
}

// pgStore is a Postgres store over a fresh migrated database.
func pgStore(t *testing.T) store.Store {
	t.Helper()
	return pgStoreAt(t, pgtest.URL(t))
}

// pgStoreAt is a Postgres store over the database at url; two of them
// over one url are a server and its restarted successor.
func pgStoreAt(t *testing.T, url string) store.Store {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	st, err := pg.New(t.Context(), pool, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("pg store: %v", err)
	}
	t.Cleanup(st.Close)
	return st
}

// TestTenants_Isolation: another tenant's session, run, child, task and
// events are 404 or absent through every route and stream, and its cancel,
// dispose, steer, followup and interrupt change nothing.
func TestTenants_Isolation(t *testing.T) {
	for _, sc := range stores {
		t.Run(sc.name, func(t *testing.T) {
			st := sc.open(t)
			w := setupWorldWith(t, []func(*Config){withTokens, func(c *Config) { c.Store = st }}, scriptedRoute("s", replying(nil)))
			p := w.register(t, &fakeProvider{name: "fake", caps: allCaps(), local: true, steer: true})

			// B's lifecycle stream is open before A does anything.
			bEvents := w.stream(t, "/v1/events", bearer(tokenB))

			var root sessionJSON
			w.want(t, 201, with(tokenA, call{method: "POST", path: "/v1/sessions", body: map[string]any{"label": "a-root"}})).decode(t, &root)
			var run runJSON
			w.want(t, 201, with(tokenA, call{method: "POST", path: "/v1/runs", body: map[string]any{
				"provider": "fake", "parentSessionId": root.ID, "prompt": textPrompt("x")}})).decode(t, &run)
			var child createSubagentResponse
			w.want(t, 201, with(tokenA, call{method: "POST", path: "/v1/subagents", body: map[string]any{
				"provider": "spawn", "parentSessionId": root.ID, "label": "c", "prompt": textPrompt("hi")}})).decode(t, &child)

			// B sees none of it.
			for _, c := range []struct {
				call
				status int
				code   string
			}{
				{call{method: "GET", path: "/v1/sessions/" + root.ID}, 404, subagent.ESessionNotFound},
				{call{method: "GET", path: "/v1/sessions/" + root.ID + "/events"}, 404, subagent.ESessionNotFound},
				{call{method: "GET", path: "/v1/sessions/" + root.ID + "/children"}, 404, subagent.ESessionNotFound},
				{call{method: "GET", path: "/v1/sessions/" + root.ID + "/descendants"}, 404, subagent.ESessionNotFound},
				{call{method: "POST", path: "/v1/sessions/" + root.ID + "/messages", body: map[string]any{"content": textPrompt("x")}}, 404, subagent.ESessionNotFound},
				{call{method: "GET", path: "/v1/runs/" + run.RunID}, 404, subagent.ERunNotFound},
				{call{method: "POST", path: "/v1/runs/" + run.RunID + "/cancel"}, 404, subagent.ERunNotFound},
				{call{method: "POST", path: "/v1/runs/" + run.RunID + "/steer", body: map[string]any{"content": textPrompt("x")}}, 404, subagent.ERunNotFound},
				{call{method: "DELETE", path: "/v1/runs/" + run.RunID}, 404, subagent.ERunNotFound},
				{call{method: "POST", path: "/v1/runs", body: map[string]any{"provider": "fake", "parentSessionId": root.ID, "prompt": textPrompt("x")}}, 404, subagent.ESessionNotFound},
				{call{method: "GET", path: "/v1/subagents/" + child.ChildID}, 404, subagent.ESessionNotFound},
				{call{method: "POST", path: "/v1/subagents/" + child.ChildID + "/followup", body: map[string]any{"parentSessionId": root.ID, "content": textPrompt("x")}}, 404, subagent.ESessionNotFound},
				{call{method: "POST", path: "/v1/subagents/" + child.ChildID + "/interrupt", body: map[string]any{"parentSessionId": root.ID}}, 404, subagent.ESessionNotFound},
				{call{method: "GET", path: "/v1/tasks/" + child.TaskID}, 404, subagent.ETaskNotFound},
			} {
				w.wantProblem(t, c.status, c.code, with(tokenB, c.call))
			}
			for _, path := range []string{"/v1/sessions/" + root.ID + "/stream", "/v1/runs/" + run.RunID + "/stream"} {
				resp := w.do(t, with(tokenB, call{method: "GET", path: path}))
				if resp.status != 404 {
					t.Fatalf("B's GET %s: %d, want 404", path, resp.status)
				}
			}
			var sessions sessionListJSON
			w.want(t, 200, with(tokenB, call{method: "GET", path: "/v1/sessions"})).decode(t, &sessions)
			var runs runListJSON
			w.want(t, 200, with(tokenB, call{method: "GET", path: "/v1/runs"})).decode(t, &runs)
			if len(sessions.Sessions) != 0 || len(runs.Runs) != 0 {
				t.Fatalf("B lists A's rows: %d sessions, %d runs", len(sessions.Sessions), len(runs.Runs))
			}

			// B's cancel and dispose did nothing: A's run still runs.
			var got runJSON
			w.want(t, 200, with(tokenA, call{method: "GET", path: "/v1/runs/" + run.RunID})).decode(t, &got)
			if got.State != store.StateRunning {
				t.Fatalf("A's run after B's cancel: %s, want running", got.State)
			}
			select {
			case <-p.run(run.ChildSessionID).cancelled:
				t.Fatal("B's cancel reached A's run")
			default:
			}

			// B's stream carries B's own run first: none of A's events.
			var bRoot sessionJSON
			w.want(t, 201, with(tokenB, call{method: "POST", path: "/v1/sessions", body: map[string]any{}})).decode(t, &bRoot)
			var bRun runJSON
			w.want(t, 201, with(tokenB, call{method: "POST", path: "/v1/runs", body: map[string]any{
				"provider": "fake", "parentSessionId": bRoot.ID, "prompt": textPrompt("x")}})).decode(t, &bRun)
			f := bEvents.next(t)
			if f.event != subagent.EventStart || !strings.Contains(string(f.data), bRun.RunID) {
				t.Fatalf("B's stream: %s %s, want the start of B's run %s", f.event, f.data, bRun.RunID)
			}
			// B's replay of the whole log has only its own start too.
			replay := w.stream(t, "/v1/events?after=0", bearer(tokenB))
			if f := replay.next(t); !strings.Contains(string(f.data), bRun.RunID) {
				t.Fatalf("B's replay starts with %s", f.data)
			}
			p.run(run.ChildSessionID).complete(t, "done")
			p.run(bRun.ChildSessionID).complete(t, "done")
		})
	}
}

// TestAuth_Tokens: without a valid bearer token or cookie, /v1, /readyz
// and /metrics are 401 with a Bearer challenge; the public routes are not.
func TestAuth_Tokens(t *testing.T) {
	b := setup(t, withTokens)
	for _, h := range []map[string]string{nil, bearer("wrong-token-0123456789"), {"Authorization": "Basic eDp5"}, {"Cookie": sessionCookie + "=forged"}} {
		for _, path := range []string{"/v1/providers", "/v1/sessions", "/v1/events", "/readyz", "/metrics"} {
			r := b.do(t, call{method: "GET", path: path, header: h})
			if r.status != 401 || r.header.Get("WWW-Authenticate") == "" || r.problem(t).Code != subagent.EUnauthenticated {
				t.Fatalf("GET %s with %v: %d %s, want 401 UNAUTHENTICATED with WWW-Authenticate", path, h, r.status, r.body)
			}
		}
	}
	for _, path := range []string{"/healthz", "/openapi.yaml", "/", "/docs/index.html"} {
		b.want(t, 200, call{method: "GET", path: path})
	}
	b.want(t, 200, with(tokenA, call{method: "GET", path: "/readyz"}))
	var got authSessionJSON
	b.want(t, 200, with(tokenB, call{method: "GET", path: "/v1/auth/session"})).decode(t, &got)
	if got != (authSessionJSON{AuthRequired: true, Tenant: "bravo"}) {
		t.Fatalf("auth session = %+v", got)
	}
}

// TestAuth_NoTokensLoopbackOnly: without tokens only loopback Host headers
// are answered (DNS rebinding), on every route.
func TestAuth_NoTokensLoopbackOnly(t *testing.T) {
	b := setup(t)
	for host, want := range map[string]int{
		"127.0.0.1": 200, "127.0.0.1:8080": 200, "localhost:1": 200, "LOCALHOST": 200, "[::1]:80": 200, "[::1]": 200,
		"evil.example": 403, "evil.example:8080": 403, "127.0.0.2:8080": 403, "10.0.0.1": 403, "localhost.evil.example": 403,
	} {
		for _, path := range []string{"/v1/providers", "/healthz"} {
			req, _ := http.NewRequestWithContext(t.Context(), "GET", b.ts.URL+path, nil)
			req.Host = host
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != want {
				t.Fatalf("Host %q %s: %d %s, want %d", host, path, resp.StatusCode, body, want)
			}
			if want == 403 && (!strings.Contains(string(body), `"code":"FORBIDDEN"`) || resp.Header.Get("Content-Type") != "application/problem+json") {
				t.Fatalf("Host %q: %s", host, body)
			}
		}
	}
	var got authSessionJSON
	b.want(t, 200, call{method: "GET", path: "/v1/auth/session"}).decode(t, &got)
	if got != (authSessionJSON{AuthRequired: false, Tenant: store.DefaultTenant}) {
		t.Fatalf("auth session = %+v", got)
	}
}

// TestSignIn_Cookie: the dashboard's cookie works for the API and for
// EventSource, needs JSON and a same or absent Origin for writes, and
// sign-out ends it on the server.
func TestSignIn_Cookie(t *testing.T) {
	b := setup(t, withTokens)
	b.wantProblem(t, 401, subagent.EUnauthenticated, call{method: "GET", path: "/v1/auth/session"})
	b.wantProblem(t, 401, subagent.EUnauthenticated, call{method: "POST", path: "/v1/auth/session", body: map[string]any{"token": "nope"}})
	b.wantProblem(t, 415, codeUnsupportedMediaType, call{method: "POST", path: "/v1/auth/session", body: []byte(`{"token":"` + tokenA + `"}`), header: map[string]string{"Content-Type": "text/plain"}, invalid: true})
	r := b.want(t, 204, call{method: "POST", path: "/v1/auth/session", body: map[string]any{"token": tokenA}})
	setCookie := r.header.Get("Set-Cookie")
	for _, attr := range []string{sessionCookie + "=", "Path=/", "HttpOnly", "SameSite=Strict"} {
		if !strings.Contains(setCookie, attr) {
			t.Fatalf("Set-Cookie %q lacks %s", setCookie, attr)
		}
	}
	if strings.Contains(setCookie, "Secure") {
		t.Fatalf("Set-Cookie %q is Secure over plain HTTP", setCookie)
	}
	cookie := map[string]string{"Cookie": strings.SplitN(setCookie, ";", 2)[0]}
	var got authSessionJSON
	b.want(t, 200, call{method: "GET", path: "/v1/auth/session", header: cookie}).decode(t, &got)
	if got.Tenant != "alpha" || !got.AuthRequired {
		t.Fatalf("auth session = %+v", got)
	}
	b.stream(t, "/v1/events", cookie)

	post := func(h map[string]string) call {
		hh := map[string]string{}
		for k, v := range cookie {
			hh[k] = v
		}
		for k, v := range h {
			hh[k] = v
		}
		return call{method: "POST", path: "/v1/sessions", body: map[string]any{"label": "x"}, header: hh}
	}
	b.want(t, 201, post(nil))
	b.want(t, 201, post(map[string]string{"Origin": b.ts.URL}))
	b.wantProblem(t, 403, subagent.EForbidden, post(map[string]string{"Origin": "https://evil.example"}))
	plain := post(map[string]string{"Content-Type": "text/plain"})
	plain.invalid = true
	b.wantProblem(t, 415, codeUnsupportedMediaType, plain)
	// A bodiless cookie POST needs JSON too: a cross-site form can send
	// neither.
	b.wantProblem(t, 415, codeUnsupportedMediaType, call{method: "POST", path: "/v1/runs/x/cancel", header: cookie})
	b.wantProblem(t, 403, subagent.EForbidden, call{method: "DELETE", path: "/v1/auth/session", header: map[string]string{"Cookie": cookie["Cookie"], "Origin": "http://evil.example"}})

	r = b.want(t, 204, call{method: "DELETE", path: "/v1/auth/session", header: cookie})
	if sc := r.header.Get("Set-Cookie"); !strings.Contains(sc, "Max-Age=0") {
		t.Fatalf("sign-out Set-Cookie %q does not clear the cookie", sc)
	}
	b.wantProblem(t, 401, subagent.EUnauthenticated, call{method: "GET", path: "/v1/sessions", header: cookie})
}

// TestCORS: configured origins get CORS headers and preflights; others get
// none, and their writes are refused.
func TestCORS(t *testing.T) {
	const app = "https://app.example"
	b := setup(t, withTokens, func(c *Config) { c.CORSOrigins = []string{app} })
	pre := func(origin string) *http.Response {
		req, _ := http.NewRequestWithContext(t.Context(), "OPTIONS", b.ts.URL+"/v1/sessions", nil)
		req.Header.Set("Origin", origin)
		req.Header.Set("Access-Control-Request-Method", "POST")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	if resp := pre(app); resp.StatusCode != 204 || resp.Header.Get("Access-Control-Allow-Origin") != app ||
		!strings.Contains(resp.Header.Get("Access-Control-Allow-Headers"), "Authorization") {
		t.Fatalf("preflight from %s: %d %v", app, resp.StatusCode, resp.Header)
	}
	if resp := pre("https://evil.example"); resp.StatusCode != 403 || resp.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("preflight from another origin: %d %v", resp.StatusCode, resp.Header)
	}
	r := b.want(t, 200, with(tokenA, call{method: "GET", path: "/v1/providers", header: map[string]string{"Origin": app}}))
	if r.header.Get("Access-Control-Allow-Origin") != app {
		t.Fatalf("no CORS header for %s: %v", app, r.header)
	}
	r = b.want(t, 200, with(tokenA, call{method: "GET", path: "/v1/providers", header: map[string]string{"Origin": "https://evil.example"}}))
	if r.header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("CORS header for another origin: %v", r.header)
	}
}

// TestRequests_MediaTypeAndShape: POST bodies must be JSON objects.
func TestRequests_MediaTypeAndShape(t *testing.T) {
	b := setup(t)
	for _, ct := range []string{"text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "", "application/jsonx", "text/json"} {
		b.wantProblem(t, 415, codeUnsupportedMediaType, call{method: "POST", path: "/v1/sessions", body: []byte(`{}`), header: map[string]string{"Content-Type": ct}, invalid: true})
	}
	b.want(t, 201, call{method: "POST", path: "/v1/sessions", body: []byte(`{}`), header: map[string]string{"Content-Type": "application/merge-patch+json"}, invalid: true})
	b.want(t, 201, call{method: "POST", path: "/v1/sessions", body: []byte(`{}`), header: map[string]string{"Content-Type": "application/json; charset=utf-8"}})
	for _, body := range []string{`null`, `[]`, `"x"`, `3`, ` null `, ``} {
		b.wantProblem(t, 400, subagent.EInvalidRequest, call{method: "POST", path: "/v1/sessions", body: []byte(body), invalid: body != "", notJSON: body == ""})
	}
	// A bodiless POST without a Content-Type is fine with a bearer token
	// or without tokens.
	b.wantProblem(t, 404, subagent.ERunNotFound, call{method: "POST", path: "/v1/runs/nope/cancel"})

	root := b.rootSession(t)
	b.register(t, &fakeProvider{name: "fake", caps: allCaps(), local: true})
	longType := []map[string]any{{"type": strings.Repeat("t", 65), "text": "x"}}
	b.wantProblem(t, 400, subagent.EInvalidRequest, call{method: "POST", path: "/v1/runs", invalid: true, body: map[string]any{"provider": "fake", "parentSessionId": root, "prompt": longType}})
	w := setupWorld(t, scriptedRoute("s", replying(nil)))
	wroot := w.rootSession(t)
	p := w.wantProblem(t, 400, subagent.EInvalidRequest, call{method: "POST", path: "/v1/subagents", invalid: true, body: map[string]any{
		"provider": "spawn", "parentSessionId": wroot, "label": "c", "prompt": textPrompt("x"), "childId": ""}})
	if len(p.Errors) != 1 || p.Errors[0].Field != "childId" {
		t.Fatalf("errors = %+v, want childId", p.Errors)
	}
}

// TestRequests_UndecodablePath: a path that does not decode is a problem,
// never a 500.
func TestRequests_UndecodablePath(t *testing.T) {
	b := setup(t)
	for _, path := range []string{"/docs/%FF%FE", "/v1/sessions/%FF", "/%C0%AF", "/v1/runs/%00"} {
		resp, err := http.Get(b.ts.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if (resp.StatusCode != 400 && resp.StatusCode != 404) || resp.Header.Get("Content-Type") != "application/problem+json" {
			t.Fatalf("GET %s: %d %s %s", path, resp.StatusCode, resp.Header.Get("Content-Type"), body)
		}
	}
}

// TestRequests_TextNotUTF8: a query value, header value or body string
// that is no UTF-8 — percent-encoded or raw — is 400 INVALID_REQUEST on
// both stores, never a 500 from Postgres.
func TestRequests_TextNotUTF8(t *testing.T) {
	for _, sc := range stores {
		t.Run(sc.name, func(t *testing.T) {
			st := sc.open(t)
			b := setup(t, func(c *Config) { c.Store = st })
			for _, c := range []call{
				{method: "GET", path: "/v1/sessions?parentSessionId=%FF"},
				{method: "GET", path: "/v1/sessions?after=%FF"},
				{method: "GET", path: "/v1/runs?childSessionId=%FF"},
				{method: "GET", path: "/v1/runs?taskId=a%C3%28"},
				{method: "GET", path: "/v1/sessions", header: map[string]string{"X-Note": "\xff\xfe"}},
				{method: "POST", path: "/v1/sessions", body: []byte("{\"label\":\"\xff\"}"), notJSON: true},
			} {
				// The spec's validator takes any bytes for a string, so
				// these requests pass it: only the answers are checked.
				p := b.wantProblem(t, 400, subagent.EInvalidRequest, c)
				t.Logf("%s %s: %s", c.method, c.path, p.Detail)
			}
			for _, rawQuery := range []string{"parentSessionId=\xff", "after=a\xed\xa0\x80"} {
				req, err := http.NewRequest("GET", b.ts.URL+"/v1/sessions", nil)
				if err != nil {
					t.Fatal(err)
				}
				req.URL.RawQuery = rawQuery // sent unescaped
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 400 || !strings.Contains(string(body), `"code":"INVALID_REQUEST"`) {
					t.Fatalf("GET /v1/sessions?%q: %d %s", rawQuery, resp.StatusCode, body)
				}
			}
		})
	}
}

// TestRequests_OversizedBodyIsReadable: a client that writes its whole
// 32 MiB body (without Expect: 100-continue) before it reads any answer
// reads the 413 problem instead of a connection reset, with a declared
// length and chunked, with and without an idempotency key.
func TestRequests_OversizedBodyIsReadable(t *testing.T) {
	b := setup(t, withTokens)
	big := `{"label":"` + strings.Repeat("x", 32<<20) + `"}`
	for _, chunked := range []bool{false, true} {
		for _, key := range []string{"", "k-413"} {
			conn, err := net.Dial("tcp", b.ts.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			head := "POST /v1/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + tokenA + "\r\nContent-Type: application/json\r\n"
			if key != "" {
				head += "Idempotency-Key: " + key + "\r\n"
			}
			body := big
			if chunked {
				head += "Transfer-Encoding: chunked\r\n\r\n"
				body = fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(big), big)
			} else {
				head += fmt.Sprintf("Content-Length: %d\r\n\r\n", len(big))
			}
			_ = conn.SetDeadline(time.Now().Add(time.Minute)) // generous: 4 × 32 MiB on a loaded machine
			if _, err := io.WriteString(conn, head+body); err != nil {
				t.Fatalf("chunked=%v key=%q: writing the body: %v", chunked, key, err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatalf("chunked=%v key=%q: reading the answer: %v", chunked, key, err)
			}
			data, err := io.ReadAll(resp.Body)
			conn.Close()
			if err != nil || resp.StatusCode != 413 || !strings.Contains(string(data), `"code":"PAYLOAD_TOO_LARGE"`) {
				t.Fatalf("chunked=%v key=%q: %d %s %v", chunked, key, resp.StatusCode, data, err)
			}
		}
	}
}

// TestIdempotency: a retry gets the first answer and creates nothing; a
// reused key is 422; a key in flight is 409; keys are per tenant.
func TestIdempotency(t *testing.T) {
	b := setup(t, withTokens)
	key := map[string]string{"Idempotency-Key": "create-1"}
	first := b.want(t, 201, with(tokenA, call{method: "POST", path: "/v1/sessions", body: map[string]any{"label": "once"}, header: key}))
	again := b.want(t, 201, with(tokenA, call{method: "POST", path: "/v1/sessions", body: map[string]any{"label": "once"}, header: key}))
	if string(again.body) != string(first.body) || again.header.Get("Location") != first.header.Get("Location") || again.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay differs:\n%s %v\n%s %v", first.body, first.header, again.body, again.header)
	}
	var list sessionListJSON
	b.want(t, 200, with(tokenA, call{method: "GET", path: "/v1/sessions"})).decode(t, &list)
	if len(list.Sessions) != 1 {
		t.Fatalf("%d sessions after a retry, want 1", len(list.Sessions))
	}
	b.wantProblem(t, 422, codeIdempotencyReused, with(tokenA, call{method: "POST", path: "/v1/sessions", body: map[string]any{"label": "other"}, header: key}))
	// The same key is another tenant's own.
	b.want(t, 201, with(tokenB, call{method: "POST", path: "/v1/sessions", body: map[string]any{"label": "other"}, header: key}))
	b.wantProblem(t, 400, subagent.EInvalidRequest, with(tokenA, call{method: "POST", path: "/v1/sessions", body: map[string]any{}, invalid: true,
		header: map[string]string{"Idempotency-Key": strings.Repeat("k", 256)}}))

	// A run held in flight by ?wait: its retry is 409, the retry after it
	// answered gets the same run.
	p := b.register(t, &fakeProvider{name: "fake", caps: allCaps(), local: true})
	var s sessionJSON
	first.decode(t, &s)
	runKey := map[string]string{"Idempotency-Key": "run-1"}
	start := call{method: "POST", path: "/v1/runs?wait=true", header: runKey, body: map[string]any{"provider": "fake", "parentSessionId": s.ID, "prompt": textPrompt("x")}}
	pending := b.async(t, with(tokenA, start))
	r := <-p.started
	b.wantProblem(t, 409, codeIdempotencyInUse, with(tokenA, start))
	r.complete(t, "done")
	answered := pending()
	if answered.status != 201 {
		t.Fatalf("first run: %d %s", answered.status, answered.body)
	}
	replayed := b.want(t, 201, with(tokenA, start))
	if string(replayed.body) != string(answered.body) {
		t.Fatalf("replayed run differs:\n%s\n%s", answered.body, replayed.body)
	}
	select {
	case extra := <-p.started:
		t.Fatalf("a retry started another run: %s", extra.childID)
	default:
	}
}

// TestIdempotency_SurvivesRestart: on Postgres, a server that replaces
// another replays the answers the first one gave.
func TestIdempotency_SurvivesRestart(t *testing.T) {
	url := pgtest.URL(t)
	key := map[string]string{"Idempotency-Key": "restart-1"}
	c := with(tokenA, call{method: "POST", path: "/v1/sessions", body: map[string]any{"label": "durable"}, header: key})
	var bodies []string
	for range 2 {
		st := pgStoreAt(t, url)
		b := setup(t, withTokens, func(cfg *Config) { cfg.Store = st })
		bodies = append(bodies, string(b.want(t, 201, c).body))
		b.ts.Close()
	}
	if bodies[0] != bodies[1] {
		t.Fatalf("after a restart the retry got\n%q\nnot\n%q", bodies[1], bodies[0])
	}
	st := pgStoreAt(t, url)
	list, err := st.ListSessions(store.WithTenant(t.Context(), "alpha"), store.SessionFilter{})
	if err != nil || len(list) != 1 {
		t.Fatalf("sessions after the retry: %d, %v; want 1", len(list), err)
	}
	// The sweep forgets keys after 24 h: a sweep "in a day" removes it.
	if n, err := st.SweepIdempotency(t.Context(), time.Now().Add(IdempotencyTTL)); err != nil || n != 1 {
		t.Fatalf("sweep = %d, %v", n, err)
	}
}

// TestLimits: the request rate, open streams and live runs of a tenant
// are capped with 429 and Retry-After, and one tenant's use does not limit
// another's.
func TestLimits(t *testing.T) {
	t.Run("rate", func(t *testing.T) {
		b := setup(t, withTokens, func(c *Config) { c.RateLimit = 0.5 }) // burst 1
		b.want(t, 200, with(tokenA, call{method: "GET", path: "/v1/providers"}))
		r := b.do(t, with(tokenA, call{method: "GET", path: "/v1/providers"}))
		if r.status != 429 || r.header.Get("Retry-After") != "2" || r.problem(t).Code != subagent.ERateLimited {
			t.Fatalf("over the rate: %d %v %s", r.status, r.header, r.body)
		}
		b.want(t, 200, with(tokenB, call{method: "GET", path: "/v1/providers"}))
	})
	t.Run("streams", func(t *testing.T) {
		b := setup(t, withTokens, func(c *Config) { c.MaxStreams = 1 })
		first := b.stream(t, "/v1/events", bearer(tokenA))
		r := b.do(t, with(tokenA, call{method: "GET", path: "/v1/events"}))
		if r.status != 429 || r.header.Get("Retry-After") == "" {
			t.Fatalf("second stream: %d %s", r.status, r.body)
		}
		b.stream(t, "/v1/events", bearer(tokenB))
		first.close()
		// The slot comes back once the server saw the stream end.
		deadline := time.Now().Add(streamTimeout)
		for {
			resp := b.do(t, with(tokenA, call{method: "GET", path: "/v1/sessions/none/stream"}))
			if resp.status == 404 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the stream slot was not released: %d", resp.status)
			}
			time.Sleep(10 * time.Millisecond) // polling the server's state, not synchronising
		}
	})
}

// TestSessions_CwdSymlinkContainment: a cwd that leaves the workspace
// roots through a symlink is refused, even when it looks inside.
func TestSessions_CwdSymlinkContainment(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(root, "in"), 0o755); err != nil {
		t.Fatal(err)
	}
	b := setup(t, func(c *Config) { c.Sessions = roots.New(roots.Config{Store: c.Store, WorkspaceRoots: []string{root}}) })
	for _, cwd := range []string{root + "/link", root + "/link/..", root + "/link/../..", root + "/in/../link"} {
		b.wantProblem(t, 400, subagent.EInvalidRequest, call{method: "POST", path: "/v1/sessions", body: map[string]any{"cwd": cwd}})
	}
	var s sessionJSON
	b.want(t, 201, call{method: "POST", path: "/v1/sessions", body: map[string]any{"cwd": root + "/in/../in"}}).decode(t, &s)
	if s.Cwd != filepath.Join(root, "in") {
		t.Fatalf("stored cwd %q, want the resolved %q", s.Cwd, filepath.Join(root, "in"))
	}
}

// TestIdempotency_ConcurrentDuplicates: simultaneous requests with one key
// create one session; each gets its answer or IDEMPOTENCY_KEY_IN_USE.
func TestIdempotency_ConcurrentDuplicates(t *testing.T) {
	for _, sc := range stores {
		t.Run(sc.name, func(t *testing.T) {
			st := sc.open(t)
			b := setup(t, withTokens, func(c *Config) { c.Store = st })
			c := with(tokenA, call{method: "POST", path: "/v1/sessions", body: map[string]any{"label": "dup"}, header: map[string]string{"Idempotency-Key": "dup-1"}})
			var pending []func() response
			for range 8 {
				pending = append(pending, b.async(t, c))
			}
			var created []string
			for _, wait := range pending {
				r := wait()
				switch r.status {
				case 201:
					created = append(created, string(r.body))
				case 409:
					if r.problem(t).Code != codeIdempotencyInUse {
						t.Fatalf("409 %s", r.body)
					}
				default:
					t.Fatalf("duplicate: %d %s", r.status, r.body)
				}
			}
			for _, body := range created[1:] {
				if body != created[0] {
					t.Fatalf("two answers for one key:\n%s\n%s", created[0], body)
				}
			}
			var list sessionListJSON
			b.want(t, 200, with(tokenA, call{method: "GET", path: "/v1/sessions"})).decode(t, &list)
			if len(list.Sessions) != 1 || len(created) == 0 {
				t.Fatalf("%d sessions, %d created answers; want 1 session", len(list.Sessions), len(created))
			}
		})
	}
}

// TestSignIn_SecureOverTLS: a sign-in over TLS gets a Secure cookie.
func TestSignIn_SecureOverTLS(t *testing.T) {
	s := NewServer(Config{Store: memstore.New(), Logger: slog.New(slog.DiscardHandler), Tokens: testTokens(),
		Service: subagent.NewService(subagent.Config{Store: memstore.New(), Logger: slog.New(slog.DiscardHandler)})})
	req := httptest.NewRequest(http.MethodPost, "https://127.0.0.1/v1/auth/session", strings.NewReader(`{"token":"`+tokenA+`"}`))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, req)
	if rec.Code != 204 || !strings.Contains(rec.Header().Get("Set-Cookie"), "Secure") {
		t.Fatalf("sign-in over TLS: %d, Set-Cookie %q", rec.Code, rec.Header().Get("Set-Cookie"))
	}
}

// failingCompletes is a store whose CompleteIdempotency fails while left
// is positive.
type failingCompletes struct {
	store.Store
	left  atomic.Int32
	calls atomic.Int32
}

func (s *failingCompletes) CompleteIdempotency(ctx context.Context, key string, status int, response json.RawMessage) error {
	s.calls.Add(1)
	if s.left.Add(-1) >= 0 {
		return errors.New("injected: the answer was not stored")
	}
	return s.Store.CompleteIdempotency(ctx, key, status, response)
}

// TestIdempotency_AnswerNotStored: when storing the answer fails after the
// request was carried out, its retry never runs it again: the retry gets
// the answer a later attempt stored, or IDEMPOTENCY_KEY_IN_USE when no
// attempt could store it.
func TestIdempotency_AnswerNotStored(t *testing.T) {
	for _, tc := range []struct {
		name     string
		failures int32
		want     int
	}{
		{"stored-on-a-later-attempt", 1, http.StatusCreated},
		{"never-stored", completeAttempts, http.StatusConflict},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &failingCompletes{Store: memstore.New()}
			st.left.Store(tc.failures)
			b := setup(t, func(c *Config) { c.Store = st })
			c := call{method: "POST", path: "/v1/sessions", body: map[string]any{"label": "once"}, header: map[string]string{"Idempotency-Key": "k1"}}
			first := b.want(t, http.StatusCreated, c)
			retry := b.do(t, c)
			switch {
			case retry.status != tc.want:
				t.Fatalf("retry: %d %s, want %d", retry.status, retry.body, tc.want)
			case tc.want == http.StatusCreated && (string(retry.body) != string(first.body) || retry.header.Get("Idempotent-Replayed") != "true"):
				t.Fatalf("retry got\n%s\nnot the replay of\n%s", retry.body, first.body)
			case tc.want == http.StatusConflict && retry.problem(t).Code != codeIdempotencyInUse:
				t.Fatalf("retry: %s, want %s", retry.body, codeIdempotencyInUse)
			}
			if n, want := st.calls.Load(), min(tc.failures+1, completeAttempts); n != want {
				t.Fatalf("%d attempts to store the answer, want %d", n, want)
			}
			var list sessionListJSON
			b.want(t, 200, call{method: "GET", path: "/v1/sessions"}).decode(t, &list)
			if len(list.Sessions) != 1 {
				t.Fatalf("%d sessions after the retry, want 1", len(list.Sessions))
			}
		})
	}
}
