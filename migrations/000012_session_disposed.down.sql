ALTER TABLE sessions DROP COLUMN disposed_at;
