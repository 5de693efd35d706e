-- Usage evidence recorded periodically in the embedded SQLite store, as PostgreSQL's
-- twenty-ninth runtime step has it (docs/runtime.md, "Recorded evidence"): one report per slot
-- of the contracts' `evidence.every`, written by a dispatcher's recording round, which also
-- removes the snapshots older than `evidence.keep`. The signals span every tenant. Slots are
-- epoch milliseconds, times epoch seconds. Never edited once released.

CREATE TABLE evc_evidence_snapshots (
    slot_ms INTEGER PRIMARY KEY,
    recorded_at REAL NOT NULL,
    report TEXT NOT NULL CHECK (json_type(report) = 'object')
);
