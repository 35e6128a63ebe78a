-- A run row keeps the W3C traceparent of the span that asked for the run
-- (a parent agent's tool call), so that the run's span is that span's child
-- also when it starts on another replica or resumes after a restart. ''
-- when the caller was not traced.
ALTER TABLE runs ADD COLUMN traceparent text NOT NULL DEFAULT '';
