-- Every table carries tenant from the first migration and every query filters
-- by it (docs/architecture.md §7). Ids of sessions, runs and inbox messages are minted by the
-- server and unique across tenants.

CREATE TABLE sessions (
    tenant           text        NOT NULL DEFAULT 'default',
    id               text        PRIMARY KEY,
    parent_id        text        NOT NULL DEFAULT '',  -- '' for a root session
    origin           text        NOT NULL DEFAULT '',
    delegation_depth integer     NOT NULL DEFAULT 0,
    seed_length      integer     NOT NULL DEFAULT 0,
    cwd              text        NOT NULL DEFAULT '',
    label            text        NOT NULL DEFAULT '',
    provider         text        NOT NULL DEFAULT '',
    mode             text        NOT NULL DEFAULT '',
    agent_provider   text        NOT NULL DEFAULT '',
    agent_model      text        NOT NULL DEFAULT '',
    max_tokens       integer     NOT NULL DEFAULT 0,
    persona          text,
    created_at       timestamptz NOT NULL,
    -- Seq of the last event in session_events, -1 while the log is empty.
    -- Appends bump it with UPDATE … RETURNING in the inserting statement: the
    -- row lock serialises appenders, so seqs are contiguous and gap-free.
    last_seq         bigint      NOT NULL DEFAULT -1
);

-- listChildren (docs/seam.md §19) and ListSessions with a parent filter.
CREATE INDEX sessions_parent_idx ON sessions (tenant, parent_id, origin, created_at, id);
-- ListSessions without a filter.
CREATE INDEX sessions_created_idx ON sessions (tenant, created_at, id);

CREATE TABLE session_events (
    tenant     text        NOT NULL DEFAULT 'default',
    session_id text        NOT NULL REFERENCES sessions (id),
    seq        bigint      NOT NULL CHECK (seq >= 0),
    type       text        NOT NULL,
    time       timestamptz NOT NULL,
    data       jsonb       NOT NULL,
    PRIMARY KEY (session_id, seq)
);

-- The session log is append-only (docs/seam.md §1).
CREATE FUNCTION session_events_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'session_events is append-only: % rejected', TG_OP
        USING ERRCODE = 'restrict_violation';
END;
$$;

CREATE TRIGGER session_events_no_update_delete
    BEFORE UPDATE OR DELETE ON session_events
    FOR EACH ROW EXECUTE FUNCTION session_events_append_only();

CREATE TRIGGER session_events_no_truncate
    BEFORE TRUNCATE ON session_events
    FOR EACH STATEMENT EXECUTE FUNCTION session_events_append_only();

-- One row per one-shot run or activation of a continuable child. owner and
-- lease_until record which replica drives a running row (docs/architecture.md §5).
CREATE TABLE runs (
    tenant      text        NOT NULL DEFAULT 'default',
    id          text        PRIMARY KEY,
    kind        text        NOT NULL,
    provider    text        NOT NULL DEFAULT '',
    child_id    text        NOT NULL DEFAULT '',
    parent_id   text        NOT NULL DEFAULT '',
    task_id     text        NOT NULL DEFAULT '',
    local       boolean     NOT NULL DEFAULT false,
    state       text        NOT NULL CHECK (state IN ('running', 'settled', 'disposed')),
    started_at  timestamptz NOT NULL,
    ended_at    timestamptz,
    stop_reason text        NOT NULL DEFAULT '',
    output      jsonb,
    structured  jsonb,
    diagnostic  text        NOT NULL DEFAULT '',
    owner       text        NOT NULL DEFAULT '',
    lease_until timestamptz
);

CREATE INDEX runs_parent_idx ON runs (tenant, parent_id, started_at, id);
CREATE INDEX runs_child_idx ON runs (tenant, child_id, started_at, id);
CREATE INDEX runs_started_idx ON runs (tenant, started_at, id);
-- RenewLeases and ExpiredRuns only ever look at running rows.
CREATE INDEX runs_owner_running_idx ON runs (owner) WHERE state = 'running';
CREATE INDEX runs_lease_running_idx ON runs (lease_until) WHERE state = 'running';

-- lifecycle_counter holds the last lifecycle id. An insert takes the next id
-- by updating this single row, whose lock it keeps until commit, so ids become
-- visible in commit order (a bigserial may commit out of order, and a /v1/events
-- reader resuming after id n would then miss the late smaller id).
CREATE TABLE lifecycle_counter (
    only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    last_id  bigint  NOT NULL
);
INSERT INTO lifecycle_counter (last_id) VALUES (0);

CREATE TABLE lifecycle_events (
    tenant    text        NOT NULL DEFAULT 'default',
    id        bigint      PRIMARY KEY,
    type      text        NOT NULL,
    parent_id text        NOT NULL DEFAULT '',
    run_id    text        NOT NULL DEFAULT '',
    time      timestamptz NOT NULL,
    payload   jsonb
);

-- /v1/events replay, all events or one parent's.
CREATE INDEX lifecycle_events_replay_idx ON lifecycle_events (tenant, id);
CREATE INDEX lifecycle_events_parent_idx ON lifecycle_events (tenant, parent_id, id);

-- Followups accepted for a continuable child and not yet delivered into its
-- log. pos orders them by acceptance.
CREATE TABLE inbox (
    tenant     text        NOT NULL DEFAULT 'default',
    id         text        PRIMARY KEY,
    pos        bigint      GENERATED ALWAYS AS IDENTITY,
    child_id   text        NOT NULL,
    task_id    text        NOT NULL DEFAULT '',
    content    jsonb,
    source     jsonb,
    created_at timestamptz NOT NULL
);

CREATE INDEX inbox_child_idx ON inbox (tenant, child_id, pos);

-- Responses to requests sent with an Idempotency-Key, replayed for a retry
-- with the same key and request hash.
CREATE TABLE idempotency_keys (
    tenant       text        NOT NULL DEFAULT 'default',
    key          text        NOT NULL,
    request_hash text        NOT NULL,
    status       integer     NOT NULL,
    response     jsonb,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, key)
);

-- Expiry sweeps delete the oldest keys first.
CREATE INDEX idempotency_keys_created_idx ON idempotency_keys (created_at);
