package pg

import (
	"context"
	"crypto/sha256"
	"time"

	"github.com/subagentd/subagentd/internal/store"
)

// CreateSignin stores sg. Returns store.ErrConflict if its hash is stored.
func (s *Store) CreateSignin(ctx context.Context, sg store.Signin) (err error) {
	defer wrap(&err, "create sign-in")
	_, err = s.pool.Exec(ctx, `INSERT INTO signins (hash, tenant, expires_at) VALUES ($1, $2, $3)`,
		sg.Hash[:], sg.Tenant, sg.Expires)
	return err
}

// GetSignin returns the sign-in of hash if it expires after now. Returns
// store.ErrNotFound.
func (s *Store) GetSignin(ctx context.Context, hash [sha256.Size]byte, now time.Time) (sg store.Signin, err error) {
	defer wrap(&err, "sign-in")
	sg.Hash = hash
	err = s.pool.QueryRow(ctx, `SELECT tenant, expires_at FROM signins WHERE hash = $1 AND expires_at > $2`,
		hash[:], now).Scan(&sg.Tenant, &sg.Expires)
	sg.Expires = sg.Expires.UTC()
	return sg, err
}

// DeleteSignin ends the sign-in of hash.
func (s *Store) DeleteSignin(ctx context.Context, hash [sha256.Size]byte) (err error) {
	defer wrap(&err, "delete sign-in")
	_, err = s.pool.Exec(ctx, `DELETE FROM signins WHERE hash = $1`, hash[:])
	return err
}

// SweepSignins deletes the sign-ins that expired before before.
func (s *Store) SweepSignins(ctx context.Context, before time.Time) (n int64, err error) {
	defer wrap(&err, "sweep sign-ins")
	tag, err := s.pool.Exec(ctx, `DELETE FROM signins WHERE expires_at < $1`, before)
	return tag.RowsAffected(), err
}
