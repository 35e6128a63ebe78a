package pg_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/subagentd/subagentd/internal/pg"
	"github.com/subagentd/subagentd/internal/pg/pgtest"
	"github.com/subagentd/subagentd/internal/store"
)

// holdCounter locks lifecycle_counter from a transaction of its own, so the
// writer's next flush that carries a lifecycle event waits; the returned
// func releases it.
func holdCounter(t *testing.T, pool *pgxpool.Pool) func() {
	t.Helper()
	tx, err := pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(t.Context(), `SELECT last_id FROM lifecycle_counter FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	return func() {
		if err := tx.Commit(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
}

// newOneFlushStore returns a Store on a pool of two connections, so that
// it runs one flush at a time (its notifier uses the other), and a pool of
// its own on the same database for the test.
func newOneFlushStore(t *testing.T) (*pg.Store, *pgxpool.Pool) {
	return newFlushStore(t, 1)
}

// newFlushStore returns a Store that runs flushes flushes at once (on a
// pool twice that size) and a pool of the test's own on its database.
func newFlushStore(t *testing.T, flushes int) (*pg.Store, *pgxpool.Pool) {
	t.Helper()
	url := pgtest.URL(t)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = int32(2 * flushes)
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s := newStore(t, pool)
	if s.InFlight() != flushes {
		t.Fatalf("a store on %d connections runs %d flushes at once, want %d", cfg.MaxConns, s.InFlight(), flushes)
	}
	return s, openPool(t, url)
}

// blockFlushes holds lifecycle_counter (through admin) and starts one
// lifecycle append, returning once its flush waits for the lock: later
// writes queue behind it. release lets them all go; wait returns the
// blocked append's error.
func blockFlushes(t *testing.T, s *pg.Store, admin *pgxpool.Pool) (release func(), wait func() error) {
	t.Helper()
	release = holdCounter(t, admin)
	errs := make(chan error, 1)
	go func() {
		_, err := s.AppendLifecycle(t.Context(), store.LifecycleEvent{Type: "first"})
		errs <- err
	}()
	waitUntil(t, "the first flush to wait for the lock", func() bool {
		var blocked int
		err := admin.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&blocked)
		if err != nil {
			t.Fatal(err)
		}
		return blocked > 0
	})
	return release, func() error { return <-errs }
}

// waitQueued waits until n writes are queued behind the blocked flush.
func waitQueued(t *testing.T, s *pg.Store, n int) {
	t.Helper()
	waitUntil(t, fmt.Sprintf("%d writes to queue", n), func() bool { return s.Queued() >= n })
}

// waitTimeout bounds waitUntil: generous for a loaded machine, where the
// awaited state takes milliseconds.
const waitTimeout = 30 * time.Second

// waitUntil fails t unless cond holds within waitTimeout. The states it
// waits for (a backend waiting for a lock, writes queued in the writer)
// signal nothing, so it checks cond on a short tick.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	deadline := time.After(waitTimeout)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("waited %v for %s", waitTimeout, what)
		}
	}
}

// TestGroupCommit_OneTransactionPerFlush blocks one flush, lets writes of
// many sessions queue behind it, and checks they commit in one transaction
// (one xmin), each caller answered with its own result and lifecycle ids
// gap-free in arrival order.
func TestGroupCommit_OneTransactionPerFlush(t *testing.T) {
	t.Parallel()
	s, pool := newOneFlushStore(t)
	ctx := t.Context()
	const n = 20
	for i := range n {
		if err := s.CreateSession(ctx, store.Session{ID: fmt.Sprint("g", i)}); err != nil {
			t.Fatal(err)
		}
	}
	release, blocked := blockFlushes(t, s, pool)

	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	for i := range n {
		wg.Go(func() {
			evs, err := s.AppendEvents(ctx, fmt.Sprint("g", i), store.NewEvent{Type: "t"}, store.NewEvent{Type: "u"})
			if err == nil && (len(evs) != 2 || evs[0].Seq != 0 || evs[1].Seq != 1) {
				err = fmt.Errorf("g%d: got %+v", i, evs)
			}
			errs <- err
		})
		wg.Go(func() {
			_, err := s.AppendLifecycle(ctx, store.LifecycleEvent{Type: "grouped"})
			errs <- err
		})
	}
	waitQueued(t, s, 2*n)
	release()
	wg.Wait()
	if err := blocked(); err != nil {
		t.Fatal(err)
	}
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}

	var xmins, events, lo, hi int64
	row := pool.QueryRow(ctx, `SELECT count(DISTINCT xmin::text), count(*), min(id), max(id) FROM lifecycle_events WHERE type = 'grouped'`)
	if err := row.Scan(&xmins, &events, &lo, &hi); err != nil {
		t.Fatal(err)
	}
	if xmins != 1 || events != n || lo != 2 || hi != n+1 {
		t.Fatalf("grouped lifecycle events: %d transactions, %d events, ids %d..%d; want 1, %d, 2..%d", xmins, events, lo, hi, n, n+1)
	}
	if err := pool.QueryRow(ctx, `SELECT count(DISTINCT e.xmin::text) FROM session_events e, lifecycle_events l
		WHERE l.type = 'grouped' AND e.xmin::text <> l.xmin::text`).Scan(&xmins); err != nil {
		t.Fatal(err)
	}
	if xmins != 0 {
		t.Fatalf("%d appends committed apart from the lifecycle events queued with them", xmins)
	}
}

// TestGroupCommit_FailureStaysWithItsCaller queues a duplicate session and
// a second end of one run among good writes in one flush: only those two
// callers get their errors, everyone else commits, and lifecycle ids stay
// gap-free.
func TestGroupCommit_FailureStaysWithItsCaller(t *testing.T) {
	t.Parallel()
	s, pool := newOneFlushStore(t)
	ctx := t.Context()
	if err := s.CreateSession(ctx, store.Session{ID: "dup"}); err != nil {
		t.Fatal(err)
	}
	run := store.Run{ID: "r", Kind: store.KindOneShot}
	if _, err := s.StartRun(ctx, run, store.LifecycleEvent{Type: "subagent/start", RunID: "r"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.EndRun(ctx, "r", store.RunResult{StopReason: "completed"}, store.LifecycleEvent{Type: "subagent/end", RunID: "r"}); err != nil {
		t.Fatal(err)
	}

	release, blocked := blockFlushes(t, s, pool)
	const n = 10
	var wg sync.WaitGroup
	good := make(chan error, 2*n)
	var dupErr, endErr error
	wg.Go(func() { dupErr = s.CreateSession(ctx, store.Session{ID: "dup"}) })
	wg.Go(func() {
		_, endErr = s.EndRun(ctx, "r", store.RunResult{StopReason: "completed"}, store.LifecycleEvent{Type: "subagent/end", RunID: "r"})
	})
	for i := range n {
		wg.Go(func() { good <- s.CreateSession(ctx, store.Session{ID: fmt.Sprint("ok", i)}) })
		wg.Go(func() {
			_, err := s.AppendLifecycle(ctx, store.LifecycleEvent{Type: "ok"})
			good <- err
		})
	}
	waitQueued(t, s, 2*n+2)
	release()
	wg.Wait()
	if err := blocked(); err != nil {
		t.Fatal(err)
	}
	close(good)
	for err := range good {
		if err != nil {
			t.Fatal(err)
		}
	}
	if !errors.Is(dupErr, store.ErrConflict) {
		t.Fatalf("duplicate session: %v, want ErrConflict", dupErr)
	}
	if !errors.Is(endErr, store.ErrConflict) {
		t.Fatalf("second end: %v, want ErrConflict", endErr)
	}
	evs, err := s.Lifecycle(ctx, store.LifecycleFilter{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != n+3 {
		t.Fatalf("%d lifecycle events, want %d", len(evs), n+3)
	}
	for i, e := range evs {
		if e.ID != int64(i+1) {
			t.Fatalf("lifecycle ids not gap-free: position %d holds id %d", i, e.ID)
		}
	}
}

// TestGroupCommit_CallerGivingUpWhileQueuedWritesNothing cancels a caller
// whose append still waits behind a blocked flush: it gets its context's
// error and the append is never committed, while a caller that stays gets
// its write.
func TestGroupCommit_CallerGivingUpWhileQueuedWritesNothing(t *testing.T) {
	t.Parallel()
	s, pool := newOneFlushStore(t)
	ctx := t.Context()
	for _, id := range []string{"gone", "stays"} {
		if err := s.CreateSession(ctx, store.Session{ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	release, blocked := blockFlushes(t, s, pool)
	cctx, cancel := context.WithCancel(ctx)
	gone := make(chan error, 1)
	go func() {
		_, err := s.AppendEvents(cctx, "gone", store.NewEvent{Type: "t"})
		gone <- err
	}()
	stays := make(chan error, 1)
	go func() {
		_, err := s.AppendEvents(ctx, "stays", store.NewEvent{Type: "t"})
		stays <- err
	}()
	waitQueued(t, s, 2)
	cancel()
	if err := <-gone; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled caller: %v, want context.Canceled", err)
	}
	release()
	if err := blocked(); err != nil {
		t.Fatal(err)
	}
	if err := <-stays; err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]int{"gone": 0, "stays": 1} {
		evs, err := s.Events(ctx, id, -1, 10)
		if err != nil || len(evs) != want {
			t.Fatalf("%s: %d events (%v), want %d", id, len(evs), err, want)
		}
	}
}

// TestGroupCommit_WritesToAHeldRowWaitForTheNextFlush blocks a flush that
// holds a run's row (its end, waiting for lifecycle_counter): a second end
// of that run stays queued, while an append to another session commits in
// the free flush slot meanwhile; a Close meanwhile still answers it.
func TestGroupCommit_WritesToAHeldRowWaitForTheNextFlush(t *testing.T) {
	t.Parallel()
	s, pool := newFlushStore(t, 2)
	ctx := t.Context()
	if err := s.CreateSession(ctx, store.Session{ID: "free"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.StartRun(ctx, store.Run{ID: "r", Kind: store.KindOneShot}, store.LifecycleEvent{Type: "subagent/start", RunID: "r"}); err != nil {
		t.Fatal(err)
	}
	release := holdCounter(t, pool)
	end := func() error {
		_, err := s.EndRun(ctx, "r", store.RunResult{StopReason: "completed"}, store.LifecycleEvent{Type: "subagent/end", RunID: "r"})
		return err
	}
	first := make(chan error, 1)
	go func() { first <- end() }()
	for { // the first end's flush waits for the counter
		var blocked int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&blocked); err != nil {
			t.Fatal(err)
		}
		if blocked > 0 {
			break
		}
	}
	second := make(chan error, 1)
	go func() { second <- end() }()
	waitQueued(t, s, 1)
	if _, err := s.AppendEvents(ctx, "free", store.NewEvent{Type: "t"}); err != nil {
		t.Fatal(err)
	}
	if n := s.Queued(); n != 1 {
		t.Fatalf("%d writes queued after another flush committed, want the second end still waiting", n)
	}
	// Closing now must still commit the waiting write once the held row is
	// free, not leave its caller hanging.
	closed := make(chan struct{})
	go func() { s.Close(); close(closed) }()
	release()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := <-second; !errors.Is(err, store.ErrConflict) {
		t.Fatalf("second end: %v, want ErrConflict", err)
	}
	<-closed
}
