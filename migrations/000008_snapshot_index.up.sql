-- A cold resume reads a session's log from its newest history/snapshot event
-- on (store.LogTail). This partial index finds that event without scanning
-- the log; other appends pay nothing for it.
CREATE INDEX session_events_snapshot_idx ON session_events (session_id, seq) WHERE type = 'history/snapshot';
