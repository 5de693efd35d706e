-- {{ notice }}
--
-- evc runtime tables, thirteenth step: a recorded plan is applied once (docs/runtime.md,
-- "Replay"), and a tenant's claims find its deliveries by index (docs/runtime.md, "Tenants").
-- It follows `NNNN_evc_runtime_v12.sql`. The two-person trigger checks that a
-- replay or discard names a plan someone else proposed, but not that no earlier one took it:
-- a login that may insert replays could apply an approved plan again with hand-written SQL,
-- under a new idempotency key, with no one proposing again. The trigger now refuses that with
-- a readable error, and a unique index refuses it where the trigger cannot see the earlier row
-- (a concurrent insert not yet committed, a row of another tenant's scope).

CREATE OR REPLACE FUNCTION evc_two_person() RETURNS trigger
    LANGUAGE plpgsql AS $$
DECLARE
    plan evc_plans%ROWTYPE;
    taken boolean;
BEGIN
    SELECT * INTO plan FROM evc_plans WHERE id = NEW.plan_id;
    IF NOT FOUND OR NEW.approved_by IS NULL OR char_length(btrim(NEW.approved_by)) = 0 THEN
        RAISE EXCEPTION '% needs a proposed plan and an approver (two-person rule)', TG_TABLE_NAME
            USING ERRCODE = 'check_violation';
    END IF;
    IF plan.kind IS DISTINCT FROM TG_ARGV[0] OR plan.consumer IS DISTINCT FROM NEW.consumer
        OR plan.plan_digest IS DISTINCT FROM NEW.plan_digest THEN
        RAISE EXCEPTION '% names plan % of another kind, consumer or digest', TG_TABLE_NAME,
            plan.id USING ERRCODE = 'check_violation';
    END IF;
    IF lower(btrim(plan.planned_by)) = lower(btrim(NEW.approved_by)) THEN
        RAISE EXCEPTION '% cannot approve the plan they proposed (two-person rule)',
            NEW.approved_by USING ERRCODE = 'check_violation';
    END IF;
    EXECUTE format('SELECT EXISTS (SELECT 1 FROM %I.%I WHERE plan_id = $1)', TG_TABLE_SCHEMA,
        TG_TABLE_NAME) INTO taken USING NEW.plan_id;
    IF taken THEN
        RAISE EXCEPTION 'plan % was applied already: propose it again', plan.id
            USING ERRCODE = 'unique_violation', CONSTRAINT = TG_TABLE_NAME || '_plan_once';
    END IF;
    NEW.db_role := session_user;
    RETURN NEW;
END;
$$;

-- One replay or discard per plan. Rows written before this step that already share a plan
-- (the reuse this step refuses) are left out of the index, so the step applies on such a
-- database too; every later row is in it. The rows are counted in every tenant's scope: the
-- index covers them all whatever the migrating session's setting.
DO $$
DECLARE
    tbl text;
    kept_below bigint;
BEGIN
    PERFORM set_config('evc.tenant', '*', true);
    FOREACH tbl IN ARRAY ARRAY['evc_replays', 'evc_discards']
    LOOP
        EXECUTE format('SELECT coalesce(max(id), 0) FROM %I WHERE plan_id IN '
            '(SELECT plan_id FROM %I WHERE plan_id IS NOT NULL '
            'GROUP BY plan_id HAVING count(*) > 1)', tbl, tbl) INTO kept_below;
        EXECUTE format('CREATE UNIQUE INDEX IF NOT EXISTS %I ON %I (plan_id) '
            'WHERE plan_id IS NOT NULL AND id > %s', tbl || '_plan_once', tbl, kept_below);
    END LOOP;
END
$$;

-- The due deliveries of a consumer for one tenant, in seq order: a claim in a tenant's session
-- scans these (docs/runtime.md, "Tenants") instead of reading past the other tenants' backlog.
-- Deliveries without a tenant (NULL) have no entry.
CREATE INDEX IF NOT EXISTS evc_deliveries_tenant_due_idx
    ON evc_deliveries (consumer, tenant_scope, event_seq)
    WHERE status = 'pending' AND tenant_scope IS NOT NULL;
