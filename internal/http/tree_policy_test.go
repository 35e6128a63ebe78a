package http

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/config"
	"github.com/subagentd/subagentd/internal/governance"
	"github.com/subagentd/subagentd/internal/memstore"
	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/providers/acp"
	"github.com/subagentd/subagentd/internal/roots"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// A root's approvals policy over the real ACP provider and its fake agent,
// which asks permission for "Delete build/" (kind other) offering
// allow_once, allow_always and reject_once.

// policyWorld is a server with the ACP provider "fake" whose own policy is
// permission, approvals, and roots that take a policy.
type policyWorld struct {
	*testBundle
	root string
}

func setupPolicy(t *testing.T, st store.Store, permission string) *policyWorld {
	t.Helper()
	w := &policyWorld{root: t.TempDir()}
	w.testBundle = start(t, func(b *testBundle, cfg *Config) {
		approvals := governance.NewApprovals(governance.ApprovalsConfig{Store: b.st, Owner: "test", Logger: b.log})
		env := map[string]string{"FAKE_MODE": "permission", "FAKE_ALWAYS": "1", "FAKE_STATE": t.TempDir(), "FAKE_MARKS": t.TempDir()}
		p, err := acp.New(config.ProviderConfig{Name: "fake", Type: config.TypeACP, Command: fakeAgent(t), Env: env,
			Permission: permission, DisposeEOFGrace: 10 * time.Second, DisposeGrace: 10 * time.Second},
			acp.Deps{Store: b.st, Logger: b.log, WorkspaceRoots: []string{w.root}, Approver: approvals})
		if err != nil {
			t.Fatal(err)
		}
		if err := b.svc.Register(t.Context(), p); err != nil {
			t.Fatal(err)
		}
		cfg.Approvals = approvals
		cfg.Sessions = roots.New(roots.Config{Store: b.st, WorkspaceRoots: []string{w.root}, Policies: approvals, Limits: cfg.Limits})
		b.stops = append(b.stops, func(context.Context) error { return p.Close() })
	}, func(c *Config) { c.Store = st })
	return w
}

// rootWith creates a root session with the approvals policy approvals (nil
// for none).
func (w *policyWorld) rootWith(t *testing.T, approvals map[string]any) string {
	t.Helper()
	body := map[string]any{"label": "root", "cwd": w.root}
	if approvals != nil {
		body["approvals"] = approvals
	}
	var s sessionJSON
	w.want(t, http.StatusCreated, call{method: http.MethodPost, path: "/v1/sessions", body: body}).decode(t, &s)
	return s.ID
}

// run starts a run of the fake agent under parent.
func (w *policyWorld) run(t *testing.T, parent string) runJSON {
	t.Helper()
	var run runJSON
	w.want(t, http.StatusCreated, call{method: http.MethodPost, path: "/v1/runs",
		body: map[string]any{"provider": "fake", "parentSessionId": parent, "prompt": textPrompt("clean up")}}).decode(t, &run)
	return run
}

// said returns what the settled run's agent said: "selected <optionId>".
func (w *policyWorld) said(t *testing.T, runID string) string {
	t.Helper()
	var run runJSON
	w.want(t, http.StatusOK, call{method: http.MethodGet, path: "/v1/runs/" + runID + "?wait=30"}).decode(t, &run)
	if run.State == "running" || run.Result == nil {
		t.Fatalf("run %s still running", runID)
	}
	var out []model.Block
	if err := json.Unmarshal(run.Result.Output, &out); err != nil {
		t.Fatal(err)
	}
	return model.Text(out)
}

// approvals lists the approvals of root's tree, every approval for "".
func (w *policyWorld) approvals(t *testing.T, root string) []approvalJSON {
	t.Helper()
	path := "/v1/approvals"
	if root != "" {
		path += "?rootSessionId=" + root
	}
	var list approvalListJSON
	w.want(t, http.StatusOK, call{method: http.MethodGet, path: path}).decode(t, &list)
	return list.Approvals
}

// A provider that allows everything asks under a root whose mode is ask; a
// person's "always" is stored with the tree, and the tree's next such
// request is answered by it without a person, while another tree still
// asks.
func TestTreePolicy_NarrowsAndRemembersAlways(t *testing.T) {
	t.Parallel()
	for name, st := range map[string]func(t *testing.T) store.Store{
		"memstore": func(*testing.T) store.Store { return memstore.New() },
		"pg":       pgStore,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			w := setupPolicy(t, st(t), config.PermissionAllow)
			events := w.stream(t, "/v1/events?types=approval/requested", nil)
			root := w.rootWith(t, map[string]any{"mode": "ask", "timeout": "10m"})

			first := w.run(t, root)
			typ, req := nextEvent(t, events)
			if typ != governance.EventApprovalRequested || req["runId"] != first.RunID || req["rootSessionId"] != root {
				t.Fatalf("%s %v, want the first run's approval: the tree's ask narrows the provider's allow", typ, req)
			}
			var ap approvalJSON
			w.want(t, http.StatusOK, call{method: http.MethodGet, path: "/v1/approvals/" + req["approvalId"].(string)}).decode(t, &ap)
			created, _ := time.Parse(time.RFC3339Nano, ap.CreatedAt)
			expires, err := time.Parse(time.RFC3339Nano, ap.ExpiresAt)
			if err != nil || expires.Sub(created) != 10*time.Minute {
				t.Fatalf("approval %+v, want it to expire after the tree's 10m", ap)
			}
			var decided approvalJSON
			w.want(t, http.StatusOK, call{method: http.MethodPost, path: "/v1/approvals/" + ap.ID + "/decision",
				body: map[string]any{"outcome": "allow", "scope": "always"}}).decode(t, &decided)
			if decided.Decision == nil || decided.Decision.OptionID != "always" {
				t.Fatalf("decided %+v, want the agent's allow_always option", decided)
			}
			if got := w.said(t, first.RunID); got != "selected always" {
				t.Fatalf("first run said %q", got)
			}

			// The same tool call in the same tree, one level deeper: the
			// always rule answers, and no approval is created.
			second := w.run(t, first.ChildSessionID)
			if got := w.said(t, second.RunID); got != "selected yes" {
				t.Fatalf("second run said %q, want the rule's allow", got)
			}
			if list := w.approvals(t, root); len(list) != 1 {
				t.Fatalf("the tree has %d approvals, want only the first", len(list))
			}
			// The root shows its policy, with the rule the decision added.
			var shown struct {
				Approvals struct {
					Mode, Timeout string
					Always        []struct{ Kind, Title, Decision, ApprovalID string }
				}
			}
			w.want(t, http.StatusOK, call{method: http.MethodGet, path: "/v1/sessions/" + root}).decode(t, &shown)
			if p := shown.Approvals; p.Mode != "ask" || p.Timeout != "10m0s" || len(p.Always) != 1 ||
				p.Always[0].Decision != "allow" || p.Always[0].ApprovalID != ap.ID || p.Always[0].Title != ap.ToolCall.Title {
				t.Fatalf("the root shows the policy %+v, want mode ask, 10m and the always rule of %s", p, ap.ID)
			}
			log := w.want(t, http.StatusOK, call{method: http.MethodGet, path: "/v1/sessions/" + second.ChildSessionID + "/events"})
			if !strings.Contains(string(log.body), `"optionId":"yes"`) {
				t.Fatalf("the child's log does not record the rule's answer: %s", log.body)
			}

			// Another tree with the same policy still asks.
			other := w.rootWith(t, map[string]any{"mode": "ask"})
			third := w.run(t, other)
			if typ, req := nextEvent(t, events); typ != governance.EventApprovalRequested || req["runId"] != third.RunID {
				t.Fatalf("%s %v, want the other tree's approval", typ, req)
			}
			w.want(t, http.StatusAccepted, call{method: http.MethodPost, path: "/v1/runs/" + third.RunID + "/cancel"})
			w.said(t, third.RunID)
		})
	}
}

// A root's reject narrows a provider's allow without asking anyone; a root
// without a policy leaves the provider's own.
func TestTreePolicy_RejectNeedsNoPerson(t *testing.T) {
	t.Parallel()
	w := setupPolicy(t, memstore.New(), config.PermissionAllow)
	strict := w.rootWith(t, map[string]any{"mode": "allow", "rules": []map[string]any{{"kind": "other", "titlePattern": "^Delete ", "decision": "reject"}}})
	if got := w.said(t, w.run(t, strict).RunID); got != "selected no" {
		t.Fatalf("under the rejecting rule the agent said %q", got)
	}
	plain := w.rootWith(t, nil)
	if got := w.said(t, w.run(t, plain).RunID); got != "selected yes" {
		t.Fatalf("without a tree policy the agent said %q", got)
	}
	if list := w.approvals(t, ""); len(list) != 0 {
		t.Fatalf("%d approvals, want none", len(list))
	}
}

func TestTreePolicy_InvalidPolicies(t *testing.T) {
	t.Parallel()
	w := setupPolicy(t, memstore.New(), config.PermissionAsk)
	for _, tc := range []struct {
		approvals map[string]any
		field     string
		invalid   bool // the spec refuses it too
	}{
		{map[string]any{}, "approvals.mode", true},
		{map[string]any{"mode": "maybe"}, "approvals.mode", true},
		{map[string]any{"mode": "ask", "rules": []map[string]any{{"kind": "edit", "titlePattern": "(", "decision": "ask"}}}, "approvals.rules[0].titlePattern", false},
		{map[string]any{"mode": "ask", "rules": []map[string]any{{"kind": "write", "decision": "ask"}}}, "approvals.rules[0].kind", true},
		{map[string]any{"mode": "ask", "timeout": "soon"}, "approvals.timeout", false},
		{map[string]any{"mode": "ask", "timeout": "200h"}, "approvals.timeout", false},
		{map[string]any{"mode": "ask", "onTimeout": "cancel"}, "approvals.onTimeout", false},
		{map[string]any{"mode": "ask", "timeout": strings.Repeat("1", 40) + "s"}, "approvals.timeout", true},
	} {
		p := w.wantProblem(t, http.StatusBadRequest, subagent.EInvalidRequest, call{method: http.MethodPost, path: "/v1/sessions",
			body: map[string]any{"cwd": w.root, "approvals": tc.approvals}, invalid: tc.invalid})
		if !slices.ContainsFunc(p.Errors, func(f fieldError) bool { return f.Field == tc.field }) {
			t.Errorf("%v: problem %+v, want it to name %s", tc.approvals, p, tc.field)
		}
	}
	var list sessionListJSON
	w.want(t, http.StatusOK, call{method: http.MethodGet, path: "/v1/sessions"}).decode(t, &list)
	if len(list.Sessions) != 0 {
		t.Fatalf("refused roots were created: %+v", list.Sessions)
	}
}
