ALTER TABLE sessions DROP COLUMN limits;
