DROP INDEX IF EXISTS webhook_endpoints_push_idx;
ALTER TABLE webhook_endpoints
    DROP COLUMN IF EXISTS push_task,
    DROP COLUMN IF EXISTS push_config,
    DROP COLUMN IF EXISTS push_authorization,
    DROP COLUMN IF EXISTS push_token;
