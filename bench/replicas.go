package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"
)

// stepSleep is how long each model step of scenario 6's steered child
// lasts: long enough that a followup, routed or not, reaches the owner
// before the step ends, so that every followup is steered.
const stepSleep = 500 * time.Millisecond

// replicas is scenario 6: two replicas, A and B, on one fresh Postgres
// database. First, cross-replica control: followups steered into a running
// child that A drives, sent alternately through B (routed to A through the
// database) and through A (local). Then takeover: A is killed with SIGKILL
// while it drives continuable children, and the time is measured until B
// has closed each of their runs (subagent/end on B's /v1/events), then how
// fast a followup through B resumes each child.
func (b *bench) replicas(ctx context.Context) (_ *table, err error) {
	ttl, followups, children := 5*time.Second, 100, 50
	if b.opts.quick {
		ttl, followups, children = 2*time.Second, 20, 10
	}
	takeover := &table{
		title: fmt.Sprintf("6. Replicas on one Postgres: SIGKILL of replica A while it drives %d continuable children; B closes their runs and resumes them", children),
		head:  []string{"lease TTL", "runs closed", "kill → subagent/end on B p50", "max", "p50 ÷ TTL", "max ÷ TTL", "resume through B: followup → 200 p50", "max", "route"},
	}
	control := &table{
		title: fmt.Sprintf("6. Replicas on one Postgres: %d followups steered into a running child that A drives, sent through B (routed) and through A (local), alternately", 2*followups),
		head:  []string{"sent through", "followups", "route", "send → owner's splice p50", "admission → 200 p50", "control p50", "control p99", "p50 ÷ local", "p99 ÷ local", "followup → 200 p50"},
	}
	takeover.more = []*table{control}
	if b.admin == nil {
		takeover.unavailable("–", b.pgErr.Error())
		control.unavailable("–", b.pgErr.Error())
		return takeover, nil
	}
	name, dbURL, err := b.createDB(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, b.dropDB(name)) }()
	start := func(replica string) (*proc, error) {
		return b.startService(ctx, "s6-"+replica, dbURL, "SUBAGENTD_REPLICA_ID="+replica, "SUBAGENTD_LEASE_TTL="+ttl.String())
	}
	procA, err := start("replica-a")
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, b.stopService(procA)) }()
	procB, err := start("replica-b")
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, b.stopService(procB)) }()
	a, bb := newAPI(procA.base, 4), newAPI(procB.base, 4)
	defer a.close()
	defer bb.close()

	root, err := a.createSession(ctx, "bench replicas")
	if err != nil {
		return nil, err
	}
	w, err := bb.watchEdges(ctx, []string{"subagent/start", "subagent/end"}, "parentSessionId="+root)
	if err != nil {
		return nil, err
	}
	defer w.close()

	if err := b.controlLatency(ctx, control, a, bb, w, root, followups); err != nil {
		return nil, fmt.Errorf("control latency: %w", err)
	}
	if err := b.takeover(ctx, takeover, procA, a, bb, w, root, children, ttl); err != nil {
		return nil, fmt.Errorf("takeover: %w", err)
	}
	return takeover, nil
}

// spawnHeld creates a continuable spawn child of root through c whose
// first step sleeps for hold, and waits until its activation started.
func spawnHeld(ctx context.Context, c *api, w *endWatch, root, label string, hold time.Duration) (childID, taskID string, err error) {
	var out struct {
		ChildID string `json:"childId"`
		TaskID  string `json:"taskId"`
	}
	body := map[string]any{"provider": "spawn", "parentSessionId": root, "label": label, "prompt": text(fmt.Sprintf("/sleep %s\n%s", hold, label))}
	if err := c.call(ctx, http.MethodPost, "/v1/subagents", body, http.StatusCreated, &out); err != nil {
		return "", "", err
	}
	if _, err := w.taskStarted(ctx, out.TaskID); err != nil {
		return "", "", err
	}
	return out.ChildID, out.TaskID, nil
}

// followupOut is the answer to a followup.
type followupOut struct {
	Route     string `json:"route"`
	TaskID    string `json:"taskId"`
	MessageID string `json:"messageId"`
}

// sendFollowup sends content to child through c and returns the answer and
// when the request was sent and answered.
func sendFollowup(ctx context.Context, c *api, root, child, content string) (out followupOut, sent, answered time.Time, err error) {
	body := map[string]any{"parentSessionId": root, "content": text(content)}
	sent = time.Now()
	err = c.call(ctx, http.MethodPost, "/v1/subagents/"+child+"/followup", body, http.StatusOK, &out)
	return out, sent, time.Now(), err
}

// controlLatency fills t: 2n followups into one child that A drives, each
// asking for another step of stepSleep, so the child stays running and
// each followup is steered into its next step. They go alternately through
// B and A. A steered followup answers once a step admitted it, so its
// answer time is mostly the rest of the running step; the child's log
// (event times from the owner's clock, the bench's machine) separates the
// control path from that wait: send → the owner's splice of the message
// into the next-step inbox, and the step's admission → the answer.
func (b *bench) controlLatency(ctx context.Context, t *table, a, bb *api, w *endWatch, root string, n int) error {
	child, _, err := spawnHeld(ctx, a, w, root, "steered", stepSleep)
	if err != nil {
		return err
	}
	// vias[0], the owner itself, is the floor the routed row is read against.
	vias := []struct {
		name string
		c    *api
	}{{"A (local)", a}, {"B (routed to A)", bb}}
	type sample struct {
		via            int
		out            followupOut
		sent, answered time.Time
	}
	samples := make([]sample, 0, 2*n)
	lastTask := ""
	for i := range 2 * n {
		via := (i + 1) % 2 // B first
		out, sent, answered, err := sendFollowup(ctx, vias[via].c, root, child, fmt.Sprintf("/sleep %s\nfollowup %d", stepSleep, i))
		if err != nil {
			return err
		}
		samples = append(samples, sample{via: via, out: out, sent: sent, answered: answered})
		lastTask = out.TaskID
	}
	if _, err := w.task(ctx, lastTask); err != nil {
		return err
	}
	evs, err := a.sessionLog(ctx, child)
	if err != nil {
		return err
	}
	splices, admits := map[string]time.Time{}, map[string]time.Time{}
	for _, e := range evs {
		switch e.Type {
		case "agent/inbox/spliced":
			var d struct {
				Inserted []struct {
					ID string `json:"id"`
				} `json:"inserted"`
			}
			if err := json.Unmarshal(e.Data, &d); err != nil {
				return fmt.Errorf("splice %s: %w", e.Data, err)
			}
			for _, m := range d.Inserted {
				splices[m.ID] = e.Time
			}
		case "user/message":
			var d struct {
				ID string `json:"id"`
			}
			if err := json.Unmarshal(e.Data, &d); err != nil {
				return fmt.Errorf("user/message %s: %w", e.Data, err)
			}
			admits[d.ID] = e.Time
		}
	}
	type row struct {
		n                                int
		routes                           map[string]int
		forward, back, control, answered latencies
	}
	rows := []row{{routes: map[string]int{}}, {routes: map[string]int{}}}
	for _, s := range samples {
		r := &rows[s.via]
		r.n++
		r.routes[s.out.Route]++
		splice, ok1 := splices[s.out.MessageID]
		admit, ok2 := admits[s.out.MessageID]
		if s.out.Route != "steered" || !ok1 || !ok2 {
			continue // not steered: no splice into the running turn to time
		}
		fwd, back := splice.Sub(s.sent), s.answered.Sub(admit)
		r.forward, r.back = append(r.forward, fwd), append(r.back, back)
		r.control, r.answered = append(r.control, fwd+back), append(r.answered, s.answered.Sub(s.sent))
	}
	local := rows[0]
	for i, r := range rows {
		t.add(vias[i].name, fmt.Sprint(r.n), routesCell(r.routes), ms(r.forward.pct(50)), ms(r.back.pct(50)), ms(r.control.pct(50)), ms(r.control.pct(99)),
			ratio(float64(r.control.pct(50)), float64(local.control.pct(50))), ratio(float64(r.control.pct(99)), float64(local.control.pct(99))),
			ms(r.answered.pct(50)))
		b.log.Info("control latency", slog.String("via", vias[i].name), slog.String("p50", ms(r.control.pct(50))), slog.String("p99", ms(r.control.pct(99))))
	}
	t.note("One continuable child, driven by A; every followup asks for one more model step of %s (the echo model's /sleep), so the child keeps running and each followup is steered into its next step. Followups go one at a time, alternately through B and through A; both replicas run with the same lease TTL as the takeover table.", stepSleep)
	t.note("A steered followup answers once a model step admitted it, so followup → 200 is mostly the rest of the running step. The control path is timed from the child's log (event times are the owner's clock, on the bench's machine): send → owner's splice runs from sending the request to the owner logging the message into the child's next-step inbox (agent/inbox/spliced); admission → 200 from the step logging the message as its user/message to the answer reaching the client. control = their sum, per followup: what a followup costs besides the model. Only steered followups count in the latencies.")
	t.note("p50 ÷ local and p99 ÷ local: the control latency against the same followups sent to the owner itself (1.00×); > 1 means the route through the database makes a followup that many times slower.")
	return nil
}

// routesCell formats route counts, e.g. "steered ×20".
func routesCell(routes map[string]int) string {
	var rs []string
	for r, n := range routes {
		rs = append(rs, fmt.Sprintf("%s ×%d", r, n))
	}
	slices.Sort(rs)
	return strings.Join(rs, ", ")
}

// takeover fills t: n children that A drives, each held in a long step;
// A is killed; the time from the kill to each run's subagent/end on B's
// stream (stopReason error), then a followup through B to each child.
func (b *bench) takeover(ctx context.Context, t *table, procA *proc, a, bb *api, w *endWatch, root string, n int, ttl time.Duration) error {
	held := make([]string, n)
	tasks := map[string]string{} // child → its running task
	for i := range held {
		child, task, err := spawnHeld(ctx, a, w, root, fmt.Sprintf("held-%d", i), 5*time.Minute)
		if err != nil {
			return err
		}
		held[i], tasks[child] = child, task
	}
	killed := time.Now()
	procA.kill()
	var closed latencies
	for _, child := range held {
		end, err := w.task(ctx, tasks[child])
		if err != nil {
			return err
		}
		if end.StopReason != "error" {
			return fmt.Errorf("child %s's run ended %q after the owner's SIGKILL, want error", child, end.StopReason)
		}
		closed = append(closed, end.at.Sub(killed))
	}
	var resume latencies
	routes := map[string]int{}
	for _, child := range held {
		out, sent, answered, err := sendFollowup(ctx, bb, root, child, "after the crash")
		if err != nil {
			return err
		}
		resume, routes[out.Route] = append(resume, answered.Sub(sent)), routes[out.Route]+1
		end, err := w.task(ctx, out.TaskID)
		if err != nil {
			return err
		}
		if end.StopReason != "completed" {
			return fmt.Errorf("child %s's resumed task ended %q, want completed", child, end.StopReason)
		}
	}
	t.add(ttl.String(), fmt.Sprintf("%d/%d", len(closed), n), ms(closed.pct(50)), ms(closed.pct(100)),
		ratio(float64(closed.pct(50)), float64(ttl)), ratio(float64(closed.pct(100)), float64(ttl)),
		ms(resume.pct(50)), ms(resume.pct(100)), routesCell(routes))
	b.log.Info("takeover", slog.String("p50", ms(closed.pct(50))), slog.String("max", ms(closed.pct(100))), slog.Duration("ttl", ttl))
	t.note("A and B run with SUBAGENTD_LEASE_TTL=%s and distinct SUBAGENTD_REPLICA_IDs on one fresh database. A drives %d continuable spawn children, each in a model step that sleeps 5 minutes (the echo model's /sleep); once B's /v1/events showed every activation's subagent/start, A gets SIGKILL. kill → subagent/end on B is the time from the signal to B's stream delivering each run's end (stopReason error, diagnostic owner lost): A's lease has between ⅔ of the TTL and the whole TTL left at the kill (it is renewed every third), and B looks for lapsed leases every third of it.", ttl, n)
	t.note("resume through B: then, one child at a time, a followup through B; route started is a cold resume on B from the child's persisted log, and the bench waits for that task's subagent/end (completed) before the next.")
	return nil
}

// logEvent is one entry of a session log (SessionEvent in api/openapi.yaml).
type logEvent struct {
	Seq  int64           `json:"seq"`
	Type string          `json:"type"`
	Time time.Time       `json:"time"`
	Data json.RawMessage `json:"data"`
}

// sessionLog reads the whole log of session id, a page at a time.
func (a *api) sessionLog(ctx context.Context, id string) ([]logEvent, error) {
	var all []logEvent
	for after := int64(-1); ; {
		var page struct {
			Events  []logEvent `json:"events"`
			HasMore bool       `json:"hasMore"`
		}
		if err := a.call(ctx, http.MethodGet, fmt.Sprintf("/v1/sessions/%s/events?after=%d&limit=1000", id, after), nil, http.StatusOK, &page); err != nil {
			return nil, err
		}
		all = append(all, page.Events...)
		if !page.HasMore || len(page.Events) == 0 {
			return all, nil
		}
		after = page.Events[len(page.Events)-1].Seq
	}
}
