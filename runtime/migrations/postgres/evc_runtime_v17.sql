-- {{ notice }}
--
-- evc runtime tables, seventeenth step: who changed a consumer's operator state, and why
-- (docs/runtime.md, "Pause, resume and modes"). It follows `NNNN_evc_runtime_v16.sql`. Each
-- pause, resume and mode change writes one row, in the statement that makes the change, naming
-- the person and the reason the caller gave and the database role of the session, and the
-- database refuses a change without one. The table is append-only and belongs to the tenant of
-- the session that wrote it, like the other audit ledgers (docs/runtime.md, "Tenants").
CREATE TABLE IF NOT EXISTS evc_state_changes (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    consumer text NOT NULL,
    change text NOT NULL CHECK (change IN ('pause', 'resume', 'mode')),
    mode text CHECK (mode IN ('off', 'shadow', 'live')),
    tenant_scope text DEFAULT current_setting('evc.tenant', true),
    changed_by text NOT NULL CHECK (char_length(btrim(changed_by)) BETWEEN 1 AND 200),
    reason text NOT NULL CHECK (char_length(btrim(reason)) BETWEEN 1 AND 500),
    db_role text NOT NULL DEFAULT session_user,
    changed_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX IF NOT EXISTS evc_state_changes_consumer ON evc_state_changes (consumer, id);

CREATE OR REPLACE TRIGGER evc_state_changes_session_role
    BEFORE INSERT ON evc_state_changes
    FOR EACH ROW EXECUTE FUNCTION evc_session_role();
CREATE OR REPLACE TRIGGER evc_state_changes_append_only
    BEFORE UPDATE OR DELETE ON evc_state_changes
    FOR EACH ROW EXECUTE FUNCTION evc_append_only();
CREATE OR REPLACE TRIGGER evc_state_changes_no_truncate
    BEFORE TRUNCATE ON evc_state_changes
    FOR EACH STATEMENT EXECUTE FUNCTION evc_append_only();

-- A change of a consumer's operator state commits only with its record: a login that may
-- write the state tables cannot change them by hand without saying who and why. The check runs
-- at commit (the store writes the change and its record in one statement, whose parts do not
-- see each other) and takes a record of the same consumer written by the same transaction
-- (`now()` is the transaction's start, in subtransactions too).
CREATE OR REPLACE FUNCTION evc_state_recorded() RETURNS trigger
    LANGUAGE plpgsql AS $$
DECLARE
    changed text := CASE WHEN TG_OP = 'DELETE' THEN OLD.consumer ELSE NEW.consumer END;
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM evc_state_changes
        WHERE consumer = changed AND changed_at = now() AND db_role = session_user
    ) THEN
        RAISE EXCEPTION 'a change of consumer %''s state needs its record in evc_state_changes '
            '(who and why), written in the same transaction', changed
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NULL;
END;
$$;

DROP TRIGGER IF EXISTS evc_consumer_state_recorded ON evc_consumer_state;
CREATE CONSTRAINT TRIGGER evc_consumer_state_recorded
    AFTER INSERT OR UPDATE ON evc_consumer_state
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION evc_state_recorded();
DROP TRIGGER IF EXISTS evc_tenant_pauses_recorded ON evc_tenant_pauses;
CREATE CONSTRAINT TRIGGER evc_tenant_pauses_recorded
    AFTER INSERT OR DELETE ON evc_tenant_pauses
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION evc_state_recorded();

DROP POLICY IF EXISTS evc_tenant ON evc_state_changes;
CREATE POLICY evc_tenant ON evc_state_changes USING (evc_tenant_visible(tenant_scope));

-- Operators write the rows with their changes; every job reads them.
DO $$
DECLARE
    item record;
BEGIN
    FOR item IN
        SELECT * FROM (VALUES
            ('evc_reader', 'SELECT ON evc_state_changes'),
            ('evc_dispatcher', 'SELECT ON evc_state_changes'),
            ('evc_operator', 'SELECT, INSERT ON evc_state_changes'),
            ('evc_approver', 'SELECT ON evc_state_changes')
        ) AS grants (job, privileges)
    LOOP
        IF to_regrole(item.job) IS NOT NULL THEN
            EXECUTE format('GRANT %s TO %I', item.privileges, item.job);
        END IF;
    END LOOP;
END
$$;

-- The tenant tables now include this one: row-level security follows the contracts' setting
-- on it too.
CREATE OR REPLACE FUNCTION evc_apply_tenancy(required boolean) RETURNS void
    LANGUAGE plpgsql AS $$
DECLARE
    tbl text;
BEGIN
    FOR tbl IN
        SELECT c.relname FROM pg_class c
        WHERE c.oid IN ('evc_events'::regclass, 'evc_deliveries'::regclass,
                'evc_validation_rejects'::regclass, 'evc_replays'::regclass,
                'evc_discards'::regclass, 'evc_plans'::regclass, 'evc_purges'::regclass,
                'evc_tenant_pauses'::regclass, 'evc_state_changes'::regclass,
                'evc_delivery_attempts'::regclass, 'evc_consumer_effects'::regclass,
                'evc_reconciliations'::regclass, 'evc_replay_items'::regclass)
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
END;
$$;

REVOKE ALL ON FUNCTION evc_apply_tenancy(boolean) FROM PUBLIC;

SELECT evc_apply_tenancy(coalesce((SELECT require_tenant_scope FROM evc_settings), false));
