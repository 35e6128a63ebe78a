package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/pg"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
)

// padBatch is how many padding events one AppendEvents call writes.
const padBatch = 1000

// continuableRoutes match the routes scenario 4 needs (api/openapi.yaml) in the
// service's own /openapi.yaml.
var continuableRoutes = []*regexp.Regexp{
	regexp.MustCompile(`\n  /v1/subagents:`),
	regexp.MustCompile(`\n  /v1/subagents/\{\w+\}/followup:`),
}

// coldResume is scenario 4: followup latency to a stopped continuable child
// whose log holds 100, 10,000 and 100,000 events, on Postgres. Each child is
// created through POST /v1/subagents and left to settle; the service is
// stopped, the logs are padded with assistant/chunk events through the
// Store (log-only events: the model history stays one exchange long, so
// what grows is only the log), and a restarted service answers the
// followups, each of which must cold-resume (route "started").
//
// The padding stands for a long turn's stream, written behind the agent's
// back: the first followup to a padded child finds no snapshot after it and
// reads it all, as a resume of a log without snapshots does; its turn's end
// writes the history/snapshot. It is shown apart; the followups after it
// are the steady state the ratio is taken from.
func (b *bench) coldResume(ctx context.Context) (_ *table, err error) {
	reps := 5
	if b.opts.quick {
		reps = 3
	}
	sizes := []int{100, 10000, 100000}
	t := &table{
		title: fmt.Sprintf("4. Cold resume on Postgres: POST /v1/subagents/{id}/followup to a stopped child, 1 + %d followups per size", reps),
		head: []string{"log events", "first followup → 200", "followup → 200 p50", "max", "p50 ÷ 100-event p50",
			"followup → subagent/end p50", "max", "route"},
	}
	if b.admin == nil {
		t.unavailable("all", b.pgErr.Error())
		return t, nil
	}
	name, dbURL, err := b.createDB(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, b.dropDB(name)) }()

	svc, err := b.startService(ctx, "s4-postgres-setup", dbURL)
	if err != nil {
		return nil, err
	}
	root, children, reason, err := b.createContinuable(ctx, svc, len(sizes)+1)
	err = errors.Join(err, b.stopService(svc))
	if err != nil {
		return nil, err
	}
	if reason != "" {
		t.unavailable("100 / 10,000 / 100,000", reason)
		return t, nil
	}

	// Pad the logs while the service is down: a true cold start.
	for i, size := range sizes {
		if err := b.padLog(ctx, dbURL, children[i+1], size); err != nil {
			return nil, err
		}
	}
	if err := analyze(ctx, dbURL); err != nil {
		return nil, err
	}

	svc, err = b.startService(ctx, "s4-postgres", dbURL)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, b.stopService(svc)) }()
	a := newAPI(svc.base, 4)
	defer a.close()
	w, err := a.watchEnds(ctx, "parentSessionId="+root)
	if err != nil {
		return nil, err
	}
	defer w.close()
	// The first followup after a start pays one-time costs; a warm-up child
	// (with its short log) takes them.
	if _, _, _, err := a.followup(ctx, w, root, children[0]); err != nil {
		return nil, fmt.Errorf("warm-up followup: %w", err)
	}
	var base time.Duration // the 100-event p50
	for i, size := range sizes {
		var answer, end latencies
		routes := map[string]int{}
		var first time.Duration
		for r := range reps + 1 {
			ans, settled, route, err := a.followup(ctx, w, root, children[i+1])
			if err != nil {
				return nil, fmt.Errorf("followup to the child of %d events: %w", size, err)
			}
			routes[route]++
			if r == 0 {
				first = ans
				continue
			}
			answer, end = append(answer, ans), append(end, settled)
		}
		var rs []string
		for r, n := range routes {
			rs = append(rs, fmt.Sprintf("%s ×%d", r, n))
		}
		if i == 0 {
			base = answer.pct(50)
		}
		t.add(num(float64(size)), ms(first), ms(answer.pct(50)), ms(answer.pct(100)),
			ratio(float64(answer.pct(50)), float64(base)), ms(end.pct(50)), ms(end.pct(100)), strings.Join(rs, ", "))
		b.log.Info("cold resume", slog.Int("events", size), slog.String("first", ms(first)),
			slog.String("answer p50", ms(answer.pct(50))), slog.String("end p50", ms(end.pct(50))))
	}
	t.note("Log events: the child's log when the first followup arrives (each followup's activation appends its own turn, a dozen events more). Every followup finds the child stopped, since the bench waits for each activation's subagent/end before the next; route \"started\" is a cold resume.")
	t.note("First followup: the padding was written behind the service's back, so this resume finds no history/snapshot after it and reads the whole log; its turn's end writes one. The followups after it read the newest snapshot and the events after it (store.LogTail); p50, max and the ratio are theirs.")
	t.note("followup → 200 is the followup's answer (the content is durably accepted and the activation started); followup → subagent/end adds the resumed child's echo turn and settlement, seen on /v1/events.")
	return t, nil
}

// createContinuable creates a root session and n continuable children,
// each settled. reason is non-empty when the service cannot: the routes are
// missing or no provider can resume.
func (b *bench) createContinuable(ctx context.Context, svc *proc, n int) (root string, children []string, reason string, err error) {
	a := newAPI(svc.base, 4)
	defer a.close()
	spec, err := a.get(ctx, "/openapi.yaml")
	if err != nil {
		return "", nil, "", err
	}
	for _, r := range continuableRoutes {
		if !r.MatchString(spec) {
			return "", nil, fmt.Sprintf("the service's /openapi.yaml has no route matching %s (continuable children are not wired into the service yet)", strings.TrimPrefix(r.String(), `\n  `)), nil
		}
	}
	var providers struct {
		Providers []struct {
			Name   string `json:"name"`
			Resume bool   `json:"resume"`
		} `json:"providers"`
	}
	if err := a.call(ctx, http.MethodGet, "/v1/providers", nil, http.StatusOK, &providers); err != nil {
		return "", nil, "", err
	}
	provider := ""
	for _, p := range providers.Providers {
		if p.Resume && (provider == "" || p.Name == "spawn") {
			provider = p.Name
		}
	}
	if provider == "" {
		return "", nil, "no provider advertises resume in /v1/providers", nil
	}
	if root, err = a.createSession(ctx, "bench"); err != nil {
		return "", nil, "", err
	}
	w, err := a.watchEnds(ctx, "parentSessionId="+root)
	if err != nil {
		return "", nil, "", err
	}
	defer w.close()
	for i := range n {
		var c struct {
			ChildID string `json:"childId"`
			TaskID  string `json:"taskId"`
		}
		body := map[string]any{"provider": provider, "parentSessionId": root, "label": fmt.Sprintf("bench-%d", i), "prompt": text("hello from the bench")}
		if err := a.call(ctx, http.MethodPost, "/v1/subagents", body, http.StatusCreated, &c); err != nil {
			if status, code := problemCode(err); status == http.StatusNotFound && (code == "NOT_FOUND" || code == "") {
				return "", nil, "POST /v1/subagents is not served (404 " + code + ")", nil
			}
			return "", nil, "", err
		}
		if _, err := w.task(ctx, c.TaskID); err != nil {
			return "", nil, "", err
		}
		children = append(children, c.ChildID)
	}
	return root, children, "", nil
}

// followup sends one followup to child and returns the time to its answer
// and to its activation's subagent/end, and the route it took.
func (a *api) followup(ctx context.Context, w *endWatch, root, child string) (answer, settled time.Duration, route string, err error) {
	var out struct {
		Route  string `json:"route"`
		TaskID string `json:"taskId"`
	}
	body := map[string]any{"parentSessionId": root, "content": text("and once more")}
	t0 := time.Now()
	if err := a.call(ctx, http.MethodPost, "/v1/subagents/"+child+"/followup", body, http.StatusOK, &out); err != nil {
		return 0, 0, "", err
	}
	answer = time.Since(t0)
	end, err := w.task(ctx, out.TaskID)
	if err != nil {
		return 0, 0, "", err
	}
	if end.StopReason != "completed" {
		return 0, 0, "", fmt.Errorf("task %s ended %q", out.TaskID, end.StopReason)
	}
	return answer, end.at.Sub(t0), out.Route, nil
}

// get returns the body of a GET answered 200.
func (a *api) get(ctx context.Context, path string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.base+path, nil)
	if err != nil {
		return "", err
	}
	resp, err := a.hc.Do(req)
	if err != nil {
		return "", fmt.Errorf("GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	return string(data), err
}

// analyze refreshes the planner's statistics of the log table, as
// autovacuum does in a database whose logs grew over time (within a minute
// of its naptime; the bench is quicker). Without them Postgres guesses
// that one session has a handful of events, and plans a page of a 100,000
// event log as a sort of all of it.
func analyze(ctx context.Context, dbURL string) error {
	pool, err := pgxpool.New(ctx, pg.ConnString(dbURL))
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, "ANALYZE session_events"); err != nil {
		return fmt.Errorf("analyze the padded logs: %w", err)
	}
	return nil
}

// padLog appends assistant/chunk events to child's log through the Store
// until it holds size events.
func (b *bench) padLog(ctx context.Context, dbURL, child string, size int) error {
	pool, err := pgxpool.New(ctx, pg.ConnString(dbURL))
	if err != nil {
		return err
	}
	defer pool.Close()
	st, err := pg.New(ctx, pool, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		return err
	}
	defer st.Close()
	have := 0
	for after := int64(-1); ; {
		evs, err := st.Events(ctx, child, after, 1000)
		if err != nil {
			return err
		}
		if len(evs) == 0 {
			break
		}
		have += len(evs)
		after = evs[len(evs)-1].Seq
	}
	data, err := json.Marshal(sessionlog.ChunkData{Turn: 1, Step: 1, Chunk: sessionlog.Chunk{Type: string(model.ChunkText), Text: "padding "}})
	if err != nil {
		return err
	}
	for have < size {
		n := min(padBatch, size-have)
		evs := make([]store.NewEvent, n)
		for i := range evs {
			evs[i] = store.NewEvent{Type: sessionlog.EventAssistantChunk, Data: data}
		}
		if _, err := st.AppendEvents(ctx, child, evs...); err != nil {
			return fmt.Errorf("pad the log of %s: %w", child, err)
		}
		have += n
	}
	return nil
}
