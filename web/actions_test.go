package web_test

import (
	"fmt"
	"testing"

	"github.com/chromedp/chromedp"
)

// Conditions on the session head, its action buttons and the composer.
const (
	headTask     = `document.querySelector('[data-testid="head-task"]')?.textContent`
	actionStatus = `document.querySelector('[data-testid="action-status"]')`
)

// actionsAre is true when the head offers exactly the action buttons ids,
// in this order.
func actionsAre(ids ...string) string {
	want := ""
	for i, id := range ids {
		if i > 0 {
			want += ","
		}
		want += "action-" + id
	}
	// Export is offered for every session and the tree controls are asked
	// about by treeActionsAre; the run's lifecycle actions are asked about here.
	return fmt.Sprintf(`[...document.querySelectorAll('#actions > button')].map(b => b.dataset.testid).filter(id => id !== 'action-export').join() === %s`, jsString(want))
}

// composerIs is true when the composer is shown, sends kind and its button
// says button.
func composerIs(kind, button string) string {
	return fmt.Sprintf(`!document.querySelector('#message-form').hidden && document.querySelector('#message-form').dataset.kind === %s &&
		document.querySelector('#message-send').textContent === %s && !document.querySelector('#message-send').disabled`, jsString(kind), jsString(button))
}

// assistantSays is true when the last assistant bubble of the transcript
// shows text and is in state ('streaming', 'final' or 'interrupted').
func assistantSays(text, state string) string {
	return fmt.Sprintf(`(() => {
		const m = [...document.querySelectorAll('[data-testid="msg-assistant"]')].at(-1);
		return !!m && m.dataset.state === %s && m.querySelector('[data-testid="assistant-text"]').textContent === %s;
	})()`, jsString(state), jsString(text))
}

// splicedForNextStep is true once the selected session's event log shows a
// message queued for the running turn's next model step: a followup or a
// steer was accepted and waits to be admitted.
const splicedForNextStep = `[...document.querySelectorAll('[data-testid="log-row"][data-type="agent/inbox/spliced"]')]
	.some(r => r.textContent.includes('→ next-step'))`

// startChildFromForm starts a continuable spawn child labelled label under a
// new root session through the delegate form and returns its id once its
// node is selected.
func startChildFromForm(b *browser, label, prompt string) string {
	b.t.Helper()
	b.do("choosing a continuable child of spawn",
		chromedp.SetValue(chromedp.CSS("#start-provider"), "spawn"),
		chromedp.Click(chromedp.CSS("#kind-child")))
	b.waitFor("the form asks for a label and offers Start child",
		`document.querySelector('#start-submit').textContent === 'Start child' && document.querySelector('#label-req').textContent === '(required)' &&
		document.querySelector('[data-testid="kind-help"]').textContent.includes('followups')`)
	b.do("filling and submitting the delegate form",
		chromedp.SendKeys(chromedp.CSS("#start-label"), label),
		chromedp.SendKeys(chromedp.CSS("#start-prompt"), prompt),
		chromedp.Click(chromedp.CSS("#start-submit")))
	b.waitFor("the new child's node is selected", selectedNode+`?.dataset.mode === 'continuable'`)
	return eval[string](b, "reading the child id", selectedNode+`.dataset.id`)
}

// send types text into the composer and sends it.
func send(b *browser, text string) {
	b.t.Helper()
	b.do("sending "+jsString(text)+" from the composer",
		chromedp.SendKeys(chromedp.CSS("#message-text"), text),
		chromedp.Click(chromedp.CSS("#message-send")))
}

// TestDashboard_R57_ContinuableChildFollowupSteeredThenStarted starts a
// continuable child through the form: its node appears as a running
// continuable child with its first task (R57: the start answers before the
// model is asked), offering interrupt but neither cancel nor dispose. A
// followup sent while it runs is answered "steered" once the child's next
// model step read it; after the task settled a followup is answered
// "started" and runs as a second task.
func TestDashboard_R57_ContinuableChildFollowupSteeredThenStarted(t *testing.T) {
	t.Parallel()
	hold := make(chan struct{})
	srv := startServer(t, replying(map[string]chan struct{}{"Research the topic": hold}))
	b := newBrowser(t)
	openDashboard(b, srv.URL)

	child := startChildFromForm(b, "researcher", "Research the topic")
	b.waitFor("the node is a running spawn child with one task", nodeIn(child, "running")+
		`?.querySelector('[data-testid="node-tasks"]')?.textContent === '1 task' && `+selectedNode+`.textContent.includes('spawn')`)
	var info struct {
		TaskID string `json:"taskId"`
	}
	srv.getJSON(t, "/v1/subagents/"+child, &info)
	b.waitFor("the head names the child's task", headTask+` === `+jsString(info.TaskID))
	b.waitFor("the transcript streams the first step", assistantSays("working on Research the topic", "streaming"))
	b.waitFor("only interrupt is offered", actionsAre("interrupt"))
	b.waitFor("the composer sends followups", composerIs("followup", "Send followup"))
	b.screenshot("running")

	send(b, "Also check the tests")
	b.waitFor("the page says the followup waits for the next model step",
		actionStatus+`.textContent.includes("waiting until the child's next model step admits it")`)
	b.waitFor("the followup is queued for the next step", splicedForNextStep)
	close(hold)
	b.waitFor("the page says the followup was steered, in words", actionStatus+`.dataset.route === 'steered' && `+
		actionStatus+`.textContent.startsWith('Followup steered into the running task')`)
	b.waitFor("the steered followup is answered in the same task", assistantSays("re: Also check the tests", "final"))
	b.waitFor("the task settled: the child is inactive, stopped completed, still one task",
		nodeIn(child, "inactive")+`?.dataset.stopReason === 'completed' && `+selectedNode+`.querySelector('[data-testid="node-tasks"]').textContent === '1 task'`)
	b.waitFor("interrupt is gone with the running task", actionsAre())
	b.screenshot("steered")

	b.waitFor("the composer still sends followups", composerIs("followup", "Send followup"))
	send(b, "Now summarize")
	b.waitFor("the page says the followup started a new task, in words", actionStatus+`.dataset.route === 'started' && `+
		actionStatus+`.textContent.startsWith('Followup started a new task')`)
	b.waitFor("the new task is answered", assistantSays("re: Now summarize", "final"))
	b.waitFor("the child ran two tasks and is inactive again",
		nodeIn(child, "inactive")+`?.dataset.stopReason === 'completed' && `+selectedNode+`.querySelector('[data-testid="node-tasks"]').textContent === '2 tasks'`)
	first := info.TaskID
	srv.getJSON(t, "/v1/subagents/"+child, &info)
	if info.TaskID == first {
		t.Fatalf("the started followup ran in the first task %s", first)
	}
	b.waitFor("the head names the second task", headTask+` === `+jsString(info.TaskID))
	b.screenshot("started")
}

// TestDashboard_R102_InterruptStopsTheRunningChild: interrupt is offered
// only while a continuable child runs; pressing it ends the current turn
// aborted (R102), the child becomes inactive and the button goes, and the
// composer still offers a followup to resume it.
func TestDashboard_R102_InterruptStopsTheRunningChild(t *testing.T) {
	t.Parallel()
	hold := make(chan struct{}) // never opened: only the interrupt ends the step
	srv := startServer(t, replying(map[string]chan struct{}{"Investigate the outage": hold}))
	b := newBrowser(t)
	openDashboard(b, srv.URL)

	child := startChildFromForm(b, "investigator", "Investigate the outage")
	b.waitFor("the child runs and streams", nodeIn(child, "running")+` && `+assistantSays("working on Investigate the outage", "streaming"))
	b.waitFor("interrupt is offered", actionsAre("interrupt"))
	b.click("pressing interrupt", `[data-testid="action-interrupt"]`)
	b.waitFor("the page says the interrupt was accepted", actionStatus+`.textContent.startsWith('Interrupt accepted')`)
	b.waitFor("the child is inactive, its task stopped aborted", nodeIn(child, "inactive")+`?.dataset.stopReason === 'aborted'`)
	b.waitFor("the turn ended aborted in the transcript",
		`[...document.querySelectorAll('[data-testid="turn-end"]')].at(-1)?.textContent.includes('aborted')`)
	b.waitFor("interrupt is gone and a followup can resume the child", actionsAre()+` && `+composerIs("followup", "Send followup")+
		` && document.querySelector('#message-help').textContent.includes('resumes it')`)
	b.screenshot("interrupted")
}

// TestDashboard_R23_R28_CancelThenDisposeOneShotRun: a running one-shot
// run offers cancel and dispose (not interrupt); cancel settles it aborted
// (R23) and leaves dispose; dispose marks it disposed and leaves nothing to
// press, while its transcript stays readable.
func TestDashboard_R23_R28_CancelThenDisposeOneShotRun(t *testing.T) {
	t.Parallel()
	hold := make(chan struct{}) // never opened: only the cancel ends the step
	srv := startServer(t, replying(map[string]chan struct{}{"Count to a million": hold}))
	b := newBrowser(t)
	openDashboard(b, srv.URL)

	child := startRunFromForm(b, "counter", "Count to a million")
	b.waitFor("the run streams", assistantSays("working on Count to a million", "streaming"))
	b.waitFor("cancel and dispose are offered", actionsAre("cancel", "dispose"))
	b.screenshot("running")

	b.click("pressing cancel", `[data-testid="action-cancel"]`)
	b.waitFor("the run settled aborted", nodeIn(child, "aborted")+`?.dataset.stopReason === 'aborted'`)
	b.waitFor("only dispose is left and the composer is read-only", actionsAre("dispose")+
		` && document.querySelector('#message-form').hidden && document.querySelector('#readonly-note').textContent.includes('aborted')`)
	b.screenshot("cancelled")

	runID := eval[string](b, "reading the run id", `document.querySelector('[data-testid="head-run"]').textContent`)
	b.click("pressing dispose", `[data-testid="action-dispose"]`)
	b.waitFor("the page says the run is disposed", actionStatus+`.textContent.startsWith('Run disposed')`)
	b.waitFor("the node says disposed and no action is left", selectedNode+`?.querySelector('[data-testid="node-disposed"]') && `+actionsAre())
	b.waitFor("the transcript is still there", assistantSays("working on Count to a million", "interrupted")+
		` || `+assistantSays("working on Count to a million", "final"))
	var run struct {
		State string `json:"state"`
	}
	srv.getJSON(t, "/v1/runs/"+runID, &run)
	if run.State != "disposed" {
		t.Errorf("run %s is %q after dispose, want disposed", runID, run.State)
	}
	b.screenshot("disposed")
}

// TestDashboard_SteerRunningOneShotRun: spawn advertises steer, so a
// running one-shot run offers the steer composer; a steer is answered once
// the run's next model step admitted it, and that step answers it.
func TestDashboard_SteerRunningOneShotRun(t *testing.T) {
	t.Parallel()
	hold := make(chan struct{})
	srv := startServer(t, replying(map[string]chan struct{}{"Write a haiku": hold}))
	b := newBrowser(t)
	openDashboard(b, srv.URL)

	child := startRunFromForm(b, "poet", "Write a haiku")
	b.waitFor("the run streams", assistantSays("working on Write a haiku", "streaming"))
	b.waitFor("the composer steers", composerIs("steer", "Steer"))
	send(b, "About autumn")
	b.waitFor("the steer is queued for the next step", splicedForNextStep)
	close(hold)
	b.waitFor("the page says the model admitted the steer", actionStatus+`.textContent.startsWith('Steer admitted by the model')`)
	b.waitFor("the next step answers the steer", assistantSays("re: About autumn", "final"))
	b.waitFor("the admitted steer is marked steered, the prompt is not", `(() => {
		const m = [...document.querySelectorAll('[data-testid="msg-user"]')];
		return m.length === 2 && !m[0].querySelector('[data-testid="steered"]') &&
			m[1].querySelector('[data-testid="steered"]')?.textContent === '↪ steered' && m[1].textContent.includes('About autumn');
	})()`)
	b.waitFor("the run completed", nodeIn(child, "completed"))
	b.screenshot("steered")
}

// TestDashboard_MessageRootSessionStreamsItsTurn is a first-time user's
// other path: create a root session, message its own agent, and watch the
// turn stream in the transcript while the root shows as running.
func TestDashboard_MessageRootSessionStreamsItsTurn(t *testing.T) {
	t.Parallel()
	hold := make(chan struct{})
	srv := startServer(t, replying(map[string]chan struct{}{"Plan the release": hold}))
	b := newBrowser(t)
	openDashboard(b, srv.URL)
	b.waitFor("the empty page says how to begin", `!document.querySelector('[data-testid="tree-empty"]').hidden`)
	b.screenshot("first-visit")

	b.do("creating a root session",
		chromedp.SendKeys(chromedp.CSS("#root-label"), "planner"),
		chromedp.Click(chromedp.CSS("#root-create")))
	b.waitFor("the root is selected", selectedNode+`?.dataset.mode === 'root' && document.querySelector('#session-title').textContent === 'planner'`)
	b.waitFor("the composer messages the root agent", composerIs("root", "Send")+
		` && document.querySelector('#message-label').textContent === 'Message the root agent'`)
	send(b, "Plan the release")
	b.waitFor("the page says the message was accepted", actionStatus+`.textContent.startsWith('Accepted')`)
	b.waitFor("the transcript shows the message and streams the answer",
		`[...document.querySelectorAll('[data-testid="msg-user"]')].some(m => m.textContent.includes('Plan the release')) && `+
			assistantSays("working on Plan the release", "streaming"))
	b.waitFor("the root shows running", selectedNode+`?.dataset.state === 'running'`)
	b.screenshot("streaming")

	close(hold)
	b.waitFor("the answer is final and the turn ended", assistantSays("working on Plan the release", "final")+
		` && document.querySelectorAll('[data-testid="turn-end"]').length === 1`)
	b.waitFor("the root is inactive again", selectedNode+`?.dataset.state === 'inactive'`)
	b.screenshot("answered")
}
