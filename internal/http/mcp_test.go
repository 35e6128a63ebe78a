package http

import (
	"net/http"
	"strings"
	"testing"

	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// listTools is a JSON-RPC request of the MCP face.
var listTools = map[string]any{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}

// TestMCP_NotReadyWithoutTheFace: without Config.MCP, /mcp is NOT_READY.
func TestMCP_NotReadyWithoutTheFace(t *testing.T) {
	b := setup(t)
	b.wantProblem(t, http.StatusServiceUnavailable, codeNotReady, call{method: http.MethodPost, path: mcpPath, body: listTools})
}

// TestMCP_BehindTheGuard: /mcp needs a token as /v1 does, reaches the
// face with the token's tenant, and its body is bounded as /v1 bodies are.
func TestMCP_BehindTheGuard(t *testing.T) {
	tenants := make(chan string, 1)
	b := setup(t, withTokens, func(c *Config) {
		c.BodyLimit = 64
		c.MCP = func(*Server) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				tenants <- store.Tenant(r.Context())
				w.WriteHeader(http.StatusAccepted)
			})
		}
	})
	r := b.do(t, call{method: http.MethodPost, path: mcpPath, body: listTools})
	if r.status != http.StatusUnauthorized || r.header.Get("WWW-Authenticate") == "" || r.problem(t).Code != subagent.EUnauthenticated {
		t.Fatalf("POST /mcp without a token: %d %s, want 401 UNAUTHENTICATED", r.status, r.body)
	}
	b.want(t, http.StatusAccepted, with(tokenB, call{method: http.MethodPost, path: mcpPath, body: listTools}))
	if got := <-tenants; got != "bravo" {
		t.Fatalf("the face saw tenant %q, want bravo", got)
	}
	b.wantProblem(t, http.StatusRequestEntityTooLarge, subagent.EPayloadTooLarge,
		with(tokenB, call{method: http.MethodPost, path: mcpPath, body: map[string]any{"jsonrpc": "2.0", "method": strings.Repeat("x", 300)}, invalid: true}))
}

// TestMCP_TransportRefusalsAreProblems: the MCP transport's own text/plain
// refusals reach the client as problem+json, like every error here, and
// a well-formed call reaches the tools.
func TestMCP_TransportRefusalsAreProblems(t *testing.T) {
	w := setupWorldWith(t, nil)
	p := w.wantProblem(t, http.StatusBadRequest, subagent.EInvalidRequest, call{method: http.MethodPost, path: mcpPath, body: listTools})
	if !strings.Contains(p.Detail, "Accept") {
		t.Fatalf("problem %+v, want the transport's reason (the Accept header)", p)
	}
	accept := map[string]string{"Accept": "application/json, text/event-stream"}
	var answer struct {
		Result struct{ Tools []struct{ Name string } }
	}
	w.want(t, http.StatusOK, call{method: http.MethodPost, path: mcpPath, body: listTools, header: accept}).decode(t, &answer)
	if len(answer.Result.Tools) != 10 {
		t.Fatalf("tools/list = %+v, want the 10 tools", answer)
	}
}

// TestMCP_BodyTextIsChecked: a call whose text the SDK's JSON decoder
// would turn into U+FFFD without a word is refused as a problem naming
// the reason, before any tool runs.
func TestMCP_BodyTextIsChecked(t *testing.T) {
	w := setupWorldWith(t, nil)
	accept := map[string]string{"Accept": "application/json, text/event-stream"}
	for _, c := range []struct{ name, text, reason string }{
		{"invalid UTF-8", "a\xffb", "not valid UTF-8"},
		{"unpaired surrogate", `a\udc00b`, "surrogate"},
	} {
		body := []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"cursor":"` + c.text + `"}}`)
		p := w.wantProblem(t, http.StatusBadRequest, subagent.EInvalidRequest, call{method: http.MethodPost, path: mcpPath, body: body, header: accept})
		if !strings.Contains(p.Detail, c.reason) {
			t.Fatalf("%s: problem %+v, want the reason %q", c.name, p, c.reason)
		}
	}
}
