package web_test

import (
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// headUsage is the text of the head's Tokens (which) once the API's
// answer is on show.
func headUsage(which string) string {
	return `(() => { const e = document.querySelector('[data-testid="` + which + `"]'); return e && e.dataset.source === 'api' ? e.textContent : ''; })()`
}

// TestDashboard_UsageFromTheAPI: the head's Tokens and Tree tokens are
// read from GET /v1/sessions/{id}/usage (scope=self and tree), not summed
// from logs: a run whose provider reported no usage says "not reported", a
// tree with such a run says its tokens are a lower bound.
func TestDashboard_UsageFromTheAPI(t *testing.T) {
	t.Parallel()
	srv := startServer(t, replying(nil))
	sd := srv.seeder(t)
	t0 := time.Now().Add(-time.Minute)
	root := sd.root("lead", t0)
	quiet := sd.child(root, "spawn", "one-shot", "quiet", t0.Add(time.Second))
	sd.run(seedRun{child: quiet, parent: root, provider: "spawn", start: t0.Add(time.Second), end: t0.Add(2 * time.Second), stop: "completed", output: "done"})
	counted := sd.child(root, "spawn", "one-shot", "counted", t0.Add(2*time.Second))
	sd.run(seedRun{child: counted, parent: root, provider: "spawn", start: t0.Add(2 * time.Second), end: t0.Add(3 * time.Second), stop: "completed", output: "done", in: 7, out: 3})

	b := newBrowser(t)
	openDashboard(b, srv.URL+"/#s="+quiet)
	b.waitFor("a run that reported no usage says so", headUsage("head-usage")+` === 'not reported'`)
	b.waitFor("the tree's tokens are a lower bound",
		headUsage("head-tree-usage")+` === '7 in / 3 out tokens at least (some calls reported none)'`)
	b.screenshot("not reported")

	b.do("opening the counted child", chromedp.Click(chromedp.CSS(`[data-testid="node"][data-id=`+jsString(counted)+`]`)))
	b.waitFor("its own tokens are the API's", headUsage("head-usage")+` === '7 in / 3 out tokens'`)
	b.screenshot("counted")
}
