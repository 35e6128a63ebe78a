package http

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// getTaskRPC is a JSON-RPC request of the A2A face.
var getTaskRPC = map[string]any{"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": map[string]any{"id": "no-such-task"}}

// TestA2A_NotReadyWithoutTheFace: without Config.A2A its routes are
// NOT_READY.
func TestA2A_NotReadyWithoutTheFace(t *testing.T) {
	b := setup(t)
	b.wantProblem(t, http.StatusServiceUnavailable, codeNotReady, call{method: http.MethodGet, path: "/a2a/spawn/.well-known/agent-card.json"})
	b.wantProblem(t, http.StatusServiceUnavailable, codeNotReady, call{method: http.MethodPost, path: "/a2a/spawn", body: getTaskRPC})
}

// fakeA2A records the tenant each method saw.
type fakeA2A struct{ tenants chan string }

func (f fakeA2A) Card(r *http.Request, provider string) ([]byte, error) {
	f.tenants <- store.Tenant(r.Context())
	return json.Marshal(map[string]any{"name": provider, "description": "d", "supportedInterfaces": []any{}, "capabilities": map[string]any{}, "skills": []any{}})
}

func (f fakeA2A) JSONRPC(w http.ResponseWriter, r *http.Request, _ string) {
	f.tenants <- store.Tenant(r.Context())
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"jsonrpc":"2.0","id":1,"result":{}}`))
}

func (f fakeA2A) REST(w http.ResponseWriter, r *http.Request, _ string) {
	f.tenants <- store.Tenant(r.Context())
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{}`))
}

// TestA2A_CardsPublicMethodsBehindTheGuard: the agent cards need no
// token; every method does, and reaches the face with the token's tenant;
// an unknown provider is NO_PROVIDER before the face.
func TestA2A_CardsPublicMethodsBehindTheGuard(t *testing.T) {
	f := fakeA2A{tenants: make(chan string, 1)}
	b := setup(t, withTokens, func(c *Config) { c.A2A = func(*Server) A2A { return f } })
	b.register(t, &fakeProvider{name: "spawn", caps: allCaps(), local: true})
	for _, path := range []string{"/.well-known/agent-card.json", "/a2a/spawn/.well-known/agent-card.json"} {
		b.want(t, http.StatusOK, call{method: http.MethodGet, path: path})
		<-f.tenants
	}
	for _, c := range []call{
		{method: http.MethodPost, path: "/a2a/spawn", body: getTaskRPC},
		{method: http.MethodGet, path: "/a2a/spawn/rest/tasks/x"},
	} {
		r := b.do(t, c)
		if r.status != http.StatusUnauthorized || r.problem(t).Code != subagent.EUnauthenticated {
			t.Fatalf("%s %s without a token: %d %s, want 401 UNAUTHENTICATED", c.method, c.path, r.status, r.body)
		}
		b.want(t, http.StatusOK, with(tokenB, c))
		if got := <-f.tenants; got != "bravo" {
			t.Fatalf("the face saw tenant %q, want bravo", got)
		}
	}
	b.wantProblem(t, http.StatusNotFound, subagent.ENoProvider, with(tokenB, call{method: http.MethodPost, path: "/a2a/nobody", body: getTaskRPC}))
}

// TestA2A_RealFace: the face's card and a JSON-RPC error over the real
// domain.
func TestA2A_RealFace(t *testing.T) {
	w := setupWorldWith(t, nil)
	var card struct {
		Name                string `json:"name"`
		SupportedInterfaces []struct {
			URL, ProtocolBinding string
		} `json:"supportedInterfaces"`
	}
	w.want(t, http.StatusOK, call{method: http.MethodGet, path: "/a2a/spawn/.well-known/agent-card.json"}).decode(t, &card)
	if card.Name != "spawn" || len(card.SupportedInterfaces) != 2 {
		t.Fatalf("card %+v", card)
	}
	var answer struct {
		Error struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	w.want(t, http.StatusOK, call{method: http.MethodPost, path: "/a2a/spawn", body: getTaskRPC}).decode(t, &answer)
	if answer.Error.Code != -32001 { // TaskNotFoundError
		t.Fatalf("GetTask of an unknown task answered %+v, want TaskNotFoundError", answer)
	}
	w.wantProblem(t, http.StatusNotFound, subagent.ENoProvider, call{method: http.MethodGet, path: "/a2a/nobody/.well-known/agent-card.json"})
}

// TestA2A_BodyTextIsChecked: text the SDK's JSON decoder would turn into
// U+FFFD without a word (invalid UTF-8, an unpaired surrogate escape) or
// that no store keeps (a NUL) is refused in the binding's own terms — a
// JSON-RPC parse error naming the reason, a 400 over HTTP+JSON — and
// starts nothing.
func TestA2A_BodyTextIsChecked(t *testing.T) {
	w := setupWorldWith(t, nil)
	send := func(text string) []byte {
		return []byte(`{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"role":"ROLE_USER","messageId":"m1","parts":[{"text":"` + text + `"}]}}}`)
	}
	for _, c := range []struct{ name, text, reason string }{
		{"invalid UTF-8", "a\xffb", "not valid UTF-8"},
		{"unpaired surrogate", `a\ud800b`, "surrogate"},
		{"NUL", `a\u0000b`, "NUL"},
	} {
		var answer struct {
			Result any
			Error  struct {
				Code    int
				Message string
			}
		}
		w.want(t, http.StatusOK, call{method: http.MethodPost, path: "/a2a/spawn", body: send(c.text)}).decode(t, &answer)
		if answer.Result != nil || answer.Error.Code != -32700 || !strings.Contains(answer.Error.Message, c.reason) {
			t.Fatalf("%s: answered %+v, want a parse error (-32700) naming %q", c.name, answer, c.reason)
		}
	}
	rest := []byte(`{"message":{"role":"ROLE_USER","messageId":"m2","parts":[{"text":"a` + "\xff" + `"}]}}`)
	w.want(t, http.StatusBadRequest, call{method: http.MethodPost, path: "/a2a/spawn/rest/message:send", body: rest})
	var runs struct{ Runs []any }
	w.want(t, http.StatusOK, call{method: http.MethodGet, path: "/v1/runs"}).decode(t, &runs)
	if len(runs.Runs) != 0 {
		t.Fatalf("refused messages started %d runs", len(runs.Runs))
	}
}
