-- {{ notice }}
--
-- evc runtime tables, thirty-first step: one audit row per acked batch (docs/runtime.md,
-- "Acked batches"). It follows `NNNN_evc_runtime_v30.sql`.
--
-- Every ack wrote one `acked` row into evc_delivery_attempts per delivery: a heap record and
-- two B-tree entries, about 330 B of WAL per job, the largest part of what a drain writes.
-- The acks now write one row per statement, consumer, worker, tenant and bucket of 256
-- event sequence numbers, the deliveries' own fields in parallel arrays (docs/bench/
-- 2026-12-07-acked-batches.md). Attempts that end any other way keep their row in
-- evc_delivery_attempts, and what was written there stays.
--
-- An event's acked attempts are found by its bucket and consumer, so a lookup reads the rows
-- of one bucket: at most 256 where every ack is a single delivery, a few where acks come in
-- batches. A wider bucket splits fewer batches into rows and makes lookups read more.
CREATE TABLE IF NOT EXISTS evc_acked_batches (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    consumer text NOT NULL,
    owner text NOT NULL,
    tenant_scope text,
    -- `event_seq / 256` of every event in the row: an event's acked attempts are found by
    -- its bucket and consumer (equality on plain columns, which a tenant's session may search
    -- by under row-level security).
    seq_bucket bigint NOT NULL,
    finished_at timestamptz NOT NULL,
    -- One entry per acked delivery, in event order: the delivery, its generation, the attempt
    -- that acked it with its fencing token, and when its handler started.
    event_ids uuid[] NOT NULL,
    generations integer[] NOT NULL,
    attempts integer[] NOT NULL,
    fencing_tokens bigint[] NOT NULL,
    started_at timestamptz[] NOT NULL,
    -- Parallel: five arrays of one dimension from 1 to n, no element NULL (readers pair them
    -- with a multi-argument `unnest`, the purge by subscript).
    CONSTRAINT evc_acked_batches_parallel CHECK (
        cardinality(event_ids) >= 1
        AND array_ndims(event_ids) = 1 AND array_lower(event_ids, 1) = 1
        AND array_ndims(generations) = 1 AND array_lower(generations, 1) = 1
        AND array_ndims(attempts) = 1 AND array_lower(attempts, 1) = 1
        AND array_ndims(fencing_tokens) = 1 AND array_lower(fencing_tokens, 1) = 1
        AND array_ndims(started_at) = 1 AND array_lower(started_at, 1) = 1
        AND cardinality(generations) = cardinality(event_ids)
        AND cardinality(attempts) = cardinality(event_ids)
        AND cardinality(fencing_tokens) = cardinality(event_ids)
        AND cardinality(started_at) = cardinality(event_ids)
        AND array_position(event_ids, NULL) IS NULL
        AND array_position(generations, NULL) IS NULL
        AND array_position(attempts, NULL) IS NULL
        AND array_position(fencing_tokens, NULL) IS NULL
        AND array_position(started_at, NULL) IS NULL
    )
);

CREATE INDEX IF NOT EXISTS evc_acked_batches_bucket_idx
    ON evc_acked_batches (seq_bucket, consumer);

-- Retention reads the rows by age; they are written in time order.
CREATE INDEX IF NOT EXISTS evc_acked_batches_finished_brin_idx
    ON evc_acked_batches USING brin (finished_at);

-- An audit ledger like evc_delivery_attempts: rows leave only through a purge.
CREATE OR REPLACE TRIGGER evc_acked_batches_append_only
    BEFORE UPDATE OR DELETE ON evc_acked_batches
    FOR EACH ROW EXECUTE FUNCTION evc_append_only();
CREATE OR REPLACE TRIGGER evc_acked_batches_no_truncate
    BEFORE TRUNCATE ON evc_acked_batches
    FOR EACH STATEMENT EXECUTE FUNCTION evc_append_only();

-- A row belongs to the tenant of its deliveries (the acks write one row per tenant), and a
-- dispatcher login of some consumers writes rows of those consumers only, as with attempts.
-- That holds in a purge too: a purge run by such a login that would write another
-- consumer's shortened row again is refused whole and removes nothing (run purges as a login
-- without consumer roles, such as one granted evc_retention alone).
DROP POLICY IF EXISTS evc_tenant ON evc_acked_batches;
CREATE POLICY evc_tenant ON evc_acked_batches USING (evc_tenant_visible(tenant_scope));
DROP POLICY IF EXISTS evc_consumer_scope_insert ON evc_acked_batches;
CREATE POLICY evc_consumer_scope_insert ON evc_acked_batches AS RESTRICTIVE FOR INSERT
    WITH CHECK ((SELECT evc_login_consumers()) IS NULL
        OR consumer = ANY ((SELECT evc_login_consumers())::text[]));

-- The grants of evc_delivery_attempts: dispatchers write, every job reads (no payload here).
DO $$
DECLARE
    item record;
BEGIN
    FOR item IN
        SELECT * FROM (VALUES
            ('evc_reader', 'SELECT ON evc_acked_batches'),
            ('evc_dispatcher', 'SELECT, INSERT ON evc_acked_batches'),
            ('evc_operator', 'SELECT ON evc_acked_batches'),
            ('evc_approver', 'SELECT ON evc_acked_batches')
        ) AS grants (job, privileges)
    LOOP
        IF to_regrole(item.job) IS NOT NULL THEN
            EXECUTE format('GRANT %s TO %I', item.privileges, item.job);
        END IF;
    END LOOP;
END
$$;

-- The acked attempts a purge removes: of the events `gone`, and, when `attempts_before` is
-- set, those finished before it whose delivery no replay opened again. One row per attempt
-- of every batch row holding one: the row, the attempt's place in it, and whether it goes.
CREATE OR REPLACE FUNCTION evc_acked_batches_expiring(gone uuid[], attempts_before timestamptz)
    RETURNS TABLE (id bigint, n bigint, goes boolean)
    LANGUAGE sql STABLE AS $$
    -- `coalesce`: with no `attempts_before` the age test is NULL, and an attempt that does not
    -- go must say false, or the row written anew would leave it out.
    SELECT b.id, u.n, coalesce(u.event_id = ANY (gone), false)
        OR coalesce(b.finished_at < attempts_before
            AND NOT EXISTS (SELECT 1 FROM evc_deliveries d
                WHERE d.event_id = u.event_id AND d.consumer = b.consumer
                    AND d.status IN ('pending', 'leased')), false)
    FROM evc_acked_batches b
    CROSS JOIN LATERAL unnest(b.event_ids) WITH ORDINALITY AS u (event_id, n)
    WHERE (b.seq_bucket IN (SELECT e.seq / 256 FROM evc_events e WHERE e.event_id = ANY (gone))
            AND b.event_ids && gone)
        OR b.finished_at < attempts_before
$$;

-- How many acked attempts `evc_acked_batches_prune` would remove now.
CREATE OR REPLACE FUNCTION evc_acked_batches_expiring_count(gone uuid[],
        attempts_before timestamptz) RETURNS bigint
    LANGUAGE sql STABLE AS $$
    SELECT count(*) FROM evc_acked_batches_expiring(gone, attempts_before) AS x WHERE x.goes
$$;

-- Removes those attempts inside a purge (which lets it delete, `evc_purge_open`). A row never
-- changes: one that keeps some of its attempts is deleted and written anew with those alone,
-- under its own id (readers take the newest rows by id). Returns how many attempts it
-- removed. Runs before the purge deletes the events and deliveries it reads.
CREATE OR REPLACE FUNCTION evc_acked_batches_prune(gone uuid[], attempts_before timestamptz)
    RETURNS bigint
    LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE
    removed bigint;
BEGIN
    WITH x AS (
        SELECT * FROM evc_acked_batches_expiring(gone, attempts_before)
    ), touched AS (
        SELECT x.id FROM x GROUP BY x.id HAVING bool_or(x.goes)
    ), old AS (
        DELETE FROM evc_acked_batches b WHERE b.id IN (SELECT t.id FROM touched t)
        RETURNING b.*
    ), kept AS (
        INSERT INTO evc_acked_batches (id, consumer, owner, tenant_scope, seq_bucket,
            finished_at, event_ids, generations, attempts, fencing_tokens, started_at)
        OVERRIDING SYSTEM VALUE
        SELECT o.id, o.consumer, o.owner, o.tenant_scope, o.seq_bucket, o.finished_at,
            array_agg(o.event_ids[x.n] ORDER BY x.n), array_agg(o.generations[x.n] ORDER BY x.n),
            array_agg(o.attempts[x.n] ORDER BY x.n),
            array_agg(o.fencing_tokens[x.n] ORDER BY x.n),
            array_agg(o.started_at[x.n] ORDER BY x.n)
        FROM old o JOIN x ON x.id = o.id AND NOT x.goes
        GROUP BY o.id, o.consumer, o.owner, o.tenant_scope, o.seq_bucket, o.finished_at
        RETURNING 1
    )
    SELECT count(*) INTO removed FROM old o JOIN x ON x.id = o.id WHERE x.goes;
    RETURN removed;
END;
$$;

REVOKE ALL ON FUNCTION evc_acked_batches_expiring(uuid[], timestamptz) FROM PUBLIC;
REVOKE ALL ON FUNCTION evc_acked_batches_expiring_count(uuid[], timestamptz) FROM PUBLIC;
REVOKE ALL ON FUNCTION evc_acked_batches_prune(uuid[], timestamptz) FROM PUBLIC;

-- As the fifth step's function, with the acked batches among the ledgers it purges.
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
    attempts := attempts + evc_acked_batches_expiring_count(ids, NULL);
    SELECT count(*) INTO reconciliations FROM evc_reconciliations r
        WHERE r.event_id = ANY (ids);
    SELECT count(*) INTO replay_items FROM evc_replay_items r WHERE r.event_id = ANY (ids);
    INSERT INTO evc_purges (ledger, cutoff, reason, actor, tables, counts)
    VALUES ('events', before, reason, actor,
        ARRAY['evc_events', 'evc_delivery_attempts', 'evc_acked_batches', 'evc_reconciliations',
            'evc_replay_items'],
        jsonb_build_object('evc_events', events, 'evc_deliveries', deliveries,
            'evc_delivery_attempts', attempts, 'evc_reconciliations', reconciliations,
            'evc_replay_items', replay_items))
    RETURNING id INTO purge_id;

    PERFORM set_config('evc.purge', purge_id::text, true);
    DELETE FROM evc_delivery_attempts a WHERE a.event_id = ANY (ids);
    GET DIAGNOSTICS deleted = ROW_COUNT;
    deleted := deleted + evc_acked_batches_prune(ids, NULL);
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

-- As the twenty-sixth step's function, with the acked batches among the ledgers it purges.
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
    attempts := cardinality(attempt_ids) + evc_acked_batches_expiring_count(ids, attempts_before);
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
        ARRAY['evc_events', 'evc_delivery_attempts', 'evc_acked_batches', 'evc_reconciliations',
            'evc_replay_items', 'evc_validation_rejects', 'evc_consumer_effects'],
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
    deleted := deleted + evc_acked_batches_prune(ids, attempts_before);
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

-- `CREATE OR REPLACE` keeps the grants but not the search path: fixed again as the
-- twenty-sixth step fixed it.
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION evc_purge_expired(timestamptz, text[], timestamptz[], '
        'timestamptz, timestamptz, timestamptz, text[], timestamptz[], text, text) '
        'SET search_path = pg_catalog, %I, pg_temp', current_schema());
END
$$;

-- As the twenty-ninth step's function, with the acked batches among the tables of the consumer
-- scope, which keep row-level security on whether tenants are required or not.
CREATE OR REPLACE FUNCTION evc_apply_tenancy(required boolean) RETURNS void
    LANGUAGE plpgsql AS $$
DECLARE
    tbl text;
    scoped constant regclass[] := ARRAY['evc_deliveries'::regclass,
        'evc_delivery_attempts'::regclass, 'evc_acked_batches'::regclass,
        'evc_consumer_effects'::regclass, 'evc_reconciliations'::regclass];
BEGIN
    FOR tbl IN
        SELECT c.relname FROM pg_class c
        WHERE c.oid IN ('evc_events'::regclass,
                'evc_validation_rejects'::regclass, 'evc_replays'::regclass,
                'evc_discards'::regclass, 'evc_plans'::regclass, 'evc_purges'::regclass,
                'evc_tenant_pauses'::regclass, 'evc_state_changes'::regclass,
                'evc_replay_items'::regclass, 'evc_legacy_outcomes'::regclass,
                'evc_cutover_explanations'::regclass, 'evc_inventories'::regclass,
                'evc_inventory_items'::regclass, 'evc_evidence_snapshots'::regclass)
            AND (c.relrowsecurity, c.relforcerowsecurity) IS DISTINCT FROM (required, required)
    LOOP
        IF required THEN
            EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY',
                tbl);
        ELSE
            EXECUTE format('ALTER TABLE %I DISABLE ROW LEVEL SECURITY, NO FORCE ROW LEVEL SECURITY',
                tbl);
        END IF;
    END LOOP;
    FOR tbl IN
        SELECT c.relname FROM pg_class c
        WHERE c.oid = ANY (scoped) AND required = EXISTS (
            SELECT 1 FROM pg_policy p WHERE p.polrelid = c.oid AND p.polname = 'evc_untenanted')
    LOOP
        IF required THEN
            EXECUTE format('DROP POLICY evc_untenanted ON %I', tbl);
        ELSE
            EXECUTE format('CREATE POLICY evc_untenanted ON %I USING (true)', tbl);
        END IF;
    END LOOP;
    FOR tbl IN
        SELECT c.relname FROM pg_class c
        WHERE c.oid = ANY (scoped)
            AND (c.relrowsecurity, c.relforcerowsecurity) IS DISTINCT FROM (true, required)
    LOOP
        IF required THEN
            EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY',
                tbl);
        ELSE
            EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY, NO FORCE ROW LEVEL SECURITY',
                tbl);
        END IF;
    END LOOP;
END;
$$;

REVOKE ALL ON FUNCTION evc_apply_tenancy(boolean) FROM PUBLIC;

SELECT evc_apply_tenancy(coalesce((SELECT require_tenant_scope FROM evc_settings), false));
