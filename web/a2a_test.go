package web_test

import (
	"testing"
	"time"
)

// An A2A child's log reads like any child's: its text is the transcript's
// answer, and the event log names the remote task and context each turn
// ran as (a2a/task).
func TestDashboard_A2AChildShowsItsRemoteTask(t *testing.T) {
	t.Parallel()
	srv := startServer(t, replying(nil))
	sd := srv.seeder(t)
	t0 := time.Now().Add(-time.Minute)
	root := sd.root("delegates", t0)
	child := sd.child(root, "remote", "one-shot", "researcher", t0)
	evs := turn(1, "find the paper", "found it", 0, 0)
	// The remote task is named after the step opened, before the text.
	evs = append(evs[:3:3], append([]event{ev("a2a/task", map[string]any{"turn": 1, "taskId": "task-7", "contextId": "ctx-3"})}, evs[3:]...)...)
	sd.events(child, t0.Add(time.Second), evs...)
	sd.run(seedRun{child: child, parent: root, provider: "remote", start: t0.Add(900 * time.Millisecond), end: t0.Add(2 * time.Second), stop: "completed"})

	b := newBrowser(t)
	openDashboard(b, srv.URL+"/#s="+child)
	b.waitFor("the transcript shows the remote's answer", assistantSays("found it", "final"))
	openTab(b, "log")
	b.waitFor("the event log names the remote task and its context", `[...document.querySelectorAll('[data-testid="log-row"][data-type="a2a/task"]')]
		.some((r) => r.textContent.includes('turn 1: remote task task-7 in context ctx-3'))`)
}
