package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
)

// Scenario 2's load: runs are created at fanoutRate per second while every
// subscriber listens; connections are opened dialParallel at a time.
const (
	fanoutRate   = 10
	dialParallel = 64
	// deliveryWait bounds the wait for the last subscriber's last frame.
	deliveryWait = 30 * time.Second
)

// fanTarget is a server the fan-out clients measure.
type fanTarget struct {
	p          *proc
	eventsPath string
	// create starts one run and returns its id.
	create func(ctx context.Context) (string, error)
}

// fanResult is one fan-out measurement.
type fanResult struct {
	rateAchieved float64
	// delivered counts subagent/start frames received, of subs×runs.
	delivered int
	lat       latencies
	post      latencies
	// rssPerSub is the server's RSS growth per idle subscriber, in bytes.
	rssPerSub float64
}

// fanout is scenario 2: idle-subscriber memory and subagent/start delivery
// latency on /v1/events with 1,000, 5,000 and 10,000 subscribers (1,000
// and 10,000 with -quick), against the standard-library broadcaster of
// baseline.go.
func (b *bench) fanout(ctx context.Context) (*table, error) {
	runs, sizes := 50, []int{1000, 5000, 10000}
	if b.opts.quick {
		runs, sizes = 20, []int{1000, 10000}
	}
	t := &table{
		title: fmt.Sprintf("2. SSE fan-out on /v1/events (memstore): %d runs created at %d/s while every subscriber listens", runs, fanoutRate),
		head:  []string{"server", "subscribers", "delivered", "p50", "p99", "max", "RSS / idle subscriber", "RSS ÷ baseline", "p99 ÷ baseline"},
	}
	for _, subs := range sizes {
		// Each subscriber holds a descriptor in the bench and one in the
		// server (a separate process).
		if lim := fileLimit(); uint64(subs+256) > lim {
			t.unavailable(fmt.Sprintf("subagentd, %d", subs), fmt.Sprintf("RLIMIT_NOFILE is %d; %d subscribers need more", lim, subs))
			continue
		}
		svc, err := b.fanoutService(ctx, subs, runs)
		if err != nil {
			return nil, err
		}
		base, err := b.fanoutBaseline(ctx, subs, runs)
		if err != nil {
			return nil, err
		}
		for _, r := range []struct {
			name string
			res  fanResult
		}{{"subagentd", svc}, {"stdlib broadcaster", base}} {
			t.add(r.name, fmt.Sprint(subs), fmt.Sprintf("%d/%d", r.res.delivered, subs*runs),
				ms(r.res.lat.pct(50)), ms(r.res.lat.pct(99)), ms(r.res.lat.pct(100)), kib(r.res.rssPerSub),
				ratio(r.res.rssPerSub, base.rssPerSub), ratio(float64(r.res.lat.pct(99)), float64(base.lat.pct(99))))
		}
		t.note("%d subscribers: runs created at %.1f/s achieved; POST /v1/runs p50 %s, p99 %s (subagentd) — included in its delivery latency.",
			subs, svc.rateAchieved, ms(svc.post.pct(50)), ms(svc.post.pct(99)))
	}
	t.note("Delivery latency runs from sending the POST that creates a run to each subscriber's receipt of that run's subagent/start (the start is committed before the POST answers). Subscribers read with one goroutine each over raw HTTP/1.1 connections in the bench process, which shares the 2 CPUs with the server.")
	t.note("RSS / idle subscriber is the server's VmRSS growth from before the subscribers connected to after all got their response headers, ÷ subscribers. The baseline is a minimal standard-library SSE broadcaster (a buffered channel per subscriber, frames built once) run as a separate process.")
	return t, nil
}

// fanoutService measures the service on the in-memory store.
func (b *bench) fanoutService(ctx context.Context, subs, runs int) (_ fanResult, err error) {
	svc, err := b.startService(ctx, fmt.Sprintf("s2-memstore-%d", subs), "")
	if err != nil {
		return fanResult{}, err
	}
	defer func() { err = errors.Join(err, b.stopService(svc)) }()
	a := newAPI(svc.base, 4)
	defer a.close()
	root, err := a.createSession(ctx, "bench")
	if err != nil {
		return fanResult{}, err
	}
	// A warm-up run pages in the run path before memory is read.
	if _, err := a.createRun(ctx, root, true); err != nil {
		return fanResult{}, err
	}
	return b.fanoutMeasure(ctx, fanTarget{p: svc, eventsPath: "/v1/events", create: func(ctx context.Context) (string, error) {
		r, err := a.createRun(ctx, root, false)
		return r.RunID, err
	}}, subs, runs)
}

// fanoutBaseline measures the standard-library broadcaster.
func (b *bench) fanoutBaseline(ctx context.Context, subs, runs int) (_ fanResult, err error) {
	p, err := b.startBaseline(ctx)
	if err != nil {
		return fanResult{}, err
	}
	defer func() { err = errors.Join(err, p.stop()) }()
	a := newAPI(p.base, 4)
	defer a.close()
	create := func(ctx context.Context) (string, error) {
		var r struct {
			RunID string `json:"runId"`
		}
		err := a.call(ctx, http.MethodPost, "/runs", nil, http.StatusCreated, &r)
		return r.RunID, err
	}
	if _, err := create(ctx); err != nil {
		return fanResult{}, err
	}
	return b.fanoutMeasure(ctx, fanTarget{p: p, eventsPath: "/events", create: create}, subs, runs)
}

// receipt is a subagent/start a subscriber received.
type receipt struct {
	runID string
	at    time.Time
}

// sseSub is one fan-out subscriber.
type sseSub struct {
	conn net.Conn
	got  []receipt
}

// fanoutMeasure connects subs idle subscribers to target, reads the
// server's memory growth, then creates runs and collects every
// subscriber's receipt of every subagent/start.
func (b *bench) fanoutMeasure(ctx context.Context, target fanTarget, subs, runs int) (res fanResult, err error) {
	addr := strings.TrimPrefix(target.p.base, "http://")
	rss0, err := rssKB(target.p.pid())
	if err != nil {
		return res, err
	}

	// Connect. Each reader counts down complete once it has every start (or
	// its stream ended).
	all := make([]*sseSub, subs)
	var complete sync.WaitGroup
	complete.Add(subs)
	var readers sync.WaitGroup
	defer func() {
		for _, s := range all {
			if s != nil {
				s.conn.Close()
			}
		}
		readers.Wait()
	}()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(dialParallel)
	for i := range all {
		g.Go(func() error {
			conn, body, err := dialSSE(gctx, addr, target.eventsPath, "")
			if err != nil {
				return err
			}
			s := &sseSub{conn: conn, got: make([]receipt, 0, runs)}
			all[i] = s
			readers.Add(1)
			go func() {
				defer readers.Done()
				counted := false
				_ = readFrames(body, func(f frame) bool {
					if f.event != "subagent/start" {
						return true
					}
					s.got = append(s.got, receipt{runID: runIDOf(f.data), at: time.Now()})
					if len(s.got) == runs && !counted {
						counted = true
						complete.Done()
					}
					return true
				})
				if !counted {
					complete.Done()
				}
			}()
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		// Readers not started still owe their count.
		for _, s := range all {
			if s == nil {
				complete.Done()
			}
		}
		return res, fmt.Errorf("connect %d subscribers: %w", subs, err)
	}
	rss1, err := rssKB(target.p.pid())
	if err != nil {
		return res, err
	}
	res.rssPerSub = float64(rss1-rss0) * 1024 / float64(subs)

	// Create runs at a fixed rate.
	sent := make(map[string]time.Time, runs)
	tick := time.NewTicker(time.Second / fanoutRate)
	defer tick.Stop()
	start := time.Now()
	for range runs {
		t0 := time.Now()
		id, err := target.create(ctx)
		if err != nil {
			return res, err
		}
		res.post = append(res.post, time.Since(t0))
		sent[id] = t0
		select {
		case <-tick.C:
		case <-ctx.Done():
			return res, ctx.Err()
		}
	}
	res.rateAchieved = rate(runs, time.Since(start))

	// Wait for delivery, then end the streams and collect.
	delivered := make(chan struct{})
	go func() {
		complete.Wait()
		close(delivered)
	}()
	select {
	case <-delivered:
	case <-time.After(deliveryWait):
		b.log.Warn("fan-out: not every subscriber got every start", slog.Duration("waited", deliveryWait))
	case <-ctx.Done():
		return res, ctx.Err()
	}
	for _, s := range all {
		s.conn.Close()
	}
	readers.Wait()
	for _, s := range all {
		for _, r := range s.got {
			if t0, ok := sent[r.runID]; ok {
				res.lat = append(res.lat, r.at.Sub(t0))
			}
		}
	}
	res.delivered = len(res.lat)
	b.log.Info("fan-out", slog.String("server", target.p.name), slog.Int("subscribers", subs),
		slog.Int("delivered", res.delivered), slog.String("p99", ms(res.lat.pct(99))), slog.String("rss/sub", kib(res.rssPerSub)))
	return res, nil
}

// dialSSE opens an SSE stream with a bare HTTP/1.1 request and returns the
// connection and a reader of the (de-chunked) body once the response
// headers arrived.
// A lastEventID other than "" is sent as Last-Event-ID.
func dialSSE(ctx context.Context, addr, path, lastEventID string) (net.Conn, *bufio.Reader, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, nil, err
	}
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	resume := ""
	if lastEventID != "" {
		resume = "Last-Event-ID: " + lastEventID + "\r\n"
	}
	if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nAccept: text/event-stream\r\n%s\r\n", path, addr, resume); err != nil {
		conn.Close()
		return nil, nil, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		conn.Close()
		return nil, nil, fmt.Errorf("GET %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		conn.Close()
		return nil, nil, fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	_ = conn.SetDeadline(time.Time{})
	return conn, bufio.NewReader(resp.Body), nil
}

// runIDOf returns the runId of a subagent/start payload (compact JSON, as
// both servers write it), without decoding the rest.
func runIDOf(data []byte) string {
	const key = `"runId":"`
	i := bytes.Index(data, []byte(key))
	if i < 0 {
		return ""
	}
	rest := data[i+len(key):]
	j := bytes.IndexByte(rest, '"')
	if j < 0 {
		return ""
	}
	return string(rest[:j])
}
