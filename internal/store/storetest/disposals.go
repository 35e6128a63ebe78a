package storetest

import (
	"testing"

	"github.com/subagentd/subagentd/internal/store"
)

var disposalTests = []test{
	{"DisposeSession_KeepsTheFirstMark", func(t *testing.T, s store.Store) {
		ctx := t.Context()
		ok(t, s.CreateSession(ctx, child("c1", "p1", t0)))
		ok(t, s.CreateSession(ctx, child("c2", "p1", t0)))
		if got := must(s.Disposed(ctx, "c1"))(t); !got.IsZero() {
			t.Fatalf("Disposed(new session) = %v, want zero", got)
		}
		if got := must(s.DisposeSession(ctx, "c1", sec(1)))(t); !got.Equal(sec(1)) {
			t.Fatalf("DisposeSession = %v, want %v", got, sec(1))
		}
		if got := must(s.DisposeSession(ctx, "c1", sec(5)))(t); !got.Equal(sec(1)) {
			t.Fatalf("DisposeSession again = %v, want the first mark %v", got, sec(1))
		}
		if got := must(s.Disposed(ctx, "c1"))(t); !got.Equal(sec(1)) {
			t.Fatalf("Disposed = %v, want %v", got, sec(1))
		}
		if got := must(s.Disposed(ctx, "c2"))(t); !got.IsZero() {
			t.Fatalf("Disposed(other session) = %v, want zero", got)
		}
		// The header is unchanged: disposal is not part of it.
		same(t, "GetSession", must(s.GetSession(ctx, "c1"))(t), child("c1", "p1", t0), canonSession)
	}},
	{"DisposeSession_UnknownOrOtherTenantIsNotFound", func(t *testing.T, s store.Store) {
		ctx := t.Context()
		ok(t, s.CreateSession(ctx, child("c1", "p1", t0)))
		_, err := s.DisposeSession(ctx, "nope", sec(1))
		isErr(t, err, store.ErrNotFound, "DisposeSession(unknown)")
		_, err = s.Disposed(ctx, "nope")
		isErr(t, err, store.ErrNotFound, "Disposed(unknown)")
		_, err = s.DisposeSession(other(ctx), "c1", sec(1))
		isErr(t, err, store.ErrNotFound, "DisposeSession(other tenant)")
		_, err = s.Disposed(other(ctx), "c1")
		isErr(t, err, store.ErrNotFound, "Disposed(other tenant)")
		if got := must(s.Disposed(ctx, "c1"))(t); !got.IsZero() {
			t.Fatalf("another tenant's dispose marked the session: %v", got)
		}
	}},
}
