package web_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/subagentd/subagentd/internal/model/scripted"
)

// usageTree is a seeded delegation tree whose token usage is known: the
// root's own step (100 in / 20 out) delegates "notes" through a tool call
// and later reads its settlement notice; "notes" (one-shot, 300/50)
// completes with a structured output; "helper" (continuable) has two
// activations, 40/10 and 60/15, the second aborted. Tree: 500 in / 95 out.
type usageTree struct {
	root, notes, helper        string
	notesRun, helperA, helperB string
}

func seedUsageTree(t *testing.T, srv *testServer) usageTree {
	sd := srv.seeder(t)
	t0 := time.Now().Add(-5 * time.Minute)
	var u usageTree
	u.root = sd.root("planner", t0)
	u.notes = sd.child(u.root, "spawn", "one-shot", "notes", t0.Add(time.Second))
	u.helper = sd.child(u.root, "spawn", "continuable", "helper", t0.Add(2*time.Second))

	text := func(s string) []map[string]string { return []map[string]string{{"type": "text", "text": s}} }
	sd.events(u.root, t0.Add(500*time.Millisecond),
		ev("user/message", map[string]any{"id": "m1", "role": "user", "content": text("Plan the release"), "source": map[string]string{"kind": "user"}}),
		ev("turn/start", map[string]any{"turn": 1}),
		ev("assistant/message", map[string]any{"turn": 1, "step": 1, "message": map[string]any{"role": "assistant", "content": text("Delegating the notes.")},
			"usage": map[string]int{"inputTokens": 100, "outputTokens": 20}}),
		ev("tool/call", map[string]any{"turn": 1, "step": 1, "callId": "call-1", "name": "subagent_spawn", "arguments": `{"prompt":"Write notes"}`}),
		ev("tool/result", map[string]any{"turn": 1, "step": 1, "callId": "call-1", "name": "subagent_spawn", "content": text("started subagent " + u.notes)}),
		ev("turn/end", map[string]any{"turn": 1, "reason": map[string]string{"kind": "completed"}}),
		ev("user/message", map[string]any{"id": "m2", "role": "user", "content": text("notes settled: completed"),
			"source": map[string]string{"kind": "subagent-settled", "form": "notice", "summary": "notes completed", "senderSessionId": u.notes}}),
	)
	sd.events(u.notes, t0.Add(1100*time.Millisecond), turn(1, "Write notes", "Here are the notes", 300, 50)...)
	u.notesRun = sd.run(seedRun{child: u.notes, parent: u.root, provider: "spawn",
		start: t0.Add(time.Second), end: t0.Add(2500 * time.Millisecond), stop: "completed", output: "Here are the notes", structured: map[string]int{"pages": 3}, in: 300, out: 50})

	u.helperA = sd.run(seedRun{child: u.helper, parent: u.root, provider: "spawn", taskID: "task-a",
		start: t0.Add(2 * time.Second), end: t0.Add(3 * time.Second), stop: "completed", output: "first pass", in: 40, out: 10})
	sd.events(u.helper, t0.Add(2100*time.Millisecond), turn(1, "Check the changelog", "first pass", 40, 10)...)
	u.helperB = sd.run(seedRun{child: u.helper, parent: u.root, provider: "spawn", taskID: "task-b",
		start: t0.Add(4 * time.Second), end: t0.Add(4250 * time.Millisecond), stop: "aborted", in: 60, out: 15})
	sd.events(u.helper, t0.Add(4100*time.Millisecond), turn(2, "And the README", "second pass", 60, 15)...)
	return u
}

func runCardUsage(runID string) string {
	return fmt.Sprintf(`document.querySelector('[data-testid="run-card"][data-run=%s] [data-testid="run-usage"]')?.textContent`, jsString(runID))
}

// TestDashboard_UsageTraceAndLinks: token usage is shown per
// activation, per session and summed over the tree; each run's result,
// structured output and stop reason are on its card; the trace draws
// every run of the tree as a span, nested under the tool call that
// started it and coloured by state; a tool call
// and a settlement notice in the parent's transcript link to the child, and
// the link selects it; the event log folds chunks into their message and
// filters by type.
func TestDashboard_UsageTraceAndLinks(t *testing.T) {
	t.Parallel()
	srv := startServer(t, scripted.New())
	u := seedUsageTree(t, srv)
	b := newBrowser(t)
	openDashboard(b, srv.URL+"/#s="+u.helper)

	b.waitFor("each activation shows its own tokens",
		runCardUsage(u.helperA)+` === '40 in / 10 out tokens' && `+runCardUsage(u.helperB)+` === '60 in / 15 out tokens'`)
	b.waitFor("the head shows the session's tokens, as the API sums them", `document.querySelector('[data-testid="head-usage"]').textContent === '100 in / 25 out tokens' &&
		document.querySelector('[data-testid="head-usage"]').dataset.source === 'api'`)
	b.waitFor("the head shows the tree's tokens, as the API sums them",
		`document.querySelector('[data-testid="head-tree-usage"]')?.textContent === '500 in / 95 out tokens' && document.querySelector('[data-testid="head-tree-usage"]').dataset.source === 'api'`)
	b.waitFor("the aborted activation says so and lasted 250 ms", fmt.Sprintf(`(() => {
		const c = document.querySelector('[data-testid="run-card"][data-run=%s]');
		return c.querySelector('[data-testid="run-stop"]').textContent === 'aborted' && c.querySelector('[data-testid="run-duration"]').textContent === '250 ms';
	})()`, jsString(u.helperB)))
	b.waitFor("each turn end shows its duration and tokens",
		`[...document.querySelectorAll('[data-testid="turn-usage"]')].map(e => e.textContent).join('|') === ' · 40 in / 10 out tokens| · 60 in / 15 out tokens'`)
	b.screenshot("usage")

	openTab(b, "timeline")
	b.waitFor("the tree's tokens are summed over every log", `document.querySelector('[data-testid="tree-usage"]')?.textContent.includes('500 in / 95 out tokens') &&
		!document.querySelector('[data-testid="tree-usage"]').textContent.includes('read')`)
	b.waitFor("three runs as invoke_agent spans, notes inside the tool call that started it, coloured by state", fmt.Sprintf(`(() => {
		const spans = [...document.querySelectorAll('[data-testid="span"]')];
		const runs = Object.fromEntries(spans.filter(s => s.dataset.kind === 'invoke_agent').map(s => [s.dataset.run, s]));
		const tool = spans.find(s => s.dataset.name === 'execute_tool subagent_spawn');
		const bar = (s) => s.parentElement.querySelector('.span-bar');
		return Object.keys(runs).length === 3 && !!tool &&
			runs[%[1]s].dataset.name === 'invoke_agent spawn' && Number(runs[%[1]s].dataset.depth) === Number(tool.dataset.depth) + 1 &&
			spans.indexOf(runs[%[1]s]) === spans.indexOf(tool) + 1 &&
			bar(runs[%[1]s]).classList.contains('tone-ok') && runs[%[1]s].querySelector('[data-testid="span-dur"]').textContent === '1.500 s' &&
			runs[%[3]s].dataset.state === 'aborted' && bar(runs[%[3]s]).classList.contains('tone-warn') &&
			runs[%[3]s].querySelector('[data-testid="span-dur"]').textContent === '250 ms' && runs[%[2]s].dataset.state === 'completed' &&
			parseFloat(bar(runs[%[3]s]).style.left) > parseFloat(bar(runs[%[2]s]).style.left);
	})()`, jsString(u.notesRun), jsString(u.helperA), jsString(u.helperB)))
	b.screenshot("trace")

	pickSpan(b, "picking the notes span", fmt.Sprintf(`[data-testid="span"][data-run=%s]`, jsString(u.notesRun)))
	b.waitFor("the side panel shows the run's output", `document.querySelector('[data-testid="span-panel"]').textContent.includes('Here are the notes')`)
	b.click("following the panel's link", `[data-testid="span-open"]`)
	openTab(b, "conv")
	b.waitFor("the notes run is open with its result, structured output and stop reason", fmt.Sprintf(`(() => {
		const c = document.querySelector('[data-testid="run-card"][aria-current="true"]');
		return !!c && c.dataset.run === %s && c.querySelector('[data-testid="run-result"]').textContent === 'Here are the notes' &&
			JSON.parse(c.querySelector('[data-testid="run-structured"]').textContent).pages === 3 &&
			c.querySelector('[data-testid="run-stop"]').textContent === 'completed';
	})()`, jsString(u.notesRun)))

	openTab(b, "log")
	b.waitFor("the chunk is folded into its message", `(() => {
		const rows = [...document.querySelectorAll('[data-testid="log-row"]')];
		return rows.length > 0 && !rows.some(r => r.dataset.type === 'assistant/chunk') &&
			document.querySelector('[data-testid="log-row"][data-type="assistant/message"] [data-testid="folded-chunks"]')?.textContent === '1 chunk folded';
	})()`)
	b.do("keeping only turn/end rows", chromedp.SetValue(chromedp.CSS("#log-type"), "turn/end"),
		chromedp.Evaluate[chromedp.Void](`document.querySelector('#log-type').dispatchEvent(new Event('change'))`))
	b.waitFor("only the turn end is listed", `[...document.querySelectorAll('[data-testid="log-row"]')].map(r => r.dataset.type).join() === 'turn/end'`)
	b.do("showing every type again", chromedp.SetValue(chromedp.CSS("#log-type"), ""),
		chromedp.Evaluate[chromedp.Void](`document.querySelector('#log-type').dispatchEvent(new Event('change'))`))
	openTab(b, "conv")

	b.do("opening the root", chromedp.Navigate(srv.URL+"/#s="+u.root))
	b.waitFor("the tool call links to the child it started", fmt.Sprintf(
		`document.querySelector('[data-testid="tool"][data-call-id="call-1"]')?.dataset.child === %[1]s &&
		document.querySelector('[data-testid="tool"] [data-testid="child-link"]')?.textContent === 'notes'`, jsString(u.notes)))
	b.waitFor("the notice links to the child it is about", fmt.Sprintf(
		`document.querySelector('[data-testid="msg-notice"] [data-testid="child-link"]')?.dataset.id === %s`, jsString(u.notes)))
	b.screenshot("links")
	b.click("following the notice's link", `[data-testid="msg-notice"] [data-testid="child-link"]`)
	b.waitFor("the child is selected", fmt.Sprintf(`%s?.dataset.id === %s && location.hash === %s`, selectedNode, jsString(u.notes), jsString("#s="+u.notes)))
}
