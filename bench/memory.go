package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
)

// memClients is how many clients scenario 5 runs.
const memClients = 16

// memory is scenario 5: on the in-memory store, memClients clients start
// one-shot echo runs back to back and dispose each once it settled (POST
// /v1/runs?wait=true, then DELETE), for n1 and then n2 runs in all; the
// service's RSS is read after each, and its CPU time per run over the
// second stretch. Baseline, the a2a-style floor: a standard-library server
// that keeps each run as an a2a-go-like task (status, history of the
// prompt and the echo, one artifact) in a map and deletes it on DELETE.
func (b *bench) memory(ctx context.Context) (*table, error) {
	// Both points lie past the retention, where memory must stop growing.
	n1, n2, retain := 20_000, 200_000, 10_000
	if b.opts.quick {
		n1, n2, retain = 4_000, 40_000, 2_000
	}
	t := &table{
		title: fmt.Sprintf("5. Memory and CPU per run (memstore): %d clients, one-shot echo runs, each disposed once settled", memClients),
		head:  []string{"server", "runs", "RSS after " + num(float64(n1)), "RSS after " + num(float64(n2)), "growth", "CPU/run", "runs/s", "floor ÷ ours"},
	}
	// No rate limit: one tenant's clients measure throughput, and a run
	// and its dispose are two requests (at 1,000 runs/s the default 2,000
	// requests per second answer 429).
	svc, err := b.startService(ctx, "s5-memstore", "", fmt.Sprintf("SUBAGENTD_MEM_RETAIN_RUNS=%d", retain), "SUBAGENTD_RATE_LIMIT=0")
	if err != nil {
		return nil, err
	}
	ours, err := b.memoryMeasure(ctx, svc, n1, n2)
	err = errors.Join(err, b.stopService(svc))
	if err != nil {
		return nil, err
	}
	base, err := b.startBaseline(ctx)
	if err != nil {
		return nil, err
	}
	floor, err := b.memoryMeasure(ctx, base, n1, n2)
	err = errors.Join(err, base.stop())
	if err != nil {
		return nil, err
	}
	for _, r := range []struct {
		name string
		m    memResult
	}{{"subagentd", ours}, {"a2a-style floor", floor}} {
		t.add(r.name, num(float64(n2)), mib(r.m.rss1), mib(r.m.rss2),
			fmt.Sprintf("%.2f×", float64(r.m.rss2)/float64(r.m.rss1)), ms(r.m.cpuPerRun), num(r.m.perSec),
			ratio(1/floor.cpuPerRun.Seconds(), 1/r.m.cpuPerRun.Seconds()))
	}
	t.note("Each client creates one root session, then starts a one-shot spawn run of the echo model with POST /v1/runs?wait=true and disposes it with DELETE /v1/runs/{id} once it answered, back to back, until %s runs, then on to %s; RSS is the server's VmRSS at those points.", num(float64(n1)), num(float64(n2)))
	t.note("growth is RSS after %s ÷ RSS after %s. The service runs with SUBAGENTD_MEM_RETAIN_RUNS=%d (10000 is the default): beyond it the oldest disposed runs are evicted with their child sessions and logs.", num(float64(n2)), num(float64(n1)), retain)
	t.note("CPU/run is the server's user+system CPU time (/proc/<pid>/stat) from run %s to run %s ÷ the runs in between; floor ÷ ours > 1 means the floor does that many times more runs per CPU second. The clients run in the bench process on the same 2 CPUs.", num(float64(n1)), num(float64(n2)))
	t.note("a2a-style floor: a standard-library HTTP server (the bench executable with -serve-sse-baseline) whose POST /v1/runs decodes the request, stores a task like a2a-go's in-memory task store (id, context id, status, a history of the prompt and its echo, one artifact) in a map under a mutex and answers it as JSON; DELETE removes it. No agent loop, no log, no lifecycle events.")
	return t, nil
}

// memResult is one server's measurement in scenario 5.
type memResult struct {
	rss1, rss2 int64 // KiB after n1 and n2 runs
	cpuPerRun  time.Duration
	perSec     float64
}

// memoryMeasure drives p to n1 then n2 runs.
func (b *bench) memoryMeasure(ctx context.Context, p *proc, n1, n2 int) (memResult, error) {
	var res memResult
	a := newAPI(p.base, memClients+4)
	defer a.close()
	roots := make([]string, memClients)
	for i := range roots {
		var err error
		if roots[i], err = a.createSession(ctx, "bench"); err != nil {
			return res, err
		}
	}
	var done atomic.Int64
	drive := func(target int) error {
		g, gctx := errgroup.WithContext(ctx)
		for i := range memClients {
			g.Go(func() error {
				for done.Add(1) <= int64(target) {
					r, err := a.createRun(gctx, roots[i], true)
					if err != nil {
						return err
					}
					if err := a.call(gctx, http.MethodDelete, "/v1/runs/"+r.RunID, nil, http.StatusNoContent, nil); err != nil {
						return err
					}
				}
				done.Add(-1)
				return nil
			})
		}
		return g.Wait()
	}
	if err := drive(n1); err != nil {
		return res, err
	}
	rss1, err := rssKB(p.pid())
	if err != nil {
		return res, err
	}
	cpu1, err := cpuTime(p.pid())
	if err != nil {
		return res, err
	}
	t1 := time.Now()
	if err := drive(n2); err != nil {
		return res, err
	}
	elapsed := time.Since(t1)
	cpu2, err := cpuTime(p.pid())
	if err != nil {
		return res, err
	}
	rss2, err := rssKB(p.pid())
	if err != nil {
		return res, err
	}
	runs := n2 - n1
	res = memResult{rss1: rss1, rss2: rss2, cpuPerRun: (cpu2 - cpu1) / time.Duration(runs), perSec: rate(runs, elapsed)}
	b.log.Info("memory", slog.String("server", p.name), slog.Int64("rss1_kib", rss1), slog.Int64("rss2_kib", rss2),
		slog.Duration("cpu_per_run", res.cpuPerRun))
	return res, nil
}

// mib formats a KiB count in MiB.
func mib(kib int64) string { return fmt.Sprintf("%.1f MiB", float64(kib)/1024) }

// cpuTime returns the user+system CPU time of pid from /proc/<pid>/stat,
// in USER_HZ ticks of 10 ms (fixed by the kernel ABI).
func cpuTime(pid int) (time.Duration, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// Fields after the command name, which is in parentheses and may hold spaces.
	rest := string(data)
	if i := strings.LastIndexByte(rest, ')'); i >= 0 {
		rest = rest[i+1:]
	}
	f := strings.Fields(rest)
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	var ticks int64
	for _, s := range f[11:13] { // utime, stime: fields 14 and 15 of stat
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += v
	}
	return time.Duration(ticks) * 10 * time.Millisecond, nil
}

// taskStore is the a2a-style floor's state: tasks shaped like a2a-go's
// in-memory task store keeps them.
type taskStore struct {
	mu    sync.Mutex
	tasks map[string]*task
}

type taskPart struct {
	Kind string `json:"kind"`
	Text string `json:"text"`
}

type taskMessage struct {
	MessageID string     `json:"messageId"`
	Role      string     `json:"role"`
	Parts     []taskPart `json:"parts"`
}

type task struct {
	ID        string `json:"id"`
	ContextID string `json:"contextId"`
	Status    struct {
		State     string    `json:"state"`
		Timestamp time.Time `json:"timestamp"`
	} `json:"status"`
	History   []taskMessage `json:"history"`
	Artifacts []struct {
		ArtifactID string     `json:"artifactId"`
		Parts      []taskPart `json:"parts"`
	} `json:"artifacts"`
}

// createRun stores the task for a run request and answers in the shape the
// bench's createRun reads.
func (s *taskStore) createRun(w http.ResponseWriter, r *http.Request) {
	var req struct {
		ParentSessionID string `json:"parentSessionId"`
		Prompt          []struct {
			Text string `json:"text"`
		} `json:"prompt"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var parts []taskPart
	for _, p := range req.Prompt {
		parts = append(parts, taskPart{Kind: "text", Text: p.Text})
	}
	tk := &task{ID: rand.Text(), ContextID: req.ParentSessionID}
	tk.Status.State, tk.Status.Timestamp = "completed", time.Now()
	tk.History = []taskMessage{{MessageID: rand.Text(), Role: "user", Parts: parts}, {MessageID: rand.Text(), Role: "agent", Parts: parts}}
	tk.Artifacts = append(tk.Artifacts, struct {
		ArtifactID string     `json:"artifactId"`
		Parts      []taskPart `json:"parts"`
	}{rand.Text(), parts})
	s.mu.Lock()
	s.tasks[tk.ID] = tk
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"runId": tk.ID, "childSessionId": tk.ContextID, "state": "settled",
		"result": map[string]any{"stopReason": "completed", "output": parts}, "task": tk,
	})
}

func (s *taskStore) disposeRun(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	delete(s.tasks, r.PathValue("id"))
	s.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (s *taskStore) createSession(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"id":%q}`, rand.Text())
}
