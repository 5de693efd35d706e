-- {{ notice }}
--
-- evc runtime tables, twentieth step: what a relay cursor reports (docs/relay.md). It follows
-- `NNNN_evc_runtime_v19.sql`. Each move of a cursor adds the events it passed to `published`
-- and records the holder's own publish rate; `progressed_at` is the last move that passed an
-- event (a renewal passes none). A relay round that failed while the relay held the cursor
-- counts in `failed_rounds`, with its error (never a payload) and time: the cursor is failing
-- while its last failure is newer than its last progress. `evc status` and `/metrics` read them.
ALTER TABLE evc_relay_cursors
    ADD COLUMN IF NOT EXISTS published bigint NOT NULL DEFAULT 0 CHECK (published >= 0),
    ADD COLUMN IF NOT EXISTS rate_per_s float8 NOT NULL DEFAULT 0 CHECK (rate_per_s >= 0),
    ADD COLUMN IF NOT EXISTS progressed_at timestamptz NOT NULL DEFAULT now(),
    ADD COLUMN IF NOT EXISTS failed_rounds bigint NOT NULL DEFAULT 0 CHECK (failed_rounds >= 0),
    ADD COLUMN IF NOT EXISTS failed_at timestamptz,
    ADD COLUMN IF NOT EXISTS last_error text CHECK (char_length(last_error) <= 500);

-- A relay's lag is the events after its cursor in feed order, which the status report counts
-- as the reader: the reader sees each event's writing transaction too (it names no payload).
-- Only where the reader has its grants already (the tenth step): a database without them
-- keeps running every command as the login.
DO $$
BEGIN
    IF to_regrole('evc_reader') IS NOT NULL
        AND has_any_column_privilege('evc_reader', 'evc_events', 'SELECT') THEN
        GRANT SELECT (writer_xid) ON evc_events TO evc_reader;
    END IF;
END
$$;
