package storetest

import (
	"crypto/sha256"
	"errors"
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/store"
)

var signinTests = []test{
	{"CreateGetDelete", func(t *testing.T, s store.Store) {
		ctx := t.Context()
		sg := store.Signin{Hash: sha256.Sum256([]byte("cookie-1")), Tenant: "acme", Expires: t0.Add(time.Hour)}
		if err := s.CreateSignin(ctx, sg); err != nil {
			t.Fatalf("create: %v", err)
		}
		if err := s.CreateSignin(ctx, sg); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("second create of one hash = %v, want ErrConflict", err)
		}
		// A sign-in names its tenant whatever the tenant of ctx.
		got, err := s.GetSignin(other(ctx), sg.Hash, t0)
		if err != nil || got != sg {
			t.Fatalf("get = %+v, %v; want %+v", got, err, sg)
		}
		if _, err := s.GetSignin(ctx, sha256.Sum256([]byte("cookie-2")), t0); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("get of an unknown hash = %v, want ErrNotFound", err)
		}
		if err := s.DeleteSignin(ctx, sg.Hash); err != nil {
			t.Fatalf("delete: %v", err)
		}
		if _, err := s.GetSignin(ctx, sg.Hash, t0); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("get after sign-out = %v, want ErrNotFound", err)
		}
		if err := s.DeleteSignin(ctx, sg.Hash); err != nil {
			t.Fatalf("second delete: %v, want none", err)
		}
	}},
	{"ExpiryAndSweep", func(t *testing.T, s store.Store) {
		ctx := t.Context()
		old := store.Signin{Hash: sha256.Sum256([]byte("old")), Tenant: "acme", Expires: t0}
		live := store.Signin{Hash: sha256.Sum256([]byte("live")), Tenant: "acme", Expires: t0.Add(time.Hour)}
		for _, sg := range []store.Signin{old, live} {
			if err := s.CreateSignin(ctx, sg); err != nil {
				t.Fatalf("create: %v", err)
			}
		}
		if _, err := s.GetSignin(ctx, old.Hash, t0); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("get at its expiry = %v, want ErrNotFound", err)
		}
		if got, err := s.GetSignin(ctx, old.Hash, t0.Add(-time.Second)); err != nil || got != old {
			t.Fatalf("get before its expiry = %+v, %v", got, err)
		}
		n, err := s.SweepSignins(ctx, t0.Add(time.Minute))
		if err != nil || n != 1 {
			t.Fatalf("sweep = %d, %v; want the expired one", n, err)
		}
		if _, err := s.GetSignin(ctx, old.Hash, t0.Add(-time.Second)); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("get of a swept sign-in = %v, want ErrNotFound", err)
		}
		if got, err := s.GetSignin(ctx, live.Hash, t0); err != nil || got != live {
			t.Fatalf("the live sign-in after the sweep = %+v, %v", got, err)
		}
	}},
}
