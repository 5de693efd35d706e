-- Replay idempotency keys scoped per consumer in the embedded SQLite store, as PostgreSQL's
-- eighth runtime step scopes them (docs/runtime.md, "Replay"): one key may name one decision
-- for each consumer. SQLite cannot drop the UNIQUE constraint 0002 put on `idempotency_key`,
-- so `evc_replays` is rebuilt with its rows and ids, the way SQLite documents for changes
-- ALTER TABLE cannot make: foreign keys off while `evc_replay_items` refers to the table being
-- replaced, the rebuild in one transaction. The store runs this file outside its migration
-- transaction for that reason (a pragma on foreign keys does nothing inside one). Never edited
-- once released.
PRAGMA foreign_keys = OFF;

BEGIN IMMEDIATE;

CREATE TABLE evc_replays_0004 (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    consumer TEXT NOT NULL,
    plan_digest TEXT NOT NULL,
    reason TEXT NOT NULL CHECK (length(reason) BETWEEN 1 AND 500),
    approval_ref TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    -- New deliveries the replay created.
    deliveries INTEGER NOT NULL CHECK (deliveries >= 0),
    applied_at REAL NOT NULL,
    UNIQUE (consumer, idempotency_key)
);

INSERT INTO evc_replays_0004
    (id, consumer, plan_digest, reason, approval_ref, idempotency_key, deliveries, applied_at)
SELECT id, consumer, plan_digest, reason, approval_ref, idempotency_key, deliveries, applied_at
FROM evc_replays;

DROP TABLE evc_replays;

ALTER TABLE evc_replays_0004 RENAME TO evc_replays;

CREATE TRIGGER evc_replays_immutable BEFORE UPDATE ON evc_replays
BEGIN
    SELECT RAISE(ABORT, 'evc_replays is append-only: rows are never updated');
END;

COMMIT;

PRAGMA foreign_keys = ON;
