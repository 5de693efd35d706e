-- {{ notice }}
--
-- evc runtime tables, thirtieth step: the payload hard cap checked after the insert, so that
-- `COPY` writes events in batches. It follows `NNNN_evc_runtime_v29.sql`.
--
-- PostgreSQL's `COPY` inserts one row at a time into a table with a `BEFORE INSERT` row
-- trigger (the trigger could read the rows already copied), each row then a WAL record of its
-- own; without one, `COPY` writes up to a page of rows per record. So the cap ({{ hard_max_bytes }}
-- bytes, `payload_policy.hard_max_bytes`) becomes an `AFTER INSERT` row trigger: its error
-- still fails the statement, nothing of it is left, and a payload under the cap costs only the
-- `WHEN` clause, no PL/pgSQL call. The payload is measured as the runtime measures canonical
-- JSON, with the space `jsonb` prints after every `:` and `,` taken out. An oversize row whose
-- idempotency key is taken is skipped by `ON CONFLICT DO NOTHING` before the trigger would
-- run; it is not stored either way.
--
-- Both statements are `OR REPLACE`, so running this file again changes nothing, except that
-- it switches the cap on again if `PgStore::set_payload_cap` had switched it off. The function
-- keeps its name and still returns the row, so the trigger works whichever timing it has; the
-- trigger keeps its name, so `set_payload_cap` still switches it.
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
    RETURN NEW;
END;
$$;
CREATE OR REPLACE TRIGGER evc_events_payload_cap
    AFTER INSERT ON evc_events
    FOR EACH ROW
    WHEN (octet_length(replace(replace(NEW.payload::text, ', ', ','), ': ', ':'))
            > {{ hard_max_bytes }})
    EXECUTE FUNCTION evc_events_payload_cap();
