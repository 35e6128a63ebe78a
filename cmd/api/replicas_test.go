package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/subagentd/subagentd/internal/pg/pgtest"
	"github.com/subagentd/subagentd/internal/subagent"
)

// replicaTTL is the lease of the replica tests: short, so that a takeover
// is quick, yet three renewals long enough that a loaded machine does not
// fence a live replica.
const replicaTTL = 2 * time.Second

// takeoverBound bounds how long after a SIGKILL another replica closes
// the killed one's runs: the lease lapses within replicaTTL and the next
// lease round (a third of it) finds it, about 1.4 × replicaTTL on an idle
// machine; five times the TTL leaves a loaded one room while still telling
// a lapse-driven takeover from none. How fast it is belongs in bench/.
const takeoverBound = 5 * replicaTTL

// replicaEnv is the environment of replica name on database db: the echo
// model, no tokens, a short lease.
func replicaEnv(db, name string) map[string]string {
	return map[string]string{
		"DATABASE_URL": db, "SUBAGENTD_REPLICA_ID": name, "SUBAGENTD_LEASE_TTL": replicaTTL.String(),
		"SUBAGENTD_CONFIG": "", "OPENAI_BASE_URL": "", "SUBAGENTD_MODEL": "", "SUBAGENTD_TOKENS": "",
	}
}

// received is a frame and when the test read it.
type received struct {
	frame
	at time.Time
}

// feed follows an SSE stream of /v1/events in the background and keeps
// every frame, so that a test waits for events that came before or after
// it asked.
type feed struct {
	mu     sync.Mutex
	frames []received
	more   chan struct{} // closed and replaced on every new frame
	ended  error         // why the stream ended, once it did
}

// follow subscribes to path (a /v1/events URL) on s until the test ends.
func (s *server) follow(t *testing.T, path string) *feed {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, s.base+path, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		t.Fatalf("GET %s = %s", path, resp.Status)
	}
	f := &feed{more: make(chan struct{})}
	go func() {
		defer resp.Body.Close()
		err := scanFrames(resp.Body, func(fr frame) bool {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.frames = append(f.frames, received{fr, time.Now()})
			close(f.more)
			f.more = make(chan struct{})
			return true
		})
		f.mu.Lock()
		defer f.mu.Unlock()
		f.ended = fmt.Errorf("the stream ended (%v)", err)
		close(f.more)
	}()
	return f
}

// wait returns the first frame for which pred holds, waiting up to 30 s.
func (f *feed) wait(t *testing.T, what string, pred func(frame) bool) received {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for i := 0; ; {
		f.mu.Lock()
		for ; i < len(f.frames); i++ {
			if pred(f.frames[i].frame) {
				r := f.frames[i]
				f.mu.Unlock()
				return r
			}
		}
		more, ended := f.more, f.ended
		f.mu.Unlock()
		if ended != nil {
			t.Fatalf("waiting for %s: %v", what, ended)
		}
		select {
		case <-more:
		case <-timeout:
			t.Fatalf("no %s on the stream within 30s", what)
		}
	}
}

// start waits for the subagent/start of task (an activation) or run (a
// one-shot run), by the key the frame carries ("taskId" or "runId").
func (f *feed) start(t *testing.T, key, id string) received {
	t.Helper()
	return f.wait(t, "subagent/start of "+id, func(fr frame) bool { return fr.event == subagent.EventStart && fr.data[key] == id })
}

// end waits for the subagent/end of task or run, as start does.
func (f *feed) end(t *testing.T, key, id string) received {
	t.Helper()
	return f.wait(t, "subagent/end of "+id, func(fr frame) bool { return fr.event == subagent.EventEnd && fr.data[key] == id })
}

// ids returns the lifecycle ids of every frame received so far.
func (f *feed) ids() []int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	ids := make([]int64, len(f.frames))
	for i, fr := range f.frames {
		ids[i] = fr.id
	}
	return ids
}

// prompt is a JSON prompt of one text block.
func prompt(text string) string {
	return fmt.Sprintf(`[{"type":"text","text":%q}]`, text)
}

// startChild creates a continuable child of parent with provider on s and
// returns it with its first task.
func (s *server) startChild(t *testing.T, provider, parent, label, text string) (childID, taskID string) {
	t.Helper()
	var c struct{ ChildID, TaskID string }
	s.call(t, http.MethodPost, "/v1/subagents", fmt.Sprintf(`{"provider":%q,"parentSessionId":%q,"label":%q,"prompt":%s}`,
		provider, parent, label, prompt(text)), http.StatusCreated, &c)
	return c.ChildID, c.TaskID
}

// followupAnswer is the answer to a followup.
type followupAnswer struct {
	Route             subagent.Route
	TaskID, MessageID string
}

// followup sends a followup to child through s.
func (s *server) followup(t *testing.T, parent, child, text string) followupAnswer {
	t.Helper()
	var fu followupAnswer
	s.call(t, http.MethodPost, "/v1/subagents/"+child+"/followup", fmt.Sprintf(`{"parentSessionId":%q,"content":%s}`, parent, prompt(text)), http.StatusOK, &fu)
	return fu
}

// countMessage counts the user/messages with id msgID in session's log.
func (s *server) countMessage(t *testing.T, session, msgID string) int {
	t.Helper()
	types, data := s.childLog(t, session)
	n := 0
	for i, typ := range types {
		if typ == "user/message" && strings.Contains(data[i], `"id":"`+msgID+`"`) {
			n++
		}
	}
	return n
}

// Two replicas as real processes on one database:
// B serves every route for what A drives — a followup to A's running child
// is steered into it, so is a steer of A's one-shot run, cancel, dispose
// and interrupt through B stop A's
// runs, a prompt through B reaches the root A is driving — and B's
// subscriber sees A's events exactly once, in order. After a SIGKILL of A,
// B closes A's runs once their lease lapsed (within takeoverBound) and
// resumes A's child.
func TestReplicas_EveryRouteOnEveryReplica_AndTakeoverAfterSIGKILL(t *testing.T) {
	t.Parallel()
	db := pgtest.URL(t)
	a := startServer(t, replicaEnv(db, "replica-a"))
	b := startServer(t, replicaEnv(db, "replica-b"))
	events := b.follow(t, "/v1/events?after=0")

	var parent, driven struct{ ID string }
	a.call(t, http.MethodPost, "/v1/sessions", `{"label":"parent"}`, http.StatusCreated, &parent)
	a.call(t, http.MethodPost, "/v1/sessions", `{"label":"driven root"}`, http.StatusCreated, &driven)

	// A drives a child and a root, each in a turn of a few seconds.
	steered, steeredTask := a.startChild(t, "spawn", parent.ID, "steered", "/sleep 4s\nfirst")
	a.call(t, http.MethodPost, "/v1/sessions/"+driven.ID+"/messages", fmt.Sprintf(`{"content":%s}`, prompt("/sleep 4s\nfirst turn")), http.StatusAccepted, nil)
	events.start(t, "taskId", steeredTask)
	b.waitStream(t, "/v1/sessions/"+driven.ID+"/stream?after=-1", func(typ, _ string) bool { return typ == "step/start" })
	// B reports the root A is driving as running: activity is read from
	// the store, not from B's own agents.
	var seen struct{ Activity string }
	b.call(t, http.MethodGet, "/v1/sessions/"+driven.ID, "", http.StatusOK, &seen)
	if seen.Activity != "running" {
		t.Fatalf("B reports the root A drives through a turn as %q, want running", seen.Activity)
	}

	// (a) A followup through B is steered into A's running child.
	// It answers once a step admitted it: a second, meanwhile, goes on.
	type answer struct {
		status int
		body   []byte
		err    error
	}
	followed := make(chan answer, 1)
	go func() {
		status, body, err := post(b.base, "/v1/subagents/"+steered+"/followup",
			fmt.Sprintf(`{"parentSessionId":%q,"content":%s}`, parent.ID, prompt("second")))
		followed <- answer{status, body, err}
	}()
	// A steer through B reaches the one-shot run A drives.
	var steeredRun struct{ RunID, ChildSessionID string }
	a.call(t, http.MethodPost, "/v1/runs", fmt.Sprintf(`{"provider":"spawn","parentSessionId":%q,"prompt":%s}`, parent.ID, prompt("/sleep 4s\nfirst")), http.StatusCreated, &steeredRun)
	events.start(t, "runId", steeredRun.RunID)
	steerDone := make(chan answer, 1)
	go func() {
		status, body, err := post(b.base, "/v1/runs/"+steeredRun.RunID+"/steer", fmt.Sprintf(`{"content":%s}`, prompt("steered run")))
		steerDone <- answer{status, body, err}
	}()
	// A prompt through B reaches the root A is driving.
	var rootMsg struct{ MessageID string }
	b.call(t, http.MethodPost, "/v1/sessions/"+driven.ID+"/messages", fmt.Sprintf(`{"content":%s}`, prompt("second turn")), http.StatusAccepted, &rootMsg)

	// (b) Cancel, dispose and interrupt through B stop A's runs: its
	// children's activations and its one-shot runs.
	for _, op := range []string{"cancel", "dispose", "interrupt", "cancel one-shot", "dispose one-shot"} {
		var child, runID string
		if strings.HasSuffix(op, " one-shot") {
			var run struct{ RunID string }
			a.call(t, http.MethodPost, "/v1/runs", fmt.Sprintf(`{"provider":"spawn","parentSessionId":%q,"prompt":%s}`, parent.ID, prompt("/sleep 5m\nhold")), http.StatusCreated, &run)
			runID = events.start(t, "runId", run.RunID).data["runId"].(string)
		} else {
			var task string
			child, task = a.startChild(t, "spawn", parent.ID, op, "/sleep 5m\nhold")
			runID = events.start(t, "taskId", task).data["runId"].(string)
		}
		switch strings.TrimSuffix(op, " one-shot") {
		case "cancel":
			b.call(t, http.MethodPost, "/v1/runs/"+runID+"/cancel", "", http.StatusAccepted, nil)
		case "dispose":
			b.call(t, http.MethodDelete, "/v1/runs/"+runID, "", http.StatusNoContent, nil)
		case "interrupt":
			b.call(t, http.MethodPost, "/v1/subagents/"+child+"/interrupt", fmt.Sprintf(`{"parentSessionId":%q}`, parent.ID), http.StatusAccepted, nil)
		}
		if end := events.end(t, "runId", runID); end.data["stopReason"] != subagent.StopAborted {
			t.Fatalf("%s through B: A's run ended %v, want aborted", op, end.raw)
		}
	}

	ans := <-followed
	var fu followupAnswer
	if ans.err != nil || ans.status != http.StatusOK || json.Unmarshal(ans.body, &fu) != nil {
		t.Fatalf("followup through B = %d %s (%v), want 200", ans.status, ans.body, ans.err)
	}
	// Steered into A's running task; or, when that task settled before
	// the followup reached A (a loaded machine), started as a new task
	// only after it: then the running task's end precedes the new
	// task's start on the lifecycle stream.
	switch fu.Route {
	case subagent.RouteSteered:
		if fu.TaskID != steeredTask {
			t.Fatalf("followup steered into task %s, want A's running task %s", fu.TaskID, steeredTask)
		}
	case subagent.RouteStarted:
		ended, started := events.end(t, "taskId", steeredTask), events.start(t, "taskId", fu.TaskID)
		if fu.TaskID == steeredTask || !(ended.id < started.id) {
			t.Fatalf("followup started task %s (start id %d) while A's task %s (end id %d) ran: neither steered nor after it",
				fu.TaskID, started.id, steeredTask, ended.id)
		}
	default:
		t.Fatalf("followup through B answered %+v, want steered or started", fu)
	}
	t.Logf("followup through B to A's running child: %s", fu.Route)
	if end := events.end(t, "taskId", fu.TaskID); !strings.Contains(end.raw, "echo: second") {
		t.Fatalf("the followed-up task ended %s, want the answer to the followup", end.raw)
	}
	if n := b.countMessage(t, steered, fu.MessageID); n != 1 {
		t.Fatalf("the followup is in the child's log %d times, want once", n)
	}

	sa := <-steerDone
	var steer struct{ MessageID string }
	if sa.err != nil || sa.status != http.StatusOK || json.Unmarshal(sa.body, &steer) != nil || steer.MessageID == "" {
		t.Fatalf("steer through B = %d %s (%v), want 200 with a message id", sa.status, sa.body, sa.err)
	}
	if end := events.end(t, "runId", steeredRun.RunID); end.data["stopReason"] != subagent.StopCompleted || !strings.Contains(end.raw, "echo: steered run") {
		t.Fatalf("the steered one-shot run ended %s, want completed with the answer to the steer", end.raw)
	}
	if n := b.countMessage(t, steeredRun.ChildSessionID, steer.MessageID); n != 1 {
		t.Fatalf("the steer is in the run's log %d times, want once", n)
	}

	// The root's second prompt ran as one turn after the first: no two
	// replicas drove it at once.
	b.waitStream(t, "/v1/sessions/"+driven.ID+"/stream?after=-1", func(typ, data string) bool {
		return typ == "assistant/message" && strings.Contains(data, "echo: second turn")
	})
	if n := b.countMessage(t, driven.ID, rootMsg.MessageID); n != 1 {
		t.Fatalf("the prompt through B is in the root's log %d times, want once", n)
	}
	types, _ := b.childLog(t, driven.ID)
	open, turns := 0, 0
	for _, typ := range types {
		switch typ {
		case "turn/start":
			if open++; open > 1 {
				t.Fatalf("the root's log opens a turn inside another: %v", types)
			}
			turns++
		case "turn/end":
			open--
		}
	}
	if turns < 2 {
		t.Fatalf("the root's log holds %d turns, want both prompts' turns: %v", turns, types)
	}

	// (d) SIGKILL of A: B closes A's runs once their lease lapsed.
	orphan, orphanTask := a.startChild(t, "spawn", parent.ID, "orphan", "/sleep 5m\nhold")
	orphanRun := events.start(t, "taskId", orphanTask).data["runId"].(string)
	var oneShot struct{ RunID string }
	a.call(t, http.MethodPost, "/v1/runs", fmt.Sprintf(`{"provider":"spawn","parentSessionId":%q,"prompt":%s}`, parent.ID, prompt("/sleep 5m\nhold")), http.StatusCreated, &oneShot)
	events.start(t, "runId", oneShot.RunID)
	killed := time.Now()
	if err := a.stop(t, syscall.SIGKILL); err == nil {
		t.Fatal("SIGKILL: process exited cleanly")
	}
	for _, run := range []string{orphanRun, oneShot.RunID} {
		end := events.end(t, "runId", run)
		if took := end.at.Sub(killed); end.data["stopReason"] != subagent.StopError || took > takeoverBound {
			t.Fatalf("A's run %s ended %s %v after the SIGKILL, want stopReason error within %v", run, end.raw, took, takeoverBound)
		}
		t.Logf("B closed A's run %s %v after the SIGKILL (lease %v)", run, end.at.Sub(killed).Round(time.Millisecond), replicaTTL)
		var r runResult
		b.call(t, http.MethodGet, "/v1/runs/"+run, "", http.StatusOK, &r)
		if r.Result == nil || !strings.Contains(r.Result.Diagnostic, "owner lost") {
			t.Fatalf("A's run %s after the takeover = %+v, want an owner-lost diagnostic", run, r)
		}
	}
	// A followup through B resumes A's child.
	resumed := b.followup(t, parent.ID, orphan, "after the crash")
	if resumed.Route != subagent.RouteStarted {
		t.Fatalf("followup to the orphaned child answered %+v, want started", resumed)
	}
	if end := events.end(t, "taskId", resumed.TaskID); end.data["stopReason"] != subagent.StopCompleted || !strings.Contains(end.raw, "echo: after the crash") {
		t.Fatalf("the resumed task ended %s, want completed with the answer to the followup", end.raw)
	}
	if n := b.countMessage(t, orphan, resumed.MessageID); n != 1 {
		t.Fatalf("the followup is in the resumed child's log %d times, want once", n)
	}

	// (c) B's subscriber got every lifecycle event, A's and its own,
	// exactly once and in order.
	pool, err := pgxpool.New(t.Context(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	rows, err := pool.Query(t.Context(), `SELECT id FROM lifecycle_events ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	var want []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		want = append(want, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	last := want[len(want)-1]
	events.wait(t, fmt.Sprintf("lifecycle event %d", last), func(fr frame) bool { return fr.id == last })
	if got := events.ids(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("B's subscriber got lifecycle ids %v, the database holds %v", got, want)
	}
}
