// Command bench measures subagentd against its physical floors.
//
// It builds cmd/api once, runs it as a subprocess on a loopback port (with
// the in-memory store, or Postgres on a fresh database it creates and drops),
// drives it over real HTTP and prints one markdown table per scenario. Every
// scenario measures a baseline in the same run, so that a noisy machine
// slows both sides of a ratio alike:
//
//  1. run lifecycle: concurrent one-shot echo runs, POST to subagent/end on
//     /v1/events, against bare pgx transactions doing the same writes;
//  2. SSE fan-out: delivery latency and memory per idle subscriber on
//     /v1/events, against a minimal standard-library SSE broadcaster;
//  3. session-log append: Store.AppendEvents on Postgres against raw pgx
//     inserts into a table of the same shape;
//  4. cold resume: followups to stopped continuable children whose logs
//     hold 100 to 10,000 events;
//  5. memory and CPU per run: RSS after 20,000 and 200,000 disposed runs on
//     the in-memory store, and CPU time per run, against an a2a-style task
//     server;
//  6. replicas: two replicas on one Postgres database; followups steered
//     into a child one drives, sent through the other (routed) against
//     sent to the owner itself, and the takeover time after a SIGKILL of
//     the owner, against the lease TTL;
//  7. A2A face: one echo turn of a new continuable child through A2A
//     SendMessage (JSON-RPC and HTTP+JSON) against the REST calls that do
//     the same;
//  8. reconnect storm: runs/s and RSS per phase while subscribers of
//     /v1/events reconnect with Last-Event-ID and every run's end carries a
//     160 KiB message, against the broadcaster of scenario 2 with replay.
//
// Usage: go run ./bench [-quick] [-scenario=1,2,3,4,5,6,7,8] [-cpuprofile=file] [-pg=url].
// See bench/README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// options are the command-line flags.
type options struct {
	quick      bool
	scenarios  map[int]bool
	cpuprofile string
	pgURL      string
	apiPkg     string
	// duration is how long one throughput measurement runs.
	duration time.Duration
}

func main() {
	opts, serveBaseline, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	if serveBaseline {
		// The SSE baseline runs in a process of its own so that its memory
		// can be read like the service's (see baseline.go).
		if err := serveBaselineSSE(os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "bench: baseline broadcaster:", err)
			os.Exit(1)
		}
		return
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, opts, log, os.Stdout); err != nil {
		log.Error("bench failed", slog.Any("error", err))
		os.Exit(1)
	}
}

func parseFlags(args []string) (options, bool, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	var o options
	var scen string
	var serve bool
	fs.BoolVar(&o.quick, "quick", false, "small sizes and short measurements (under 2 minutes on 2 cores)")
	fs.StringVar(&scen, "scenario", "1,2,3,4,5,6,7,8", "comma-separated scenarios to run")
	fs.StringVar(&o.cpuprofile, "cpuprofile", "", "write the bench's CPU profile to `file`, and each service subprocess's to file.<name>.service")
	fs.StringVar(&o.pgURL, "pg", "postgres://postgres@127.0.0.1:5432/postgres", "Postgres server `url`; bench databases are created on it and dropped")
	fs.StringVar(&o.apiPkg, "api", "./cmd/api", "the service `package` to build and run")
	fs.DurationVar(&o.duration, "d", 0, "length of one throughput measurement (default 10s, 2s with -quick)")
	fs.BoolVar(&serve, "serve-sse-baseline", false, "internal: run the baseline SSE broadcaster")
	if err := fs.Parse(args); err != nil {
		return o, false, err
	}
	if fs.NArg() > 0 {
		return o, false, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	o.scenarios = map[int]bool{}
	for _, s := range strings.Split(scen, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 || n > 8 {
			return o, false, fmt.Errorf("-scenario: %q is not one of 1 to 8", s)
		}
		o.scenarios[n] = true
	}
	if o.duration == 0 {
		o.duration = 10 * time.Second
		if o.quick {
			o.duration = 2 * time.Second
		}
	}
	return o, serve, nil
}

// run prints the machine header and the table of every selected scenario.
// A scenario that fails is reported in its table's place and the others
// still run; run returns the joined failures.
func run(ctx context.Context, opts options, log *slog.Logger, out io.Writer) (err error) {
	start := time.Now()
	b, err := newBench(ctx, opts, log, out)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, b.close()) }()

	b.printHeader(ctx)
	scenarios := []struct {
		n    int
		name string
		fn   func(context.Context) (*table, error)
	}{
		{1, "run lifecycle", b.lifecycle},
		{2, "SSE fan-out", b.fanout},
		{3, "session-log append", b.appendLog},
		{4, "cold resume", b.coldResume},
		{5, "memory and CPU per run", b.memory},
		{6, "replicas", b.replicas},
		{7, "A2A face", b.a2aFace},
		{8, "reconnect storm", b.storm},
	}
	var errs []error
	for _, s := range scenarios {
		if !opts.scenarios[s.n] {
			continue
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		log.Info("scenario", slog.Int("n", s.n), slog.String("name", s.name))
		t0 := time.Now()
		t, err := s.fn(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("scenario %d (%s): %w", s.n, s.name, err))
			fmt.Fprintf(out, "### %d. %s\n\nfailed: %v\n\n", s.n, s.name, err)
			continue
		}
		t.write(out)
		log.Info("scenario done", slog.Int("n", s.n), slog.Duration("took", time.Since(t0).Round(time.Millisecond)))
	}
	fmt.Fprintf(out, "_total bench time: %s; load average at the end: %s_\n", time.Since(start).Round(time.Second), loadAvg())
	return errors.Join(errs...)
}
