package pg_test

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/pg"
	"github.com/subagentd/subagentd/internal/pg/pgtest"
	"github.com/subagentd/subagentd/internal/store"
)

// A header is read once: later reads, and reads of headers the Store
// stored itself, come from memory, and are exactly what the table holds,
// as another replica reads it. The cache never answers for another tenant,
// and a session that was missing is read again.
func TestGetSession_HeaderCache(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	b, counter := tracedStore(t, url)
	a := newStore(t, openPool(t, url))
	ctx := store.WithTenant(t.Context(), "t1")
	persona := "a persona"
	h := store.Session{ID: "root-1", Label: "l", Cwd: "/srv", AgentModel: "m", MaxTokens: 7, Persona: &persona,
		CreatedAt: time.Date(2026, 12, 1, 10, 0, 0, 123456789, time.FixedZone("x", 3600))}
	if _, err := b.GetSession(ctx, h.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("before it exists: %v, want ErrNotFound", err)
	}
	if err := a.CreateSession(ctx, h); err != nil {
		t.Fatal(err)
	}
	read := func(s *pg.Store) store.Session {
		t.Helper()
		got, err := s.GetSession(ctx, h.ID)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	trips0, _, _ := counter.snapshot()
	fromTable := read(b) // a miss: read from the table
	trips1, _, _ := counter.snapshot()
	if trips1 != trips0+1 {
		t.Fatalf("the first read took %d round trips, want 1", trips1-trips0)
	}
	if again := read(b); !reflect.DeepEqual(again, fromTable) {
		t.Errorf("cached read %+v, want %+v", again, fromTable)
	}
	if trips2, _, _ := counter.snapshot(); trips2 != trips1 {
		t.Errorf("a second read took %d round trips, want none", trips2-trips1)
	}
	if stored := read(a); !reflect.DeepEqual(stored, fromTable) {
		t.Errorf("the creator's cached header %+v, want the table's %+v", stored, fromTable)
	}
	other := store.WithTenant(t.Context(), "t2")
	for _, s := range []*pg.Store{a, b} {
		if _, err := s.GetSession(other, h.ID); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("another tenant's read: %v, want ErrNotFound", err)
		}
	}
}
