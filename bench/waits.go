package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"
)

// waitsNote explains the "Postgres backends by state" column.
const waitsNote = "Postgres backends by state: the average number of the database's backends in each state, from pg_stat_activity sampled every 50 ms (top three). CPU: running; IO:WALSync: flushing a commit to disk; LWLock:WALWrite: waiting for another backend's flush (group commit); Lock:transactionid: waiting for another transaction's row lock; Lock:object: waiting for the NOTIFY queue lock, which a notifying transaction holds until its commit is flushed; ClientRead in tx: inside a transaction, waiting for the application's next statement."

// waitSampleEvery is how often the wait sampler reads pg_stat_activity.
const waitSampleEvery = 50 * time.Millisecond

// waitSampler records what the backends of one database are doing while a
// measurement runs: the evidence of what limits a Postgres number (commit
// flushes, row locks, the NOTIFY queue lock, CPU, or waiting for the
// client). The zero value is empty; samples of several runs add up.
type waitSampler struct {
	mu      sync.Mutex
	counts  map[string]int
	samples int
}

// run samples the backends of database db until the returned func is
// called.
func (w *waitSampler) run(ctx context.Context, b *bench, db string) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(waitSampleEvery)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			// A backend inside a transaction waiting for its client is
			// "ClientRead in tx": the round trip to the application is
			// what it waits for.
			rows, err := b.admin.Query(ctx, `
				SELECT CASE WHEN wait_event IS NULL THEN 'CPU'
				            WHEN state = 'idle in transaction' THEN wait_event || ' in tx'
				            ELSE wait_event_type || ':' || wait_event END
				FROM pg_stat_activity
				WHERE datname = $1 AND pid <> pg_backend_pid()
				  AND state IN ('active', 'idle in transaction')`, db)
			if err != nil {
				continue // the measurement is ending, or the next sample will do
			}
			counts := map[string]int{}
			for rows.Next() {
				var s string
				if rows.Scan(&s) == nil {
					counts[s]++
				}
			}
			rows.Close()
			w.add(counts, 1)
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

func (w *waitSampler) add(counts map[string]int, samples int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.counts == nil {
		w.counts = map[string]int{}
	}
	for k, n := range counts {
		w.counts[k] += n
	}
	w.samples += samples
}

// merge adds o's samples to w.
func (w *waitSampler) merge(o *waitSampler) {
	o.mu.Lock()
	counts, samples := maps.Clone(o.counts), o.samples
	o.mu.Unlock()
	w.add(counts, samples)
}

// String summarises the samples: the top three states with the average
// number of backends in each, e.g. "Lock:object 3.1, CPU 1.2".
func (w *waitSampler) String() string {
	if w == nil {
		return "–"
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.samples == 0 {
		return "–"
	}
	keys := slices.SortedFunc(maps.Keys(w.counts), func(a, b string) int { return w.counts[b] - w.counts[a] })
	var parts []string
	for _, k := range keys[:min(3, len(keys))] {
		parts = append(parts, fmt.Sprintf("%s %.1f", k, float64(w.counts[k])/float64(w.samples)))
	}
	if len(parts) == 0 {
		return "idle"
	}
	return strings.Join(parts, ", ")
}
