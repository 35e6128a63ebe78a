-- Browser sign-ins (docs/architecture.md §10), shared by every replica: a cookie one
-- replica issued is accepted by all, also after a restart. Only the
-- SHA-256 of the cookie value is stored.
CREATE TABLE signins (
    hash       bytea       PRIMARY KEY CHECK (length(hash) = 32),
    tenant     text        NOT NULL DEFAULT 'default',
    expires_at timestamptz NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- Expiry sweeps delete the expired sign-ins.
CREATE INDEX signins_expires_idx ON signins (expires_at);
