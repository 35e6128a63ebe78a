package pg_test

import (
	"strings"
	"testing"

	"github.com/subagentd/subagentd/internal/pg/pgtest"
	"github.com/subagentd/subagentd/internal/store"
)

func TestSessionEvents_AppendOnly(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	s := newStore(t, pool)
	ctx := t.Context()
	if err := s.CreateSession(ctx, store.Session{ID: "s1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendEvents(ctx, "s1", store.NewEvent{Type: "x"}, store.NewEvent{Type: "y"}); err != nil {
		t.Fatal(err)
	}
	for _, sql := range []string{
		`UPDATE session_events SET type = 'z' WHERE seq = 0`,
		`DELETE FROM session_events WHERE seq = 1`,
		`TRUNCATE session_events`,
	} {
		_, err := pool.Exec(ctx, sql)
		if err == nil || !strings.Contains(err.Error(), "append-only") {
			t.Errorf("%s: got %v, want the append-only error", sql, err)
		}
	}
	evs, err := s.Events(ctx, "s1", -1, 0)
	if err != nil || len(evs) != 2 || evs[0].Type != "x" {
		t.Fatalf("log after rejected changes: %+v, %v", evs, err)
	}
}
