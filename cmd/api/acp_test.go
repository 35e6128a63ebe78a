package main

import (
	"bufio"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/subagentd/subagentd/internal/pg/pgtest"
	"github.com/subagentd/subagentd/internal/subagent"
)

// No agent outlives its replica: after a SIGKILL of a subagentd
// running an agent that ignores stdin EOF and one with a child process of
// its own, and a restart, none of the agent processes remains.
func TestRestart_SIGKILL_LeavesNoAgentProcess(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fake := filepath.Join(dir, "fakeagent")
	if out, err := exec.Command("go", "build", "-o", fake, "../../internal/providers/acp/testdata/fakeagent").CombinedOutput(); err != nil {
		t.Fatalf("build fake agent: %v\n%s", err, out)
	}
	root, tmp := t.TempDir(), t.TempDir() // the workspace; TMPDIR holds the agent records
	deafReady, parentReady := fifo(t, dir, "deaf"), fifo(t, dir, "parent")
	cfg := filepath.Join(dir, "subagentd.yaml")
	yaml := fmt.Sprintf(`workspaceRoots: [%s]
providers:
  - name: deaf
    command: %s
    env: {FAKE_MODE: orphan, FAKE_TEARDOWN: ignoreeof, FAKE_READY: %s}
  - name: parent
    command: %s
    env: {FAKE_MODE: orphan, FAKE_GRANDCHILD: "1", FAKE_READY: %s}
`, root, fake, deafReady, fake, parentReady)
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"SUBAGENTD_CONFIG": cfg, "TMPDIR": tmp, "DATABASE_URL": ""}

	s := startServer(t, env)
	var sess struct{ ID string }
	s.call(t, http.MethodPost, "/v1/sessions", fmt.Sprintf(`{"label":"orphans","cwd":%q}`, root), http.StatusCreated, &sess)
	for _, name := range []string{"deaf", "parent"} {
		body := fmt.Sprintf(`{"provider":%q,"parentSessionId":%q,"prompt":[{"type":"text","text":"work"}]}`, name, sess.ID)
		s.call(t, http.MethodPost, "/v1/runs", body, http.StatusCreated, nil)
	}
	readPID(t, deafReady)
	readPID(t, parentReady)
	agents := processesOf(t, fake)
	t.Cleanup(func() { // a failed test leaves nothing behind either
		for _, pid := range processesOf(t, fake) { // never a recycled pid
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	if len(agents) < 3 {
		t.Fatalf("%d agent processes run, want the two agents and the child of one", len(agents))
	}
	if err := s.stop(t, syscall.SIGKILL); err == nil {
		t.Fatal("the server survived SIGKILL")
	}

	s2 := startServer(t, env) // reaps before it listens
	for _, pid := range agents {
		waitExit(t, pid)
	}
	if left := processesOf(t, fake); len(left) > 0 {
		// Only the new server's own agents (its capability probes) may run.
		for _, pid := range left {
			for _, old := range agents {
				if pid == old {
					t.Fatalf("agent process %d of the killed server still runs", pid)
				}
			}
		}
	}
	if err := s2.stop(t, syscall.SIGTERM); err != nil {
		t.Fatalf("second server: %v", err)
	}
}

func fifo(t *testing.T, dir, name string) string {
	path := filepath.Join(dir, name+".ready")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// readPID blocks until the agent wrote its pid to the FIFO.
func readPID(t *testing.T, path string) int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	line, err := bufio.NewReader(f).ReadString('\n')
	pid, convErr := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || convErr != nil {
		t.Fatalf("ready FIFO %s: %q, %v", path, line, err)
	}
	return pid
}

// processesOf lists the live (not zombie) processes running exe.
func processesOf(t *testing.T, exe string) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if path, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); err != nil || path != exe {
			continue
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if i := strings.LastIndexByte(string(stat), ')'); err == nil && i > 0 {
			if f := strings.Fields(string(stat[i+1:])); len(f) > 0 && f[0] != "Z" {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// waitExit waits, on a pidfd, until process pid has terminated.
func waitExit(t *testing.T, pid int) {
	t.Helper()
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return
	}
	if err != nil {
		t.Fatalf("pidfd_open %d: %v", pid, err)
	}
	defer unix.Close(fd)
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, int((10 * time.Second).Milliseconds()))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			t.Fatalf("poll pidfd of %d: %v", pid, err)
		}
		if n == 0 {
			t.Fatalf("agent process %d of the killed server still runs", pid)
		}
		return
	}
}

// A continuable ACP child survives a restart of subagentd on Postgres: the
// followup after it resumes the agent's own session, which remembers the
// first prompt.
func TestRestart_ContinuableACPChildResumesItsSession(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fake := filepath.Join(dir, "fakeagent")
	if out, err := exec.Command("go", "build", "-o", fake, "../../internal/providers/acp/testdata/fakeagent").CombinedOutput(); err != nil {
		t.Fatalf("build fake agent: %v\n%s", err, out)
	}
	root, state, marks := t.TempDir(), t.TempDir(), t.TempDir()
	cfg := filepath.Join(dir, "subagentd.yaml")
	yaml := fmt.Sprintf(`workspaceRoots: [%s]
providers:
  - name: coder
    command: %s
    env: {FAKE_MODE: remember, FAKE_CAPS: resume, FAKE_STATE: %s, FAKE_MARKS: %s}
`, root, fake, state, marks)
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"SUBAGENTD_CONFIG": cfg, "DATABASE_URL": pgtest.URL(t), "SUBAGENTD_REPLICA_ID": "replica-" + t.Name()}

	s := startServer(t, env)
	var sess struct{ ID string }
	s.call(t, http.MethodPost, "/v1/sessions", fmt.Sprintf(`{"label":"acp","cwd":%q}`, root), http.StatusCreated, &sess)
	var created struct{ ChildID, TaskID string }
	s.call(t, http.MethodPost, "/v1/subagents", fmt.Sprintf(`{"provider":"coder","parentSessionId":%q,"label":"coder","prompt":[{"type":"text","text":"alpha"}]}`, sess.ID),
		http.StatusCreated, &created)
	if got := taskText(t, s, created.TaskID); got != "remembered: " {
		t.Fatalf("first task answered %q", got)
	}
	if err := s.stop(t, syscall.SIGTERM); err != nil {
		t.Fatalf("server: %v", err)
	}

	s2 := startServer(t, env)
	var res struct {
		Route  subagent.Route
		TaskID string
	}
	s2.call(t, http.MethodPost, "/v1/subagents/"+created.ChildID+"/followup",
		fmt.Sprintf(`{"parentSessionId":%q,"content":[{"type":"text","text":"beta"}]}`, sess.ID), http.StatusOK, &res)
	if res.Route != subagent.RouteStarted {
		t.Fatalf("followup after the restart = %+v, want started", res)
	}
	if got := taskText(t, s2, res.TaskID); got != "remembered: alpha" {
		t.Fatalf("followup after the restart answered %q, want the agent to remember alpha", got)
	}
	if _, err := os.Stat(filepath.Join(marks, "resume")); err != nil {
		t.Fatalf("the agent got no session/resume: %v", err)
	}
	if err := s2.stop(t, syscall.SIGTERM); err != nil {
		t.Fatalf("second server: %v", err)
	}
}

// taskText waits for task id to settle completed and returns its output's
// text.
func taskText(t *testing.T, s *server, id string) string {
	t.Helper()
	var task struct {
		State  string
		Result *struct {
			StopReason string
			Output     []struct{ Text string }
		}
	}
	s.call(t, http.MethodGet, "/v1/tasks/"+id+"?wait=30", "", http.StatusOK, &task)
	if task.State != "settled" || task.Result == nil || task.Result.StopReason != subagent.StopCompleted {
		t.Fatalf("task %s = %+v, want settled completed", id, task)
	}
	var text strings.Builder
	for _, b := range task.Result.Output {
		text.WriteString(b.Text)
	}
	return text.String()
}
