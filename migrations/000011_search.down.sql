-- pg_trgm stays: dropping an extension other objects may use is not this
-- migration's to do.
DROP INDEX IF EXISTS session_events_text_idx;
