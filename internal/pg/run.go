package pg

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/subagentd/subagentd/internal/store"
)

const runCols = `tenant, id, kind, provider, child_id, parent_id, task_id, local, state, started_at, ended_at,
	stop_reason, output, structured, diagnostic, owner, lease_until, traceparent,
	root_id, input_tokens, output_tokens, model_calls, reported_calls, usage_known,
	(SELECT count(*) FROM approvals a WHERE a.tenant = runs.tenant AND a.run_id = runs.id AND a.state = 'pending') AS pending_approvals`

type runRow struct {
	Tenant      string     `db:"tenant"`
	ID          string     `db:"id"`
	Kind        string     `db:"kind"`
	Provider    string     `db:"provider"`
	ChildID     string     `db:"child_id"`
	ParentID    string     `db:"parent_id"`
	TaskID      string     `db:"task_id"`
	Local       bool       `db:"local"`
	State       string     `db:"state"`
	StartedAt   time.Time  `db:"started_at"`
	EndedAt     *time.Time `db:"ended_at"`
	StopReason  string     `db:"stop_reason"`
	Output      []byte     `db:"output"`
	Structured  []byte     `db:"structured"`
	Diagnostic  string     `db:"diagnostic"`
	Owner       string     `db:"owner"`
	LeaseUntil  *time.Time `db:"lease_until"`
	Traceparent string     `db:"traceparent"`
	RootID      string     `db:"root_id"`
	Input       int64      `db:"input_tokens"`
	OutTokens   int64      `db:"output_tokens"`
	Calls       int64      `db:"model_calls"`
	Reported    int64      `db:"reported_calls"`
	UsageKnown  bool       `db:"usage_known"`
	// PendingApprovals is counted by the partial index of pending
	// approvals by run.
	PendingApprovals int64 `db:"pending_approvals"`
}

func (r runRow) run() store.Run {
	return store.Run{
		Tenant: r.Tenant, ID: r.ID, Kind: r.Kind, Provider: r.Provider, ChildID: r.ChildID, ParentID: r.ParentID,
		TaskID: r.TaskID, Local: r.Local, State: r.State, StartedAt: r.StartedAt.UTC(),
		EndedAt: fromDB(r.EndedAt), StopReason: r.StopReason, Output: r.Output, Structured: r.Structured,
		Diagnostic: r.Diagnostic, Owner: r.Owner, LeaseUntil: fromDB(r.LeaseUntil), Traceparent: r.Traceparent,
		RootID: r.RootID, UsageKnown: r.UsageKnown,
		Usage:            store.Usage{InputTokens: r.Input, OutputTokens: r.OutTokens, ModelCalls: r.Calls, Reported: r.Reported},
		PendingApprovals: int(r.PendingApprovals),
	}
}

func collectRuns(rows pgx.Rows) ([]store.Run, error) {
	list, err := pgx.CollectRows(rows, pgx.RowToStructByName[runRow])
	if err != nil {
		return nil, err
	}
	out := make([]store.Run, len(list))
	for i, r := range list {
		out[i] = r.run()
	}
	return out, nil
}

// StartRun stores r as running and appends start in one transaction.
// Settlement fields of r are ignored; a zero StartedAt is now. Returns
// store.ErrConflict if the run id exists, in any tenant.
func (s *Store) StartRun(ctx context.Context, r store.Run, start store.LifecycleEvent) (_ store.LifecycleEvent, err error) {
	defer wrap(&err, "start run %q", r.ID)
	tenant := store.Tenant(ctx)
	err = s.w.do(ctx, &op{event: &start, tenant: tenant, data: func(b *pgx.Batch) { queueStart(b, tenant, r) }})
	return start, err
}

// StartRunWithSession stores the child session h with evs as the start of
// its log, r as running and start, in one flush, so one commit (one round
// trip). Returns store.ErrConflict if the session or run id exists, in any
// tenant, and an error (storing nothing) if an event is invalid.
func (s *Store) StartRunWithSession(ctx context.Context, p store.StartRunParams) (log []store.Event, _ store.LifecycleEvent, err error) {
	h, evs, r, start := p.Session, p.Events, p.Run, p.Start
	defer wrap(&err, "start run %q with session %q", r.ID, h.ID)
	if err := store.CheckEvents(evs); err != nil {
		return nil, start, err
	}
	tenant := store.Tenant(ctx)
	h.CreatedAt = now(h.CreatedAt)
	h.RootID = s.rootOf(ctx, h)
	gen := s.limits.generation()
	o := &op{topic: store.SessionTopic(h.ID), key: "s:" + h.ID, event: &start, tenant: tenant}
	o.data = func(b *pgx.Batch) {
		if len(evs) > 0 {
			queueCreateWithEvents(b, tenant, h, evs, &log)
		} else {
			queueCreate(b, tenant, h)
		}
		queueStart(b, tenant, r)
	}
	if err = s.w.do(ctx, o); err != nil {
		return nil, start, err
	}
	s.created(tenant, h, gen)
	return log, start, nil
}

// queueStart queues the insert of r as running.
func queueStart(b *pgx.Batch, tenant string, r store.Run) {
	b.Queue(`INSERT INTO runs
		(tenant, id, kind, provider, child_id, parent_id, task_id, local, state, started_at, owner, lease_until, traceparent, root_id)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'running', $9, $10, $11, $12, $13)`,
		tenant, r.ID, r.Kind, r.Provider, r.ChildID, r.ParentID, r.TaskID, r.Local,
		now(r.StartedAt), r.Owner, nullTime(r.LeaseUntil), r.Traceparent, r.RootID)
}

// EndRun settles the run with res and appends end in one transaction; a
// zero EndedAt is now. Returns store.ErrNotFound, or store.ErrConflict if the
// run already ended. Concurrent calls queue on the run's row lock and only
// the first finds it running.
func (s *Store) EndRun(ctx context.Context, runID string, res store.RunResult, end store.LifecycleEvent) (_ store.LifecycleEvent, err error) {
	defer wrap(&err, "end run %q", runID)
	tenant, ended, owner := store.Tenant(ctx), now(res.EndedAt), store.Owner(ctx)
	o := &op{key: "r:" + runID, event: &end, tenant: tenant, settles: runID}
	o.data = func(b *pgx.Batch) {
		b.Queue(`
			WITH r AS (
				UPDATE runs
				SET state = 'settled', ended_at = $3, stop_reason = $4, output = $5, structured = $6, diagnostic = $7,
					`+setRunUsage("$9")+`
				WHERE tenant = $1 AND id = $2 AND state = 'running' AND `+activationFence("$8")+`
				RETURNING id
			)
			SELECT `+markSettled+` FROM r`,
			tenant, runID, ended, res.StopReason, nullJSON(res.Output), nullJSON(res.Structured), res.Diagnostic, owner,
			runUsage(res))
	}
	if err := s.w.do(ctx, o); err != nil {
		return end, err
	}
	if o.skip {
		return end, s.notEnded(ctx, tenant, runID, owner)
	}
	return end, nil
}

// setRunUsage is the SET list that records the run usage in the bigint[5]
// parameter param (runUsage).
func setRunUsage(param string) string {
	return `input_tokens = (` + param + `::bigint[])[1], output_tokens = (` + param + `::bigint[])[2],
		model_calls = (` + param + `::bigint[])[3], reported_calls = (` + param + `::bigint[])[4], usage_known = (` + param + `::bigint[])[5] = 1`
}

// runUsage is the usage of res, as setRunUsage's parameter.
func runUsage(res store.RunResult) []int64 {
	known := int64(0)
	if res.UsageKnown {
		known = 1
	}
	u := res.Usage
	return []int64{u.InputTokens, u.OutputTokens, u.ModelCalls, u.Reported, known}
}

// markSettled, selected from a CTE r of settled runs' ids, notes them in a
// transaction-local setting that the flush's lifecycle statement reads
// (settledFilter): an end is appended only if its run was settled in this
// transaction, without a second look at the runs table.
const markSettled = `set_config('subagentd.settled',
	coalesce(nullif(current_setting('subagentd.settled', true), ''), ',') || r.id || ',', true)`

// EndRunWithEvents appends evs to the log of the run's child session,
// settles the run with res and appends end, in one transaction: one
// statement appends evs only if the run is running and its child has a
// session, and settles the run only if it did. Every row it touches is
// found by its primary key (parameters and one-row subqueries only), so
// its plan does not depend on the tables' statistics. Returns store.ErrNotFound (no
// run, or a child without a session), store.ErrConflict if the run already
// ended, an error for an invalid event; nothing is stored on any of them.
//
// The op is keyed by the run's row, like EndRun; the child's session row
// is locked after it (the run's row first, FOR UPDATE), which only the
// run's own driver writes to, so no flush of this replica holds it
// meanwhile.
func (s *Store) EndRunWithEvents(ctx context.Context, p store.EndRunParams) (_ store.LifecycleEvent, log []store.Event, err error) {
	runID, res, end, evs := p.RunID, p.Result, p.End, p.Events
	if len(evs) == 0 {
		end, err = s.EndRun(ctx, runID, res, end)
		return end, nil, err
	}
	defer wrap(&err, "end run %q with %d events", runID, len(evs))
	if err := store.CheckEvents(evs); err != nil {
		return end, nil, err
	}
	tenant, ended, owner := store.Tenant(ctx), now(res.EndedAt), store.Owner(ctx)
	types, times, data := eventColumns(evs)
	o := &op{key: "r:" + runID, event: &end, tenant: tenant, settles: runID}
	o.data = func(b *pgx.Batch) {
		b.Queue(`
			WITH s AS (
				UPDATE sessions SET last_seq = last_seq + cardinality($8::text[]), `+addUsage("$13")+`
				WHERE tenant = $1 AND id = (
					SELECT child_id FROM runs WHERE tenant = $1 AND id = $2 AND state = 'running' AND `+activationFence("$11")+`
					FOR UPDATE)
				RETURNING id, last_seq - cardinality($8::text[]) AS before
			), r AS (
				UPDATE runs
				SET state = 'settled', ended_at = $3, stop_reason = $4, output = $5, structured = $6, diagnostic = $7,
					`+setRunUsage("$12")+`
				WHERE tenant = $1 AND id = $2 AND state = 'running' AND EXISTS (SELECT 1 FROM s)
				RETURNING id
			), ins AS (
				INSERT INTO session_events (tenant, session_id, seq, type, time, data)
				SELECT $1, s.id, s.before + e.n, e.type, e.time, e.data::jsonb
				FROM s, unnest($8::text[], $9::timestamptz[], $10::text[]) WITH ORDINALITY AS e (type, time, data, n)
				RETURNING seq, type, time, data
			), mark AS (
				SELECT `+markSettled+` FROM r
			)
			SELECT seq, type, time, data FROM ins, (SELECT count(*) FROM mark) AS m ORDER BY seq`,
			tenant, runID, ended, res.StopReason, nullJSON(res.Output), nullJSON(res.Structured), res.Diagnostic,
			types, times, data, owner, runUsage(res), usageOf(evs),
		).Query(func(rows pgx.Rows) error {
			var err error
			log, err = pgx.AppendRows(make([]store.Event, 0, len(evs)), rows, scanEvent)
			return err
		})
	}
	if err := s.w.do(ctx, o); err != nil {
		return end, nil, err
	}
	if o.skip {
		return end, nil, s.notEnded(ctx, tenant, runID, owner)
	}
	return end, log, nil
}

// DisposeRun marks a settled run disposed; disposing again is a no-op.
// Returns store.ErrNotFound, or store.ErrConflict while the run is running.
// One autocommit statement: the update, and the run's state before it to
// say why it matched nothing.
func (s *Store) DisposeRun(ctx context.Context, runID string) (err error) {
	defer wrap(&err, "dispose run %q", runID)
	var disposed bool
	var state *string
	err = s.pool.QueryRow(ctx, `
		WITH u AS (
			UPDATE runs SET state = 'disposed' WHERE tenant = $1 AND id = $2 AND state <> 'running' RETURNING 1
		)
		SELECT EXISTS (SELECT 1 FROM u), (SELECT state FROM runs WHERE tenant = $1 AND id = $2)`,
		store.Tenant(ctx), runID).Scan(&disposed, &state)
	switch {
	case err != nil || disposed:
		return err
	case state == nil:
		return pgx.ErrNoRows
	}
	return fmt.Errorf("run is running: %w", store.ErrConflict)
}

// notEnded explains why an end matched no running run: the run does not
// exist (pgx.ErrNoRows), has ended already (store.ErrConflict), is an
// activation whose child owner no longer holds the lease
// (store.ErrFenced), or is running but its child has no session
// (store.ErrNotFound; only an end with events needs one).
func (s *Store) notEnded(ctx context.Context, tenant, runID, owner string) error {
	var state, kind string
	err := s.pool.QueryRow(ctx, `SELECT state, kind FROM runs WHERE tenant = $1 AND id = $2`, tenant, runID).Scan(&state, &kind)
	switch {
	case err != nil:
		return err
	case state != store.StateRunning:
		return fmt.Errorf("run already ended (%s): %w", state, store.ErrConflict)
	case kind == store.KindActivation && owner != "":
		return fencedError(owner, runID) // still running: the lease is gone
	}
	return fmt.Errorf("the run's child has no session: %w", store.ErrNotFound)
}

// activationFence is the condition, on a statement over runs whose $1 is
// the tenant, that the run is not an activation or its child is still
// leased to the owner in parameter ownerParam (see fenceCond).
func activationFence(ownerParam string) string {
	return `(kind <> 'activation' OR ` + fenceCond("child_id", ownerParam) + `)`
}

// GetRun returns one run. Returns store.ErrNotFound.
func (s *Store) GetRun(ctx context.Context, runID string) (_ store.Run, err error) {
	defer wrap(&err, "get run %q", runID)
	rows, _ := s.pool.Query(ctx, `SELECT `+runCols+` FROM runs WHERE tenant = $1 AND id = $2`, store.Tenant(ctx), runID)
	row, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[runRow])
	return row.run(), err
}

// ListRuns returns the tenant's runs matching f, ordered by (StartedAt, ID).
// Returns store.ErrNotFound if f.AfterID names no run of the tenant.
func (s *Store) ListRuns(ctx context.Context, f store.RunFilter) (_ []store.Run, err error) {
	defer wrap(&err, "list runs")
	tenant := store.Tenant(ctx)
	var q query
	q.and("tenant = ?", tenant)
	for _, c := range []struct{ col, v string }{
		{"parent_id", f.ParentID}, {"child_id", f.ChildID}, {"task_id", f.TaskID}, {"state", f.State},
	} {
		if c.v != "" {
			q.and(c.col+" = ?", c.v)
		}
	}
	if len(f.ChildIDs) > 0 {
		q.and("child_id = ANY(?)", f.ChildIDs)
	}
	if f.AfterID != "" {
		var started time.Time
		err := s.pool.QueryRow(ctx, `SELECT started_at FROM runs WHERE tenant = $1 AND id = $2`, tenant, f.AfterID).Scan(&started)
		if err != nil {
			return nil, fmt.Errorf("cursor %q: %w", f.AfterID, err)
		}
		q.and("(started_at, id) > (?, ?)", started, f.AfterID)
	}
	rows, _ := s.pool.Query(ctx, q.sql(runCols, "runs", "started_at, id", limit(f.Limit)), q.args...)
	return collectRuns(rows)
}

// RenewLeases sets LeaseUntil of every running run and resident lease owned
// by owner, in every tenant, in one implicit transaction: a replica's
// heartbeat covers all it drives.
func (s *Store) RenewLeases(ctx context.Context, owner string, until time.Time) (err error) {
	defer wrap(&err, "renew leases of %q", owner)
	b := &pgx.Batch{}
	b.Queue(`UPDATE runs SET lease_until = $2 WHERE owner = $1 AND state = 'running'`, owner, until)
	b.Queue(`UPDATE residents SET lease_until = $2 WHERE owner = $1`, owner, until)
	return s.pool.SendBatch(ctx, b).Close()
}

// ExpiredRuns returns running runs of every tenant whose lease ended before
// at, ordered by (StartedAt, ID), at most 1000. A run without a lease (zero
// LeaseUntil) never expires.
func (s *Store) ExpiredRuns(ctx context.Context, at time.Time) (_ []store.Run, err error) {
	defer wrap(&err, "list expired runs")
	rows, _ := s.pool.Query(ctx, `SELECT `+runCols+` FROM runs
		WHERE state = 'running' AND lease_until < $1 ORDER BY started_at, id LIMIT $2`, at, maxLimit)
	return collectRuns(rows)
}

// SessionUsage returns the usage of session id and, with tree, of every
// session below it (the session first, then the others by (CreatedAt,
// ID)), in one statement: the sessions by a recursive walk of
// sessions_parent_idx, each one's runs by runs_child_idx. Returns
// store.ErrNotFound for an unknown session.
func (s *Store) SessionUsage(ctx context.Context, id string, tree bool, at time.Time) (_ []store.SessionUsage, err error) {
	defer wrap(&err, "read usage of session %q", id)
	rows, _ := s.pool.Query(ctx, `
		WITH RECURSIVE t AS (
			SELECT id, parent_id, created_at, input_tokens, output_tokens, model_calls, reported_calls, 0 AS depth
			FROM sessions WHERE tenant = $1 AND id = $2
			UNION
			SELECT s.id, s.parent_id, s.created_at, s.input_tokens, s.output_tokens, s.model_calls, s.reported_calls, 1
			FROM sessions s JOIN t ON s.tenant = $1 AND s.parent_id = t.id
			WHERE $4
		)
		SELECT t.id, t.parent_id, t.input_tokens, t.output_tokens, t.model_calls, t.reported_calls,
			r.input_tokens, r.output_tokens, r.model_calls, r.reported_calls, r.unknown, r.runs, r.live
		FROM t CROSS JOIN LATERAL (
			SELECT coalesce(sum(input_tokens) FILTER (WHERE state <> 'running'), 0)::bigint AS input_tokens,
				coalesce(sum(output_tokens) FILTER (WHERE state <> 'running'), 0)::bigint AS output_tokens,
				coalesce(sum(model_calls) FILTER (WHERE state <> 'running'), 0)::bigint AS model_calls,
				coalesce(sum(reported_calls) FILTER (WHERE state <> 'running'), 0)::bigint AS reported_calls,
				count(*) FILTER (WHERE state <> 'running' AND NOT usage_known) AS unknown,
				count(*) AS runs,
				count(*) FILTER (WHERE state = 'running' AND lease_until > $3) AS live
			FROM runs WHERE tenant = $1 AND child_id = t.id
		) r
		ORDER BY t.depth, t.created_at, t.id`, store.Tenant(ctx), id, at, tree)
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.SessionUsage, error) {
		var u store.SessionUsage
		err := row.Scan(&u.SessionID, &u.ParentID,
			&u.Log.InputTokens, &u.Log.OutputTokens, &u.Log.ModelCalls, &u.Log.Reported,
			&u.Runs.InputTokens, &u.Runs.OutputTokens, &u.Runs.ModelCalls, &u.Runs.Reported,
			&u.Unknown, &u.RunCount, &u.LiveRuns)
		return u, err
	})
	if err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("session: %w", store.ErrNotFound)
	}
	return out, nil
}
