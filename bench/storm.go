package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
)

// Scenario 8's load: stormSubs subscribers on /v1/events, each holding its
// stream for a random stormHoldMin to stormHoldMax and then reconnecting
// with Last-Event-ID, while stormClients clients run one-shot echo runs
// with prompts of stormPrompt bytes back to back, for stormPhases phases.
const (
	stormSubs    = 200
	stormClients = 8
	stormPrompt  = 160 << 10
	stormPhases  = 3
	stormHoldMin = 50 * time.Millisecond
	stormHoldMax = 500 * time.Millisecond
	// stormRetainRuns bounds what the in-memory store keeps of disposed
	// runs (SUBAGENTD_MEM_RETAIN_RUNS; a run of this prompt keeps about
	// 1.8 MiB: the prompt, its echo and their copies in the log, the
	// result and the lifecycle), so that its RSS reaches the retention in
	// the first phase and then shows what the streams keep.
	stormRetainRuns = 32
)

// stormPhase is what one phase of a storm measured.
type stormPhase struct {
	runs       int
	dur        time.Duration
	reconnects int64
	bytes      int64         // data bytes of the events delivered
	rssKiB     int64         // at the phase's end
	cpu        time.Duration // the server's user+system CPU time in the phase
}

// stormResult is one server's storm.
type stormResult struct {
	phases []stormPhase
	// disorder counts events whose id was not above the previous one the
	// subscriber saw (a duplicate or a step back); gaps counts ids skipped
	// (lifecycle ids of one tenant are contiguous here).
	disorder, gaps int64
	dialErrs       int64
}

// storm is scenario 8: throughput and memory through a storm of
// reconnecting subscribers with large events, per phase, on the in-memory
// store and Postgres, against the stdlib broadcaster of baseline.go with
// its replay of recent frames.
func (b *bench) storm(ctx context.Context) (*table, error) {
	phase := 10 * time.Second
	if b.opts.quick {
		phase = 3 * time.Second
	}
	seed := uint64(time.Now().UnixNano())
	b.log.Info("reconnect storm", slog.Uint64("seed", seed))
	t := &table{
		title: fmt.Sprintf("8. Reconnect storm: %d subscribers of /v1/events reconnecting with Last-Event-ID while %d clients run one-shot echo runs of %d KiB prompts; %d phases of %s",
			stormSubs, stormClients, stormPrompt>>10, stormPhases, phase),
		head: []string{"server", "phase", "runs/s", "÷ first phase", "reconnects/s", "delivered/s", "server CPU/run", "RSS at phase end", "floor ÷ ours"},
	}
	// One word: echo streams its answer word by word, and one chunk keeps
	// the run's cost to its payload's size rather than a chunk count.
	prompt := strings.Repeat("0123456789abcdef", stormPrompt/16)

	base, err := b.startBaseline(ctx)
	if err != nil {
		return nil, err
	}
	fa := newAPI(base.base, stormClients+4)
	floor, err := b.stormMeasure(ctx, base, "/events", phase, seed, func(ctx context.Context, _ int) error {
		var r struct {
			RunID string `json:"runId"`
		}
		if err := fa.call(ctx, http.MethodPost, "/runs", map[string]any{"prompt": text(prompt)}, http.StatusCreated, &r); err != nil {
			return err
		}
		return fa.call(ctx, http.MethodDelete, "/runs/"+r.RunID, nil, http.StatusNoContent, nil)
	})
	fa.close()
	if err = errors.Join(err, base.stop()); err != nil {
		return nil, err
	}

	type row struct {
		name string
		res  stormResult
	}
	var rows []row
	svc := func(name, dbURL string, extra ...string) error {
		p, err := b.startService(ctx, "s8-"+strings.TrimPrefix(name, "subagentd, "), dbURL, extra...)
		if err != nil {
			return err
		}
		res, err := b.stormService(ctx, p, phase, seed, prompt)
		if err = errors.Join(err, b.stopService(p)); err != nil {
			return err
		}
		rows = append(rows, row{name, res})
		return nil
	}
	if err := svc("subagentd, memstore", "", fmt.Sprintf("SUBAGENTD_MEM_RETAIN_RUNS=%d", stormRetainRuns)); err != nil {
		return nil, err
	}
	if b.admin == nil {
		t.unavailable("subagentd, postgres", b.pgErr.Error())
	} else {
		db, dbURL, err := b.createDB(ctx)
		if err != nil {
			return nil, err
		}
		err = svc("subagentd, postgres", dbURL)
		if err = errors.Join(err, b.dropDB(db)); err != nil {
			return nil, err
		}
	}
	rows = append(rows, row{"stdlib broadcaster", floor})
	for _, r := range rows {
		first := r.res.phases[0]
		for i, p := range r.res.phases {
			secs := p.dur.Seconds()
			t.add(r.name, fmt.Sprint(i+1), num(rate(p.runs, p.dur)), ratio(rate(p.runs, p.dur), rate(first.runs, first.dur)),
				num(float64(p.reconnects)/secs), fmt.Sprintf("%.1f MiB", float64(p.bytes)/secs/(1<<20)), cpuPerRun(p), mib(p.rssKiB),
				ratio(rate(floor.phases[i].runs, floor.phases[i].dur), rate(p.runs, p.dur)))
		}
		t.note("%s: %d events out of order, %d ids skipped, %d failed connects.", r.name, r.res.disorder, r.res.gaps, r.res.dialErrs)
	}
	t.note("Each subscriber holds its stream for a random %s to %s (seed %d), closes it and reconnects at once with Last-Event-ID: the last id it read; the first connection is live. Each client creates a root session, then starts one-shot spawn runs of the echo model with POST /v1/runs?wait=true and disposes each (DELETE /v1/runs/{id}) back to back; the echo run's subagent/end carries the %d KiB prompt as lastAssistantMessage. delivered/s is the events' data bytes all subscribers read per second; server CPU/run is the server's user+system CPU time in the phase (/proc/<pid>/stat) ÷ its runs, which a loaded machine moves less than runs/s (the subscribers' reading, in the bench process, shares the 2 CPUs).",
		stormHoldMin, stormHoldMax, seed, stormPrompt>>10)
	t.note("The in-memory store keeps %d disposed runs (SUBAGENTD_MEM_RETAIN_RUNS); Postgres runs on a fresh database. ÷ first phase is the phase's runs/s ÷ the first phase's. floor: the stdlib broadcaster of scenario 2 (the bench executable with -serve-sse-baseline), whose POST /runs frames a start and an end carrying the prompt once and keeps the last 1,024 frames for Last-Event-ID; floor ÷ ours > 1 means it completed that many times more runs per second in the same phase.",
		stormRetainRuns)
	return t, nil
}

// cpuPerRun formats the server's CPU time per run of a phase.
func cpuPerRun(p stormPhase) string {
	if p.runs == 0 {
		return "–"
	}
	return ms(p.cpu / time.Duration(p.runs))
}

// stormService runs the storm against the service p: each client's runs
// under a root session of its own, each disposed once settled.
func (b *bench) stormService(ctx context.Context, p *proc, phase time.Duration, seed uint64, prompt string) (stormResult, error) {
	a := newAPI(p.base, stormClients+4)
	defer a.close()
	roots := make([]string, stormClients)
	for i := range roots {
		var err error
		if roots[i], err = a.createSession(ctx, "bench"); err != nil {
			return stormResult{}, err
		}
	}
	return b.stormMeasure(ctx, p, "/v1/events", phase, seed, func(ctx context.Context, w int) error {
		r, err := a.createRunOf(ctx, roots[w], prompt, true)
		if err != nil {
			return err
		}
		return a.call(ctx, http.MethodDelete, "/v1/runs/"+r.RunID, nil, http.StatusNoContent, nil)
	})
}

// stormMeasure runs one storm against p: the subscribers on eventsPath, and
// stormClients workers calling op back to back.
func (b *bench) stormMeasure(ctx context.Context, p *proc, eventsPath string, phase time.Duration, seed uint64,
	op func(ctx context.Context, worker int) error) (stormResult, error) {
	var res stormResult
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	addr := strings.TrimPrefix(p.base, "http://")

	var reconnects, bytes, disorder, gaps, dialErrs atomic.Int64
	var subs sync.WaitGroup
	var connected sync.WaitGroup
	connected.Add(stormSubs)
	for i := range stormSubs {
		subs.Add(1)
		go func() {
			defer subs.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(i)))
			first := true
			last, lastID := "", int64(-1)
			for ctx.Err() == nil {
				conn, body, err := dialSSE(ctx, addr, eventsPath, last)
				if err != nil {
					if ctx.Err() == nil {
						dialErrs.Add(1)
					}
					continue
				}
				if first {
					first = false
					connected.Done()
				}
				hold := stormHoldMin + time.Duration(rng.Int64N(int64(stormHoldMax-stormHoldMin)))
				_ = conn.SetReadDeadline(time.Now().Add(hold))
				_ = readFrames(body, func(f frame) bool {
					if f.id != "" {
						id, err := strconv.ParseInt(f.id, 10, 64)
						switch {
						case err != nil || id <= lastID && f.event != "":
							disorder.Add(1)
						case lastID >= 0 && id > lastID+1:
							gaps.Add(id - lastID - 1)
						}
						last, lastID = f.id, max(lastID, id)
					}
					bytes.Add(int64(len(f.data)))
					return true
				})
				conn.Close()
				reconnects.Add(1)
			}
			if first {
				connected.Done()
			}
		}()
	}
	defer subs.Wait()
	connected.Wait()
	if ctx.Err() != nil {
		return res, ctx.Err()
	}

	// Workers record the time each run completed.
	done := make([][]time.Time, stormClients)
	g, gctx := errgroup.WithContext(ctx)
	for w := range stormClients {
		g.Go(func() error {
			for gctx.Err() == nil {
				if err := op(gctx, w); err != nil {
					if gctx.Err() != nil {
						return nil
					}
					return err
				}
				done[w] = append(done[w], time.Now())
			}
			return nil
		})
	}
	start := time.Now()
	bounds := []time.Time{start}
	var rc0, by0 int64
	cpu0, err := cpuTime(p.pid())
	if err != nil {
		cancel()
		return res, errors.Join(err, g.Wait())
	}
	for i := range stormPhases {
		select {
		case <-time.After(time.Until(start.Add(time.Duration(i+1) * phase))):
		case <-gctx.Done():
		}
		if gctx.Err() != nil {
			break
		}
		rss, err := rssKB(p.pid())
		if err != nil {
			cancel()
			return res, errors.Join(err, g.Wait())
		}
		cpu, err := cpuTime(p.pid())
		if err != nil {
			cancel()
			return res, errors.Join(err, g.Wait())
		}
		now := time.Now()
		rc, by := reconnects.Load(), bytes.Load()
		res.phases = append(res.phases, stormPhase{dur: now.Sub(bounds[len(bounds)-1]), reconnects: rc - rc0, bytes: by - by0, rssKiB: rss, cpu: cpu - cpu0})
		bounds = append(bounds, now)
		rc0, by0, cpu0 = rc, by, cpu
	}
	cancel()
	if err := g.Wait(); err != nil {
		return res, err
	}
	if len(res.phases) < stormPhases {
		return res, fmt.Errorf("storm on %s ended after %d of %d phases: %w", p.name, len(res.phases), stormPhases, ctx.Err())
	}
	for _, ts := range done {
		for _, at := range ts {
			for i := range res.phases {
				if at.After(bounds[i]) && !at.After(bounds[i+1]) {
					res.phases[i].runs++
					break
				}
			}
		}
	}
	subs.Wait()
	res.disorder, res.gaps, res.dialErrs = disorder.Load(), gaps.Load(), dialErrs.Load()
	for i, ph := range res.phases {
		b.log.Info("storm phase", slog.String("server", p.name), slog.Int("phase", i+1), slog.String("runs/s", num(rate(ph.runs, ph.dur))),
			slog.Int64("reconnects", ph.reconnects), slog.String("rss", mib(ph.rssKiB)))
	}
	return res, nil
}
