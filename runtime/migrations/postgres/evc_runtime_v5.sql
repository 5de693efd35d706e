-- {{ notice }}
--
-- evc runtime tables, fifth step: the ledgers are append-only, and the outbox refuses a payload
-- over the hard cap (docs/runtime.md, "Append-only ledgers"). It follows
-- `NNNN_evc_runtime_v4.sql` and only adds: triggers (one of them checks new events' payload
-- size), functions, an index and the purge audit table; no row is rewritten or removed.
-- Every statement is `IF NOT EXISTS`, `OR REPLACE` or guarded, so running this file again is a
-- no-op; sqlx runs it once, in one transaction.
--
-- The runtime only ever inserts into these tables (`runtime/src/store/postgres/sql.rs`: plain
-- `INSERT`, `COPY` and `ON CONFLICT DO NOTHING`). Triggers guard against application bugs and
-- roles that do not own the tables; a table's owner or a superuser can disable them.

-- Retention purges, one row each: who, why, when, which ledger, the cutoff, and how many rows
-- left each table. `txid` ties the row to the transaction that deleted them.
CREATE TABLE IF NOT EXISTS evc_purges (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    ledger text NOT NULL CHECK (ledger IN ('events', 'rejects')),
    cutoff timestamptz NOT NULL,
    reason text NOT NULL CHECK (char_length(btrim(reason)) BETWEEN 1 AND 500),
    actor text NOT NULL CHECK (char_length(btrim(actor)) BETWEEN 1 AND 200),
    -- The database role that ran the purge, beside the actor it named.
    db_role text NOT NULL DEFAULT session_user,
    purged_at timestamptz NOT NULL DEFAULT now(),
    -- The tables the purge may delete from, and {"table": rows deleted, ...}.
    tables text[] NOT NULL,
    counts jsonb NOT NULL CHECK (jsonb_typeof(counts) = 'object'),
    txid bigint NOT NULL DEFAULT txid_current()
);

-- Whether this transaction runs a purge that may delete from `tbl`: `evc.purge` (set by the
-- purge functions, transaction-local) names an audit row written by this very transaction that
-- lists the table. A setting made by hand names no such row, so it opens nothing; a purge
-- cannot delete without its audit row.
CREATE OR REPLACE FUNCTION evc_purge_open(tbl text) RETURNS boolean
    LANGUAGE sql STABLE AS $$
    SELECT EXISTS (
        SELECT 1 FROM evc_purges p
        WHERE p.id = CASE WHEN current_setting('evc.purge', true) ~ '^[0-9]{1,18}$'
                THEN current_setting('evc.purge', true)::bigint END
            AND p.txid = txid_current()
            AND tbl = ANY (p.tables)
    )
$$;

-- Refuses UPDATE, DELETE (outside a purge) and TRUNCATE on an append-only table.
CREATE OR REPLACE FUNCTION evc_append_only() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' AND evc_purge_open(TG_TABLE_NAME) THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION '% is append-only: % refused', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'restrict_violation',
            HINT = 'rows leave only through a retention purge (evc_purge_events, evc_purge_rejects)';
END;
$$;

CREATE OR REPLACE TRIGGER evc_events_append_only
    BEFORE UPDATE OR DELETE ON evc_events
    FOR EACH ROW EXECUTE FUNCTION evc_append_only();
CREATE OR REPLACE TRIGGER evc_events_no_truncate
    BEFORE TRUNCATE ON evc_events
    FOR EACH STATEMENT EXECUTE FUNCTION evc_append_only();

CREATE OR REPLACE TRIGGER evc_delivery_attempts_immutable
    BEFORE UPDATE OR DELETE ON evc_delivery_attempts
    FOR EACH ROW EXECUTE FUNCTION evc_append_only();
CREATE OR REPLACE TRIGGER evc_delivery_attempts_no_truncate
    BEFORE TRUNCATE ON evc_delivery_attempts
    FOR EACH STATEMENT EXECUTE FUNCTION evc_append_only();

CREATE OR REPLACE TRIGGER evc_validation_rejects_append_only
    BEFORE UPDATE OR DELETE ON evc_validation_rejects
    FOR EACH ROW EXECUTE FUNCTION evc_append_only();
CREATE OR REPLACE TRIGGER evc_validation_rejects_no_truncate
    BEFORE TRUNCATE ON evc_validation_rejects
    FOR EACH STATEMENT EXECUTE FUNCTION evc_append_only();

CREATE OR REPLACE TRIGGER evc_replays_append_only
    BEFORE UPDATE OR DELETE ON evc_replays
    FOR EACH ROW EXECUTE FUNCTION evc_append_only();
CREATE OR REPLACE TRIGGER evc_replays_no_truncate
    BEFORE TRUNCATE ON evc_replays
    FOR EACH STATEMENT EXECUTE FUNCTION evc_append_only();

CREATE OR REPLACE TRIGGER evc_replay_items_immutable
    BEFORE UPDATE OR DELETE ON evc_replay_items
    FOR EACH ROW EXECUTE FUNCTION evc_append_only();
CREATE OR REPLACE TRIGGER evc_replay_items_no_truncate
    BEFORE TRUNCATE ON evc_replay_items
    FOR EACH STATEMENT EXECUTE FUNCTION evc_append_only();

CREATE OR REPLACE TRIGGER evc_reconciliations_append_only
    BEFORE UPDATE OR DELETE ON evc_reconciliations
    FOR EACH ROW EXECUTE FUNCTION evc_append_only();
CREATE OR REPLACE TRIGGER evc_reconciliations_no_truncate
    BEFORE TRUNCATE ON evc_reconciliations
    FOR EACH STATEMENT EXECUTE FUNCTION evc_append_only();

CREATE OR REPLACE TRIGGER evc_consumer_effects_append_only
    BEFORE UPDATE OR DELETE ON evc_consumer_effects
    FOR EACH ROW EXECUTE FUNCTION evc_append_only();
CREATE OR REPLACE TRIGGER evc_consumer_effects_no_truncate
    BEFORE TRUNCATE ON evc_consumer_effects
    FOR EACH STATEMENT EXECUTE FUNCTION evc_append_only();

CREATE OR REPLACE TRIGGER evc_purges_append_only
    BEFORE UPDATE OR DELETE ON evc_purges
    FOR EACH ROW EXECUTE FUNCTION evc_append_only();
CREATE OR REPLACE TRIGGER evc_purges_no_truncate
    BEFORE TRUNCATE ON evc_purges
    FOR EACH STATEMENT EXECUTE FUNCTION evc_append_only();

-- The purge reads events by age.
CREATE INDEX IF NOT EXISTS evc_events_produced_brin_idx ON evc_events USING brin (produced_at);

-- Retention: removes the events produced before `before` whose deliveries are all settled (no
-- delivery `pending` or `leased`), with their delivery rows, attempts, reconciliations and
-- replay items, and writes one `evc_purges` row first. Effects (idempotency records, keyed by
-- the handler) and replays (the audit of operators' decisions) are kept. Runs with the
-- caller's rights: the caller needs DELETE on those tables.
CREATE OR REPLACE FUNCTION evc_purge_events(before timestamptz, reason text, actor text)
    RETURNS TABLE (purge_id bigint, events bigint, deliveries bigint, attempts bigint,
        reconciliations bigint, replay_items bigint)
    LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE
    ids uuid[];
    deleted bigint;
BEGIN
    IF before IS NULL THEN
        RAISE EXCEPTION 'evc_purge_events: a cutoff is required'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT coalesce(array_agg(e.event_id), '{}') INTO ids FROM evc_events e
    WHERE e.produced_at < before
        AND NOT EXISTS (SELECT 1 FROM evc_deliveries d
            WHERE d.event_id = e.event_id AND d.status IN ('pending', 'leased'));
    -- Locked, then tested again: a replay committed meanwhile may have opened a delivery, and
    -- one that starts now waits for this transaction.
    PERFORM 1 FROM evc_deliveries d WHERE d.event_id = ANY (ids) FOR UPDATE;
    SELECT coalesce(array_agg(i.event_id), '{}') INTO ids FROM unnest(ids) AS i (event_id)
    WHERE NOT EXISTS (SELECT 1 FROM evc_deliveries d
        WHERE d.event_id = i.event_id AND d.status IN ('pending', 'leased'));

    events := cardinality(ids);
    SELECT count(*) INTO deliveries FROM evc_deliveries d WHERE d.event_id = ANY (ids);
    SELECT count(*) INTO attempts FROM evc_delivery_attempts a WHERE a.event_id = ANY (ids);
    SELECT count(*) INTO reconciliations FROM evc_reconciliations r
        WHERE r.event_id = ANY (ids);
    SELECT count(*) INTO replay_items FROM evc_replay_items r WHERE r.event_id = ANY (ids);
    INSERT INTO evc_purges (ledger, cutoff, reason, actor, tables, counts)
    VALUES ('events', before, reason, actor,
        ARRAY['evc_events', 'evc_delivery_attempts', 'evc_reconciliations', 'evc_replay_items'],
        jsonb_build_object('evc_events', events, 'evc_deliveries', deliveries,
            'evc_delivery_attempts', attempts, 'evc_reconciliations', reconciliations,
            'evc_replay_items', replay_items))
    RETURNING id INTO purge_id;

    PERFORM set_config('evc.purge', purge_id::text, true);
    DELETE FROM evc_delivery_attempts a WHERE a.event_id = ANY (ids);
    GET DIAGNOSTICS deleted = ROW_COUNT;
    IF deleted <> attempts THEN
        RAISE EXCEPTION 'evc_purge_events: attempts changed during the purge';
    END IF;
    DELETE FROM evc_reconciliations r WHERE r.event_id = ANY (ids);
    DELETE FROM evc_replay_items r WHERE r.event_id = ANY (ids);
    DELETE FROM evc_deliveries d WHERE d.event_id = ANY (ids);
    DELETE FROM evc_events e WHERE e.event_id = ANY (ids);
    PERFORM set_config('evc.purge', '', true);
    RETURN NEXT;
END;
$$;

-- Retention of the reject log: removes the rejects recorded before `before`, audited like
-- `evc_purge_events`.
CREATE OR REPLACE FUNCTION evc_purge_rejects(before timestamptz, reason text, actor text)
    RETURNS TABLE (purge_id bigint, rejects bigint)
    LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE
    deleted bigint;
BEGIN
    IF before IS NULL THEN
        RAISE EXCEPTION 'evc_purge_rejects: a cutoff is required'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT count(*) INTO rejects FROM evc_validation_rejects r WHERE r.rejected_at < before;
    INSERT INTO evc_purges (ledger, cutoff, reason, actor, tables, counts)
    VALUES ('rejects', before, reason, actor, ARRAY['evc_validation_rejects'],
        jsonb_build_object('evc_validation_rejects', rejects))
    RETURNING id INTO purge_id;
    PERFORM set_config('evc.purge', purge_id::text, true);
    DELETE FROM evc_validation_rejects r WHERE r.rejected_at < before;
    GET DIAGNOSTICS deleted = ROW_COUNT;
    IF deleted <> rejects THEN
        RAISE EXCEPTION 'evc_purge_rejects: rejects changed during the purge';
    END IF;
    PERFORM set_config('evc.purge', '', true);
    RETURN NEXT;
END;
$$;

-- The payload hard cap ({{ hard_max_bytes }} bytes, `payload_policy.hard_max_bytes`), for rows
-- written by hand too. The runtime measures canonical JSON (no whitespace); `jsonb` prints a
-- space after every `:` and `,`, taken out again here, so a payload the runtime accepts fits.
-- A trigger, not a CHECK constraint: a check violation's DETAIL quotes the whole failing row,
-- payload included, to the client and into the server log; this error names the event only.
-- Rows written before this step are not read.
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
    BEFORE INSERT ON evc_events
    FOR EACH ROW EXECUTE FUNCTION evc_events_payload_cap();
