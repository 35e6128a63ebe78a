package http

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/children"
	"github.com/subagentd/subagentd/internal/config"
	"github.com/subagentd/subagentd/internal/governance"
	"github.com/subagentd/subagentd/internal/providers/acp"
	"github.com/subagentd/subagentd/internal/roots"
	"github.com/subagentd/subagentd/internal/subagent"
)

// The API over the real ACP provider and its fake agent
// (internal/providers/acp/testdata/fakeagent).

var (
	fakeAgentOnce sync.Once
	fakeAgentPath string
	fakeAgentErr  error
)

func fakeAgent(t *testing.T) string {
	t.Helper()
	fakeAgentOnce.Do(func() {
		dir, err := os.MkdirTemp("", "http-fakeagent-")
		if err != nil {
			fakeAgentErr = err
			return
		}
		fakeAgentPath = filepath.Join(dir, "fakeagent")
		if out, err := exec.Command("go", "build", "-o", fakeAgentPath, "../providers/acp/testdata/fakeagent").CombinedOutput(); err != nil {
			fakeAgentErr = fmt.Errorf("go build fake agent: %v\n%s", err, out)
		}
	})
	if fakeAgentErr != nil {
		t.Fatal(fakeAgentErr)
	}
	return fakeAgentPath
}

// acpWorld is a server with one ACP provider "fake" of the fake agent,
// env set, and a continuation manager; root is the workspace root.
type acpWorld struct {
	*testBundle
	p    *acp.Provider
	root string
}

func setupACP(t *testing.T, command string, env map[string]string) *acpWorld {
	t.Helper()
	w := &acpWorld{root: t.TempDir()}
	env["FAKE_STATE"], env["FAKE_MARKS"] = t.TempDir(), t.TempDir()
	w.testBundle = start(t, func(b *testBundle, cfg *Config) {
		p, err := acp.New(config.ProviderConfig{Name: "fake", Type: config.TypeACP, Command: command, Env: env,
			Permission: config.PermissionReject, DisposeEOFGrace: 10 * time.Second, DisposeGrace: 10 * time.Second,
			IdleTimeout: 10 * time.Second}, acp.Deps{Store: b.st, Logger: b.log, WorkspaceRoots: []string{w.root},
			Deadlines: cfg.Limits.(*governance.Limits)})
		if err != nil {
			t.Fatal(err)
		}
		if err := b.svc.Register(t.Context(), p); err != nil {
			t.Fatal(err)
		}
		w.p = p
		mgr := children.NewManager(b.svc, children.ManagerConfig{Logger: b.log})
		cfg.Continuations = mgr
		cfg.Trees = governance.NewTrees(governance.TreesConfig{Store: b.st, Runs: mgr, Roots: noRoots{}, Logger: b.log})
		cfg.Sessions = roots.New(roots.Config{Store: b.st, WorkspaceRoots: []string{w.root}, Limits: cfg.Limits})
		b.stops = append(b.stops, mgr.Shutdown, func(context.Context) error { return p.Close() })
	})
	return w
}

func (w *acpWorld) parent(t *testing.T) string {
	t.Helper()
	var s sessionJSON
	w.want(t, http.StatusCreated, call{method: http.MethodPost, path: "/v1/sessions",
		body: map[string]any{"label": "root", "cwd": w.root}}).decode(t, &s)
	return s.ID
}

func TestACP_AgentThatCannotStartIs502AgentUnavailable(t *testing.T) {
	t.Parallel()
	command := filepath.Join(t.TempDir(), "agent")
	if err := os.Symlink(fakeAgent(t), command); err != nil {
		t.Fatal(err)
	}
	w := setupACP(t, command, map[string]string{"FAKE_MODE": "text"})
	if err := os.Remove(command); err != nil { // gone since start-up
		t.Fatal(err)
	}
	p := w.wantProblem(t, http.StatusBadGateway, subagent.EAgentUnavailable, call{method: http.MethodPost, path: "/v1/runs",
		body: map[string]any{"provider": "fake", "parentSessionId": w.parent(t), "prompt": textPrompt("hi")}})
	if want := `ACP agent of provider "fake" is unavailable: cannot start ` + command + `: fork/exec ` + command + `: no such file or directory`; p.Detail != want {
		t.Fatalf("detail %q, want %q", p.Detail, want)
	}
}

func TestACP_ContinuableChildQueuesAFollowupDuringItsTurn(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ready, release := filepath.Join(dir, "ready"), filepath.Join(dir, "release")
	for _, f := range []string{ready, release} {
		if err := syscall.Mkfifo(f, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	w := setupACP(t, fakeAgent(t), map[string]string{"FAKE_MODE": "remember", "FAKE_CAPS": "resume",
		"FAKE_READY": ready, "FAKE_RELEASE": release})
	if err := w.p.Probe(t.Context()); err != nil {
		t.Fatal(err)
	}
	var prov struct{ Resume bool }
	w.want(t, http.StatusOK, call{method: http.MethodGet, path: "/v1/providers/fake"}).decode(t, &prov)
	if !prov.Resume {
		t.Fatal("GET /v1/providers/fake: resume is false for an agent advertising session/resume")
	}
	parent := w.parent(t)
	var created createSubagentResponse
	w.want(t, http.StatusCreated, call{method: http.MethodPost, path: "/v1/subagents",
		body: map[string]any{"provider": "fake", "parentSessionId": parent, "label": "coder", "prompt": textPrompt("block")}}).decode(t, &created)
	f, err := os.Open(ready) // the agent is inside its first prompt
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	var res followupResponse
	w.want(t, http.StatusOK, followup(created.ChildID, parent, "beta")).decode(t, &res)
	if res.Route != subagent.RouteQueued || res.TaskID != created.TaskID {
		t.Fatalf("followup = %+v, want queued in task %s", res, created.TaskID)
	}
	g, err := os.OpenFile(release, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	g.Close()
}

// noRoots is the Roots of tree control in a world without root agents.
type noRoots struct{}

func (noRoots) StopTurn(context.Context, string) (bool, error) { return false, nil }
func (noRoots) Dispose(context.Context, string) error          { return nil }

// TestACP_TreeCancelStopsTheAgent: a tree cancel of a parent whose ACP
// child hangs in its prompt sends the agent session/cancel; the run
// settles once, aborted with diagnostic "cancelled by tree", and the
// agent's process is gone by the answer.
func TestACP_TreeCancelStopsTheAgent(t *testing.T) {
	t.Parallel()
	ready := filepath.Join(t.TempDir(), "ready")
	if err := syscall.Mkfifo(ready, 0o600); err != nil {
		t.Fatal(err)
	}
	w := setupACP(t, fakeAgent(t), map[string]string{"FAKE_MODE": "hang", "FAKE_READY": ready})
	parent := w.parent(t)
	var run runJSON
	w.want(t, http.StatusCreated, call{method: http.MethodPost, path: "/v1/runs",
		body: map[string]any{"provider": "fake", "parentSessionId": parent, "prompt": textPrompt("hold")}}).decode(t, &run)
	pid := readPid(t, ready) // the agent is inside its prompt

	var got treeCancelResponse
	w.want(t, http.StatusAccepted, call{method: http.MethodPost, path: "/v1/sessions/" + parent + "/cancel"}).decode(t, &got)
	if got.Cancelled != 1 {
		t.Fatalf("cancelled %d, want 1", got.Cancelled)
	}
	var settled runJSON
	w.want(t, http.StatusOK, call{method: http.MethodGet, path: "/v1/runs/" + run.RunID}).decode(t, &settled)
	if settled.Result == nil || settled.Result.StopReason != subagent.StopAborted || settled.Result.Diagnostic != governance.DiagnosticCancelled {
		t.Fatalf("ACP run after the tree cancel: %+v", settled)
	}
	if err := syscall.Kill(pid, 0); err != syscall.ESRCH {
		t.Fatalf("the agent's process %d after the tree cancel: kill 0 = %v, want ESRCH", pid, err)
	}
}

// TestACP_DeadlineEndsTheTurn: an ACP child that hangs in its prompt past
// its tree's deadline — a one-shot run, and a continuable child's task —
// settles deadline_exceeded (its agent told session/cancel), as an
// in-process turn ends at the deadline.
func TestACP_DeadlineEndsTheTurn(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"one-shot", "continuable"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ready := filepath.Join(t.TempDir(), "ready")
			if err := syscall.Mkfifo(ready, 0o600); err != nil {
				t.Fatal(err)
			}
			w := setupACP(t, fakeAgent(t), map[string]string{"FAKE_MODE": "hang", "FAKE_CAPS": "resume", "FAKE_READY": ready})
			if err := w.p.Probe(t.Context()); err != nil {
				t.Fatal(err)
			}
			var root sessionJSON
			w.want(t, http.StatusCreated, call{method: http.MethodPost, path: "/v1/sessions",
				body: map[string]any{"label": "root", "cwd": w.root, "limits": map[string]any{"deadline": "3s"}}}).decode(t, &root)
			body := map[string]any{"provider": "fake", "parentSessionId": root.ID, "prompt": textPrompt("hold")}
			path := "/v1/runs/"
			var id string
			if kind == "one-shot" {
				var run runJSON
				w.want(t, http.StatusCreated, call{method: http.MethodPost, path: "/v1/runs", body: body}).decode(t, &run)
				id = run.RunID
			} else {
				body["label"] = "coder"
				var created createSubagentResponse
				w.want(t, http.StatusCreated, call{method: http.MethodPost, path: "/v1/subagents", body: body}).decode(t, &created)
				path, id = "/v1/tasks/", created.TaskID
			}
			readPid(t, ready) // the agent is inside its prompt
			var settled runJSON
			w.want(t, http.StatusOK, call{method: http.MethodGet, path: path + id + "?wait=30"}).decode(t, &settled)
			if settled.Result == nil || settled.Result.StopReason != subagent.StopDeadlineExceeded || !strings.Contains(settled.Result.Diagnostic, "deadline") {
				t.Fatalf("ACP %s past its tree's deadline: %+v", kind, settled)
			}
		})
	}
}

// readPid reads the pid the fake agent writes to FIFO path.
func readPid(t *testing.T, path string) int {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var pid int
	if _, err := fmt.Sscan(string(data), &pid); err != nil {
		t.Fatalf("pid %q: %v", data, err)
	}
	return pid
}

// TestACP_DisposeReleasesTheAgent: disposing a continuable ACP child
// whose turn hangs settles its task once, aborted, stops its agent's
// process before the 204, and refuses later followups with 409 DISPOSED.
func TestACP_DisposeReleasesTheAgent(t *testing.T) {
	t.Parallel()
	ready := filepath.Join(t.TempDir(), "ready")
	if err := syscall.Mkfifo(ready, 0o600); err != nil {
		t.Fatal(err)
	}
	w := setupACP(t, fakeAgent(t), map[string]string{"FAKE_MODE": "hang", "FAKE_CAPS": "resume", "FAKE_READY": ready})
	if err := w.p.Probe(t.Context()); err != nil {
		t.Fatal(err)
	}
	parent := w.parent(t)
	var created createSubagentResponse
	w.want(t, http.StatusCreated, call{method: http.MethodPost, path: "/v1/subagents",
		body: map[string]any{"provider": "fake", "parentSessionId": parent, "label": "coder", "prompt": textPrompt("hold")}}).decode(t, &created)
	pid := readPid(t, ready) // the agent is inside its prompt

	w.want(t, http.StatusNoContent, disposeChild(created.ChildID, parent))
	var task runJSON
	w.want(t, http.StatusOK, call{method: http.MethodGet, path: "/v1/tasks/" + created.TaskID}).decode(t, &task)
	if task.Result == nil || task.Result.StopReason != subagent.StopAborted {
		t.Fatalf("disposed ACP task: %+v", task)
	}
	if err := syscall.Kill(pid, 0); err != syscall.ESRCH {
		t.Fatalf("the agent's process %d after dispose: kill 0 = %v, want ESRCH", pid, err)
	}
	if ends := w.endsOf(t, task.RunID); len(ends) != 1 {
		t.Fatalf("disposed ACP task has %d subagent/end events", len(ends))
	}
	w.wantProblem(t, http.StatusConflict, subagent.EDisposed, followup(created.ChildID, parent, "more"))
}
