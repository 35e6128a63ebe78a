package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/subagentd/subagentd/internal/telemetry"
)

// BenchmarkOneShotRun is one iteration of bench scenario 5 inside one
// process: the wired service on the in-memory store (JSON log to
// io.Discard, no rate limit), 16 clients each starting a one-shot echo run
// with POST /v1/runs?wait=true and disposing it with DELETE. allocs/op,
// cpu-ms/op (the process's user+system time) and the CPU profile
// (-cpuprofile) show the service's hot path, clients included; ns/op is
// wall time, which a busy machine stretches. tracing=off is the default
// process (no OTEL_* variables); tracing=on exports every span over
// OTLP/HTTP to a loopback receiver that discards them.
func BenchmarkOneShotRun(b *testing.B) {
	b.Run("tracing=off", func(b *testing.B) { benchOneShotRun(b, false) })
	b.Run("tracing=on", func(b *testing.B) {
		collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
		}))
		defer collector.Close()
		tracing, err := telemetry.SetupTracing(b.Context(), env(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": collector.URL}))
		if err != nil {
			b.Fatal(err)
		}
		defer func() {
			otel.SetTracerProvider(noop.NewTracerProvider())
			if err := tracing.Shutdown(context.WithoutCancel(b.Context())); err != nil {
				b.Error(err)
			}
		}()
		benchOneShotRun(b, true)
	})
}

func benchOneShotRun(b *testing.B, tracing bool) {
	ts := benchServer(b, tracing)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	call := func(method, path string, body []byte, want int, out any) error {
		req, err := http.NewRequest(method, ts.URL+path, bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		data, err := io.ReadAll(resp.Body)
		if err != nil {
			return err
		}
		if resp.StatusCode != want {
			b.Errorf("%s %s: %d %s", method, path, resp.StatusCode, data)
			return nil
		}
		if out != nil {
			return json.Unmarshal(data, out)
		}
		return nil
	}
	var root struct{ ID string }
	if err := call(http.MethodPost, "/v1/sessions", []byte(`{"label":"bench"}`), http.StatusCreated, &root); err != nil {
		b.Fatal(err)
	}
	body := []byte(`{"provider":"spawn","parentSessionId":"` + root.ID + `","prompt":[{"type":"text","text":"hello from the bench"}]}`)
	b.SetParallelism(8) // 16 clients on 2 CPUs, as in the bench
	b.ReportAllocs()
	cpu0 := cpuTime(b)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			var run struct {
				RunID  string
				State  string
				Result *struct{ StopReason string }
			}
			if err := call(http.MethodPost, "/v1/runs?wait=true", body, http.StatusCreated, &run); err != nil {
				b.Error(err)
				return
			}
			if run.State != "settled" || run.Result == nil || run.Result.StopReason != "completed" {
				b.Errorf("run %+v: want a completed run", run)
				return
			}
			if err := call(http.MethodDelete, "/v1/runs/"+run.RunID, nil, http.StatusNoContent, nil); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64((cpuTime(b)-cpu0).Microseconds())/1000/float64(b.N), "cpu-ms/op")
}

// cpuTime is the process's user+system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchServer serves the wired in-memory service, without rate limits, on
// a loopback test server until b ends.
func benchServer(b *testing.B, tracing bool) *httptest.Server {
	cfg, err := loadConfig(nil, env(map[string]string{"SUBAGENTD_RATE_LIMIT": "0"}))
	if err != nil {
		b.Fatal(err)
	}
	a, err := wire(b.Context(), cfg, newLogger(io.Discard), tracing)
	if err != nil {
		b.Fatal(err)
	}
	ts := httptest.NewServer(a.api.Handler())
	b.Cleanup(func() {
		if err := a.shutdown(context.WithoutCancel(b.Context())); err != nil {
			b.Error(err)
		}
		ts.Close()
		a.stop()
	})
	return ts
}
