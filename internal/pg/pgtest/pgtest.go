// Package pgtest gives tests their own Postgres database, cloned from a
// template migrated once per test process (docs/architecture.md §7). The server is
// TEST_DATABASE_URL, else postgres://postgres@127.0.0.1:5432, else a private
// throwaway cluster started from the machine's initdb. A test that finds no
// Postgres fails and says what was tried; it never skips.
package pgtest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/subagentd/subagentd/internal/pg"
	"github.com/subagentd/subagentd/migrations"
)

const (
	localURL = "postgres://postgres@127.0.0.1:5432/postgres"
	// dbPrefix names the per-test databases: dbPrefix<pid>_<random>, so
	// databases left by a killed test process can be found and dropped.
	dbPrefix = "subagentd_t_"
	// templatePrefix names migrated templates: templatePrefix<hash of the
	// migrations>.
	templatePrefix = "subagentd_tmpl_"
	// setupTimeout bounds finding a server and migrating the template.
	setupTimeout = 2 * time.Minute
)

// server is found and prepared once per test process.
var server struct {
	once     sync.Once
	admin    *pgxpool.Pool // on the server's postgres database
	base     *url.URL      // the server; Path names a database
	template string
	err      error
}

// URL returns the URL of a new database, cloned from the migrated template,
// that is dropped when t ends.
func URL(t testing.TB) string {
	t.Helper()
	server.once.Do(setup)
	if server.err != nil {
		t.Fatal(server.err)
	}
	name := fmt.Sprintf("%s%d_%s", dbPrefix, os.Getpid(), strings.ToLower(rand.Text()[:10]))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Test data need not survive a crash: skip waiting for the WAL flush.
	for _, sql := range []string{"CREATE DATABASE " + name + " TEMPLATE " + server.template,
		"ALTER DATABASE " + name + " SET synchronous_commit = off"} {
		if _, err := server.admin.Exec(ctx, sql); err != nil {
			t.Fatalf("pgtest: create test database: %v", err)
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := server.admin.Exec(ctx, "DROP DATABASE "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("pgtest: drop test database: %v", err)
		}
	})
	return dbURL(name)
}

// NewPool returns a pool on a new database (see URL), closed when t ends.
func NewPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), URL(t))
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(pool.Close) // runs before URL's cleanup drops the database
	return pool
}

func dbURL(name string) string {
	u := *server.base
	u.Path = "/" + name
	return u.String()
}

func setup() {
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	server.admin, server.base, server.err = connect(ctx)
	if server.err != nil {
		return
	}
	dropAbandoned(ctx)
	server.template, server.err = ensureTemplate(ctx)
}

// connect finds a server: TEST_DATABASE_URL, else localURL, else a private
// cluster.
func connect(ctx context.Context) (*pgxpool.Pool, *url.URL, error) {
	if env := os.Getenv("TEST_DATABASE_URL"); env != "" {
		pool, u, err := open(ctx, env)
		if err != nil {
			return nil, nil, fmt.Errorf("pgtest: TEST_DATABASE_URL: %w", err)
		}
		return pool, u, nil
	}
	pool, u, localErr := open(ctx, localURL)
	if localErr == nil {
		return pool, u, nil
	}
	clusterURL, clusterErr := startCluster(ctx)
	if clusterErr == nil {
		if pool, u, clusterErr = open(ctx, clusterURL); clusterErr == nil {
			return pool, u, nil
		}
	}
	return nil, nil, fmt.Errorf("pgtest: no Postgres for tests. Tried: TEST_DATABASE_URL (unset); "+
		"%s: %v; a private cluster from initdb: %v. Set TEST_DATABASE_URL, start the local server "+
		"(pg_ctlcluster --skip-systemctl-redirect 15 main start) or install PostgreSQL", localURL, localErr, clusterErr)
}

// open connects an admin pool to rawURL's server.
func open(ctx context.Context, rawURL string) (*pgxpool.Pool, *url.URL, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, nil, err
	}
	cfg, err := pgxpool.ParseConfig(rawURL)
	if err != nil {
		return nil, nil, err
	}
	cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err == nil {
		err = pool.Ping(ctx)
	}
	if err != nil {
		if pool != nil {
			pool.Close()
		}
		return nil, nil, err
	}
	return pool, u, nil
}

// ensureTemplate returns the name of a template database migrated to the
// embedded migrations, creating it if no earlier test process did. Test
// processes running at once serialise on an advisory lock.
func ensureTemplate(ctx context.Context) (string, error) {
	sum, err := migrationsHash()
	if err != nil {
		return "", err
	}
	name := templatePrefix + sum[:12]
	conn, err := server.admin.Acquire(ctx)
	if err != nil {
		return "", fmt.Errorf("pgtest: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock(hashtext('subagentd pgtest template'))"); err != nil {
		return "", fmt.Errorf("pgtest: lock template: %w", err)
	}
	defer conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock(hashtext('subagentd pgtest template'))")

	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return "", fmt.Errorf("pgtest: look up template: %w", err)
	}
	if exists {
		return name, markUsed(ctx, conn, name)
	}
	// Build under another name and rename, so a process killed half-way
	// leaves no template that looks finished.
	build := name + "_build"
	for _, sql := range []string{"DROP DATABASE IF EXISTS " + build + " WITH (FORCE)", "CREATE DATABASE " + build} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			return "", fmt.Errorf("pgtest: build template: %w", err)
		}
	}
	if err := pg.Migrate(ctx, dbURL(build), slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		return "", fmt.Errorf("pgtest: migrate template: %w", err)
	}
	// No connections to a template: one would make every clone fail.
	for _, sql := range []string{"ALTER DATABASE " + build + " RENAME TO " + name,
		"ALTER DATABASE " + name + " WITH IS_TEMPLATE true ALLOW_CONNECTIONS false"} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			return "", fmt.Errorf("pgtest: build template: %w", err)
		}
	}
	if err := markUsed(ctx, conn, name); err != nil {
		return "", err
	}
	dropOldTemplates(ctx, conn, name)
	return name, nil
}

// templateUnused is how long a template of other migrations must have gone
// unused before dropOldTemplates drops it: another checkout on other
// migrations (a branch) may be testing against the same server right now.
const templateUnused = time.Hour

// markUsed records in name's comment that a test process uses it now.
func markUsed(ctx context.Context, conn *pgxpool.Conn, name string) error {
	_, err := conn.Exec(ctx, fmt.Sprintf("COMMENT ON DATABASE %s IS 'pgtest used %d'", name, time.Now().Unix()))
	if err != nil {
		return fmt.Errorf("pgtest: mark template used: %w", err)
	}
	return nil
}

// dropOldTemplates drops templates of other migrations that no test process
// used for templateUnused (markUsed), so editing migrations does not pile
// up databases while checkouts on other migrations keep theirs.
func dropOldTemplates(ctx context.Context, conn *pgxpool.Conn, keep string) {
	rows, _ := conn.Query(ctx, `SELECT datname FROM pg_database d
		WHERE starts_with(datname, $1) AND datname <> $2
		  AND COALESCE(substring(shobj_description(d.oid, 'pg_database') FROM '^pgtest used ([0-9]+)$')::bigint, 0) < $3`,
		templatePrefix, keep, time.Now().Add(-templateUnused).Unix())
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return
	}
	for _, name := range names {
		_, _ = conn.Exec(ctx, "ALTER DATABASE "+name+" WITH IS_TEMPLATE false")
		_, _ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	}
}

// migrationsHash identifies the schema the template holds.
func migrationsHash() (string, error) {
	h := sha256.New()
	err := fs.WalkDir(migrations.FS, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(migrations.FS, path)
		fmt.Fprintf(h, "%s %d\n%s", path, len(b), b)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("pgtest: hash migrations: %w", err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// dropAbandoned drops test databases of test processes that no longer run,
// when the server is on this machine (so their pids mean something).
func dropAbandoned(ctx context.Context) {
	if ip := net.ParseIP(server.base.Hostname()); server.base.Hostname() != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return
	}
	rows, _ := server.admin.Query(ctx, "SELECT datname FROM pg_database WHERE starts_with(datname, $1)", dbPrefix)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return
	}
	for _, name := range names {
		pid, _, _ := strings.Cut(strings.TrimPrefix(name, dbPrefix), "_")
		if n, err := strconv.Atoi(pid); err == nil && !alive(n) {
			_, _ = server.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
		}
	}
}

// alive reports whether process pid exists.
func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
