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
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/subagentd/subagentd/internal/agent"
	"github.com/subagentd/subagentd/internal/children"
	cfgfile "github.com/subagentd/subagentd/internal/config"
	"github.com/subagentd/subagentd/internal/delegate"
	a2aface "github.com/subagentd/subagentd/internal/faces/a2a"
	mcpface "github.com/subagentd/subagentd/internal/faces/mcp"
	"github.com/subagentd/subagentd/internal/governance"
	httpapi "github.com/subagentd/subagentd/internal/http"
	"github.com/subagentd/subagentd/internal/memstore"
	"github.com/subagentd/subagentd/internal/pg"
	a2aprov "github.com/subagentd/subagentd/internal/providers/a2a"
	"github.com/subagentd/subagentd/internal/providers/acp"
	"github.com/subagentd/subagentd/internal/providers/fork"
	"github.com/subagentd/subagentd/internal/providers/inprocess"
	"github.com/subagentd/subagentd/internal/providers/spawn"
	"github.com/subagentd/subagentd/internal/roots"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
	"github.com/subagentd/subagentd/internal/telemetry"
	"github.com/subagentd/subagentd/internal/webhooks"
	"github.com/subagentd/subagentd/web"
)

// version is stamped at build time with -ldflags "-X main.version=…";
// read it through buildVersion.
var version string

// buildVersion is the version this binary reports (-version, the logs,
// /healthz); see versionOr.
func buildVersion() string { return versionOr(version) }

// versionOr returns stamp when it is set, else the module version of a
// `go install …@v1.2.3`, else the VCS revision the go command recorded
// (with "-dirty" for uncommitted changes), else "dev".
func versionOr(stamp string) string {
	if stamp != "" {
		return stamp
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "dev"
	}
	if v := info.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev, dirty string
	for _, s := range info.Settings {
		switch {
		case s.Key == "vcs.revision":
			rev = s.Value
		case s.Key == "vcs.modified" && s.Value == "true":
			dirty = "-dirty"
		}
	}
	if rev == "" {
		return "dev"
	}
	return rev + dirty
}

// shutdownGrace bounds the graceful shutdown; connections still open after
// it are closed.
const shutdownGrace = 30 * time.Second

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(exitCode(run(ctx, os.Args[1:], os.Getenv, os.Stdout), os.Stdout, os.Stderr))
}

// errVersion is what run returns for -version.
var errVersion = errors.New("version requested")

// exitCode reports how run ended and returns the process's exit status:
// 0 after -h (the usage on stdout) and -version (the version on stdout),
// 2 for a command-line mistake (the mistake and where the usage is, on
// stderr), 1 for any other error, which is logged as one record in the
// log's format.
func exitCode(err error, stdout, stderr io.Writer) int {
	var bad usageError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		usage(stdout)
		return 0
	case errors.Is(err, errVersion):
		fmt.Fprintln(stdout, "subagentd", buildVersion())
		return 0
	case errors.As(err, &bad):
		fmt.Fprintln(stderr, "subagentd:", bad.err)
		fmt.Fprintln(stderr, "run 'subagentd -h' for every flag")
		return 2
	default:
		newLogger(stdout).Error("subagentd stopped", slog.Any("error", err))
		return 1
	}
}

// newLogger is the process's log: JSON records, one a line, with the
// trace_id and span_id of the span a record's context carries.
func newLogger(w io.Writer) *slog.Logger {
	return slog.New(telemetry.LogHandler(slog.NewJSONHandler(w, nil)))
}

// usageError is a mistake on the command line.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }

// usage prints every flag with its variable and its default.
func usage(w io.Writer) {
	fmt.Fprint(w, `Usage: subagentd [flags]

subagentd serves the subagent HTTP API, its dashboard and its docs. Every
flag has an environment variable of the same meaning; a flag wins over its
variable.

`)
	for _, s := range settings {
		def := s.def
		if def == "" {
			def = "unset"
		}
		fmt.Fprintf(w, "  -%s value\n\t$%s (default: %s)\n\t%s\n", s.flag, s.env, def, s.usage)
	}
	fmt.Fprint(w, "  -version\n\tprint the version and exit\n  -h\n\tprint this help and exit\n")
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
	{"SUBAGENTD_CPUPROFILE", "cpuprofile", "", "write a CPU profile of the whole run to this file (for bench/)"},
	{"SUBAGENTD_MEM_RETAIN_RUNS", "mem-retain-runs", "10000", "in-memory store: disposed one-shot runs kept, with their child sessions and logs (and twice as many lifecycle events)"},
	{"SUBAGENTD_MEM_RETAIN_AGE", "mem-retain-age", "1h", "in-memory store: how long a disposed one-shot run is kept"},
	{"SUBAGENTD_TOKENS", "tokens", "", "comma-separated tenant:token pairs; unset serves only loopback, as one tenant (prefer the environment: flags are visible to other users)"},
	{"SUBAGENTD_CORS_ORIGINS", "cors-origins", "", "comma-separated origins (scheme://host:port) whose pages may call the API; unset turns CORS off"},
	{"SUBAGENTD_MAX_LIVE_RUNS", "max-live-runs", "1000", "live runs and activations per tenant; beyond it starts, and followups that would start an activation, are 429 (0: no cap)"},
	{"SUBAGENTD_MAX_STREAMS", "max-streams", "10000", "open event streams per tenant; beyond it streams are 429 (0: no cap)"},
	{"SUBAGENTD_RATE_LIMIT", "rate-limit", "2000", "requests per second per tenant, bursts of twice that; beyond it 429 (0: no limit)"},
	{"SUBAGENTD_REPLICA_ID", "replica-id", "", "stable, unique name of this replica (unset: host:pid); lets a restart close the runs its previous process left open at once (else they close when their lease lapses)"},
	{"SUBAGENTD_LEASE_TTL", "lease-ttl", "15s", "lease of a replica on the runs it drives (a Go duration, at least 1s), renewed every third of it; another replica closes the runs of one that stopped renewing"},
	{"SUBAGENTD_WEBHOOK_RETRY", "webhook-retry", "5s,5m,30m,2h,5h,10h,10h", "waits between the attempts of a webhook delivery (comma-separated Go durations); after the last the event is failed"},
	{"SUBAGENTD_WEBHOOK_ALLOW_PRIVATE", "webhook-allow-private", "false", "let webhook deliveries reach loopback, private and link-local addresses (true or false)"},
	{"SUBAGENTD_A2A_ALLOW_PRIVATE", "a2a-allow-private", "false", "let A2A providers reach loopback, private and link-local addresses (true or false)"},
}

// config is the effective configuration: flags over environment over
// defaults, by variable name.
type config struct {
	values map[string]string
	// flags names, by variable name, the flags given on the command line.
	flags map[string]string
}

// get returns the effective value of the variable name; pass it where a
// getenv is expected.
func (c config) get(name string) string { return c.values[name] }

// bad reports a wrong value of the variable name under the name the user
// gave it: its flag when it came from the command line, else the variable.
// The message follows: "-lease-ttl: want …".
func (c config) bad(name, format string, args ...any) error {
	given := name
	if f, ok := c.flags[name]; ok {
		given = "-" + f
	}
	return fmt.Errorf("%s: "+format, append([]any{given}, args...)...)
}

// loadConfig reads every setting from getenv, then lets flags override.
// It returns flag.ErrHelp for -h, errVersion for -version and a usageError
// for a bad flag or a stray argument.
func loadConfig(args []string, getenv func(string) string) (config, error) {
	fs := flag.NewFlagSet("subagentd", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	values := make(map[string]*string, len(settings))
	envOf := make(map[string]string, len(settings))
	for _, s := range settings {
		v := getenv(s.env)
		if v == "" {
			v = s.def
		}
		values[s.env] = fs.String(s.flag, v, s.usage+" ($"+s.env+")")
		envOf[s.flag] = s.env
	}
	showVersion := fs.Bool("version", false, "print the version and exit")
	fs.Usage = func() {} // exitCode prints the usage
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		return config{}, err
	} else if err != nil {
		return config{}, usageError{err}
	}
	if fs.NArg() > 0 {
		return config{}, usageError{fmt.Errorf("unexpected arguments %q", fs.Args())}
	}
	if *showVersion {
		return config{}, errVersion
	}
	cfg := config{values: map[string]string{}, flags: map[string]string{}}
	for name, v := range values {
		cfg.values[name] = *v
	}
	fs.Visit(func(f *flag.Flag) {
		if env, ok := envOf[f.Name]; ok {
			cfg.flags[env] = f.Name
		}
	})
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
	log := newLogger(stdout)
	if path := cfg.get("SUBAGENTD_CPUPROFILE"); path != "" {
		stop, err := startProfile(path)
		if err != nil {
			return err
		}
		defer stop()
	}
	// Traces, when an OTLP endpoint is configured (OTEL_* variables), are
	// flushed last: after the runs ended their spans.
	tracing, err := telemetry.SetupTracing(ctx, getenv)
	if err != nil {
		return err
	}
	defer func() {
		if err := tracing.Shutdown(context.WithoutCancel(ctx)); err != nil {
			log.Error("traces not flushed", slog.Any("error", err))
		}
	}()
	a, err := wire(ctx, cfg, log, tracing.Enabled())
	if err != nil {
		return err
	}
	defer a.stop()

	addr := cfg.get("SUBAGENTD_ADDR")
	if !a.authenticated && !httpapi.IsLoopbackAddr(addr) {
		return fmt.Errorf("refusing to listen on %s without tokens: anyone who reaches it could run agents; set SUBAGENTD_TOKENS=tenant:token (or tokens: in the config file), or listen on 127.0.0.1", addr)
	}
	ln, err := net.Listen("tcp", addr)
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
	log.InfoContext(ctx, "listening", slog.String("addr", ln.Addr().String()), slog.String("version", buildVersion()))

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
	errs := []error{a.shutdown(sctx)}
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
	mgr   *children.Manager
	roots *roots.Manager
	api   *httpapi.Server
	// authenticated: tokens are configured, so the server may listen
	// beyond loopback.
	authenticated bool
	// stop ends the background loops (leases, idle roots) and releases the
	// store; call it after the shutdown of everything above.
	stop func()
}

// shutdown stops the process's work in dependency order: root agents first
// (so no root turn reacts to children being stopped), then continuable
// activations and one-shot runs, which settle and emit subagent/end, then
// the event streams, which deliver those events before they end. The
// webhook deliverer stops with the background loops (app.stop): what it
// has not delivered stays in the log for the next start or another
// replica.
func (a *app) shutdown(ctx context.Context) error {
	return errors.Join(
		a.roots.Close(ctx),
		a.mgr.Shutdown(ctx),
		a.svc.Shutdown(ctx),
		a.api.Shutdown(ctx),
	)
}

// storeCallTimeout bounds every store call: a database that does not
// answer makes requests 503 UNAVAILABLE instead of hanging them.
const storeCallTimeout = 10 * time.Second

// rootIdle is how long a root agent stays live after its last turn; it is
// re-created from its log on the next message.
const rootIdle = 10 * time.Minute

// wire builds the process from cfg, its HTTP requests traced when tracing
// is set. It is the one place that picks implementations.
func wire(ctx context.Context, cfg config, log *slog.Logger, tracing bool) (_ *app, err error) {
	file, err := loadFile(cfg.get("SUBAGENTD_CONFIG"))
	if err != nil {
		return nil, err
	}
	routes, err := routesFromConfig(file, cfg.get, log)
	if err != nil {
		return nil, err
	}
	reg := httpapi.NewRegistry()
	metrics := telemetry.NewMetrics(reg)
	st, closeStore, err := openStore(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	bg, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	var loops sync.WaitGroup
	stop := func() { stopBG(); loops.Wait(); closeStore() }
	defer func() {
		if err != nil {
			stop()
		}
	}()

	sec, err := security(cfg, file)
	if err != nil {
		return nil, err
	}
	lease, err := time.ParseDuration(cfg.get("SUBAGENTD_LEASE_TTL"))
	if err != nil || lease < time.Second {
		return nil, cfg.bad("SUBAGENTD_LEASE_TTL", "want a Go duration of at least 1s, got %q", cfg.get("SUBAGENTD_LEASE_TTL"))
	}
	replica := cfg.get("SUBAGENTD_REPLICA_ID")
	limits := governance.NewLimits(st, log)
	svc := subagent.NewService(subagent.Config{Store: st, Logger: log, Owner: owner(replica), LeaseDuration: lease,
		MaxLiveRuns: sec.maxLiveRuns, Metrics: metrics, Governor: limits})
	if replica != "" {
		// A stable replica id lets this start close, at once, the runs the
		// previous process of this replica left open (SIGKILL, crash).
		if err := svc.RecoverOwned(ctx); err != nil {
			return nil, fmt.Errorf("close runs of the previous %q: %w", replica, err)
		}
	}
	loops.Go(func() { svc.KeepLeases(bg) })
	approvals := governance.NewApprovals(governance.ApprovalsConfig{Store: st, Owner: owner(replica), Logger: log})
	if replica != "" {
		// Likewise the approvals its agents waited on: no agent of this
		// process waits yet.
		if _, err := approvals.Recover(ctx, true); err != nil {
			return nil, fmt.Errorf("cancel the approvals of the previous %q: %w", replica, err)
		}
	}
	loops.Go(func() { approvals.SweepOrphans(bg, lease) })

	tools := agent.NewRegistry()
	deps := inprocess.Deps{Store: st, Routes: routes, Tools: tools, Logger: log, Metrics: metrics, Gate: limits}
	rootAgents := roots.NewManager(roots.ManagerConfig{Store: st, Routes: routes, Tools: tools, Logger: log, Control: svc.Control(),
		Metrics: metrics, Budget: limits})
	mgr := children.NewManager(svc, children.ManagerConfig{
		Materializer: inprocess.NewMaterializer(deps), Notices: rootAgents, Logger: log,
	})
	limits.DeliverTo(rootAgents, mgr)
	dtools := delegate.NewTools(delegate.ToolsConfig{Seam: svc, Continuations: mgr, Store: st, Registry: tools, Logger: log, Approvals: approvals})
	if err := dtools.Start(ctx); err != nil {
		return nil, fmt.Errorf("mount delegation tools: %w", err)
	}
	stopAll := stop
	stop = func() { dtools.Stop(); stopAll() }

	providers := []subagent.Provider{spawn.New(deps), fork.New(deps)}
	var secretEnv []string // model API keys live in these, whatever their names
	for _, mc := range file.Models {
		secretEnv = append(secretEnv, mc.APIKeyEnv)
	}
	// Agents a crashed process of this machine left behind die before any
	// new one starts.
	if n, err := acp.ReapOrphans(log); err != nil || n > 0 {
		log.WarnContext(ctx, "reaped the agents of a previous process", slog.Int("process_groups", n), slog.Any("error", err))
	}
	allowA2APrivate, err := strconv.ParseBool(cfg.get("SUBAGENTD_A2A_ALLOW_PRIVATE"))
	if err != nil {
		return nil, fmt.Errorf("SUBAGENTD_A2A_ALLOW_PRIVATE: want true or false, got %q", cfg.get("SUBAGENTD_A2A_ALLOW_PRIVATE"))
	}
	// probe learns in the background what a configured agent is (an ACP
	// agent's capabilities, an A2A agent's card): /readyz waits for it and
	// lists an agent that cannot be reached, with the reason.
	probe := func(provider, failure string, learn func(context.Context) error) {
		loops.Go(func() {
			pctx, cancel := context.WithTimeout(bg, time.Minute)
			defer cancel()
			if err := learn(pctx); err != nil {
				log.WarnContext(pctx, failure, slog.String("provider", provider), slog.Any("error", err))
			}
		})
	}
	for _, pc := range file.Providers {
		if pc.Type == cfgfile.TypeA2A {
			p, err := a2aprov.New(pc, a2aprov.Deps{Store: st, Logger: log, AllowPrivate: allowA2APrivate, Deadlines: limits, Approver: approvals})
			if err != nil {
				return nil, err
			}
			providers = append(providers, p)
			probe(pc.Name, "A2A agent's card could not be fetched", p.WaitProbe)
			continue
		}
		p, err := acp.New(pc, acp.Deps{Store: st, Logger: log, WorkspaceRoots: file.WorkspaceRoots, SecretEnv: secretEnv, Approver: approvals, Deadlines: limits})
		if err != nil {
			return nil, err
		}
		providers = append(providers, p)
		// Whether the agent can resume sessions: GET /v1/providers waits
		// while it is learnt; a continuable start probes again if it failed.
		probe(pc.Name, "ACP agent did not start for its capability probe", p.Probe)
		stopACP := stop
		stop = func() {
			if err := p.Close(); err != nil {
				log.Error("idle ACP agents not reaped", slog.String("provider", pc.Name), slog.Any("error", err))
			}
			stopACP()
		}
	}
	for _, p := range providers {
		if err := svc.Register(ctx, p); err != nil {
			return nil, fmt.Errorf("register provider %s: %w", p.Name(), err)
		}
	}
	// A child or root that cannot be resumed (say, its model route was
	// removed from the config) must not stop the service from starting:
	// Recover logs each failure and still recovers the other sessions.
	if err := errors.Join(mgr.Recover(ctx), rootAgents.Recover(ctx)); err != nil {
		log.ErrorContext(ctx, "some messages accepted before the restart could not be delivered", slog.Any("error", err))
	}
	loops.Go(func() { closeIdleRoots(bg, rootAgents, log) })
	if err := svc.RetireUnregistered(ctx); err != nil {
		return nil, fmt.Errorf("record the providers removed since the last start: %w", err)
	}

	hooks, err := newWebhooks(cfg, file, webhooks.Config{Store: st, Logger: log, Owner: owner(replica), Metrics: metrics, PushBody: a2aface.PushBody})
	if err != nil {
		return nil, err
	}
	hooks.Start(bg)
	stopRest := stop
	stop = func() { hooks.Stop(); stopRest() }
	api := httpapi.NewServer(httpapi.Config{
		Service: svc, Store: st, Logger: log, Registry: reg, Metrics: metrics, Tracing: tracing, Version: buildVersion(), Dashboard: web.FS,
		Continuations: mgr, Roots: rootAgents, Routes: routes, Webhooks: hooks, Usage: governance.NewUsage(st), Approvals: approvals, Limits: limits,
		Trees:    governance.NewTrees(governance.TreesConfig{Store: st, Runs: mgr, Roots: rootAgents, Logger: log}),
		Sessions: roots.New(roots.Config{Store: st, Routes: routes, WorkspaceRoots: file.WorkspaceRoots, Agents: rootAgents, Policies: approvals, Limits: limits}),
		Tokens:   sec.tokens, CORSOrigins: sec.corsOrigins, RateLimit: sec.rateLimit, MaxStreams: sec.maxStreams,
		MCP: func(api *httpapi.Server) http.Handler {
			return mcpface.NewHandler(mcpface.Config{API: api, Logger: log, Version: buildVersion()})
		},
		A2A: func(api *httpapi.Server) httpapi.A2A {
			return a2aface.New(a2aface.Config{
				API: api, Logger: log, Version: buildVersion(), Authenticated: len(sec.tokens) > 0,
				Heartbeat: httpapi.DefaultHeartbeat, MaxWait: a2aWait, Push: hooks,
			})
		},
	})
	loops.Go(func() { api.SweepExpired(bg, idempotencySweep) })
	return &app{svc: svc, mgr: mgr, roots: rootAgents, api: api, authenticated: len(sec.tokens) > 0, stop: stop}, nil
}

// newWebhooks returns the webhook service of wc with SUBAGENTD_WEBHOOK_RETRY
// and SUBAGENTD_WEBHOOK_ALLOW_PRIVATE (or the file's webhooks: allowPrivate).
func newWebhooks(cfg config, file *cfgfile.File, wc webhooks.Config) (*webhooks.Service, error) {
	retry, err := webhooks.ParseRetry(cfg.get("SUBAGENTD_WEBHOOK_RETRY"))
	if err != nil {
		return nil, fmt.Errorf("SUBAGENTD_WEBHOOK_RETRY: %w", err)
	}
	allow, err := strconv.ParseBool(cfg.get("SUBAGENTD_WEBHOOK_ALLOW_PRIVATE"))
	if err != nil {
		return nil, fmt.Errorf("SUBAGENTD_WEBHOOK_ALLOW_PRIVATE: want true or false, got %q", cfg.get("SUBAGENTD_WEBHOOK_ALLOW_PRIVATE"))
	}
	wc.Retry, wc.AllowPrivate = retry, allow || file.WebhooksAllowPrivate
	return webhooks.New(wc), nil
}

// a2aWait bounds how long the A2A face's blocking message/send and
// tasks/cancel wait for the task to settle before they answer it working.
const a2aWait = 60 * time.Second

// idempotencySweep is how often expired idempotency keys and sign-ins are
// deleted.
const idempotencySweep = 10 * time.Minute

// securityConfig is the parsed security settings (docs/architecture.md §10).
type securityConfig struct {
	tokens      []store.Token
	corsOrigins []string
	maxLiveRuns int
	maxStreams  int
	rateLimit   float64
}

// security reads the tokens (SUBAGENTD_TOKENS and the file's tokens:),
// the CORS origins and the per-tenant limits. A 0 limit turns it off.
func security(cfg config, file *cfgfile.File) (securityConfig, error) {
	tokens, err := cfgfile.ParseTokens(cfg.get("SUBAGENTD_TOKENS"))
	if err != nil {
		return securityConfig{}, cfg.bad("SUBAGENTD_TOKENS", "%w", err)
	}
	sc := securityConfig{tokens: append(file.Tokens, tokens...)}
	for _, o := range strings.Split(cfg.get("SUBAGENTD_CORS_ORIGINS"), ",") {
		if o = strings.TrimSpace(o); o == "" {
			continue
		}
		u, err := url.Parse(o)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") {
			return securityConfig{}, cfg.bad("SUBAGENTD_CORS_ORIGINS", "%q is not an origin such as https://app.example:8443", o)
		}
		sc.corsOrigins = append(sc.corsOrigins, u.Scheme+"://"+u.Host)
	}
	if sc.maxLiveRuns, err = strconv.Atoi(cfg.get("SUBAGENTD_MAX_LIVE_RUNS")); err != nil || sc.maxLiveRuns < 0 {
		return securityConfig{}, cfg.bad("SUBAGENTD_MAX_LIVE_RUNS", "%q is not a non-negative integer", cfg.get("SUBAGENTD_MAX_LIVE_RUNS"))
	}
	if sc.maxStreams, err = strconv.Atoi(cfg.get("SUBAGENTD_MAX_STREAMS")); err != nil || sc.maxStreams < 0 {
		return securityConfig{}, cfg.bad("SUBAGENTD_MAX_STREAMS", "%q is not a non-negative integer", cfg.get("SUBAGENTD_MAX_STREAMS"))
	}
	if sc.rateLimit, err = strconv.ParseFloat(cfg.get("SUBAGENTD_RATE_LIMIT"), 64); err != nil || !(sc.rateLimit >= 0 && sc.rateLimit < math.Inf(1)) {
		return securityConfig{}, cfg.bad("SUBAGENTD_RATE_LIMIT", "%q is not a non-negative number", cfg.get("SUBAGENTD_RATE_LIMIT"))
	}
	// 0 turns a limit off, which the server spells negative (its 0 is the
	// default).
	if sc.maxStreams == 0 {
		sc.maxStreams = -1
	}
	if sc.rateLimit == 0 {
		sc.rateLimit = -1
	}
	return sc, nil
}

// closeIdleRoots closes root agents idle for rootIdle, every minute, until
// ctx ends.
func closeIdleRoots(ctx context.Context, agents *roots.Manager, log *slog.Logger) {
	tick := time.NewTicker(time.Minute)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			if _, err := agents.CloseIdle(ctx, now.Add(-rootIdle)); err != nil && ctx.Err() == nil {
				log.ErrorContext(ctx, "close idle root agents", slog.Any("error", err))
			}
		}
	}
}

// loadFile reads the SUBAGENTD_CONFIG file, or the defaults when path is
// empty (no ACP providers, the echo route, the start directory as the only
// workspace root).
func loadFile(path string) (*cfgfile.File, error) {
	if path == "" {
		return cfgfile.Parse(nil)
	}
	return cfgfile.Load(path)
}

// openStore returns the store DATABASE_URL names — migrated first, under
// golang-migrate's advisory lock, and with every call bounded by
// storeCallTimeout — or the in-memory store when it is unset, saying once
// that data will not survive the process. The in-memory store is not
// bounded: it never waits on anything but its own lock, and the timer of
// a bound on each of a run's dozen store calls cost 3% of its CPU.
func openStore(ctx context.Context, cfg config, log *slog.Logger) (store.Store, func(), error) {
	url := cfg.get("DATABASE_URL")
	if url == "" {
		runs, err := strconv.Atoi(cfg.get("SUBAGENTD_MEM_RETAIN_RUNS"))
		if err != nil || runs < 1 {
			return nil, nil, cfg.bad("SUBAGENTD_MEM_RETAIN_RUNS", "want a positive count, got %q", cfg.get("SUBAGENTD_MEM_RETAIN_RUNS"))
		}
		age, err := time.ParseDuration(cfg.get("SUBAGENTD_MEM_RETAIN_AGE"))
		if err != nil || age <= 0 {
			return nil, nil, cfg.bad("SUBAGENTD_MEM_RETAIN_AGE", "want a positive Go duration, got %q", cfg.get("SUBAGENTD_MEM_RETAIN_AGE"))
		}
		log.InfoContext(ctx, "DATABASE_URL is not set: sessions, runs and events live in memory and are lost when the process exits",
			slog.Int("retain_disposed_runs", runs), slog.String("retain_age", age.String()))
		return memstore.NewWithRetention(memstore.Retention{Runs: runs, Age: age}), func() {}, nil
	}
	if err := pg.Migrate(ctx, url, log); err != nil {
		return nil, nil, err
	}
	pool, err := pgxpool.New(ctx, pg.ConnString(url))
	if err != nil {
		return nil, nil, fmt.Errorf("open Postgres pool: %w", err)
	}
	st, err := pg.New(ctx, pool, log)
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	log.InfoContext(ctx, "using Postgres", slog.String("database", pool.Config().ConnConfig.Database))
	return store.Bounded(st, storeCallTimeout), func() { st.Close(); pool.Close() }, nil
}

// startProfile starts a CPU profile written to path; stop ends it.
func startProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// owner names this replica in run leases (docs/architecture.md §5): the configured
// replica id, else one unique to this process.
func owner(replica string) string {
	if replica != "" {
		return replica
	}
	host, err := os.Hostname()
	if err != nil {
		host = "unknown"
	}
	return host + ":" + strconv.Itoa(os.Getpid())
}
