-- A tree's limits (store.Limits): a root's, which PATCH
-- /v1/sessions/{id}/limits changes, and the narrowing a child was started
-- with. '{}' sets none.
ALTER TABLE sessions ADD COLUMN limits jsonb NOT NULL DEFAULT '{}';
