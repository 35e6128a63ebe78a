package web_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// seedDelegation seeds a two-level delegation: root "lead" asks the model,
// which calls subagent_spawn; the spawn child "researcher" reads a file
// and calls subagent_fork; the fork grandchild "checker" answers. Every
// tool call's result arrives after the child it started ended.
func seedDelegation(t *testing.T, srv *testServer) (root, child, grand, childRun, grandRun string) {
	sd := srv.seeder(t)
	t0 := time.Now().Add(-time.Minute)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	text := func(s string) []map[string]string { return []map[string]string{{"type": "text", "text": s}} }
	msg := func(turn int, s string, in, out int) event {
		return ev("assistant/message", map[string]any{"turn": turn, "step": 1, "message": map[string]any{"role": "assistant", "content": text(s)},
			"usage": map[string]int{"inputTokens": in, "outputTokens": out}})
	}
	root = sd.root("lead", t0)
	child = sd.child(root, "spawn", "one-shot", "researcher", at(1000))
	grand = sd.child(child, "fork", "one-shot", "checker", at(1200))
	sd.events(root, at(0),
		ev("user/message", map[string]any{"id": "m1", "role": "user", "content": text("Find the flaky test"), "source": map[string]string{"kind": "user"}}),
		ev("turn/start", map[string]any{"turn": 1}),
		ev("step/start", map[string]any{"turn": 1, "step": 1}),
		msg(1, "Delegating.", 100, 20),
		ev("tool/call", map[string]any{"turn": 1, "step": 1, "callId": "r1", "name": "subagent_spawn", "arguments": `{"prompt":"Find it"}`}))
	sd.events(root, at(3000),
		ev("tool/result", map[string]any{"turn": 1, "step": 1, "callId": "r1", "name": "subagent_spawn", "content": text("child " + child + " found it")}),
		ev("step/end", map[string]any{"turn": 1, "step": 1}),
		ev("turn/end", map[string]any{"turn": 1, "reason": map[string]string{"kind": "completed"}}))
	sd.events(child, at(1010),
		ev("user/message", map[string]any{"id": "m2", "role": "user", "content": text("Find it")}),
		ev("turn/start", map[string]any{"turn": 1}),
		ev("step/start", map[string]any{"turn": 1, "step": 1}),
		msg(1, "Reading.", 300, 40),
		ev("tool/call", map[string]any{"turn": 1, "step": 1, "callId": "c1", "name": "read_file", "arguments": `{"path":"ci.log"}`}))
	sd.events(child, at(1100),
		ev("tool/result", map[string]any{"turn": 1, "step": 1, "callId": "c1", "name": "read_file", "content": text("FAIL TestRace (0.01s)")}),
		ev("tool/call", map[string]any{"turn": 1, "step": 1, "callId": "c2", "name": "subagent_fork", "arguments": `{"prompt":"Check TestRace"}`}))
	sd.events(child, at(2000),
		ev("tool/result", map[string]any{"turn": 1, "step": 1, "callId": "c2", "name": "subagent_fork", "content": text("confirmed")}),
		ev("step/end", map[string]any{"turn": 1, "step": 1}),
		ev("turn/end", map[string]any{"turn": 1, "reason": map[string]string{"kind": "completed"}}))
	sd.events(grand, at(1210), turn(1, "Check TestRace", "It races on the cache.", 50, 9)...)
	childRun = sd.run(seedRun{child: child, parent: root, provider: "spawn", start: at(1000), end: at(2500), stop: "completed", output: "found it"})
	grandRun = sd.run(seedRun{child: grand, parent: child, provider: "fork", start: at(1200), end: at(1800), stop: "completed", output: "It races on the cache."})
	return root, child, grand, childRun, grandRun
}

// noOverlap is true when no two of the elements sel matches overlap.
func noOverlap(sel string) string {
	return fmt.Sprintf(`(() => {
		const r = [...document.querySelectorAll(%s)].map(e => e.getBoundingClientRect()).filter(b => b.width > 0);
		for (let i = 0; i < r.length; i++) for (let j = i + 1; j < r.length; j++) {
			const a = r[i], b = r[j];
			if (a.left < b.right - 0.5 && b.left < a.right - 0.5 && a.top < b.bottom - 0.5 && b.top < a.bottom - 0.5) return false;
		}
		return r.length > 0;
	})()`, jsString(sel))
}

// TestDashboard_TraceOfTwoLevelDelegation: the trace nests the root's turn,
// its step, model call and tool call, the child run that call started, the
// child's own steps and tool calls, and the grandchild's run inside the
// child's tool call, each with duration and tokens; a span's inputs and
// outputs open in the side panel; no label or tick overlaps another, also
// at 800 px.
func TestDashboard_TraceOfTwoLevelDelegation(t *testing.T) {
	t.Parallel()
	srv := startServer(t, replying(nil))
	root, _, _, childRun, grandRun := seedDelegation(t, srv)
	b := newBrowser(t)
	b.do("opening the window at 1400×900", chromedp.EmulateViewport(1400, 900))
	openDashboard(b, srv.URL+"/#s="+root)
	openTab(b, "timeline")
	want := []string{
		"0 turn 1", "1 step 1", "2 chat", "2 execute_tool subagent_spawn",
		"3 invoke_agent spawn", "4 turn 1", "5 step 1", "6 chat scripted-model", "6 execute_tool read_file", "6 execute_tool subagent_fork",
		"7 invoke_agent fork", "8 turn 1", "9 step 1", "10 chat scripted-model",
	}
	b.waitFor("the spans nest root turn → step → model and tool calls → child run → its steps → grandchild run", fmt.Sprintf(`(() => {
		const got = [...document.querySelectorAll('[data-testid="span"]')].map(s => s.dataset.depth + ' ' + s.dataset.name);
		return JSON.stringify(got) === %s;
	})()`, jsString(string(rawJSON(t, want)))))
	b.waitFor("the runs carry their duration, tokens and status", fmt.Sprintf(`(() => {
		const child = document.querySelector('[data-testid="span"][data-run=%s]');
		const grand = document.querySelector('[data-testid="span"][data-run=%s]');
		return child.querySelector('[data-testid="span-dur"]').textContent === '1.500 s' && child.textContent.includes('340 tok') &&
			child.dataset.state === 'completed' && grand.querySelector('[data-testid="span-dur"]').textContent === '600 ms' && grand.textContent.includes('59 tok');
	})()`, jsString(childRun), jsString(grandRun)))
	pickSpan(b, "picking the read_file call", `[data-testid="span"][data-name="execute_tool read_file"]`)
	b.waitFor("the side panel shows its arguments and result", `(() => {
		const p = document.querySelector('[data-testid="span-panel"]').textContent;
		return p.includes('"path": "ci.log"') && p.includes('FAIL TestRace (0.01s)');
	})()`)
	b.waitFor("no span name overlaps another, nor any axis tick", noOverlap(`[data-testid="span-label"]`)+` && `+noOverlap(`.trace-axis .tick`))
	b.screenshot("trace")
	b.do("narrowing the window to 800 px", chromedp.EmulateViewport(800, 900))
	b.waitFor("at 800 px no span name or tick overlaps either", `document.querySelectorAll('.trace-axis .tick').length >= 2 && `+noOverlap(`[data-testid="span-label"]`)+` && `+noOverlap(`.trace-axis .tick`))
	b.screenshot("trace-800")
}
