-- A2A push-notification configs are webhook endpoints scoped to one task
-- (push_task <> ''): push_config is the config's id among the task's,
-- push_authorization and push_token the headers each delivery carries.
ALTER TABLE webhook_endpoints
    ADD COLUMN push_task          text NOT NULL DEFAULT '',
    ADD COLUMN push_config        text NOT NULL DEFAULT '',
    ADD COLUMN push_authorization text NOT NULL DEFAULT '',
    ADD COLUMN push_token         text NOT NULL DEFAULT '';

CREATE UNIQUE INDEX webhook_endpoints_push_idx ON webhook_endpoints (tenant, push_task, push_config)
    WHERE push_task <> '';
