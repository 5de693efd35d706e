-- {{ notice }}
--
-- evc runtime tables, ninth step: the two-person rule of replay and discard (docs/runtime.md,
-- "Replay"). It follows `NNNN_evc_runtime_v8.sql`. A plan is recorded when a person proposes
-- it (`evc_plans`); apply names the recorded plan and the person who approves it, and the
-- database refuses an apply whose approver proposed the plan, or whose plan is of another
-- kind, consumer or digest. Rows recorded before this step keep NULL plan and approver: they
-- are not rewritten. Every statement is guarded, so running this file again is a no-op; sqlx
-- runs it once, in one transaction.

-- One row per proposed plan: what, for which consumer, by whom, through which database role.
CREATE TABLE IF NOT EXISTS evc_plans (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind text NOT NULL CHECK (kind IN ('replay', 'discard')),
    consumer text NOT NULL,
    plan_digest text NOT NULL,
    deliveries integer NOT NULL CHECK (deliveries >= 1),
    planned_by text NOT NULL CHECK (char_length(btrim(planned_by)) BETWEEN 1 AND 200),
    db_role text NOT NULL DEFAULT session_user,
    planned_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX IF NOT EXISTS evc_plans_digest ON evc_plans (consumer, plan_digest);

-- The database role is the session's, whatever the insert says: a writer cannot record
-- another role as the one that proposed or applied.
CREATE OR REPLACE FUNCTION evc_session_role() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    NEW.db_role := session_user;
    RETURN NEW;
END;
$$;

CREATE OR REPLACE TRIGGER evc_plans_session_role
    BEFORE INSERT ON evc_plans
    FOR EACH ROW EXECUTE FUNCTION evc_session_role();

CREATE OR REPLACE TRIGGER evc_plans_append_only
    BEFORE UPDATE OR DELETE ON evc_plans
    FOR EACH ROW EXECUTE FUNCTION evc_append_only();
CREATE OR REPLACE TRIGGER evc_plans_no_truncate
    BEFORE TRUNCATE ON evc_plans
    FOR EACH STATEMENT EXECUTE FUNCTION evc_append_only();

-- The recorded plan each apply took, who approved it and through which database role. The
-- role's default is set after the column exists, so earlier rows keep NULL instead of the
-- role that ran this migration.
ALTER TABLE evc_replays ADD COLUMN IF NOT EXISTS plan_id bigint REFERENCES evc_plans (id);
ALTER TABLE evc_replays ADD COLUMN IF NOT EXISTS approved_by text;
ALTER TABLE evc_replays ADD COLUMN IF NOT EXISTS db_role text;
ALTER TABLE evc_replays ALTER COLUMN db_role SET DEFAULT session_user;

ALTER TABLE evc_discards ADD COLUMN IF NOT EXISTS plan_id bigint REFERENCES evc_plans (id);
ALTER TABLE evc_discards ADD COLUMN IF NOT EXISTS approved_by text;

-- Refuses an apply without a recorded plan of its kind, consumer and digest, or whose
-- approver proposed it: names (printable ASCII, checked by the runtime) compare trimmed and
-- lower-cased, as the runtime compares them. It records the session's role as the applier.
-- `TG_ARGV[0]` is the plan kind. A process of an earlier release, which names no plan, is
-- refused too: no apply bypasses the rule during a rolling deploy.
CREATE OR REPLACE FUNCTION evc_two_person() RETURNS trigger
    LANGUAGE plpgsql AS $$
DECLARE
    plan evc_plans%ROWTYPE;
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
    NEW.db_role := session_user;
    RETURN NEW;
END;
$$;

CREATE OR REPLACE TRIGGER evc_replays_two_person
    BEFORE INSERT ON evc_replays
    FOR EACH ROW EXECUTE FUNCTION evc_two_person('replay');
CREATE OR REPLACE TRIGGER evc_discards_two_person
    BEFORE INSERT ON evc_discards
    FOR EACH ROW EXECUTE FUNCTION evc_two_person('discard');
