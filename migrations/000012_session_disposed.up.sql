-- A disposed session (a continuable child, or a root with its tree) takes
-- no more followups or prompts, on every replica: disposed_at is when it
-- was disposed, NULL while it was not.
ALTER TABLE sessions ADD COLUMN disposed_at timestamptz;
