package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/subagentd/subagentd/internal/pg"
)

// bench holds what every scenario shares: the built service binary, a
// scratch directory, and the Postgres server's admin pool.
type bench struct {
	opts options
	log  *slog.Logger
	out  io.Writer
	// tmp holds the service binary and the services' logs; removed by close.
	tmp string
	bin string
	// self is this program's executable, re-run for the SSE baseline.
	self string

	// admin is a pool on the -pg database, for CREATE/DROP DATABASE; nil
	// when Postgres is unreachable, and pgErr says why.
	admin *pgxpool.Pool
	pgErr error

	profile      *os.File
	noSvcProfile bool // set once a service wrote no profile, to warn once
}

func newBench(ctx context.Context, opts options, log *slog.Logger, out io.Writer) (_ *bench, err error) {
	b := &bench{opts: opts, log: log, out: out}
	defer func() {
		if err != nil {
			err = errors.Join(err, b.close())
		}
	}()
	if b.tmp, err = os.MkdirTemp("", "subagentd-bench-"); err != nil {
		return nil, fmt.Errorf("scratch directory: %w", err)
	}
	if b.self, err = os.Executable(); err != nil {
		return nil, fmt.Errorf("find own executable: %w", err)
	}
	if err := raiseFileLimit(log); err != nil {
		return nil, err
	}
	if opts.cpuprofile != "" {
		if b.profile, err = os.Create(opts.cpuprofile); err != nil {
			return nil, fmt.Errorf("cpu profile: %w", err)
		}
		if err := pprof.StartCPUProfile(b.profile); err != nil {
			return nil, fmt.Errorf("cpu profile: %w", err)
		}
	}
	b.bin = filepath.Join(b.tmp, "subagentd")
	log.Info("building the service", slog.String("package", opts.apiPkg))
	build := exec.CommandContext(ctx, "go", "build", "-o", b.bin, opts.apiPkg)
	if msg, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build %s: %w\n%s", opts.apiPkg, err, msg)
	}
	pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	b.admin, b.pgErr = pgxpool.New(pingCtx, pg.ConnString(opts.pgURL))
	if b.pgErr == nil {
		b.pgErr = b.admin.Ping(pingCtx)
	}
	if b.pgErr != nil {
		b.pgErr = fmt.Errorf("postgres at %s: %w", opts.pgURL, b.pgErr)
		log.Warn("postgres unavailable; its measurements are skipped", slog.Any("error", b.pgErr))
	}
	return b, nil
}

// close stops the bench's profile, closes the admin pool and removes the
// scratch directory.
func (b *bench) close() error {
	var errs []error
	if b.profile != nil {
		pprof.StopCPUProfile()
		errs = append(errs, b.profile.Close())
		b.profile = nil
	}
	if b.admin != nil {
		b.admin.Close()
	}
	if b.tmp != "" {
		errs = append(errs, os.RemoveAll(b.tmp))
	}
	return errors.Join(errs...)
}

// raiseFileLimit lifts the soft RLIMIT_NOFILE to the hard limit: the
// fan-out scenario holds thousands of connections, and the service
// subprocess inherits the limit.
func raiseFileLimit(log *slog.Logger) error {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Errorf("read RLIMIT_NOFILE: %w", err)
	}
	if lim.Cur < lim.Max {
		lim.Cur = lim.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			return fmt.Errorf("raise RLIMIT_NOFILE to %d: %w", lim.Max, err)
		}
	}
	log.Info("file descriptor limit", slog.Uint64("nofile", lim.Cur))
	return nil
}

// fileLimit returns the current soft RLIMIT_NOFILE.
func fileLimit() uint64 {
	var lim syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) != nil {
		return 0
	}
	return lim.Cur
}

// printHeader describes the machine, so that a table can be judged.
func (b *bench) printHeader(ctx context.Context) {
	mode := "full"
	if b.opts.quick {
		mode = "quick"
	}
	fmt.Fprintf(b.out, "## subagentd bench (%s, %s per measurement)\n\n", mode, b.opts.duration)
	fmt.Fprintf(b.out, "- CPUs: %d (GOMAXPROCS %d), %s\n", runtime.NumCPU(), runtime.GOMAXPROCS(0), cpuModel())
	fmt.Fprintf(b.out, "- memory: %s\n", memTotal())
	fmt.Fprintf(b.out, "- %s, %s/%s, RLIMIT_NOFILE %d\n", runtime.Version(), runtime.GOOS, runtime.GOARCH, fileLimit())
	fmt.Fprintf(b.out, "- load average at start: %s (other work on the machine shares its CPUs)\n", loadAvg())
	if b.admin == nil {
		fmt.Fprintf(b.out, "- Postgres: not available (%v)\n\n", b.pgErr)
		return
	}
	var version, syncCommit, fsync string
	err := b.admin.QueryRow(ctx, `SELECT current_setting('server_version'), current_setting('synchronous_commit'), current_setting('fsync')`).
		Scan(&version, &syncCommit, &fsync)
	if err != nil {
		fmt.Fprintf(b.out, "- Postgres: %v\n\n", err)
		return
	}
	fmt.Fprintf(b.out, "- Postgres %s on the same machine (synchronous_commit=%s, fsync=%s)\n\n", version, syncCommit, fsync)
}

// cpuModel returns the first "model name" of /proc/cpuinfo.
func cpuModel() string {
	return procField("/proc/cpuinfo", "model name")
}

// memTotal returns MemTotal of /proc/meminfo.
func memTotal() string {
	return procField("/proc/meminfo", "MemTotal")
}

// loadAvg returns the 1, 5 and 15 minute load averages.
func loadAvg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(data))
	return strings.Join(f[:min(3, len(f))], " ")
}

// procField returns the value of the first "key: value" line of a /proc
// file, or "unknown".
func procField(path, key string) string {
	f, err := os.Open(path)
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}
