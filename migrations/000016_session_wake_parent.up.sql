-- wake_parent: a continuable child's settlement notices open its parent's
-- turn (its parent's own agent delegated it, or its start asked for it);
-- false records them quietly for the parent's next turn. Children stored
-- before this column woke their parents, so existing rows keep doing so;
-- new rows always name the value.
ALTER TABLE sessions ADD COLUMN wake_parent boolean NOT NULL DEFAULT true;
ALTER TABLE sessions ALTER COLUMN wake_parent SET DEFAULT false;
