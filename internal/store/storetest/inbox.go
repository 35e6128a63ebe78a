package storetest

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/store"
)

func followup(id, child string) store.InboxMessage {
	return store.InboxMessage{
		ID: id, ChildID: child, TaskID: "task-" + id,
		Content:   json.RawMessage(fmt.Sprintf(`[{"type":"text","text":%q}]`, id)),
		Source:    json.RawMessage(`{"kind":"parent"}`),
		CreatedAt: t0,
	}
}

var inboxTests = []test{
	{"Pending_FIFOUntilAck", func(t *testing.T, s store.Store) {
		ctx := t.Context()
		// m3 is accepted last but carries the earliest time: order is acceptance.
		m1, m2, m3, d1 := followup("m1", "c"), followup("m2", "c"), followup("m3", "c"), followup("d1", "d")
		m3.CreatedAt = t0.Add(-time.Hour)
		for _, m := range []store.InboxMessage{m1, m2, d1, m3} {
			ok(t, s.Enqueue(ctx, m))
		}
		sameList(t, "Pending(c)", must(s.Pending(ctx, "c"))(t), []store.InboxMessage{m1, m2, m3}, canonInbox)
		ok(t, s.Ack(ctx, "c", "m2", "unknown", "d1"))
		sameList(t, "Pending(c) after Ack(m2)", must(s.Pending(ctx, "c"))(t), []store.InboxMessage{m1, m3}, canonInbox)
		sameList(t, "Pending(d) after acking d1 as c's", must(s.Pending(ctx, "d"))(t), []store.InboxMessage{d1}, canonInbox)
		ok(t, s.Ack(ctx, "c", "m1", "m3"))
		ok(t, s.Ack(ctx, "c"))
		sameList(t, "Pending(c) after acking all", must(s.Pending(ctx, "c"))(t), nil, canonInbox)
	}},
	{"Enqueue_ExistingIDConflicts", func(t *testing.T, s store.Store) {
		ctx := t.Context()
		ok(t, s.Enqueue(ctx, followup("m1", "c")))
		isErr(t, s.Enqueue(ctx, followup("m1", "c")), store.ErrConflict, "Enqueue(m1 again)")
		if n := len(must(s.Pending(ctx, "c"))(t)); n != 1 {
			t.Fatalf("Pending holds %d messages, want 1", n)
		}
	}},
	{"Enqueue_ZeroCreatedAtIsNowAndNilJSONStaysNil", func(t *testing.T, s store.Store) {
		before := time.Now()
		ok(t, s.Enqueue(t.Context(), store.InboxMessage{ID: "m1", ChildID: "c"}))
		got := must(s.Pending(t.Context(), "c"))(t)
		recent(t, "CreatedAt", got[0].CreatedAt, before)
		if got[0].Content != nil || got[0].Source != nil {
			t.Fatalf("nil JSON came back as %s, %s", got[0].Content, got[0].Source)
		}
	}},
	{"PendingChildren_AcrossTenantsByOldestMessage", func(t *testing.T, s store.Store) {
		ctx := t.Context()
		if got := must(s.PendingChildren(ctx))(t); len(got) != 0 {
			t.Fatalf("PendingChildren of an empty store = %v", got)
		}
		ok(t, s.Enqueue(ctx, followup("m1", "c")))
		ok(t, s.Enqueue(other(ctx), followup("m2", "x")))
		ok(t, s.Enqueue(ctx, followup("m3", "d")))
		ok(t, s.Enqueue(ctx, followup("m4", "c")))
		want := []store.PendingChild{
			{Tenant: store.DefaultTenant, ChildID: "c"}, {Tenant: otherTenant, ChildID: "x"}, {Tenant: store.DefaultTenant, ChildID: "d"},
		}
		if got := must(s.PendingChildren(ctx))(t); !reflect.DeepEqual(got, want) {
			t.Fatalf("PendingChildren = %v, want %v", got, want)
		}
		ok(t, s.Ack(ctx, "c", "m1", "m4"))
		want = want[1:]
		if got := must(s.PendingChildren(ctx))(t); !reflect.DeepEqual(got, want) {
			t.Fatalf("PendingChildren after acking c = %v, want %v", got, want)
		}
	}},
	{"Pending_KeepsQuiet", func(t *testing.T, s store.Store) {
		ctx := t.Context()
		loud, quiet := followup("m1", "c"), followup("m2", "c")
		quiet.Quiet = true
		ok(t, s.Enqueue(ctx, loud))
		ok(t, s.Enqueue(ctx, quiet))
		sameList(t, "Pending(c)", must(s.Pending(ctx, "c"))(t), []store.InboxMessage{loud, quiet}, canonInbox)
	}},
	{"Pending_UnknownChildIsEmpty", func(t *testing.T, s store.Store) {
		if got := must(s.Pending(t.Context(), "nope"))(t); len(got) != 0 {
			t.Fatalf("Pending(nope) = %s, want empty", show(got))
		}
	}},
}
