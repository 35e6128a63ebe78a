package pg_test

import (
	"strings"
	"testing"

	"github.com/subagentd/subagentd/internal/pg"
	"github.com/subagentd/subagentd/internal/pg/pgtest"
)

// tables returns how many of the schema's tables exist.
func tables(t *testing.T, url string) int {
	t.Helper()
	var n int
	err := openPool(t, url).QueryRow(t.Context(), `SELECT count(*) FROM pg_tables WHERE schemaname = 'public'
		AND tablename IN ('sessions', 'session_events', 'runs', 'lifecycle_counter', 'lifecycle_events', 'inbox', 'idempotency_keys', 'signins')`).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestMigrate_UpDownUp(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t) // migrated up
	if n := tables(t, url); n != 8 {
		t.Fatalf("migrated template has %d of 8 tables", n)
	}
	if err := pg.Migrate(t.Context(), url, discard()); err != nil {
		t.Fatalf("Migrate on a current schema: %v", err)
	}
	m, err := pg.NewMigrator(url, discard())
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.Down(); err != nil {
		t.Fatalf("down: %v", err)
	}
	if n := tables(t, url); n != 0 {
		t.Fatalf("after down %d tables remain", n)
	}
	pool := openPool(t, url)
	if _, err := pg.New(t.Context(), pool, discard()); err == nil || !strings.Contains(err.Error(), "not migrated") {
		t.Fatalf("New on an unmigrated database: got %v, want a not-migrated error", err)
	}
	if err := pg.Migrate(t.Context(), url, discard()); err != nil {
		t.Fatalf("up again: %v", err)
	}
	if n := tables(t, url); n != 8 {
		t.Fatalf("after up again %d of 8 tables", n)
	}
	newStore(t, pool)
}

func TestMigrate_DirtyVersionFailsWithRepairHint(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	pool := openPool(t, url)
	// Dirty at version 1, whatever the latest: the hint names that version.
	exec(t, pool, `UPDATE schema_migrations SET version = 1, dirty = true`)
	err := pg.Migrate(t.Context(), url, discard())
	if err == nil {
		t.Fatal("Migrate on a dirty database succeeded")
	}
	t.Logf("Migrate on a dirty database: %v", err)
	for _, want := range []string{"dirty at version 1", "migrations/000001_*.up.sql", "force 1", "force -1"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Migrate error %q does not mention %q", err, want)
		}
	}
	if _, err := pg.New(t.Context(), pool, discard()); err == nil || !strings.Contains(err.Error(), "dirty at version 1") {
		t.Fatalf("New on a dirty database: got %v, want the dirty-version error", err)
	}
}

func TestPing_FailsWhenUnreachableOrSchemaOld(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	pool := openPool(t, url)
	s := newStore(t, pool)
	if err := s.Ping(t.Context()); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	exec(t, pool, `UPDATE schema_migrations SET version = 0`)
	if err := s.Ping(t.Context()); err == nil || !strings.Contains(err.Error(), "version 0") {
		t.Fatalf("Ping with schema version 0: got %v, want a version error", err)
	}

	nowhere := openPool(t, "postgres://postgres@127.0.0.1:1/nowhere?connect_timeout=2")
	if _, err := pg.New(t.Context(), nowhere, discard()); err == nil {
		t.Fatal("New on an unreachable database succeeded")
	}
}

// A DATABASE_URL that sizes the pool (pool_max_conns) is one URL for both
// the migrator and pgxpool.
func TestMigrate_URLWithPoolParameters(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	if err := pg.Migrate(t.Context(), url+sep+"pool_max_conns=4", discard()); err != nil {
		t.Fatalf("Migrate with pool_max_conns: %v", err)
	}
}
