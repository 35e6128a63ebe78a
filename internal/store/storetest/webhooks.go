package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/store"
)

// newWebhook returns an enabled endpoint with id.
func newWebhook(id string) store.Webhook {
	return store.Webhook{
		ID: id, URL: "https://hooks.example/" + id, Events: []string{"run.started", "run.settled"},
		Description: "d", Enabled: true, Secret: "whsec_a", CreatedAt: t0,
	}
}

// newPush returns an enabled endpoint with id scoped to config config of
// task task.
func newPush(id, task, config string) store.Webhook {
	w := newWebhook(id)
	w.Events = []string{"task.started", "task.settled"}
	w.Push = &store.WebhookPush{TaskID: task, ConfigID: config, Authorization: "Bearer tok-" + config, Token: "nt-" + config}
	return w
}

var webhookTests = []test{
	{"TaskScoped", func(t *testing.T, s store.Store) {
		ctx := t.Context()
		ok(t, errOf(s.CreateWebhook(ctx, newWebhook("wh-plain"))))
		a := must(s.CreateWebhook(ctx, newPush("wh-a", "task-1", "cfg-a")))(t)
		if a.Push == nil || *a.Push != (store.WebhookPush{TaskID: "task-1", ConfigID: "cfg-a", Authorization: "Bearer tok-cfg-a", Token: "nt-cfg-a"}) {
			t.Fatalf("created push = %+v", a.Push)
		}
		b := newPush("wh-b", "task-1", "cfg-b")
		b.CreatedAt = sec(1)
		ok(t, errOf(s.CreateWebhook(ctx, b)))
		ok(t, errOf(s.CreateWebhook(ctx, newPush("wh-c", "task-2", "cfg-a"))))
		if _, err := s.CreateWebhook(ctx, newPush("wh-d", "task-1", "cfg-a")); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("a second config cfg-a of task-1 = %v, want ErrConflict", err)
		}
		ok(t, errOf(s.CreateWebhook(other(ctx), newPush("wh-e", "task-1", "cfg-a"))))

		if list := must(s.ListWebhooks(ctx))(t); len(list) != 1 || list[0].ID != "wh-plain" || list[0].Push != nil {
			t.Fatalf("ListWebhooks = %+v, want only the endpoint no task scopes", list)
		}
		list := must(s.TaskWebhooks(ctx, "task-1"))(t)
		if len(list) != 2 || list[0].ID != "wh-a" || list[1].ID != "wh-b" || list[1].Push.ConfigID != "cfg-b" || list[1].Push.Authorization != "Bearer tok-cfg-b" {
			t.Fatalf("TaskWebhooks(task-1) = %s, want wh-a then wh-b", show(list))
		}
		if l := must(s.TaskWebhooks(other(ctx), "task-1"))(t); len(l) != 1 || l[0].ID != "wh-e" {
			t.Fatalf("TaskWebhooks of another tenant = %s, want its own wh-e", show(l))
		}
		if l := must(s.TaskWebhooks(ctx, ""))(t); len(l) != 0 {
			t.Fatalf("TaskWebhooks(\"\") = %s, want none", show(l))
		}
		got := must(s.GetWebhook(ctx, "wh-b"))(t)
		if got.Push == nil || got.Push.TaskID != "task-1" || got.Push.Token != "nt-cfg-b" {
			t.Fatalf("GetWebhook(wh-b).Push = %+v", got.Push)
		}
		claimed := must(s.ClaimWebhooks(ctx, store.ClaimWebhooksParams{Owner: "o", Now: sec(2), Until: sec(60), Limit: 10}))(t)
		if len(claimed) != 0 {
			t.Fatalf("claimed %s with no events after the cursors", show(claimed))
		}
		ok(t, errOf(s.AppendLifecycle(ctx, store.LifecycleEvent{Type: "subagent/end", Payload: []byte(`{}`)})))
		claimed = must(s.ClaimWebhooks(ctx, store.ClaimWebhooksParams{Owner: "o", Now: sec(2), Until: sec(60), Limit: 10}))(t)
		for _, w := range claimed {
			if w.ID == "wh-a" && (w.Push == nil || w.Push.ConfigID != "cfg-a") {
				t.Fatalf("claimed wh-a without its scope: %+v", w)
			}
		}
		if len(claimed) != 4 {
			t.Fatalf("claimed %s, want the tenant's 4 endpoints", show(claimed))
		}
		ok(t, s.DeleteWebhook(ctx, "wh-a"))
		ok(t, errOf(s.CreateWebhook(ctx, newPush("wh-a2", "task-1", "cfg-a"))))
	}},
	{"CreateGetListUpdateDelete", func(t *testing.T, s store.Store) {
		ctx := t.Context()
		before := must(s.AppendLifecycle(ctx, store.LifecycleEvent{Type: "subagent/start", Payload: []byte(`{}`)}))(t)
		w := must(s.CreateWebhook(ctx, newWebhook("wh-1")))(t)
		if w.Cursor != before.ID || w.Tenant != store.DefaultTenant || !w.CreatedAt.Equal(t0) || w.Owner != "" {
			t.Fatalf("created = %+v; want cursor %d (the newest event)", w, before.ID)
		}
		if _, err := s.CreateWebhook(other(ctx), newWebhook("wh-1")); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("create of an existing id = %v, want ErrConflict", err)
		}
		got := must(s.GetWebhook(ctx, "wh-1"))(t)
		if !slices.Equal(got.Events, w.Events) || got.URL != w.URL || got.Secret != "whsec_a" || !got.Enabled {
			t.Fatalf("get = %+v, want %+v", got, w)
		}
		if _, err := s.GetWebhook(other(ctx), "wh-1"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("get from another tenant = %v, want ErrNotFound", err)
		}
		w2 := newWebhook("wh-0")
		w2.CreatedAt = sec(1)
		ok(t, errOf(s.CreateWebhook(ctx, w2)))
		list := must(s.ListWebhooks(ctx))(t)
		if len(list) != 2 || list[0].ID != "wh-1" || list[1].ID != "wh-0" {
			t.Fatalf("list = %+v, want wh-1 then wh-0", list)
		}
		if l := must(s.ListWebhooks(other(ctx)))(t); len(l) != 0 {
			t.Fatalf("another tenant lists %+v", l)
		}

		url, off := "https://other.example/x", false
		upd := must(s.UpdateWebhook(ctx, "wh-1", store.WebhookUpdate{URL: &url, Events: []string{"task.settled"}, Enabled: &off}))(t)
		if upd.URL != url || !slices.Equal(upd.Events, []string{"task.settled"}) || upd.Enabled || upd.DisabledReason != "manual" || upd.Description != "d" {
			t.Fatalf("updated = %+v", upd)
		}
		on := true
		upd = must(s.UpdateWebhook(ctx, "wh-1", store.WebhookUpdate{Enabled: &on}))(t)
		if !upd.Enabled || upd.DisabledReason != "" {
			t.Fatalf("re-enabled = %+v", upd)
		}
		rot := must(s.UpdateWebhook(ctx, "wh-1", store.WebhookUpdate{Secret: "whsec_b", PrevSecretUntil: sec(60)}))(t)
		if rot.Secret != "whsec_b" || rot.PrevSecret != "whsec_a" || !rot.PrevSecretUntil.Equal(sec(60)) {
			t.Fatalf("rotated = %+v", rot)
		}
		if _, err := s.UpdateWebhook(other(ctx), "wh-1", store.WebhookUpdate{Enabled: &off}); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("update from another tenant = %v, want ErrNotFound", err)
		}
		if err := s.DeleteWebhook(other(ctx), "wh-1"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("delete from another tenant = %v, want ErrNotFound", err)
		}
		ok(t, s.DeleteWebhook(ctx, "wh-1"))
		if _, err := s.GetWebhook(ctx, "wh-1"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("get after delete = %v, want ErrNotFound", err)
		}
		if err := s.DeleteWebhook(ctx, "wh-1"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("second delete = %v, want ErrNotFound", err)
		}
	}},
	{"ClaimAdvanceRelease", func(t *testing.T, s store.Store) {
		ctx := t.Context()
		w := must(s.CreateWebhook(ctx, newWebhook("wh-c")))(t)
		claim := func(owner string, now time.Time) []store.Webhook {
			t.Helper()
			return must(s.ClaimWebhooks(ctx, store.ClaimWebhooksParams{Owner: owner, Now: now, Until: now.Add(time.Minute)}))(t)
		}
		if got := claim("a", t0); len(got) != 0 {
			t.Fatalf("claimed %+v with no event after the cursor", got)
		}
		// Another tenant's event is not this endpoint's.
		_, err := s.AppendLifecycle(other(ctx), store.LifecycleEvent{Type: "subagent/start", Payload: []byte(`{}`)})
		ok(t, err)
		if got := claim("a", t0); len(got) != 0 {
			t.Fatalf("claimed %+v for another tenant's event", got)
		}
		e1 := must(s.AppendLifecycle(ctx, store.LifecycleEvent{Type: "subagent/start", Payload: []byte(`{}`)}))(t)
		got := claim("a", t0)
		if len(got) != 1 || got[0].ID != w.ID || got[0].Owner != "a" || !got[0].LeaseUntil.Equal(t0.Add(time.Minute)) || got[0].Tenant != store.DefaultTenant {
			t.Fatalf("claim = %+v, want wh-c leased to a", got)
		}
		if got := claim("b", sec(30)); len(got) != 0 {
			t.Fatalf("b claimed %+v under a's live lease", got)
		}
		// a failed once: a retry is due at sec(10).
		d := store.WebhookDelivery{ID: "d-1", WebhookID: w.ID, EventID: "evt_1", Type: "run.started", Attempt: 1,
			Status: store.DeliveryRetrying, HTTPStatus: 500, Error: "HTTP 500", Latency: 12 * time.Millisecond, At: t0, Body: []byte(`{"a":1}`)}
		ok(t, s.AdvanceWebhook(ctx, store.AdvanceWebhookParams{ID: w.ID, Owner: "a", Cursor: w.Cursor, RetryEvent: e1.ID,
			Attempts: 1, NextAttemptAt: sec(10), Until: sec(60), Delivery: &d}))
		if err := s.AdvanceWebhook(ctx, store.AdvanceWebhookParams{ID: w.ID, Owner: "b", Cursor: e1.ID, Until: sec(60)}); !errors.Is(err, store.ErrFenced) {
			t.Fatalf("advance by a non-owner = %v, want ErrFenced", err)
		}
		if err := s.AdvanceWebhook(ctx, store.AdvanceWebhookParams{ID: "nope", Owner: "a"}); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("advance of an unknown endpoint = %v, want ErrNotFound", err)
		}
		ok(t, s.ReleaseWebhook(ctx, w.ID, "b")) // not b's: ignored
		if got := claim("b", sec(5)); len(got) != 0 {
			t.Fatalf("b claimed %+v: a's lease was released by b", got)
		}
		ok(t, s.ReleaseWebhook(ctx, w.ID, "a"))
		if got := claim("b", sec(5)); len(got) != 0 {
			t.Fatalf("b claimed %+v before the retry is due", got)
		}
		got = claim("b", sec(10))
		if len(got) != 1 || got[0].RetryEvent != e1.ID || got[0].Attempts != 1 || !got[0].NextAttemptAt.Equal(sec(10)) {
			t.Fatalf("claim at the retry = %+v", got)
		}
		// Cursor never moves backwards; a delivered event leaves nothing due.
		ok(t, s.AdvanceWebhook(ctx, store.AdvanceWebhookParams{ID: w.ID, Owner: "b", Cursor: e1.ID, Until: sec(70)}))
		ok(t, s.AdvanceWebhook(ctx, store.AdvanceWebhookParams{ID: w.ID, Owner: "b", Cursor: w.Cursor, Until: sec(70)}))
		if cur := must(s.GetWebhook(ctx, w.ID))(t); cur.Cursor != e1.ID || cur.Attempts != 0 || !cur.NextAttemptAt.IsZero() {
			t.Fatalf("after the delivery = %+v", cur)
		}
		if got := claim("b", sec(20)); len(got) != 0 {
			t.Fatalf("claimed %+v with nothing after the cursor", got)
		}
		// A lapsed lease is anyone's; a disabled endpoint nobody's.
		must(s.AppendLifecycle(ctx, store.LifecycleEvent{Type: "subagent/end", Payload: []byte(`{}`)}))(t)
		if got := claim("c", sec(100)); len(got) != 1 || got[0].Owner != "c" {
			t.Fatalf("claim of a lapsed lease = %+v", got)
		}
		ok(t, s.AdvanceWebhook(ctx, store.AdvanceWebhookParams{ID: w.ID, Owner: "c", Cursor: e1.ID, Disable: "gone", Until: sec(100)}))
		if cur := must(s.GetWebhook(ctx, w.ID))(t); cur.Enabled || cur.DisabledReason != "gone" {
			t.Fatalf("after a disabling advance = %+v", cur)
		}
		if got := claim("c", sec(200)); len(got) != 0 {
			t.Fatalf("claimed a disabled endpoint: %+v", got)
		}
		dd := must(s.GetWebhookDelivery(ctx, w.ID, "d-1"))(t)
		if dd.Status != d.Status || dd.HTTPStatus != 500 || dd.Latency != d.Latency || string(dd.Body) != `{"a":1}` || !dd.At.Equal(t0) || dd.EventID != "evt_1" {
			t.Fatalf("delivery = %+v, want %+v", dd, d)
		}
	}},
	{"Deliveries", func(t *testing.T, s store.Store) {
		ctx := t.Context()
		w := must(s.CreateWebhook(ctx, newWebhook("wh-d")))(t)
		for i := range 5 {
			ok(t, s.AddWebhookDelivery(ctx, store.WebhookDelivery{ID: fmt.Sprintf("d-%d", i), WebhookID: w.ID, EventID: "evt_test",
				Type: "webhook.test", Attempt: 1, Status: store.DeliverySucceeded, HTTPStatus: 204, At: sec(i), Body: []byte(`{}`)}))
		}
		if err := s.AddWebhookDelivery(other(ctx), store.WebhookDelivery{ID: "x", WebhookID: w.ID, At: t0, Body: []byte(`{}`)}); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("add to another tenant's endpoint = %v, want ErrNotFound", err)
		}
		page := must(s.WebhookDeliveries(ctx, store.WebhookDeliveryFilter{WebhookID: w.ID, Limit: 2}))(t)
		if len(page) != 2 || page[0].ID != "d-4" || page[1].ID != "d-3" {
			t.Fatalf("first page = %+v, want d-4, d-3", page)
		}
		page = must(s.WebhookDeliveries(ctx, store.WebhookDeliveryFilter{WebhookID: w.ID, BeforeID: "d-3", Limit: 10}))(t)
		if len(page) != 3 || page[0].ID != "d-2" || page[2].ID != "d-0" {
			t.Fatalf("next page = %+v, want d-2 … d-0", page)
		}
		if _, err := s.WebhookDeliveries(ctx, store.WebhookDeliveryFilter{WebhookID: w.ID, BeforeID: "nope"}); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("unknown BeforeID = %v, want ErrNotFound", err)
		}
		if _, err := s.WebhookDeliveries(other(ctx), store.WebhookDeliveryFilter{WebhookID: w.ID}); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("another tenant's deliveries = %v, want ErrNotFound", err)
		}
		if _, err := s.GetWebhookDelivery(ctx, w.ID, "nope"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("get of an unknown delivery = %v, want ErrNotFound", err)
		}
		n := must(s.SweepWebhookDeliveries(ctx, sec(2)))(t)
		if n != 2 {
			t.Fatalf("sweep deleted %d, want 2", n)
		}
		if page := must(s.WebhookDeliveries(ctx, store.WebhookDeliveryFilter{WebhookID: w.ID}))(t); len(page) != 3 {
			t.Fatalf("after the sweep %d deliveries, want 3", len(page))
		}
		ok(t, s.DeleteWebhook(ctx, w.ID))
		if _, err := s.GetWebhookDelivery(ctx, w.ID, "d-4"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("a deleted endpoint's delivery = %v, want ErrNotFound", err)
		}
	}},
	{"Backlog", func(t *testing.T, s store.Store) {
		ctx := t.Context()
		backlog := func(upTo int, want store.WebhookBacklog) {
			t.Helper()
			got := must(s.WebhookBacklog(ctx, upTo))(t)
			if got.Events != want.Events || !got.Oldest.Equal(want.Oldest) {
				t.Fatalf("backlog(%d) = %+v, want %+v", upTo, got, want)
			}
		}
		appendAt := func(ctx context.Context, at time.Time) {
			t.Helper()
			ok(t, errOf(s.AppendLifecycle(ctx, store.LifecycleEvent{Type: "subagent/start", Time: at, Payload: []byte(`{}`)})))
		}
		appendAt(ctx, sec(1)) // before the endpoint: not its
		w := must(s.CreateWebhook(ctx, newWebhook("wh-b")))(t)
		backlog(10, store.WebhookBacklog{})
		appendAt(other(ctx), sec(2)) // another tenant's: not its
		backlog(10, store.WebhookBacklog{})
		appendAt(ctx, sec(5))
		appendAt(ctx, sec(6))
		backlog(10, store.WebhookBacklog{Events: 2, Oldest: sec(5)})
		backlog(1, store.WebhookBacklog{Events: 1, Oldest: sec(5)})
		// Another tenant's endpoint adds its own backlog.
		ok(t, errOf(s.CreateWebhook(other(ctx), newWebhook("wh-o"))))
		appendAt(other(ctx), sec(3))
		backlog(10, store.WebhookBacklog{Events: 3, Oldest: sec(3)})
		// A disabled endpoint has none; a moved cursor leaves only the rest.
		off := false
		ok(t, errOf(s.UpdateWebhook(other(ctx), "wh-o", store.WebhookUpdate{Enabled: &off})))
		claimed := must(s.ClaimWebhooks(ctx, store.ClaimWebhooksParams{Owner: "a", Now: t0, Until: sec(60)}))(t)
		if len(claimed) != 1 || claimed[0].ID != w.ID {
			t.Fatalf("claim = %+v, want wh-b", claimed)
		}
		first := must(s.Lifecycle(ctx, store.LifecycleFilter{After: w.Cursor, Limit: 1}))(t)
		ok(t, s.AdvanceWebhook(ctx, store.AdvanceWebhookParams{ID: w.ID, Owner: "a", Cursor: first[0].ID, Until: sec(60)}))
		backlog(10, store.WebhookBacklog{Events: 1, Oldest: sec(6)})
	}},
	{"Enabled", func(t *testing.T, s store.Store) {
		ctx := t.Context()
		enabled := func(want bool) {
			t.Helper()
			if got := must(s.WebhooksEnabled(ctx))(t); got != want {
				t.Fatalf("WebhooksEnabled = %v, want %v", got, want)
			}
		}
		enabled(false)
		ok(t, errOf(s.CreateWebhook(other(ctx), newWebhook("wh-e"))))
		enabled(true) // another tenant's counts: the deliverer serves every tenant
		off := false
		ok(t, errOf(s.UpdateWebhook(other(ctx), "wh-e", store.WebhookUpdate{Enabled: &off})))
		enabled(false)
		on := true
		ok(t, errOf(s.UpdateWebhook(other(ctx), "wh-e", store.WebhookUpdate{Enabled: &on})))
		enabled(true)
		ok(t, s.DeleteWebhook(other(ctx), "wh-e"))
		enabled(false)
	}},
	{"WakeOnCreate", func(t *testing.T, s store.Store) {
		ch, end := s.Subscribe(store.WebhooksTopic)
		defer end()
		drain(ch)
		ok(t, errOf(s.CreateWebhook(t.Context(), newWebhook("wh-w"))))
		waitWake(t, ch, "CreateWebhook")
	}},
}

// errOf drops a value and keeps its error.
func errOf[T any](_ T, err error) error { return err }
