-- What a relay cursor reports, as PostgreSQL's twentieth runtime step has it (docs/relay.md):
-- events passed, the holder's publish rate, the last move that passed an event, and failed
-- rounds with the last error (never a payload). Never edited once released.

ALTER TABLE evc_relay_cursors ADD COLUMN published INTEGER NOT NULL DEFAULT 0 CHECK (published >= 0);
ALTER TABLE evc_relay_cursors ADD COLUMN rate_per_s REAL NOT NULL DEFAULT 0 CHECK (rate_per_s >= 0);
ALTER TABLE evc_relay_cursors ADD COLUMN progressed_at REAL NOT NULL DEFAULT 0;
ALTER TABLE evc_relay_cursors ADD COLUMN failed_rounds INTEGER NOT NULL DEFAULT 0 CHECK (failed_rounds >= 0);
ALTER TABLE evc_relay_cursors ADD COLUMN failed_at REAL;
ALTER TABLE evc_relay_cursors ADD COLUMN last_error TEXT CHECK (length(last_error) <= 500);
