-- {{ notice }}
--
-- evc runtime tables, twenty-fourth step: lag breaches (docs/runtime.md, "Lag breaches"), and
-- the schedules and lag thresholds in the settings row. It follows `NNNN_evc_runtime_v23.sql`.
--
-- A consumer's contract may set a lag threshold per producer class. A dispatcher's lag watch
-- opens a breach here when the oldest open delivery of such a pair has waited longer, and
-- appends one `event_lag.breach` in the same transaction; it closes the breach when the lag is
-- back under the threshold. At most one breach of a pair is open at a time, so a breach is one
-- event however many processes watch. Breaches are about consumers, in no tenant.
CREATE TABLE IF NOT EXISTS evc_lag_breaches (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    consumer text NOT NULL,
    producer_class text NOT NULL,
    threshold_ms bigint NOT NULL CHECK (threshold_ms > 0),
    lag_ms bigint NOT NULL CHECK (lag_ms >= 0),
    -- The event whose delivery had waited longest when the breach opened.
    oldest_event_id uuid,
    opened_at timestamptz NOT NULL DEFAULT now(),
    closed_at timestamptz,
    CHECK (closed_at IS NULL OR closed_at >= opened_at)
);
CREATE UNIQUE INDEX IF NOT EXISTS evc_lag_breaches_open_idx
    ON evc_lag_breaches (consumer, producer_class) WHERE closed_at IS NULL;

-- Lag watches run in dispatchers; every job reads the breaches.
DO $$
DECLARE
    item record;
BEGIN
    FOR item IN
        SELECT * FROM (VALUES
            ('evc_reader', 'SELECT ON evc_lag_breaches'),
            ('evc_dispatcher', 'SELECT, INSERT, UPDATE (closed_at) ON evc_lag_breaches'),
            ('evc_operator', 'SELECT ON evc_lag_breaches'),
            ('evc_approver', 'SELECT ON evc_lag_breaches')
        ) AS grants (job, privileges)
    LOOP
        IF to_regrole(item.job) IS NOT NULL THEN
            EXECUTE format('GRANT %s TO %I', item.privileges, item.job);
        END IF;
    END LOOP;
END
$$;

-- The schedules and lag thresholds of the contracts, written by the settings migrations, so
-- that a process without a build of the application (`evc dispatch`, `evc serve`) runs and
-- reports them. `scheduling_digest` is the settings digest of the file that wrote them; they
-- count only while it is the row's `settings_digest`.
ALTER TABLE evc_settings ADD COLUMN IF NOT EXISTS schedules jsonb NOT NULL DEFAULT '[]';
ALTER TABLE evc_settings ADD COLUMN IF NOT EXISTS lag_thresholds jsonb NOT NULL DEFAULT '[]';
ALTER TABLE evc_settings ADD COLUMN IF NOT EXISTS scheduling_digest text;
