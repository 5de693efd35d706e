-- {{ notice }}
--
-- evc runtime tables, thirtieth step: the payload hard cap checked after the insert, so that
-- `COPY` writes events in batches. It follows `NNNN_evc_runtime_v29.sql`.
--
-- The fifth step's cap was a `BEFORE INSERT` row trigger. PostgreSQL's `COPY` inserts one row
-- at a time into a table with such a trigger (the trigger could read the rows already copied),
-- and each row is then its own WAL record; without one, `COPY` writes a page of rows per
-- record. The same check as an `AFTER INSERT` row trigger still refuses the row (its error
-- aborts the statement), and its `WHEN` clause, not a PL/pgSQL call, is all that runs for a
-- payload under the cap ({{ hard_max_bytes }} bytes, `payload_policy.hard_max_bytes`; measured
-- as the runtime measures canonical JSON, with the space `jsonb` prints after every `:` and `,`
-- taken out). The function and the trigger's name stay, so `PgStore::set_payload_cap` still
-- switches it.
CREATE OR REPLACE FUNCTION evc_events_payload_cap() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    IF octet_length(replace(replace(NEW.payload::text, ', ', ','), ': ', ':'))
            > {{ hard_max_bytes }} THEN
        RAISE EXCEPTION 'evc_events_payload_cap: the payload of event % is over the hard cap of {{ hard_max_bytes }} bytes',
                NEW.event_id
            USING ERRCODE = 'check_violation',
                  HINT = 'payload_policy.hard_max_bytes in evc.yaml sets the cap';
    END IF;
    RETURN NULL;
END;
$$;
DROP TRIGGER IF EXISTS evc_events_payload_cap ON evc_events;
CREATE TRIGGER evc_events_payload_cap
    AFTER INSERT ON evc_events
    FOR EACH ROW
    WHEN (octet_length(replace(replace(NEW.payload::text, ', ', ','), ': ', ':'))
            > {{ hard_max_bytes }})
    EXECUTE FUNCTION evc_events_payload_cap();
