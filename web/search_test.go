package web_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestDashboard_SearchInsideConversations: typing words a conversation
// holds lists the session with the words around them, keeps it in the
// tree although its name does not match, and the hit opens its transcript
// at that message, marked, among a hundred turns.
func TestDashboard_SearchInsideConversations(t *testing.T) {
	t.Parallel()
	srv := startServer(t, replying(nil))
	u := seedUsageTree(t, srv)
	sd := srv.seeder(t)
	var evs []event
	for n := 1; n <= 100; n++ {
		prompt := fmt.Sprintf("routine question %d", n)
		if n == 37 {
			prompt = "Where did the Kestrel migration stall?"
		}
		evs = append(evs, turn(n, prompt, fmt.Sprintf("answer %d", n), 1, 1)...)
	}
	long := sd.child(u.root, "spawn", "one-shot", "archivist", time.Now().Add(-time.Minute))
	sd.events(long, time.Now().Add(-time.Minute), evs...)

	b := newBrowser(t)
	openDashboard(b, srv.URL)
	b.do("typing words said in a conversation", chromedp.SendKeys(chromedp.CSS("#filter-q"), "kestrel migration"))
	b.waitFor("one hit, with the words around the match", fmt.Sprintf(`(() => {
		const hits = [...document.querySelectorAll('[data-testid="search-hit"]')];
		return hits.length === 1 && hits[0].dataset.id === %s && hits[0].textContent.includes('archivist') &&
			hits[0].parentElement.querySelector('mark')?.textContent.toLowerCase() === 'kestrel migration';
	})()`, jsString(long)))
	b.waitFor("the tree keeps the session the conversation search found", nodeIn(long, "inactive")+` || document.querySelector('[data-testid="node"][data-id=`+jsString(long)+`]')`)
	b.click("opening the hit", `[data-testid="search-hit"]`)
	b.waitFor("the transcript shows the message, marked and in view", fmt.Sprintf(`(() => {
		const m = document.querySelector('#conversation [data-hit]');
		if (!m || %s?.dataset.id !== %s) return false;
		const r = m.getBoundingClientRect(), p = document.querySelector('#pane-conv').getBoundingClientRect();
		return m.textContent.includes('Where did the Kestrel migration stall?') && r.top >= p.top && r.bottom <= p.bottom;
	})()`, selectedNode, jsString(long)))
	b.screenshot("hit")
}
