package pg_test

import (
	"encoding/json"

	"reflect"
	"strings"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/subagentd/subagentd/internal/pg"
	"github.com/subagentd/subagentd/internal/pg/pgtest"
	"github.com/subagentd/subagentd/internal/store"
)

// TestLifecycle_RecentCommits: a Store answers a read of lifecycle events
// it committed itself without a round trip, with exactly what the table
// holds (as another replica reads it); a read that another replica's
// commit falls into, by id or by its wake-up, goes to the table.
func TestLifecycle_RecentCommits(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	a, counter := tracedStore(t, url)
	b := newStore(t, openPool(t, url))
	ctx := store.WithTenant(t.Context(), "t1")
	appendTo := func(s *pg.Store, typ, parent string) store.LifecycleEvent {
		t.Helper()
		e, err := s.AppendLifecycle(ctx, store.LifecycleEvent{Type: typ, ParentID: parent, RunID: "r",
			Payload: json.RawMessage(`{"zz":1,"a":  [1, 2],"b":{"y":null}}`)})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	// read reads f from s, and from b's table, and wants both the same.
	read := func(s *pg.Store, tenant string, f store.LifecycleFilter) (_ []store.LifecycleEvent, trips int) {
		t.Helper()
		ctx := store.WithTenant(t.Context(), tenant)
		before, _, _ := counter.snapshot()
		got, err := s.Lifecycle(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		after, _, _ := counter.snapshot()
		want, err := b.Lifecycle(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("read %+v:\n got %+v\nwant %+v (the table)", f, got, want)
		}
		return got, after - before
	}

	// The poll, once a second, sends reads to the table until a's next
	// commit: an attempt it hit is retried.
	for attempt := 1; ; attempt++ {
		e1 := appendTo(a, "subagent/start", "p1")
		appendTo(a, "subagent/end", "p2")
		trips := 0
		for _, f := range []store.LifecycleFilter{
			{After: e1.ID - 1}, {After: e1.ID}, {After: e1.ID - 1, Limit: 1}, {After: e1.ID - 1, ParentID: "p2"},
			{After: e1.ID - 1, Types: []string{"subagent/start"}}, {After: e1.ID + 5},
		} {
			_, n := read(a, "t1", f)
			trips += n
		}
		if trips == 0 {
			break
		}
		if attempt == 3 {
			t.Fatalf("reads of the Store's own commits took %d round trips, want none", trips)
		}
	}
	if got, _ := read(a, "t2", store.LifecycleFilter{}); len(got) != 0 {
		t.Errorf("another tenant read %+v", got)
	}

	// Another replica's commit between two of a's: a's read has a gap at
	// its id, and goes to the table.
	appendTo(b, "subagent/start", "p3")
	appendTo(a, "subagent/end", "p3")
	if got, trips := read(a, "t1", store.LifecycleFilter{}); len(got) < 4 || trips != 1 {
		t.Errorf("read %d events in %d round trips, want them all in 1 (from the table)", len(got), trips)
	}

	// Once the Store has committed more than it keeps, a read from before
	// the oldest event it holds goes to the table.
	oldest := appendTo(a, "subagent/start", "p6")
	var g errgroup.Group
	for range 16 {
		g.Go(func() error {
			for range 2 * 1024 / 16 {
				if _, err := a.AppendLifecycle(ctx, store.LifecycleEvent{Type: "subagent/end", RunID: "r"}); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	if got, trips := read(a, "t1", store.LifecycleFilter{After: oldest.ID - 1}); len(got) == 0 || got[0].ID != oldest.ID || trips != 1 {
		t.Errorf("a read from the evicted event %d returned %d events in %d round trips, want them from it, from the table",
			oldest.ID, len(got), trips)
	}

	// Another replica's commit after a's newest: its wake-up (or the poll)
	// sends a's next read to the table.
	last := appendTo(a, "subagent/start", "p4")
	woken, cancel := a.Subscribe(store.LifecycleTopic)
	defer cancel()
	foreign := appendTo(b, "subagent/end", "p5")
	waitWake(t, woken, 10*time.Second, "by another replica's lifecycle event")
	got, _ := read(a, "t1", store.LifecycleFilter{After: last.ID})
	if len(got) != 1 || got[0].ID != foreign.ID {
		t.Fatalf("after the wake-up a read %+v, want the other replica's event %d", got, foreign.ID)
	}
}

// TestLifecycle_RecentBoundedInBytes: the events a Store keeps of its own
// commits are bounded in bytes too: after payloads of more than 16 MiB, a
// read from the oldest goes to the table, while the newest are still
// answered without a round trip.
func TestLifecycle_RecentBoundedInBytes(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	a, counter := tracedStore(t, url)
	ctx := store.WithTenant(t.Context(), "t1")
	big := json.RawMessage(`{"text":"` + strings.Repeat("x", 512<<10) + `"}`)
	appendTo := func(payload json.RawMessage) store.LifecycleEvent {
		t.Helper()
		e, err := a.AppendLifecycle(ctx, store.LifecycleEvent{Type: "subagent/end", RunID: "r", Payload: payload})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	read := func(after int64) (_ []store.LifecycleEvent, trips int) {
		t.Helper()
		before, _, _ := counter.snapshot()
		got, err := a.Lifecycle(ctx, store.LifecycleFilter{After: after, Limit: 2})
		if err != nil {
			t.Fatal(err)
		}
		n, _, _ := counter.snapshot()
		return got, n - before
	}
	oldest := appendTo(json.RawMessage(`{}`))
	for range 40 { // 20 MiB
		appendTo(big)
	}
	// The poll, once a second, sends reads to the table until the Store's
	// next commit: an attempt whose read of the newest events went to the
	// table is retried, as its read of the oldest proves nothing.
	for attempt := 1; ; attempt++ {
		e := appendTo(big)
		old, oldTrips := read(oldest.ID - 1)
		if len(old) != 2 || old[0].ID != oldest.ID {
			t.Fatalf("a read from the oldest event %d returned %d events, want 2 from it", oldest.ID, len(old))
		}
		got, trips := read(e.ID - 2)
		if len(got) != 2 || got[1].ID != e.ID || len(got[1].Payload) < len(big) {
			t.Fatalf("a read of the newest events returned %d events, want 2 ending at %d with its payload", len(got), e.ID)
		}
		if trips == 0 {
			if oldTrips != 1 {
				t.Errorf("a read from the oldest event took %d round trips, want 1: from the table", oldTrips)
			}
			break
		}
		if attempt == 3 {
			t.Fatalf("a read of the newest events took %d round trips, want none", trips)
		}
	}
}
