-- A tree's limits (store.Limits): a root's, which PATCH
-- /v1/sessions/{id}/limits changes, and the narrowing a child was started
-- with. '{}' sets none.
ALTER TABLE sessions ADD COLUMN limits jsonb NOT NULL DEFAULT '{}';
-- Whether a root's tree is marked paused (store.TreeLimits.SetTreePaused):
-- the one flip of it announces tree/paused or tree/resumed once.
ALTER TABLE sessions ADD COLUMN tree_paused boolean NOT NULL DEFAULT false;
