package pg

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/subagentd/subagentd/internal/store"
)

// ReserveIdempotency records key in flight for hash unless the tenant has
// it (then it returns the record, reserved false); an in-flight record
// created before staleBefore is taken over. One statement decides, so two
// concurrent reservations of one key never both succeed.
func (s *Store) ReserveIdempotency(ctx context.Context, key, hash string, staleBefore time.Time) (rec store.Idempotency, reserved bool, err error) {
	defer wrap(&err, "reserve idempotency key")
	tenant := store.Tenant(ctx)
	rec = store.Idempotency{Key: key}
	// A key swept between the insert and the read is inserted again.
	for range 3 {
		err = s.pool.QueryRow(ctx, `INSERT INTO idempotency_keys (tenant, key, request_hash, status)
			VALUES ($1, $2, $3, 0)
			ON CONFLICT (tenant, key) DO UPDATE
				SET request_hash = EXCLUDED.request_hash, status = 0, response = NULL, created_at = now()
				WHERE idempotency_keys.status = 0 AND idempotency_keys.created_at < $4
			RETURNING request_hash, created_at`, tenant, key, hash, staleBefore).Scan(&rec.RequestHash, &rec.CreatedAt)
		if err == nil {
			rec.CreatedAt = rec.CreatedAt.UTC()
			return rec, true, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return rec, false, err
		}
		var resp []byte
		err = s.pool.QueryRow(ctx, `SELECT request_hash, status, response, created_at FROM idempotency_keys
			WHERE tenant = $1 AND key = $2`, tenant, key).Scan(&rec.RequestHash, &rec.Status, &resp, &rec.CreatedAt)
		if err == nil {
			rec.Response, rec.CreatedAt = resp, rec.CreatedAt.UTC()
			return rec, false, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return rec, false, err
		}
	}
	return rec, false, fmt.Errorf("key %q keeps vanishing", key)
}

// CompleteIdempotency stores the answer of key's reservation. Returns
// store.ErrNotFound or store.ErrConflict.
func (s *Store) CompleteIdempotency(ctx context.Context, key string, status int, response json.RawMessage) (err error) {
	defer wrap(&err, "complete idempotency key")
	tag, err := s.pool.Exec(ctx, `UPDATE idempotency_keys SET status = $3, response = $4
		WHERE tenant = $1 AND key = $2 AND status = 0`, store.Tenant(ctx), key, status, nullJSON(response))
	if err != nil || tag.RowsAffected() == 1 {
		return err
	}
	var one int
	err = s.pool.QueryRow(ctx, `SELECT 1 FROM idempotency_keys WHERE tenant = $1 AND key = $2`, store.Tenant(ctx), key).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return store.ErrNotFound
	}
	if err != nil {
		return err
	}
	return store.ErrConflict
}

// ReleaseIdempotency drops key's reservation while it is in flight.
func (s *Store) ReleaseIdempotency(ctx context.Context, key string) (err error) {
	defer wrap(&err, "release idempotency key")
	_, err = s.pool.Exec(ctx, `DELETE FROM idempotency_keys WHERE tenant = $1 AND key = $2 AND status = 0`, store.Tenant(ctx), key)
	return err
}

// SweepIdempotency deletes the keys of every tenant created before before.
func (s *Store) SweepIdempotency(ctx context.Context, before time.Time) (n int64, err error) {
	defer wrap(&err, "sweep idempotency keys")
	tag, err := s.pool.Exec(ctx, `DELETE FROM idempotency_keys WHERE created_at < $1`, before)
	return tag.RowsAffected(), err
}
