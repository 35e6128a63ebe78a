-- Search inside conversations (store.SearchSessions): a trigram index over
-- the text of each event — every string member named "text" at any depth,
-- then a tool call's arguments — so GET /v1/sessions?q= finds a substring
-- without reading every log. internal/pg/search.go queries this very
-- expression. Streamed deltas (assistant/chunk) repeat the assistant/message
-- after them and are left out.
CREATE EXTENSION IF NOT EXISTS pg_trgm;

CREATE INDEX session_events_text_idx ON session_events USING gin (
    (jsonb_path_query_array(data, 'strict $.**.text ? (@.type() == "string")')::text || ' ' || coalesce(data->>'arguments', ''))
    gin_trgm_ops
) WHERE type <> 'assistant/chunk';
