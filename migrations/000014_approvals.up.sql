-- Human-in-the-loop approvals (internal/governance). A row is created
-- pending and closed once: the close is a conditional update (state =
-- 'pending'), so the first decision wins on any replica. owner names the
-- replica whose agent waits for the answer, so that recovery can cancel the
-- approvals of a replica that is gone.
CREATE TABLE approvals (
    tenant          text        NOT NULL DEFAULT 'default',
    id              text        PRIMARY KEY,
    state           text        NOT NULL,
    session_id      text        NOT NULL,
    parent_id       text        NOT NULL DEFAULT '',
    root_session_id text        NOT NULL,
    run_id          text        NOT NULL,
    task_id         text        NOT NULL DEFAULT '',
    provider        text        NOT NULL,
    owner           text        NOT NULL DEFAULT '',
    tool_call_id    text        NOT NULL,
    title           text        NOT NULL DEFAULT '',
    kind            text        NOT NULL DEFAULT '',
    locations       jsonb,
    raw_input       jsonb,
    options         jsonb       NOT NULL,
    option_id       text        NOT NULL DEFAULT '',
    decision_kind   text        NOT NULL DEFAULT '',
    decided_by      text        NOT NULL DEFAULT '',
    reason          text        NOT NULL DEFAULT '',
    decided_at      timestamptz,
    created_at      timestamptz NOT NULL,
    expires_at      timestamptz
);

CREATE INDEX approvals_tenant_idx ON approvals (tenant, created_at, id);
CREATE INDEX approvals_pending_idx ON approvals (created_at, id) WHERE state = 'pending';
-- A run's pendingApprovals count.
CREATE INDEX approvals_run_pending_idx ON approvals (tenant, run_id) WHERE state = 'pending';
