DROP INDEX lifecycle_events_root_idx;
ALTER TABLE lifecycle_events DROP COLUMN root_id;
ALTER TABLE runs DROP COLUMN usage_known, DROP COLUMN reported_calls, DROP COLUMN model_calls,
    DROP COLUMN output_tokens, DROP COLUMN input_tokens, DROP COLUMN root_id;
ALTER TABLE sessions DROP COLUMN reported_calls, DROP COLUMN model_calls, DROP COLUMN output_tokens,
    DROP COLUMN input_tokens, DROP COLUMN root_id;
