package http

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/agent"
	"github.com/subagentd/subagentd/internal/governance"
	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/model/scripted"
	"github.com/subagentd/subagentd/internal/providers/spawn"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// limitedRoot creates a root session with limits and returns its id.
func (b *testBundle) limitedRoot(t *testing.T, limits map[string]any) string {
	t.Helper()
	var s sessionJSON
	b.want(t, http.StatusCreated, call{method: http.MethodPost, path: "/v1/sessions",
		body: map[string]any{"label": "root", "limits": limits}}).decode(t, &s)
	return s.ID
}

// limitsOf answers the limits in force at session id.
func (b *testBundle) limitsOf(t *testing.T, id string) limitsOutJSON {
	t.Helper()
	var s sessionJSON
	b.want(t, http.StatusOK, call{method: http.MethodGet, path: "/v1/sessions/" + id}).decode(t, &s)
	if s.Limits == nil {
		t.Fatalf("session %s shows no limits", id)
	}
	return *s.Limits
}

func patchLimits(id string, body map[string]any) call {
	return call{method: http.MethodPatch, path: "/v1/sessions/" + id + "/limits", body: body}
}

// runWith is a one-shot spawn start under parent with a text prompt and
// limits (nil: none).
func runWith(parent, prompt string, limits map[string]any) call {
	body := map[string]any{"provider": spawn.Name, "parentSessionId": parent, "prompt": textPrompt(prompt)}
	if limits != nil {
		body["limits"] = limits
	}
	return call{method: http.MethodPost, path: "/v1/runs", body: body}
}

func eq[T comparable](p *T, want T) bool { return p != nil && *p == want }

// TestLimits_ChildNarrowsNeverWidens: a root's limits are shown on its
// creation and GET; a child started with wider limits gets the root's
// (clamped, not refused), with narrower ones its own; its own children
// are held to them. PATCH changes the root's, clears one with null, and
// refuses a child and unknown fields — on both stores.
func TestLimits_ChildNarrowsNeverWidens(t *testing.T) {
	for name, st := range bothStores {
		t.Run(name, func(t *testing.T) {
			w := setupWorldWith(t, st(t), echoRoute())
			var created sessionJSON
			w.want(t, http.StatusCreated, call{method: http.MethodPost, path: "/v1/sessions", body: map[string]any{
				"limits": map[string]any{"maxDepth": 3, "maxChildren": 5, "tokenBudget": 100000, "deadline": "1h", "idleTimeout": "5m"}}}).decode(t, &created)
			root := created.ID
			l := created.Limits
			if l == nil || !eq(l.MaxDepth, 3) || !eq(l.MaxChildren, 5) || !eq(l.TokenBudget, 100000) || l.IdleTimeout != "5m0s" || l.Deadline == nil {
				t.Fatalf("created root's limits %+v", l)
			}
			if d := l.Deadline.Sub(created.CreatedAt); d < time.Hour-time.Second || d > time.Hour+time.Second {
				t.Fatalf("deadline %v is %v after the root's creation %v, want 1h", l.Deadline, d, created.CreatedAt)
			}

			var wide runJSON
			w.want(t, http.StatusCreated, runWith(root, "hi", map[string]any{"maxDepth": 50, "maxChildren": 500, "tokenBudget": 1 << 40,
				"deadline": "2999-01-01T00:00:00Z", "idleTimeout": "100h"})).decode(t, &wide)
			if got := w.limitsOf(t, wide.ChildSessionID); !eq(got.MaxDepth, 3) || !eq(got.MaxChildren, 5) || !eq(got.TokenBudget, 100000) ||
				got.IdleTimeout != "5m0s" || got.Deadline == nil || !got.Deadline.Equal(*l.Deadline) {
				t.Fatalf("a child asking for wider limits has %+v in force, want the root's %+v", got, l)
			}
			narrow := w.startChild(t, root, "hi", map[string]any{"limits": map[string]any{"maxChildren": 1, "maxDepth": 2, "idleTimeout": "1m"}})
			if got := w.limitsOf(t, narrow.ChildID); !eq(got.MaxChildren, 1) || !eq(got.MaxDepth, 2) || got.IdleTimeout != "1m0s" || !eq(got.TokenBudget, 100000) {
				t.Fatalf("a narrowing child has %+v in force", got)
			}
			// The narrowing child's own children: one, at depth 2.
			grand := w.want(t, http.StatusCreated, runWith(narrow.ChildID, "hi", nil))
			var g runJSON
			grand.decode(t, &g)
			w.wantProblem(t, http.StatusConflict, subagent.ELimitExceeded, runWith(narrow.ChildID, "hi", nil))
			w.wantProblem(t, http.StatusUnprocessableEntity, subagent.EDepthExceeded, runWith(g.ChildSessionID, "hi", nil))

			// PATCH the root: the children's own narrowing stays.
			var patched treeLimitsJSON
			w.want(t, http.StatusOK, patchLimits(root, map[string]any{"maxChildren": 2, "idleTimeout": nil})).decode(t, &patched)
			if pl := patched.Limits; !eq(pl.MaxChildren, 2) || pl.IdleTimeout != "" || !eq(pl.MaxDepth, 3) || patched.Paused {
				t.Fatalf("patched %+v", patched)
			}
			if got := w.limitsOf(t, root); !eq(got.MaxChildren, 2) || got.IdleTimeout != "" {
				t.Fatalf("root after PATCH: %+v", got)
			}
			if got := w.limitsOf(t, narrow.ChildID); !eq(got.MaxChildren, 1) || got.IdleTimeout != "1m0s" {
				t.Fatalf("narrowing child after the root's PATCH: %+v", got)
			}
			// With the root's idleTimeout cleared, the wide child's own is the
			// only one left on its chain.
			if got := w.limitsOf(t, wide.ChildSessionID); !eq(got.MaxChildren, 2) || got.IdleTimeout != "100h0m0s" {
				t.Fatalf("wide child after the root's PATCH: %+v", got)
			}
			w.wantProblem(t, http.StatusBadRequest, subagent.EInvalidRequest, patchLimits(narrow.ChildID, map[string]any{"maxChildren": 9}))
			w.wantProblem(t, http.StatusBadRequest, subagent.EInvalidRequest, call{method: http.MethodPatch,
				path: "/v1/sessions/" + root + "/limits", body: map[string]any{"maxKids": 9}, invalid: true})
			w.wantProblem(t, http.StatusBadRequest, subagent.EInvalidRequest, patchLimits(root, map[string]any{"deadline": "soon"}))
			w.wantProblem(t, http.StatusBadRequest, subagent.EInvalidRequest, call{method: http.MethodPatch,
				path: "/v1/sessions/" + root + "/limits", body: map[string]any{"maxDepth": -1}, invalid: true})
			w.wantProblem(t, http.StatusNotFound, subagent.ESessionNotFound, patchLimits("nope", map[string]any{"maxDepth": 1}))
		})
	}
}

// TestLimits_MaxChildren: a tree's maxChildren counts the children ever
// created under each session, one-shot and continuable alike, settled
// ones too: beyond it 409 LIMIT_EXCEEDED; another session of the tree has
// its own count — on both stores.
func TestLimits_MaxChildren(t *testing.T) {
	for name, st := range bothStores {
		t.Run(name, func(t *testing.T) {
			w := setupWorldWith(t, st(t), echoRoute())
			root := w.limitedRoot(t, map[string]any{"maxChildren": 2})
			first := w.settledRun(t, w.startRun(t, spawn.Name, root, nil).RunID)
			w.startChild(t, root, "hi", nil)
			w.wantProblem(t, http.StatusConflict, subagent.ELimitExceeded, runWith(root, "hi", nil))
			w.wantProblem(t, http.StatusConflict, subagent.ELimitExceeded, call{method: http.MethodPost, path: "/v1/subagents",
				body: map[string]any{"provider": spawn.Name, "parentSessionId": root, "label": "third", "prompt": textPrompt("hi")}})
			w.want(t, http.StatusCreated, runWith(first.ChildSessionID, "hi", nil))
			// Raising the limit admits the next one.
			w.want(t, http.StatusOK, patchLimits(root, map[string]any{"maxChildren": 3}))
			w.want(t, http.StatusCreated, runWith(root, "hi", nil))
		})
	}
}

// TestLimits_MaxConcurrent: a tree's live runs and activations are capped
// by maxConcurrent, counted from the store: beyond it 429 RATE_LIMITED
// with Retry-After; once a run settles a start is admitted again; another
// tree is not affected — on both stores.
func TestLimits_MaxConcurrent(t *testing.T) {
	for name, st := range bothStores {
		t.Run(name, func(t *testing.T) {
			w := setupWorldWith(t, st(t), echoRoute())
			root := w.limitedRoot(t, map[string]any{"maxConcurrent": 1})
			busy := w.sleeper(t, root)
			r := w.want(t, http.StatusTooManyRequests, runWith(root, "hi", nil))
			if p := r.problem(t); p.Code != subagent.ERateLimited || r.header.Get("Retry-After") == "" {
				t.Fatalf("problem %+v, Retry-After %q", p, r.header.Get("Retry-After"))
			}
			w.wantProblem(t, http.StatusTooManyRequests, subagent.ERateLimited, runWith(busy.ChildSessionID, "hi", nil))
			w.want(t, http.StatusCreated, runWith(w.rootSession(t), "hi", nil))
			w.want(t, http.StatusAccepted, call{method: http.MethodPost, path: "/v1/runs/" + busy.RunID + "/cancel"})
			w.settledRun(t, busy.RunID)
			w.want(t, http.StatusCreated, runWith(root, "hi", nil))
		})
	}
}

// TestLimits_ConcurrentStartsNeverOvershoot: starts sent at once into a
// tree are admitted one at a time (the tree's admission lock), so exactly
// maxConcurrent of them run and exactly maxChildren children exist, however
// the requests interleave — on both stores.
func TestLimits_ConcurrentStartsNeverOvershoot(t *testing.T) {
	const starts = 8
	for name, st := range bothStores {
		t.Run(name, func(t *testing.T) {
			w := setupWorldWith(t, st(t), echoRoute())
			count := func(root, prompt string) map[int][]string {
				t.Helper()
				var waits []func() response
				for range starts {
					waits = append(waits, w.async(t, runWith(root, prompt, nil)))
				}
				got := map[int][]string{}
				for _, wait := range waits {
					r := wait()
					var run runJSON
					if r.status == http.StatusCreated {
						r.decode(t, &run)
					}
					got[r.status] = append(got[r.status], run.RunID)
				}
				return got
			}

			busy := w.limitedRoot(t, map[string]any{"maxConcurrent": 2})
			got := count(busy, "/sleep 30s\nwork")
			if len(got[http.StatusCreated]) != 2 || len(got[http.StatusTooManyRequests]) != starts-2 {
				t.Fatalf("%d starts under maxConcurrent 2 answered %v, want 2 created and the rest 429", starts, counts(got))
			}
			for _, id := range got[http.StatusCreated] {
				w.want(t, http.StatusAccepted, call{method: http.MethodPost, path: "/v1/runs/" + id + "/cancel"})
				w.settledRun(t, id)
			}

			few := w.limitedRoot(t, map[string]any{"maxChildren": 3})
			got = count(few, "hi")
			if len(got[http.StatusCreated]) != 3 || len(got[http.StatusConflict]) != starts-3 {
				t.Fatalf("%d starts under maxChildren 3 answered %v, want 3 created and the rest 409", starts, counts(got))
			}
		})
	}
}

// counts is how many answers of each status got holds.
func counts(got map[int][]string) map[int]int {
	n := map[int]int{}
	for status, ids := range got {
		n[status] = len(ids)
	}
	return n
}

// TestLimits_MaxDepth: a tree's maxDepth caps the depth of every session
// in it, with the depth rule's own error (422 DEPTH_EXCEEDED), for
// providers without the depthLimit capability too — on both stores.
func TestLimits_MaxDepth(t *testing.T) {
	for name, st := range bothStores {
		t.Run(name, func(t *testing.T) {
			w := setupWorldWith(t, st(t), echoRoute())
			root := w.limitedRoot(t, map[string]any{"maxDepth": 1})
			child := w.startRun(t, spawn.Name, root, nil)
			p := w.wantProblem(t, http.StatusUnprocessableEntity, subagent.EDepthExceeded, runWith(child.ChildSessionID, "hi", nil))
			if p.Detail != "subagent depth 2 exceeds maxDepth 1" {
				t.Fatalf("detail %q", p.Detail)
			}
			w.want(t, http.StatusOK, patchLimits(root, map[string]any{"maxDepth": nil}))
			w.want(t, http.StatusCreated, runWith(child.ChildSessionID, "hi", nil))
		})
	}
}

// TestLimits_DeadlinePassed: after a tree's deadline every start is 409
// DEADLINE_EXCEEDED; a later deadline admits starts again — on both
// stores.
func TestLimits_DeadlinePassed(t *testing.T) {
	for name, st := range bothStores {
		t.Run(name, func(t *testing.T) {
			w := setupWorldWith(t, st(t), echoRoute())
			root := w.limitedRoot(t, map[string]any{"deadline": time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)})
			w.wantProblem(t, http.StatusConflict, subagent.EDeadlineExceeded, runWith(root, "hi", nil))
			w.wantProblem(t, http.StatusConflict, subagent.EDeadlineExceeded, call{method: http.MethodPost, path: "/v1/subagents",
				body: map[string]any{"provider": spawn.Name, "parentSessionId": root, "label": "late", "prompt": textPrompt("hi")}})
			w.want(t, http.StatusOK, patchLimits(root, map[string]any{"deadline": "24h"}))
			w.want(t, http.StatusCreated, runWith(root, "hi", nil))
		})
	}
}

// TestLimits_BudgetSpentRefusesStarts: once a tree's model calls spent its
// tokenBudget, starts are 409 BUDGET_EXHAUSTED and PATCH answers paused;
// raising it admits them again — on both stores.
func TestLimits_BudgetSpentRefusesStarts(t *testing.T) {
	for name, st := range bothStores {
		t.Run(name, func(t *testing.T) {
			w := setupWorldWith(t, st(t), echoRoute())
			root := w.limitedRoot(t, map[string]any{"tokenBudget": 1})
			run := w.settledRun(t, w.startRun(t, spawn.Name, root, nil).RunID)
			if run.Result.Usage.InputTokens+run.Result.Usage.OutputTokens < 1 {
				t.Fatalf("the echo run reported no tokens: %+v", run.Result.Usage)
			}
			w.wantProblem(t, http.StatusConflict, subagent.EBudgetExhausted, runWith(root, "hi", nil))
			w.wantProblem(t, http.StatusConflict, subagent.EBudgetExhausted, runWith(run.ChildSessionID, "hi", nil))
			var patched treeLimitsJSON
			w.want(t, http.StatusOK, patchLimits(root, map[string]any{"maxDepth": 5})).decode(t, &patched)
			if !patched.Paused || patched.Usage.Tokens < 1 {
				t.Fatalf("PATCH of a spent tree answered %+v", patched)
			}
			w.want(t, http.StatusOK, patchLimits(root, map[string]any{"tokenBudget": 1 << 30})).decode(t, &patched)
			if patched.Paused {
				t.Fatalf("PATCH raising the budget answered %+v", patched)
			}
			w.want(t, http.StatusCreated, runWith(root, "hi", nil))
		})
	}
}

// budgetModel plays the turns of TestLimits_BudgetPausesAndRaiseResumes:
// "loop" calls a tool that does not exist, again after each result, each
// call reporting 10 + 10 tokens; any other prompt is answered "re: …".
func budgetModel() *scripted.Model {
	usage := &model.Usage{InputTokens: 10, OutputTokens: 10}
	return scripted.Func(func(req model.Request) scripted.Step {
		last := req.Messages[len(req.Messages)-1]
		if text := model.Text(last.Content); last.Role == model.RoleUser && text != "loop" {
			return scripted.Step{Text: "re: " + text, Usage: &model.Usage{InputTokens: 1, OutputTokens: 1}}
		}
		return scripted.Step{ToolCalls: []model.ToolCall{{Name: "no_such_tool", Arguments: "{}"}}, Usage: usage}
	})
}

// TestLimits_BudgetPausesAndRaiseResumes: a root's turn that spends its
// tree's tokenBudget stops at its next step with budget_exhausted and
// tree/paused fires once; a child start is then 409 BUDGET_EXHAUSTED,
// while a prompt is accepted (202) and a followup to an idle continuable
// child too (route parked), and both wait in their inboxes; raising the
// budget fires tree/resumed and both run — on both stores.
func TestLimits_BudgetPausesAndRaiseResumes(t *testing.T) {
	for name, st := range bothStores {
		t.Run(name, func(t *testing.T) {
			w := setupWorldWith(t, st(t), scriptedRoute("s", budgetModel()))
			root := w.limitedRoot(t, map[string]any{"tokenBudget": 15})
			events := w.stream(t, "/v1/events?rootSessionId="+root, nil)
			defer events.close()
			kid := w.startChild(t, root, "hi", nil)
			w.settledTask(t, kid.TaskID) // 2 tokens
			rootLog := w.stream(t, "/v1/sessions/"+root+"/stream", nil)
			defer rootLog.close()

			w.want(t, http.StatusAccepted, call{method: http.MethodPost, path: "/v1/sessions/" + root + "/messages",
				body: map[string]any{"content": textPrompt("loop")}})
			end := untilEvent(t, rootLog, sessionlog.EventTurnEnd, nil)
			var data sessionlog.TurnEndData
			if err := json.Unmarshal(end.Data, &data); err != nil {
				t.Fatal(err)
			}
			if data.Reason.Kind != sessionlog.ReasonBudgetExhausted {
				t.Fatalf("the spending turn ended %+v, want budget_exhausted", data.Reason)
			}
			if f := untilFrame(t, events, governance.EventTreePaused); !strings.Contains(string(f.data), `"tokens":22`) {
				t.Fatalf("tree/paused %s, want 22 tokens spent", f.data)
			}
			w.wantProblem(t, http.StatusConflict, subagent.EBudgetExhausted, runWith(root, "hi", nil))

			var accepted promptResponse
			w.want(t, http.StatusAccepted, call{method: http.MethodPost, path: "/v1/sessions/" + root + "/messages",
				body: map[string]any{"content": textPrompt("hello")}}).decode(t, &accepted)
			pending, err := w.st.Pending(t.Context(), root)
			if err != nil {
				t.Fatal(err)
			}
			if len(pending) != 1 || pending[0].ID != accepted.MessageID {
				t.Fatalf("inbox of the paused root %+v, want the prompt %s waiting", pending, accepted.MessageID)
			}
			if got := userTexts(t, w.sessionLog(t, root)); slices.Contains(got, "hello") {
				t.Fatalf("the paused root's log has the waiting prompt: %v", got)
			}
			parked := w.followupOK(t, followup(kid.ChildID, root, "more"))
			if parked.Route != subagent.RouteParked || parked.TaskID != "" {
				t.Fatalf("followup to the paused tree's idle child answered %+v, want parked", parked)
			}
			if pending, err := w.st.Pending(t.Context(), kid.ChildID); err != nil || len(pending) != 1 {
				t.Fatalf("the paused child's inbox %+v (%v), want the followup", pending, err)
			}
			if n := len(w.lifecycleOf(t, governance.EventTreePaused)); n != 1 {
				t.Fatalf("%d tree/paused events, want 1", n)
			}

			var patched treeLimitsJSON
			w.want(t, http.StatusOK, patchLimits(root, map[string]any{"tokenBudget": 1000})).decode(t, &patched)
			if patched.Paused || patched.Usage.Tokens != 22 {
				t.Fatalf("PATCH answered %+v", patched)
			}
			untilFrame(t, events, governance.EventTreeResumed)
			end = untilEvent(t, rootLog, sessionlog.EventTurnEnd, nil)
			if err := json.Unmarshal(end.Data, &data); err != nil {
				t.Fatal(err)
			}
			if data.Reason.Kind != sessionlog.ReasonCompleted {
				t.Fatalf("the waiting prompt's turn ended %+v", data.Reason)
			}
			if got := userTexts(t, w.sessionLog(t, root)); !slices.Contains(got, "hello") {
				t.Fatalf("the resumed root's log lacks the waiting prompt: %v", got)
			}
			for {
				started := untilLifecycle(t, events, subagent.EventStart)
				if started.ID != kid.ChildID {
					continue
				}
				if run := w.settledTask(t, started.TaskID); run.Result.StopReason != subagent.StopCompleted || outputText(t, run) != "re: more" {
					t.Fatalf("the waiting followup's task settled %+v", run.Result)
				}
				break
			}
			w.want(t, http.StatusCreated, runWith(root, "hi", nil))
			if n := len(w.lifecycleOf(t, governance.EventTreeResumed)); n != 1 {
				t.Fatalf("%d tree/resumed events, want 1", n)
			}
		})
	}
}

// untilFrame reads stream s up to its next frame of event typ.
func untilFrame(t *testing.T, s *sseStream, typ string) frame {
	t.Helper()
	for {
		if f := s.next(t); f.event == typ {
			return f
		}
	}
}

// lifecycleOf returns the lifecycle events of type typ.
func (b *testBundle) lifecycleOf(t *testing.T, typ string) []store.LifecycleEvent {
	t.Helper()
	evs, err := b.st.Lifecycle(t.Context(), store.LifecycleFilter{Types: []string{typ}, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// TestLimits_DeadlineEndsLiveWork: a tree's deadline ends its live turns
// — a one-shot run and a continuable child's task, both asleep in a model
// call — with deadline_exceeded, and later starts are 409
// DEADLINE_EXCEEDED — on both stores.
func TestLimits_DeadlineEndsLiveWork(t *testing.T) {
	// The deadline leaves the two starts ample time on a loaded machine;
	// the sleeps are far longer, so only the deadline ends them.
	const deadline = 5 * time.Second
	for name, st := range bothStores {
		t.Run(name, func(t *testing.T) {
			w := setupWorldWith(t, st(t), echoRoute())
			root := w.limitedRoot(t, map[string]any{"deadline": deadline.String()})
			run := w.sleeper(t, root)
			task := w.startChild(t, root, "/sleep 30s\nresearch", nil)
			for _, got := range []runJSON{w.settledRun(t, run.RunID), w.settledTask(t, task.TaskID)} {
				if got.Result.StopReason != subagent.StopDeadlineExceeded || !strings.Contains(got.Result.Diagnostic, "deadline") {
					t.Errorf("%s %s settled %+v, want deadline_exceeded", got.Kind, got.RunID, got.Result)
				}
			}
			w.wantProblem(t, http.StatusConflict, subagent.EDeadlineExceeded, runWith(root, "hi", nil))
		})
	}
}

// TestLimits_IdleTimeout: a live turn that appends no event for its
// tree's idleTimeout (asleep in a model call) settles error, diagnostic
// "idle timeout"; a turn that keeps appending is not cut — on both stores.
func TestLimits_IdleTimeout(t *testing.T) {
	for name, st := range bothStores {
		t.Run(name, func(t *testing.T) {
			w := setupWorldWith(t, st(t), echoRoute())
			root := w.limitedRoot(t, map[string]any{"idleTimeout": "1s"})
			began := time.Now()
			got := w.settledRun(t, w.sleeper(t, root).RunID)
			if got.Result.StopReason != subagent.StopError || got.Result.Diagnostic != agent.IdleTimeout {
				t.Fatalf("the idle run settled %+v, want error, idle timeout", got.Result)
			}
			if took := time.Since(began); took < time.Second {
				t.Fatalf("the idle run was cut after %v, before its idleTimeout", took)
			}
			busy := w.settledRun(t, w.startRun(t, spawn.Name, root, nil).RunID)
			if busy.Result.StopReason != subagent.StopCompleted {
				t.Fatalf("a quick run settled %+v", busy.Result)
			}
		})
	}
}

// TestLimits_BudgetParksAFollowupSentDuringTheStoppedTurn: a followup
// sent while a child's turn spends its tree's budget — steered into that
// turn, which stops at its next step, or arriving as it settles — is not
// run by a new activation while the tree is paused: it is answered parked
// and runs once the budget is raised — on both stores.
func TestLimits_BudgetParksAFollowupSentDuringTheStoppedTurn(t *testing.T) {
	for name, st := range bothStores {
		t.Run(name, func(t *testing.T) {
			g := newGate()
			spent := scripted.Func(func(req model.Request) scripted.Step {
				last := req.Messages[len(req.Messages)-1]
				if text := model.Text(last.Content); last.Role == model.RoleUser && text != "loop" {
					return scripted.Step{Text: "re: " + text, Usage: &model.Usage{InputTokens: 1, OutputTokens: 1}}
				}
				return scripted.Step{ToolCalls: []model.ToolCall{{Name: "no_such_tool", Arguments: "{}"}},
					Usage: &model.Usage{InputTokens: 10, OutputTokens: 10}, Gate: g.open, Reached: g.reached}
			})
			w := setupWorldWith(t, st(t), scriptedRoute("s", spent))
			root := w.limitedRoot(t, map[string]any{"tokenBudget": 15})
			events := w.stream(t, "/v1/events?rootSessionId="+root, nil)
			defer events.close()
			kid := w.startChild(t, root, "loop", nil)
			await(t, g.reached, "the child's first step")
			answered := make(chan response, 1)
			go func() { answered <- w.do(t, followup(kid.ChildID, root, "more")) }()
			close(g.open)
			if run := w.settledTask(t, kid.TaskID); run.Result.StopReason != subagent.StopBudgetExhausted {
				t.Fatalf("the spending task settled %+v, want budget_exhausted", run.Result)
			}
			var r response
			select {
			case r = <-answered:
			case <-time.After(streamTimeout):
				t.Fatalf("the followup was not answered within %s", streamTimeout)
			}
			var parked followupResponse
			if r.status != http.StatusOK {
				t.Fatalf("the followup answered %d %s", r.status, r.body)
			}
			r.decode(t, &parked)
			if parked.Route != subagent.RouteParked {
				t.Fatalf("the followup sent during the stopped turn answered %+v, want parked", parked)
			}
			if runs, err := w.st.ListRuns(t.Context(), store.RunFilter{ChildID: kid.ChildID}); err != nil || len(runs) != 1 {
				t.Fatalf("the paused child has activations %+v (%v), want 1", runs, err)
			}
			w.want(t, http.StatusOK, patchLimits(root, map[string]any{"tokenBudget": 1000}))
			for {
				started := untilLifecycle(t, events, subagent.EventStart)
				if started.ID != kid.ChildID || started.TaskID == kid.TaskID {
					continue
				}
				if run := w.settledTask(t, started.TaskID); run.Result.StopReason != subagent.StopCompleted || outputText(t, run) != "re: more" {
					t.Fatalf("the parked followup's task settled %+v", run.Result)
				}
				break
			}
		})
	}
}
