ALTER TABLE runs DROP COLUMN traceparent;
