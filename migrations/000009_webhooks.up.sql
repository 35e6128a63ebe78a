-- Webhook endpoints (internal/webhooks). An endpoint's outbox is the
-- lifecycle log itself: cursor is the id of the last lifecycle event it is
-- done with, and retry_event/attempts/next_attempt_at the state of the one
-- it is retrying. owner and lease_until name the replica delivering to it,
-- so two replicas never deliver to one endpoint at once.
CREATE TABLE webhook_endpoints (
    tenant            text        NOT NULL DEFAULT 'default',
    id                text        PRIMARY KEY,
    url               text        NOT NULL,
    events            text[]      NOT NULL,
    description       text        NOT NULL DEFAULT '',
    enabled           boolean     NOT NULL DEFAULT true,
    disabled_reason   text        NOT NULL DEFAULT '',
    secret            text        NOT NULL,
    prev_secret       text        NOT NULL DEFAULT '',
    prev_secret_until timestamptz,
    created_at        timestamptz NOT NULL,
    cursor            bigint      NOT NULL,
    retry_event       bigint      NOT NULL DEFAULT 0,
    attempts          integer     NOT NULL DEFAULT 0,
    next_attempt_at   timestamptz,
    owner             text        NOT NULL DEFAULT '',
    lease_until       timestamptz
);

CREATE INDEX webhook_endpoints_tenant_idx ON webhook_endpoints (tenant, created_at, id);

-- Every delivery attempt. pos orders them; the listing is newest first.
CREATE TABLE webhook_deliveries (
    tenant      text        NOT NULL DEFAULT 'default',
    id          text        PRIMARY KEY,
    pos         bigint      GENERATED ALWAYS AS IDENTITY,
    webhook_id  text        NOT NULL REFERENCES webhook_endpoints (id) ON DELETE CASCADE,
    event_id    text        NOT NULL,
    type        text        NOT NULL,
    attempt     integer     NOT NULL,
    status      text        NOT NULL,
    http_status integer     NOT NULL DEFAULT 0,
    error       text        NOT NULL DEFAULT '',
    latency_ms  bigint      NOT NULL,
    at          timestamptz NOT NULL,
    body        bytea       NOT NULL
);

CREATE INDEX webhook_deliveries_webhook_idx ON webhook_deliveries (tenant, webhook_id, pos);
CREATE INDEX webhook_deliveries_at_idx ON webhook_deliveries (at);
