package pg_test

import (
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/pg"
	"github.com/subagentd/subagentd/internal/pg/pgtest"
	"github.com/subagentd/subagentd/internal/store"
)

// TestListener_ReconnectsAndWakesEverySubscriber kills the LISTEN connection:
// the listener reconnects within about a second, wakes every subscriber (a
// notification may have been lost meanwhile), and NOTIFY works again.
func TestListener_ReconnectsAndWakesEverySubscriber(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	pool := openPool(t, url)
	s := newStore(t, pool)
	ctx := t.Context()
	if err := s.CreateSession(ctx, store.Session{ID: "s1"}); err != nil {
		t.Fatal(err)
	}
	session, cancel := s.Subscribe(store.SessionTopic("s1"))
	defer cancel()
	idle, cancelIdle := s.Subscribe("some-other-topic")
	defer cancelIdle()
	for _, ch := range []<-chan struct{}{session, idle} {
		select { // discard wake-ups from CreateSession or the first connect
		case <-ch:
		default:
		}
	}

	var killed int
	err := pool.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE application_name = $1 AND datname = current_database()`, pg.ListenerName).Scan(&killed)
	if err != nil || killed != 1 {
		t.Fatalf("terminated %d listener connections (%v), want 1", killed, err)
	}
	killedAt := time.Now()
	waitWake(t, session, 10*time.Second, "on the session topic after the listener was killed")
	waitWake(t, idle, 10*time.Second, "on an idle topic after the listener was killed")
	t.Logf("subscribers woken %v after the listener connection was terminated", time.Since(killedAt))

	// A write through another Store reaches s only by NOTIFY.
	other := newStore(t, openPool(t, url))
	if _, err := other.AppendEvents(ctx, "s1", store.NewEvent{Type: "x"}); err != nil {
		t.Fatal(err)
	}
	waitWake(t, session, 10*time.Second, "by NOTIFY after the listener reconnected")
}

// TestListener_SkipsItsOwnWakeUps: a Store's writer wakes its own
// subscribers at the commit, so its listener skips the NOTIFY that names
// it; a wake-up from another Store's writer, or a bare topic (a replica of
// the previous release), wakes the topic.
func TestListener_SkipsItsOwnWakeUps(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	s := newStore(t, pool)
	notify := func(payload string) {
		t.Helper()
		if _, err := pool.Exec(t.Context(), `SELECT pg_notify('subagentd', $1)`, payload); err != nil {
			t.Fatal(err)
		}
	}
	bare, cancelBare := s.Subscribe("bare")
	defer cancelBare()
	notify("bare")
	waitWake(t, bare, 10*time.Second, "by a bare topic")

	// Every pollInterval every subscriber is woken: an attempt the poll
	// hit in between is retried.
	for attempt := 1; ; attempt++ {
		own, cancelOwn := s.Subscribe("own")
		other, cancelOther := s.Subscribe("other")
		notify("@" + s.Self() + " own")
		notify("@someone-else other") // delivered after the first, in order
		waitWake(t, other, 10*time.Second, "by another writer's wake-up")
		select {
		case <-own:
		default:
			cancelOwn()
			cancelOther()
			return // skipped
		}
		cancelOwn()
		cancelOther()
		if attempt == 5 {
			t.Fatal("the Store's own wake-up woke its subscriber, 5 times")
		}
	}
}
