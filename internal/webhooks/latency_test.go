package webhooks

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/pg/pgtest"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// BenchmarkSettleToReceiver measures the latency from a run's settlement
// (the commit of its subagent/end) to the arrival of its run.settled at a
// loopback receiver, on Postgres, with one endpoint subscribed to run.started
// and run.settled and 100 runs a second settling for 5 seconds per
// iteration. It reports the p50 and p99 of the settled events.
//
//	go test -run '^$' -bench SettleToReceiver -benchtime 1x ./internal/webhooks/
func BenchmarkSettleToReceiver(b *testing.B) {
	const rate, runs = 100, 500
	st := openPG(b, pgtest.URL(b))
	lat := make(chan time.Duration, runs)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var p struct {
			Type      string    `json:"type"`
			Timestamp time.Time `json:"timestamp"`
		}
		if json.Unmarshal(body, &p) == nil && p.Type == RunSettled {
			lat <- time.Since(p.Timestamp)
		}
	}))
	b.Cleanup(srv.Close)
	svc := New(Config{Store: st, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Owner: "bench", AllowPrivate: true})
	if _, err := svc.Create(b.Context(), CreateParams{URL: srv.URL, Events: []string{RunStarted, RunSettled}}); err != nil {
		b.Fatal(err)
	}
	pgEvents(b, st, 0) // the sessions
	svc.Start(b.Context())
	b.Cleanup(svc.Stop)
	var all []time.Duration
	for range b.N {
		tick := time.NewTicker(time.Second / rate)
		for i := range runs {
			<-tick.C
			for _, typ := range []string{subagent.EventStart, subagent.EventEnd} {
				e := subagent.Event{Type: typ, RunID: "run-" + strconv.Itoa(i), ID: "child", ParentID: "mid", Provider: "spawn", StopReason: "completed"}
				payload, err := subagent.EventPayload(e)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := st.AppendLifecycle(b.Context(), store.LifecycleEvent{Type: typ, ParentID: "mid", RunID: e.RunID, Payload: payload}); err != nil {
					b.Fatal(err)
				}
			}
		}
		tick.Stop()
		for range runs {
			select {
			case d := <-lat:
				all = append(all, d)
			case <-time.After(deadline):
				b.Fatalf("%d of %d settled events arrived within %v", len(all), runs, deadline)
			}
		}
	}
	slices.Sort(all)
	b.ReportMetric(float64(all[len(all)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(all[len(all)*99/100].Microseconds())/1000, "p99-ms")
}
