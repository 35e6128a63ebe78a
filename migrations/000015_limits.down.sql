ALTER TABLE sessions DROP COLUMN tree_paused;
ALTER TABLE sessions DROP COLUMN limits;
