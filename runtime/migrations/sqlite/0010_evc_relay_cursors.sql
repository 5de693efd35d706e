-- The relay's cursors in the embedded SQLite store, as PostgreSQL's nineteenth runtime step
-- has them (docs/relay.md): how far a relay published the event feed, written only under the
-- fencing token of the relay that holds the cursor. Never edited once released.

CREATE TABLE evc_relay_cursors (
    name TEXT PRIMARY KEY CHECK (length(name) BETWEEN 1 AND 64
        AND substr(name, 1, 1) GLOB '[a-z0-9]' AND name NOT GLOB '*[^a-z0-9._-]*'),
    writer INTEGER NOT NULL DEFAULT 0,
    seq INTEGER NOT NULL DEFAULT 0 CHECK (seq >= 0),
    owner TEXT NOT NULL CHECK (length(owner) BETWEEN 1 AND 200),
    token INTEGER NOT NULL CHECK (token >= 1),
    lease_until REAL NOT NULL,
    advanced_at REAL NOT NULL
);
