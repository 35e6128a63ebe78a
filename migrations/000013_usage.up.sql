-- Usage roll-ups and one tree's lifecycle stream (store.SessionUsage,
-- LifecycleFilter.RootID).
--
-- Every session names the root of its tree (its own id for a root), every
-- run and lifecycle event the tree it belongs to: /v1/events?rootSessionId=
-- reads one tree's events by an index.
ALTER TABLE sessions ADD COLUMN root_id text NOT NULL DEFAULT '';
-- The running sum of the model usage a session's log records, bumped in
-- the statement that appends the events (store.Session.Usage): a root's own
-- usage is read without folding its log.
ALTER TABLE sessions ADD COLUMN input_tokens bigint NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN output_tokens bigint NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN model_calls bigint NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN reported_calls bigint NOT NULL DEFAULT 0;

-- A run's own usage, recorded with its settlement (store.RunResult.Usage).
ALTER TABLE runs ADD COLUMN root_id text NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN input_tokens bigint NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN output_tokens bigint NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN model_calls bigint NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN reported_calls bigint NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN usage_known boolean NOT NULL DEFAULT false;

ALTER TABLE lifecycle_events ADD COLUMN root_id text NOT NULL DEFAULT '';

-- Sessions stored before: their roots by walking parent_id up.
WITH RECURSIVE up (id, root_id) AS (
    SELECT id, id FROM sessions WHERE parent_id = ''
    UNION ALL
    SELECT s.id, up.root_id FROM sessions s JOIN up ON s.parent_id = up.id
)
UPDATE sessions SET root_id = up.root_id FROM up WHERE sessions.id = up.id;
UPDATE sessions SET root_id = parent_id WHERE root_id = '';
UPDATE runs SET root_id = s.root_id FROM sessions s WHERE s.id = runs.parent_id;

-- /v1/events?rootSessionId= replay.
CREATE INDEX lifecycle_events_root_idx ON lifecycle_events (tenant, root_id, id) WHERE root_id <> '';
