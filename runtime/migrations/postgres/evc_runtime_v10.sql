-- {{ notice }}
--
-- evc runtime tables, tenth step: one group role per job, granted only what the job needs
-- (docs/runtime.md, "Roles"). It follows `NNNN_evc_runtime_v9.sql`. The roles are NOLOGIN
-- groups: a deployment grants them to its logins (`GRANT evc_dispatcher TO billing_worker`),
-- and the evc CLI connects with the role of each command's job. The role that runs the
-- migrations owns the tables and keeps every right (migrate, retention).
--
--   evc_reader      reads everything but event payloads and intended effects
--   evc_producer    appends events (and their deliveries, rejects)
--   evc_dispatcher  claims, settles and audits deliveries; emits lifecycle events
--   evc_operator    reads payloads, pauses, resumes, sets modes, proposes replays and discards
--   evc_approver    applies a proposed replay or discard (the two-person rule)
--
-- Roles belong to the cluster, grants to this database. A role that does not exist is
-- created when the migrating role may create roles; otherwise its grants are skipped with a
-- notice, and a database administrator creates it and runs this step's grants again. Every
-- statement is guarded, so running this file again is a no-op; sqlx runs it once, in one
-- transaction.

DO $$
DECLARE
    job text;
BEGIN
    FOREACH job IN ARRAY ARRAY['evc_reader', 'evc_producer', 'evc_dispatcher', 'evc_operator',
        'evc_approver']
    LOOP
        CONTINUE WHEN to_regrole(job) IS NOT NULL;
        IF NOT EXISTS (
            SELECT 1 FROM pg_roles WHERE rolname = current_user AND (rolsuper OR rolcreaterole)
        ) THEN
            RAISE NOTICE 'evc: role % does not exist and % may not create it: its grants are skipped',
                job, current_user;
            CONTINUE;
        END IF;
        BEGIN
            EXECUTE format('CREATE ROLE %I NOLOGIN', job);
        EXCEPTION WHEN duplicate_object OR unique_violation THEN
            -- Another database's migration created it meanwhile.
            NULL;
        END;
    END LOOP;
END
$$;

DO $$
DECLARE
    registry constant text := 'evc_event_types, evc_event_versions, evc_consumers, '
        'evc_subscriptions, evc_retry_policies, evc_registry_state, evc_settings';
    audit constant text := 'evc_deliveries, evc_delivery_attempts, evc_consumer_state, '
        'evc_consumer_effects, evc_heartbeats, evc_stale_rejections, evc_validation_rejects, '
        'evc_replays, evc_replay_items, evc_discards, evc_plans, evc_purges';
    -- A batch append reserves its events' sequence numbers before it copies them.
    event_seq constant text := 'USAGE ON SEQUENCE ' || pg_get_serial_sequence('evc_events', 'seq');
    item record;
BEGIN
    FOR item IN
        SELECT * FROM (VALUES
            -- Everything but payloads: the event's envelope and the reconciliation's facts.
            ('evc_reader', 'SELECT ON ' || registry || ', ' || audit),
            ('evc_reader', 'SELECT (seq, event_id, event_type, schema_version, order_key, '
                'tenant_scope, producer_class, idempotency_key, produced_at, trace_id, '
                'parent_span_id, trace_flags, correlation_id, causation_id, payload_bytes) '
                'ON evc_events'),
            ('evc_reader', 'SELECT (consumer, event_id, generation, fencing_token, recorded_at) '
                'ON evc_reconciliations'),
            -- Append: the event, its fan-out and the audit of a refused payload; what the
            -- appends return and the lookups of idempotency keys read. No payload.
            ('evc_producer', 'SELECT ON ' || registry),
            ('evc_producer', 'SELECT (seq, event_id, order_key, producer_class, idempotency_key) '
                'ON evc_events'),
            ('evc_producer', 'SELECT (consumer) ON evc_deliveries'),
            ('evc_producer', 'INSERT ON evc_events, evc_deliveries, evc_validation_rejects'),
            ('evc_producer', event_seq),
            -- Claim, renew, ack, fail, recover; attempts, effects, reconciliations, heartbeats;
            -- lifecycle events (appended like a producer's). `UPDATE (id)` on evc_replays only
            -- lets a settle lock its replay's row (`FOR UPDATE`): the table is append-only.
            ('evc_dispatcher', 'SELECT ON ' || registry || ', ' || audit
                || ', evc_events, evc_reconciliations'),
            ('evc_dispatcher', 'INSERT, UPDATE, DELETE ON evc_deliveries, evc_heartbeats'),
            ('evc_dispatcher', 'INSERT, UPDATE ON evc_stale_rejections'),
            ('evc_dispatcher', 'INSERT ON evc_delivery_attempts, evc_consumer_effects, '
                'evc_reconciliations, evc_events, evc_validation_rejects'),
            ('evc_dispatcher', 'UPDATE (id) ON evc_replays'),
            ('evc_dispatcher', event_seq),
            -- Pause, resume, modes; plans (a dry run validates payloads).
            ('evc_operator', 'SELECT ON ' || registry || ', ' || audit
                || ', evc_events, evc_reconciliations'),
            ('evc_operator', 'INSERT, UPDATE ON evc_consumer_state'),
            ('evc_operator', 'INSERT ON evc_plans'),
            -- Apply: new generations of deliveries, the audit of the decision, its lifecycle
            -- event.
            ('evc_approver', 'SELECT ON ' || registry || ', ' || audit
                || ', evc_events, evc_reconciliations'),
            -- Only the columns an apply sets, so an approver cannot take a lease (claim).
            ('evc_approver', 'INSERT, UPDATE (status, updated_at, discard_id) ON evc_deliveries'),
            ('evc_approver', 'INSERT ON evc_replays, evc_replay_items, evc_discards, evc_events, '
                'evc_validation_rejects'),
            ('evc_approver', event_seq)
        ) AS grants (job, privileges)
    LOOP
        -- `to_regrole`, not a read of `pg_roles`: it also sees a role another database's
        -- migration committed after this transaction's snapshot.
        IF to_regrole(item.job) IS NOT NULL THEN
            EXECUTE format('GRANT %s TO %I', item.privileges, item.job);
        END IF;
    END LOOP;
END
$$;
