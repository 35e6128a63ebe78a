package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
)

// measured is one throughput measurement: n operations in dur and their
// latencies, plus, on Postgres, what the server wrote meanwhile and what
// the database's backends waited for (nil when not read).
type measured struct {
	n     int
	dur   time.Duration
	lat   latencies
	pg    *pgCounters
	waits *waitSampler
}

// merge adds o, a measurement of the same thing, to m.
func (m measured) merge(o measured) measured {
	m.n += o.n
	m.dur += o.dur
	m.lat = append(m.lat, o.lat...)
	if o.pg != nil {
		sum := *o.pg
		if m.pg != nil {
			sum = pgCounters{wal: m.pg.wal + sum.wal, xid: m.pg.xid + sum.xid}
		}
		m.pg = &sum
	}
	if o.waits != nil {
		if m.waits == nil {
			m.waits = &waitSampler{}
		}
		m.waits.merge(o.waits)
	}
	return m
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
// for dur, and collects the latency each call reports. With a database
// name db it also reads the Postgres server's counters before and after,
// and samples what db's backends wait for. The first error stops every
// worker.
func (b *bench) measure(ctx context.Context, workers int, dur time.Duration, db string, op func(ctx context.Context, worker int) (time.Duration, error)) (measured, error) {
	var m measured
	var c0 pgCounters
	if db != "" {
		var err error
		if c0, err = b.counters(ctx); err != nil {
			return m, err
		}
		m.waits = &waitSampler{}
		stop := m.waits.run(ctx, b, db)
		defer stop()
	}
	var mu sync.Mutex
	start := time.Now()
	deadline := start.Add(dur)
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
	if db != "" {
		c1, err := b.counters(ctx)
		if err != nil {
			return m, err
		}
		d := c1.since(c0)
		m.pg = &d
	}
	return m, nil
}
