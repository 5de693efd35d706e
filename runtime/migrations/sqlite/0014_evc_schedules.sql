-- Where each schedule of `schedules.yaml` stands in the embedded SQLite store, as
-- PostgreSQL's twenty-third runtime step has it (docs/runtime.md, "Schedules"): the newest
-- slot ticked or skipped, moved by the scheduler round that appended the ticks. Times are
-- epoch seconds. Never edited once released.

CREATE TABLE evc_schedules (
    schedule TEXT PRIMARY KEY CHECK (length(schedule) BETWEEN 1 AND 63
        AND substr(schedule, 1, 1) GLOB '[a-z]' AND schedule NOT GLOB '*[^a-z0-9_]*'),
    cron TEXT NOT NULL,
    event_type TEXT NOT NULL,
    since REAL NOT NULL,
    last_slot REAL,
    ticks INTEGER NOT NULL DEFAULT 0 CHECK (ticks >= 0),
    skipped INTEGER NOT NULL DEFAULT 0 CHECK (skipped >= 0),
    ticked_at REAL
);
