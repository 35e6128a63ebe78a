package pg

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/subagentd/subagentd/internal/store"
)

const approvalCols = `tenant, id, state, session_id, parent_id, root_session_id, run_id, task_id, provider, owner,
	tool_call_id, title, kind, locations, raw_input, options, option_id, decision_kind, decided_by, reason,
	decided_at, created_at, expires_at`

type approvalRow struct {
	Tenant        string     `db:"tenant"`
	ID            string     `db:"id"`
	State         string     `db:"state"`
	SessionID     string     `db:"session_id"`
	ParentID      string     `db:"parent_id"`
	RootSessionID string     `db:"root_session_id"`
	RunID         string     `db:"run_id"`
	TaskID        string     `db:"task_id"`
	Provider      string     `db:"provider"`
	Owner         string     `db:"owner"`
	ToolCallID    string     `db:"tool_call_id"`
	Title         string     `db:"title"`
	Kind          string     `db:"kind"`
	Locations     []byte     `db:"locations"`
	RawInput      []byte     `db:"raw_input"`
	Options       []byte     `db:"options"`
	OptionID      string     `db:"option_id"`
	DecisionKind  string     `db:"decision_kind"`
	DecidedBy     string     `db:"decided_by"`
	Reason        string     `db:"reason"`
	DecidedAt     *time.Time `db:"decided_at"`
	CreatedAt     time.Time  `db:"created_at"`
	ExpiresAt     *time.Time `db:"expires_at"`
}

// optionJSON is an approval option as the options column holds it.
type optionJSON struct {
	OptionID string `json:"optionId"`
	Name     string `json:"name"`
	Kind     string `json:"kind"`
}

func (r approvalRow) approval() (store.Approval, error) {
	a := store.Approval{
		ID: r.ID, Tenant: r.Tenant, State: r.State, SessionID: r.SessionID, ParentID: r.ParentID,
		RootSessionID: r.RootSessionID, RunID: r.RunID, TaskID: r.TaskID, Provider: r.Provider, Owner: r.Owner,
		ToolCall:  store.ApprovalToolCall{ID: r.ToolCallID, Title: r.Title, Kind: r.Kind, Locations: r.Locations, RawInput: r.RawInput},
		CreatedAt: r.CreatedAt.UTC(), ExpiresAt: fromDB(r.ExpiresAt),
	}
	var opts []optionJSON
	if err := json.Unmarshal(r.Options, &opts); err != nil {
		return a, fmt.Errorf("options of approval %q: %w", r.ID, err)
	}
	a.Options = make([]store.ApprovalOption, len(opts))
	for i, o := range opts {
		a.Options[i] = store.ApprovalOption(o)
	}
	if r.DecidedAt != nil {
		a.Decision = &store.ApprovalDecision{OptionID: r.OptionID, Kind: r.DecisionKind, By: r.DecidedBy, Reason: r.Reason, At: r.DecidedAt.UTC()}
	}
	return a, nil
}

func collectApprovals(rows pgx.Rows) ([]store.Approval, error) {
	list, err := pgx.CollectRows(rows, pgx.RowToStructByName[approvalRow])
	if err != nil {
		return nil, err
	}
	out := make([]store.Approval, len(list))
	for i, r := range list {
		if out[i], err = r.approval(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// CreateApproval inserts a as pending and appends requested in one flush.
// Returns store.ErrConflict if the id exists.
func (s *Store) CreateApproval(ctx context.Context, a store.Approval, requested store.LifecycleEvent) (_ store.Approval, _ store.LifecycleEvent, err error) {
	defer wrap(&err, "create approval %q", a.ID)
	opts := make([]optionJSON, len(a.Options))
	for i, o := range a.Options {
		opts[i] = optionJSON(o)
	}
	optsJSON, err := json.Marshal(opts)
	if err != nil {
		return store.Approval{}, requested, err
	}
	tenant := store.Tenant(ctx)
	a.Tenant, a.State, a.Decision = tenant, store.ApprovalPending, nil
	a.CreatedAt = now(a.CreatedAt)
	o := &op{key: "a:" + a.ID, event: &requested, tenant: tenant}
	o.data = func(b *pgx.Batch) {
		b.Queue(`INSERT INTO approvals (tenant, id, state, session_id, parent_id, root_session_id, run_id, task_id,
				provider, owner, tool_call_id, title, kind, locations, raw_input, options, created_at, expires_at)
			VALUES ($1, $2, 'pending', $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13::jsonb, $14::jsonb, $15::jsonb, $16, $17)`,
			tenant, a.ID, a.SessionID, a.ParentID, a.RootSessionID, a.RunID, a.TaskID, a.Provider, a.Owner,
			a.ToolCall.ID, a.ToolCall.Title, a.ToolCall.Kind, nullJSON(a.ToolCall.Locations), nullJSON(a.ToolCall.RawInput),
			string(optsJSON), a.CreatedAt, nullTime(a.ExpiresAt))
	}
	if err := s.w.do(ctx, o); err != nil {
		return store.Approval{}, requested, err
	}
	stored, err := s.GetApproval(ctx, a.ID)
	return stored, requested, err
}

// GetApproval returns one approval. Returns store.ErrNotFound.
func (s *Store) GetApproval(ctx context.Context, id string) (_ store.Approval, err error) {
	defer wrap(&err, "get approval %q", id)
	rows, _ := s.pool.Query(ctx, `SELECT `+approvalCols+` FROM approvals WHERE tenant = $1 AND id = $2`, store.Tenant(ctx), id)
	row, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[approvalRow])
	if err != nil {
		return store.Approval{}, err
	}
	return row.approval()
}

// ListApprovals returns the tenant's approvals matching f, ordered by
// (CreatedAt, ID). Returns store.ErrNotFound if f.AfterID names none.
func (s *Store) ListApprovals(ctx context.Context, f store.ApprovalFilter) (_ []store.Approval, err error) {
	defer wrap(&err, "list approvals")
	tenant := store.Tenant(ctx)
	var q query
	q.and("tenant = ?", tenant)
	for _, c := range []struct{ col, v string }{
		{"state", f.State}, {"root_session_id", f.RootSessionID}, {"session_id", f.SessionID}, {"run_id", f.RunID},
	} {
		if c.v != "" {
			q.and(c.col+" = ?", c.v)
		}
	}
	if f.AfterID != "" {
		var created time.Time
		err := s.pool.QueryRow(ctx, `SELECT created_at FROM approvals WHERE tenant = $1 AND id = $2`, tenant, f.AfterID).Scan(&created)
		if err != nil {
			return nil, fmt.Errorf("cursor %q: %w", f.AfterID, err)
		}
		q.and("(created_at, id) > (?, ?)", created, f.AfterID)
	}
	rows, _ := s.pool.Query(ctx, q.sql(approvalCols, "approvals", "created_at, id", limit(f.Limit)), q.args...)
	return collectApprovals(rows)
}

// CloseApproval closes a pending approval and appends ev in one flush: the
// update matches only a pending row, and ev is appended only if it did
// (the op settles the approval's id, like a run's end). Returns
// store.ErrNotFound, or store.ErrConflict if the approval is not pending.
func (s *Store) CloseApproval(ctx context.Context, id string, c store.ApprovalClose, ev store.LifecycleEvent) (_ store.Approval, _ store.LifecycleEvent, err error) {
	defer wrap(&err, "close approval %q", id)
	tenant := store.Tenant(ctx)
	var d store.ApprovalDecision
	var decidedAt *time.Time
	if c.Decision != nil {
		d = *c.Decision
		at := now(d.At)
		decidedAt = &at
	}
	var always any
	if c.Always != nil {
		b, err := json.Marshal(alwaysJSON(*c.Always))
		if err != nil {
			return store.Approval{}, ev, err
		}
		always = string(b)
	}
	o := &op{key: "a:" + id, event: &ev, tenant: tenant, settles: id}
	o.data = func(b *pgx.Batch) {
		// p adds the always rule to the tree's policy only if r closed the
		// approval: newest first, replacing one of its kind and title.
		b.Queue(`
			WITH r AS (
				UPDATE approvals
				SET state = $3, option_id = $4, decision_kind = $5, decided_by = $6, reason = $7, decided_at = $8
				WHERE tenant = $1 AND id = $2 AND state = 'pending'
				RETURNING id, root_session_id
			), p AS (
				INSERT INTO tree_policies AS t (tenant, root_id, always)
				SELECT $1, r.root_session_id, jsonb_build_array($9::jsonb) FROM r WHERE $9::jsonb IS NOT NULL
				ON CONFLICT (root_id) DO UPDATE SET always = jsonb_build_array($9::jsonb) || coalesce((
					SELECT jsonb_agg(k.e ORDER BY k.o) FROM (
						SELECT e, o FROM jsonb_array_elements(t.always) WITH ORDINALITY AS a(e, o)
						WHERE NOT (e->>'kind' = $9::jsonb->>'kind' AND e->>'title' = $9::jsonb->>'title')
						ORDER BY o LIMIT $10
					) k), '[]'::jsonb)
				WHERE t.tenant = $1
			)
			SELECT `+markSettled+` FROM r`,
			tenant, id, c.State, d.OptionID, d.Kind, d.By, d.Reason, decidedAt, always, store.MaxAlwaysRules-1)
	}
	if err := s.w.do(ctx, o); err != nil {
		return store.Approval{}, ev, err
	}
	stored, err := s.GetApproval(ctx, id)
	if err != nil {
		return store.Approval{}, ev, err
	}
	if o.skip {
		return stored, ev, fmt.Errorf("approval is %s: %w", stored.State, store.ErrConflict)
	}
	return stored, ev, nil
}

// PendingApprovals returns the pending approvals of every tenant, oldest
// first, at most 1000.
func (s *Store) PendingApprovals(ctx context.Context) (_ []store.Approval, err error) {
	defer wrap(&err, "list pending approvals")
	rows, _ := s.pool.Query(ctx, `SELECT `+approvalCols+` FROM approvals
		WHERE state = 'pending' ORDER BY created_at, id LIMIT $1`, maxLimit)
	return collectApprovals(rows)
}

// ruleJSON and alwaysJSON are a tree policy's rules as its jsonb columns
// hold them.
type ruleJSON struct {
	Kind         string `json:"kind"`
	TitlePattern string `json:"titlePattern,omitempty"`
	Decision     string `json:"decision"`
}

type alwaysJSON struct {
	Kind       string `json:"kind"`
	Title      string `json:"title"`
	Decision   string `json:"decision"`
	ApprovalID string `json:"approvalId"`
}

type treePolicyRow struct {
	Tenant    string `db:"tenant"`
	RootID    string `db:"root_id"`
	Mode      string `db:"mode"`
	Rules     []byte `db:"rules"`
	TimeoutMS int64  `db:"timeout_ms"`
	OnTimeout string `db:"on_timeout"`
	Always    []byte `db:"always"`
}

// CreateTreePolicy stores p. Returns store.ErrConflict if its root has a
// policy.
func (s *Store) CreateTreePolicy(ctx context.Context, p store.TreePolicy) (err error) {
	defer wrap(&err, "create the policy of %q", p.RootID)
	rules := make([]ruleJSON, len(p.Rules))
	for i, r := range p.Rules {
		rules[i] = ruleJSON(r)
	}
	always := make([]alwaysJSON, len(p.Always))
	for i, r := range p.Always {
		always[i] = alwaysJSON(r)
	}
	rj, err := json.Marshal(rules)
	if err != nil {
		return err
	}
	aj, err := json.Marshal(always)
	if err != nil {
		return err
	}
	_, err = s.pool.Exec(ctx, `INSERT INTO tree_policies (tenant, root_id, mode, rules, timeout_ms, on_timeout, always)
		VALUES ($1, $2, $3, $4::jsonb, $5, $6, $7::jsonb)`,
		store.Tenant(ctx), p.RootID, p.Mode, string(rj), p.Timeout.Milliseconds(), p.OnTimeout, string(aj))
	return err
}

// TreePolicy returns the policy of rootID. Returns store.ErrNotFound.
func (s *Store) TreePolicy(ctx context.Context, rootID string) (_ store.TreePolicy, err error) {
	defer wrap(&err, "the policy of %q", rootID)
	rows, _ := s.pool.Query(ctx, `SELECT tenant, root_id, mode, rules, timeout_ms, on_timeout, always
		FROM tree_policies WHERE tenant = $1 AND root_id = $2`, store.Tenant(ctx), rootID)
	row, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[treePolicyRow])
	if err != nil {
		return store.TreePolicy{}, err
	}
	p := store.TreePolicy{RootID: row.RootID, Tenant: row.Tenant, Mode: row.Mode,
		Timeout: time.Duration(row.TimeoutMS) * time.Millisecond, OnTimeout: row.OnTimeout}
	var rules []ruleJSON
	var always []alwaysJSON
	if err := json.Unmarshal(row.Rules, &rules); err != nil {
		return p, fmt.Errorf("rules: %w", err)
	}
	if err := json.Unmarshal(row.Always, &always); err != nil {
		return p, fmt.Errorf("always rules: %w", err)
	}
	for _, r := range rules {
		p.Rules = append(p.Rules, store.PolicyRule(r))
	}
	for _, r := range always {
		p.Always = append(p.Always, store.AlwaysRule(r))
	}
	return p, nil
}
