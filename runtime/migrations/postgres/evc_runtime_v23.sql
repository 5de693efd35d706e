-- {{ notice }}
--
-- evc runtime tables, twenty-third step: where each schedule of `schedules.yaml` stands
-- (docs/runtime.md, "Schedules"). It follows `NNNN_evc_runtime_v22.sql`.
--
-- A dispatcher's scheduler appends one tick event per slot of each schedule. One process
-- runs a round at a time (a transaction-level advisory lock); the round reads here the newest
-- slot handled, appends the ticks due since, and moves the row on in the same transaction.
-- Rows are written by the scheduler itself, not by the registry migrations: a schedule starts
-- when a dispatcher first sees it. Schedules span tenants; the rows hold no tenant data.
CREATE TABLE IF NOT EXISTS evc_schedules (
    schedule text PRIMARY KEY CHECK (schedule ~ '^[a-z][a-z0-9_]{0,62}$'),
    cron text NOT NULL,
    event_type text NOT NULL,
    -- When a round first saw the schedule: no slot before is ticked.
    since timestamptz NOT NULL,
    -- The newest slot ticked or skipped; NULL: none yet.
    last_slot timestamptz,
    ticks bigint NOT NULL DEFAULT 0 CHECK (ticks >= 0),
    skipped bigint NOT NULL DEFAULT 0 CHECK (skipped >= 0),
    ticked_at timestamptz
);

-- Schedulers run in dispatchers; every job reads where the schedules are.
DO $$
DECLARE
    item record;
BEGIN
    FOR item IN
        SELECT * FROM (VALUES
            ('evc_reader', 'SELECT ON evc_schedules'),
            ('evc_dispatcher', 'SELECT, INSERT, UPDATE ON evc_schedules'),
            ('evc_operator', 'SELECT ON evc_schedules'),
            ('evc_approver', 'SELECT ON evc_schedules')
        ) AS grants (job, privileges)
    LOOP
        IF to_regrole(item.job) IS NOT NULL THEN
            EXECUTE format('GRANT %s TO %I', item.privileges, item.job);
        END IF;
    END LOOP;
END
$$;
