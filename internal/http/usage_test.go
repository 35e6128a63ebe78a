package http

import (
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/model/scripted"
	"github.com/subagentd/subagentd/internal/providers/spawn"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// usageModel answers "re: <last text>" and reports random usage for each
// step, except for a prompt starting with "silent", whose step reports
// none. The seed is logged so that a failure can be replayed.
func usageModel(t *testing.T) *scripted.Model {
	seed := uint64(time.Now().UnixNano())
	t.Logf("usage seed %d", seed)
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(seed, seed>>7))
	return scripted.Func(func(req model.Request) scripted.Step {
		last := model.Text(req.Messages[len(req.Messages)-1].Content)
		st := scripted.Step{Text: "re: " + last}
		if !strings.HasPrefix(last, "silent") {
			mu.Lock()
			st.Usage = &model.Usage{InputTokens: 1 + rng.IntN(5000), OutputTokens: 1 + rng.IntN(2000)}
			mu.Unlock()
		}
		return st
	})
}

// usageOf reads GET /v1/sessions/{id}/usage in scope.
func (w *world) usageOf(t *testing.T, id, scope string) usageJSON {
	t.Helper()
	var u usageJSON
	w.want(t, http.StatusOK, call{method: http.MethodGet, path: "/v1/sessions/" + id + "/usage?scope=" + scope}).decode(t, &u)
	return u
}

// oneShot runs a spawn one-shot child of parent with prompt to its end.
func (w *world) oneShot(t *testing.T, parent, prompt string) runJSON {
	t.Helper()
	var run runJSON
	w.want(t, http.StatusCreated, call{method: http.MethodPost, path: "/v1/runs?wait=true", body: map[string]any{
		"provider": spawn.Name, "parentSessionId": parent, "prompt": textPrompt(prompt)}}).decode(t, &run)
	if run.State != store.StateSettled {
		t.Fatalf("run %s did not settle: %+v", run.RunID, run)
	}
	return run
}

// promptRoot sends a root session's agent prompt and waits for the turn to
// end.
func (w *world) promptRoot(t *testing.T, root, prompt string) {
	t.Helper()
	stream := w.stream(t, "/v1/sessions/"+root+"/stream?after=-1", nil)
	defer stream.close()
	w.want(t, http.StatusAccepted, call{method: http.MethodPost, path: "/v1/sessions/" + root + "/messages",
		body: map[string]any{"content": textPrompt(prompt)}})
	untilEvent(t, stream, sessionlog.EventTurnEnd, nil)
}

// logUsage is the usage a session's log records, folded from the log.
func (w *world) logUsage(t *testing.T, id string) store.Usage {
	t.Helper()
	return sessionlog.UsageOf(w.sessionLog(t, id))
}

// sameTokens fails t unless u's counts are those of the log usage want.
func sameTokens(t *testing.T, what string, u usageTotalsJSON, want store.Usage) {
	t.Helper()
	if u.InputTokens != want.InputTokens || u.OutputTokens != want.OutputTokens || u.ModelCalls != want.ModelCalls {
		t.Fatalf("%s: usage %+v, its log records %+v", what, u, want)
	}
}

// TestUsage_TreeIsTheSumOfItsSessions: on both stores, a root's own turn,
// a one-shot child, a continuable child with two activations and a
// grandchild each report the model usage their logs record; scope=tree is
// the sum of the root's and every descendant's scope=self and lists each of
// them; a child whose model reported no usage is known:false, and so is
// its tree. Bad scopes are 400, unknown sessions 404.
func TestUsage_TreeIsTheSumOfItsSessions(t *testing.T) {
	for name, st := range bothStores {
		t.Run(name, func(t *testing.T) {
			w := setupWorldWith(t, st(t), scriptedRoute("main", usageModel(t)))
			root := w.rootSession(t)
			one := w.oneShot(t, root, "one")
			kid := w.startChild(t, root, "two", nil)
			w.settledTask(t, kid.TaskID)
			next := w.followupOK(t, followup(kid.ChildID, root, "three"))
			w.settledTask(t, next.TaskID)
			grand := w.oneShot(t, kid.ChildID, "four")
			quiet := w.oneShot(t, root, "silent please")
			// The root's own turn comes last: its agent, once it ran, would
			// open a turn for each later child's settlement notice.
			w.promptRoot(t, root, "hi root")

			tree := w.usageOf(t, root, "tree")
			self := w.usageOf(t, root, "self")
			sameTokens(t, "root self", self.usageTotalsJSON, w.logUsage(t, root))
			if self.Children != nil || !self.Known || self.Runs != 0 || self.ModelCalls != 1 {
				t.Fatalf("root self %+v: want its one known call, no runs, no children", self)
			}
			wantRuns := map[string]int64{one.ChildSessionID: 1, kid.ChildID: 2, grand.ChildSessionID: 1, quiet.ChildSessionID: 1}
			if len(tree.Children) != len(wantRuns) {
				t.Fatalf("tree children %+v, want %v", tree.Children, wantRuns)
			}
			sum := self.usageTotalsJSON
			for _, c := range tree.Children {
				own := w.usageOf(t, c.SessionID, "self")
				if own.usageTotalsJSON != c.usageTotalsJSON {
					t.Fatalf("child %s in the tree %+v, its scope=self %+v", c.SessionID, c, own)
				}
				sameTokens(t, "child "+c.SessionID, c.usageTotalsJSON, w.logUsage(t, c.SessionID))
				// The silent child's model reported no usage: one call of
				// unknown usage; every other call reported.
				silent := c.SessionID == quiet.ChildSessionID
				if c.Known == silent || c.Runs != wantRuns[c.SessionID] || c.LiveRuns != 0 || c.ModelCalls != c.Runs ||
					(silent && c.InputTokens+c.OutputTokens != 0) {
					t.Fatalf("child %s %+v: want %d settled runs of one call each, known %v", c.SessionID, c, wantRuns[c.SessionID], !silent)
				}
				if c.SessionID == one.ChildSessionID {
					// The run's own row shows what its session sums.
					u := one.Result.Usage
					if u.InputTokens != c.InputTokens || u.OutputTokens != c.OutputTokens || u.ModelCalls != c.ModelCalls || !u.Known {
						t.Fatalf("run %s usage %+v, its session's %+v", one.RunID, u, c)
					}
				}
				sum.InputTokens += c.InputTokens
				sum.OutputTokens += c.OutputTokens
				sum.ModelCalls += c.ModelCalls
				sum.Runs += c.Runs
			}
			sum.Known = false // the silent child's
			if tree.usageTotalsJSON != sum {
				t.Fatalf("tree %+v, the sum of its sessions %+v", tree.usageTotalsJSON, sum)
			}
			sub := w.usageOf(t, kid.ChildID, "tree")
			if len(sub.Children) != 1 || sub.Children[0].SessionID != grand.ChildSessionID {
				t.Fatalf("the continuable child's tree %+v, want it and the grandchild", sub)
			}
			if sub.Known != true || sub.ModelCalls != 3 {
				t.Fatalf("the continuable child's tree %+v, want its two calls and the grandchild's, known", sub)
			}

			w.wantProblem(t, http.StatusBadRequest, subagent.EInvalidRequest,
				call{method: http.MethodGet, path: "/v1/sessions/" + root + "/usage?scope=everything", invalid: true})
			w.wantProblem(t, http.StatusNotFound, subagent.ESessionNotFound,
				call{method: http.MethodGet, path: "/v1/sessions/nope/usage?scope=tree"})
		})
	}
}

// TestEvents_RootSessionIDStreamsOneTree: on both stores, every run event
// names its tree's root, and /v1/events?rootSessionId= replays and then
// streams the events of that tree only — a grandchild's and a continuable
// child's activations included — never another tree's.
func TestEvents_RootSessionIDStreamsOneTree(t *testing.T) {
	for name, st := range bothStores {
		t.Run(name, func(t *testing.T) {
			w := setupWorldWith(t, st(t), scriptedRoute("main", usageModel(t)))
			a, b := w.rootSession(t), w.rootSession(t)
			mine := map[string]bool{}
			mine[w.oneShot(t, a, "one").RunID] = true
			w.oneShot(t, b, "other tree")
			kid := w.startChild(t, a, "two", nil)
			w.settledTask(t, kid.TaskID)
			mine[w.oneShot(t, kid.ChildID, "three").RunID] = true

			s := w.stream(t, "/v1/events?after=0&rootSessionId="+a, nil)
			defer s.close()
			seen := map[string]int{}
			for len(seen) < len(mine)+1 || !allTwice(seen) {
				f := s.next(t)
				var e lifecycleJSON
				f.decode(t, &e)
				if e.RootSessionID != a {
					t.Fatalf("frame %s %s of tree %q in tree %s's stream", f.event, f.data, e.RootSessionID, a)
				}
				if e.TaskID == "" && !mine[e.RunID] {
					t.Fatalf("frame %s %s is not a run of tree %s", f.event, f.data, a)
				}
				seen[e.RunID]++
			}
			// Live: another tree's run passes unseen, this tree's next run is
			// the next frame.
			w.oneShot(t, b, "other tree again")
			later := w.oneShot(t, a, "four")
			for _, want := range []string{subagent.EventStart, subagent.EventEnd} {
				f := s.next(t)
				var e lifecycleJSON
				f.decode(t, &e)
				if f.event != want || e.RunID != later.RunID || e.RootSessionID != a {
					t.Fatalf("live frame %s %s, want %s of run %s", f.event, f.data, want, later.RunID)
				}
			}
		})
	}
}

// allTwice reports whether every run seen had its start and its end.
func allTwice(seen map[string]int) bool {
	for _, n := range seen {
		if n != 2 {
			return false
		}
	}
	return true
}

func (f frame) decode(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(f.data, v); err != nil {
		t.Fatalf("frame %s %s: %v", f.event, f.data, err)
	}
}
