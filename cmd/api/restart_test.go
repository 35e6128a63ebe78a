package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/subagentd/subagentd/internal/pg/pgtest"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/subagent"
)

// The restart tests run the real binary on Postgres, start runs whose model
// never answers, stop the process (SIGTERM, or SIGKILL) and start it again.

// goBinary is a binary the tests build once per test process.
type goBinary struct {
	once sync.Once
	path string
	err  error
}

// build builds pkg, as the module in dir names it, into a binary called
// name the first time it is called, and returns its path; a failed build
// fails t (and every later caller).
func (b *goBinary) build(t *testing.T, name, dir, pkg string) string {
	t.Helper()
	b.once.Do(func() {
		tmp, err := os.MkdirTemp("", "subagentd-test-bin-")
		if err != nil {
			b.err = err
			return
		}
		b.path = filepath.Join(tmp, name)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "go", "build", "-o", b.path, pkg)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build %s in %s: %v\n%s", pkg, dir, err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// subagentd is this package's binary.
var subagentd goBinary

// binary builds cmd/api once per test process.
func binary(t *testing.T) string {
	t.Helper()
	return subagentd.build(t, "subagentd", ".", ".")
}

// stallingModel is an OpenAI-compatible server whose streams send one text
// delta and then hold until the client goes away.
func stallingModel(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, `data: {"id":"1","object":"chat.completion.chunk","created":1,"model":"slow","choices":[{"index":0,"delta":{"role":"assistant","content":"working"}}]}`+"\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	t.Cleanup(func() { srv.CloseClientConnections(); srv.Close() })
	return srv
}

// server is one running subagentd process.
type server struct {
	cmd  *exec.Cmd
	base string
	mu   sync.Mutex
	logs []map[string]any
	more chan struct{} // closed and replaced on every new log record
	exit chan error
}

// startServer runs the binary with env and waits until it listens.
func startServer(t *testing.T, env map[string]string) *server {
	t.Helper()
	cmd := exec.Command(binary(t))
	cmd.Env = append(os.Environ(), "SUBAGENTD_ADDR=127.0.0.1:0")
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &server{cmd: cmd, more: make(chan struct{}), exit: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var rec map[string]any
			if json.Unmarshal(sc.Bytes(), &rec) != nil {
				rec = map[string]any{"msg": "not JSON: " + sc.Text()}
			}
			s.mu.Lock()
			s.logs = append(s.logs, rec)
			close(s.more)
			s.more = make(chan struct{})
			s.mu.Unlock()
		}
		s.exit <- cmd.Wait()
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
		}
	})
	s.base = "http://" + s.waitLog(t, "listening")["addr"].(string)
	return s
}

// waitLog returns the first log record with message msg.
func (s *server) waitLog(t *testing.T, msg string) map[string]any {
	t.Helper()
	timeout := time.After(60 * time.Second)
	for i := 0; ; {
		s.mu.Lock()
		for ; i < len(s.logs); i++ {
			if s.logs[i]["msg"] == msg {
				rec := s.logs[i]
				s.mu.Unlock()
				return rec
			}
		}
		more := s.more
		s.mu.Unlock()
		select {
		case <-more:
		case err := <-s.exit:
			t.Fatalf("server exited (%v) before logging %q", err, msg)
		case <-timeout:
			t.Fatalf("no %q in the server log", msg)
		}
	}
}

// stop sends sig and waits for the process to end.
func (s *server) stop(t *testing.T, sig syscall.Signal) error {
	t.Helper()
	if err := s.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-s.exit:
		return err
	case <-time.After(60 * time.Second):
		t.Fatalf("server did not exit after %v", sig)
		return nil
	}
}

// call does one JSON request and decodes the answer into out (if non-nil),
// failing unless the status is want.
func (s *server) call(t *testing.T, method, path, body string, want int, out any) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, s.base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("%s %s = %d %s, want %d", method, path, resp.StatusCode, data, want)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("decode %s: %v", data, err)
		}
	}
}

// frame is one SSE frame of /v1/events.
type frame struct {
	id    int64
	event string
	data  map[string]any
	raw   string // data as sent
}

// scanFrames calls fn with each frame of an SSE stream of /v1/events
// until fn returns false or the stream ends.
func scanFrames(r io.Reader, fn func(frame) bool) error {
	var cur frame
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "id: "):
			id, err := strconv.ParseInt(strings.TrimPrefix(line, "id: "), 10, 64)
			if err != nil {
				return fmt.Errorf("frame id: %w", err)
			}
			cur.id = id
		case strings.HasPrefix(line, "event: "):
			cur.event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			cur.raw = strings.TrimPrefix(line, "data: ")
			if err := json.Unmarshal([]byte(cur.raw), &cur.data); err != nil {
				return fmt.Errorf("frame data: %w", err)
			}
		case line == "" && cur.event != "":
			if !fn(cur) {
				return nil
			}
			cur = frame{}
		}
	}
	return sc.Err()
}

// readFrames reads frames from /v1/events after lastID until it has n, or
// fails.
func (s *server) readFrames(t *testing.T, lastID int64, n int) []frame {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	// Only run edges.
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.base+"/v1/events?types=subagent/start,subagent/end", nil)
	req.Header.Set("Last-Event-ID", strconv.FormatInt(lastID, 10))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var frames []frame
	err = scanFrames(resp.Body, func(f frame) bool {
		frames = append(frames, f)
		return len(frames) < n
	})
	if len(frames) < n {
		t.Fatalf("read %d frames after %d, want %d (%v)", len(frames), lastID, n, err)
	}
	return frames
}

// restartEnv is the environment of one test's servers: its own database,
// a stable replica id and a model route that never answers.
func restartEnv(t *testing.T) map[string]string {
	model := stallingModel(t)
	cfg := filepath.Join(t.TempDir(), "subagentd.yaml")
	yaml := fmt.Sprintf("models:\n  - name: slow\n    baseURL: %s\n    model: slow\ndefaultModel: slow\n", model.URL)
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return map[string]string{
		"DATABASE_URL": pgtest.URL(t), "SUBAGENTD_CONFIG": cfg, "SUBAGENTD_REPLICA_ID": "replica-" + t.Name(),
	}
}

// startStalledRuns creates a root session and n runs that stay running.
func startStalledRuns(t *testing.T, s *server, n int) (sessionID string, runIDs []string) {
	t.Helper()
	var sess struct{ ID string }
	s.call(t, http.MethodPost, "/v1/sessions", `{"label":"restart"}`, http.StatusCreated, &sess)
	for i := range n {
		var run struct{ RunID string }
		body := fmt.Sprintf(`{"provider":"spawn","parentSessionId":%q,"prompt":[{"type":"text","text":"task %d"}]}`, sess.ID, i)
		s.call(t, http.MethodPost, "/v1/runs", body, http.StatusCreated, &run)
		runIDs = append(runIDs, run.RunID)
	}
	return sess.ID, runIDs
}

// runResult is the part of GET /v1/runs/{id} the restart tests check.
type runResult struct {
	State  string
	Result *struct {
		StopReason string
		Diagnostic string
	}
}

func TestRestart_SIGKILL_RunsOfTheLostOwnerEndOnceAtTheNextStart(t *testing.T) {
	t.Parallel()
	env := restartEnv(t)
	a := startServer(t, env)
	sessionID, runs := startStalledRuns(t, a, 3)
	before := a.readFrames(t, 0, 3) // the three subagent/start
	var events struct{ Events []json.RawMessage }
	a.call(t, http.MethodGet, "/v1/sessions/"+sessionID+"/events", "", http.StatusOK, &events)

	if err := a.stop(t, syscall.SIGKILL); err == nil {
		t.Fatal("SIGKILL: process exited cleanly")
	}
	b := startServer(t, env)
	// Everything acknowledged before the kill is still there.
	var again struct{ Events []json.RawMessage }
	b.call(t, http.MethodGet, "/v1/sessions/"+sessionID+"/events", "", http.StatusOK, &again)
	if len(again.Events) != len(events.Events) {
		t.Fatalf("root log has %d events after the restart, %d before", len(again.Events), len(events.Events))
	}
	// A client resuming after the last start it saw gets exactly the three
	// ends, in order, and nothing else.
	after := b.readFrames(t, before[len(before)-1].id, 3)
	ended := map[string]bool{}
	for i, f := range after {
		if f.event != subagent.EventEnd || f.data["stopReason"] != subagent.StopError {
			t.Fatalf("frame %d after restart = %s %v, want subagent/end with stopReason error", i, f.event, f.data)
		}
		if i > 0 && f.id <= after[i-1].id {
			t.Fatalf("frame ids out of order: %d after %d", f.id, after[i-1].id)
		}
		ended[f.data["runId"].(string)] = true
	}
	for _, id := range runs {
		if !ended[id] {
			t.Fatalf("run %s got no subagent/end after the restart", id)
		}
		var r runResult
		b.call(t, http.MethodGet, "/v1/runs/"+id, "", http.StatusOK, &r)
		if r.State != "settled" || r.Result == nil || !strings.Contains(r.Result.Diagnostic, "owner lost") {
			t.Fatalf("run %s after restart = %+v, want settled with an owner-lost diagnostic", id, r)
		}
	}
	// A second restart adds no second end.
	if err := b.stop(t, syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
	startServer(t, env) // recovers before it listens
	pool, err := pgxpool.New(t.Context(), env["DATABASE_URL"])
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var ends int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM lifecycle_events WHERE type = $1`, subagent.EventEnd).Scan(&ends); err != nil {
		t.Fatal(err)
	}
	if ends != len(runs) {
		t.Fatalf("the lifecycle log holds %d ends for %d runs", ends, len(runs))
	}
	// Three starts with the same providers (spawn, fork) logged them once.
	var added int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM lifecycle_events WHERE type = $1`, subagent.EventProviderAdded).Scan(&added); err != nil {
		t.Fatal(err)
	}
	if added != 2 {
		t.Fatalf("three starts with two providers logged %d provider-added", added)
	}
}

func TestRestart_SIGTERM_RunsSettleAbortedBeforeExit(t *testing.T) {
	t.Parallel()
	env := restartEnv(t)
	a := startServer(t, env)
	_, runs := startStalledRuns(t, a, 2)
	if err := a.stop(t, syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM: exit %v, want a clean exit", err)
	}
	a.waitLog(t, "stopped")
	b := startServer(t, env)
	frames := b.readFrames(t, 0, 4)
	for _, id := range runs {
		var r runResult
		b.call(t, http.MethodGet, "/v1/runs/"+id, "", http.StatusOK, &r)
		if r.State != "settled" || r.Result == nil || r.Result.StopReason != subagent.StopAborted {
			t.Fatalf("run %s after a graceful stop = %+v, want settled aborted", id, r)
		}
	}
	starts, ends := 0, 0
	for _, f := range frames {
		switch f.event {
		case subagent.EventStart:
			starts++
		case subagent.EventEnd:
			ends++
			if f.data["stopReason"] != subagent.StopAborted {
				t.Fatalf("end %v, want aborted", f.data)
			}
		}
	}
	if starts != 2 || ends != 2 {
		t.Fatalf("%d starts and %d ends, want 2 and 2", starts, ends)
	}
}

// waitChildEvent reads the child's session stream until pred holds for an
// event (by type and raw data), or fails.
func (s *server) waitChildEvent(t *testing.T, childID string, pred func(typ, data string) bool) {
	t.Helper()
	s.waitStream(t, "/v1/sessions/"+childID+"/stream?after=-1", pred)
}

// waitStream reads the SSE stream at path until pred holds for an event.
func (s *server) waitStream(t *testing.T, path string, pred func(typ, data string) bool) {
	t.Helper()
	waitSSE(t, s.base+path, pred)
}

// waitSSE reads the SSE stream at url until pred holds for an event (by
// type and raw data), or fails after 30 s.
func waitSSE(t *testing.T, url string, pred func(typ, data string) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	var typ string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			typ = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			if pred(typ, strings.TrimPrefix(line, "data: ")) {
				return
			}
		}
	}
	t.Fatalf("%s: the awaited event never came (%v)", url, sc.Err())
}

// childLog returns the child's log as (type, data) pairs.
func (s *server) childLog(t *testing.T, childID string) (types []string, data []string) {
	t.Helper()
	var page struct {
		Events []struct {
			Type string
			Data json.RawMessage
		}
	}
	s.call(t, http.MethodGet, "/v1/sessions/"+childID+"/events?limit=1000", "", http.StatusOK, &page)
	for _, e := range page.Events {
		types, data = append(types, e.Type), append(data, string(e.Data))
	}
	return types, data
}

// A followup accepted just before a SIGKILL runs after the restart, the
// child's history is intact, and the next followup cold-resumes it.
func TestRestart_SIGKILL_AcceptedFollowupRunsAfterRestart(t *testing.T) {
	t.Parallel()
	env := restartEnv(t)
	a := startServer(t, env)
	var sess struct{ ID string }
	a.call(t, http.MethodPost, "/v1/sessions", `{"label":"restart"}`, http.StatusCreated, &sess)
	var child struct{ ChildID, TaskID string }
	a.call(t, http.MethodPost, "/v1/subagents", fmt.Sprintf(`{"provider":"spawn","parentSessionId":%q,"label":"worker","prompt":[{"type":"text","text":"first"}]}`, sess.ID), http.StatusCreated, &child)
	a.waitChildEvent(t, child.ChildID, func(typ, data string) bool { return typ == "assistant/chunk" && strings.Contains(data, "working") })

	// The followup steers into the stalled turn: it is accepted (durable)
	// but never admitted, so its answer never comes before the kill.
	go func() {
		body := fmt.Sprintf(`{"parentSessionId":%q,"content":[{"type":"text","text":"second"}]}`, sess.ID)
		resp, err := http.Post(a.base+"/v1/subagents/"+child.ChildID+"/followup", "application/json", strings.NewReader(body))
		if err == nil {
			resp.Body.Close()
		}
	}()
	a.waitChildEvent(t, child.ChildID, func(typ, data string) bool {
		return typ == "agent/inbox/spliced" && strings.Contains(data, `"second"`)
	})
	if err := a.stop(t, syscall.SIGKILL); err == nil {
		t.Fatal("SIGKILL: process exited cleanly")
	}

	// The restarted replica uses the echo model: the recovered followup runs.
	delete(env, "SUBAGENTD_CONFIG")
	b := startServer(t, env)
	b.waitChildEvent(t, child.ChildID, func(typ, data string) bool {
		return typ == "assistant/message" && strings.Contains(data, "echo: second")
	})
	types, data := b.childLog(t, child.ChildID)
	var users []string
	descriptors := 0
	for i, typ := range types {
		switch typ {
		case "user/message":
			var m struct{ Content []struct{ Text string } }
			if err := json.Unmarshal([]byte(data[i]), &m); err != nil {
				t.Fatal(err)
			}
			users = append(users, m.Content[0].Text)
		case sessionlog.EventDescriptor:
			descriptors++
		}
	}
	if strings.Join(users, ",") != "first,second" || descriptors != 1 {
		t.Fatalf("child log users %v and %d descriptors, want [first second] and 1", users, descriptors)
	}

	// Once the recovered activation settled, the next followup cold-resumes.
	b.waitStream(t, "/v1/events?after=0&types=subagent/end", func(_, data string) bool {
		return strings.Contains(data, `"id":"`+child.ChildID+`"`) && strings.Contains(data, "echo: second")
	})
	var fu struct {
		Route  subagent.Route
		TaskID string
	}
	b.call(t, http.MethodPost, "/v1/subagents/"+child.ChildID+"/followup",
		fmt.Sprintf(`{"parentSessionId":%q,"content":[{"type":"text","text":"third"}]}`, sess.ID), http.StatusOK, &fu)
	if fu.Route != subagent.RouteStarted {
		t.Fatalf("followup after the recovered activation settled answered %+v, want route started", fu)
	}
	b.waitChildEvent(t, child.ChildID, func(typ, data string) bool {
		return typ == "assistant/message" && strings.Contains(data, "echo: third")
	})
}
