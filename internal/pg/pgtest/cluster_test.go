package pgtest

import (
	"context"
	"testing"
	"time"
)

// TestStartCluster_ServesQueries exercises the last fallback, which machines
// with a running server never reach otherwise.
func TestStartCluster_ServesQueries(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	start := time.Now()
	url, err := startCluster(ctx)
	if err != nil {
		t.Fatalf("startCluster: %v", err)
	}
	pool, _, err := open(ctx, url)
	if err != nil {
		t.Fatalf("connect to %s: %v", url, err)
	}
	defer pool.Close()
	var fsync string
	if err := pool.QueryRow(ctx, "SHOW fsync").Scan(&fsync); err != nil || fsync != "off" {
		t.Fatalf("SHOW fsync = %q, %v; want off", fsync, err)
	}
	t.Logf("private cluster at %s ready in %v", url, time.Since(start))
}

func TestURL_ClonesMigratedTemplate(t *testing.T) {
	t.Parallel()
	pool := NewPool(t)
	var version int
	var dirty bool
	if err := pool.QueryRow(t.Context(), "SELECT version, dirty FROM schema_migrations").Scan(&version, &dirty); err != nil || version < 1 || dirty {
		t.Fatalf("schema_migrations: version %d dirty %v err %v; want a clean migrated clone", version, dirty, err)
	}
	var commit string
	if err := pool.QueryRow(t.Context(), "SHOW synchronous_commit").Scan(&commit); err != nil || commit != "off" {
		t.Fatalf("synchronous_commit = %q, %v; want off in test databases", commit, err)
	}
}
