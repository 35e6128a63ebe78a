package pg

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/subagentd/subagentd/internal/store"
)

const sessionCols = `id, parent_id, root_id, origin, delegation_depth, seed_length, cwd, label, provider, mode,
	agent_provider, agent_model, max_tokens, persona, created_at, wake_parent, limits`

type sessionRow struct {
	ID              string    `db:"id"`
	ParentID        string    `db:"parent_id"`
	RootID          string    `db:"root_id"`
	Origin          string    `db:"origin"`
	DelegationDepth int       `db:"delegation_depth"`
	SeedLength      int       `db:"seed_length"`
	Cwd             string    `db:"cwd"`
	Label           string    `db:"label"`
	Provider        string    `db:"provider"`
	Mode            string    `db:"mode"`
	AgentProvider   string    `db:"agent_provider"`
	AgentModel      string    `db:"agent_model"`
	MaxTokens       int       `db:"max_tokens"`
	Persona         *string   `db:"persona"`
	CreatedAt       time.Time `db:"created_at"`
	WakeParent      bool      `db:"wake_parent"`
	// Limits is the jsonb column limits: the header's, until
	// SetSessionLimits changes a root's.
	Limits store.Limits `db:"limits"`
}

func (r sessionRow) session() store.Session {
	return store.Session{
		ID: r.ID, ParentID: r.ParentID, RootID: r.RootID, Origin: r.Origin, DelegationDepth: r.DelegationDepth,
		SeedLength: r.SeedLength, Cwd: r.Cwd, Label: r.Label, Provider: r.Provider, Mode: r.Mode,
		AgentProvider: r.AgentProvider, AgentModel: r.AgentModel, MaxTokens: r.MaxTokens,
		Persona: r.Persona, CreatedAt: r.CreatedAt.UTC(), WakeParent: r.WakeParent, Limits: r.Limits.Stored(),
	}
}

// scanEvent reads a (seq, type, time, data) row, by position: cheaper than
// pgx's by-name mapping, which a resume pays for every event of the log.
func scanEvent(row pgx.CollectableRow) (store.Event, error) {
	var e store.Event
	var data []byte
	err := row.Scan(&e.Seq, &e.Type, &e.Time, &data)
	e.Time, e.Data = e.Time.UTC(), data
	return e, err
}

// CreateSession stores a new header; a zero CreatedAt is now. Returns
// store.ErrConflict if the id exists, in any tenant (ids are minted by the
// server and global).
func (s *Store) CreateSession(ctx context.Context, h store.Session) (err error) {
	defer wrap(&err, "create session %q", h.ID)
	tenant := store.Tenant(ctx)
	h.CreatedAt = now(h.CreatedAt)
	h.RootID = s.rootOf(ctx, h)
	gen := s.limits.generation()
	if err := s.w.do(ctx, &op{data: func(b *pgx.Batch) { queueCreate(b, tenant, h) }}); err != nil {
		return err
	}
	s.created(tenant, h, gen)
	return nil
}

// created keeps the header and the limits of session h, which this Store
// just created, so that neither is read back: a run's child is looked up,
// and its limits checked at every step, right after its creation. gen is
// the limits cache's generation before the write.
func (s *Store) created(tenant string, h store.Session, gen uint64) {
	s.headers.put(tenant, h)
	s.limits.put(tenant, h.ID, gen, h.Limits.Stored())
}

// CreateSessionWithEvents stores a new header and evs as the start of its
// log in one flush, so one commit. Returns store.ErrConflict as
// CreateSession, and an error (storing nothing) if an event is invalid.
func (s *Store) CreateSessionWithEvents(ctx context.Context, h store.Session, evs ...store.NewEvent) (out []store.Event, err error) {
	if len(evs) == 0 {
		return nil, s.CreateSession(ctx, h)
	}
	defer wrap(&err, "create session %q with %d events", h.ID, len(evs))
	if err := store.CheckEvents(evs); err != nil {
		return nil, err
	}
	tenant := store.Tenant(ctx)
	h.CreatedAt = now(h.CreatedAt)
	h.RootID = s.rootOf(ctx, h)
	gen := s.limits.generation()
	o := &op{topic: store.SessionTopic(h.ID), key: "s:" + h.ID}
	o.data = func(b *pgx.Batch) { queueCreateWithEvents(b, tenant, h, evs, &out) }
	if err = s.w.do(ctx, o); err != nil {
		return nil, err
	}
	s.created(tenant, h, gen)
	return out, nil
}

// rootOf is the root of a new session h: its RootID when set, itself for
// a root, else its parent's root, or its parent when that is not stored
// (or cannot be read now).
func (s *Store) rootOf(ctx context.Context, h store.Session) string {
	switch {
	case h.RootID != "":
		return h.RootID
	case h.ParentID == "":
		return h.ID
	}
	if p, err := s.GetSession(ctx, h.ParentID); err == nil && p.RootID != "" {
		return p.RootID
	}
	return h.ParentID
}

// queueCreate queues the insert of header h.
func queueCreate(b *pgx.Batch, tenant string, h store.Session) {
	b.Queue(`INSERT INTO sessions (tenant, `+sessionCols+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18)`,
		tenant, h.ID, h.ParentID, h.RootID, h.Origin, h.DelegationDepth, h.SeedLength, h.Cwd, h.Label,
		h.Provider, h.Mode, h.AgentProvider, h.AgentModel, h.MaxTokens, h.Persona, h.CreatedAt, h.WakeParent, limitsJSON(h.Limits))
}

// queueCreateWithEvents queues the insert of header h with evs as its log's
// first events, in one statement: the new row's last_seq is set as it is
// inserted, not bumped by a second update of it.
func queueCreateWithEvents(b *pgx.Batch, tenant string, h store.Session, evs []store.NewEvent, out *[]store.Event) {
	types, times, data := eventColumns(evs)
	b.Queue(`
		WITH s AS (
			INSERT INTO sessions (tenant, `+sessionCols+`, last_seq)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, cardinality($19::text[]) - 1)
			RETURNING id
		), ins AS (
			INSERT INTO session_events (tenant, session_id, seq, type, time, data)
			SELECT $1, s.id, e.n - 1, e.type, e.time, e.data::jsonb
			FROM s, unnest($19::text[], $20::timestamptz[], $21::text[]) WITH ORDINALITY AS e (type, time, data, n)
			RETURNING seq, type, time, data
		)
		SELECT seq, type, time, data FROM ins ORDER BY seq`,
		tenant, h.ID, h.ParentID, h.RootID, h.Origin, h.DelegationDepth, h.SeedLength, h.Cwd, h.Label,
		h.Provider, h.Mode, h.AgentProvider, h.AgentModel, h.MaxTokens, h.Persona, h.CreatedAt, h.WakeParent, limitsJSON(h.Limits),
		types, times, data,
	).Query(func(rows pgx.Rows) error {
		var err error
		*out, err = pgx.AppendRows(make([]store.Event, 0, len(evs)), rows, scanEvent)
		return err
	})
}

// GetSession returns one header, from the header cache when this Store
// stored or read it lately. Returns store.ErrNotFound.
func (s *Store) GetSession(ctx context.Context, id string) (_ store.Session, err error) {
	tenant := store.Tenant(ctx)
	if h, ok := s.headers.get(tenant, id); ok {
		return h, nil
	}
	defer wrap(&err, "get session %q", id)
	rows, _ := s.pool.Query(ctx, `SELECT `+sessionCols+` FROM sessions WHERE tenant = $1 AND id = $2`, tenant, id)
	row, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[sessionRow])
	if err != nil {
		return store.Session{}, err
	}
	h := row.session()
	s.headers.put(tenant, h)
	return h, nil
}

// DisposeSession marks session id disposed at at, keeping the first
// mark (sessions.disposed_at), and returns the mark. Returns
// store.ErrNotFound.
func (s *Store) DisposeSession(ctx context.Context, id string, at time.Time) (_ time.Time, err error) {
	defer wrap(&err, "dispose session %q", id)
	var mark time.Time
	err = s.pool.QueryRow(ctx, `UPDATE sessions SET disposed_at = COALESCE(disposed_at, $3)
		WHERE tenant = $1 AND id = $2 RETURNING disposed_at`, store.Tenant(ctx), id, at.UTC()).Scan(&mark)
	return mark.UTC(), err
}

// Disposed returns when session id was disposed, zero when it was not;
// never from the header cache, since disposal changes it. Returns
// store.ErrNotFound.
func (s *Store) Disposed(ctx context.Context, id string) (_ time.Time, err error) {
	defer wrap(&err, "read disposal of session %q", id)
	var mark *time.Time
	err = s.pool.QueryRow(ctx, `SELECT disposed_at FROM sessions WHERE tenant = $1 AND id = $2`,
		store.Tenant(ctx), id).Scan(&mark)
	if err != nil || mark == nil {
		return time.Time{}, err
	}
	return mark.UTC(), nil
}

// limitsJSON is l as the limits column holds it.
func limitsJSON(l store.Limits) []byte {
	b, _ := json.Marshal(l.Stored()) // pointers to numbers and times always marshal
	return b
}

// SessionLimits returns the limits stored with session id, never from the
// header cache, since a root's change. Returns store.ErrNotFound.
func (s *Store) SessionLimits(ctx context.Context, id string) (_ store.Limits, err error) {
	tenant := store.Tenant(ctx)
	l, gen, ok := s.limits.get(tenant, id)
	if ok {
		return l, nil
	}
	defer wrap(&err, "read limits of session %q", id)
	err = s.pool.QueryRow(ctx, `SELECT limits FROM sessions WHERE tenant = $1 AND id = $2`, tenant, id).Scan(&l)
	if err != nil {
		return store.Limits{}, err
	}
	l = l.Stored()
	s.limits.put(tenant, id, gen, l)
	return l, nil
}

// SetSessionLimits replaces the limits stored with session id, and wakes
// every replica's limits cache in the same statement; the cached header
// keeps those it was created with. Returns store.ErrNotFound.
func (s *Store) SetSessionLimits(ctx context.Context, id string, l store.Limits) (err error) {
	defer wrap(&err, "set limits of session %q", id)
	defer s.limits.forget()
	tag, err := s.pool.Exec(ctx, `WITH up AS (UPDATE sessions SET limits = $3 WHERE tenant = $1 AND id = $2 RETURNING id)
		SELECT pg_notify($4, $5) FROM up`,
		store.Tenant(ctx), id, limitsJSON(l), notifyChannel, limitsTopic)
	if err == nil && tag.RowsAffected() == 0 {
		err = store.ErrNotFound
	}
	return err
}

// PatchSessionLimits applies p to the limits stored with session id in
// one statement, which also wakes every replica's limits cache: jsonb's -
// and || change only the fields p names, so writers never undo each
// other's changes, and a field a newer replica wrote that this build does
// not know is kept. Returns store.ErrNotFound.
func (s *Store) PatchSessionLimits(ctx context.Context, id string, p store.LimitsPatch) (_ store.Limits, err error) {
	defer wrap(&err, "patch limits of session %q", id)
	defer s.limits.forget()
	clear := p.Clear
	if clear == nil {
		clear = []string{}
	}
	var l store.Limits
	err = s.pool.QueryRow(ctx, `WITH up AS (UPDATE sessions SET limits = (limits - $3::text[]) || $4::jsonb
			WHERE tenant = $1 AND id = $2 RETURNING limits)
		SELECT limits, pg_notify($5, $6) FROM up`,
		store.Tenant(ctx), id, clear, limitsJSON(p.Set), notifyChannel, limitsTopic).Scan(&l, nil)
	return l.Stored(), err
}

// SetTreePaused marks session id's tree paused or not and reports whether
// the mark changed, in one statement: of racing callers one changes it.
// Returns store.ErrNotFound.
func (s *Store) SetTreePaused(ctx context.Context, id string, paused bool) (_ bool, err error) {
	defer wrap(&err, "set tree paused of session %q", id)
	var changed bool
	err = s.pool.QueryRow(ctx, `WITH old AS (SELECT tree_paused FROM sessions WHERE tenant = $1 AND id = $2 FOR UPDATE)
		UPDATE sessions s SET tree_paused = $3 FROM old WHERE s.tenant = $1 AND s.id = $2
		RETURNING old.tree_paused <> $3`, store.Tenant(ctx), id, paused).Scan(&changed)
	return changed, err
}

// ListSessions returns headers ordered by (CreatedAt, ID). Returns
// store.ErrNotFound if f.AfterID names no session of the tenant.
func (s *Store) ListSessions(ctx context.Context, f store.SessionFilter) (_ []store.Session, err error) {
	defer wrap(&err, "list sessions")
	tenant := store.Tenant(ctx)
	var q query
	q.and("tenant = ?", tenant)
	if f.ParentID != nil {
		q.and("parent_id = ?", *f.ParentID)
	}
	if f.AfterID != "" {
		var created time.Time
		err := s.pool.QueryRow(ctx, `SELECT created_at FROM sessions WHERE tenant = $1 AND id = $2`, tenant, f.AfterID).Scan(&created)
		if err != nil {
			return nil, fmt.Errorf("cursor %q: %w", f.AfterID, err)
		}
		q.and("(created_at, id) > (?, ?)", created, f.AfterID)
	}
	rows, _ := s.pool.Query(ctx, q.sql(sessionCols, "sessions", "created_at, id", limit(f.Limit)), q.args...)
	list, err := pgx.CollectRows(rows, pgx.RowToStructByName[sessionRow])
	out := make([]store.Session, len(list))
	for i, r := range list {
		out[i] = r.session()
	}
	return out, err
}

// AppendEvents appends evs atomically with the next contiguous seqs. Returns
// store.ErrNotFound for an unknown session, and an error (appending nothing)
// if any Data is not valid JSON. A nil Data is stored as JSON null.
func (s *Store) AppendEvents(ctx context.Context, sessionID string, evs ...store.NewEvent) (out []store.Event, err error) {
	defer wrap(&err, "append %d events to session %q", len(evs), sessionID)
	tenant := store.Tenant(ctx)
	if err := store.CheckEvents(evs); err != nil {
		return nil, err
	}
	if len(evs) == 0 {
		return nil, s.sessionExists(ctx, tenant, sessionID)
	}
	owner := store.Owner(ctx)
	o := &op{topic: store.SessionTopic(sessionID), key: "s:" + sessionID}
	o.data = func(b *pgx.Batch) { queueAppend(b, o, tenant, sessionID, owner, evs, &out) }
	err = s.w.do(ctx, o)
	if owner != "" && errors.Is(err, store.ErrNotFound) && s.sessionExists(ctx, tenant, sessionID) == nil {
		// The session is there: the lease is not.
		return nil, fencedError(owner, sessionID)
	}
	return out, err
}

// queueAppend queues the insert of evs after the session's last seq, in one
// statement, whose callback sets *out; an unknown session fails o. Bumping sessions.last_seq locks the session row until commit, so
// concurrent appenders queue and seqs stay contiguous.
func queueAppend(b *pgx.Batch, o *op, tenant, sessionID, owner string, evs []store.NewEvent, out *[]store.Event) {
	types, times, data := eventColumns(evs)
	b.Queue(`
		WITH s AS (
			UPDATE sessions SET last_seq = last_seq + cardinality($3::text[]), `+addUsage("$7")+`
			WHERE tenant = $1 AND id = $2 AND `+fenceCond("$2", "$6")+`
			RETURNING last_seq - cardinality($3::text[]) AS before
		), ins AS (
			INSERT INTO session_events (tenant, session_id, seq, type, time, data)
			SELECT $1, $2, s.before + e.n, e.type, e.time, e.data::jsonb
			FROM s, unnest($3::text[], $4::timestamptz[], $5::text[]) WITH ORDINALITY AS e (type, time, data, n)
			RETURNING seq, type, time, data
		)
		SELECT seq, type, time, data FROM ins ORDER BY seq`,
		tenant, sessionID, types, times, data, owner, usageOf(evs),
	).Query(func(rows pgx.Rows) error {
		list, err := pgx.AppendRows(make([]store.Event, 0, len(evs)), rows, scanEvent)
		if err != nil {
			return err
		}
		if len(list) == 0 {
			o.fail = fmt.Errorf("session: %w", store.ErrNotFound)
		}
		*out = list
		return nil
	})
}

// addUsage is the SET list that adds the usage in the bigint[4] parameter
// param (usageOf) to a session's running sum.
func addUsage(param string) string {
	return `input_tokens = input_tokens + (` + param + `::bigint[])[1], output_tokens = output_tokens + (` + param + `::bigint[])[2],
		model_calls = model_calls + (` + param + `::bigint[])[3], reported_calls = reported_calls + (` + param + `::bigint[])[4]`
}

// usageOf is the usage evs record, as addUsage's parameter.
func usageOf(evs []store.NewEvent) []int64 {
	var u store.Usage
	for _, e := range evs {
		u = u.Add(e.Usage)
	}
	return []int64{u.InputTokens, u.OutputTokens, u.ModelCalls, u.Reported}
}

// eventColumns returns the columns of evs as arrays for unnest; a zero
// Time is now, a nil Data JSON null.
func eventColumns(evs []store.NewEvent) (types []string, times []time.Time, data []string) {
	types, times, data = make([]string, len(evs)), make([]time.Time, len(evs)), make([]string, len(evs))
	for i, e := range evs {
		types[i], times[i], data[i] = e.Type, now(e.Time), string(e.Data)
		if len(e.Data) == 0 {
			data[i] = "null"
		}
	}
	return types, times, data
}

// Events returns up to n events with Seq > after, in seq order. Returns
// store.ErrNotFound for an unknown session.
func (s *Store) Events(ctx context.Context, sessionID string, after int64, n int) (_ []store.Event, err error) {
	defer wrap(&err, "read events of session %q", sessionID)
	tenant := store.Tenant(ctx)
	rows, _ := s.pool.Query(ctx, `SELECT seq, type, time, data FROM session_events
		WHERE tenant = $1 AND session_id = $2 AND seq > $3 ORDER BY seq LIMIT $4`,
		tenant, sessionID, after, limit(n))
	out, err := pgx.CollectRows(rows, scanEvent)
	if err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, s.sessionExists(ctx, tenant, sessionID) // an empty page, or no such session?
	}
	return out, nil
}

// EventsBefore returns the last n events with Seq < before, in seq order:
// a backward scan of the primary key (session_id, seq) that stops after n
// rows, reversed here. Returns store.ErrNotFound for an unknown session.
func (s *Store) EventsBefore(ctx context.Context, sessionID string, before int64, n int) (_ []store.Event, err error) {
	defer wrap(&err, "read events of session %q before %d", sessionID, before)
	tenant := store.Tenant(ctx)
	rows, _ := s.pool.Query(ctx, `SELECT seq, type, time, data FROM session_events
		WHERE tenant = $1 AND session_id = $2 AND seq < $3 ORDER BY seq DESC LIMIT $4`,
		tenant, sessionID, before, limit(n))
	out, err := pgx.CollectRows(rows, scanEvent)
	if err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, s.sessionExists(ctx, tenant, sessionID)
	}
	slices.Reverse(out)
	return out, nil
}

// LogTail returns up to n events from the newest store.SnapshotEvent on
// (from the start without one), found through session_events_snapshot_idx.
// Returns store.ErrNotFound for an unknown session.
func (s *Store) LogTail(ctx context.Context, sessionID string, n int) (_ []store.Event, err error) {
	defer wrap(&err, "read log tail of session %q", sessionID)
	tenant := store.Tenant(ctx)
	// The type is a literal, not a parameter, so that every plan can use
	// the partial index.
	rows, _ := s.pool.Query(ctx, `SELECT seq, type, time, data FROM session_events
		WHERE tenant = $1 AND session_id = $2 AND seq >= COALESCE((SELECT max(seq) FROM session_events
			WHERE tenant = $1 AND session_id = $2 AND type = '`+store.SnapshotEvent+`'), 0)
		ORDER BY seq LIMIT $3`,
		tenant, sessionID, limit(n))
	out, err := pgx.CollectRows(rows, scanEvent)
	if err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, s.sessionExists(ctx, tenant, sessionID)
	}
	return out, nil
}

// sessionExists returns pgx.ErrNoRows unless the tenant has session id.
func (s *Store) sessionExists(ctx context.Context, tenant, id string) error {
	var one int
	return s.pool.QueryRow(ctx, `SELECT 1 FROM sessions WHERE tenant = $1 AND id = $2`, tenant, id).Scan(&one)
}
