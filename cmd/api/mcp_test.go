package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/subagentd/subagentd/internal/pg/pgtest"
	"github.com/subagentd/subagentd/internal/subagent"
)

// The MCP face's tests drive /mcp of the wired process (the real router,
// guard and domain) with the go-sdk's own client over real HTTP.

// mcpTools are the face's tools; governance tools arrive with their
// features.
var mcpTools = []string{"cancel_tree", "decide_approval", "delegate", "followup", "get_run", "get_task", "interrupt", "list_approvals", "list_providers", "start_subagent"}

// wiredServer wires the process from vars (the in-memory store, the echo
// model, no tokens unless vars say otherwise) and serves it on a loopback
// port until the test ends; it returns the base URL.
func wiredServer(t *testing.T, vars map[string]string) string {
	t.Helper()
	cfg, err := loadConfig(nil, env(vars))
	if err != nil {
		t.Fatal(err)
	}
	a, err := wire(t.Context(), cfg, newLogger(io.Discard), false)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(a.api.Handler())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), 30*time.Second)
		defer cancel()
		if err := a.shutdown(ctx); err != nil {
			t.Error(err)
		}
		ts.Close()
		a.stop()
	})
	return ts.URL
}

// bearer adds a bearer token to every request.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// roundRobin sends each request to the next of bases in turn: several
// replicas behind one address, as a load balancer without affinity would.
type roundRobin struct {
	bases []string
	n     atomic.Int64
}

func (rr *roundRobin) RoundTrip(r *http.Request) (*http.Response, error) {
	base := rr.bases[int(rr.n.Add(1))%len(rr.bases)]
	r = r.Clone(r.Context())
	u := *r.URL
	host := strings.TrimPrefix(base, "http://")
	u.Scheme, u.Host, r.Host = "http", host, host
	r.URL = &u
	return http.DefaultTransport.RoundTrip(r)
}

// connectMCP connects the go-sdk client to endpoint through transport
// (nil: the default one).
func connectMCP(t *testing.T, endpoint string, transport http.RoundTripper) (*mcp.ClientSession, error) {
	t.Helper()
	if transport == nil {
		transport = http.DefaultTransport
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "subagentd-test", Version: "1"}, nil)
	cs, err := client.Connect(t.Context(), &mcp.StreamableClientTransport{
		Endpoint: endpoint, HTTPClient: &http.Client{Transport: transport}, DisableStandaloneSSE: true,
	}, nil)
	if err == nil {
		t.Cleanup(func() { _ = cs.Close() })
	}
	return cs, err
}

// mustConnect is connectMCP that fails the test on an error.
func mustConnect(t *testing.T, endpoint string, transport http.RoundTripper) *mcp.ClientSession {
	t.Helper()
	cs, err := connectMCP(t, endpoint, transport)
	if err != nil {
		t.Fatalf("connect to %s: %v", endpoint, err)
	}
	return cs
}

// toolRun is a run as the tools answer it: the REST body.
type toolRun struct {
	RunID           string `json:"runId"`
	Kind            string `json:"kind"`
	ChildSessionID  string `json:"childSessionId"`
	ParentSessionID string `json:"parentSessionId"`
	State           string `json:"state"`
	Result          *struct {
		Output     []struct{ Type, Text string } `json:"output"`
		StopReason string                        `json:"stopReason"`
	} `json:"result"`
}

// text is the run's output text.
func (r toolRun) text() string {
	if r.Result == nil {
		return ""
	}
	var b strings.Builder
	for _, blk := range r.Result.Output {
		b.WriteString(blk.Text)
	}
	return b.String()
}

// callTool calls tool name and decodes its structuredContent into out
// (when non-nil), failing the test on a tool error. It checks that the
// text content is the same JSON.
func callTool(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any, out any) {
	t.Helper()
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if res.IsError {
		t.Fatalf("%s(%v) is a tool error: %s", name, args, toolText(res))
	}
	structured, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	var fromText, fromStructured any
	if err := json.Unmarshal([]byte(toolText(res)), &fromText); err != nil {
		t.Fatalf("%s: text content is not JSON: %v", name, err)
	}
	_ = json.Unmarshal(structured, &fromStructured)
	if !jsonEqual(fromText, fromStructured) {
		t.Fatalf("%s: text %s and structuredContent %s differ", name, toolText(res), structured)
	}
	if out != nil {
		if err := json.Unmarshal(structured, out); err != nil {
			t.Fatalf("%s: decode %s: %v", name, structured, err)
		}
	}
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// toolError calls tool name and returns its tool error's text, failing
// the test when the call succeeds.
func toolError(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) string {
	t.Helper()
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: protocol error %v, want a tool error", name, err)
	}
	if !res.IsError {
		t.Fatalf("%s(%v) succeeded, want a tool error", name, args)
	}
	return toolText(res)
}

func toolText(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func TestMCP_ToolsOverTheRealServer(t *testing.T) {
	t.Parallel()
	base := wiredServer(t, map[string]string{"SUBAGENTD_ADDR": "127.0.0.1:0"})
	cs := mustConnect(t, base+"/mcp", nil)
	if init := cs.InitializeResult(); init.ServerInfo.Name != "subagentd" || !strings.Contains(init.Instructions, "delegate") {
		t.Fatalf("initialize = %+v, want subagentd with instructions for the tools", init)
	}

	list, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range list.Tools {
		names = append(names, tool.Name)
		if tool.InputSchema == nil || tool.Description == "" {
			t.Errorf("tool %s has no input schema or description", tool.Name)
		}
	}
	slices.Sort(names)
	if !slices.Equal(names, mcpTools) {
		t.Fatalf("tools = %v, want %v", names, mcpTools)
	}

	var providers struct{ Providers []struct{ Name string } }
	callTool(t, cs, "list_providers", nil, &providers)
	if len(providers.Providers) == 0 || providers.Providers[0].Name != "spawn" {
		t.Fatalf("list_providers = %+v", providers)
	}

	t.Run("delegate waits for the result", func(t *testing.T) {
		var run toolRun
		callTool(t, cs, "delegate", map[string]any{"provider": "spawn", "prompt": "hello over mcp", "label": "greeter"}, &run)
		if run.State != "settled" || run.Result == nil || run.Result.StopReason != "completed" || run.text() != "echo: hello over mcp" {
			t.Fatalf("delegate = %+v, want a completed run answering echo: hello over mcp", run)
		}
		// Without parentSessionId the tenant's root labelled mcp is the
		// parent, the same one for every call, a root like any other.
		var again toolRun
		callTool(t, cs, "delegate", map[string]any{"provider": "spawn", "prompt": []map[string]string{{"type": "text", "text": "blocks"}}}, &again)
		if again.ParentSessionID != run.ParentSessionID || again.text() != "echo: blocks" {
			t.Fatalf("second delegate = %+v, want parent %s", again, run.ParentSessionID)
		}
		// A tool's answer is the REST answer.
		var viaTool, viaREST any
		callTool(t, cs, "get_run", map[string]any{"runId": run.RunID}, &viaTool)
		getJSON(t, base+"/v1/runs/"+run.RunID, &viaREST)
		if !jsonEqual(viaTool, viaREST) {
			t.Fatalf("get_run answers %v, GET /v1/runs/{runId} %v", viaTool, viaREST)
		}
		var root struct{ Label, ParentSessionID string }
		getJSON(t, base+"/v1/sessions/"+run.ParentSessionID, &root)
		if root.Label != "mcp" || root.ParentSessionID != "" {
			t.Fatalf("the default parent is %+v, want a root labelled mcp", root)
		}
	})

	t.Run("delegate with wait 0 answers the running run", func(t *testing.T) {
		var run toolRun
		callTool(t, cs, "delegate", map[string]any{"provider": "spawn", "prompt": "/sleep 2s\nslow", "wait": 0}, &run)
		if run.State != "running" || run.RunID == "" || run.Result != nil {
			t.Fatalf("delegate wait 0 = %+v, want a running run", run)
		}
		var polled toolRun
		callTool(t, cs, "get_run", map[string]any{"runId": run.RunID, "wait": 60}, &polled)
		if polled.State != "settled" || polled.text() != "echo: /sleep 2s\nslow" {
			t.Fatalf("get_run = %+v, want the settled run", polled)
		}
	})

	t.Run("a continuable child takes followups and interrupts", func(t *testing.T) {
		var started struct{ ChildID, TaskID string }
		callTool(t, cs, "start_subagent", map[string]any{"provider": "spawn", "label": "helper", "prompt": "first"}, &started)
		var task toolRun
		callTool(t, cs, "get_task", map[string]any{"taskId": started.TaskID, "wait": 60}, &task)
		if task.State != "settled" || task.text() != "echo: first" || task.Kind != "activation" {
			t.Fatalf("get_task = %+v, want the settled first turn", task)
		}
		var next struct {
			Route  subagent.Route
			TaskID string
		}
		callTool(t, cs, "followup", map[string]any{"childId": started.ChildID, "content": "/sleep 5m\nsecond"}, &next)
		if next.Route != subagent.RouteStarted || next.TaskID == "" || next.TaskID == started.TaskID {
			t.Fatalf("followup = %+v, want a new task", next)
		}
		// async: answered at acceptance, before the running turn's next
		// step takes the message in.
		var queued struct{ Route, MessageID, ChildID string }
		callTool(t, cs, "followup", map[string]any{"childId": started.ChildID, "content": "third", "async": true}, &queued)
		if queued.Route != "accepted" || queued.MessageID == "" || queued.ChildID != started.ChildID {
			t.Fatalf("async followup = %+v, want it accepted", queued)
		}
		var accepted struct{ Accepted bool }
		callTool(t, cs, "interrupt", map[string]any{"childId": started.ChildID}, &accepted)
		if !accepted.Accepted {
			t.Fatalf("interrupt = %+v", accepted)
		}
		callTool(t, cs, "get_task", map[string]any{"taskId": next.TaskID, "wait": 60}, &task)
		if task.State != "settled" || task.Result.StopReason == "completed" {
			t.Fatalf("the interrupted task = %+v, want it settled short of completion", task)
		}
	})

	t.Run("cancel_tree stops what runs below the session", func(t *testing.T) {
		var run toolRun
		callTool(t, cs, "delegate", map[string]any{"provider": "spawn", "prompt": "/sleep 5m\nlong", "wait": 0}, &run)
		if run.State != "running" {
			t.Fatalf("delegate wait 0 = %+v, want a running run", run)
		}
		// Without sessionId, the tenant's root labelled mcp: the parent of
		// every run the face started.
		var cancelled struct{ Cancelled int }
		callTool(t, cs, "cancel_tree", nil, &cancelled)
		if cancelled.Cancelled < 1 {
			t.Fatalf("cancel_tree = %+v, want the sleeping run counted", cancelled)
		}
		var viaREST struct {
			State  string
			Result struct{ StopReason, Diagnostic string }
		}
		getJSON(t, base+"/v1/runs/"+run.RunID, &viaREST)
		if viaREST.State != "settled" || viaREST.Result.StopReason != "aborted" || viaREST.Result.Diagnostic != "cancelled by tree" {
			t.Fatalf("the run after cancel_tree = %+v, want it aborted, cancelled by tree", viaREST)
		}
	})

	t.Run("approvals are listed and decided as over REST", func(t *testing.T) {
		var viaTool, viaREST any
		callTool(t, cs, "list_approvals", map[string]any{"state": "pending", "limit": 10}, &viaTool)
		getJSON(t, base+"/v1/approvals?state=pending&limit=10", &viaREST)
		if !jsonEqual(viaTool, viaREST) {
			t.Fatalf("list_approvals answers %v, GET /v1/approvals %v", viaTool, viaREST)
		}
	})

	t.Run("invalid arguments are tool errors with the problem code", func(t *testing.T) {
		for _, c := range []struct {
			tool string
			args map[string]any
			want string
		}{
			{"delegate", map[string]any{"prompt": "no provider"}, "INVALID_REQUEST: invalid request: provider: is required"},
			{"delegate", map[string]any{"provider": "spawn", "prompt": ""}, "INVALID_REQUEST: invalid request: prompt: must have at least 1 items"},
			{"delegate", map[string]any{"provider": "spawn", "prompt": "x", "wait": 301}, "INVALID_REQUEST: invalid request: wait: must be an integer from 0 to 300"},
			{"delegate", map[string]any{"provider": "spawn", "prompt": "x", "onDisconnect": "cancel"}, "INVALID_REQUEST: invalid request: onDisconnect: is not a known field"},
			{"delegate", map[string]any{"provider": "nobody", "prompt": "x"}, "NO_PROVIDER: "},
			{"delegate", map[string]any{"provider": "spawn", "prompt": "x", "parentSessionId": "no-such-session"}, "SESSION_NOT_FOUND: "},
			{"get_run", map[string]any{}, "INVALID_REQUEST: invalid request: runId: is required"},
			{"get_run", map[string]any{"runId": 7}, "INVALID_REQUEST: invalid request: runId: must be a string"},
			{"get_run", map[string]any{"runId": strings.Repeat("r", 129)}, "INVALID_REQUEST: invalid request: runId: must have 1 to 128 characters"},
			{"get_run", map[string]any{"runId": "no-such-run"}, "RUN_NOT_FOUND: "},
			{"get_task", map[string]any{"taskId": "no-such-task"}, "TASK_NOT_FOUND: "},
			{"followup", map[string]any{"childId": "no-such-child", "content": "x"}, "SESSION_NOT_FOUND: "},
			{"start_subagent", map[string]any{"provider": "spawn", "prompt": "x"}, "INVALID_REQUEST: invalid request: label: is required"},
			{"cancel_tree", map[string]any{"sessionId": "no-such-session"}, "SESSION_NOT_FOUND: "},
			{"list_approvals", map[string]any{"state": "maybe"}, "INVALID_REQUEST: invalid request: state: must be pending, decided, expired or cancelled"},
			{"list_approvals", map[string]any{"limit": 0}, "INVALID_REQUEST: invalid request: limit: must be an integer from 1 to"},
			{"list_approvals", map[string]any{"state": true}, "INVALID_REQUEST: invalid request: state: must be a string or a number"},
			{"decide_approval", map[string]any{"outcome": "allow"}, "INVALID_REQUEST: invalid request: approvalId: is required"},
			{"decide_approval", map[string]any{"approvalId": "no-such-approval", "outcome": "allow"}, "APPROVAL_NOT_FOUND: "},
			{"decide_approval", map[string]any{"approvalId": "no-such-approval", "outcome": "maybe"}, "INVALID_REQUEST: "},
		} {
			if got := toolError(t, cs, c.tool, c.args); !strings.HasPrefix(got, c.want) {
				t.Errorf("%s(%v) = %q, want it to start with %q", c.tool, c.args, got, c.want)
			}
		}
	})

	t.Run("an unknown tool is a protocol error", func(t *testing.T) {
		_, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "no_such_tool", Arguments: map[string]any{}})
		if err == nil || !strings.Contains(err.Error(), "no_such_tool") {
			t.Fatalf("no_such_tool = %v, want a protocol error naming the tool", err)
		}
	})

	t.Run("GET is not served: the face is stateless", func(t *testing.T) {
		resp, err := http.Get(base + "/mcp")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed {
			t.Fatalf("GET /mcp = %s, want 405", resp.Status)
		}
	})
}

func getJSON(t *testing.T, url string, out any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s = %s %s", url, resp.Status, data)
	}
	if err := json.Unmarshal(data, out); err != nil {
		t.Fatal(err)
	}
}

func TestMCP_BearerTokensAndTenants(t *testing.T) {
	t.Parallel()
	const tokenA, tokenB = "token-of-tenant-a-0123456789", "token-of-tenant-b-0123456789"
	base := wiredServer(t, map[string]string{"SUBAGENTD_ADDR": "127.0.0.1:0", "SUBAGENTD_TOKENS": "a:" + tokenA + ",b:" + tokenB})

	if _, err := connectMCP(t, base+"/mcp", nil); err == nil || !strings.Contains(err.Error(), "Unauthorized") && !strings.Contains(err.Error(), "401") {
		t.Fatalf("connect without a token: %v, want a 401 refusal", err)
	}
	resp, err := http.Post(base+"/mcp", "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") == "" {
		t.Fatalf("tools/list without a token = %s, want 401 with WWW-Authenticate", resp.Status)
	}
	if _, err := connectMCP(t, base+"/mcp", bearer{"wrong-token-0123456789", http.DefaultTransport}); err == nil {
		t.Fatal("connect with a wrong token succeeded")
	}

	a := mustConnect(t, base+"/mcp", bearer{tokenA, http.DefaultTransport})
	b := mustConnect(t, base+"/mcp", bearer{tokenB, http.DefaultTransport})
	var runA, runB toolRun
	callTool(t, a, "delegate", map[string]any{"provider": "spawn", "prompt": "for a"}, &runA)
	callTool(t, b, "delegate", map[string]any{"provider": "spawn", "prompt": "for b"}, &runB)
	if runA.text() != "echo: for a" || runB.text() != "echo: for b" {
		t.Fatalf("runs = %+v, %+v", runA, runB)
	}
	if runA.ParentSessionID == runB.ParentSessionID {
		t.Fatalf("tenants a and b share the root session %s", runA.ParentSessionID)
	}
	if got := toolError(t, b, "get_run", map[string]any{"runId": runA.RunID}); !strings.HasPrefix(got, "RUN_NOT_FOUND") {
		t.Fatalf("tenant b reads tenant a's run: %q, want RUN_NOT_FOUND", got)
	}
	if got := toolError(t, b, "delegate", map[string]any{"provider": "spawn", "prompt": "x", "parentSessionId": runA.ParentSessionID}); !strings.HasPrefix(got, "SESSION_NOT_FOUND") {
		t.Fatalf("tenant b delegates under tenant a's root: %q, want SESSION_NOT_FOUND", got)
	}
}

// TestMCP_TwoReplicasOneAddress: two replicas on one Postgres database
// behind one address that alternates between them answer one client:
// any replica serves any call (the face keeps no session), the first
// calls on both agree on one mcp root, and a run started on one is
// polled to its result on the other.
func TestMCP_TwoReplicasOneAddress(t *testing.T) {
	t.Parallel()
	db := pgtest.URL(t)
	var bases []string
	for _, name := range []string{"replica-a", "replica-b"} {
		vars := replicaEnv(db, name)
		vars["SUBAGENTD_ADDR"] = "127.0.0.1:0"
		bases = append(bases, wiredServer(t, vars))
	}
	rr := &roundRobin{bases: bases}
	cs := mustConnect(t, "http://one.address.invalid/mcp", rr)

	// Concurrent first calls on both replicas create one root between them.
	var wg sync.WaitGroup
	parents := make([]string, 4)
	errs := make([]error, 4)
	for i := range parents {
		wg.Go(func() {
			res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "delegate", Arguments: map[string]any{"provider": "spawn", "prompt": "race", "wait": 0}})
			if err == nil && res.IsError {
				err = errors.New(toolText(res))
			}
			if err != nil {
				errs[i] = err
				return
			}
			var run toolRun
			data, _ := json.Marshal(res.StructuredContent)
			errs[i] = json.Unmarshal(data, &run)
			parents[i] = run.ParentSessionID
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if parents[0] == "" || len(slices.Compact(slices.Sorted(slices.Values(parents)))) != 1 {
		t.Fatalf("concurrent first calls used roots %v, want one", parents)
	}

	for i := range 2 {
		var run toolRun
		callTool(t, cs, "delegate", map[string]any{"provider": "spawn", "prompt": "/sleep 1s\nacross replicas", "wait": 0}, &run)
		if run.State != "running" {
			t.Fatalf("delegate %d = %+v, want running", i, run)
		}
		var polled toolRun
		callTool(t, cs, "get_run", map[string]any{"runId": run.RunID, "wait": 60}, &polled)
		if polled.State != "settled" || polled.text() != "echo: /sleep 1s\nacross replicas" {
			t.Fatalf("get_run %d on the other replica = %+v", i, polled)
		}
	}
	if rr.n.Load() < 8 {
		t.Fatalf("the client sent %d requests, too few to have used both replicas", rr.n.Load())
	}
}

// mcpClientDir holds the MCP TypeScript SDK (package.json pins it;
// scripts/test installs it with npm ci) and the flow it runs.
const mcpClientDir = "testdata/mcp-client"

// TestMCP_NodeClientAgainstTwoReplicas runs the MCP TypeScript SDK's
// StreamableHTTPClientTransport (flow.mjs) against two replicas of the
// built binary on one Postgres database, with tokens, behind one address
// that alternates between them.
func TestMCP_NodeClientAgainstTwoReplicas(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat(filepath.Join(mcpClientDir, "node_modules", "@modelcontextprotocol", "sdk", "package.json")); err != nil {
		t.Fatalf("the MCP TypeScript SDK is not installed (%v): run scripts/test, which installs %s with npm ci", err, mcpClientDir)
	}
	// Read here so that go test's cache knows the flow: node reads it in
	// a subprocess, which the cache does not see.
	if _, err := os.ReadFile(filepath.Join(mcpClientDir, "flow.mjs")); err != nil {
		t.Fatal(err)
	}
	const token = "node-client-token-0123456789"
	db := pgtest.URL(t)
	var bases []string
	for _, name := range []string{"replica-a", "replica-b"} {
		vars := replicaEnv(db, name)
		vars["SUBAGENTD_TOKENS"] = "node:" + token
		bases = append(bases, startServer(t, vars).base)
	}
	rr := &roundRobin{bases: bases}
	proxy := httptest.NewServer(&httputil.ReverseProxy{
		Rewrite:   func(r *httputil.ProxyRequest) {},
		Transport: rr,
	})
	t.Cleanup(proxy.Close)

	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "flow.mjs", proxy.URL+"/mcp", token)
	cmd.Dir = mcpClientDir
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "flow ok") {
		t.Fatalf("node flow.mjs: %v\n%s", err, out)
	}
	if n := rr.n.Load(); n < 8 {
		t.Fatalf("the proxy forwarded %d requests, too few to have used both replicas", n)
	}
}

// BenchmarkMCPOverhead compares a tool call with the REST call it wraps,
// on the wired in-memory service over loopback HTTP: get_run against GET
// /v1/runs/{runId} for a settled run (the face's cost alone: a stateless
// MCP request, the JSON-RPC envelope, the answer as structuredContent and
// text), and delegate against POST /v1/runs?wait=true (a whole echo run).
func BenchmarkMCPOverhead(b *testing.B) {
	ts := benchServer(b, false)
	client := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
	cs, err := client.Connect(b.Context(), &mcp.StreamableClientTransport{Endpoint: ts.URL + "/mcp", DisableStandaloneSSE: true}, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cs.Close() })
	tool := func(name string, args map[string]any) toolRun {
		res, err := cs.CallTool(b.Context(), &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil || res.IsError {
			b.Fatalf("%s: %v %v", name, err, res)
		}
		var run toolRun
		data, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(data, &run); err != nil || run.State != "settled" {
			b.Fatalf("%s: %s", name, data)
		}
		return run
	}
	rest := func(method, path, body string) toolRun {
		req, _ := http.NewRequestWithContext(b.Context(), method, ts.URL+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		var run toolRun
		if err := json.NewDecoder(resp.Body).Decode(&run); err != nil || run.State != "settled" {
			b.Fatalf("%s %s: %d %v", method, path, resp.StatusCode, err)
		}
		return run
	}
	settled := tool("delegate", map[string]any{"provider": "spawn", "prompt": "bench"})
	b.Run("rest=GET /v1/runs/{runId}", func(b *testing.B) {
		for b.Loop() {
			rest(http.MethodGet, "/v1/runs/"+settled.RunID, "")
		}
	})
	b.Run("mcp=get_run", func(b *testing.B) {
		for b.Loop() {
			tool("get_run", map[string]any{"runId": settled.RunID})
		}
	})
	// The same tools/call as one plain POST, without the SDK's client.
	call := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_run","arguments":{"runId":"` + settled.RunID + `"}}}`
	b.Run("mcp=get_run by plain HTTP", func(b *testing.B) {
		for b.Loop() {
			req, _ := http.NewRequestWithContext(b.Context(), http.MethodPost, ts.URL+"/mcp", strings.NewReader(call))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			var answer struct {
				Result struct {
					StructuredContent toolRun `json:"structuredContent"`
				} `json:"result"`
			}
			err = json.NewDecoder(resp.Body).Decode(&answer)
			resp.Body.Close()
			if err != nil || answer.Result.StructuredContent.State != "settled" {
				b.Fatalf("tools/call: %d %v", resp.StatusCode, err)
			}
		}
	})
	body := `{"provider":"spawn","parentSessionId":"` + settled.ParentSessionID + `","prompt":[{"type":"text","text":"bench"}]}`
	b.Run("rest=POST /v1/runs?wait=true", func(b *testing.B) {
		for b.Loop() {
			rest(http.MethodPost, "/v1/runs?wait=true", body)
		}
	})
	b.Run("mcp=delegate", func(b *testing.B) {
		for b.Loop() {
			tool("delegate", map[string]any{"provider": "spawn", "prompt": "bench"})
		}
	})
}
