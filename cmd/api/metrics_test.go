package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	prommodel "github.com/prometheus/common/model"

	"github.com/subagentd/subagentd/internal/pg/pgtest"
	"github.com/subagentd/subagentd/internal/subagent"
)

// inProcess runs the server in this process with vars on a free port and
// returns it; it stops when the test ends.
func inProcess(t *testing.T, vars map[string]string) *server {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	logs := newLogLines(t)
	done := make(chan error, 1)
	vars["SUBAGENTD_ADDR"] = "127.0.0.1:0"
	go func() {
		done <- run(ctx, nil, env(vars), logs.w)
		logs.w.Close()
	}()
	addr := logs.until(t, "listening")["addr"].(string)
	go func() {
		for range logs.lines { // the log must not block the server
		}
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})
	return &server{base: "http://" + addr}
}

// scrape returns the server's /metrics, parsed, and the text.
func (s *server) scrape(t *testing.T) (map[string]*dto.MetricFamily, string) {
	t.Helper()
	resp, err := http.Get(s.base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d %v", resp.StatusCode, err)
	}
	p := expfmt.NewTextParser(prommodel.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return fams, string(body)
}

// sample returns the value of the series of family name whose labels are
// exactly labels, 0 when there is none.
func sample(fams map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	f := fams[name]
	if f == nil {
		return 0
	}
	for _, m := range f.GetMetric() {
		if len(m.GetLabel()) != len(labels) {
			continue
		}
		match := true
		for _, l := range m.GetLabel() {
			if labels[l.GetName()] != l.GetValue() {
				match = false
			}
		}
		if !match {
			continue
		}
		switch {
		case m.GetCounter() != nil:
			return m.GetCounter().GetValue()
		case m.GetGauge() != nil:
			return m.GetGauge().GetValue()
		}
	}
	return 0
}

// TestMetrics_Scenario counts a known workload on a real server, on each
// store: three one-shot spawn runs, a continuable child whose first
// activation settles, and a followup that starts its second, with a webhook
// endpoint subscribed to run.started and run.settled. Every counter
// of the domain matches the workload, the registry passes the Prometheus
// lint, and no label value is an id.
func TestMetrics_Scenario(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		vars func(t *testing.T) map[string]string
	}{
		{"memstore", func(*testing.T) map[string]string { return map[string]string{} }},
		{"postgres", func(t *testing.T) map[string]string { return map[string]string{"DATABASE_URL": pgtest.URL(t)} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			vars := tc.vars(t)
			vars["SUBAGENTD_WEBHOOK_ALLOW_PRIVATE"] = "true"
			s := inProcess(t, vars)
			var hooked atomic.Int64
			receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				hooked.Add(1)
				w.WriteHeader(http.StatusNoContent)
			}))
			t.Cleanup(receiver.Close)
			s.call(t, http.MethodPost, "/v1/webhooks", fmt.Sprintf(`{"url":%q,"events":["run.started","run.settled"]}`, receiver.URL),
				http.StatusCreated, nil)
			var root struct{ ID string }
			s.call(t, http.MethodPost, "/v1/sessions", `{"label":"metrics"}`, http.StatusCreated, &root)
			ids := []string{root.ID}
			for i := range 3 {
				var r struct {
					RunID, ChildSessionID string
					Result                struct{ StopReason string }
				}
				s.call(t, http.MethodPost, "/v1/runs?wait=true", fmt.Sprintf(`{"provider":"spawn","parentSessionId":%q,"prompt":%s}`,
					root.ID, prompt(fmt.Sprintf("run %d", i))), http.StatusCreated, &r)
				if r.Result.StopReason != "completed" {
					t.Fatalf("run %d: %+v, want completed", i, r)
				}
				ids = append(ids, r.RunID, r.ChildSessionID)
			}
			childID, taskID := s.startChild(t, "spawn", root.ID, "worker", "first")
			ids = append(ids, childID, taskID)
			// A followup sent while the first activation settles waits for
			// it and starts the second (it can only steer a live turn).
			s.waitStream(t, "/v1/events?after=0&types=subagent/end", func(_, data string) bool {
				return strings.Contains(data, `"id":"`+childID+`"`)
			})
			fu := s.followup(t, root.ID, childID, "second")
			if fu.Route != subagent.RouteStarted {
				t.Fatalf("followup after the activation ended: %+v, want route started", fu)
			}
			ids = append(ids, fu.TaskID, fu.MessageID)

			spawn := map[string]string{"provider": "spawn", "kind": "one-shot"}
			act := map[string]string{"provider": "spawn", "kind": "activation"}
			with := func(m map[string]string, k, v string) map[string]string {
				out := map[string]string{k: v}
				for a, b := range m {
					out[a] = b
				}
				return out
			}
			want := []struct {
				name   string
				labels map[string]string
				value  float64
			}{
				{"subagentd_runs_started_total", spawn, 3},
				{"subagentd_runs_settled_total", with(spawn, "stop_reason", "completed"), 3},
				{"subagentd_runs_started_total", act, 2},
				{"subagentd_runs_settled_total", with(act, "stop_reason", "completed"), 2},
				{"subagentd_runs_live", spawn, 0},
				{"subagentd_runs_live", act, 0},
				{"subagentd_followups_total", map[string]string{"route": "started"}, 1},
				// The three runs' run.started and run.settled, delivered.
				{"subagentd_webhook_deliveries_total", map[string]string{"outcome": "success"}, 6},
				{"subagentd_webhook_backlog_events", map[string]string{}, 0},
				{"subagentd_webhook_backlog_oldest_seconds", map[string]string{}, 0},
			}
			// The second activation's end is counted by the listener right
			// after the store holds it, a delivery once its receiver
			// answered, and the backlog is read on the deliverer's next
			// poll: wait for the counts, bounded.
			var fams map[string]*dto.MetricFamily
			var body string
			deadline := time.Now().Add(30 * time.Second)
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			for {
				fams, body = s.scrape(t)
				if (sample(fams, "subagentd_runs_settled_total", with(act, "stop_reason", "completed")) >= 2 &&
					sample(fams, "subagentd_webhook_deliveries_total", map[string]string{"outcome": "success"}) >= 6 &&
					sample(fams, "subagentd_webhook_backlog_events", map[string]string{}) == 0) || time.Now().After(deadline) {
					break
				}
				<-tick.C
			}
			for _, w := range want {
				if got := sample(fams, w.name, w.labels); got != w.value {
					t.Errorf("%s%v = %v, want %v", w.name, w.labels, got, w.value)
				}
			}
			if got := hooked.Load(); got != 6 {
				t.Errorf("the receiver got %d deliveries, want 6", got)
			}
			// Echo reports usage: five runs' worth of input and output.
			for _, typ := range []string{"input", "output"} {
				if got := sample(fams, "subagentd_model_tokens_total", map[string]string{"provider": "echo", "type": typ}); got <= 0 {
					t.Errorf("subagentd_model_tokens_total{provider=echo,type=%s} = %v, want > 0", typ, got)
				}
			}

			problems, err := promlint.New(strings.NewReader(body)).Lint()
			if err != nil {
				t.Fatalf("lint: %v", err)
			}
			for _, p := range problems {
				t.Errorf("lint: %s: %s", p.Metric, p.Text)
			}
			uuid := regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-`)
			for name, f := range fams {
				if !strings.HasPrefix(name, "subagentd_") {
					continue
				}
				for _, m := range f.GetMetric() {
					for _, l := range m.GetLabel() {
						if uuid.MatchString(l.GetValue()) {
							t.Errorf("%s has label %s=%q, an id", name, l.GetName(), l.GetValue())
						}
					}
				}
			}
			for _, id := range ids {
				if id == "" {
					t.Fatalf("an id of the workload is empty: %q", ids)
				}
				if strings.Contains(body, id) {
					t.Errorf("/metrics names id %s", id)
				}
			}
		})
	}
}
