package web_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/subagentd/subagentd/internal/model/scripted"
)

// answer is what the scripted child model streams, one chunk per word.
const answer = "Hello from the child agent, streamed word by word."

// Selectors and conditions shared by the tests.
const (
	selectedNode  = `document.querySelector('[data-testid="node"][aria-current="true"]')`
	connConnected = `document.querySelector('#conn').dataset.state === 'connected'`
)

// streamedAnswer is true once the transcript shows the whole answer in a
// bubble that is still streaming (the model holds the step open).
var streamedAnswer = `(() => {
	const m = document.querySelectorAll('[data-testid="msg-assistant"]');
	return m.length === 1 && m[0].dataset.state === 'streaming' &&
		m[0].querySelector('[data-testid="assistant-text"]').textContent === ` + jsString(answer) + `;
})()`

// finalAnswer is true once the transcript holds exactly one final answer
// bubble and the turn's end separator.
var finalAnswer = `(() => {
	const m = document.querySelectorAll('[data-testid="msg-assistant"]');
	return m.length === 1 && m[0].dataset.state === 'final' &&
		m[0].querySelector('[data-testid="assistant-text"]').textContent === ` + jsString(answer) + ` &&
		document.querySelectorAll('[data-testid="turn-end"]').length === 1;
})()`

func nodeIn(id, state string) string {
	return fmt.Sprintf(`document.querySelector('[data-testid="node"][data-id=%s][data-state=%s]')`, jsString(id), jsString(state))
}

// openDashboard loads the page and waits until it is live and lists spawn.
func openDashboard(b *browser, url string) {
	b.t.Helper()
	b.do("opening the dashboard", chromedp.Navigate(url))
	b.waitFor("the connection indicator says connected", connConnected+` && document.querySelector('#conn-text').textContent.startsWith('Connected')`)
	b.waitFor("spawn is listed with its capabilities",
		`document.querySelector('[data-testid="provider-spawn"] [data-cap="steer"]') && document.querySelector('#start-provider option[value="spawn"]')`)
}

// openTab shows the transcript view tab ("conv", "log" or "timeline") as a
// keyboard user does — focus and Enter — and waits until it is selected.
// A pointer click would aim at where the tab was: the session head above
// the tabs grows as its runs and usage load, moving them down.
func openTab(b *browser, tab string) {
	b.t.Helper()
	sel := "#tab-" + tab
	b.do("opening the "+tab+" tab", chromedp.Focus(chromedp.CSS(sel)), chromedp.KeyEvent("\r"))
	b.waitFor("the "+tab+" tab is selected", fmt.Sprintf(`document.querySelector(%s).getAttribute('aria-selected') === 'true'`, jsString(sel)))
}

// pickSpan clicks the trace's span that sel matches, found when the click
// is sent: the trace redraws as its logs and usage arrive, so a node found
// earlier may have been replaced.
func pickSpan(b *browser, what, sel string) {
	b.t.Helper()
	if !eval[bool](b, what, fmt.Sprintf(`(() => { const e = document.querySelector(%s); if (e) e.click(); return !!e; })()`, jsString(sel))) {
		b.fail(what, fmt.Errorf("no span matches %s", sel))
	}
}

// startRunFromForm fills the delegate form and starts a one-shot spawn run
// labelled label under a new root session; it returns the child session id
// once its node is selected and running.
func startRunFromForm(b *browser, label, prompt string) string {
	b.t.Helper()
	b.do("filling and submitting the delegate form",
		chromedp.SetValue(chromedp.CSS("#start-provider"), "spawn"),
		chromedp.SendKeys(chromedp.CSS("#start-label"), label),
		chromedp.SendKeys(chromedp.CSS("#start-prompt"), prompt),
		chromedp.Click(chromedp.CSS("#start-submit")))
	b.waitFor("the new run's node is selected and running", selectedNode+`?.dataset.state === 'running'`)
	return eval[string](b, "reading the child id", selectedNode+`.dataset.id`)
}

// TestDashboard_StartRunStreamsAndCompletes drives a first-time user's path:
// open the page, start a run through the form, watch its node appear as
// running, read the text as it streams, and see the run complete.
func TestDashboard_StartRunStreamsAndCompletes(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := startServer(t, scripted.New(scripted.Step{Text: answer, Pause: release}))
	b := newBrowser(t)
	openDashboard(b, srv.URL)

	child := startRunFromForm(b, "greeter", "Say hello")
	b.waitFor("the node shows provider and mode", fmt.Sprintf(
		`document.getElementById(%[1]s).querySelector('[data-testid="node-provider"]').textContent === 'spawn' && document.getElementById(%[1]s).dataset.mode === 'one-shot'`, jsString("node-"+child)))
	b.waitFor("the streamed text is in the transcript while the step is open", streamedAnswer)
	b.waitFor("the actions offer cancel and dispose for the running run",
		`document.querySelector('[data-testid="action-cancel"]') && document.querySelector('[data-testid="action-dispose"]')`)
	var spawnInfo struct {
		Steer bool `json:"steer"`
	}
	srv.getJSON(t, "/v1/providers/spawn", &spawnInfo)
	if spawnInfo.Steer {
		b.waitFor("the steer composer is offered, as spawn advertises steer",
			`!document.querySelector('#message-form').hidden && document.querySelector('#message-send').textContent === 'Steer'`)
	} else {
		b.waitFor("no steer composer is offered, as spawn does not advertise steer",
			`document.querySelector('#message-form').hidden && document.querySelector('#readonly-note').textContent.includes('cannot be steered')`)
	}
	b.screenshot("streaming")

	close(release)
	b.waitFor("the node shows completed with its stop reason and duration",
		nodeIn(child, "completed")+`?.dataset.stopReason === 'completed' && /^\d+(\.\d{3})? m?s$/.test(document.querySelector('[data-dur-for=`+jsString(child)+`]').textContent)`)
	b.waitFor("the transcript holds the final answer and the turn end", finalAnswer)
	b.waitFor("the head says completed and cancel is gone",
		`document.querySelector('[data-testid="head-state"]').dataset.state === 'completed' && !document.querySelector('[data-testid="action-cancel"]')`)
	b.waitFor("the composer is replaced by the read-only note", `!document.querySelector('#readonly-note').hidden`)
	b.screenshot("completed")

	b.do("narrowing to phone width", chromedp.EmulateViewport(390, 844))
	b.waitFor("the page fits 390 px without sideways scrolling", `document.documentElement.scrollWidth <= 390`)
	b.screenshot("phone")
}

// TestDashboard_RecoversFromDroppedStreams cuts the page's SSE connections
// twice — once so that EventSource resumes by itself with Last-Event-ID,
// once with the streams refused (503) while the run finishes, so the page
// must recreate them with ?after= — and checks that the transcript and the
// tree end up exactly like the durable log: no row twice, none missing.
func TestDashboard_RecoversFromDroppedStreams(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := startServer(t, scripted.New(scripted.Step{Text: answer, Pause: release}))
	b := newBrowser(t)
	openDashboard(b, srv.URL)
	child := startRunFromForm(b, "greeter", "Say hello")
	b.waitFor("the streamed text is in the transcript", streamedAnswer)
	_ = eval[bool](b, "recording connection states", `(() => {
		window.connStates = [];
		new MutationObserver(() => window.connStates.push(document.querySelector('#conn').dataset.state))
			.observe(document.querySelector('#conn'), { attributes: true, attributeFilter: ['data-state'] });
		return true;
	})()`)

	// 1. The connections drop; EventSource reconnects on its own.
	srv.CloseClientConnections()
	b.waitFor("the indicator reported the drop and is connected again",
		`window.connStates.some(s => s !== 'connected') && `+connConnected)
	b.waitFor("the transcript still shows the streamed text once", streamedAnswer)

	// 2. The streams are refused while the run finishes.
	srv.refuseStreams(true)
	srv.CloseClientConnections()
	b.waitFor("the indicator says offline in words", `document.querySelector('#conn').dataset.state === 'offline' &&
		document.querySelector('#conn-text').textContent.startsWith('Offline')`)
	close(release)
	srv.waitSettled(t, child)
	srv.refuseStreams(false)

	b.waitFor("the node shows completed", nodeIn(child, "completed"))
	b.waitFor("the transcript holds the final answer once", finalAnswer)
	b.waitFor("the page is connected again", connConnected)

	openTab(b, "log")
	b.click("showing the chunk rows the event log folds by default", "#log-chunks")
	want := srv.eventSeqs(t, child)
	got := eval[[]int64](b, "reading the event log rows",
		`[...document.querySelectorAll('[data-testid="log-row"]')].map(r => Number(r.dataset.seq))`)
	if !slices.Equal(got, want) {
		t.Errorf("event log rows = %v, want the durable log's seqs %v", got, want)
	}
	if n := eval[int](b, "counting nodes", fmt.Sprintf(`document.querySelectorAll('[data-testid="node"][data-id=%s]').length`, jsString(child))); n != 1 {
		t.Errorf("the child has %d nodes in the tree, want 1", n)
	}
	if dup := eval[[]string](b, "looking for duplicate conversation rows", `(() => {
		const seen = new Set(), dup = [];
		for (const el of document.querySelectorAll('#conversation [data-seq]')) {
			if (seen.has(el.dataset.seq)) dup.push(el.dataset.seq);
			seen.add(el.dataset.seq);
		}
		return dup;
	})()`); len(dup) > 0 {
		t.Errorf("conversation rows repeated for seqs %v", dup)
	}
	b.screenshot("recovered")
}

// TestDashboard_ShowsErrorsInWords checks that an output schema that is not
// JSON is flagged next to its field before anything is sent, and that a
// problem+json answer is shown with its code, in words, beside the field it
// names.
func TestDashboard_ShowsErrorsInWords(t *testing.T) {
	t.Parallel()
	srv := startServer(t, scripted.New())
	b := newBrowser(t)
	openDashboard(b, srv.URL)

	b.do("typing a schema that is not JSON",
		chromedp.Click(chromedp.CSS("#start-options > summary")),
		chromedp.SendKeys(chromedp.CSS("#start-prompt"), "Answer in JSON"),
		chromedp.SendKeys(chromedp.CSS("#start-schema"), `{"type": "object",`))
	b.waitFor("the parse error is shown next to the field before submit",
		`document.querySelector('[data-testid="schema-error"]').textContent.startsWith('Not valid JSON') &&
		document.querySelector('#start-schema').getAttribute('aria-invalid') === 'true'`)
	b.click("submitting anyway", "#start-submit")
	b.waitFor("the schema field has focus and nothing was started",
		`document.activeElement.id === 'start-schema' && document.querySelectorAll('[data-testid="node"]').length === 0`)

	b.do("typing a schema outside the supported subset",
		chromedp.SetValue(chromedp.CSS("#start-schema"), `{"type":"object","properties":{"n":{"type":"number","minimum":0}}}`),
		// A key press after the programmatic value fires the input event.
		chromedp.SendKeys(chromedp.CSS("#start-schema"), " "))
	b.waitFor("the parse error is gone", `document.querySelector('[data-testid="schema-error"]').textContent === ''`)
	b.click("submitting", "#start-submit")
	b.waitFor("the form says UNSUPPORTED_SCHEMA in words",
		`document.querySelector('[data-testid="start-error"]').textContent.startsWith('UNSUPPORTED_SCHEMA — unsupported JSON schema')`)
	b.waitFor("the schema field names the offending keyword",
		`document.querySelector('[data-testid="schema-error"]').textContent.includes('schema.properties.n.minimum')`)
	b.waitFor("the prompt is kept", `document.querySelector('#start-prompt').value === 'Answer in JSON'`)
	b.screenshot("errors")
}
