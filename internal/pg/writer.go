package pg

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/subagentd/subagentd/internal/store"
)

// Group commit (docs/architecture.md §7). Every write that announces a topic —
// session creation, log appends, run starts and ends, lifecycle appends —
// goes through one writer per Store. Whenever a flush slot is free (half the
// pool's connections may flush at once, so that one flush's wait for its
// commit overlaps the next one's batch), the writer takes every write
// waiting — except those to a row a running flush holds, which would only
// wait for its lock and go in the next flush — and commits them together in
// one transaction, sent as one pipelined batch: a flush is one round trip
// (an implicit transaction), however many sessions and runs it touches. A
// caller is answered only after the commit that holds its write.
//
// A flush runs in two phases. The data phase writes sessions, session
// events and runs, ordered by the row each write locks (a session's
// last_seq, a run's row) so that two flushes, of this replica or another,
// never lock rows in opposite orders; writes to one row keep their arrival order. The
// lifecycle phase then takes the lifecycle_counter row once, for every
// lifecycle event of the flush, in one statement at the end of the
// transaction: the counter is locked only from there to the commit, ids
// stay gap-free, and they become visible in commit order. A run's end is
// appended only if the data phase settled the run (it was still running);
// that statement checks it itself, so an end costs no second round trip.
//
// If any statement of a flush fails (a duplicate id, a lost connection),
// the flush is rolled back and its writes are retried one by one, each in
// its own transaction, so each caller gets its own answer.
//
// Wake-ups are coalesced: after a commit the writer wakes this process's
// subscribers at once and hands the flush's topics to the notifier, which
// sends them with pg_notify in a statement of its own after the commit (it
// waits for no WAL flush); one lost in a crash is caught, like any lost
// NOTIFY, by the slow poll (pollInterval) and the listener's re-query on
// reconnect. Each names the writer, so that its own listener does not wake
// the subscribers it woke already a second time. While no other replica
// listens (peers), nothing is handed to the notifier.
//
// A caller that finds a flush slot free runs the flush on its own
// goroutine; the writer's goroutine starts the flushes of callers that
// found none.

const (
	// maxFlush bounds the writes one flush carries.
	maxFlush = 256
	// pollInterval is the safety net for a lost wake-up: every subscriber is
	// woken this often to re-read the tables, so an event reaches the SSE
	// streams of every replica within about a second of its commit even
	// when its NOTIFY is lost (docs/architecture.md §5).
	pollInterval = time.Second
	// flushTimeout bounds one flush: a database that does not answer (a
	// network partition) fails the flush's writes, like a dropped
	// connection, instead of holding their callers forever.
	flushTimeout = 10 * time.Second
)

// Op states: a queued op is taken by the writer or cancelled by its caller,
// never both.
const (
	opQueued int32 = iota
	opTaken
	opCancelled
)

// op is one caller's write.
type op struct {
	// topic is woken after the commit ("" if none); an op with an event
	// wakes store.LifecycleTopic as well.
	topic string
	// key names the row the data phase locks ("" if none): flushes lock
	// rows in key order.
	key string
	// data queues the op's data-phase statements on b (nil: none). Their
	// callbacks record the op's results and may set fail. It runs again if
	// the op is retried alone, so it must overwrite what it sets.
	data func(b *pgx.Batch)
	// event, if set, is appended in the lifecycle phase; it gets its ID and
	// stored Time there.
	event *store.LifecycleEvent
	// settles, if set, names a run whose row the data phase updates only
	// when it is still running (an end): event is then appended only if
	// the data phase did update it, which the lifecycle statement checks
	// itself, and skip reports that it did not.
	settles string
	tenant  string
	skip    bool
	// sent is the recent epoch the op's flush was sent in.
	sent uint64
	// fail is the op's own answer (e.g. not found), which does not abort
	// the flush.
	fail error

	state atomic.Int32
	err   error
	done  chan struct{}
}

// writer gathers ops and commits them in flushes.
type writer struct {
	pool *pgxpool.Pool
	log  *slog.Logger
	hub  *store.Hub
	// recent gets the lifecycle events each flush committed.
	recent *recent
	// self names the writer in its notifications (notifyChannel).
	self string
	// peers tells whether anyone but this process would get them.
	peers *peers
	// inFlight bounds the flushes running at once, each on a connection of
	// its own, so one flush's commit wait overlaps the next one's batch.
	inFlight int

	// slots holds a token per running flush, at most inFlight.
	slots chan struct{}

	mu      sync.Mutex
	queue   []*op
	held    map[string]int      // rows (op keys) of running flushes
	topics  map[string]struct{} // to NOTIFY
	closed  bool
	wake    chan struct{} // the writer has ops
	wakeNtf chan struct{} // the notifier has topics

	stop     chan struct{} // closed by close: the writer drains and stops
	stopped  chan struct{} // closed when the writer has stopped
	notified chan struct{} // closed when the notifier has stopped
	watched  chan struct{} // closed when watchPeers has stopped
}

func newWriter(pool *pgxpool.Pool, log *slog.Logger, hub *store.Hub, recent *recent, self string, peers *peers) *writer {
	w := &writer{
		pool: pool, log: log, hub: hub, recent: recent, self: "@" + self + " ", peers: peers,
		inFlight: max(1, int(pool.Config().MaxConns)/2),
		topics:   make(map[string]struct{}),
		held:     make(map[string]int),
		wake:     make(chan struct{}, 1),
		wakeNtf:  make(chan struct{}, 1),
	}
	w.slots = make(chan struct{}, w.inFlight)
	w.stop, w.stopped, w.notified, w.watched = make(chan struct{}), make(chan struct{}), make(chan struct{}), make(chan struct{})
	go w.run()
	go w.notifier()
	go w.watchPeers()
	return w
}

// close commits what is queued, sends the last wake-ups and stops. Writes
// after close run alone on the caller's goroutine. Idempotent.
func (w *writer) close() {
	w.mu.Lock()
	if !w.closed {
		w.closed = true
		close(w.stop)
	}
	w.mu.Unlock()
	<-w.stopped
	<-w.notified
	<-w.watched
}

// do runs o and returns its answer once the commit that holds it is done.
// If ctx ends while o is still queued, o is dropped and ctx's error
// returned; once a flush has taken it, do waits for that flush.
func (w *writer) do(ctx context.Context, o *op) error {
	o.done = make(chan struct{})
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		o.state.Store(opTaken)
		w.flushAlone(ctx, o)
		w.notify(ctx)
		return o.err
	}
	w.queue = append(w.queue, o)
	w.mu.Unlock()
	select {
	case w.slots <- struct{}{}:
		// A flush slot is free: flush what waits (o, and whatever queued
		// meanwhile) on this goroutine, which saves the hand-off to the
		// writer and back, two goroutine wake-ups, per commit.
		if ops := w.take(); len(ops) > 0 {
			w.flushTaken(ops)
		}
		<-w.slots
		w.mu.Lock()
		waiting := len(w.queue) > 0 // queued meanwhile, or behind a held row
		w.mu.Unlock()
		if waiting {
			signal(w.wake)
		}
	default:
		signal(w.wake)
	}
	select {
	case <-o.done:
		return o.err
	case <-ctx.Done():
		if o.state.CompareAndSwap(opQueued, opCancelled) {
			return context.Cause(ctx)
		}
		<-o.done
		return o.err
	}
}

// run starts a flush whenever ops wait and fewer than w.inFlight flushes
// are running, until close. Flushes are not bounded by any caller's context
// (a caller that gives up after its op was taken still gets the flush's
// outcome), only by flushTimeout.
func (w *writer) run() {
	defer close(w.stopped)
	ctx := context.Background()
	slots := w.slots
	for {
		stopping := false
		select {
		case <-w.wake:
		case <-w.stop:
			stopping = true
		}
		for {
			slots <- struct{}{}
			ops := w.take()
			if len(ops) == 0 {
				<-slots
				break
			}
			go func() {
				w.flushTaken(ops)
				<-slots
				signal(w.wake) // ops that queued meanwhile
			}()
		}
		if stopping {
			for range w.inFlight {
				slots <- struct{}{} // every flush has ended
			}
			// Writes that waited for a row those flushes held.
			for ops := w.take(); len(ops) > 0; ops = w.take() {
				w.commit(ctx, ops)
				w.release(ops)
			}
			return
		}
	}
}

// flushTaken commits ops, which take returned, and releases their rows.
func (w *writer) flushTaken(ops []*op) {
	ctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
	defer cancel()
	w.commit(ctx, ops)
	w.release(ops)
}

// take removes up to maxFlush queued ops that their callers still wait
// for, leaving queued those whose row a running flush holds: a second flush
// would only wait for that lock, and the ops commit together in the next
// flush instead. The taken ops' rows count as held until release.
func (w *writer) take() []*op {
	w.mu.Lock()
	defer w.mu.Unlock()
	var ops []*op
	keep := w.queue[:0]
	for i, o := range w.queue {
		if len(ops) == maxFlush {
			keep = append(keep, w.queue[i:]...)
			break
		}
		if o.key != "" && w.held[o.key] > 0 {
			keep = append(keep, o) // a running flush holds its row
			continue
		}
		if o.settles != "" && slices.ContainsFunc(ops, func(t *op) bool { return t.settles == o.settles }) {
			keep = append(keep, o) // one end of a run per flush: see queueLifecycle
			continue
		}
		if o.state.CompareAndSwap(opQueued, opTaken) {
			ops = append(ops, o)
		} // else cancelled: dropped
	}
	clear(w.queue[len(keep):])
	w.queue = keep
	for _, o := range ops {
		if o.key != "" {
			w.held[o.key]++
		}
	}
	return ops
}

// release ends take's hold on the rows of ops, once their flush ended.
func (w *writer) release(ops []*op) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, o := range ops {
		if o.key == "" {
			continue
		}
		if w.held[o.key]--; w.held[o.key] <= 0 {
			delete(w.held, o.key)
		}
	}
}

// commit flushes ops together and answers them. If the database refused
// a statement, the flush was rolled back, and each op is retried alone; any
// other failure (a lost connection) leaves the outcome unknown, and every op
// gets the error, as a lone transaction's caller would.
func (w *writer) commit(ctx context.Context, ops []*op) {
	if len(ops) == 1 {
		w.flushAlone(ctx, ops[0])
		return
	}
	err := w.flush(ctx, ops)
	if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) {
		for _, o := range ops {
			w.flushAlone(ctx, o)
		}
		return
	}
	for _, o := range ops {
		o.err = err
	}
	w.answer(ops)
}

func (w *writer) flushAlone(ctx context.Context, o *op) {
	err := w.flush(ctx, []*op{o})
	if err != nil {
		o.err = err
	}
	w.answer([]*op{o})
}

// answer wakes the committed ops' topics and their callers.
func (w *writer) answer(ops []*op) {
	announce := w.peers.anyone()
	w.mu.Lock()
	for _, o := range ops {
		if o.err == nil {
			o.err = o.fail
		}
		if o.err == nil && announce {
			for _, t := range o.topics() {
				w.topics[t] = struct{}{}
			}
		}
	}
	w.mu.Unlock()
	if announce {
		signal(w.wakeNtf)
	}
	for _, o := range ops {
		if o.err == nil && o.event != nil && !o.skip {
			w.recent.committed(o.sent, o.tenant, *o.event) // before the wake-up
		}
	}
	for _, o := range ops {
		if o.err == nil {
			for _, t := range o.topics() {
				w.hub.Wake(t)
			}
		}
		close(o.done)
	}
}

// topics returns the topics a committed o wakes.
func (o *op) topics() []string {
	var ts []string
	if o.topic != "" {
		ts = append(ts, o.topic)
	}
	if o.event != nil {
		ts = append(ts, store.LifecycleTopic)
	}
	return ts
}

// flush commits ops in one transaction.
func (w *writer) flush(ctx context.Context, ops []*op) (err error) {
	conn, err := w.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()

	events, sent := false, w.recent.now()
	for _, o := range ops {
		o.skip, o.fail, o.sent = false, nil, sent
		events = events || o.event != nil
	}
	data := slices.Clone(ops)
	slices.SortStableFunc(data, func(a, b *op) int { return strings.Compare(a.key, b.key) })
	b := &pgx.Batch{}
	// A flush's statements look rows up by key, or insert from arrays whose
	// length changes the custom plans' estimates but not the plan: with
	// the default plan_cache_mode every bind planned them again.
	b.Queue(`SELECT set_config('plan_cache_mode', 'force_generic_plan', true)`)
	for _, o := range data {
		if o.data != nil {
			o.data(b)
		}
	}
	if events {
		queueLifecycle(b, ops)
	}
	return conn.SendBatch(ctx, b).Close()
}

// queueLifecycle appends the lifecycle events of ops, in op order, in one
// statement that takes the counter once. The event of an op that settles a
// run is left out unless the data phase settled it (found it running),
// which that phase notes in the transaction (markSettled); take never puts
// two such ops of one run in one flush.
func queueLifecycle(b *pgx.Batch, ops []*op) {
	var (
		owners                               []*op
		tenants, types, parents, roots, runs []string
		conds                                []string
		times                                []time.Time
		payloads                             []*string
	)
	for _, o := range ops {
		if o.event == nil || o.fail != nil {
			continue
		}
		e := o.event
		owners = append(owners, o)
		tenants, types, parents, runs = append(tenants, o.tenant), append(types, e.Type), append(parents, e.ParentID), append(runs, e.RunID)
		roots = append(roots, e.RootID)
		conds = append(conds, o.settles)
		times = append(times, now(e.Time))
		var p *string
		if len(e.Payload) > 0 {
			s := string(e.Payload)
			p = &s
		}
		payloads = append(payloads, p)
	}
	if len(owners) == 0 {
		return
	}
	b.Queue(`
		WITH e AS (
			SELECT e.*, row_number() OVER (ORDER BY e.n) AS k
			FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::timestamptz[], $6::text[], $7::text[], $8::text[])
				WITH ORDINALITY AS e (tenant, type, parent, run, time, payload, settles, root, n)
			WHERE e.settles = ''
				OR strpos(coalesce(current_setting('subagentd.settled', true), ''), ',' || e.settles || ',') > 0
		), c AS (
			UPDATE lifecycle_counter SET last_id = last_id + (SELECT count(*) FROM e)
			RETURNING last_id - (SELECT count(*) FROM e) AS before
		), ins AS (
			INSERT INTO lifecycle_events (tenant, id, type, parent_id, root_id, run_id, time, payload)
			SELECT e.tenant, c.before + e.k, e.type, e.parent, e.root, e.run, e.time, e.payload::jsonb
			FROM c, e
			RETURNING id, payload
		)
		SELECT e.n, ins.id, e.time, ins.payload FROM c CROSS JOIN e JOIN ins ON ins.id = c.before + e.k ORDER BY e.n`,
		tenants, types, parents, runs, times, payloads, conds, roots,
	).Query(func(rows pgx.Rows) error {
		// Results are read after the server ran the batch, which may have
		// committed already: a surprise here fails the callers, never the
		// flush (a failed flush is retried).
		stored := make([]bool, len(owners))
		for rows.Next() {
			var n int
			var id int64
			var at time.Time
			var payload []byte
			if err := rows.Scan(&n, &id, &at, &payload); err != nil {
				return err // not a PgError: every caller gets it, nothing is retried
			}
			if n < 1 || n > len(owners) {
				return fmt.Errorf("lifecycle insert returned event %d of %d", n, len(owners))
			}
			e := owners[n-1].event
			// As the table holds it: jsonb normalises the payload.
			e.ID, e.Time, e.Payload, stored[n-1] = id, at.UTC(), payload, true
		}
		if err := rows.Err(); err != nil {
			return err
		}
		for i, o := range owners {
			switch {
			case stored[i]:
			case o.settles != "":
				o.skip = true // the run was not running: no end
			default:
				o.fail = fmt.Errorf("lifecycle event %d of %d was not stored", i+1, len(owners))
			}
		}
		return nil
	})
}

// notifier sends the committed topics with pg_notify, coalesced, and wakes
// every local subscriber every pollInterval as the safety net for a lost
// wake-up.
func (w *writer) notifier() {
	defer close(w.notified)
	ctx := context.Background()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		select {
		case <-w.wakeNtf:
			w.notify(ctx)
		case <-tick.C:
			w.recent.foreign() // a wake-up may have been lost
			w.hub.WakeAll()
		case <-w.stopped:
			// Send what the writer committed last.
			stopCtx, cancel := context.WithTimeout(ctx, time.Second)
			w.notify(stopCtx)
			cancel()
			return
		}
	}
}

func (w *writer) notify(ctx context.Context) {
	w.mu.Lock()
	topics := make([]string, 0, len(w.topics))
	for t := range w.topics {
		topics = append(topics, w.self+t)
	}
	clear(w.topics)
	w.mu.Unlock()
	if len(topics) == 0 {
		return
	}
	// One statement, its own transaction. It writes no WAL but its commit
	// record, so its commit never waits for a WAL flush.
	_, err := w.pool.Exec(ctx, `SELECT count(pg_notify($1, t)) FROM unnest($2::text[]) AS t`, notifyChannel, topics)
	if err != nil && ctx.Err() == nil {
		w.log.WarnContext(ctx, "pg: notify other replicas; their poll will catch up", slog.Int("topics", len(topics)), slog.Any("error", err))
	}
}

// watchPeers looks for other replicas (peers) at once and every
// pollInterval until close, each look bounded by a poll interval. It runs
// on a goroutine of its own: a look waits for a pooled connection, which
// under load would hold up the notifier's wake-ups.
func (w *writer) watchPeers() {
	defer close(w.watched)
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), pollInterval)
		w.peers.look(ctx, w.pool)
		cancel()
		select {
		case <-tick.C:
		case <-w.stop:
			return
		}
	}
}

// signal wakes a goroutine waiting on ch (buffer one), never blocking.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
