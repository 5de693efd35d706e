-- Replays of the embedded SQLite store (`evc_runtime::store::sqlite`), the counterparts of
-- PostgreSQL's `evc_replays` and `evc_replay_items` (docs/runtime.md, "Replay"). Applied after
-- 0001 when the store opens its file; never edited once released. Same conventions as 0001:
-- times are epoch seconds (REAL) of the owning process's clock, event ids UUID text.

-- One row per applied replay: what was approved, by which reference, under which key. The
-- key is unique: a repeated apply answers with this row and creates nothing.
CREATE TABLE evc_replays (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    consumer TEXT NOT NULL,
    plan_digest TEXT NOT NULL,
    reason TEXT NOT NULL CHECK (length(reason) BETWEEN 1 AND 500),
    approval_ref TEXT NOT NULL,
    idempotency_key TEXT NOT NULL UNIQUE,
    -- New deliveries the replay created.
    deliveries INTEGER NOT NULL CHECK (deliveries >= 0),
    applied_at REAL NOT NULL
);

-- Each delivery a replay superseded: the generation it replayed, the status it left and its
-- event's version.
CREATE TABLE evc_replay_items (
    replay_id INTEGER NOT NULL REFERENCES evc_replays (id),
    event_id TEXT NOT NULL,
    consumer TEXT NOT NULL,
    generation INTEGER NOT NULL CHECK (generation >= 0),
    replayed_from TEXT NOT NULL CHECK (replayed_from IN ('dead', 'quarantined')),
    schema_version TEXT NOT NULL,
    PRIMARY KEY (replay_id, event_id, consumer)
);

CREATE INDEX evc_replay_items_event_idx ON evc_replay_items (event_id);

CREATE TRIGGER evc_replays_immutable BEFORE UPDATE ON evc_replays
BEGIN
    SELECT RAISE(ABORT, 'evc_replays is append-only: rows are never updated');
END;

CREATE TRIGGER evc_replay_items_immutable BEFORE UPDATE ON evc_replay_items
BEGIN
    SELECT RAISE(ABORT, 'evc_replay_items is append-only: rows are never updated');
END;
