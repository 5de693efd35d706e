-- {{ notice }}
--
-- evc runtime tables, twenty-sixth step: retention declared in the contracts (docs/runtime.md,
-- "Retention"). It follows `NNNN_evc_runtime_v25.sql`.
--
-- The settings migrations record the periods in the settings row; `evc purge` (or
-- `evc_purge_expired` from SQL) removes what they expire in one transaction that first writes
-- its `evc_purges` row. A new group role, `evc_retention`, may run it and nothing else: it reads
-- no payload and deletes nothing but through the purge.

-- The periods of the contracts, written by the settings migrations, so that `evc purge` needs
-- no build of the application. `retention_digest` is the settings digest of the file that wrote
-- them; they count only while it is the row's `settings_digest`.
ALTER TABLE evc_settings ADD COLUMN IF NOT EXISTS retention jsonb;
ALTER TABLE evc_settings ADD COLUMN IF NOT EXISTS retention_digest text;

-- The audit row of a retention purge names the ledger `retention`.
ALTER TABLE evc_purges DROP CONSTRAINT IF EXISTS evc_purges_ledger_check;
ALTER TABLE evc_purges ADD CONSTRAINT evc_purges_ledger_check
    CHECK (ledger IN ('events', 'rejects', 'retention'));

-- The purge reads attempts and idempotency records by age; both are written in time order,
-- so a block range index stays small. An insert into the newest block range, which stays
-- unsummarized until a vacuum summarizes it, leaves the index untouched.
CREATE INDEX IF NOT EXISTS evc_delivery_attempts_finished_brin_idx
    ON evc_delivery_attempts USING brin (finished_at);
CREATE INDEX IF NOT EXISTS evc_consumer_effects_created_brin_idx
    ON evc_consumer_effects USING brin (created_at);

-- Removes, as of `as_of`:
--   events of type event_types[i] produced before event_cutoffs[i] whose deliveries are all
--     settled, with their delivery rows, attempts, reconciliations and replay items;
--   attempts finished before `attempts_before` of deliveries no longer open;
--   reconciliations recorded before `reconciliations_before`;
--   rejects recorded before `rejects_before`;
--   idempotency records of consumer effect_consumers[i] created before effect_cutoffs[i] whose
--     event is gone (or goes in this purge).
-- A NULL cutoff keeps its table. Every row is counted first, the counts go into the audit row,
-- and each delete repeats its test: when a delete finds other rows than were counted (a
-- replay opened a delivery meanwhile) the purge fails and nothing is removed.
--
-- It runs with its owner's rights (SECURITY DEFINER): the retention role may execute it and
-- holds no DELETE of its own. A caller that is neither a superuser nor a member of the tables'
-- owner is held to the deployed periods: `as_of` is at most now, and each cutoff at most now
-- less the period `evc_settings.retention` gives its table (a table it gives none is kept;
-- idempotency records wait for the longest event period plus `effects`, and are kept while
-- a registered event type has none). So the retention role can remove nothing the contracts
-- keep. A session of one tenant is refused; any other session purges as every tenant's
-- (`evc.tenant` `*` for the transaction), so row-level security shows it every row whoever
-- owns the tables. Its search path is fixed when the step runs (the schema of the tables,
-- `pg_temp` last), so a caller's temporary tables cannot stand in for them.
CREATE OR REPLACE FUNCTION evc_purge_expired(as_of timestamptz, event_types text[],
        event_cutoffs timestamptz[], attempts_before timestamptz,
        reconciliations_before timestamptz, rejects_before timestamptz,
        effect_consumers text[], effect_cutoffs timestamptz[], reason text, actor text)
    RETURNS TABLE (purge_id bigint, events bigint, deliveries bigint, attempts bigint,
        reconciliations bigint, replay_items bigint, rejects bigint, effects bigint)
    LANGUAGE plpgsql SECURITY DEFINER AS $$
#variable_conflict use_variable
DECLARE
    ids uuid[] := '{}';
    session_tenant text;
    deployed jsonb;
    period bigint;
    attempt_ids bigint[];
    deleted bigint;
    n integer;
BEGIN
    IF as_of IS NULL
        OR coalesce(cardinality(event_types), 0) <> coalesce(cardinality(event_cutoffs), 0)
        OR coalesce(cardinality(effect_consumers), 0)
            <> coalesce(cardinality(effect_cutoffs), 0) THEN
        RAISE EXCEPTION 'evc_purge_expired: a time and one cutoff per event type and consumer are required'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF coalesce(nullif(current_setting('evc.tenant', true), ''), '*') <> '*' THEN
        RAISE EXCEPTION 'evc_purge_expired: a purge spans every tenant; this session works for one'
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    session_tenant := current_setting('evc.tenant', true);
    PERFORM set_config('evc.tenant', '*', true);

    IF NOT coalesce((SELECT r.rolsuper FROM pg_roles r WHERE r.rolname = session_user), false)
        AND NOT pg_has_role(session_user,
            (SELECT c.relowner FROM pg_class c WHERE c.oid = 'evc_events'::regclass), 'MEMBER')
    THEN
        SELECT st.retention INTO deployed FROM evc_settings st
        WHERE st.id AND st.retention_digest = st.settings_digest;
        as_of := least(as_of, now());
        FOR n IN 1 .. coalesce(cardinality(event_types), 0) LOOP
            period := (SELECT (e ->> 'ms')::bigint
                FROM jsonb_array_elements(coalesce(deployed -> 'events', '[]')) AS e
                WHERE e ->> 'event_type' = event_types[n]);
            event_cutoffs[n] := CASE WHEN period IS NOT NULL
                THEN least(event_cutoffs[n], now() - period * interval '1 millisecond') END;
        END LOOP;
        period := (deployed ->> 'attempts_ms')::bigint;
        attempts_before := CASE WHEN period IS NOT NULL
            THEN least(attempts_before, now() - period * interval '1 millisecond') END;
        period := (deployed ->> 'reconciliations_ms')::bigint;
        reconciliations_before := CASE WHEN period IS NOT NULL
            THEN least(reconciliations_before, now() - period * interval '1 millisecond') END;
        period := (deployed ->> 'rejects_ms')::bigint;
        rejects_before := CASE WHEN period IS NOT NULL
            THEN least(rejects_before, now() - period * interval '1 millisecond') END;
        -- The longest horizon any consumer may have; none while a type keeps its events.
        period := CASE
            WHEN (SELECT count(*) FROM evc_event_types)
                > jsonb_array_length(coalesce(deployed -> 'events', '[]')) THEN NULL
            ELSE (SELECT max((e ->> 'ms')::bigint)
                    FROM jsonb_array_elements(deployed -> 'events') AS e)
                + (deployed ->> 'effects_ms')::bigint
        END;
        FOR n IN 1 .. coalesce(cardinality(effect_consumers), 0) LOOP
            effect_cutoffs[n] := CASE WHEN period IS NOT NULL
                THEN least(effect_cutoffs[n], now() - period * interval '1 millisecond') END;
        END LOOP;
    END IF;

    FOR n IN 1 .. coalesce(cardinality(event_types), 0) LOOP
        ids := ids || ARRAY(
            SELECT e.event_id FROM evc_events e
            WHERE e.event_type = event_types[n] AND e.produced_at < event_cutoffs[n]
                AND NOT EXISTS (SELECT 1 FROM evc_deliveries d
                    WHERE d.event_id = e.event_id AND d.status IN ('pending', 'leased')));
    END LOOP;
    events := cardinality(ids);
    -- The settled deliveries whose old attempts may go, locked: a replay that would open one
    -- waits for the purge, and one that opened one first is seen by the count below.
    IF attempts_before IS NOT NULL THEN
        PERFORM 1 FROM evc_deliveries d
        WHERE d.status NOT IN ('pending', 'leased')
            AND EXISTS (SELECT 1 FROM evc_delivery_attempts a
                WHERE a.event_id = d.event_id AND a.consumer = d.consumer
                    AND a.finished_at < attempts_before)
        FOR SHARE;
    END IF;
    SELECT count(*) INTO deliveries FROM evc_deliveries d WHERE d.event_id = ANY (ids);
    SELECT coalesce(array_agg(a.id), '{}') INTO attempt_ids FROM evc_delivery_attempts a
    WHERE a.event_id = ANY (ids)
        OR (a.finished_at < attempts_before AND NOT EXISTS (SELECT 1 FROM evc_deliveries d
            WHERE d.event_id = a.event_id AND d.consumer = a.consumer
                AND d.status IN ('pending', 'leased')));
    attempts := cardinality(attempt_ids);
    SELECT count(*) INTO reconciliations FROM evc_reconciliations r
    WHERE r.event_id = ANY (ids) OR r.recorded_at < reconciliations_before;
    SELECT count(*) INTO replay_items FROM evc_replay_items r WHERE r.event_id = ANY (ids);
    SELECT count(*) INTO rejects FROM evc_validation_rejects r WHERE r.rejected_at < rejects_before;
    SELECT count(*) INTO effects FROM evc_consumer_effects f
        JOIN unnest(effect_consumers, effect_cutoffs) AS c (consumer, before)
            ON c.consumer = f.consumer AND f.created_at < c.before
    WHERE NOT EXISTS (SELECT 1 FROM evc_events e
        WHERE e.event_id = f.event_id AND e.event_id <> ALL (ids));

    INSERT INTO evc_purges (ledger, cutoff, reason, actor, tables, counts)
    VALUES ('retention', as_of, reason, actor,
        ARRAY['evc_events', 'evc_delivery_attempts', 'evc_reconciliations', 'evc_replay_items',
            'evc_validation_rejects', 'evc_consumer_effects'],
        jsonb_build_object('evc_events', events, 'evc_deliveries', deliveries,
            'evc_delivery_attempts', attempts, 'evc_reconciliations', reconciliations,
            'evc_replay_items', replay_items, 'evc_validation_rejects', rejects,
            'evc_consumer_effects', effects))
    RETURNING id INTO purge_id;

    PERFORM set_config('evc.purge', purge_id::text, true);
    -- The test again: a replay may have opened a delivery of these attempts since they were
    -- counted.
    DELETE FROM evc_delivery_attempts a
    WHERE a.id = ANY (attempt_ids)
        AND (a.event_id = ANY (ids) OR NOT EXISTS (SELECT 1 FROM evc_deliveries d
            WHERE d.event_id = a.event_id AND d.consumer = a.consumer
                AND d.status IN ('pending', 'leased')));
    GET DIAGNOSTICS deleted = ROW_COUNT;
    IF deleted <> attempts THEN
        RAISE EXCEPTION 'evc_purge_expired: attempts changed during the purge'
            USING ERRCODE = 'serialization_failure';
    END IF;
    DELETE FROM evc_reconciliations r
    WHERE r.event_id = ANY (ids) OR r.recorded_at < reconciliations_before;
    GET DIAGNOSTICS deleted = ROW_COUNT;
    IF deleted <> reconciliations THEN
        RAISE EXCEPTION 'evc_purge_expired: reconciliations changed during the purge'
            USING ERRCODE = 'serialization_failure';
    END IF;
    DELETE FROM evc_replay_items r WHERE r.event_id = ANY (ids);
    DELETE FROM evc_consumer_effects f
    USING unnest(effect_consumers, effect_cutoffs) AS c (consumer, before)
    WHERE c.consumer = f.consumer AND f.created_at < c.before
        AND NOT EXISTS (SELECT 1 FROM evc_events e
            WHERE e.event_id = f.event_id AND e.event_id <> ALL (ids));
    GET DIAGNOSTICS deleted = ROW_COUNT;
    IF deleted <> effects THEN
        RAISE EXCEPTION 'evc_purge_expired: idempotency records changed during the purge'
            USING ERRCODE = 'serialization_failure';
    END IF;
    -- Only settled rows: a delivery a replay opened since the count stays, and the count
    -- tells.
    DELETE FROM evc_deliveries d
    WHERE d.event_id = ANY (ids) AND d.status NOT IN ('pending', 'leased');
    GET DIAGNOSTICS deleted = ROW_COUNT;
    IF deleted <> deliveries THEN
        RAISE EXCEPTION 'evc_purge_expired: deliveries changed during the purge'
            USING ERRCODE = 'serialization_failure';
    END IF;
    DELETE FROM evc_events e
    WHERE e.event_id = ANY (ids)
        AND NOT EXISTS (SELECT 1 FROM evc_deliveries d WHERE d.event_id = e.event_id);
    GET DIAGNOSTICS deleted = ROW_COUNT;
    IF deleted <> events THEN
        RAISE EXCEPTION 'evc_purge_expired: events changed during the purge'
            USING ERRCODE = 'serialization_failure';
    END IF;
    DELETE FROM evc_validation_rejects r WHERE r.rejected_at < rejects_before;
    GET DIAGNOSTICS deleted = ROW_COUNT;
    IF deleted <> rejects THEN
        RAISE EXCEPTION 'evc_purge_expired: rejects changed during the purge'
            USING ERRCODE = 'serialization_failure';
    END IF;
    PERFORM set_config('evc.purge', '', true);
    PERFORM set_config('evc.tenant', coalesce(session_tenant, ''), true);
    RETURN NEXT;
END;
$$;

-- The tables' schema, then the temporary schema last: a caller's temporary table never
-- resolves before the real one.
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION evc_purge_expired(timestamptz, text[], timestamptz[], '
        'timestamptz, timestamptz, timestamptz, text[], timestamptz[], text, text) '
        'SET search_path = pg_catalog, %I, pg_temp', current_schema());
END
$$;

-- Only the retention role (and the owner) may run the purge.
REVOKE ALL ON FUNCTION evc_purge_expired(timestamptz, text[], timestamptz[], timestamptz,
    timestamptz, timestamptz, text[], timestamptz[], text, text) FROM PUBLIC;

-- The retention role: reads the registry, the settings and the purge audit, and runs the
-- purge; it deletes nothing and reads no payload itself. Created like the roles of the tenth
-- step; skipped with a notice where the migrating role may not create roles.
DO $$
BEGIN
    IF to_regrole('evc_retention') IS NULL THEN
        IF NOT EXISTS (
            SELECT 1 FROM pg_roles WHERE rolname = current_user AND (rolsuper OR rolcreaterole)
        ) THEN
            RAISE NOTICE 'evc: role evc_retention does not exist and % may not create it: its grants are skipped',
                current_user;
            RETURN;
        END IF;
        BEGIN
            CREATE ROLE evc_retention NOLOGIN;
        EXCEPTION WHEN duplicate_object OR unique_violation THEN
            -- Another database's migration created it meanwhile.
            NULL;
        END;
    END IF;
    GRANT SELECT ON evc_event_types, evc_event_versions, evc_consumers, evc_subscriptions,
        evc_retry_policies, evc_registry_state, evc_settings, evc_schedules, evc_purges
        TO evc_retention;
    -- What `Role::check` reads to tell a role granted in this database.
    GRANT SELECT (event_id) ON evc_events TO evc_retention;
    GRANT EXECUTE ON FUNCTION evc_purge_expired(timestamptz, text[], timestamptz[], timestamptz,
        timestamptz, timestamptz, text[], timestamptz[], text, text) TO evc_retention;
END
$$;
