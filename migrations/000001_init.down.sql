DROP TABLE idempotency_keys;
DROP TABLE inbox;
DROP TABLE lifecycle_events;
DROP TABLE lifecycle_counter;
DROP TABLE runs;
DROP TABLE session_events;
DROP FUNCTION session_events_append_only();
DROP TABLE sessions;
