package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
)

// measured is one throughput measurement: n operations in dur and their
// latencies, plus what the Postgres server wrote meanwhile (nil when not
// read).
type measured struct {
	n   int
	dur time.Duration
	lat latencies
	pg  *pgCounters
}

func (m measured) perSec() float64 { return rate(m.n, m.dur) }

// walPerOp formats the WAL written per operation, or "–".
func (m measured) walPerOp() string {
	if m.pg == nil || m.n == 0 {
		return "–"
	}
	return kib(float64(m.pg.wal) / float64(m.n))
}

// xidPerOp formats the writing transactions per operation, or "–".
func (m measured) xidPerOp() string {
	if m.pg == nil || m.n == 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f", float64(m.pg.xid)/float64(m.n))
}

// measure runs op in workers goroutines, each calling it back to back
// until the -d duration has passed, and collects the latency each call
// reports. With readPG it also reads the Postgres server's counters
// before and after. The first error stops every worker.
func (b *bench) measure(ctx context.Context, workers int, readPG bool, op func(ctx context.Context, worker int) (time.Duration, error)) (measured, error) {
	var m measured
	var c0 pgCounters
	if readPG {
		var err error
		if c0, err = b.counters(ctx); err != nil {
			return m, err
		}
	}
	var mu sync.Mutex
	start := time.Now()
	deadline := start.Add(b.opts.duration)
	g, gctx := errgroup.WithContext(ctx)
	for w := range workers {
		g.Go(func() error {
			var lat latencies
			for time.Now().Before(deadline) {
				d, err := op(gctx, w)
				if err != nil {
					return err
				}
				lat = append(lat, d)
			}
			mu.Lock()
			m.lat = append(m.lat, lat...)
			mu.Unlock()
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return m, err
	}
	m.dur, m.n = time.Since(start), len(m.lat)
	if readPG {
		c1, err := b.counters(ctx)
		if err != nil {
			return m, err
		}
		d := c1.since(c0)
		m.pg = &d
	}
	return m, nil
}
