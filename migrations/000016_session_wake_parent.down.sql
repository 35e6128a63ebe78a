ALTER TABLE sessions DROP COLUMN wake_parent;
