package http

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/memstore"
	"github.com/subagentd/subagentd/internal/store"
)

// brokerBundle is a broker over a memstore with one session.
type brokerBundle struct {
	st store.Store
	b  *broker
	id string
}

func setupBroker(t *testing.T, ringSize int) *brokerBundle {
	t.Helper()
	st := memstore.New()
	if err := st.CreateSession(t.Context(), store.Session{ID: "s"}); err != nil {
		t.Fatal(err)
	}
	b := newBroker(st, slog.New(slog.NewTextHandler(io.Discard, nil)), ringSize)
	t.Cleanup(b.close)
	return &brokerBundle{st: st, b: b, id: "s"}
}

func (bb *brokerBundle) append(t *testing.T, n int) {
	t.Helper()
	evs := make([]store.NewEvent, n)
	for i := range evs {
		evs[i] = store.NewEvent{Type: "e", Data: json.RawMessage(`{}`)}
	}
	if _, err := bb.st.AppendEvents(t.Context(), bb.id, evs...); err != nil {
		t.Fatal(err)
	}
}

func (bb *brokerBundle) topic(hint int64) *topic {
	return bb.b.acquire(store.DefaultTenant, store.SessionTopic(bb.id), sessionSource{bb.st, bb.id}, hint, false)
}

// collect polls sub until it returned want items, waiting on the topic's
// broadcasts in between.
func collect(t *testing.T, sub *subscription, want int) []int64 {
	t.Helper()
	var ids []int64
	timeout := time.After(streamTimeout)
	for len(ids) < want {
		items, wait, err := sub.poll(t.Context())
		if err != nil {
			t.Fatalf("poll after %v: %v", ids, err)
		}
		for _, it := range items {
			ids = append(ids, it.id)
		}
		if len(items) == 0 {
			select {
			case <-wait:
			case <-timeout:
				t.Fatalf("got %d of %d items", len(ids), want)
			}
		}
	}
	return ids
}

func wantSeqs(t *testing.T, got []int64, from int64) {
	t.Helper()
	for i, id := range got {
		if id != from+int64(i) {
			t.Fatalf("item %d is %d, want %d (all: %v)", i, id, from+int64(i), got)
		}
	}
}

// TestBroker_ReplayFromStoreThenRing: a subscriber far behind the ring
// replays from the store, then continues from the ring, with every id once.
func TestBroker_ReplayFromStoreThenRing(t *testing.T) {
	bb := setupBroker(t, 4)
	bb.append(t, 50)
	tp := bb.topic(-1)
	defer tp.release()
	sub := tp.subscribe(-1, filter{})
	got := collect(t, sub, 50)
	wantSeqs(t, got, 0)
	bb.append(t, 3)
	wantSeqs(t, collect(t, sub, 3), 50)
}

// TestBroker_SlowSubscriberCutOff: a live subscriber that falls behind the
// ring is cut off (it resumes with Last-Event-ID), while a new subscriber
// for the same position replays from the store.
func TestBroker_SlowSubscriberCutOff(t *testing.T) {
	bb := setupBroker(t, 4)
	bb.append(t, 2)
	tp := bb.topic(-1)
	defer tp.release()
	sub := tp.subscribe(-1, filter{})
	wantSeqs(t, collect(t, sub, 2), 0)
	<-tp.ready
	_, wait, err := sub.poll(t.Context())
	if err != nil || wait == nil || !sub.live {
		t.Fatalf("caught-up poll: wait %v, live %v, err %v", wait, sub.live, err)
	}
	bb.append(t, 10) // one commit, one read: the ring drops 6 unread items
	<-wait
	if _, _, err := sub.poll(t.Context()); !errors.Is(err, errBehind) {
		t.Fatalf("poll = %v, want errBehind", err)
	}
	resumed := tp.subscribe(1, filter{})
	wantSeqs(t, collect(t, resumed, 10), 2)
}

// TestBroker_AnchorBeyondEnd: a cursor past the log's end does not anchor
// the topic there; other subscribers still see every event.
func TestBroker_AnchorBeyondEnd(t *testing.T) {
	bb := setupBroker(t, 16)
	bb.append(t, 3)
	tp := bb.topic(100)
	defer tp.release()
	far := tp.subscribe(100, filter{})
	near := tp.subscribe(-1, filter{})
	wantSeqs(t, collect(t, near, 3), 0)
	bb.append(t, 2)
	wantSeqs(t, collect(t, near, 2), 3)
	items, _, err := far.poll(t.Context())
	if err != nil || len(items) != 0 {
		t.Fatalf("far subscriber got %v, %v", items, err)
	}
}

// TestBroker_LifecycleFilterSkipsToRing: a filtered replay that matches
// nothing still reaches the ring and then follows it.
func TestBroker_LifecycleFilterSkipsToRing(t *testing.T) {
	st := memstore.New()
	b := newBroker(st, slog.New(slog.NewTextHandler(io.Discard, nil)), 8)
	defer b.close()
	ctx := t.Context()
	add := func(parent string) {
		if _, err := st.AppendLifecycle(ctx, store.LifecycleEvent{Type: "t", ParentID: parent, Payload: json.RawMessage(`{"p":"` + parent + `"}`)}); err != nil {
			t.Fatal(err)
		}
	}
	for range 20 {
		add("other")
	}
	tp := b.acquire(store.DefaultTenant, store.LifecycleTopic, lifecycleSource{st}, 0, true)
	sub := tp.subscribe(0, filter{parentID: "mine"})
	items, wait, err := sub.poll(ctx)
	if err != nil || len(items) != 0 {
		t.Fatalf("poll = %v, %v", items, err)
	}
	add("other")
	add("mine")
	for len(items) == 0 {
		select {
		case <-wait:
		case <-time.After(streamTimeout):
			t.Fatal("no item")
		}
		if items, wait, err = sub.poll(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if len(items) != 1 || items[0].id != 22 || items[0].parentID != "mine" {
		t.Fatalf("items = %+v", items)
	}
}

// TestBroker_TopicEndsWithLastSubscriber: a session topic's reader stops
// when its last subscriber leaves; the next subscriber starts a new one.
func TestBroker_TopicEndsWithLastSubscriber(t *testing.T) {
	bb := setupBroker(t, 8)
	first := bb.topic(-1)
	second := bb.topic(-1)
	if first != second {
		t.Fatal("two readers for one topic")
	}
	first.release()
	second.release()
	select {
	case <-first.ctx.Done():
	default:
		t.Fatal("reader still running after the last release")
	}
	third := bb.topic(-1)
	defer third.release()
	if third == first {
		t.Fatal("released topic reused")
	}
	bb.append(t, 1)
	wantSeqs(t, collect(t, third.subscribe(-1, filter{}), 1), 0)
}

func TestSessionSource_Envelope(t *testing.T) {
	bb := setupBroker(t, 8)
	if _, err := bb.st.AppendEvents(context.Background(), bb.id, store.NewEvent{Type: "turn/start", Data: json.RawMessage("{\n  \"turn\": 1\n}")}); err != nil {
		t.Fatal(err)
	}
	items, err := sessionSource{bb.st, bb.id}.read(t.Context(), -1, 10, filter{})
	if err != nil || len(items) != 1 {
		t.Fatalf("read = %v, %v", items, err)
	}
	head, data, ok := bytes.Cut(items[0].frame, []byte("\ndata: "))
	if string(head) != "id: 0\nevent: turn/start" || !ok || !bytes.HasSuffix(data, []byte("\n\n")) {
		t.Fatalf("frame %q", items[0].frame)
	}
	data = bytes.TrimSuffix(data, []byte("\n\n"))
	if bytes.ContainsAny(data, "\r\n") {
		t.Fatalf("data spans lines: %s", data)
	}
	var env sessionEventJSON
	if err := json.Unmarshal(data, &env); err != nil {
		t.Fatal(err)
	}
	if env.Seq != 0 || env.Type != "turn/start" || string(env.Data) != `{"turn":1}` {
		t.Fatalf("envelope %s", data)
	}
}

// TestBroker_RingBoundedByBytes: the ring keeps at most ringBytes of
// frames, but always the newest item; a subscriber whose cursor fell
// before it replays from the store without a gap.
func TestBroker_RingBoundedByBytes(t *testing.T) {
	bb := setupBroker(t, 64)
	tp := bb.topic(-1)
	defer tp.release()
	bb.append(t, 2)
	readTo(t, tp, 1)
	tp.mu.Lock()
	frame := tp.bytes / 2 // the events are alike, but for a digit or two
	tp.mu.Unlock()
	bb.b.ringBytes = 3*frame + 16
	bb.append(t, 10)
	readTo(t, tp, 11)
	tp.mu.Lock()
	n, bytes, base := len(tp.ring), tp.bytes, tp.base
	tp.mu.Unlock()
	if n != 3 || bytes > bb.b.ringBytes || base != 8 {
		t.Fatalf("ring holds %d items, %d bytes, after %d; want 3, about %d bytes, after 8", n, bytes, base, 3*frame)
	}
	wantSeqs(t, collect(t, tp.subscribe(1, filter{}), 10), 2)

	bb.b.ringBytes = 1 // smaller than any frame: the newest stays
	bb.append(t, 3)
	readTo(t, tp, 14)
	tp.mu.Lock()
	defer tp.mu.Unlock()
	if len(tp.ring) != 1 || tp.ring[0].id != 14 || tp.bytes != len(tp.ring[0].frame) {
		t.Fatalf("ring %d items (first %d), %d bytes; want the newest item alone", len(tp.ring), tp.ring[0].id, tp.bytes)
	}
}

// readTo waits until tp's reader read the item with id head.
func readTo(t *testing.T, tp *topic, head int64) {
	t.Helper()
	timeout := time.After(streamTimeout)
	for {
		tp.mu.Lock()
		anchored, at, wait := tp.anchored, tp.head, tp.notify
		tp.mu.Unlock()
		if anchored && at >= head {
			return
		}
		select {
		case <-wait:
		case <-timeout:
			t.Fatalf("the reader is at %d, want %d", at, head)
		}
	}
}

// TestBroker_FramesShared: subscribers of one topic write the same frame
// bytes, built once when the reader read the event.
func TestBroker_FramesShared(t *testing.T) {
	bb := setupBroker(t, 16)
	tp := bb.topic(-1)
	defer tp.release()
	a, b := tp.subscribe(-1, filter{}), tp.subscribe(-1, filter{})
	bb.append(t, 1)
	first := func(sub *subscription) item {
		t.Helper()
		for {
			items, wait, err := sub.poll(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if len(items) > 0 {
				return items[0]
			}
			select {
			case <-wait:
			case <-time.After(streamTimeout):
				t.Fatal("no item")
			}
		}
	}
	<-tp.ready
	x, y := first(a), first(b)
	if x.id != 0 || y.id != 0 || &x.frame[0] != &y.frame[0] {
		t.Fatalf("items %d and %d: frames at %p and %p, want one frame", x.id, y.id, &x.frame[0], &y.frame[0])
	}
}
