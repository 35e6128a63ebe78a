package storetest

import (
	"testing"

	"github.com/subagentd/subagentd/internal/store"
)

var subscribeTests = []test{
	{"AppendEvents_WakesSessionTopicAfterCommit", func(t *testing.T, s store.Store) {
		newSession(t, s, "s1")
		ch, cancel := s.Subscribe(store.SessionTopic("s1"))
		defer cancel()
		must(s.AppendEvents(t.Context(), "s1", numbered(1)...))(t)
		waitWake(t, ch, "AppendEvents")
		if n := len(must(s.Events(t.Context(), "s1", -1, 0))(t)); n != 1 {
			t.Fatalf("woken reader sees %d events, want 1", n)
		}
	}},
	{"Lifecycle_WakesAfterAppendStartAndEnd", func(t *testing.T, s store.Store) {
		ctx := t.Context()
		ch, cancel := s.Subscribe(store.LifecycleTopic)
		defer cancel()
		wantSeen := func(n int, after string) {
			t.Helper()
			waitWake(t, ch, after)
			if got := lifecycleCount(t, s); got != n {
				t.Fatalf("woken reader sees %d lifecycle events after %s, want %d", got, after, n)
			}
		}
		must(s.AppendLifecycle(ctx, lifecycleEvent("subagent/provider-added", "", "")))(t)
		wantSeen(1, "AppendLifecycle")
		startRun(t, s, oneShot("r1", "p1", t0))
		wantSeen(2, "StartRun")
		must(s.EndRun(ctx, "r1", completed, endEvent("r1", "p1")))(t)
		wantSeen(3, "EndRun")
	}},
	{"Subscribe_CoalescesWithoutBlockingWriters", func(t *testing.T, s store.Store) {
		newSession(t, s, "s1")
		ch, cancel := s.Subscribe(store.SessionTopic("s1"))
		defer cancel()
		for range 20 { // nobody reads ch meanwhile
			must(s.AppendEvents(t.Context(), "s1", numbered(1)...))(t)
		}
		waitWake(t, ch, "20 unread AppendEvents")
		if n := len(must(s.Events(t.Context(), "s1", -1, 0))(t)); n != 20 {
			t.Fatalf("woken reader sees %d events, want 20", n)
		}
	}},
	{"Subscribe_SeveralSubscribersAllWake", func(t *testing.T, s store.Store) {
		newSession(t, s, "s1")
		a, cancelA := s.Subscribe(store.SessionTopic("s1"))
		defer cancelA()
		b, cancelB := s.Subscribe(store.SessionTopic("s1"))
		defer cancelB()
		must(s.AppendEvents(t.Context(), "s1", numbered(1)...))(t)
		waitWake(t, a, "AppendEvents (first subscriber)")
		waitWake(t, b, "AppendEvents (second subscriber)")
	}},
	{"Subscribe_CancelStopsWakeUps", func(t *testing.T, s store.Store) {
		newSession(t, s, "s1")
		ch, cancel := s.Subscribe(store.SessionTopic("s1"))
		live, cancelLive := s.Subscribe(store.SessionTopic("s1"))
		defer cancelLive()
		cancel()
		cancel() // ending twice is harmless
		drain(ch)
		must(s.AppendEvents(t.Context(), "s1", numbered(1)...))(t)
		waitWake(t, live, "AppendEvents")
		select {
		case <-ch:
			t.Fatal("an ended subscription was woken")
		default:
		}
	}},
}
