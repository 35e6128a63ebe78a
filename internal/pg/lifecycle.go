package pg

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/subagentd/subagentd/internal/store"
)

type lifecycleRow struct {
	ID       int64     `db:"id"`
	Type     string    `db:"type"`
	ParentID string    `db:"parent_id"`
	RunID    string    `db:"run_id"`
	Time     time.Time `db:"time"`
	Payload  []byte    `db:"payload"`
}

// AppendLifecycle appends e with the next id; a zero Time is now.
func (s *Store) AppendLifecycle(ctx context.Context, e store.LifecycleEvent) (_ store.LifecycleEvent, err error) {
	defer wrap(&err, "append lifecycle event %q", e.Type)
	err = s.commit(ctx, store.LifecycleTopic, func(tx pgx.Tx) error {
		e, err = appendLifecycle(ctx, tx, store.Tenant(ctx), e)
		return err
	})
	return e, err
}

// appendLifecycle inserts e with the next id from lifecycle_counter. The
// counter row stays locked until tx ends, so ids commit in order: a reader
// that sees id n can already see every id below it.
func appendLifecycle(ctx context.Context, tx pgx.Tx, tenant string, e store.LifecycleEvent) (store.LifecycleEvent, error) {
	err := tx.QueryRow(ctx, `
		WITH c AS (UPDATE lifecycle_counter SET last_id = last_id + 1 RETURNING last_id)
		INSERT INTO lifecycle_events (tenant, id, type, parent_id, run_id, time, payload)
		SELECT $1, c.last_id, $2, $3, $4, $5, $6 FROM c
		RETURNING id, time`,
		tenant, e.Type, e.ParentID, e.RunID, now(e.Time), nullJSON(e.Payload)).Scan(&e.ID, &e.Time)
	e.Time = e.Time.UTC()
	return e, err
}

// LastLifecycleID returns the ID of the tenant's newest lifecycle event, 0
// when it has none (one index probe).
func (s *Store) LastLifecycleID(ctx context.Context) (id int64, err error) {
	defer wrap(&err, "read the last lifecycle id")
	err = s.pool.QueryRow(ctx, `SELECT coalesce(max(id), 0) FROM lifecycle_events WHERE tenant = $1`, store.Tenant(ctx)).Scan(&id)
	return id, err
}

// Lifecycle returns the tenant's events with ID > f.After matching f, in id
// order.
func (s *Store) Lifecycle(ctx context.Context, f store.LifecycleFilter) (_ []store.LifecycleEvent, err error) {
	defer wrap(&err, "read lifecycle after %d", f.After)
	var q query
	q.and("tenant = ?", store.Tenant(ctx))
	q.and("id > ?", f.After)
	if f.ParentID != "" {
		q.and("parent_id = ?", f.ParentID)
	}
	if len(f.Types) > 0 {
		q.and("type = ANY(?)", f.Types)
	}
	rows, _ := s.pool.Query(ctx, q.sql("id, type, parent_id, run_id, time, payload", "lifecycle_events", "id", limit(f.Limit)), q.args...)
	list, err := pgx.CollectRows(rows, pgx.RowToStructByName[lifecycleRow])
	if err != nil {
		return nil, err
	}
	out := make([]store.LifecycleEvent, len(list))
	for i, r := range list {
		out[i] = store.LifecycleEvent{ID: r.ID, Type: r.Type, ParentID: r.ParentID, RunID: r.RunID, Time: r.Time.UTC(), Payload: r.Payload}
	}
	return out, nil
}
