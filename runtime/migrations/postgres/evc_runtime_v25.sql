-- {{ notice }}
--
-- evc runtime tables, twenty-fifth step: the cut-over gate of shadow mode (docs/runtime.md,
-- "Cut-over gate"), and the gates in the settings row. It follows `NNNN_evc_runtime_v24.sql`.
--
-- The legacy path records, per event, the outcome it produced for a consumer still in shadow
-- mode; the gate compares it with what the shadow handler meant to do (`evc_reconciliations`).
-- Operators explain the differences they accept. Both tables are append-only ledgers.
CREATE TABLE IF NOT EXISTS evc_legacy_outcomes (
    consumer text NOT NULL,
    event_id uuid NOT NULL,
    -- [{"effect_key": "...", "outcome_digest": "..."}], as the legacy path recorded them.
    outcome jsonb NOT NULL CHECK (jsonb_typeof(outcome) = 'array'),
    recorded_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, event_id)
);

CREATE TABLE IF NOT EXISTS evc_cutover_explanations (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    consumer text NOT NULL,
    event_id uuid NOT NULL,
    tenant_scope text DEFAULT current_setting('evc.tenant', true),
    explained_by text NOT NULL CHECK (char_length(btrim(explained_by)) BETWEEN 1 AND 200),
    reason text NOT NULL CHECK (char_length(btrim(reason)) BETWEEN 1 AND 500),
    db_role text NOT NULL DEFAULT session_user,
    explained_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX IF NOT EXISTS evc_cutover_explanations_event
    ON evc_cutover_explanations (consumer, event_id);
-- The gate reads a consumer's shadow runs by age.
CREATE INDEX IF NOT EXISTS evc_reconciliations_consumer_recorded
    ON evc_reconciliations (consumer, recorded_at);

CREATE OR REPLACE TRIGGER evc_cutover_explanations_session_role
    BEFORE INSERT ON evc_cutover_explanations
    FOR EACH ROW EXECUTE FUNCTION evc_session_role();

DO $$
DECLARE
    tbl text;
BEGIN
    FOREACH tbl IN ARRAY ARRAY['evc_legacy_outcomes', 'evc_cutover_explanations']
    LOOP
        EXECUTE format('CREATE OR REPLACE TRIGGER %I BEFORE UPDATE OR DELETE ON %I '
            'FOR EACH ROW EXECUTE FUNCTION evc_append_only()', tbl || '_append_only', tbl);
        EXECUTE format('CREATE OR REPLACE TRIGGER %I BEFORE TRUNCATE ON %I '
            'FOR EACH STATEMENT EXECUTE FUNCTION evc_append_only()', tbl || '_no_truncate', tbl);
    END LOOP;
END
$$;

-- A legacy outcome is visible with its event; an explanation belongs to the tenant of the
-- session that wrote it, like the other records of operators' decisions.
DROP POLICY IF EXISTS evc_tenant ON evc_legacy_outcomes;
CREATE POLICY evc_tenant ON evc_legacy_outcomes USING (
    current_setting('evc.tenant', true) = '*'
    OR EXISTS (SELECT 1 FROM evc_events e WHERE e.event_id = evc_legacy_outcomes.event_id));
DROP POLICY IF EXISTS evc_tenant ON evc_cutover_explanations;
CREATE POLICY evc_tenant ON evc_cutover_explanations USING (evc_tenant_visible(tenant_scope));

-- The legacy path records outcomes in the producer's transaction, or through `evc serve`'s
-- operator API; operators read the gate (shadow intents included) and write explanations;
-- readers see neither side's digests.
DO $$
DECLARE
    item record;
BEGIN
    FOR item IN
        SELECT * FROM (VALUES
            ('evc_reader', 'SELECT (consumer, event_id, recorded_at) ON evc_legacy_outcomes'),
            ('evc_reader', 'SELECT ON evc_cutover_explanations'),
            -- `ON CONFLICT (consumer, event_id)` reads the conflict target.
            ('evc_producer', 'SELECT (consumer, event_id), INSERT ON evc_legacy_outcomes'),
            ('evc_producer', 'SELECT (event_id, event_type, schema_version) ON evc_events'),
            ('evc_dispatcher', 'SELECT (consumer, event_id, recorded_at) ON evc_legacy_outcomes'),
            ('evc_dispatcher', 'SELECT ON evc_cutover_explanations'),
            ('evc_operator', 'SELECT, INSERT ON evc_legacy_outcomes'),
            ('evc_operator', 'SELECT, INSERT ON evc_cutover_explanations'),
            ('evc_approver', 'SELECT ON evc_legacy_outcomes, evc_cutover_explanations')
        ) AS grants (job, privileges)
    LOOP
        IF to_regrole(item.job) IS NOT NULL THEN
            EXECUTE format('GRANT %s TO %I', item.privileges, item.job);
        END IF;
    END LOOP;
END
$$;

-- As the twenty-first step's function, with the two tables above among the tenant tables.
CREATE OR REPLACE FUNCTION evc_apply_tenancy(required boolean) RETURNS void
    LANGUAGE plpgsql AS $$
DECLARE
    tbl text;
    scoped constant regclass[] := ARRAY['evc_deliveries'::regclass,
        'evc_delivery_attempts'::regclass, 'evc_consumer_effects'::regclass,
        'evc_reconciliations'::regclass];
BEGIN
    FOR tbl IN
        SELECT c.relname FROM pg_class c
        WHERE c.oid IN ('evc_events'::regclass,
                'evc_validation_rejects'::regclass, 'evc_replays'::regclass,
                'evc_discards'::regclass, 'evc_plans'::regclass, 'evc_purges'::regclass,
                'evc_tenant_pauses'::regclass, 'evc_state_changes'::regclass,
                'evc_replay_items'::regclass, 'evc_legacy_outcomes'::regclass,
                'evc_cutover_explanations'::regclass)
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

-- The cut-over gates of the contracts, written by the settings migrations, so that `evc
-- consumer mode` and `evc serve` check them without a build of the application. `gates_digest`
-- is the settings digest of the file that wrote them; they count only while it is the row's
-- `settings_digest`.
ALTER TABLE evc_settings ADD COLUMN IF NOT EXISTS cutover_gates jsonb NOT NULL DEFAULT '[]';
ALTER TABLE evc_settings ADD COLUMN IF NOT EXISTS gates_digest text;
