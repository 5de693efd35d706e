-- The cut-over gate of shadow mode in the embedded SQLite store, as PostgreSQL's twenty-fifth
-- runtime step has it (docs/runtime.md, "Cut-over gate"): the outcome the legacy path recorded
-- per event for a consumer in shadow mode, and the differences operators explained. Both are
-- append-only. Times are epoch seconds. Never edited once released.

CREATE TABLE evc_legacy_outcomes (
    consumer TEXT NOT NULL,
    event_id TEXT NOT NULL,
    outcome TEXT NOT NULL CHECK (json_type(outcome) = 'array'),
    recorded_at REAL NOT NULL,
    PRIMARY KEY (consumer, event_id)
) WITHOUT ROWID;

CREATE TABLE evc_cutover_explanations (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    consumer TEXT NOT NULL,
    event_id TEXT NOT NULL,
    tenant_scope TEXT,
    explained_by TEXT NOT NULL CHECK (length(trim(explained_by)) BETWEEN 1 AND 200),
    reason TEXT NOT NULL CHECK (length(trim(reason)) BETWEEN 1 AND 500),
    explained_at REAL NOT NULL
);
CREATE INDEX evc_cutover_explanations_event ON evc_cutover_explanations (consumer, event_id);
CREATE INDEX evc_reconciliations_consumer_recorded ON evc_reconciliations (consumer, recorded_at);

CREATE TRIGGER evc_legacy_outcomes_immutable BEFORE UPDATE ON evc_legacy_outcomes
BEGIN
    SELECT RAISE(ABORT, 'evc_legacy_outcomes is append-only: rows are never updated');
END;
CREATE TRIGGER evc_legacy_outcomes_kept BEFORE DELETE ON evc_legacy_outcomes
BEGIN
    SELECT RAISE(ABORT, 'evc_legacy_outcomes is append-only: rows are never deleted');
END;
CREATE TRIGGER evc_cutover_explanations_immutable BEFORE UPDATE ON evc_cutover_explanations
BEGIN
    SELECT RAISE(ABORT, 'evc_cutover_explanations is append-only: rows are never updated');
END;
CREATE TRIGGER evc_cutover_explanations_kept BEFORE DELETE ON evc_cutover_explanations
BEGIN
    SELECT RAISE(ABORT, 'evc_cutover_explanations is append-only: rows are never deleted');
END;
