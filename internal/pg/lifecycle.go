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
	RootID   string    `db:"root_id"`
	RunID    string    `db:"run_id"`
	Time     time.Time `db:"time"`
	Payload  []byte    `db:"payload"`
}

// AppendLifecycle appends e with the next id; a zero Time is now.
func (s *Store) AppendLifecycle(ctx context.Context, e store.LifecycleEvent) (_ store.LifecycleEvent, err error) {
	defer wrap(&err, "append lifecycle event %q", e.Type)
	err = s.w.do(ctx, &op{event: &e, tenant: store.Tenant(ctx)})
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
// order: from the events this Store committed lately when they are provably
// what the table holds (see recent), else from the table.
func (s *Store) Lifecycle(ctx context.Context, f store.LifecycleFilter) (_ []store.LifecycleEvent, err error) {
	tenant := store.Tenant(ctx)
	if out, ok := s.recent.read(tenant, f); ok {
		return out, nil
	}
	defer wrap(&err, "read lifecycle after %d", f.After)
	var q query
	q.and("tenant = ?", tenant)
	q.and("id > ?", f.After)
	if f.ParentID != "" {
		q.and("parent_id = ?", f.ParentID)
	}
	if f.RootID != "" {
		q.and("root_id = ?", f.RootID)
	}
	if len(f.Types) > 0 {
		q.and("type = ANY(?)", f.Types)
	}
	rows, _ := s.pool.Query(ctx, q.sql("id, type, parent_id, root_id, run_id, time, payload", "lifecycle_events", "id", limit(f.Limit)), q.args...)
	list, err := pgx.CollectRows(rows, pgx.RowToStructByName[lifecycleRow])
	if err != nil {
		return nil, err
	}
	out := make([]store.LifecycleEvent, len(list))
	for i, r := range list {
		out[i] = store.LifecycleEvent{ID: r.ID, Type: r.Type, ParentID: r.ParentID, RootID: r.RootID, RunID: r.RunID, Time: r.Time.UTC(), Payload: r.Payload}
	}
	return out, nil
}
