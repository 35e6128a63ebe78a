package pg

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/subagentd/subagentd/internal/store"
)

const webhookCols = `tenant, id, url, events, description, enabled, disabled_reason, secret, prev_secret,
	prev_secret_until, created_at, cursor, retry_event, attempts, next_attempt_at, owner, lease_until,
	push_task, push_config, push_authorization, push_token`

type webhookRow struct {
	Tenant          string     `db:"tenant"`
	ID              string     `db:"id"`
	URL             string     `db:"url"`
	Events          []string   `db:"events"`
	Description     string     `db:"description"`
	Enabled         bool       `db:"enabled"`
	DisabledReason  string     `db:"disabled_reason"`
	Secret          string     `db:"secret"`
	PrevSecret      string     `db:"prev_secret"`
	PrevSecretUntil *time.Time `db:"prev_secret_until"`
	CreatedAt       time.Time  `db:"created_at"`
	Cursor          int64      `db:"cursor"`
	RetryEvent      int64      `db:"retry_event"`
	Attempts        int        `db:"attempts"`
	NextAttemptAt   *time.Time `db:"next_attempt_at"`
	Owner           string     `db:"owner"`
	LeaseUntil      *time.Time `db:"lease_until"`
	PushTask        string     `db:"push_task"`
	PushConfig      string     `db:"push_config"`
	PushAuth        string     `db:"push_authorization"`
	PushToken       string     `db:"push_token"`
}

func (r webhookRow) webhook() store.Webhook {
	var push *store.WebhookPush
	if r.PushTask != "" {
		push = &store.WebhookPush{TaskID: r.PushTask, ConfigID: r.PushConfig, Authorization: r.PushAuth, Token: r.PushToken}
	}
	return store.Webhook{Push: push,
		ID: r.ID, Tenant: r.Tenant, URL: r.URL, Events: r.Events, Description: r.Description,
		Enabled: r.Enabled, DisabledReason: r.DisabledReason, Secret: r.Secret, PrevSecret: r.PrevSecret,
		PrevSecretUntil: fromDB(r.PrevSecretUntil), CreatedAt: r.CreatedAt.UTC(), Cursor: r.Cursor,
		RetryEvent: r.RetryEvent, Attempts: r.Attempts, NextAttemptAt: fromDB(r.NextAttemptAt),
		Owner: r.Owner, LeaseUntil: fromDB(r.LeaseUntil),
	}
}

// collectWebhooks reads webhook rows.
func collectWebhooks(rows pgx.Rows) ([]store.Webhook, error) {
	list, err := pgx.CollectRows(rows, pgx.RowToStructByName[webhookRow])
	if err != nil {
		return nil, err
	}
	out := make([]store.Webhook, len(list))
	for i, r := range list {
		out[i] = r.webhook()
	}
	return out, nil
}

// oneWebhook reads exactly one webhook row; none is store.ErrNotFound.
func oneWebhook(rows pgx.Rows) (store.Webhook, error) {
	r, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[webhookRow])
	return r.webhook(), err
}

// CreateWebhook stores w with Cursor at the newest committed lifecycle
// id: the counter row's value, which every id committed later exceeds
// (ids are taken from it under its row lock).
func (s *Store) CreateWebhook(ctx context.Context, w store.Webhook) (_ store.Webhook, err error) {
	defer wrap(&err, "create webhook %q", w.ID)
	events := w.Events
	if events == nil {
		events = []string{}
	}
	var push store.WebhookPush
	if w.Push != nil {
		push = *w.Push
	}
	rows, _ := s.pool.Query(ctx, `WITH ins AS (
		INSERT INTO webhook_endpoints (tenant, id, url, events, description, enabled, disabled_reason, secret,
			prev_secret, prev_secret_until, created_at, cursor, push_task, push_config, push_authorization, push_token)
		SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, last_id, $14, $15, $16, $17 FROM lifecycle_counter
		RETURNING `+webhookCols+`), wake AS (SELECT pg_notify($12, $13))
		SELECT ins.* FROM ins, wake`,
		store.Tenant(ctx), w.ID, w.URL, events, w.Description, w.Enabled, w.DisabledReason, w.Secret,
		w.PrevSecret, nullTime(w.PrevSecretUntil), now(w.CreatedAt), notifyChannel, store.WebhooksTopic,
		push.TaskID, push.ConfigID, push.Authorization, push.Token)
	return oneWebhook(rows)
}

// GetWebhook returns one endpoint. Returns store.ErrNotFound.
func (s *Store) GetWebhook(ctx context.Context, id string) (_ store.Webhook, err error) {
	defer wrap(&err, "get webhook %q", id)
	rows, _ := s.pool.Query(ctx, `SELECT `+webhookCols+` FROM webhook_endpoints WHERE tenant = $1 AND id = $2`,
		store.Tenant(ctx), id)
	return oneWebhook(rows)
}

// ListWebhooks returns the tenant's endpoints not scoped to a task by
// (CreatedAt, ID).
func (s *Store) ListWebhooks(ctx context.Context) (_ []store.Webhook, err error) {
	defer wrap(&err, "list webhooks")
	rows, _ := s.pool.Query(ctx, `SELECT `+webhookCols+` FROM webhook_endpoints WHERE tenant = $1 AND push_task = ''
		ORDER BY created_at, id LIMIT $2`, store.Tenant(ctx), maxLimit)
	return collectWebhooks(rows)
}

// TaskWebhooks returns the tenant's endpoints scoped to task taskID by
// (CreatedAt, ID); the term that push_task is not empty lets a generic plan use the
// partial index webhook_endpoints_push_idx.
func (s *Store) TaskWebhooks(ctx context.Context, taskID string) (_ []store.Webhook, err error) {
	defer wrap(&err, "list the webhooks of task %q", taskID)
	if taskID == "" {
		return []store.Webhook{}, nil
	}
	rows, _ := s.pool.Query(ctx, `SELECT `+webhookCols+` FROM webhook_endpoints WHERE tenant = $1 AND push_task = $2 AND push_task <> ''
		ORDER BY created_at, id LIMIT $3`, store.Tenant(ctx), taskID, maxLimit)
	return collectWebhooks(rows)
}

// UpdateWebhook applies u in one statement. Returns store.ErrNotFound.
func (s *Store) UpdateWebhook(ctx context.Context, id string, u store.WebhookUpdate) (_ store.Webhook, err error) {
	defer wrap(&err, "update webhook %q", id)
	// $6: NULL keeps enabled; true re-enables (clearing the reason and
	// the retry state) and false disables "manual", each only when it
	// changes the state.
	rows, _ := s.pool.Query(ctx, `WITH upd AS (
		UPDATE webhook_endpoints SET
			url = coalesce($3, url),
			events = coalesce($4, events),
			description = coalesce($5, description),
			enabled = coalesce($6, enabled),
			disabled_reason = CASE WHEN $6 IS NULL OR $6 = enabled THEN disabled_reason
				WHEN $6 THEN '' ELSE 'manual' END,
			retry_event = CASE WHEN $6 AND NOT enabled THEN 0 ELSE retry_event END,
			attempts = CASE WHEN $6 AND NOT enabled THEN 0 ELSE attempts END,
			next_attempt_at = CASE WHEN $6 AND NOT enabled THEN NULL ELSE next_attempt_at END,
			prev_secret = CASE WHEN $7 = '' THEN prev_secret ELSE secret END,
			prev_secret_until = CASE WHEN $7 = '' THEN prev_secret_until ELSE $8 END,
			secret = CASE WHEN $7 = '' THEN secret ELSE $7 END
		WHERE tenant = $1 AND id = $2
		RETURNING `+webhookCols+`), wake AS (SELECT pg_notify($9, $10))
		SELECT upd.* FROM upd, wake`,
		store.Tenant(ctx), id, u.URL, u.Events, u.Description, u.Enabled, u.Secret, nullTime(u.PrevSecretUntil),
		notifyChannel, store.WebhooksTopic)
	return oneWebhook(rows)
}

// DeleteWebhook removes the endpoint; its deliveries go with it (ON
// DELETE CASCADE). Returns store.ErrNotFound.
func (s *Store) DeleteWebhook(ctx context.Context, id string) (err error) {
	defer wrap(&err, "delete webhook %q", id)
	tag, err := s.pool.Exec(ctx, `DELETE FROM webhook_endpoints WHERE tenant = $1 AND id = $2`, store.Tenant(ctx), id)
	if err == nil && tag.RowsAffected() == 0 {
		return pgx.ErrNoRows
	}
	return err
}

// ClaimWebhooks leases to p.Owner the enabled endpoints with events after
// their cursor, a due retry and a free, lapsed or own lease. Rows another
// claimer has locked are skipped (FOR UPDATE SKIP LOCKED), so concurrent
// claims never take one endpoint twice.
func (s *Store) ClaimWebhooks(ctx context.Context, p store.ClaimWebhooksParams) (_ []store.Webhook, err error) {
	defer wrap(&err, "claim webhooks for %q", p.Owner)
	rows, _ := s.pool.Query(ctx, `UPDATE webhook_endpoints SET owner = $1, lease_until = $3
		WHERE id IN (
			SELECT w.id FROM webhook_endpoints w
			WHERE w.enabled
			  AND (w.owner = '' OR w.owner = $1 OR w.lease_until < $2)
			  AND (w.next_attempt_at IS NULL OR w.next_attempt_at <= $2)
			  AND EXISTS (SELECT 1 FROM lifecycle_events e WHERE e.tenant = w.tenant AND e.id > w.cursor)
			ORDER BY w.id LIMIT $4
			FOR UPDATE SKIP LOCKED)
		RETURNING `+webhookCols, p.Owner, p.Now, p.Until, limit(p.Limit))
	return collectWebhooks(rows)
}

// AdvanceWebhook records p, fenced by p.Owner's lease, and adds
// p.Delivery in the same statement (one round trip per delivery: the
// deliverer of an endpoint waits for it before the next attempt). Returns
// store.ErrFenced or store.ErrNotFound.
func (s *Store) AdvanceWebhook(ctx context.Context, p store.AdvanceWebhookParams) (err error) {
	defer wrap(&err, "advance webhook %q", p.ID)
	d := p.Delivery
	if d == nil {
		d = &store.WebhookDelivery{}
	}
	var updated bool
	err = s.pool.QueryRow(ctx, `WITH upd AS (
		UPDATE webhook_endpoints SET cursor = greatest(cursor, $3), retry_event = $4, attempts = $5,
			next_attempt_at = $6, lease_until = $7,
			enabled = enabled AND $8 = '', disabled_reason = CASE WHEN $8 = '' THEN disabled_reason ELSE $8 END
		WHERE id = $1 AND owner = $2
		RETURNING tenant), ins AS (
		INSERT INTO webhook_deliveries (tenant, id, webhook_id, event_id, type, attempt, status, http_status, error,
			latency_ms, at, body)
		SELECT tenant, $10, $1, $11, $12, $13, $14, $15, $16, $17, $18, $19 FROM upd WHERE $9)
		SELECT EXISTS (SELECT 1 FROM upd)`,
		p.ID, p.Owner, p.Cursor, p.RetryEvent, p.Attempts, nullTime(p.NextAttemptAt), p.Until, p.Disable,
		p.Delivery != nil, d.ID, d.EventID, d.Type, d.Attempt, d.Status, d.HTTPStatus, d.Error,
		d.Latency.Milliseconds(), now(d.At), d.Body).Scan(&updated)
	if err != nil || updated {
		return err
	}
	var owner string
	if err := s.pool.QueryRow(ctx, `SELECT owner FROM webhook_endpoints WHERE id = $1`, p.ID).Scan(&owner); err != nil {
		return err
	}
	return fmt.Errorf("%w: held by %q", store.ErrFenced, owner)
}

// insertDelivery adds d to the delivery log of tenant.
func insertDelivery(ctx context.Context, q interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}, tenant string, d store.WebhookDelivery) error {
	_, err := q.Exec(ctx, `INSERT INTO webhook_deliveries (tenant, id, webhook_id, event_id, type, attempt, status,
		http_status, error, latency_ms, at, body) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`,
		tenant, d.ID, d.WebhookID, d.EventID, d.Type, d.Attempt, d.Status, d.HTTPStatus, d.Error,
		d.Latency.Milliseconds(), now(d.At), d.Body)
	return err
}

// ReleaseWebhook drops owner's lease on the endpoint.
func (s *Store) ReleaseWebhook(ctx context.Context, id, owner string) (err error) {
	defer wrap(&err, "release webhook %q of %q", id, owner)
	_, err = s.pool.Exec(ctx, `UPDATE webhook_endpoints SET owner = '', lease_until = NULL WHERE id = $1 AND owner = $2`, id, owner)
	return err
}

// WebhooksEnabled reports whether any tenant has an enabled endpoint.
func (s *Store) WebhooksEnabled(ctx context.Context) (enabled bool, err error) {
	defer wrap(&err, "look for enabled webhooks")
	err = s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM webhook_endpoints WHERE enabled)`).Scan(&enabled)
	return enabled, err
}

// WebhookBacklog counts, per enabled endpoint, at most upTo of its
// tenant's lifecycle events after its cursor (an index range of
// lifecycle_events_replay_idx) and finds the oldest of them (one probe).
func (s *Store) WebhookBacklog(ctx context.Context, upTo int) (_ store.WebhookBacklog, err error) {
	defer wrap(&err, "read the webhook backlog")
	var b store.WebhookBacklog
	var oldest *time.Time
	err = s.pool.QueryRow(ctx, `SELECT
		coalesce(sum((SELECT count(*) FROM (SELECT 1 FROM lifecycle_events e
			WHERE e.tenant = w.tenant AND e.id > w.cursor LIMIT $1) c)), 0),
		min((SELECT e.time FROM lifecycle_events e WHERE e.tenant = w.tenant AND e.id > w.cursor ORDER BY e.id LIMIT 1))
		FROM webhook_endpoints w WHERE w.enabled`, upTo).Scan(&b.Events, &oldest)
	b.Oldest = fromDB(oldest)
	return b, err
}

// AddWebhookDelivery adds d to the endpoint's delivery log. Returns
// store.ErrNotFound.
func (s *Store) AddWebhookDelivery(ctx context.Context, d store.WebhookDelivery) (err error) {
	defer wrap(&err, "add delivery %q of webhook %q", d.ID, d.WebhookID)
	if _, err := s.GetWebhook(ctx, d.WebhookID); err != nil {
		return err
	}
	err = insertDelivery(ctx, s.pool, store.Tenant(ctx), d)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == pgerrcode.ForeignKeyViolation {
		return pgx.ErrNoRows // deleted since
	}
	return err
}

const deliveryCols = `id, webhook_id, event_id, type, attempt, status, http_status, error, latency_ms, at, body`

type deliveryRow struct {
	ID         string    `db:"id"`
	WebhookID  string    `db:"webhook_id"`
	EventID    string    `db:"event_id"`
	Type       string    `db:"type"`
	Attempt    int       `db:"attempt"`
	Status     string    `db:"status"`
	HTTPStatus int       `db:"http_status"`
	Error      string    `db:"error"`
	LatencyMs  int64     `db:"latency_ms"`
	At         time.Time `db:"at"`
	Body       []byte    `db:"body"`
}

func (r deliveryRow) delivery() store.WebhookDelivery {
	return store.WebhookDelivery{
		ID: r.ID, WebhookID: r.WebhookID, EventID: r.EventID, Type: r.Type, Attempt: r.Attempt, Status: r.Status,
		HTTPStatus: r.HTTPStatus, Error: r.Error, Latency: time.Duration(r.LatencyMs) * time.Millisecond,
		At: r.At.UTC(), Body: r.Body,
	}
}

// WebhookDeliveries returns the endpoint's deliveries, newest first.
// Returns store.ErrNotFound for an unknown endpoint or f.BeforeID.
func (s *Store) WebhookDeliveries(ctx context.Context, f store.WebhookDeliveryFilter) (_ []store.WebhookDelivery, err error) {
	defer wrap(&err, "list deliveries of webhook %q", f.WebhookID)
	tenant := store.Tenant(ctx)
	if _, err := s.GetWebhook(ctx, f.WebhookID); err != nil {
		return nil, err
	}
	var q query
	q.and("tenant = ?", tenant)
	q.and("webhook_id = ?", f.WebhookID)
	if f.BeforeID != "" {
		var pos int64
		if err := s.pool.QueryRow(ctx, `SELECT pos FROM webhook_deliveries WHERE tenant = $1 AND webhook_id = $2 AND id = $3`,
			tenant, f.WebhookID, f.BeforeID).Scan(&pos); err != nil {
			return nil, err
		}
		q.and("pos < ?", pos)
	}
	rows, _ := s.pool.Query(ctx, q.sql(deliveryCols, "webhook_deliveries", "pos DESC", limit(f.Limit)), q.args...)
	list, err := pgx.CollectRows(rows, pgx.RowToStructByName[deliveryRow])
	if err != nil {
		return nil, err
	}
	out := make([]store.WebhookDelivery, len(list))
	for i, r := range list {
		out[i] = r.delivery()
	}
	return out, nil
}

// GetWebhookDelivery returns one delivery. Returns store.ErrNotFound.
func (s *Store) GetWebhookDelivery(ctx context.Context, webhookID, id string) (_ store.WebhookDelivery, err error) {
	defer wrap(&err, "get delivery %q of webhook %q", id, webhookID)
	rows, _ := s.pool.Query(ctx, `SELECT `+deliveryCols+` FROM webhook_deliveries WHERE tenant = $1 AND webhook_id = $2 AND id = $3`,
		store.Tenant(ctx), webhookID, id)
	r, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[deliveryRow])
	return r.delivery(), err
}

// SweepWebhookDeliveries deletes the deliveries of every tenant made
// before before.
func (s *Store) SweepWebhookDeliveries(ctx context.Context, before time.Time) (_ int64, err error) {
	defer wrap(&err, "sweep webhook deliveries")
	tag, err := s.pool.Exec(ctx, `DELETE FROM webhook_deliveries WHERE at < $1`, before)
	return tag.RowsAffected(), err
}
