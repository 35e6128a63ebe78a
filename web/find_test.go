package web_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/subagentd/subagentd/internal/model/scripted"
)

// shownNodes is the ids of the nodes the tree shows, in order.
const shownNodes = `[...document.querySelectorAll('[data-testid="node"]')].map(n => n.dataset.id)`

// nodesAre is true when the tree shows exactly ids, in any order.
func nodesAre(ids ...string) string {
	sorted := slices.Clone(ids)
	slices.Sort(sorted)
	return fmt.Sprintf(`JSON.stringify(%s.sort()) === %s`, shownNodes, jsString(fmt.Sprintf(`["%s"]`, strings.Join(sorted, `","`))))
}

func titleOf(id string) string {
	return fmt.Sprintf(`document.querySelector('[data-testid="node"][data-id=%s] [data-testid="node-title"]')?.textContent`, jsString(id))
}

// findTree is a seeded history for the find tests: two roots with the same
// label, created two seconds apart, one with a completed and a failed
// child; and an old root with a continuable child.
type findTree struct {
	research, researchTwin, ops string
	summarise, broken, watcher  string
	summariseRun                string
}

func seedFindTree(t *testing.T, srv *testServer) findTree {
	sd := srv.seeder(t)
	now := time.Now()
	t0 := now.Add(-10 * time.Minute)
	var f findTree
	f.research = sd.root("research", t0)
	f.researchTwin = sd.root("research", t0.Add(2*time.Second))
	f.ops = sd.root("ops", now.Add(-72*time.Hour))

	f.summarise = sd.child(f.research, "spawn", "one-shot", "summarise", t0.Add(time.Second))
	f.summariseRun = sd.run(seedRun{child: f.summarise, parent: f.research, provider: "spawn",
		start: t0.Add(time.Second), end: t0.Add(2500 * time.Millisecond), stop: "completed", output: "Three findings."})
	f.broken = sd.child(f.research, "fork", "one-shot", "", t0.Add(3*time.Second))
	sd.events(f.broken, t0.Add(3*time.Second), turn(1, "Find every broken link in the docs folder please", "Failed to read.", 10, 2)...)
	sd.run(seedRun{child: f.broken, parent: f.research, provider: "fork",
		start: t0.Add(3 * time.Second), end: t0.Add(4 * time.Second), stop: "error"})
	f.watcher = sd.child(f.ops, "spawn", "continuable", "watcher", now.Add(-71*time.Hour))
	sd.run(seedRun{child: f.watcher, parent: f.ops, provider: "spawn", taskID: newID("task"),
		start: now.Add(-71 * time.Hour), end: now.Add(-70 * time.Hour), stop: "completed"})
	return f
}

// TestDashboard_FindFilterNamesAndDeepLinks: the tree is filtered by text,
// state, provider and creation time (ancestors of a match stay for
// context); the filter and the selection live in the URL and survive a
// reload; an unlabelled child is named by its provider and the first words
// of its prompt; two roots with one label are told apart by creation time;
// a link to a run opens its session with that run highlighted.
func TestDashboard_FindFilterNamesAndDeepLinks(t *testing.T) {
	t.Parallel()
	srv := startServer(t, scripted.New())
	f := seedFindTree(t, srv)
	b := newBrowser(t)
	openDashboard(b, srv.URL)
	b.waitFor("the tree shows all six sessions", nodesAre(f.research, f.researchTwin, f.ops, f.summarise, f.broken, f.watcher))

	b.waitFor("the unlabelled child is named by provider and prompt", titleOf(f.broken)+` === 'fork: Find every broken link in the…'`)
	b.waitFor("the twin roots carry their creation time", fmt.Sprintf(`(() => {
		const a = %s, b = %s;
		return a !== b && a.startsWith('research · ') && b.startsWith('research · ') && %s === 'ops';
	})()`, titleOf(f.research), titleOf(f.researchTwin), titleOf(f.ops)))

	b.do("searching for summarise", chromedp.SendKeys(chromedp.CSS("#filter-q"), "summarise"))
	b.waitFor("only the match and its root are shown", nodesAre(f.research, f.summarise))
	b.click("clearing the filter", "#filter-clear")
	b.waitFor("all six are back", nodesAre(f.research, f.researchTwin, f.ops, f.summarise, f.broken, f.watcher))

	b.do("filtering failed sessions", chromedp.SetValue(chromedp.CSS("#filter-state"), "failed"),
		chromedp.Evaluate[chromedp.Void](`document.querySelector('#filter-state').dispatchEvent(new Event('change', {bubbles: true}))`))
	b.waitFor("only the failed child and its root are shown", nodesAre(f.research, f.broken))
	b.waitFor("the URL names the filter", `location.hash.includes('st=failed')`)
	b.screenshot("filter-failed")

	b.do("reloading", chromedp.Reload())
	b.waitFor("the filter survived the reload", `document.querySelector('#filter-state').value === 'failed' && `+nodesAre(f.research, f.broken))
	b.click("clearing the filter", "#filter-clear")

	b.do("filtering the fork provider", chromedp.SetValue(chromedp.CSS("#filter-provider"), "fork"),
		chromedp.Evaluate[chromedp.Void](`document.querySelector('#filter-provider').dispatchEvent(new Event('change', {bubbles: true}))`))
	b.waitFor("only the fork child and its root are shown", nodesAre(f.research, f.broken))
	b.do("filtering the last 24 hours of any provider",
		chromedp.SetValue(chromedp.CSS("#filter-provider"), ""), chromedp.SetValue(chromedp.CSS("#filter-since"), "24h"),
		chromedp.Evaluate[chromedp.Void](`document.querySelector('#filter-since').dispatchEvent(new Event('change', {bubbles: true}))`))
	b.waitFor("the three-day-old tree is gone", nodesAre(f.research, f.researchTwin, f.summarise, f.broken))
	b.click("clearing the filter", "#filter-clear")

	b.do("opening a link to the summarise run", chromedp.Navigate(srv.URL+"/#r="+f.summariseRun))
	b.waitFor("its session is selected and the run card is highlighted", fmt.Sprintf(
		`document.querySelector('[data-testid="node"][aria-current="true"]')?.dataset.id === %s &&
		document.querySelector('[data-testid="run-card"][aria-current="true"]')?.dataset.run === %s &&
		document.querySelector('[data-testid="run-result"]')?.textContent === 'Three findings.'`, jsString(f.summarise), jsString(f.summariseRun)))
	b.waitFor("the URL names session and run", fmt.Sprintf(`location.hash === %s`, jsString("#s="+f.summarise+"&r="+f.summariseRun)))
	b.do("reloading", chromedp.Reload())
	b.waitFor("the run is still highlighted after the reload", fmt.Sprintf(
		`document.querySelector('[data-testid="node"][aria-current="true"]')?.dataset.id === %s &&
		document.querySelector('[data-testid="run-card"][aria-current="true"]')?.dataset.run === %s &&
		document.querySelector('[data-testid="session-title"]').textContent === 'summarise'`, jsString(f.summarise), jsString(f.summariseRun)))
	b.waitFor("the Delegate form's parent defaults to the selected tree's root", fmt.Sprintf(`document.querySelector('#start-parent').value === %s`, jsString(f.research)))
	b.screenshot("deep-link-run")

	b.do("opening a link to a session that does not exist", chromedp.Navigate(srv.URL+"/#s=no-such-session-id"))
	b.waitFor("the page says so in words and adds no node",
		`[...document.querySelectorAll('[data-testid="error"]')].some(e => e.textContent.includes('Opening the linked session: SESSION_NOT_FOUND')) && `+
			nodesAre(f.research, f.researchTwin, f.ops, f.summarise, f.broken, f.watcher))
}
