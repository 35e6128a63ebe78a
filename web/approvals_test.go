package web_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/subagentd/subagentd/internal/governance"
	"github.com/subagentd/subagentd/internal/store"
)

// Conditions on the approvals badge and inbox.
const (
	apCard   = `document.querySelector('[data-testid="approval"]')`
	apBadge  = `document.querySelector('[data-testid="approvals-badge"]')`
	noBadge  = apBadge + `.hidden`
	apStatus = apCard + `?.querySelector('[data-testid="ap-status"]').textContent`
)

// badgeSays is true when the header's badge shows n pending approvals.
func badgeSays(n int) string {
	return fmt.Sprintf(`!%s.hidden && %s.textContent === '%d'`, apBadge, apBadge, n)
}

// openApproval opens a pending approval for child's running run as an ACP
// provider's policy (permission: ask) does, through the server's own
// governance.Approvals: the store records it and approval/requested fires.
func openApproval(t *testing.T, srv *testServer, child, title string) string {
	t.Helper()
	a, err := srv.approvals.Open(t.Context(), governance.Ask{
		SessionID: child, Provider: "spawn",
		ToolCall: store.ApprovalToolCall{
			ID: "call-1", Title: title, Kind: "edit",
			Locations: json.RawMessage(`[{"path":"/repo/src/main.go","line":3}]`),
			RawInput:  json.RawMessage(`{"path":"/repo/src/main.go","content":"package main"}`),
		},
		Options: []store.ApprovalOption{
			{OptionID: "allow", Name: "Allow once", Kind: "allow_once"},
			{OptionID: "reject", Name: "Reject", Kind: "reject_once"},
		},
	})
	if err != nil {
		t.Fatalf("opening an approval: %v", err)
	}
	return a.ID
}

// TestDashboard_Approvals drives the approvals inbox on two open pages
// against a real server whose governance opens an approval for a running
// child (as an ACP provider with permission: ask would): both badges count
// it live, the child's tree row says it waits, and a card shows the tool
// call's title, kind, path and (collapsed) raw input with the options as
// buttons. Deciding on one page drops the approval from both; the other
// page's card says who decided. A decision that comes second — made
// elsewhere while this page was offline — is refused 409 ALREADY_DECIDED and
// the card says who decided first. The card's link opens the session. The
// first page is 800 px wide, and the inbox fits it.
func TestDashboard_Approvals(t *testing.T) {
	t.Parallel()
	hold := make(chan struct{})
	defer close(hold)
	srv := startServer(t, replying(map[string]chan struct{}{"Edit the code": hold}))
	a := newBrowser(t)
	a.do("narrowing the window to 800 px", chromedp.EmulateViewport(800, 900))
	openDashboard(a, srv.URL)
	other := newBrowser(t)
	openDashboard(other, srv.URL)

	child := startRunFromForm(a, "editor", "Edit the code")
	a.waitFor("no approval is pending yet", noBadge)
	first := openApproval(t, srv, child, "Write src/main.go")
	a.waitFor("the badge counts the approval", badgeSays(1))
	other.waitFor("the other page's badge counts it too", badgeSays(1))
	a.waitFor("the child's row says it waits for approval", nodeIn(child, "running")+`?.querySelector('[data-testid="node-waiting"]')?.textContent.includes('waiting for approval')`)
	a.screenshot("badge")

	for _, b := range []*browser{a, other} {
		b.click("opening Approvals", `[data-testid="nav-approvals"]`)
		b.waitFor("the inbox shows the card with the tool call and options", `!document.querySelector('#approvals-page').hidden && location.hash.startsWith('#v=approvals') && `+
			apCard+`?.dataset.id === `+jsString(first)+` && `+
			apCard+`.querySelector('[data-testid="ap-title"]').textContent === 'Write src/main.go' && `+
			apCard+`.querySelector('[data-testid="ap-kind"]').textContent === 'edit' && `+
			apCard+`.querySelector('[data-testid="ap-path"]').textContent === '/repo/src/main.go:3' && `+
			`!`+apCard+`.querySelector('[data-testid="ap-input"]').open && `+apCard+`.querySelector('[data-testid="ap-input"] pre').textContent.includes('package main') && `+
			apCard+`.querySelector('[data-testid="ap-session"]').textContent === 'editor' && `+
			`[...`+apCard+`.querySelectorAll('[data-testid="ap-option"]')].map(b => b.textContent).join('|') === '✓ Allow once|✕ Reject'`)
	}
	a.waitFor("the inbox fits an 800 px window", fitsWindow)
	a.screenshot("inbox")

	a.do("allowing once", chromedp.Click(chromedp.CSS(`[data-testid="ap-option"][data-option="allow"]`)))
	a.waitFor("the card says the agent was answered", apStatus+`.startsWith('✓ Answered "Allow once"') && `+apCard+`.dataset.decision === 'allow'`)
	a.waitFor("the badge is gone", noBadge)
	other.waitFor("the other page drops it from its badge and says who decided", noBadge+` && `+apCard+`.dataset.closed === 'true' && `+
		apStatus+`.includes('Already decided by ') && `+apStatus+`.includes('"Allow once"') && `+
		`[...`+apCard+`.querySelectorAll('[data-testid="ap-option"]')].every(b => b.disabled)`)
	a.waitFor("the row no longer waits", nodeIn(child, "running")+`?.querySelector('[data-testid="node-waiting"]') === null`)
	other.screenshot("decided elsewhere")

	// Decided elsewhere while the other page is offline: its click comes second.
	other.do("leaving and reopening the inbox", chromedp.Click(chromedp.CSS(`[data-testid="nav-sessions"]`)))
	second := openApproval(t, srv, child, "Run the tests")
	other.waitFor("the badge counts the second approval", badgeSays(1))
	other.do("opening Approvals", chromedp.Click(chromedp.CSS(`[data-testid="nav-approvals"]`)))
	other.waitFor("the inbox shows only the second approval", `document.querySelectorAll('[data-testid="approval"]').length === 1 && `+apCard+`.dataset.id === `+jsString(second))
	srv.refuseStreams(true)
	srv.CloseClientConnections()
	other.waitFor("the page is offline", `document.querySelector('#conn').dataset.state === 'offline'`)
	srv.call(t, http.MethodPost, "/v1/approvals/"+second+"/decision", `{"optionId":"reject"}`, http.StatusOK)
	other.do("allowing once, too late", chromedp.Click(chromedp.CSS(`[data-testid="ap-option"][data-option="allow"]`)))
	other.waitFor("the card says who decided first", apStatus+`.startsWith('✕ Already decided by ') && `+apStatus+`.includes('"Reject"') && `+apCard+`.dataset.closed === 'true'`)
	other.screenshot("already decided")
	srv.refuseStreams(false)
	other.waitFor("back online, nothing is pending", connConnected+` && `+noBadge)
	a.waitFor("the first page has nothing pending either", connConnected+` && `+noBadge)

	a.do("following the card's link to the session", chromedp.Click(chromedp.CSS(`[data-testid="ap-session"]`)))
	a.waitFor("the sessions page shows the asking child", `!document.querySelector('#sessions-page').hidden && document.querySelector('#approvals-page').hidden && `+
		selectedNode+`?.dataset.id === `+jsString(child))
}
