-- Retention in the embedded SQLite store, as PostgreSQL's twenty-sixth runtime step has it
-- (docs/runtime.md, "Retention"): one row per purge of expired rows, who, why, when, the time
-- the periods counted back from and the rows removed per table. Append-only. Times are epoch
-- seconds. Never edited once released.

CREATE TABLE evc_purges (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    ledger TEXT NOT NULL CHECK (ledger = 'retention'),
    cutoff REAL NOT NULL,
    reason TEXT NOT NULL CHECK (length(trim(reason)) BETWEEN 1 AND 500),
    actor TEXT NOT NULL CHECK (length(trim(actor)) BETWEEN 1 AND 200),
    purged_at REAL NOT NULL,
    counts TEXT NOT NULL CHECK (json_type(counts) = 'object')
);

CREATE TRIGGER evc_purges_immutable BEFORE UPDATE ON evc_purges
BEGIN
    SELECT RAISE(ABORT, 'evc_purges is append-only: rows are never updated');
END;

CREATE TRIGGER evc_purges_kept BEFORE DELETE ON evc_purges
BEGIN
    SELECT RAISE(ABORT, 'evc_purges is append-only: rows are never deleted');
END;
