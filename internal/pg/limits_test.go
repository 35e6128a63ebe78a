package pg_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/pg/pgtest"
	"github.com/subagentd/subagentd/internal/store"
)

// TestPatchSessionLimits_KeepsFieldsItDoesNotKnow: in a rolling upgrade a
// newer replica may store a limit this build has no field for. A patch
// from this build changes the limits it names and keeps that one, where a
// write of the limits it read would drop it.
func TestPatchSessionLimits_KeepsFieldsItDoesNotKnow(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	pool := openPool(t, url)
	s := newStore(t, pool)
	ctx := t.Context()
	if err := s.CreateSession(ctx, store.Session{ID: "root", CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE sessions SET limits = '{"maxDepth": 2, "maxToolCalls": 7}' WHERE id = 'root'`); err != nil {
		t.Fatal(err)
	}
	got, err := s.PatchSessionLimits(ctx, "root", store.LimitsPatch{Clear: []string{store.LimitMaxDepth},
		Set: store.Limits{TokenBudget: new(int64(100))}})
	if err != nil {
		t.Fatal(err)
	}
	if got.MaxDepth != nil || got.TokenBudget == nil || *got.TokenBudget != 100 {
		t.Fatalf("patched limits %+v, want tokenBudget 100 and no maxDepth", got)
	}
	var raw []byte
	if err := pool.QueryRow(ctx, `SELECT limits FROM sessions WHERE id = 'root'`).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	var stored map[string]json.RawMessage
	if err := json.Unmarshal(raw, &stored); err != nil {
		t.Fatal(err)
	}
	if string(stored["maxToolCalls"]) != "7" || string(stored["tokenBudget"]) != "100" || stored["maxDepth"] != nil {
		t.Fatalf("stored limits %s, want maxToolCalls kept, tokenBudget 100, maxDepth cleared", raw)
	}
}
