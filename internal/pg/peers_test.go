package pg_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/subagentd/subagentd/internal/pg"
	"github.com/subagentd/subagentd/internal/pg/pgtest"
	"github.com/subagentd/subagentd/internal/store"
)

// notifyRecorder is a pgx tracer that keeps the topics of the pg_notify
// statements sent in a Store's writer's name ("@<writer> <topic>"): the
// writer's wake-ups and the listener's hello.
type notifyRecorder struct {
	mu     sync.Mutex
	topics []string
}

func (r *notifyRecorder) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if !strings.Contains(d.SQL, "pg_notify") {
		return ctx
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var payloads []string
	for _, a := range d.Args {
		switch a := a.(type) {
		case []string:
			payloads = append(payloads, a...)
		case string:
			payloads = append(payloads, a)
		}
	}
	for _, p := range payloads {
		if from, topic, ok := strings.Cut(p, " "); ok && strings.HasPrefix(from, "@") {
			r.topics = append(r.topics, topic)
		}
	}
	return ctx
}

func (r *notifyRecorder) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (r *notifyRecorder) sent() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.topics)
}

// recordedStore returns a Store on the database at url whose writer's
// wake-ups rec records.
func recordedStore(t *testing.T, url string) (*pg.Store, *notifyRecorder) {
	t.Helper()
	rec := &notifyRecorder{}
	return newStore(t, tracedPool(t, url, rec)), rec
}

// TestPeers_ALoneReplicaAnnouncesNothing: a Store whose listener is the
// only one on its database says hello when it connects and then sends no
// wake-up for its commits, which would reach nobody else; its own
// subscribers are still woken at each commit.
func TestPeers_ALoneReplicaAnnouncesNothing(t *testing.T) {
	t.Parallel()
	s, rec := recordedStore(t, pgtest.URL(t))
	waitUntil(t, "the store to find no other replica", func() bool { return !s.Peers() })
	ctx := t.Context()
	woken, cancel := s.Subscribe(store.SessionTopic("s1"))
	defer cancel()
	if err := s.CreateSession(ctx, store.Session{ID: "s1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendEvents(ctx, "s1", store.NewEvent{Type: "x"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-woken:
	default:
		t.Fatal("the commit did not wake the store's own subscriber")
	}
	s.Close() // sends what the notifier still holds
	if got := rec.sent(); !slices.Equal(got, []string{"replica"}) {
		t.Errorf("a lone store sent wake-ups %q, want only its hello", got)
	}
}

// TestPeers_ReplicasAnnounceToEachOther: a Store that was alone finds a
// second one on its database (the newcomer's hello reaches it, or its next
// look does) and announces its commits from then on; once the second one
// has gone, it stops.
func TestPeers_ReplicasAnnounceToEachOther(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	a, rec := recordedStore(t, url)
	waitUntil(t, "A to find no other replica", func() bool { return !a.Peers() })
	b := newStore(t, openPool(t, url))
	waitUntil(t, "A to find B", a.Peers)
	ctx := t.Context()
	if err := a.CreateSession(ctx, store.Session{ID: "s1"}); err != nil {
		t.Fatal(err)
	}
	woken, cancel := b.Subscribe(store.SessionTopic("s1"))
	defer cancel()
	if _, err := a.AppendEvents(ctx, "s1", store.NewEvent{Type: "x"}); err != nil {
		t.Fatal(err)
	}
	waitWake(t, woken, waitTimeout, "on B by A's commit")
	waitUntil(t, "A to announce the append", func() bool {
		return slices.Contains(rec.sent(), store.SessionTopic("s1"))
	})

	b.Close()
	waitUntil(t, "A to find B gone", func() bool { return !a.Peers() })
	before := len(rec.sent())
	if _, err := a.AppendEvents(ctx, "s1", store.NewEvent{Type: "y"}); err != nil {
		t.Fatal(err)
	}
	a.Close()
	if got := rec.sent()[before:]; len(got) != 0 {
		t.Errorf("A alone again sent wake-ups %q, want none", got)
	}
}
