package web_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	apihttp "github.com/subagentd/subagentd/internal/http"
	"github.com/subagentd/subagentd/internal/webhooks"
)

// receiver is a loopback webhook receiver: it answers status (204 unless
// set otherwise) and sends the webhook-id of every request it got.
type receiver struct {
	*httptest.Server
	status atomic.Int32
	ids    chan string
}

func startReceiver(t *testing.T) *receiver {
	t.Helper()
	rc := &receiver{ids: make(chan string, 256)}
	rc.status.Store(http.StatusNoContent)
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		rc.ids <- r.Header.Get("webhook-id")
		w.WriteHeader(int(rc.status.Load()))
	}))
	t.Cleanup(rc.Close)
	return rc
}

// next returns the webhook-id of the next request the receiver got.
func (rc *receiver) next(t *testing.T) string {
	t.Helper()
	select {
	case id := <-rc.ids:
		return id
	case <-time.After(waitTimeout):
		t.Fatalf("the receiver got no request within %s", waitTimeout)
		return ""
	}
}

// withWebhooks gives the server a running webhook service over its store
// that may deliver to loopback (the receiver of the test).
func withWebhooks(t *testing.T) func(*apihttp.Config) {
	return func(cfg *apihttp.Config) {
		svc := webhooks.New(webhooks.Config{Store: cfg.Store, Logger: cfg.Logger, Owner: "web-test", AllowPrivate: true})
		svc.Start(context.Background())
		// Registered before startServer's own cleanup, so it runs after it.
		t.Cleanup(svc.Stop)
		cfg.Webhooks = svc
	}
}

// Conditions on the Webhooks page; card is the endpoint's card.
const (
	card         = `document.querySelector('[data-testid="webhook"]')`
	secretValue  = `document.querySelector('[data-testid="wh-secret-value"]')?.value`
	fitsWindow   = `document.documentElement.scrollWidth <= innerWidth`
	deliveryRows = `[...document.querySelectorAll('[data-testid="wh-delivery"]')]`
)

// deliveriesAre is true when the page lists n delivery rows.
func deliveriesAre(n int) string {
	return fmt.Sprintf(`%s.length === %d`, deliveryRows, n)
}

// TestDashboard_Webhooks drives the Webhooks page against a real server
// and a loopback receiver at 800 px: an empty form is refused next to its
// fields, a bad URL in the server's words; an endpoint is created and its
// secret shown once; Send test adds a succeeded row, and a receiver
// answering 500 a failed one; Redeliver sends that event again with the
// same webhook-id; a run's events arrive on the open page by themselves;
// the log pages; disable, enable, edit and rotate work; a 410 disables the
// endpoint and the page says why; delete asks first.
func TestDashboard_Webhooks(t *testing.T) {
	t.Parallel()
	rc := startReceiver(t)
	srv := startServer(t, replying(nil), withWebhooks(t))
	b := newBrowser(t)
	b.do("narrowing the window to 800 px", chromedp.EmulateViewport(800, 900))
	openDashboard(b, srv.URL+"/")

	b.click("opening Webhooks from the top bar", `[data-testid="nav-webhooks"]`)
	b.waitFor("the page is shown, empty, and the sessions are not", `!document.querySelector('#webhooks-page').hidden && document.querySelector('#sessions-page').hidden &&
		!document.querySelector('[data-testid="wh-empty"]').hidden && document.querySelector('[data-testid="wh-count"]').textContent === '(0)' &&
		document.querySelector('[data-testid="nav-webhooks"]').getAttribute('aria-current') === 'page' && location.hash === '#v=webhooks'`)
	offered := eval[[]string](b, "reading the event checkboxes", `[...document.querySelectorAll('#wh-events-list input')].map(c => c.value)`)
	if want := slices.DeleteFunc(slices.Clone(webhooks.EventTypes), func(s string) bool { return s == webhooks.Test }); !slices.Equal(offered, want) {
		t.Fatalf("the form offers events %v, want every subscribable type %v", offered, want)
	}

	// Nothing filled in: said next to each field before any request.
	b.do("submitting the form empty, with no event chosen",
		chromedp.Click(chromedp.CSS(`[data-testid="wh-event-run.settled"]`)),
		chromedp.Click(chromedp.CSS(`[data-testid="wh-event-task.settled"]`)),
		chromedp.Click(chromedp.CSS(`[data-testid="wh-create"]`)))
	b.waitFor("the URL and the events are asked for", `document.querySelector('[data-testid="wh-url-error"]').textContent === 'Enter the URL that receives the deliveries.' &&
		document.querySelector('[data-testid="wh-events-error"]').textContent === 'Choose at least one event type.'`)

	// A URL the server refuses: its field message and the problem's detail, in words.
	b.do("submitting an ftp URL for run.settled",
		chromedp.Click(chromedp.CSS(`[data-testid="wh-event-run.settled"]`)),
		chromedp.SendKeys(chromedp.CSS(`[data-testid="wh-url-input"]`), "ftp://example.com/hook"),
		chromedp.Click(chromedp.CSS(`[data-testid="wh-create"]`)))
	b.waitFor("the URL is refused next to its field and in the form's error line",
		`document.querySelector('[data-testid="wh-url-error"]').textContent.includes('absolute http or https URL') &&
		document.querySelector('[data-testid="wh-form-error"]').textContent.startsWith('INVALID_REQUEST — ') &&
		document.querySelector('#wh-url-input').getAttribute('aria-invalid') === 'true'`)

	// Create: the secret is shown once.
	url := rc.URL + "/hook"
	b.do("creating an endpoint for run.started and run.settled",
		chromedp.SetValue(chromedp.CSS(`[data-testid="wh-url-input"]`), url),
		chromedp.Click(chromedp.CSS(`[data-testid="wh-event-run.started"]`)),
		chromedp.SendKeys(chromedp.CSS(`[data-testid="wh-description"]`), "CI receiver"),
		chromedp.Click(chromedp.CSS(`[data-testid="wh-create"]`)))
	b.waitFor("the secret is shown with its warning", secretValue+`?.startsWith('whsec_') &&
		document.querySelector('[data-testid="wh-secret-warning"]').textContent.includes('You will not see this secret again') &&
		document.querySelector('[data-testid="wh-form-error"]').textContent === '' && document.querySelector('#wh-url-input').value === ''`)
	secret := eval[string](b, "reading the secret", secretValue)
	b.click("copying the secret", `[data-testid="wh-secret-copy"]`)
	b.waitFor("the copy is said in words", `document.querySelector('[data-testid="wh-secret-copied"]').textContent === '✓ Copied to the clipboard'`)
	b.waitFor("the endpoint is listed enabled, with its events, description and time", card+` &&
		document.querySelector('[data-testid="wh-state"]').textContent.trim() === '✓ Enabled' &&
		document.querySelector('[data-testid="wh-url"]').textContent === `+jsString(url)+` &&
		[...document.querySelectorAll('[data-testid="wh-events"] .chip')].map(c => c.textContent).join() === 'run.settled,run.started' &&
		`+card+`.textContent.includes('CI receiver') && `+card+`.textContent.includes('Created ') && `+fitsWindow)
	b.screenshot("created")
	id := eval[string](b, "reading the endpoint id", card+`.dataset.id`)
	b.click("saying the secret is stored", `[data-testid="wh-secret-done"]`)
	b.waitFor("the secret is gone from the page", `document.querySelector('[data-testid="wh-secret"]').hidden && !document.body.innerHTML.includes(`+jsString(secret)+`)`)

	// Send test: a succeeded row.
	b.click("sending a test", `[data-testid="wh-test"]`)
	testID := rc.next(t)
	b.waitFor("the log opens with a succeeded webhook.test row", deliveriesAre(1)+` && (() => {
		const r = `+deliveryRows+`[0];
		return r.dataset.type === 'webhook.test' && r.dataset.status === 'succeeded' &&
			r.querySelector('[data-testid="wh-delivery-status"]').textContent.trim() === '✓ succeeded' &&
			r.querySelector('[data-testid="wh-delivery-http"]').textContent === '204';
	})() && document.querySelector('[data-testid="wh-status"]').textContent.startsWith('✓ Test sent — webhook.test attempt 1 succeeded')`)

	// A receiver answering 500: a failed attempt.
	rc.status.Store(http.StatusInternalServerError)
	b.click("sending a test to the failing receiver", `[data-testid="wh-test"]`)
	failedID := rc.next(t)
	if failedID == testID {
		t.Fatalf("two tests share webhook-id %s", failedID)
	}
	b.waitFor("a failed row with HTTP 500 is on top", deliveriesAre(2)+` && (() => {
		const r = `+deliveryRows+`[0];
		return r.dataset.status === 'failed' && r.querySelector('[data-testid="wh-delivery-status"]').textContent.trim() === '✕ failed' &&
			r.querySelector('[data-testid="wh-delivery-http"]').textContent === '500' &&
			r.querySelector('[data-testid="wh-delivery-error"]').textContent === 'HTTP 500';
	})() && document.querySelector('[data-testid="wh-status"]').textContent.startsWith('✕ Test sent — webhook.test attempt 1 failed: HTTP 500') && `+fitsWindow)
	b.screenshot("failed")

	// Redeliver the failed one once the receiver is back: same webhook-id.
	rc.status.Store(http.StatusNoContent)
	b.click("redelivering the failed attempt", `[data-testid="wh-delivery"][data-status="failed"] [data-testid="wh-redeliver"]`)
	if got := rc.next(t); got != failedID {
		t.Fatalf("the redelivery carried webhook-id %s, want %s", got, failedID)
	}
	b.waitFor("a succeeded attempt 2 is on top", deliveriesAre(3)+` && `+deliveryRows+`[0].dataset.status === 'succeeded' &&
		`+deliveryRows+`[0].children[2].textContent === '2' &&
		document.querySelector('[data-testid="wh-status"]').textContent.startsWith('✓ Redelivered — webhook.test attempt 2 succeeded')`)

	// A run's events arrive on the open page by themselves.
	root := srv.seeder(t).root("hooks", time.Now())
	srv.runToEnd(t, root, "notify")
	rc.next(t)
	rc.next(t)
	b.waitFor("run.started and run.settled rows appear without a click", `['run.started', 'run.settled'].every(ty =>
		`+deliveryRows+`.some(r => r.dataset.type === ty && r.dataset.status === 'succeeded')) && `+deliveriesAre(5))
	b.screenshot("deliveries")

	// Paging: with the log closed, 20 more tests make 25 deliveries; the
	// log opened again shows the newest 20 and pages to the rest.
	b.click("closing the delivery log", `[data-testid="wh-log"] > summary`)
	b.waitFor("the closed log holds no rows", deliveriesAre(0))
	for range 20 {
		var d struct {
			Status string `json:"status"`
		}
		srv.postJSON(t, "/v1/webhooks/"+id+"/test", nil, &d)
		rc.next(t)
		if d.Status != "succeeded" {
			t.Fatalf("a test through the API: %s", d.Status)
		}
	}
	b.click("opening the delivery log", `[data-testid="wh-log"] > summary`)
	b.waitFor("the first page of 20 is shown with a way to older ones", deliveriesAre(20)+` && !document.querySelector('[data-testid="wh-more"]').hidden`)
	b.click("showing older deliveries", `[data-testid="wh-more"]`)
	b.waitFor("all 25 are listed, newest first, and nothing more is offered", deliveriesAre(25)+` && document.querySelector('[data-testid="wh-more"]').hidden &&
		`+deliveryRows+`.at(-1).dataset.type === 'webhook.test' && `+deliveryRows+`.at(-1).dataset.status === 'succeeded' && `+fitsWindow)

	// Disable and enable.
	b.click("disabling", `[data-testid="wh-disable"]`)
	b.waitFor("the endpoint says it is disabled by request", `document.querySelector('[data-testid="wh-state"]').textContent.trim() === '‖ Disabled by request' &&
		document.querySelector('[data-testid="wh-enable"]')?.textContent === 'Enable' && `+card+`.dataset.enabled === 'false'`)
	var hook struct {
		Enabled        bool   `json:"enabled"`
		DisabledReason string `json:"disabledReason"`
	}
	srv.getJSON(t, "/v1/webhooks/"+id, &hook)
	if hook.Enabled || hook.DisabledReason != "manual" {
		t.Fatalf("after Disable the API says enabled=%v reason=%q", hook.Enabled, hook.DisabledReason)
	}
	b.screenshot("disabled")
	b.click("enabling", `[data-testid="wh-enable"]`)
	b.waitFor("the endpoint is enabled again", `document.querySelector('[data-testid="wh-state"]').textContent.trim() === '✓ Enabled' && `+card+`.dataset.enabled === 'true'`)
	srv.getJSON(t, "/v1/webhooks/"+id, &hook)
	if !hook.Enabled {
		t.Fatal("after Enable the API says the endpoint is disabled")
	}

	// Edit: the form takes the endpoint; Save changes it.
	b.click("editing the endpoint", `[data-testid="wh-edit"]`)
	b.waitFor("the form holds the endpoint", `document.querySelector('#wh-form-h').textContent === `+jsString("Edit endpoint "+id)+` &&
		document.querySelector('#wh-url-input').value === `+jsString(url)+` && document.querySelector('#wh-description').value === 'CI receiver' &&
		[...document.querySelectorAll('#wh-events-list input:checked')].map(c => c.value).join() === 'run.started,run.settled' &&
		document.querySelector('[data-testid="wh-create"]').textContent === 'Save changes' && document.activeElement.id === 'wh-url-input'`)
	b.do("adding task.started and a new description",
		chromedp.Click(chromedp.CSS(`[data-testid="wh-event-task.started"]`)),
		chromedp.SetValue(chromedp.CSS(`[data-testid="wh-description"]`), "CI receiver v2"),
		chromedp.Click(chromedp.CSS(`[data-testid="wh-create"]`)))
	b.waitFor("the card shows the change and the form adds again", `[...document.querySelectorAll('[data-testid="wh-events"] .chip')].map(c => c.textContent).join() === 'run.settled,run.started,task.started' &&
		`+card+`.textContent.includes('CI receiver v2') && document.querySelector('[data-testid="wh-status"]').textContent === '✓ Changes saved' &&
		document.querySelector('#wh-form-h').textContent === 'Add an endpoint' && document.querySelector('[data-testid="wh-cancel"]').hidden &&
		document.querySelector('#wh-url-input').value === ''`)
	var edited struct {
		Events      []string `json:"events"`
		Description string   `json:"description"`
	}
	srv.getJSON(t, "/v1/webhooks/"+id, &edited)
	if !slices.Equal(edited.Events, []string{"run.settled", "run.started", "task.started"}) || edited.Description != "CI receiver v2" {
		t.Fatalf("after the edit the API says events %v, description %q", edited.Events, edited.Description)
	}

	// Rotate: a new secret, shown once.
	b.click("rotating the secret", `[data-testid="wh-rotate"]`)
	b.waitFor("a new secret is shown with the overlap said", secretValue+`?.startsWith('whsec_') && `+secretValue+` !== `+jsString(secret)+` &&
		document.querySelector('[data-testid="wh-secret"]').textContent.includes('Secret rotated') &&
		document.querySelector('[data-testid="wh-secret-warning"]').textContent.includes('24 hours')`)
	rotated := eval[string](b, "reading the new secret", secretValue)
	b.screenshot("rotated")
	b.click("saying the new secret is stored", `[data-testid="wh-secret-done"]`)
	b.waitFor("the new secret is gone from the page", `!document.body.innerHTML.includes(`+jsString(rotated)+`)`)

	// A receiver answering 410 to a run's event: disabled, and why.
	rc.status.Store(http.StatusGone)
	srv.runToEnd(t, root, "gone")
	b.waitFor("the endpoint says the receiver answered 410", `document.querySelector('[data-testid="wh-state"]').textContent.trim() === '✕ Disabled — the receiver answered 410 Gone' &&
		`+deliveryRows+`[0].dataset.type === 'run.started' && `+deliveryRows+`[0].dataset.status === 'failed' &&
		`+deliveryRows+`[0].querySelector('[data-testid="wh-delivery-http"]').textContent === '410'`)
	b.screenshot("gone")
	rc.status.Store(http.StatusNoContent)

	// Delete asks first; Keep it keeps it.
	b.do("asking to delete, then keeping it",
		chromedp.Click(chromedp.CSS(`[data-testid="wh-delete"]`)),
		chromedp.Click(chromedp.CSS(`[data-testid="wh-delete-no"]`)))
	b.waitFor("the endpoint is still listed", card+` && !document.querySelector('[data-testid="wh-delete"]').hidden && document.querySelector('[data-testid="wh-confirm"]').hidden`)
	b.click("asking to delete", `[data-testid="wh-delete"]`)
	b.waitFor("the confirmation is shown", `!document.querySelector('[data-testid="wh-confirm"]').hidden`)
	b.screenshot("confirm-delete")
	b.click("confirming the delete", `[data-testid="wh-delete-yes"]`)
	b.waitFor("the page is empty again, the focus on its heading", `!`+card+` && !document.querySelector('[data-testid="wh-empty"]').hidden &&
		document.activeElement.id === 'webhooks-h' &&
		document.querySelector('[data-testid="wh-load-status"]').textContent === `+jsString("✓ Deleted "+url))
	var list struct {
		Webhooks []struct{} `json:"webhooks"`
	}
	srv.getJSON(t, "/v1/webhooks", &list)
	if len(list.Webhooks) != 0 {
		t.Fatalf("after the delete the API lists %d endpoints", len(list.Webhooks))
	}

	b.click("going back to the sessions", `[data-testid="nav-sessions"]`)
	b.waitFor("the sessions are shown again", `!document.querySelector('#sessions-page').hidden && document.querySelector('#webhooks-page').hidden &&
		!location.hash.includes('webhooks')`)
	if strings.Contains(eval[string](b, "reading the page", `document.body.innerText`), secret) {
		t.Fatal("a secret is still in the page")
	}
}

// TestDashboard_WebhooksNotConfigured: a deep link to the Webhooks page of
// a server that delivers no webhooks says so in words.
func TestDashboard_WebhooksNotConfigured(t *testing.T) {
	t.Parallel()
	srv := startServer(t, replying(nil))
	b := newBrowser(t)
	b.do("opening the Webhooks page by its link", chromedp.Navigate(srv.URL+"/#v=webhooks"))
	b.waitFor("the page says the server delivers no webhooks", `!document.querySelector('#webhooks-page').hidden &&
		document.querySelector('[data-testid="wh-load-status"]').textContent.startsWith('✕ Loading webhook endpoints: NOT_READY — this server delivers no webhooks')`)
}
