package pg_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/pg"
	"github.com/subagentd/subagentd/internal/pg/pgtest"
	"github.com/subagentd/subagentd/internal/store"
)

// seen is a lifecycle event and when a subscriber read it.
type seen struct {
	store.LifecycleEvent
	at time.Time
}

// follow reads the lifecycle log of s the way an SSE stream does — on every
// wake-up, everything after its cursor — and sends each event on out, until
// ctx ends.
func follow(ctx context.Context, t *testing.T, s *pg.Store, out chan<- seen) {
	wake, cancel := s.Subscribe(store.LifecycleTopic)
	defer cancel()
	var cursor int64
	for {
		evs, err := s.Lifecycle(ctx, store.LifecycleFilter{After: cursor})
		if err != nil {
			if ctx.Err() == nil {
				t.Errorf("read lifecycle after %d: %v", cursor, err)
			}
			return
		}
		now := time.Now()
		for _, e := range evs {
			cursor = e.ID
			out <- seen{e, now}
		}
		select {
		case <-ctx.Done():
			return
		case <-wake:
		}
	}
}

// TestReplicas_SubscriberOfOneSeesTheOthersEventsOnceInOrder: two stores
// with pools of their own on one database are two replicas. Events that A
// commits from concurrent writers reach a subscriber of B exactly once, in
// id (commit) order. The lag it logs runs from A's commit returning to B
// reading the event.
func TestReplicas_SubscriberOfOneSeesTheOthersEventsOnceInOrder(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	a := newStore(t, openPool(t, url))
	b := newStore(t, openPool(t, url))
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	got := make(chan seen, 1024)
	go follow(ctx, t, b, got)

	const writers, each = 4, 25
	var mu sync.Mutex
	committed := map[int64]time.Time{}
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				e, err := a.AppendLifecycle(ctx, store.LifecycleEvent{
					Type: "test/event", ParentID: fmt.Sprintf("w%d", w), Payload: []byte(fmt.Sprintf(`{"i":%d}`, i)),
				})
				if err != nil {
					t.Errorf("append on A: %v", err)
					return
				}
				mu.Lock()
				committed[e.ID] = time.Now()
				mu.Unlock()
			}
		})
	}
	wg.Wait()

	var ids []int64
	var lags []time.Duration
	for len(ids) < writers*each {
		select {
		case e := <-got:
			if n := len(ids); n > 0 && e.ID <= ids[n-1] {
				t.Fatalf("B's subscriber got id %d after %d: out of order or twice", e.ID, ids[n-1])
			}
			at, ok := committed[e.ID]
			if !ok {
				t.Fatalf("B's subscriber got id %d, which A never committed", e.ID)
			}
			ids = append(ids, e.ID)
			lags = append(lags, max(0, e.at.Sub(at)))
		case <-time.After(10 * time.Second):
			t.Fatalf("B's subscriber saw %d of %d events of A", len(ids), writers*each)
		}
	}
	select {
	case e := <-got:
		t.Fatalf("B's subscriber got an extra event %+v", e)
	default:
	}
	slices.Sort(lags)
	t.Logf("%d events of A seen on B; lag after A's commit returned: p50 %v, max %v", len(ids), lags[len(lags)/2], lags[len(lags)-1])
}

// TestReplicas_PollCatchesAnEventWithoutNotify: an event committed with no
// NOTIFY at all (as if the wake-up was lost) still reaches a subscriber of
// another replica, by the slow poll.
func TestReplicas_PollCatchesAnEventWithoutNotify(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	pool := openPool(t, url)
	b := newStore(t, openPool(t, url))
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	got := make(chan seen, 16)
	go follow(ctx, t, b, got)

	// The writer's own statement, without the pg_notify that follows it.
	exec(t, pool, `WITH c AS (UPDATE lifecycle_counter SET last_id = last_id + 1 RETURNING last_id)
		INSERT INTO lifecycle_events (tenant, id, type, parent_id, run_id, time, payload)
		SELECT 'default', c.last_id, 'test/silent', '', '', now(), '{}' FROM c`)
	committed := time.Now()
	select {
	case e := <-got:
		if e.Type != "test/silent" {
			t.Fatalf("got %+v, want the silent event", e)
		}
		t.Logf("silent event seen %v after its commit", e.at.Sub(committed))
	case <-time.After(10 * time.Second):
		t.Fatal("an event without NOTIFY never reached the other replica's subscriber")
	}
}

// TestReplicas_LimitsChangedOnOneAreReadOnTheOther: replica A keeps the
// limits it read (a tree's checks cost no round trip), and a change B makes
// reaches A through the wake-up B's change sends: A's next read after it
// answers the new limits.
func TestReplicas_LimitsChangedOnOneAreReadOnTheOther(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	a := newStore(t, openPool(t, url))
	b := newStore(t, openPool(t, url))
	ctx := t.Context()
	budget := func(n int64) store.Limits { return store.Limits{TokenBudget: &n} }
	if err := a.CreateSession(ctx, store.Session{ID: "root", CreatedAt: time.Now(), Limits: budget(10)}); err != nil {
		t.Fatal(err)
	}
	read := func(s *pg.Store) int64 {
		t.Helper()
		l, err := s.SessionLimits(ctx, "root")
		if err != nil || l.TokenBudget == nil {
			t.Fatalf("SessionLimits = %+v, %v", l, err)
		}
		return *l.TokenBudget
	}
	if got := read(a); got != 10 {
		t.Fatalf("A reads budget %d, want 10", got)
	}
	woken, stop := a.Subscribe("limits")
	defer stop()
	if err := b.SetSessionLimits(ctx, "root", budget(20)); err != nil {
		t.Fatal(err)
	}
	if got := read(b); got != 20 {
		t.Fatalf("B reads budget %d after its own change, want 20", got)
	}
	deadline := time.After(10 * time.Second)
	for read(a) != 20 {
		select {
		case <-woken:
		case <-deadline:
			t.Fatal("A still reads the old budget 10 s after B changed it")
		}
	}
}
