-- The approvals policy a root session sets for its tree
-- (internal/governance). rules are the root's own, as created; always are
-- the rules that decisions with scope "always" added, newest first. A row
-- is created with its root, or by the first such decision in a tree whose
-- root set none (mode '').
CREATE TABLE tree_policies (
    tenant     text   NOT NULL DEFAULT 'default',
    root_id    text   PRIMARY KEY,
    mode       text   NOT NULL DEFAULT '',
    rules      jsonb  NOT NULL DEFAULT '[]',
    timeout_ms bigint NOT NULL DEFAULT 0,
    on_timeout text   NOT NULL DEFAULT '',
    always     jsonb  NOT NULL DEFAULT '[]'
);
