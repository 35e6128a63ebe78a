package web_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// treeActionsAre is true when the head offers exactly the tree controls
// ids (cancel-tree, dispose-tree, dispose-child), in this order.
func treeActionsAre(ids ...string) string {
	want := make([]string, len(ids))
	for i, id := range ids {
		want[i] = "action-" + id
	}
	return fmt.Sprintf(`[...document.querySelectorAll('#actions .action-confirmable > button')].map(b => b.dataset.testid).join() === %s`, jsString(strings.Join(want, ",")))
}

// confirmAction presses the tree control id, checks that it asks first
// (the question shown, the button gone) and answers yes.
func confirmAction(b *browser, id string) {
	b.t.Helper()
	b.do("pressing "+id, chromedp.Click(chromedp.CSS(`[data-testid="action-`+id+`"]`)))
	b.waitFor(id+" asks first, with the focus on Keep it", fmt.Sprintf(`!document.querySelector('[data-testid="action-%[1]s-confirm"]').hidden &&
		document.querySelector('[data-testid="action-%[1]s"]').hidden && document.activeElement.dataset.testid === 'action-%[1]s-no'`, id))
	b.screenshot("confirm " + id)
	b.do("confirming "+id, chromedp.Click(chromedp.CSS(`[data-testid="action-`+id+`-yes"]`)))
}

// call sends method path with body (none when "") as another client
// would, fails t unless the answer's status is want, and returns the
// answer's body.
func (s *testServer) call(t *testing.T, method, path, body string, want int) []byte {
	t.Helper()
	req, err := http.NewRequest(method, s.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	answer, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the answer: %v", method, path, err)
	}
	if res.StatusCode != want {
		t.Fatalf("%s %s: %s %s, want %d", method, path, res.Status, answer, want)
	}
	return answer
}

// TestDashboard_TreeControl drives the tree controls against a real
// server: a root with a running continuable child offers Cancel tree and
// Dispose, the child Dispose child. Cancel tree asks first, then says how
// many it stopped, and the stream turns the child's node aborted; Keep it
// takes a question back. A child disposed by another client answers a
// followup 409 DISPOSED: the page says so in words and its composer gives
// way. Dispose on the root asks first, then the root says it is disposed
// and takes no more messages.
func TestDashboard_TreeControl(t *testing.T) {
	t.Parallel()
	hold := make(chan struct{})
	defer close(hold)
	srv := startServer(t, replying(map[string]chan struct{}{"Research the topic": hold}))
	b := newBrowser(t)
	openDashboard(b, srv.URL)

	child := startChildFromForm(b, "researcher", "Research the topic")
	b.waitFor("the child runs", nodeIn(child, "running"))
	b.waitFor("the child offers Dispose child only", treeActionsAre("dispose-child"))

	// A redraw of the head keeps the items that did not change: a click
	// whose press and release straddle one still lands on the Parent link.
	// Another client's runs in a tree of its own redraw the page. Its root
	// is a second "Root session", so after its first run the Parent link
	// names its root's creation time; the second run then changes nothing
	// in the head but the running child's Active item, whose replacement
	// says the head was drawn again.
	var other struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(srv.call(t, http.MethodPost, "/v1/sessions", `{}`, http.StatusCreated), &other); err != nil {
		t.Fatal(err)
	}
	otherRun := fmt.Sprintf(`{"provider":"spawn","parentSessionId":%q,"prompt":[{"type":"text","text":"Hello"}]}`, other.ID)
	srv.call(t, http.MethodPost, "/v1/runs", otherRun, http.StatusCreated)
	b.waitFor("the Parent link tells the two roots apart", `document.querySelector('[data-testid="head-parent"]').textContent.startsWith('Root session · ')`)
	eval[bool](b, "watching the head's items", `(() => {
		const link = document.querySelector('[data-testid="head-parent"]');
		window.headSwaps = 0;
		window.parentSwapped = false;
		new MutationObserver((recs) => { for (const r of recs) for (const n of r.removedNodes) { window.headSwaps++; if (n.contains(link)) window.parentSwapped = true; } })
			.observe(document.querySelector('#session-meta'), { childList: true });
		return true;
	})()`)
	srv.call(t, http.MethodPost, "/v1/runs", otherRun, http.StatusCreated)
	b.waitFor("the head is drawn again", `window.headSwaps > 0`)
	if eval[bool](b, "reading whether the Parent link was replaced", `window.parentSwapped`) {
		t.Fatal("redrawing the head replaced its unchanged Parent link; a click across the redraw is lost")
	}
	b.click("opening the child's root", `[data-testid="head-parent"]`)
	b.waitFor("the root is selected and offers Cancel tree and Dispose", selectedNode+`?.dataset.mode === 'root' && `+treeActionsAre("cancel-tree", "dispose-tree"))
	root := eval[string](b, "reading the root id", selectedNode+`.dataset.id`)

	// Keep it takes the question back and does nothing.
	b.click("pressing Cancel tree", `[data-testid="action-cancel-tree"]`)
	b.waitFor("it asks, naming the one session below", `document.querySelector('[data-testid="action-cancel-tree-confirm"]').textContent.includes('1 session below')`)
	b.click("answering Keep it", `[data-testid="action-cancel-tree-no"]`)
	b.waitFor("the question is gone and the child still runs", `document.querySelector('[data-testid="action-cancel-tree-confirm"]').hidden && `+
		`!document.querySelector('[data-testid="action-cancel-tree"]').hidden && `+nodeIn(child, "running")+` !== null`)

	confirmAction(b, "cancel-tree")
	b.waitFor("the page says the cancel stopped one", actionStatus+`.textContent.startsWith('Tree cancelled — stopped 1 run')`)
	b.waitFor("the stream turns the child inactive, aborted", nodeIn(child, "inactive")+`?.dataset.stopReason === 'aborted'`)
	b.screenshot("tree cancelled")

	// Another client disposes the child: the page learns it from the 409.
	srv.call(t, http.MethodDelete, "/v1/subagents/"+url.PathEscape(child)+"?parentSessionId="+url.QueryEscape(root), "", http.StatusNoContent)
	b.do("opening the child", chromedp.Click(chromedp.CSS(`[data-testid="node"][data-id=`+jsString(child)+`]`)))
	b.waitFor("the composer sends followups", composerIs("followup", "Send followup"))
	send(b, "Anything else?")
	b.waitFor("the followup is refused DISPOSED, said in words, and the composer gives way",
		`document.querySelector('#message-form').hidden && document.querySelector('[data-testid="readonly-note"]').dataset.disposed === 'true' &&
		document.querySelector('[data-testid="readonly-note"]').textContent.startsWith('This child was disposed (DISPOSED)')`)
	b.waitFor("the child's node and head say disposed; Dispose child is gone",
		selectedNode+`?.querySelector('[data-testid="node-disposed"]') !== null && `+treeActionsAre())
	b.screenshot("child disposed")

	b.do("opening the root", chromedp.Click(chromedp.CSS(`[data-testid="node"][data-id=`+jsString(root)+`]`)))
	b.waitFor("the root offers Cancel tree and Dispose", treeActionsAre("cancel-tree", "dispose-tree"))
	confirmAction(b, "dispose-tree")
	b.waitFor("the page says the tree was disposed", actionStatus+`.textContent.startsWith('Tree disposed')`)
	b.waitFor("the root says it is disposed: no composer, no Dispose",
		`document.querySelector('#message-form').hidden && document.querySelector('[data-testid="readonly-note"]').textContent.startsWith('This root session was disposed (DISPOSED)') && `+
			treeActionsAre("cancel-tree"))
	b.screenshot("root disposed")
}
