package webhooks

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/pg/pgtest"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// BenchmarkReceiverOutage measures the backlog behaviour of one endpoint
// whose receiver answers 503 for a minute and then 200, while 20 runs a
// second keep settling (a run.started and a run.settled each), on
// Postgres: when the first failed event is retried, how long after the
// receiver is back the backlog drains (an event arrives within a second of
// its commit), its peak, and whether every event arrived once, in log
// order. "default" uses the DefaultRetry schedule (its second retry comes
// 5 min after the first, so a run takes about 5 minutes), "short" one of
// 1 s doubling to 64 s. Each run takes minutes, so it is a benchmark:
//
//	go test -run '^$' -bench 'ReceiverOutage/short' -benchtime 1x -timeout 30m ./internal/webhooks/
func BenchmarkReceiverOutage(b *testing.B) {
	for _, tc := range []struct {
		name  string
		retry []time.Duration
	}{
		{"default", DefaultRetry},
		{"short", []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 32 * time.Second, 64 * time.Second}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			for range b.N {
				outage(b, tc.retry)
			}
		})
	}
}

// outage is one run of BenchmarkReceiverOutage.
func outage(b *testing.B, retry []time.Duration) {
	const rate, down = 20, time.Minute
	st := openPG(b, pgtest.URL(b))
	pgEvents(b, st, 0) // the sessions
	var (
		mu        sync.Mutex
		t0        time.Time
		delivered []int64                       // ids answered 200, in arrival order
		attempts  = map[int64][]time.Duration{} // each id's attempts, since t0
		drained   = make(chan time.Duration, 1)
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		id, _ := strconv.ParseInt(strings.TrimPrefix(r.Header.Get("webhook-id"), "evt_"), 10, 64)
		var p struct {
			Timestamp time.Time `json:"timestamp"`
		}
		_ = json.Unmarshal(body, &p)
		mu.Lock()
		at := time.Since(t0)
		attempts[id] = append(attempts[id], at)
		up := at >= down
		if up {
			delivered = append(delivered, id)
		}
		mu.Unlock()
		if !up {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		if time.Since(p.Timestamp) < time.Second {
			select {
			case drained <- at - down:
			default:
			}
		}
	}))
	b.Cleanup(srv.Close)
	svc := New(Config{Store: st, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Owner: "bench", AllowPrivate: true, Retry: retry})
	if _, err := svc.Create(b.Context(), CreateParams{URL: srv.URL, Events: []string{RunStarted, RunSettled}}); err != nil {
		b.Fatal(err)
	}
	svc.Start(b.Context())
	b.Cleanup(svc.Stop)

	mu.Lock()
	t0 = time.Now()
	mu.Unlock()
	var appended []int64
	var peak int64
	var drainedAfter time.Duration
	tick := time.NewTicker(time.Second / rate)
	measure := time.NewTicker(time.Second)
	limit := time.After(down + 15*time.Minute)
produce:
	for i := 0; ; i++ {
		select {
		case drainedAfter = <-drained:
			break produce
		case <-limit:
			b.Fatalf("the backlog did not drain within 15 min of the receiver's return")
		case <-measure.C:
			bl, err := st.WebhookBacklog(b.Context(), backlogCap)
			if err != nil {
				b.Fatal(err)
			}
			peak = max(peak, bl.Events)
		case <-tick.C:
			for _, typ := range []string{subagent.EventStart, subagent.EventEnd} {
				e := subagent.Event{Type: typ, RunID: "run-" + strconv.Itoa(i), ID: "child", ParentID: "mid", Provider: "spawn", StopReason: "completed"}
				payload, err := subagent.EventPayload(e)
				if err != nil {
					b.Fatal(err)
				}
				le, err := st.AppendLifecycle(b.Context(), store.LifecycleEvent{Type: typ, ParentID: "mid", RunID: e.RunID, Payload: payload})
				if err != nil {
					b.Fatal(err)
				}
				appended = append(appended, le.ID)
			}
		}
	}
	tick.Stop()
	measure.Stop()
	// The rest of the backlog arrives: wait for the last event appended.
	last := appended[len(appended)-1]
	wait := time.NewTicker(10 * time.Millisecond)
	defer wait.Stop()
	end := time.After(deadline)
	for {
		mu.Lock()
		n := len(attempts[last])
		mu.Unlock()
		if n > 0 {
			break
		}
		select {
		case <-wait.C:
		case <-end:
			b.Fatalf("the last event appended did not arrive within %v of the drain", deadline)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	first := attempts[appended[0]]
	if len(first) < 2 {
		b.Fatalf("the first event had %d attempts, want a failure and a retry", len(first))
	}
	failed := 0
	for _, a := range attempts {
		for _, at := range a {
			if at < down {
				failed++
			}
		}
	}
	lost, disorder := len(appended), 0
	for i, id := range delivered {
		if i < len(appended) && appended[i] == id {
			lost--
		}
		if i > 0 && id <= delivered[i-1] {
			disorder++
		}
	}
	if lost != 0 || disorder != 0 || len(delivered) != len(appended) {
		b.Errorf("%d events appended, %d deliveries answered 200: %d not in log order at their place, %d out of order", len(appended), len(delivered), lost, disorder)
	}
	b.ReportMetric((first[1] - first[0]).Seconds(), "first-retry-s")
	b.ReportMetric(drainedAfter.Seconds(), "drained-after-return-s")
	b.ReportMetric(float64(peak), "peak-backlog-events")
	b.ReportMetric(float64(len(appended)), "events")
	b.ReportMetric(float64(failed), "failed-attempts")
	b.ReportMetric(float64(lost), "lost")
	b.ReportMetric(float64(disorder), "out-of-order")
}
