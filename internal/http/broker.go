package http

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/subagentd/subagentd/internal/store"
)

// The broker feeds SSE subscribers from the store with one reader per
// active topic (the lifecycle log of a tenant, or one session log):
//
//   - The reader subscribes to the store's wake-ups, and on each one reads
//     the rows after its cursor once, appends them to a bounded in-memory
//     tail (the ring) and broadcasts by closing a channel. Producers never
//     wait for subscribers: they only commit and wake.
//   - Each subscriber keeps its own cursor. When the cursor lies inside the
//     ring it reads from the ring; when it lies before the ring (a replay
//     after Last-Event-ID) it reads from the store until it reaches the
//     ring. Replay followed by live delivery therefore has no gap and no
//     duplicate by construction: both sources are read by id > cursor.
//   - A subscriber that was live and fell behind the ring's start is cut
//     off with errBehind; it can resume with Last-Event-ID.

// errBehind ends a subscription that fell behind the ring.
var errBehind = errors.New("subscriber fell behind the event stream")

// readPage is how many rows one store read asks for (the store's maximum).
const readPage = 1000

// retryDelay is how long a reader waits after a failed store read before
// it reads again without a wake-up.
const retryDelay = time.Second

// item is one event, framed once: every subscriber that gets it writes the
// same bytes.
type item struct {
	id       int64
	typ      string
	parentID string // lifecycle events only, for filtering
	rootID   string // lifecycle events only, for filtering
	frame    []byte // the SSE frame: id, event and data, one line of JSON
}

// newItem frames an event whose data is one line of JSON.
func newItem(id int64, typ, parentID, rootID string, data []byte) item {
	idText := strconv.FormatInt(id, 10)
	frame := appendFrame(make([]byte, 0, len(idText)+len(typ)+len(data)+24), idText, typ, data)
	return item{id: id, typ: typ, parentID: parentID, rootID: rootID, frame: frame}
}

// filter selects lifecycle items; the zero filter keeps everything.
type filter struct {
	parentID string
	rootID   string
	types    []string
}

func (f filter) keep(it item) bool {
	return (f.parentID == "" || it.parentID == f.parentID) && (f.rootID == "" || it.rootID == f.rootID) &&
		(len(f.types) == 0 || slices.Contains(f.types, it.typ))
}

// source reads one topic's rows from the store.
type source interface {
	// anchor returns a position of the log at or before its end from which
	// the topic's reader starts; hint is a position a subscriber asked for.
	anchor(ctx context.Context, hint int64) (int64, error)
	// read returns up to n items with id > after matching f, in id order.
	read(ctx context.Context, after int64, n int, f filter) ([]item, error)
}

type broker struct {
	st        store.Store
	log       *slog.Logger
	ringSize  int
	ringBytes int // maxRingBytes; tests lower it

	mu      sync.Mutex
	topics  map[string]*topic
	readers sync.WaitGroup
}

func newBroker(st store.Store, log *slog.Logger, ringSize int) *broker {
	return &broker{st: st, log: log, ringSize: ringSize, ringBytes: maxRingBytes, topics: map[string]*topic{}}
}

// topic is one followed log.
type topic struct {
	b          *broker
	key        string
	storeTopic string
	src        source
	// persistent topics stay followed until the broker closes; the others
	// end with their last subscriber.
	persistent bool
	ctx        context.Context
	cancel     context.CancelFunc
	// ready is closed once the reader reached the end of the log.
	ready chan struct{}
	// refs counts the subscribers' references; guarded by b.mu.
	refs int

	mu sync.Mutex
	// anchored is set once the reader chose its starting position; before,
	// base and head mean nothing and subscribers read from the store.
	anchored bool
	base     int64  // the ring holds the items with base < id <= head
	head     int64  // the last id the reader read
	ring     []item // ascending ids
	bytes    int    // the frames' bytes in ring
	notify   chan struct{}
}

// acquire returns the topic of tenant's storeTopic, starting its reader
// from src.anchor(hint) if it is not followed yet. Release it with
// topic.release.
func (b *broker) acquire(tenant, storeTopic string, src source, hint int64, persistent bool) *topic {
	key := tenant + "\x00" + storeTopic
	b.mu.Lock()
	defer b.mu.Unlock()
	if t, ok := b.topics[key]; ok {
		t.refs++
		return t
	}
	ctx, cancel := context.WithCancel(store.WithTenant(context.Background(), tenant))
	t := &topic{
		b: b, key: key, storeTopic: storeTopic, src: src, persistent: persistent,
		ctx: ctx, cancel: cancel, ready: make(chan struct{}), refs: 1, notify: make(chan struct{}),
	}
	b.topics[key] = t
	b.readers.Add(1)
	go t.follow(hint)
	return t
}

// release drops one reference; the last one of a non-persistent topic
// stops its reader.
func (t *topic) release() {
	t.b.mu.Lock()
	defer t.b.mu.Unlock()
	t.refs--
	if t.refs == 0 && !t.persistent {
		delete(t.b.topics, t.key)
		t.cancel()
	}
}

// close stops every reader and waits for them.
func (b *broker) close() {
	b.mu.Lock()
	for key, t := range b.topics {
		t.cancel()
		delete(b.topics, key)
	}
	b.mu.Unlock()
	b.readers.Wait()
}

// follow is the topic's reader.
func (t *topic) follow(hint int64) {
	defer t.b.readers.Done()
	// Subscribe before the first read, so no commit falls between them.
	wake, stop := t.b.st.Subscribe(t.storeTopic)
	defer stop()
	log := t.b.log.With(slog.String("topic", t.storeTopic))
	for {
		err := t.readNew(hint)
		if err == nil {
			t.markReady()
			select {
			case <-wake:
			case <-t.ctx.Done():
				return
			}
			continue
		}
		if t.ctx.Err() != nil {
			return
		}
		log.WarnContext(t.ctx, "read events for subscribers", slog.Any("error", err))
		select {
		case <-time.After(retryDelay):
		case <-wake:
		case <-t.ctx.Done():
			return
		}
	}
}

// readNew anchors the ring on first use, then reads every row after head
// into the ring.
func (t *topic) readNew(hint int64) error {
	t.mu.Lock()
	anchored := t.anchored
	t.mu.Unlock()
	if !anchored {
		pos, err := t.src.anchor(t.ctx, hint)
		if err != nil {
			return err
		}
		t.mu.Lock()
		t.anchored, t.base, t.head = true, pos, pos
		t.broadcast()
		t.mu.Unlock()
	}
	for {
		t.mu.Lock()
		after := t.head
		t.mu.Unlock()
		items, err := t.src.read(t.ctx, after, readPage, filter{})
		if err != nil {
			return err
		}
		t.append(items)
		if len(items) < readPage {
			return nil
		}
	}
}

func (t *topic) markReady() {
	select {
	case <-t.ready:
	default:
		close(t.ready)
	}
}

// append adds items to the ring, drops the oldest beyond the ring's bounds
// (ringSize items, maxRingBytes of frames; the newest item always stays)
// and wakes the subscribers.
func (t *topic) append(items []item) {
	if len(items) == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.ring = append(t.ring, items...)
	for _, it := range items {
		t.bytes += len(it.frame)
	}
	over := max(len(t.ring)-t.b.ringSize, 0)
	for i := 0; i < over; i++ {
		t.bytes -= len(t.ring[i].frame)
	}
	for ; t.bytes > t.b.ringBytes && over < len(t.ring)-1; over++ {
		t.bytes -= len(t.ring[over].frame)
	}
	if over > 0 {
		// Re-slicing drops the oldest items in O(1); the next append that
		// outgrows the array copies only the live window. The dropped
		// slots are cleared so that their frames are freed now rather
		// than at that copy. Subscribers' batches are copies of the items.
		// (Cloning the ring here on every append cost 12% of the CPU in
		// the fan-out benchmark.)
		t.base = t.ring[over-1].id
		clear(t.ring[:over])
		t.ring = t.ring[over:]
	}
	t.head = t.ring[len(t.ring)-1].id
	t.broadcast()
}

// maxRingBytes bounds the frames a topic's ring keeps: a ring of large
// events (a 160 KiB answer in each subagent/end) would otherwise hold
// ringSize of them. A subscriber whose cursor lies before the ring reads
// from the store.
const maxRingBytes = 32 << 20

// broadcast wakes every waiting subscriber. The caller holds t.mu.
func (t *topic) broadcast() {
	close(t.notify)
	t.notify = make(chan struct{})
}

// subscription is one subscriber's position in a topic.
type subscription struct {
	t      *topic
	f      filter
	cursor int64
	// live is set once the subscriber caught up with the ring's end after
	// the reader reached the log's end; a live subscriber that falls behind
	// the ring is cut off instead of being served from the store.
	live bool
}

// subscribe returns a subscription delivering the items after cursor.
func (t *topic) subscribe(cursor int64, f filter) *subscription {
	return &subscription{t: t, f: f, cursor: cursor}
}

// subscribeLive returns a subscription starting at the end of the log. It
// waits until the reader reached that end.
func (t *topic) subscribeLive(ctx context.Context, f filter) (*subscription, error) {
	select {
	case <-t.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return &subscription{t: t, f: f, cursor: t.head, live: true}, nil
}

// maxBatch bounds the items one poll returns from the ring.
const maxBatch = 256

// poll returns the next items after the subscriber's cursor and advances
// it: from the ring when the cursor lies inside it, else from the store.
// With nothing new it returns a channel that is closed when the topic gets
// more. It returns errBehind when a live subscriber fell behind the ring.
func (s *subscription) poll(ctx context.Context) ([]item, <-chan struct{}, error) {
	t := s.t
	for {
		t.mu.Lock()
		if t.anchored && s.cursor >= t.base {
			i := sort.Search(len(t.ring), func(i int) bool { return t.ring[i].id > s.cursor })
			if i == len(t.ring) {
				// Caught up. Until the reader first reached the log's end,
				// the ring may still fill past this cursor by catching up,
				// not by new events: the subscriber is not live yet.
				select {
				case <-t.ready:
					s.live = true
				default:
				}
				wait := t.notify
				t.mu.Unlock()
				return nil, wait, nil
			}
			batch := t.ring[i:min(len(t.ring), i+maxBatch)]
			s.cursor = batch[len(batch)-1].id
			out := make([]item, 0, len(batch))
			for _, it := range batch {
				if s.f.keep(it) {
					out = append(out, it)
				}
			}
			t.mu.Unlock()
			if len(out) > 0 {
				return out, nil, nil
			}
			continue
		}
		anchored, base, wait := t.anchored, t.base, t.notify
		t.mu.Unlock()
		if s.live {
			return nil, nil, errBehind
		}
		items, err := s.fromStore(ctx)
		if err != nil || len(items) > 0 {
			return items, nil, err
		}
		if !anchored {
			return nil, wait, nil
		}
		// A short page reached the store's end, which lies at or after
		// base: every matching row up to base has been delivered.
		s.cursor = max(s.cursor, base)
	}
}

// fromStore reads the next page after the cursor from the store, bypassing
// the ring, and advances the cursor past it. A stream that ends calls it
// until it returns nothing, so that everything committed before the end is
// delivered.
func (s *subscription) fromStore(ctx context.Context) ([]item, error) {
	items, err := s.t.src.read(ctx, s.cursor, readPage, s.f)
	if err != nil {
		return nil, err
	}
	if len(items) > 0 {
		s.cursor = items[len(items)-1].id
	}
	return items, nil
}

// lifecycleSource reads a tenant's lifecycle log. Ids are global and
// assigned in commit order, with gaps where other tenants' rows lie.
type lifecycleSource struct{ st store.Store }

// anchor is the tenant's newest lifecycle id: ids are visible in commit
// order, so the reader starts there instead of scanning the whole log, and
// a subscriber whose cursor lies before it reads from the store.
func (l lifecycleSource) anchor(ctx context.Context, _ int64) (int64, error) {
	id, err := l.st.LastLifecycleID(ctx)
	if err != nil {
		return 0, fmt.Errorf("anchor the lifecycle log: %w", err)
	}
	return id, nil
}

func (l lifecycleSource) read(ctx context.Context, after int64, n int, f filter) ([]item, error) {
	rows, err := l.st.Lifecycle(ctx, store.LifecycleFilter{After: after, Limit: n, ParentID: f.parentID, RootID: f.rootID, Types: f.types})
	if err != nil {
		return nil, fmt.Errorf("read lifecycle after %d: %w", after, err)
	}
	out := make([]item, 0, len(rows))
	for _, e := range rows {
		data, err := compactJSON(e.Payload)
		if err != nil {
			return nil, fmt.Errorf("lifecycle event %d: %w", e.ID, err)
		}
		out = append(out, newItem(e.ID, e.Type, e.ParentID, e.RootID, data))
	}
	return out, nil
}

// sessionSource reads one session log; seqs are contiguous from 0.
type sessionSource struct {
	st store.Store
	id string
}

// anchor returns hint when the event with seq hint exists, else -1 (the
// start): a subscriber's cursor may lie beyond the log's end.
func (s sessionSource) anchor(ctx context.Context, hint int64) (int64, error) {
	if hint < 0 {
		return -1, nil
	}
	evs, err := s.st.Events(ctx, s.id, hint-1, 1)
	if err != nil {
		return 0, fmt.Errorf("read session %s at %d: %w", s.id, hint, err)
	}
	if len(evs) == 1 && evs[0].Seq == hint {
		return hint, nil
	}
	return -1, nil
}

func (s sessionSource) read(ctx context.Context, after int64, n int, _ filter) ([]item, error) {
	evs, err := s.st.Events(ctx, s.id, after, n)
	if err != nil {
		return nil, fmt.Errorf("read session %s after %d: %w", s.id, after, err)
	}
	out := make([]item, 0, len(evs))
	for _, e := range evs {
		data, err := json.Marshal(sessionEventOut(e))
		if err != nil {
			return nil, fmt.Errorf("session %s event %d: %w", s.id, e.Seq, err)
		}
		out = append(out, newItem(e.Seq, e.Type, "", "", data))
	}
	return out, nil
}
