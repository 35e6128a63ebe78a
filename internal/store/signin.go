package store

import (
	"context"
	"crypto/sha256"
	"time"
)

// Token is one API token (docs/architecture.md §10): a request that
// presents the token whose SHA-256 is Hash acts as Tenant. Only the hash is
// kept, so neither the configuration nor the process holds a usable token.
type Token struct {
	Tenant string
	Hash   [sha256.Size]byte
}

// Signin is a browser sign-in (docs/architecture.md §10): the cookie a token was traded
// for. Stores keep only the SHA-256 of the cookie value, so a dump of the
// store yields no usable cookie.
type Signin struct {
	Hash    [sha256.Size]byte
	Tenant  string
	Expires time.Time
}

// Signins keeps browser sign-ins where every replica of the store sees
// them, so a cookie one replica issued is accepted by all (and, on a
// durable store, after a restart). A sign-in is found by its hash alone: it
// is what names the tenant of a cookie-authenticated request, so these
// methods ignore the tenant of ctx.
type Signins interface {
	// CreateSignin stores s. Returns ErrConflict if its hash is stored.
	// A store may bound the sign-ins it keeps by ending the oldest.
	CreateSignin(ctx context.Context, s Signin) error
	// GetSignin returns the sign-in of hash if it expires after now.
	// Returns ErrNotFound if it is absent, signed out or expired.
	GetSignin(ctx context.Context, hash [sha256.Size]byte, now time.Time) (Signin, error)
	// DeleteSignin ends the sign-in of hash; an absent one is no error.
	DeleteSignin(ctx context.Context, hash [sha256.Size]byte) error
	// SweepSignins deletes the sign-ins that expired before before and
	// returns how many it deleted.
	SweepSignins(ctx context.Context, before time.Time) (int64, error)
}
