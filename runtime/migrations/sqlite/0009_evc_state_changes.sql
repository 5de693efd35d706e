-- Who changed a consumer's operator state, and why, in the embedded SQLite store, as
-- PostgreSQL's seventeenth runtime step has it (docs/runtime.md, "Pause, resume and modes"):
-- each pause, resume and mode change writes one row in the transaction that makes the change.
-- The table is append-only. Never edited once released.

CREATE TABLE evc_state_changes (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    consumer TEXT NOT NULL,
    change TEXT NOT NULL CHECK (change IN ('pause', 'resume', 'mode')),
    mode TEXT CHECK (mode IN ('off', 'shadow', 'live')),
    changed_by TEXT NOT NULL CHECK (length(trim(changed_by)) BETWEEN 1 AND 200),
    reason TEXT NOT NULL CHECK (length(trim(reason)) BETWEEN 1 AND 500),
    changed_at REAL NOT NULL
);

CREATE INDEX evc_state_changes_consumer ON evc_state_changes (consumer, id);

CREATE TRIGGER evc_state_changes_immutable BEFORE UPDATE ON evc_state_changes
BEGIN
    SELECT RAISE(ABORT, 'evc_state_changes is append-only: rows are never updated');
END;

CREATE TRIGGER evc_state_changes_kept BEFORE DELETE ON evc_state_changes
BEGIN
    SELECT RAISE(ABORT, 'evc_state_changes is append-only: rows are never deleted');
END;
