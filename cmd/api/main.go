// Command api is the subagentd server: it reads its configuration from the
// environment (flags mirror every variable), wires the store, the subagent
// service and the HTTP API, serves until SIGINT or SIGTERM, and then shuts
// down gracefully: it stops accepting connections, lets live runs settle and
// emit subagent/end, ends the event streams after they delivered those
// events, and exits.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	httpapi "github.com/subagentd/subagentd/internal/http"
	"github.com/subagentd/subagentd/internal/memstore"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
	"github.com/subagentd/subagentd/web"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

// shutdownGrace bounds the graceful shutdown; connections still open after
// it are closed.
const shutdownGrace = 30 * time.Second

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "subagentd:", err)
		os.Exit(1)
	}
}

// setting is one configuration value: an environment variable and the
// flag that mirrors it.
type setting struct {
	env, flag, def, usage string
}

// settings are every variable the server reads. README's configuration
// table and compose.yaml are tested against this list.
var settings = []setting{
	{"SUBAGENTD_ADDR", "addr", "127.0.0.1:8080", "address to listen on"},
	{"DATABASE_URL", "database-url", "", "Postgres URL; unset keeps data in memory"},
	{"SUBAGENTD_CONFIG", "config", "", "YAML file of ACP providers and model routes"},
	{"OPENAI_BASE_URL", "openai-base-url", "", "base URL of an OpenAI-compatible server"},
	{"OPENAI_API_KEY", "openai-api-key", "", "API key of that server (prefer the environment: flags are visible to other users)"},
	{"SUBAGENTD_MODEL", "model", "", "model name of the OpenAI-compatible route"},
}

// config is the effective configuration: flags over environment over
// defaults, by variable name.
type config map[string]string

// get returns the effective value of the variable name; pass it where a
// getenv is expected.
func (c config) get(name string) string { return c[name] }

// loadConfig reads every setting from getenv, then lets flags override.
func loadConfig(args []string, getenv func(string) string) (config, error) {
	fs := flag.NewFlagSet("subagentd", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	values := make(map[string]*string, len(settings))
	for _, s := range settings {
		v := getenv(s.env)
		if v == "" {
			v = s.def
		}
		values[s.env] = fs.String(s.flag, v, s.usage+" ($"+s.env+")")
	}
	if err := fs.Parse(args); err != nil {
		return nil, fmt.Errorf("flags: %w", err)
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	cfg := config{}
	for name, v := range values {
		cfg[name] = *v
	}
	return cfg, nil
}

// run serves until ctx ends, then shuts down. Its log goes to stdout as
// JSON; the first record after start-up is "listening" with the bound
// address.
func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	cfg, err := loadConfig(args, getenv)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewJSONHandler(stdout, nil))
	a, err := wire(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer a.close()

	ln, err := net.Listen("tcp", cfg.get("SUBAGENTD_ADDR"))
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	srv := &http.Server{
		Handler:           a.api.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		// No WriteTimeout: event streams and waits are long; each SSE
		// write carries its own deadline.
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	log.InfoContext(ctx, "listening", slog.String("addr", ln.Addr().String()), slog.String("version", version))

	select {
	case err := <-serveErr:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownGrace)
	defer cancel()
	httpDone := make(chan error, 1)
	go func() { httpDone <- srv.Shutdown(sctx) }() // stops accepting at once
	errs := []error{
		a.svc.Shutdown(sctx), // live runs settle and emit subagent/end
		a.api.Shutdown(sctx), // streams deliver them, then end
	}
	if err := <-httpDone; err != nil {
		errs = append(errs, fmt.Errorf("http shutdown: %w", err), srv.Close())
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	log.Info("stopped")
	return nil
}

// app is the wired process.
type app struct {
	svc   *subagent.Service
	api   *httpapi.Server
	close func()
}

// wire builds the process from cfg. It is the one place that picks
// implementations; providers, model routes and the Postgres store are
// added here as they land.
func wire(ctx context.Context, cfg config, log *slog.Logger) (*app, error) {
	reg := httpapi.NewRegistry()
	st, closeStore, err := openStore(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	st = httpapi.InstrumentStore(st, reg)
	svc := subagent.NewService(subagent.Config{Store: st, Logger: log, Owner: owner()})
	api := httpapi.NewServer(httpapi.Config{
		Service: svc, Store: st, Logger: log, Registry: reg, Version: version, Dashboard: web.FS,
	})
	for _, name := range []string{"SUBAGENTD_CONFIG", "OPENAI_BASE_URL", "OPENAI_API_KEY", "SUBAGENTD_MODEL"} {
		if cfg.get(name) != "" {
			log.WarnContext(ctx, "setting is read but not wired into cmd/api yet", slog.String("setting", name))
		}
	}
	return &app{svc: svc, api: api, close: closeStore}, nil
}

// openStore returns the store DATABASE_URL names, or the in-memory store
// when it is unset, saying once that data will not survive the process.
func openStore(ctx context.Context, cfg config, log *slog.Logger) (store.Store, func(), error) {
	if cfg.get("DATABASE_URL") == "" {
		log.InfoContext(ctx, "DATABASE_URL is not set: sessions, runs and events live in memory and are lost when the process exits")
		return memstore.New(), func() {}, nil
	}
	return nil, nil, errors.New("DATABASE_URL is set, but the Postgres store is not wired into cmd/api yet")
}

// owner names this replica in run leases (DESIGN §5).
func owner() string {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown"
	}
	return host + ":" + strconv.Itoa(os.Getpid())
}
