package http

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/subagentd/subagentd/internal/children"
	"github.com/subagentd/subagentd/internal/governance"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
	"github.com/subagentd/subagentd/internal/webhooks"
)

// hookRequest is one request a webhook receiver got.
type hookRequest struct {
	header http.Header
	body   []byte
}

// startWebhooks is a bundle whose server has a webhook service (loopback
// destinations allowed) and a receiver answering 200.
func startWebhooks(t *testing.T) (*testBundle, string, chan hookRequest) {
	t.Helper()
	url, got := hookReceiver(t)
	b := start(t, func(b *testBundle, cfg *Config) { withWebhooks(b, cfg, true) })
	return b, url, got
}

// hookReceiver is a webhook receiver answering 200; it returns its URL and
// the requests it got.
func hookReceiver(t *testing.T) (string, chan hookRequest) {
	t.Helper()
	got := make(chan hookRequest, 100)
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- hookRequest{header: r.Header.Clone(), body: b}
	}))
	t.Cleanup(rc.Close)
	return rc.URL, got
}

// withWebhooks gives cfg a running webhook service over the bundle's
// store, stopped with the bundle; allowPrivate lets it reach loopback.
func withWebhooks(b *testBundle, cfg *Config, allowPrivate bool) {
	svc := webhooks.New(webhooks.Config{Store: b.st, Logger: b.log, Owner: "test", AllowPrivate: allowPrivate})
	svc.Start(context.Background())
	b.stops = append(b.stops, func(context.Context) error { svc.Stop(); return nil })
	cfg.Webhooks = svc
}

// nextHook returns the next delivery, after checking its body against the
// schema api/openapi.yaml's webhooks section gives its type.
func nextHook(t *testing.T, got chan hookRequest) hookRequest {
	t.Helper()
	select {
	case r := <-got:
		checkHookBody(t, r.body)
		return r
	case <-time.After(30 * time.Second):
		t.Fatal("no webhook delivery within 30s")
		return hookRequest{}
	}
}

// nextSigned returns the next delivery, checked as nextHook does and
// verified with wh, with its type and data.
func nextSigned(t *testing.T, got chan hookRequest, wh *standardwebhooks.Webhook) (req hookRequest, typ string, data map[string]string) {
	t.Helper()
	req = nextHook(t, got)
	if err := wh.Verify(req.body, req.header); err != nil {
		t.Fatalf("%s does not verify: %v", req.body, err)
	}
	var body struct {
		Type string            `json:"type"`
		Data map[string]string `json:"data"`
	}
	if err := json.Unmarshal(req.body, &body); err != nil {
		t.Fatal(err)
	}
	return req, body.Type, body.Data
}

// checkHookBody fails t unless body is the payload the spec describes for
// its type.
func checkHookBody(t *testing.T, body []byte) {
	t.Helper()
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("webhook body %s: %v", body, err)
	}
	typ, _ := v.(map[string]any)["type"].(string)
	doc, _ := spec(t)
	item := doc.Webhooks[typ]
	if item == nil || item.Post == nil || item.Post.RequestBody == nil {
		t.Fatalf("api/openapi.yaml's webhooks section has no %q (body %s)", typ, body)
	}
	sch := item.Post.RequestBody.Value.Content.Get("application/json").Schema.Value
	if err := sch.VisitJSON(v, openapi3.EnableJSONSchema2020()); err != nil {
		t.Fatalf("webhook body %s does not match the spec's %s: %v", body, typ, err)
	}
}

// Approvals and tree events reach webhooks as approval.requested,
// approval.decided and tree.cancelled: signed, each naming its approval
// or session and the tree's root.
func TestWebhooks_ApprovalAndTreeEvents(t *testing.T) {
	t.Parallel()
	url, got := hookReceiver(t)
	w := setupAsk(t, func(b *testBundle, cfg *Config) {
		withWebhooks(b, cfg, true)
		mgr := children.NewManager(b.svc, children.ManagerConfig{Logger: b.log})
		cfg.Trees = governance.NewTrees(governance.TreesConfig{Store: b.st, Runs: mgr, Roots: noRoots{}, Logger: b.log})
		b.stops = append(b.stops, mgr.Shutdown)
	})
	var hook webhookJSON
	w.want(t, http.StatusCreated, call{method: http.MethodPost, path: "/v1/webhooks", body: map[string]any{
		"url": url, "events": []string{"approval.requested", "approval.decided", "tree.cancelled"},
	}}).decode(t, &hook)
	wh, err := standardwebhooks.NewWebhook(hook.Secret)
	if err != nil {
		t.Fatal(err)
	}
	next := func(want string) map[string]string {
		t.Helper()
		req, typ, data := nextSigned(t, got, wh)
		if typ != want {
			t.Fatalf("delivery %s, want %s", req.body, want)
		}
		return data
	}

	run, root, events := w.startAsking(t)
	_, asked := nextEvent(t, events)
	id := asked["approvalId"].(string)
	for _, typ := range []string{"approval.requested", "approval.decided"} {
		if typ == "approval.decided" {
			w.want(t, http.StatusOK, call{method: http.MethodPost, path: "/v1/approvals/" + id + "/decision", body: map[string]any{"outcome": "allow"}})
		}
		d := next(typ)
		if d["approvalId"] != id || d["sessionId"] != run.ChildSessionID || d["parentSessionId"] != root ||
			d["rootSessionId"] != root || d["provider"] != "peer" {
			t.Fatalf("%s data %v, want approval %s of %s under %s", typ, d, id, run.ChildSessionID, root)
		}
	}
	w.settled(t, run.RunID)
	w.want(t, http.StatusAccepted, call{method: http.MethodPost, path: "/v1/sessions/" + root + "/cancel"})
	if d := next("tree.cancelled"); d["sessionId"] != root || d["rootSessionId"] != root {
		t.Fatalf("tree.cancelled data %v, want the tree of %s", d, root)
	}
}

func TestWebhooks_RunEventsSignedAndManaged(t *testing.T) {
	b, url, got := startWebhooks(t)
	p := b.register(t, &fakeProvider{name: "spawn", caps: allCaps(), local: true})
	parent := b.rootSession(t)

	var hook webhookJSON
	r := b.want(t, http.StatusCreated, call{method: http.MethodPost, path: "/v1/webhooks", body: map[string]any{
		"url": url, "events": []string{"run.started", "run.settled"}, "description": "ci",
	}})
	r.decode(t, &hook)
	if !strings.HasPrefix(hook.Secret, "whsec_") || !hook.Enabled || r.header.Get("Location") != "/v1/webhooks/"+hook.ID {
		t.Fatalf("created %+v (Location %q)", hook, r.header.Get("Location"))
	}
	wh, err := standardwebhooks.NewWebhook(hook.Secret)
	if err != nil {
		t.Fatal(err)
	}

	run := b.startRun(t, "spawn", parent, nil)
	p.run(run.ChildSessionID).complete(t, "done")
	for _, want := range []string{"run.started", "run.settled"} {
		req, typ, data := nextSigned(t, got, wh)
		if typ != want || data["runId"] != run.RunID || data["sessionId"] != run.ChildSessionID ||
			data["parentSessionId"] != parent || data["rootSessionId"] != parent || data["provider"] != "spawn" {
			t.Fatalf("payload %s, want %s of run %+v", req.body, want, run)
		}
		if want == "run.settled" && data["stopReason"] != subagent.StopCompleted {
			t.Fatalf("settled payload %s", req.body)
		}
	}

	var list webhookListJSON
	b.want(t, http.StatusOK, call{method: http.MethodGet, path: "/v1/webhooks"}).decode(t, &list)
	if len(list.Webhooks) != 1 || list.Webhooks[0].ID != hook.ID || list.Webhooks[0].Secret != "" {
		t.Fatalf("list %+v", list)
	}
	var one webhookJSON
	b.want(t, http.StatusOK, call{method: http.MethodGet, path: "/v1/webhooks/" + hook.ID}).decode(t, &one)
	if one.Secret != "" || one.Description != "ci" || one.URL != url {
		t.Fatalf("get %+v", one)
	}
	b.want(t, http.StatusOK, call{method: http.MethodPatch, path: "/v1/webhooks/" + hook.ID, body: map[string]any{"enabled": false}}).decode(t, &one)
	if one.Enabled || one.DisabledReason != "manual" {
		t.Fatalf("disabled %+v", one)
	}
	var on webhookJSON
	b.want(t, http.StatusOK, call{method: http.MethodPatch, path: "/v1/webhooks/" + hook.ID, body: map[string]any{"enabled": true}}).decode(t, &on)
	if !on.Enabled || on.DisabledReason != "" {
		t.Fatalf("re-enabled %+v", on)
	}

	var rot webhookJSON
	b.want(t, http.StatusOK, call{method: http.MethodPost, path: "/v1/webhooks/" + hook.ID + "/rotate"}).decode(t, &rot)
	if rot.Secret == hook.Secret || !strings.HasPrefix(rot.Secret, "whsec_") {
		t.Fatalf("rotated secret %q", rot.Secret)
	}
	var test deliveryJSON
	b.want(t, http.StatusOK, call{method: http.MethodPost, path: "/v1/webhooks/" + hook.ID + "/test"}).decode(t, &test)
	if test.Type != webhooks.Test || test.Status != store.DeliverySucceeded || test.HTTPStatus != http.StatusOK {
		t.Fatalf("test delivery %+v", test)
	}
	req := nextHook(t, got)
	for _, secret := range []string{hook.Secret, rot.Secret} {
		w, _ := standardwebhooks.NewWebhook(secret)
		if err := w.Verify(req.body, req.header); err != nil {
			t.Fatalf("test event does not verify with %s…: %v", secret[:10], err)
		}
	}

	var redo deliveryJSON
	b.want(t, http.StatusOK, call{method: http.MethodPost, path: "/v1/webhooks/" + hook.ID + "/deliveries/" + test.ID + "/redeliver"}).decode(t, &redo)
	if redo.EventID != test.EventID || redo.Attempt != 2 {
		t.Fatalf("redelivery %+v of %+v", redo, test)
	}
	if again := nextHook(t, got); string(again.body) != string(req.body) || again.header.Get("webhook-id") != test.EventID {
		t.Fatalf("redelivered %s %s, want %s %s", again.header.Get("webhook-id"), again.body, test.EventID, req.body)
	}

	var page deliveryListJSON
	b.want(t, http.StatusOK, call{method: http.MethodGet, path: "/v1/webhooks/" + hook.ID + "/deliveries?limit=2"}).decode(t, &page)
	if len(page.Deliveries) != 2 || page.Deliveries[0].ID != redo.ID || page.NextCursor == "" {
		t.Fatalf("first page %+v", page)
	}
	var rest deliveryListJSON
	b.want(t, http.StatusOK, call{method: http.MethodGet, path: "/v1/webhooks/" + hook.ID + "/deliveries?after=" + page.NextCursor}).decode(t, &rest)
	if len(rest.Deliveries) != 2 || rest.NextCursor != "" || rest.Deliveries[1].Type != "run.started" {
		t.Fatalf("second page %+v", rest)
	}

	b.want(t, http.StatusNoContent, call{method: http.MethodDelete, path: "/v1/webhooks/" + hook.ID})
	b.wantProblem(t, http.StatusNotFound, webhooks.ENotFound, call{method: http.MethodGet, path: "/v1/webhooks/" + hook.ID})
	b.wantProblem(t, http.StatusNotFound, webhooks.ENotFound, call{method: http.MethodPost, path: "/v1/webhooks/" + hook.ID + "/test"})
}

func TestWebhooks_BadInput(t *testing.T) {
	b, url, _ := startWebhooks(t)
	b.wantProblem(t, http.StatusBadRequest, subagent.EInvalidRequest, call{method: http.MethodPost, path: "/v1/webhooks",
		body: map[string]any{"url": url, "events": []string{"run.exploded"}}, invalid: true})
	b.wantProblem(t, http.StatusBadRequest, subagent.EInvalidRequest, call{method: http.MethodPost, path: "/v1/webhooks",
		body: map[string]any{"url": "ftp://files.example/", "events": []string{"run.started"}}})
	b.wantProblem(t, http.StatusBadRequest, subagent.EInvalidRequest, call{method: http.MethodPost, path: "/v1/webhooks",
		body: map[string]any{"url": url}, invalid: true})
	b.wantProblem(t, http.StatusBadRequest, subagent.EInvalidRequest, call{method: http.MethodPost, path: "/v1/webhooks",
		body: map[string]any{"url": url, "events": []string{"run.started"}, "secret": "mine"}, invalid: true})
	var hook webhookJSON
	b.want(t, http.StatusCreated, call{method: http.MethodPost, path: "/v1/webhooks", body: map[string]any{"url": url, "events": []string{"run.started"}}}).decode(t, &hook)
	b.wantProblem(t, http.StatusNotFound, webhooks.EDeliveryNotFound, call{method: http.MethodPost, path: "/v1/webhooks/" + hook.ID + "/deliveries/dlv_x/redeliver"})
	b.wantProblem(t, http.StatusBadRequest, subagent.EInvalidRequest, call{method: http.MethodGet, path: "/v1/webhooks/" + hook.ID + "/deliveries?after=dlv_x"})
	// Another tenant's endpoint is invisible.
	other := store.WithTenant(context.Background(), "acme")
	if _, err := b.srv.hooks.Get(other, hook.ID); subagent.ErrorCode(err) != webhooks.ENotFound {
		t.Fatalf("another tenant's get = %v", err)
	}
}

func TestWebhooks_NotReadyWithoutService(t *testing.T) {
	b := setup(t)
	b.wantProblem(t, http.StatusServiceUnavailable, codeNotReady, call{method: http.MethodGet, path: "/v1/webhooks"})
}
