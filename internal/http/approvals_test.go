package http

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/config"
	"github.com/subagentd/subagentd/internal/governance"
	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/providers/acp"
	"github.com/subagentd/subagentd/internal/roots"
	"github.com/subagentd/subagentd/internal/subagent"
)

// The approvals API over the real ACP provider running a third-party
// agent: the ACP TypeScript SDK's example agent, which asks permission to
// edit a file in its turn (scripts/test installs it).

// peerScript is the example agent, which scripts/test installs.
func peerScript(t *testing.T) string {
	t.Helper()
	script, err := filepath.Abs("../providers/acp/testdata/peer/acp-sdk-1.9.0/node_modules/@agentclientprotocol/sdk/dist/examples/agent.js")
	if err == nil {
		_, err = os.Stat(script)
	}
	if err != nil {
		t.Fatalf("the approvals tests run the ACP TypeScript SDK's example agent; install it with scripts/test (or run internal/providers/acp's tests once): %v", err)
	}
	return script
}

// askWorld is a server with the ACP provider "peer" (permission: ask) and
// approvals.
type askWorld struct {
	*testBundle
	root string
}

// setupAsk builds the askWorld; wires add to its server's config.
func setupAsk(t *testing.T, wires ...func(b *testBundle, cfg *Config)) *askWorld {
	t.Helper()
	script := peerScript(t)
	w := &askWorld{root: t.TempDir()}
	w.testBundle = start(t, func(b *testBundle, cfg *Config) {
		for _, wire := range wires {
			wire(b, cfg)
		}
		approvals := governance.NewApprovals(governance.ApprovalsConfig{Store: b.st, Owner: "test", Logger: b.log})
		p, err := acp.New(config.ProviderConfig{Name: "peer", Type: config.TypeACP, Command: "node", Args: []string{script},
			Permission: config.PermissionAsk, DisposeEOFGrace: 10 * time.Second, DisposeGrace: 10 * time.Second},
			acp.Deps{Store: b.st, Logger: b.log, WorkspaceRoots: []string{w.root}, Approver: approvals})
		if err != nil {
			t.Fatal(err)
		}
		if err := b.svc.Register(t.Context(), p); err != nil {
			t.Fatal(err)
		}
		cfg.Approvals = approvals
		cfg.Sessions = roots.New(roots.Config{Store: b.st, WorkspaceRoots: []string{w.root}, Limits: cfg.Limits})
		b.stops = append(b.stops, func(context.Context) error { return p.Close() })
	})
	return w
}

// startAsking starts a run of the peer under a new root session and
// returns the run and the root, with a stream of approval events opened
// before the run.
func (w *askWorld) startAsking(t *testing.T) (runJSON, string, *sseStream) {
	t.Helper()
	var root sessionJSON
	w.want(t, http.StatusCreated, call{method: http.MethodPost, path: "/v1/sessions",
		body: map[string]any{"label": "root", "cwd": w.root}}).decode(t, &root)
	events := w.stream(t, "/v1/events?types=approval/requested,approval/decided", nil)
	var run runJSON
	w.want(t, http.StatusCreated, call{method: http.MethodPost, path: "/v1/runs",
		body: map[string]any{"provider": "peer", "parentSessionId": root.ID, "prompt": textPrompt("update the config")}}).decode(t, &run)
	return run, root.ID, events
}

// nextEvent returns the next event of the stream (after its id-only first
// frame), decoded.
func nextEvent(t *testing.T, s *sseStream) (string, map[string]any) {
	t.Helper()
	for {
		f := s.next(t)
		if f.event == "" {
			continue
		}
		var data map[string]any
		if err := json.Unmarshal(f.data, &data); err != nil {
			t.Fatal(err)
		}
		return f.event, data
	}
}

func (w *askWorld) settled(t *testing.T, runID string) runJSON {
	t.Helper()
	var run runJSON
	w.want(t, http.StatusOK, call{method: http.MethodGet, path: "/v1/runs/" + runID + "?wait=20"}).decode(t, &run)
	if run.State == "running" {
		t.Fatalf("run %s still running", runID)
	}
	return run
}

func TestApprovals_AskAllowCompletesTheTurn(t *testing.T) {
	t.Parallel()
	w := setupAsk(t)
	run, root, events := w.startAsking(t)
	typ, req := nextEvent(t, events)
	if typ != governance.EventApprovalRequested || req["runId"] != run.RunID || req["rootSessionId"] != root ||
		req["sessionId"] != run.ChildSessionID || req["state"] != "pending" {
		t.Fatalf("%s %v", typ, req)
	}
	id := req["approvalId"].(string)

	var list approvalListJSON
	w.want(t, http.StatusOK, call{method: http.MethodGet, path: "/v1/approvals?state=pending&rootSessionId=" + root}).decode(t, &list)
	if len(list.Approvals) != 1 || list.Approvals[0].ID != id || list.NextCursor != "" {
		t.Fatalf("pending approvals %+v", list)
	}
	a := list.Approvals[0]
	if a.ToolCall.Kind != "edit" || a.ToolCall.Title != "Modifying critical configuration file" || len(a.Options) != 2 ||
		a.Provider != "peer" || a.RunID != run.RunID || !strings.Contains(string(a.ToolCall.RawInput), "new-host") {
		t.Fatalf("approval %+v", a)
	}
	w.want(t, http.StatusOK, call{method: http.MethodGet, path: "/v1/approvals?sessionId=" + run.ChildSessionID}).decode(t, &list)
	if len(list.Approvals) != 1 {
		t.Fatalf("by session: %+v", list)
	}
	w.want(t, http.StatusOK, call{method: http.MethodGet, path: "/v1/approvals?state=decided"}).decode(t, &list)
	if len(list.Approvals) != 0 {
		t.Fatalf("decided before any decision: %+v", list)
	}
	var live runJSON
	w.want(t, http.StatusOK, call{method: http.MethodGet, path: "/v1/runs/" + run.RunID}).decode(t, &live)
	if live.State != "running" || live.PendingApprovals != 1 {
		t.Fatalf("run while its agent waits: %+v, want running with 1 pending approval", live)
	}
	w.wantProblem(t, http.StatusUnprocessableEntity, subagent.EOptionUnavailable, call{method: http.MethodPost,
		path: "/v1/approvals/" + id + "/decision", body: map[string]any{"outcome": "allow", "scope": "always"}})

	decide := call{method: http.MethodPost, path: "/v1/approvals/" + id + "/decision",
		body: map[string]any{"outcome": "allow", "reason": "fine"}, header: map[string]string{"Idempotency-Key": "decide-1"}}
	first := w.want(t, http.StatusOK, decide)
	var decided approvalJSON
	first.decode(t, &decided)
	if decided.State != "decided" || decided.Decision == nil || decided.Decision.OptionID != "allow" ||
		decided.Decision.Kind != "allow_once" || decided.Decision.By != "default" || decided.Decision.Reason != "fine" {
		t.Fatalf("decided %+v", decided)
	}
	if again := w.want(t, http.StatusOK, decide); string(again.body) != string(first.body) {
		t.Fatalf("the retry with the same key answered %s, want %s", again.body, first.body)
	}
	w.wantProblem(t, http.StatusConflict, subagent.EAlreadyDecided, call{method: http.MethodPost,
		path: "/v1/approvals/" + id + "/decision", body: map[string]any{"optionId": "reject"}})

	typ, dec := nextEvent(t, events)
	if typ != governance.EventApprovalDecided || dec["approvalId"] != id || dec["state"] != "decided" || dec["rootSessionId"] != root {
		t.Fatalf("%s %v", typ, dec)
	}
	got := w.settled(t, run.RunID)
	var out []model.Block
	if err := json.Unmarshal(got.Result.Output, &out); err != nil {
		t.Fatal(err)
	}
	if got.Result.StopReason != subagent.StopCompleted || !strings.Contains(model.Text(out), "I've successfully updated the configuration.") ||
		got.PendingApprovals != 0 {
		t.Fatalf("run %+v, result %+v", got, got.Result)
	}
	w.want(t, http.StatusOK, call{method: http.MethodGet, path: "/v1/approvals/" + id}).decode(t, &decided)
	if decided.State != "decided" {
		t.Fatalf("approval after the turn: %+v", decided)
	}
}

// Two decisions at once: one wins, the other is 409, and the agent acts on
// the winner.
func TestApprovals_ConcurrentDecisionsOneWins(t *testing.T) {
	t.Parallel()
	w := setupAsk(t)
	run, _, events := w.startAsking(t)
	_, req := nextEvent(t, events)
	id := req["approvalId"].(string)
	bodies := []map[string]any{{"outcome": "reject"}, {"optionId": "allow"}}
	answers := make([]response, len(bodies))
	var wg sync.WaitGroup
	for i, body := range bodies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i] = w.do(t, call{method: http.MethodPost, path: "/v1/approvals/" + id + "/decision", body: body})
		}()
	}
	wg.Wait()
	won := -1
	for i, a := range answers {
		switch a.status {
		case http.StatusOK:
			if won >= 0 {
				t.Fatal("both decisions won")
			}
			won = i
		case http.StatusConflict:
			if p := a.problem(t); p.Code != subagent.EAlreadyDecided {
				t.Fatalf("loser: %+v", p)
			}
		default:
			t.Fatalf("decision answered %d %s", a.status, a.body)
		}
	}
	if won < 0 {
		t.Fatal("no decision won")
	}
	says := []string{"I'll skip the configuration update.", "I've successfully updated the configuration."}[won]
	got := w.settled(t, run.RunID)
	var out []model.Block
	if err := json.Unmarshal(got.Result.Output, &out); err != nil {
		t.Fatal(err)
	}
	if got.Result.StopReason != subagent.StopCompleted || !strings.Contains(model.Text(out), says) {
		t.Fatalf("run %+v, want it to say %q", got.Result, says)
	}
}

// A run cancelled while its approval is pending: the agent is answered
// cancelled, the approval is closed cancelled (approval/decided says so),
// and the run settles aborted.
func TestApprovals_CancelWhilePendingCancelsTheApproval(t *testing.T) {
	t.Parallel()
	w := setupAsk(t)
	run, _, events := w.startAsking(t)
	_, req := nextEvent(t, events)
	id := req["approvalId"].(string)
	w.want(t, http.StatusAccepted, call{method: http.MethodPost, path: "/v1/runs/" + run.RunID + "/cancel"})
	typ, dec := nextEvent(t, events)
	if typ != governance.EventApprovalDecided || dec["approvalId"] != id || dec["state"] != "cancelled" {
		t.Fatalf("%s %v", typ, dec)
	}
	var a approvalJSON
	w.want(t, http.StatusOK, call{method: http.MethodGet, path: "/v1/approvals/" + id}).decode(t, &a)
	if a.State != "cancelled" || a.Decision != nil {
		t.Fatalf("approval %+v", a)
	}
	if got := w.settled(t, run.RunID); got.Result.StopReason != subagent.StopAborted {
		t.Fatalf("run %+v", got.Result)
	}
	w.wantProblem(t, http.StatusConflict, subagent.EAlreadyDecided, call{method: http.MethodPost,
		path: "/v1/approvals/" + id + "/decision", body: map[string]any{"outcome": "allow"}})
}

func TestApprovals_BadRequests(t *testing.T) {
	t.Parallel()
	w := setupAsk(t)
	w.wantProblem(t, http.StatusNotFound, subagent.EApprovalNotFound, call{method: http.MethodGet, path: "/v1/approvals/nope"})
	w.wantProblem(t, http.StatusNotFound, subagent.EApprovalNotFound, call{method: http.MethodPost,
		path: "/v1/approvals/nope/decision", body: map[string]any{"outcome": "allow"}})
	w.wantProblem(t, http.StatusBadRequest, subagent.EInvalidRequest, call{method: http.MethodGet, path: "/v1/approvals?state=open", invalid: true})
	w.wantProblem(t, http.StatusBadRequest, subagent.EInvalidRequest, call{method: http.MethodGet, path: "/v1/approvals?after=nope"})
	for _, body := range []map[string]any{
		{"outcome": "maybe"}, {"optionId": strings.Repeat("x", 300)}, {"optionId": ""},
		{"reason": strings.Repeat("r", 2000), "outcome": "allow"}, {"outcome": "allow", "extra": 1},
	} {
		w.wantProblem(t, http.StatusBadRequest, subagent.EInvalidRequest, call{method: http.MethodPost,
			path: "/v1/approvals/some-id/decision", body: body, invalid: true})
	}
	// Valid JSON for the spec, yet no decision: neither or both forms.
	for _, body := range []map[string]any{{"scope": "once"}, {"optionId": "a", "outcome": "allow"}, {}} {
		w.wantProblem(t, http.StatusBadRequest, subagent.EInvalidRequest, call{method: http.MethodPost,
			path: "/v1/approvals/some-id/decision", body: body})
	}
	w.wantProblem(t, http.StatusBadRequest, subagent.EInvalidRequest, call{method: http.MethodPost,
		path: "/v1/approvals/some-id/decision", body: []byte("{\"optionId\":\"a\xff\"}"), notJSON: true})
}
