-- {{ notice }}
--
-- evc runtime tables, twenty-ninth step: usage evidence recorded periodically
-- (docs/runtime.md, "Recorded evidence"). It follows `NNNN_evc_runtime_v28.sql`.
--
-- The contracts may ask the dispatchers to record the usage evidence once per slot of
-- `evidence.every` and keep each snapshot for `evidence.keep`. The settings migrations record
-- that here, so that `evc dispatch` records without a build of the application;
-- `evidence_digest` is the settings digest of the file that wrote it, and it counts only while
-- it is the row's `settings_digest`.
ALTER TABLE evc_settings ADD COLUMN IF NOT EXISTS evidence_recording jsonb;
ALTER TABLE evc_settings ADD COLUMN IF NOT EXISTS evidence_digest text;

-- One report per slot (epoch milliseconds), whichever dispatcher recorded it first. A report
-- holds names and counts, never a payload. Snapshots are summaries the recording round owns:
-- it removes those older than `evidence.keep` itself, so this table is not append-only.
CREATE TABLE IF NOT EXISTS evc_evidence_snapshots (
    slot_ms bigint PRIMARY KEY,
    recorded_at timestamptz NOT NULL DEFAULT now(),
    report jsonb NOT NULL CHECK (jsonb_typeof(report) = 'object')
);

-- The signals span every tenant: no tenant's session sees a snapshot.
DROP POLICY IF EXISTS evc_tenant ON evc_evidence_snapshots;
CREATE POLICY evc_tenant ON evc_evidence_snapshots USING (evc_tenant_visible(NULL));

-- Dispatchers record and remove snapshots; readers, operators and approvers read them.
DO $$
DECLARE
    item record;
BEGIN
    FOR item IN
        SELECT * FROM (VALUES
            ('evc_reader', 'SELECT ON evc_evidence_snapshots'),
            ('evc_dispatcher', 'SELECT, INSERT, DELETE ON evc_evidence_snapshots'),
            ('evc_operator', 'SELECT ON evc_evidence_snapshots'),
            ('evc_approver', 'SELECT ON evc_evidence_snapshots')
        ) AS grants (job, privileges)
    LOOP
        IF to_regrole(item.job) IS NOT NULL THEN
            EXECUTE format('GRANT %s TO %I', item.privileges, item.job);
        END IF;
    END LOOP;
END
$$;

-- As the twenty-eighth step's function, with the snapshots among the tenant tables: a snapshot
-- has no tenant, so under required tenancy only a session of every tenant (`*`) sees it.
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
