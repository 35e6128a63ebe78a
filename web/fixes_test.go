package web_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// inView is true when the element el (a JS expression) is wholly inside
// the sessions column and the window.
func inView(el string) string {
	return fmt.Sprintf(`(() => {
		const e = %s;
		if (!e) return false;
		const r = e.getBoundingClientRect();
		const c = document.querySelector('.sessions-col').getBoundingClientRect();
		return r.height > 0 && r.top >= Math.max(0, c.top) && r.bottom <= Math.min(innerHeight, c.bottom);
	})()`, el)
}

// TestDashboard_RunningCardDurationTicks: the card of a running run counts
// its duration up with the clock instead of showing the value of its first
// render.
func TestDashboard_RunningCardDurationTicks(t *testing.T) {
	t.Parallel()
	hold := make(chan struct{})
	defer close(hold)
	srv := startServer(t, replying(map[string]chan struct{}{"Count slowly": hold}))
	b := newBrowser(t)
	openDashboard(b, srv.URL)
	startRunFromForm(b, "counter", "Count slowly")
	const card = `document.querySelector('[data-testid="run-card"] [data-testid="run-duration"]')`
	b.waitFor("the running card shows a duration", card+`?.textContent`)
	first := eval[string](b, "reading the card's duration", card+`.textContent`)
	b.waitFor("the card's duration went past a second and on from "+first, fmt.Sprintf(
		`(() => { const t = %s.textContent; return t !== %s && t.endsWith(' s') && parseFloat(t) >= 1; })()`, card, jsString(first)))
}

// TestDashboard_FailedRunEndsInRed: a run that failed after its turn
// completed (its output did not match its schema) ends its transcript with
// a red mark saying how the run ended, not with the green turn end.
func TestDashboard_FailedRunEndsInRed(t *testing.T) {
	t.Parallel()
	srv := startServer(t, replying(nil))
	sd := srv.seeder(t)
	t0 := time.Now().Add(-time.Minute)
	root := sd.root("checker", t0)
	child := sd.child(root, "spawn", "one-shot", "strict", t0.Add(time.Second))
	sd.events(child, t0.Add(1100*time.Millisecond), turn(1, "Answer in JSON", "not json", 10, 2)...)
	sd.run(seedRun{child: child, parent: root, provider: "spawn", start: t0.Add(time.Second), end: t0.Add(2 * time.Second),
		stop: "error", output: "not json"})
	b := newBrowser(t)
	openDashboard(b, srv.URL+"/#s="+child)
	b.waitFor("the transcript ends with the run's failure in red, after the turn's end", `(() => {
		const rows = [...document.querySelectorAll('#conversation > *')];
		const last = rows.at(-1);
		return rows.length > 2 && last.dataset.testid === 'run-end' && last.classList.contains('tone-bad') &&
			last.textContent.includes('Run ended: error') && rows.at(-2).dataset.testid === 'turn-end';
	})()`)
	b.screenshot("failed")
}

// TestDashboard_800pxLayout: at 800 px the Delegate form keeps a usable
// width and the tree, head and transcript sit side by side without
// overflowing the window.
func TestDashboard_800pxLayout(t *testing.T) {
	t.Parallel()
	srv := startServer(t, replying(nil))
	u := seedUsageTree(t, srv)
	b := newBrowser(t)
	b.do("narrowing the window to 800 px", chromedp.EmulateViewport(800, 900))
	openDashboard(b, srv.URL+"/#s="+u.notes)
	b.waitFor("the transcript is shown", assistantSays("Here are the notes", "final"))
	b.waitFor("the Delegate form is at least 300 px wide and nothing is wider than the window", `(() => {
		const f = document.querySelector('#start-form').getBoundingClientRect();
		return f.width >= 300 && f.height >= 200 && document.documentElement.scrollWidth <= innerWidth;
	})()`)
	b.screenshot("layout")
}

// TestDashboard_SelectedNodeStaysInView: a deep link to a session far down
// the tree scrolls its row into view, and it stays in view when runs that
// start above it push it down.
func TestDashboard_SelectedNodeStaysInView(t *testing.T) {
	t.Parallel()
	srv := startServer(t, replying(nil))
	sd := srv.seeder(t)
	t0 := time.Now().Add(-time.Hour)
	oldest := sd.root("oldest", t0)
	for i := 1; i < 40; i++ {
		sd.root(fmt.Sprintf("root %02d", i), t0.Add(time.Duration(i)*time.Minute))
	}
	var top struct {
		ID string `json:"id"`
	}
	srv.postJSON(t, "/v1/sessions", map[string]any{"label": "newest"}, &top)
	b := newBrowser(t)
	openDashboard(b, srv.URL+"/#s="+oldest)
	sel := fmt.Sprintf(`document.getElementById(%s)`, jsString("node-"+oldest))
	b.waitFor("the linked session's row is in view", inView(sel))
	before := eval[float64](b, "reading where the row is", sel+`.getBoundingClientRect().top + document.querySelector('.sessions-col').scrollTop`)
	for i := range 6 {
		srv.runToEnd(t, top.ID, fmt.Sprintf("above %d", i))
	}
	b.waitFor("six children above pushed the row down, and it is still in view", fmt.Sprintf(
		`document.querySelectorAll('[data-testid="node"]').length === 47 && %s.getBoundingClientRect().top + document.querySelector('.sessions-col').scrollTop > %f && %s`,
		sel, before, inView(sel)))
}
