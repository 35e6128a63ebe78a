package pg

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/golang-migrate/migrate/v4"
	_ "github.com/golang-migrate/migrate/v4/database/pgx/v5" // the pgx5:// driver
	"github.com/golang-migrate/migrate/v4/source"
	"github.com/golang-migrate/migrate/v4/source/iofs"

	"github.com/subagentd/subagentd/migrations"
)

// lockTimeout bounds the wait for golang-migrate's advisory lock. It is well
// above the default 15 s because a replica starting while another runs a long
// migration should wait for it, not fail.
const lockTimeout = 5 * time.Minute

// Migrate brings the database at databaseURL (a postgres:// URL) to the latest
// schema in package migrations, under golang-migrate's advisory lock so
// replicas starting together migrate once. Cancelling ctx stops between two
// migrations. A database left dirty by a failed migration is an error that
// says how to repair it; Migrate never forces a version itself.
func Migrate(ctx context.Context, databaseURL string, log *slog.Logger) (err error) {
	defer func() {
		if err != nil {
			err = fmt.Errorf("pg: migrate: %w", err)
		}
	}()
	m, err := newMigrator(databaseURL, log)
	if err != nil {
		return err
	}
	defer m.Close()
	stop := context.AfterFunc(ctx, func() { m.GracefulStop <- true })
	defer stop()

	err = m.Up()
	if errors.Is(err, migrate.ErrNoChange) {
		err = nil
	}
	if dirty := (migrate.ErrDirty{}); errors.As(err, &dirty) {
		return dirtyError(dirty.Version)
	}
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("stopped before the latest version: %w", err)
	}
	version, _, err := m.Version()
	if err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	log.InfoContext(ctx, "pg: database schema is current", slog.Uint64("version", uint64(version)))
	return nil
}

// newMigrator returns a golang-migrate instance over the embedded migrations
// for databaseURL. The caller closes it.
func newMigrator(databaseURL string, log *slog.Logger) (*migrate.Migrate, error) {
	u, err := url.Parse(ConnString(databaseURL))
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return nil, errors.New("database URL must be a postgres:// URL")
	}
	u.Scheme = "pgx5"
	// pool_* parameters (pool_max_conns, …) configure pgxpool, which the
	// migrator's single connection does not understand.
	q := u.Query()
	for k := range q {
		if strings.HasPrefix(k, "pool_") {
			q.Del(k)
		}
	}
	u.RawQuery = q.Encode()
	src, err := migrationSource()
	if err != nil {
		return nil, err
	}
	m, err := migrate.NewWithSourceInstance("iofs", src, u.String())
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	m.LockTimeout = lockTimeout
	m.Log = migrateLogger{log}
	return m, nil
}

func migrationSource() (source.Driver, error) {
	src, err := iofs.New(migrations.FS, ".")
	if err != nil {
		return nil, fmt.Errorf("read embedded migrations: %w", err)
	}
	return src, nil
}

// latestVersion returns the version of the newest embedded migration.
func latestVersion() (uint, error) {
	src, err := migrationSource()
	if err != nil {
		return 0, err
	}
	v, err := src.First()
	for err == nil {
		var next uint
		if next, err = src.Next(v); err == nil {
			v = next
		}
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return 0, fmt.Errorf("read embedded migrations: %w", err)
	}
	return v, nil
}

// dirtyError explains how to repair a database left dirty at version.
func dirtyError(version int) error {
	before := "-1" // no version: the schema was empty before it
	if src, err := migrationSource(); err == nil {
		if prev, err := src.Prev(uint(version)); err == nil {
			before = fmt.Sprint(prev)
		}
	}
	return fmt.Errorf("database schema is dirty at version %d: migration %06d failed part-way on an earlier start. "+
		"Compare the database with migrations/%06d_*.up.sql, then either complete the migration by hand and run "+
		"`migrate -path migrations -database \"$DATABASE_URL\" force %d`, or undo its partial changes and run "+
		"`migrate … force %s`; then restart", version, version, version, version, before)
}

// migrateLogger passes golang-migrate's messages to slog.
type migrateLogger struct{ log *slog.Logger }

func (l migrateLogger) Printf(format string, v ...any) {
	l.log.Info("pg: migrate: " + strings.TrimSpace(fmt.Sprintf(format, v...)))
}

func (l migrateLogger) Verbose() bool { return false }
