package pg

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/subagentd/subagentd/internal/store"
)

type inboxRow struct {
	ID        string    `db:"id"`
	ChildID   string    `db:"child_id"`
	TaskID    string    `db:"task_id"`
	Content   []byte    `db:"content"`
	Source    []byte    `db:"source"`
	Quiet     bool      `db:"quiet"`
	CreatedAt time.Time `db:"created_at"`
}

// Enqueue stores an accepted followup; a zero CreatedAt is now. Returns
// store.ErrConflict if the id exists, in any tenant.
func (s *Store) Enqueue(ctx context.Context, m store.InboxMessage) (err error) {
	defer wrap(&err, "enqueue %q for %q", m.ID, m.ChildID)
	_, err = s.pool.Exec(ctx, `INSERT INTO inbox (tenant, id, child_id, task_id, content, source, quiet, created_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
		store.Tenant(ctx), m.ID, m.ChildID, m.TaskID, nullJSON(m.Content), nullJSON(m.Source), m.Quiet, now(m.CreatedAt))
	return err
}

// Pending returns the child's undelivered messages in acceptance order, at
// most 1000.
func (s *Store) Pending(ctx context.Context, childID string) (_ []store.InboxMessage, err error) {
	defer wrap(&err, "read inbox of %q", childID)
	rows, _ := s.pool.Query(ctx, `SELECT id, child_id, task_id, content, source, quiet, created_at FROM inbox
		WHERE tenant = $1 AND child_id = $2 ORDER BY pos LIMIT $3`, store.Tenant(ctx), childID, maxLimit)
	list, err := pgx.CollectRows(rows, pgx.RowToStructByName[inboxRow])
	if err != nil {
		return nil, err
	}
	out := make([]store.InboxMessage, len(list))
	for i, r := range list {
		out[i] = store.InboxMessage{ID: r.ID, ChildID: r.ChildID, TaskID: r.TaskID, Content: r.Content, Source: r.Source,
			Quiet: r.Quiet, CreatedAt: r.CreatedAt.UTC()}
	}
	return out, nil
}

// Ack removes the child's delivered messages ids; unknown ids are ignored.
func (s *Store) Ack(ctx context.Context, childID string, ids ...string) (err error) {
	defer wrap(&err, "ack %d messages of %q", len(ids), childID)
	_, err = s.pool.Exec(ctx, `DELETE FROM inbox WHERE tenant = $1 AND child_id = $2 AND id = ANY($3)`,
		store.Tenant(ctx), childID, ids)
	return err
}

// PendingChildren lists the children of every tenant with undelivered
// messages, ordered by their oldest message's acceptance, at most 1000.
func (s *Store) PendingChildren(ctx context.Context) (_ []store.PendingChild, err error) {
	defer wrap(&err, "list children with pending messages")
	rows, _ := s.pool.Query(ctx, `SELECT tenant, child_id FROM inbox
		GROUP BY tenant, child_id ORDER BY min(pos) LIMIT $1`, maxLimit)
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.PendingChild, error) {
		var pc store.PendingChild
		err := row.Scan(&pc.Tenant, &pc.ChildID)
		return pc, err
	})
}
