package web_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// glanceTree is a seeded tree of 15 sessions: a root, three teams and
// eleven workers under them; worker "probe" (under "beta") runs, worker
// "broken" (under "gamma") failed, every other run completed.
type glanceTree struct {
	root, alpha, beta, gamma string
	probe, broken            string
	brokenRun                string
}

func seedGlanceTree(t *testing.T, srv *testServer) glanceTree {
	sd := srv.seeder(t)
	now := time.Now()
	t0 := now.Add(-20 * time.Minute)
	var g glanceTree
	g.root = sd.root("release 1.4", t0)
	at := func(min int) time.Time { return t0.Add(time.Duration(min) * time.Minute) }
	team := func(label string, min int) string {
		id := sd.child(g.root, "spawn", "continuable", label, at(min))
		sd.run(seedRun{child: id, parent: g.root, provider: "spawn", taskID: newID("task"), start: at(min), end: at(min + 1), stop: "completed"})
		return id
	}
	worker := func(parent, label string, min int, stop string) (string, string) {
		id := sd.child(parent, "fork", "one-shot", label, at(min))
		sd.events(id, at(min), turn(1, "do "+label, "done "+label, 120, 30)...)
		r := seedRun{child: id, parent: parent, provider: "fork", start: at(min), stop: stop}
		if stop != "" {
			r.end = at(min).Add(1500 * time.Millisecond)
		}
		return id, sd.run(r)
	}
	g.alpha = team("alpha", 1)
	g.beta = team("beta", 2)
	g.gamma = team("gamma", 3)
	for i, l := range []string{"lint", "vet", "docs", "bench"} {
		worker(g.alpha, l, 4+i, "completed")
	}
	worker(g.beta, "unit", 8, "completed")
	worker(g.beta, "e2e", 9, "completed")
	g.probe, _ = worker(g.beta, "probe", 10, "")
	worker(g.gamma, "notes", 11, "completed")
	worker(g.gamma, "tag", 12, "completed")
	g.broken, g.brokenRun = worker(g.gamma, "broken", 13, "error")
	worker(g.gamma, "publish", 14, "completed")
	return g
}

func rollup(id, which string) string {
	return fmt.Sprintf(`document.querySelector('[data-testid="node"][data-id=%s] [data-testid="rollup-%s"]')?.textContent`, jsString(id), which)
}

// TestDashboard_TreeAtAGlance: a 15-session tree fits without scrolling,
// one line a session; the root and the teams show how many sessions below
// them run and failed, also when collapsed; children are listed newest
// first with their age, duration and tokens.
func TestDashboard_TreeAtAGlance(t *testing.T) {
	t.Parallel()
	srv := startServer(t, replying(nil))
	g := seedGlanceTree(t, srv)
	b := newBrowser(t)
	b.do("opening the window at 1400×900", chromedp.EmulateViewport(1400, 900))
	openDashboard(b, srv.URL+"/#s="+g.root)
	b.waitFor("all 15 rows are on screen, one line each", `(() => {
		const rows = [...document.querySelectorAll('#tree .row')];
		return rows.length === 15 && rows.every(r => { const b = r.getBoundingClientRect(); return b.height <= 30 && b.bottom <= innerHeight; }) &&
			rows.every(r => r.querySelector('.node-title').getClientRects().length === 1);
	})()`)
	b.waitFor("the root rolls up one running and one failed session", rollup(g.root, "running")+` === '◐ 1' && `+rollup(g.root, "failed")+` === '✕ 1'`)
	b.waitFor("each team rolls up its own", rollup(g.beta, "running")+` === '◐ 1' && !`+rollup(g.beta, "failed")+
		` && `+rollup(g.gamma, "failed")+` === '✕ 1' && !`+rollup(g.alpha, "running")+` && !`+rollup(g.alpha, "failed"))
	b.waitFor("children are listed newest work first", fmt.Sprintf(`(() => {
		const ids = [...document.querySelectorAll('#tree .row')].map(r => r.dataset.id);
		return ids.indexOf(%[1]s) < ids.indexOf(%[2]s) && ids.indexOf(%[2]s) < ids.indexOf(%[3]s);
	})()`, jsString(g.gamma), jsString(g.beta), jsString(g.alpha)))
	b.waitFor("a worker shows its age, duration and tokens", fmt.Sprintf(`(() => {
		const n = document.querySelector('[data-testid="node"][data-id=%s]');
		return /^\d+m ago$/.test(n.querySelector('[data-testid="node-age"]')?.textContent) &&
			n.querySelector('[data-dur-for]')?.textContent === '1.500 s' && n.querySelector('[data-testid="node-tokens"]')?.textContent === '150 tok';
	})()`, jsString(g.broken)))
	b.screenshot("tree")
	b.do("collapsing gamma", chromedp.Click(chromedp.CSS(fmt.Sprintf(`.row[data-id=%s] [data-testid="twisty"]`, jsString(g.gamma)))))
	b.waitFor("collapsed gamma still says one failed below it", `document.querySelectorAll('#tree .row').length === 11 && `+rollup(g.gamma, "failed")+` === '✕ 1'`)
}

// TestDashboard_OverviewFirst: with no session selected the page shows
// what runs, what failed in the last hour and the latest activity, and a
// failure links to its run.
func TestDashboard_OverviewFirst(t *testing.T) {
	t.Parallel()
	srv := startServer(t, replying(nil))
	g := seedGlanceTree(t, srv)
	b := newBrowser(t)
	b.do("opening the window at 1400×900", chromedp.EmulateViewport(1400, 900))
	openDashboard(b, srv.URL)
	b.waitFor("the overview counts one live run and one failure", `!document.querySelector('[data-testid="overview"]').hidden &&
		document.querySelector('[data-testid="overview-live-count"]').textContent === '1' &&
		document.querySelector('[data-testid="overview-failed-count"]').textContent === '1' &&
		document.querySelector('[data-testid="overview-recent"] li') && document.querySelector('#session-head, .session-head').offsetParent === null`)
	b.waitFor("the live run is probe and the failure says error", `document.querySelector('[data-testid="overview-live"] a').textContent === 'probe' &&
		document.querySelector('[data-testid="overview-failed"] li').textContent.includes('error')`)
	b.screenshot("overview")
	// The overview is drawn again every second; only its times change, so
	// the links stay the elements they were and a click is not lost.
	eval[bool](b, "marking the failure's link and the live run's duration", `(() => {
		document.querySelector('[data-testid="overview-failed"] a').kept = true;
		window.liveDuration = document.querySelector('[data-testid="overview-live"] .dur').textContent;
		return true;
	})()`)
	b.waitFor("the live run's duration ticks and the failure's link stays the same element",
		`document.querySelector('[data-testid="overview-live"] .dur').textContent !== window.liveDuration && document.querySelector('[data-testid="overview-failed"] a').kept === true`)
	b.click("following the failure", `[data-testid="overview-failed"] a`)
	b.waitFor("the failed run is selected and the overview gone", fmt.Sprintf(`%s?.dataset.id === %s && document.querySelector('[data-testid="overview"]').hidden &&
		document.querySelector('[data-testid="run-card"][aria-current="true"]')?.dataset.run === %s`, selectedNode, jsString(g.broken), jsString(g.brokenRun)))
}
