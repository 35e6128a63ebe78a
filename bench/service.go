package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Environment of the service (docs/architecture.md §9) and the profiling hook the bench
// asks of cmd/api: SUBAGENTD_CPUPROFILE names a file to write a CPU profile
// of the whole process life to, stopped on graceful shutdown.
const (
	envAddr       = "SUBAGENTD_ADDR"
	envDatabase   = "DATABASE_URL"
	envCPUProfile = "SUBAGENTD_CPUPROFILE"
	// envRateLimit is set to 0: the bench measures the service, and its
	// clients send more than the default 2,000 requests per second.
	envRateLimit = "SUBAGENTD_RATE_LIMIT"
)

// proc is a server subprocess: the service, or the SSE baseline.
type proc struct {
	name    string
	cmd     *exec.Cmd
	base    string // http://host:port
	logPath string
	profile string // the profile the process was asked to write, if any
	done    chan struct{}
	waitErr error
}

// startService starts the service binary on a free loopback port, with the
// in-memory store when databaseURL is empty and extra variables
// (NAME=value), and waits until /readyz answers 200. name labels its log and
// profile files.
func (b *bench) startService(ctx context.Context, name, databaseURL string, extra ...string) (*proc, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	env := serviceEnv(os.Environ())
	env = append(env, envAddr+"="+addr, envRateLimit+"=0")
	env = append(env, extra...)
	if databaseURL != "" {
		env = append(env, envDatabase+"="+databaseURL)
	}
	p := &proc{name: name, base: "http://" + addr, logPath: filepath.Join(b.tmp, name+".log")}
	if b.opts.cpuprofile != "" {
		p.profile = b.opts.cpuprofile + "." + name + ".service"
		env = append(env, envCPUProfile+"="+p.profile)
	}
	logFile, err := os.Create(p.logPath)
	if err != nil {
		return nil, fmt.Errorf("service log: %w", err)
	}
	defer logFile.Close() // the child holds its own descriptor
	p.cmd = exec.Command(b.bin)
	p.cmd.Env = env
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	// The service must not outlive a bench that is killed.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.start(); err != nil {
		return nil, fmt.Errorf("start service: %w", err)
	}
	if err := p.waitReady(ctx, p.base+"/readyz"); err != nil {
		_ = p.stop() // err already holds the log
		return nil, err
	}
	return p, nil
}

// serviceEnv is env without the variables that would change what the
// bench measures: a configured store, model, config file or tokens.
func serviceEnv(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if k == envDatabase || strings.HasPrefix(k, "SUBAGENTD_") || strings.HasPrefix(k, "OPENAI_") {
			continue
		}
		out = append(out, kv)
	}
	return out
}

func (p *proc) start() error {
	if err := p.cmd.Start(); err != nil {
		return err
	}
	p.done = make(chan struct{})
	go func() {
		p.waitErr = p.cmd.Wait()
		close(p.done)
	}()
	return nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// waitReady polls readyURL until it answers 200, the process exits, or a
// minute passes.
func (p *proc) waitReady(ctx context.Context, readyURL string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	client := &http.Client{Timeout: 2 * time.Second}
	var last error
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, readyURL, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("%s answered %s", readyURL, resp.Status)
		}
		last = err
		select {
		case <-p.done:
			return fmt.Errorf("%s exited before it was ready (%v)%s", p.name, p.waitErr, p.logTail())
		case <-ctx.Done():
			return fmt.Errorf("%s not ready: %v%s", p.name, last, p.logTail())
		case <-tick.C:
		}
	}
}

// stop sends SIGTERM, waits for a graceful exit (SIGKILL after 30 s), and
// reports an unclean exit with the tail of the log.
func (p *proc) stop() error {
	if p.done == nil {
		return nil
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("%s did not stop within 30s of SIGTERM; killed%s", p.name, p.logTail())
	}
	if p.waitErr != nil {
		return fmt.Errorf("%s exited: %w%s", p.name, p.waitErr, p.logTail())
	}
	return nil
}

// kill ends the process with SIGKILL, as a crash would, and waits for it;
// a later stop is a no-op.
func (p *proc) kill() {
	if p.done == nil {
		return
	}
	_ = p.cmd.Process.Kill()
	<-p.done
	p.done = nil
}

// logTail returns the last lines of the process's log, for error messages.
func (p *proc) logTail() string {
	if p.logPath == "" {
		return ""
	}
	data, err := os.ReadFile(p.logPath)
	if err != nil || len(data) == 0 {
		return ""
	}
	lines := bytes.Split(bytes.TrimSpace(data), []byte("\n"))
	lines = lines[max(0, len(lines)-15):]
	return "\n--- " + p.name + " log tail ---\n" + string(bytes.Join(lines, []byte("\n")))
}

// stopService stops p and checks that the service wrote the profile it was
// asked for; a missing one is reported once, since it means cmd/api does not
// honour SUBAGENTD_CPUPROFILE.
func (b *bench) stopService(p *proc) error {
	err := p.stop()
	if p.profile == "" {
		return err
	}
	if st, statErr := os.Stat(p.profile); statErr == nil && st.Size() > 0 {
		b.log.Info("service profile written", slog.String("file", p.profile))
	} else if !b.noSvcProfile {
		b.noSvcProfile = true
		b.log.Warn("the service wrote no CPU profile: cmd/api must honour " + envCPUProfile + "=<file>")
	}
	return err
}

// rssKB returns the resident set size of pid in KiB (VmRSS).
func rssKB(pid int) (int64, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

// freeAddr returns a loopback address with a port that was free a moment
// ago.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// createDB creates an empty database bench_<random> on the -pg server and
// returns its name and URL. Drop it with dropDB.
func (b *bench) createDB(ctx context.Context) (name, dbURL string, err error) {
	if b.admin == nil {
		return "", "", b.pgErr
	}
	name = "bench_" + strings.ToLower(rand.Text()[:12])
	if _, err := b.admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", "", fmt.Errorf("create database %s: %w", name, err)
	}
	u, err := url.Parse(b.opts.pgURL)
	if err != nil {
		return "", "", fmt.Errorf("parse -pg: %w", err)
	}
	u.Path = "/" + name
	return name, u.String(), nil
}

// dropDB drops a database of createDB, disconnecting whoever still uses it.
func (b *bench) dropDB(name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := b.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	return nil
}

// pgCounters are cluster-wide counters of the Postgres server: the
// difference of two readings is what every database of the server wrote in
// between.
type pgCounters struct {
	wal int64 // WAL position in bytes
	xid int64 // next transaction id: one is taken by each writing transaction
}

func (b *bench) counters(ctx context.Context) (pgCounters, error) {
	var c pgCounters
	err := b.admin.QueryRow(ctx, `SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint,
		txid_snapshot_xmax(txid_current_snapshot())`).Scan(&c.wal, &c.xid)
	if err != nil {
		return c, fmt.Errorf("read WAL position and next xid: %w", err)
	}
	return c, nil
}

// since returns the counters' growth from c0 to c.
func (c pgCounters) since(c0 pgCounters) pgCounters {
	return pgCounters{wal: c.wal - c0.wal, xid: c.xid - c0.xid}
}
