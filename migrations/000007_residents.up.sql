-- Resident leases (docs/architecture.md §5): the replica that drives a resident agent — a
-- root session or a continuable child — holds its row, renewed with its run
-- leases. A replica claims a row it does not hold only once its lease
-- lapsed, so no two replicas ever drive one resident agent; the writes of a
-- resident's owner are conditional on still holding it (fencing).
CREATE TABLE residents (
    tenant      text        NOT NULL DEFAULT 'default',
    session_id  text        NOT NULL,
    owner       text        NOT NULL,
    lease_until timestamptz NOT NULL,
    PRIMARY KEY (tenant, session_id)
);

-- Renewal covers every row of an owner; the reaper looks for lapsed ones.
CREATE INDEX residents_owner_idx ON residents (owner);
CREATE INDEX residents_lease_idx ON residents (lease_until);

-- Control requests (docs/architecture.md §5): an operation on a resident agent or a run
-- that another replica drives, written by the replica that took the request
-- and carried out by the owner, which writes the answer back.
CREATE TABLE controls (
    tenant      text        NOT NULL DEFAULT 'default',
    id          text        PRIMARY KEY,
    target      text        NOT NULL,
    op          text        NOT NULL,
    payload     jsonb,
    owner       text        NOT NULL,
    created_at  timestamptz NOT NULL,
    answer      jsonb,
    answered_at timestamptz
);

-- An owner reads its unanswered requests.
CREATE INDEX controls_owner_open_idx ON controls (owner, created_at) WHERE answered_at IS NULL;
