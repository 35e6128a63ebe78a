package pg_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/pg/pgtest"
	"github.com/subagentd/subagentd/internal/store"
)

// TestAppendEvents_ConcurrentWritersNotifyReaders appends from 16 goroutines
// to 4 sessions through one Store and reads through another, as two
// replicas would: every seq is unique and contiguous, and readers woken only
// by NOTIFY see every event in seq order.
func TestAppendEvents_ConcurrentWritersNotifyReaders(t *testing.T) {
	t.Parallel()
	const (
		sessions = 4
		writers  = 16
		appends  = 125 // per writer, of batch events each
		batch    = 2
		perSess  = writers / sessions * appends * batch
	)
	url := pgtest.URL(t)
	w, r := newStore(t, openPool(t, url)), newStore(t, openPool(t, url))
	ctx := t.Context()
	for i := range sessions {
		if err := w.CreateSession(ctx, store.Session{ID: fmt.Sprint("s", i)}); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()

	var readers sync.WaitGroup
	readErrs := make(chan error, sessions)
	for i := range sessions {
		id := fmt.Sprint("s", i)
		wake, cancel := r.Subscribe(store.SessionTopic(id)) // before any write
		readers.Go(func() {
			defer cancel()
			next := int64(0)
			for next < perSess {
				evs, err := r.Events(ctx, id, next-1, 1000)
				if err != nil {
					readErrs <- err
					return
				}
				for _, e := range evs {
					if e.Seq != next {
						readErrs <- fmt.Errorf("%s: reader got seq %d, want %d", id, e.Seq, next)
						return
					}
					next++
				}
				if len(evs) > 0 {
					continue
				}
				select {
				case <-wake:
				case <-time.After(30 * time.Second):
					readErrs <- fmt.Errorf("%s: reader not woken for 30s at seq %d", id, next)
					return
				}
			}
		})
	}

	seqs := make([][]int64, writers)
	var wg sync.WaitGroup
	writeErrs := make(chan error, writers)
	for g := range writers {
		id := fmt.Sprint("s", g%sessions)
		wg.Go(func() {
			for i := range appends {
				evs := make([]store.NewEvent, batch)
				for k := range evs {
					evs[k] = store.NewEvent{Type: "assistant/chunk", Data: json.RawMessage(fmt.Sprintf(`{"w":%d,"i":%d,"k":%d}`, g, i, k))}
				}
				got, err := w.AppendEvents(ctx, id, evs...)
				if err != nil {
					writeErrs <- err
					return
				}
				for k, e := range got {
					if k > 0 && e.Seq != got[k-1].Seq+1 {
						writeErrs <- fmt.Errorf("batch of writer %d got seqs %d then %d", g, got[k-1].Seq, e.Seq)
						return
					}
					seqs[g] = append(seqs[g], e.Seq)
				}
			}
		})
	}
	wg.Wait()
	close(writeErrs)
	for err := range writeErrs {
		t.Fatal(err)
	}
	wrote := time.Since(start)
	readers.Wait()
	close(readErrs)
	for err := range readErrs {
		t.Fatal(err)
	}
	t.Logf("%d events: written in %v, all read by NOTIFY-driven readers after %v", sessions*perSess, wrote, time.Since(start))

	for i := range sessions {
		var all []int64
		for g := i; g < writers; g += sessions {
			if !slices.IsSorted(seqs[g]) {
				t.Fatalf("writer %d's seqs went backwards", g)
			}
			all = append(all, seqs[g]...)
		}
		slices.Sort(all)
		for k, seq := range all {
			if seq != int64(k) {
				t.Fatalf("s%d: seqs not unique and contiguous: position %d holds %d", i, k, seq)
			}
		}
		evs, err := r.Events(ctx, fmt.Sprint("s", i), perSess-2, 10)
		if err != nil || len(evs) != 1 || evs[0].Seq != perSess-1 {
			t.Fatalf("s%d: log does not end at seq %d: %v %v", i, perSess-1, evs, err)
		}
	}
}

// TestLifecycle_IDsVisibleInCommitOrder appends lifecycle events from many
// goroutines (plain appends and run starts/ends, which share the counter)
// while a reader on another Store replays after its cursor: it must never
// see id n+1 before id n.
func TestLifecycle_IDsVisibleInCommitOrder(t *testing.T) {
	t.Parallel()
	const writers, each = 8, 60 // each writer: each/3 runs started and ended, each/3 plain events
	url := pgtest.URL(t)
	w, r := newStore(t, openPool(t, url)), newStore(t, openPool(t, url))
	ctx := t.Context()
	wake, cancel := r.Subscribe(store.LifecycleTopic)
	defer cancel()

	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for g := range writers {
		wg.Go(func() {
			for i := range each / 3 {
				run := store.Run{ID: fmt.Sprintf("r%d-%d", g, i), Kind: store.KindOneShot, ParentID: "p"}
				if _, err := w.StartRun(ctx, run, store.LifecycleEvent{Type: "subagent/start", RunID: run.ID}); err != nil {
					errs <- err
					return
				}
				if _, err := w.AppendLifecycle(ctx, store.LifecycleEvent{Type: "subagent/provider-added"}); err != nil {
					errs <- err
					return
				}
				if _, err := w.EndRun(ctx, run.ID, store.RunResult{StopReason: "completed"}, store.LifecycleEvent{Type: "subagent/end", RunID: run.ID}); err != nil {
					errs <- err
					return
				}
			}
		})
	}

	last, reads := int64(0), 0
	for last < writers*each {
		evs, err := r.Lifecycle(ctx, store.LifecycleFilter{After: last, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		reads++
		for _, e := range evs {
			if e.ID != last+1 {
				t.Fatalf("reader after id %d saw id %d first: ids became visible out of commit order", last, e.ID)
			}
			last = e.ID
		}
		if len(evs) == 0 {
			waitWake(t, wake, 30*time.Second, fmt.Sprintf("for lifecycle events after id %d", last))
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("%d lifecycle ids seen in order over %d reads", last, reads)
}
