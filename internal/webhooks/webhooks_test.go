package webhooks

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/subagentd/subagentd/internal/memstore"
	"github.com/subagentd/subagentd/internal/netguard"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// deadline bounds every wait of these tests: generous for a loaded 2-core
// machine; a healthy run takes milliseconds.
const deadline = 30 * time.Second

// received is one request a receiver got.
type received struct {
	header http.Header
	body   []byte
}

// receiver is a real HTTP server on loopback that records each request
// and answers with answer(n) for the n-th (from 1).
type receiver struct {
	srv    *httptest.Server
	got    chan received
	mu     sync.Mutex
	n      int
	answer func(n int, r *http.Request) int
}

func newReceiver(t *testing.T, answer func(n int, r *http.Request) int) *receiver {
	t.Helper()
	rc := &receiver{got: make(chan received, 1000), answer: answer}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		rc.mu.Lock()
		rc.n++
		n := rc.n
		rc.mu.Unlock()
		status := http.StatusNoContent
		if rc.answer != nil {
			status = rc.answer(n, r)
		}
		rc.got <- received{header: r.Header.Clone(), body: b}
		w.WriteHeader(status)
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

// next returns the next request, failing t after deadline.
func (rc *receiver) next(t *testing.T) received {
	t.Helper()
	select {
	case r := <-rc.got:
		return r
	case <-time.After(deadline):
		t.Fatalf("no delivery within %v", deadline)
		return received{}
	}
}

// none fails t if a request is waiting.
func (rc *receiver) none(t *testing.T) {
	t.Helper()
	select {
	case r := <-rc.got:
		t.Fatalf("unexpected delivery %s", r.body)
	default:
	}
}

type bundle struct {
	st  *memstore.Store
	svc *Service
}

// setup starts a Service over a memstore with a root session "root" and
// its child "child". cfg adjusts the config.
func setup(t *testing.T, cfg func(*Config)) *bundle {
	t.Helper()
	st := memstore.New()
	ctx := t.Context()
	for _, s := range []store.Session{{ID: "root"}, {ID: "mid", ParentID: "root"}, {ID: "child", ParentID: "mid", Origin: "subagent"}} {
		if err := st.CreateSession(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	c := Config{Store: st, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Owner: "test", AllowPrivate: true, Retry: []time.Duration{10 * time.Millisecond, 20 * time.Millisecond}}
	if cfg != nil {
		cfg(&c)
	}
	svc := New(c)
	svc.Start(ctx)
	t.Cleanup(svc.Stop)
	return &bundle{st: st, svc: svc}
}

// event appends a lifecycle event of a run of "child" under "mid".
func (b *bundle) event(t *testing.T, e subagent.Event) store.LifecycleEvent {
	t.Helper()
	if e.ID == "" {
		e.ID, e.ParentID, e.Provider = "child", "mid", "spawn"
	}
	payload, err := subagent.EventPayload(e)
	if err != nil {
		t.Fatal(err)
	}
	le, err := b.st.AppendLifecycle(t.Context(), store.LifecycleEvent{Type: e.Type, ParentID: e.ParentID, RunID: e.RunID, Payload: payload})
	if err != nil {
		t.Fatal(err)
	}
	return le
}

func (b *bundle) create(t *testing.T, url string, events ...string) store.Webhook {
	t.Helper()
	w, err := b.svc.Create(t.Context(), CreateParams{URL: url, Events: events})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// verify checks r's signature with the Standard Webhooks reference library
// (independent of this package's signing code).
func verify(t *testing.T, secret string, r received) {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	if err := wh.Verify(r.body, r.header); err != nil {
		t.Fatalf("signature of %s does not verify: %v (headers %v)", r.body, err, r.header)
	}
}

var traceparentRE = regexp.MustCompile(`^00-[0-9a-f]{32}-[0-9a-f]{16}-01$`)

func TestDeliver_SignedRunAndTaskEvents(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	rc := newReceiver(t, nil)
	b.event(t, subagent.Event{Type: subagent.EventStart, RunID: "run-old"}) // before the endpoint: never sent
	w := b.create(t, rc.srv.URL, RunStarted, RunSettled, TaskSettled)
	if !strings.HasPrefix(w.Secret, "whsec_") {
		t.Fatalf("secret %q", w.Secret)
	}
	start := b.event(t, subagent.Event{Type: subagent.EventStart, RunID: "run-1"})
	b.event(t, subagent.Event{Type: subagent.EventStart, RunID: "run-2", TaskID: "task-2"}) // task.started: not subscribed
	end := b.event(t, subagent.Event{Type: subagent.EventEnd, RunID: "run-1", StopReason: "completed"})
	tend := b.event(t, subagent.Event{Type: subagent.EventEnd, RunID: "run-2", TaskID: "task-2", StopReason: "error"})

	type payload struct {
		Type      string            `json:"type"`
		Timestamp time.Time         `json:"timestamp"`
		Data      map[string]string `json:"data"`
	}
	want := []struct {
		le   store.LifecycleEvent
		typ  string
		data map[string]string
	}{
		{start, RunStarted, map[string]string{"runId": "run-1", "sessionId": "child", "parentSessionId": "mid", "rootSessionId": "root", "provider": "spawn"}},
		{end, RunSettled, map[string]string{"runId": "run-1", "sessionId": "child", "parentSessionId": "mid", "rootSessionId": "root", "provider": "spawn", "stopReason": "completed"}},
		{tend, TaskSettled, map[string]string{"taskId": "task-2", "sessionId": "child", "parentSessionId": "mid", "rootSessionId": "root", "provider": "spawn", "stopReason": "error"}},
	}
	for _, wt := range want {
		r := rc.next(t)
		verify(t, w.Secret, r)
		if id := r.header.Get("webhook-id"); id != eventID(wt.le) {
			t.Fatalf("webhook-id %q, want %q", id, eventID(wt.le))
		}
		if tp := r.header.Get("traceparent"); !traceparentRE.MatchString(tp) {
			t.Fatalf("traceparent %q", tp)
		}
		var p payload
		if err := json.Unmarshal(r.body, &p); err != nil {
			t.Fatal(err)
		}
		if p.Type != wt.typ || !p.Timestamp.Equal(wt.le.Time) || len(p.Data) != len(wt.data) {
			t.Fatalf("payload %s, want type %s at %v with %v", r.body, wt.typ, wt.le.Time, wt.data)
		}
		for k, v := range wt.data {
			if p.Data[k] != v {
				t.Fatalf("payload %s: data.%s = %q, want %q", r.body, k, p.Data[k], v)
			}
		}
	}
	page := waitDeliveries(t, b.svc, w.ID, 3)
	if len(page) != 3 || page[0].Type != TaskSettled || page[0].Status != store.DeliverySucceeded ||
		page[0].HTTPStatus != http.StatusNoContent || page[2].Type != RunStarted {
		t.Fatalf("delivery log %+v", page)
	}
	rc.none(t)
}

func TestDeliver_RetriesWithOneIDAndBody(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	rc := newReceiver(t, func(n int, _ *http.Request) int {
		if n <= 2 {
			return http.StatusInternalServerError
		}
		return http.StatusOK
	})
	w := b.create(t, rc.srv.URL, RunSettled)
	b.event(t, subagent.Event{Type: subagent.EventEnd, RunID: "run-1", StopReason: "completed"})
	first := rc.next(t)
	for range 2 {
		r := rc.next(t)
		verify(t, w.Secret, r)
		if r.header.Get("webhook-id") != first.header.Get("webhook-id") || string(r.body) != string(first.body) {
			t.Fatalf("retry %s %s differs from the first attempt %s %s", r.header.Get("webhook-id"), r.body, first.header.Get("webhook-id"), first.body)
		}
	}
	page := waitDeliveries(t, b.svc, w.ID, 3)
	for i, want := range []struct {
		attempt int
		status  string
		http    int
	}{{3, store.DeliverySucceeded, 200}, {2, store.DeliveryRetrying, 500}, {1, store.DeliveryRetrying, 500}} {
		d := page[i]
		if d.Attempt != want.attempt || d.Status != want.status || d.HTTPStatus != want.http || d.EventID != first.header.Get("webhook-id") {
			t.Fatalf("delivery %d = %+v, want %+v", i, d, want)
		}
	}
}

// waitDeliveries waits until the endpoint's log has n deliveries and
// returns them, newest first. An attempt is recorded just after the
// receiver answered, with no signal to wait on, so it checks the log
// every few milliseconds, bounded by deadline.
func waitDeliveries(t *testing.T, svc *Service, id string, n int) []store.WebhookDelivery {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	timeout := time.After(deadline)
	for {
		page, err := svc.Deliveries(t.Context(), id, "", 100)
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Deliveries) >= n {
			return page.Deliveries
		}
		select {
		case <-tick.C:
		case <-timeout:
			t.Fatalf("%d deliveries after %v, want %d: %+v", len(page.Deliveries), deadline, n, page.Deliveries)
		}
	}
}

func TestDeliver_ExhaustedRetriesFailAndMoveOn(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	rc := newReceiver(t, func(n int, _ *http.Request) int {
		if n <= 3 { // the first event's three attempts
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	w := b.create(t, rc.srv.URL, RunStarted)
	e1 := b.event(t, subagent.Event{Type: subagent.EventStart, RunID: "run-1"})
	e2 := b.event(t, subagent.Event{Type: subagent.EventStart, RunID: "run-2"})
	for range 3 {
		if id := rc.next(t).header.Get("webhook-id"); id != eventID(e1) {
			t.Fatalf("attempt of %s, want %s", id, eventID(e1))
		}
	}
	if id := rc.next(t).header.Get("webhook-id"); id != eventID(e2) {
		t.Fatalf("after the failed event came %s, want %s", id, eventID(e2))
	}
	page := waitDeliveries(t, b.svc, w.ID, 4)
	if page[0].Status != store.DeliverySucceeded || page[1].Status != store.DeliveryFailed || page[1].Attempt != 3 {
		t.Fatalf("delivery log %+v", page)
	}
	if got, _ := b.svc.Get(t.Context(), w.ID); !got.Enabled {
		t.Fatal("failed retries disabled the endpoint")
	}
}

func TestDeliver_GoneDisablesUntilReenabled(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	var answering410 atomic.Bool
	answering410.Store(true)
	rc := newReceiver(t, func(int, *http.Request) int {
		if answering410.Load() {
			return http.StatusGone
		}
		return http.StatusOK
	})
	w := b.create(t, rc.srv.URL, RunStarted)
	e1 := b.event(t, subagent.Event{Type: subagent.EventStart, RunID: "run-1"})
	rc.next(t)
	page := waitDeliveries(t, b.svc, w.ID, 1)
	if page[0].Status != store.DeliveryFailed || page[0].HTTPStatus != http.StatusGone {
		t.Fatalf("delivery %+v", page[0])
	}
	got, err := b.svc.Get(t.Context(), w.ID)
	if err != nil || got.Enabled || got.DisabledReason != "gone" {
		t.Fatalf("endpoint after 410 = %+v, %v", got, err)
	}
	b.event(t, subagent.Event{Type: subagent.EventStart, RunID: "run-2"})
	// Nothing is delivered while disabled (had run-2 been sent, it would
	// come before the resumed run-1 below).
	answering410.Store(false)
	on := true
	if _, err := b.svc.Update(t.Context(), w.ID, Update{Enabled: &on}); err != nil {
		t.Fatal(err)
	}
	if id := rc.next(t).header.Get("webhook-id"); id != eventID(e1) {
		t.Fatalf("re-enabled endpoint resumed with %s, want %s", id, eventID(e1))
	}
	rc.next(t)
}

func TestRotate_BothSecretsSign(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	rc := newReceiver(t, nil)
	w := b.create(t, rc.srv.URL, RunStarted)
	rot, err := b.svc.Rotate(t.Context(), w.ID)
	if err != nil {
		t.Fatal(err)
	}
	if rot.Secret == w.Secret || !strings.HasPrefix(rot.Secret, "whsec_") {
		t.Fatalf("rotated secret %q (old %q)", rot.Secret, w.Secret)
	}
	d, err := b.svc.Test(t.Context(), w.ID)
	if err != nil || d.Status != store.DeliverySucceeded || d.Type != Test {
		t.Fatalf("test = %+v, %v", d, err)
	}
	r := rc.next(t)
	if sigs := strings.Fields(r.header.Get("webhook-signature")); len(sigs) != 2 {
		t.Fatalf("webhook-signature %q, want two", r.header.Get("webhook-signature"))
	}
	verify(t, w.Secret, r)
	verify(t, rot.Secret, r)
	var p struct {
		Type string            `json:"type"`
		Data map[string]string `json:"data"`
	}
	if err := json.Unmarshal(r.body, &p); err != nil || p.Type != Test || p.Data["webhookId"] != w.ID {
		t.Fatalf("test payload %s", r.body)
	}

	// Redeliver sends the same id and body again, as a new attempt.
	again, err := b.svc.Redeliver(t.Context(), w.ID, d.ID)
	if err != nil || again.Attempt != 2 || again.EventID != d.EventID || again.ID == d.ID {
		t.Fatalf("redeliver = %+v, %v", again, err)
	}
	r2 := rc.next(t)
	if r2.header.Get("webhook-id") != r.header.Get("webhook-id") || string(r2.body) != string(r.body) {
		t.Fatalf("redelivery %s %s, want %s %s", r2.header.Get("webhook-id"), r2.body, r.header.Get("webhook-id"), r.body)
	}
	verify(t, rot.Secret, r2)
	if _, err := b.svc.Redeliver(t.Context(), w.ID, "dlv_nope"); subagent.ErrorCode(err) != EDeliveryNotFound {
		t.Fatalf("redeliver of an unknown delivery = %v", err)
	}
	if _, err := b.svc.Test(t.Context(), "wh_nope"); subagent.ErrorCode(err) != ENotFound {
		t.Fatalf("test of an unknown endpoint = %v", err)
	}
}

func TestSSRF_LoopbackRefusedAtDial(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *Config) { c.AllowPrivate = false })
	rc := newReceiver(t, nil)
	for _, url := range []string{rc.srv.URL, strings.Replace(rc.srv.URL, "127.0.0.1", "localhost", 1)} {
		w := b.create(t, url, RunStarted)
		d, err := b.svc.Test(t.Context(), w.ID)
		if err != nil {
			t.Fatal(err)
		}
		if d.Status != store.DeliveryFailed || d.HTTPStatus != 0 || !strings.Contains(d.Error, netguard.ErrRefused.Error()) {
			t.Fatalf("delivery to %s = %+v, want refused", url, d)
		}
	}
	rc.none(t)
}

func TestCreate_RejectsBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	for _, p := range []CreateParams{
		{URL: "ftp://x.example/", Events: []string{RunStarted}},
		{URL: "/relative", Events: []string{RunStarted}},
		{URL: "https://x.example/", Events: []string{"run.exploded"}},
		{URL: "https://x.example/"},
	} {
		if _, err := b.svc.Create(t.Context(), p); subagent.ErrorCode(err) != subagent.EInvalidRequest {
			t.Errorf("create %+v = %v, want INVALID_REQUEST", p, err)
		}
	}
}

func TestParseRetry(t *testing.T) {
	t.Parallel()
	got, err := ParseRetry("100ms, 200ms,1h")
	if err != nil || len(got) != 3 || got[0] != 100*time.Millisecond || got[2] != time.Hour {
		t.Fatalf("ParseRetry = %v, %v", got, err)
	}
	for _, bad := range []string{"", "5s,,1m", "-1s", "soon"} {
		if _, err := ParseRetry(bad); err == nil {
			t.Errorf("ParseRetry(%q) accepted", bad)
		}
	}
}

func TestDeliver_RedirectsAreNotFollowed(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	target := newReceiver(t, nil)
	redirect := httptest.NewServer(http.RedirectHandler(target.srv.URL, http.StatusFound))
	t.Cleanup(redirect.Close)
	w := b.create(t, redirect.URL, RunStarted)
	d, err := b.svc.Test(t.Context(), w.ID)
	if err != nil {
		t.Fatal(err)
	}
	if d.Status != store.DeliveryFailed || d.HTTPStatus != http.StatusFound || d.Error != "HTTP 302" {
		t.Fatalf("delivery to a redirect = %+v, want a failed 302", d)
	}
	target.none(t)
}

// drivenStore is a memstore whose lifecycle and endpoint wake-ups the test
// sends itself, unbuffered: a send returns once the loop took it, and the
// next send once the loop is back waiting, so what it did in between is
// done. It counts the claims.
type drivenStore struct {
	*memstore.Store
	events, hooks chan struct{}
	claims        atomic.Int32
}

func (d *drivenStore) Subscribe(topic string) (<-chan struct{}, func()) {
	switch topic {
	case store.LifecycleTopic:
		return d.events, func() {}
	case store.WebhooksTopic:
		return d.hooks, func() {}
	}
	return d.Store.Subscribe(topic)
}

func (d *drivenStore) ClaimWebhooks(ctx context.Context, p store.ClaimWebhooksParams) ([]store.Webhook, error) {
	d.claims.Add(1)
	return d.Store.ClaimWebhooks(ctx, p)
}

// TestDeliver_NoEndpointNoClaimPerEvent checks that new lifecycle events
// cost the store no claim while no endpoint is enabled, and that an
// endpoint's creation brings the claims back.
func TestDeliver_NoEndpointNoClaimPerEvent(t *testing.T) {
	st := &drivenStore{Store: memstore.New(), events: make(chan struct{}), hooks: make(chan struct{})}
	svc := New(Config{Store: st, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Owner: "test", AllowPrivate: true, Poll: time.Hour})
	svc.Start(t.Context())
	t.Cleanup(svc.Stop)
	send := func(ch chan struct{}) {
		t.Helper()
		select {
		case ch <- struct{}{}:
		case <-time.After(deadline):
			t.Fatal("the delivery loop took no wake-up")
		}
	}
	// The loop's first look (its timer starts at 0) may claim once before
	// it waits; after these two sends it handled the first wake-up.
	send(st.events)
	send(st.events)
	before := st.claims.Load()
	for range 20 {
		send(st.events)
	}
	if got := st.claims.Load() - before; got != 0 {
		t.Fatalf("with no endpoint, 20 lifecycle wake-ups claimed %d times, want 0", got)
	}

	if _, err := svc.Create(t.Context(), CreateParams{URL: "http://127.0.0.1:1/hook", Events: []string{RunSettled}}); err != nil {
		t.Fatal(err)
	}
	send(st.hooks)
	send(st.events)
	send(st.events)
	if got := st.claims.Load() - before; got < 2 {
		t.Fatalf("with an enabled endpoint, the endpoint wake-up and a lifecycle one claimed %d times, want 2", got)
	}
}
