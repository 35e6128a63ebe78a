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

// ClaimResident makes owner the holder of sessionID's lease when it is
// free, owner's, or lapsed before now: one statement, so two replicas
// claiming at once never both win.
func (s *Store) ClaimResident(ctx context.Context, p store.ClaimParams) (_ store.Resident, claimed bool, err error) {
	sessionID, owner, now, until := p.SessionID, p.Owner, p.Now, p.Until
	defer wrap(&err, "claim resident %q for %q", sessionID, owner)
	tenant := store.Tenant(ctx)
	r := store.Resident{Tenant: tenant, SessionID: sessionID}
	err = s.pool.QueryRow(ctx, `INSERT INTO residents AS r (tenant, session_id, owner, lease_until) VALUES ($1, $2, $3, $5)
		ON CONFLICT (tenant, session_id) DO UPDATE SET owner = EXCLUDED.owner, lease_until = EXCLUDED.lease_until
		WHERE r.owner = $3 OR r.lease_until < $4
		RETURNING owner, lease_until`, tenant, sessionID, owner, now, until).Scan(&r.Owner, &r.LeaseUntil)
	if errors.Is(err, pgx.ErrNoRows) {
		r, err = s.GetResident(ctx, sessionID)
		if errors.Is(err, store.ErrNotFound) {
			// Released between the two statements: claim again.
			return s.ClaimResident(ctx, p)
		}
		return r, false, err
	}
	r.LeaseUntil = r.LeaseUntil.UTC()
	return r, err == nil, err
}

// GetResident returns sessionID's lease. Returns store.ErrNotFound.
func (s *Store) GetResident(ctx context.Context, sessionID string) (r store.Resident, err error) {
	defer wrap(&err, "get resident %q", sessionID)
	r = store.Resident{Tenant: store.Tenant(ctx), SessionID: sessionID}
	err = s.pool.QueryRow(ctx, `SELECT owner, lease_until FROM residents WHERE tenant = $1 AND session_id = $2`,
		r.Tenant, sessionID).Scan(&r.Owner, &r.LeaseUntil)
	r.LeaseUntil = r.LeaseUntil.UTC()
	return r, err
}

// ReleaseResident drops sessionID's lease if owner holds it.
func (s *Store) ReleaseResident(ctx context.Context, sessionID, owner string) (err error) {
	defer wrap(&err, "release resident %q of %q", sessionID, owner)
	_, err = s.pool.Exec(ctx, `DELETE FROM residents WHERE tenant = $1 AND session_id = $2 AND owner = $3`,
		store.Tenant(ctx), sessionID, owner)
	return err
}

// ExpiredResidents returns the leases of every tenant that ended before
// now, oldest first, at most 1000.
func (s *Store) ExpiredResidents(ctx context.Context, now time.Time) (_ []store.Resident, err error) {
	defer wrap(&err, "list expired residents")
	rows, _ := s.pool.Query(ctx, `SELECT tenant, session_id, owner, lease_until FROM residents
		WHERE lease_until < $1 ORDER BY lease_until, tenant, session_id LIMIT $2`, now, maxLimit)
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.Resident, error) {
		var r store.Resident
		err := row.Scan(&r.Tenant, &r.SessionID, &r.Owner, &r.LeaseUntil)
		r.LeaseUntil = r.LeaseUntil.UTC()
		return r, err
	})
}

// Driving returns which of sessionIDs have a live lease and an open turn.
func (s *Store) Driving(ctx context.Context, sessionIDs []string, now time.Time) (_ map[string]bool, err error) {
	defer wrap(&err, "list driven sessions")
	rows, _ := s.pool.Query(ctx, `SELECT r.session_id FROM residents r
		WHERE r.tenant = $1 AND r.session_id = ANY($2) AND r.lease_until >= $3
		  AND (SELECT e.type FROM session_events e
		       WHERE e.session_id = r.session_id AND e.type IN ($4, $5)
		       ORDER BY e.seq DESC LIMIT 1) = $4`,
		store.Tenant(ctx), sessionIDs[:min(len(sessionIDs), maxLimit)], now, store.TurnStartEvent, store.TurnEndEvent)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	out := make(map[string]bool, len(ids))
	for _, id := range ids {
		out[id] = true
	}
	return out, nil
}

// fenceCond is the condition, on a statement whose $1 is the tenant, that
// the session named by col is still leased to the owner in parameter
// ownerParam, or that no owner is given (an unfenced write).
func fenceCond(col, ownerParam string) string {
	return fmt.Sprintf(`(%[2]s = '' OR EXISTS (SELECT 1 FROM residents f
		WHERE f.tenant = $1 AND f.session_id = %[1]s AND f.owner = %[2]s))`, col, ownerParam)
}

// fencedError is store.ErrFenced for a write of owner to session id.
func fencedError(owner, id string) error {
	return fmt.Errorf("%q no longer holds the lease of %q: %w", owner, id, store.ErrFenced)
}

// SendControl stores c unanswered and wakes its owner, in one transaction.
func (s *Store) SendControl(ctx context.Context, c store.Control) (err error) {
	defer wrap(&err, "send control %q to %q", c.ID, c.Owner)
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO controls (tenant, id, target, op, payload, owner, created_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7)`, store.Tenant(ctx), c.ID, c.Target, c.Op, nullJSON(c.Payload), c.Owner,
			now(c.CreatedAt)); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, notifyChannel, store.ControlTopic(c.Owner))
		return err
	})
}

const controlCols = `tenant, id, target, op, payload, owner, created_at, answer, answered_at`

type controlRow struct {
	Tenant     string     `db:"tenant"`
	ID         string     `db:"id"`
	Target     string     `db:"target"`
	Op         string     `db:"op"`
	Payload    []byte     `db:"payload"`
	Owner      string     `db:"owner"`
	CreatedAt  time.Time  `db:"created_at"`
	Answer     []byte     `db:"answer"`
	AnsweredAt *time.Time `db:"answered_at"`
}

func (r controlRow) control() store.Control {
	return store.Control{ID: r.ID, Tenant: r.Tenant, Target: r.Target, Op: r.Op, Payload: r.Payload, Owner: r.Owner,
		CreatedAt: r.CreatedAt.UTC(), Answer: r.Answer, AnsweredAt: fromDB(r.AnsweredAt)}
}

// Controls returns owner's unanswered requests of every tenant, oldest
// first, at most 1000.
func (s *Store) Controls(ctx context.Context, owner string) (_ []store.Control, err error) {
	defer wrap(&err, "list controls of %q", owner)
	rows, _ := s.pool.Query(ctx, `SELECT `+controlCols+` FROM controls
		WHERE owner = $1 AND answered_at IS NULL ORDER BY created_at, id LIMIT $2`, owner, maxLimit)
	list, err := pgx.CollectRows(rows, pgx.RowToStructByName[controlRow])
	if err != nil {
		return nil, err
	}
	out := make([]store.Control, len(list))
	for i, r := range list {
		out[i] = r.control()
	}
	return out, nil
}

// AnswerControl stores the answer to request id and wakes its requester,
// in one transaction. Returns store.ErrNotFound or store.ErrConflict.
func (s *Store) AnswerControl(ctx context.Context, id string, answer json.RawMessage) (err error) {
	defer wrap(&err, "answer control %q", id)
	tenant := store.Tenant(ctx)
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var answered bool
		if err := tx.QueryRow(ctx, `SELECT answered_at IS NOT NULL FROM controls WHERE tenant = $1 AND id = $2 FOR UPDATE`,
			tenant, id).Scan(&answered); err != nil {
			return err
		}
		if answered {
			return fmt.Errorf("answered already: %w", store.ErrConflict)
		}
		if _, err := tx.Exec(ctx, `UPDATE controls SET answer = $3, answered_at = now() WHERE tenant = $1 AND id = $2`,
			tenant, id, nullJSON(answer)); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, notifyChannel, store.AnswerTopic(id))
		return err
	})
}

// GetControl returns one request. Returns store.ErrNotFound.
func (s *Store) GetControl(ctx context.Context, id string) (_ store.Control, err error) {
	defer wrap(&err, "get control %q", id)
	rows, _ := s.pool.Query(ctx, `SELECT `+controlCols+` FROM controls WHERE tenant = $1 AND id = $2`, store.Tenant(ctx), id)
	row, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[controlRow])
	return row.control(), err
}

// DeleteControl removes request id; unknown ids are ignored.
func (s *Store) DeleteControl(ctx context.Context, id string) (err error) {
	defer wrap(&err, "delete control %q", id)
	_, err = s.pool.Exec(ctx, `DELETE FROM controls WHERE tenant = $1 AND id = $2`, store.Tenant(ctx), id)
	return err
}

// SweepControls deletes the requests of every tenant sent before before.
func (s *Store) SweepControls(ctx context.Context, before time.Time) (n int64, err error) {
	defer wrap(&err, "sweep controls")
	tag, err := s.pool.Exec(ctx, `DELETE FROM controls WHERE created_at < $1`, before)
	return tag.RowsAffected(), err
}
