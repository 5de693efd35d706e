-- {{ notice }}
--
-- evc runtime tables, eleventh step: tenants (docs/runtime.md, "Tenants"). It follows
-- `NNNN_evc_runtime_v10.sql`. Every table that holds a tenant's data gets a row-level security
-- policy keyed on the session setting `evc.tenant`: a session sees and writes the rows of the
-- tenant it names, all rows when it names `*`, and nothing when it names none. The policies
-- take effect while the contracts require a tenant scope (`envelope.require_tenant_scope`):
-- writing that setting to `evc_settings` enables and forces row-level security on these tables,
-- and clearing it disables it. Superusers and roles with BYPASSRLS are never subject to it.
--
--   the tenant's own column   evc_events, evc_deliveries, evc_validation_rejects, evc_replays,
--                             evc_discards, evc_plans, evc_purges, evc_tenant_pauses
--   through their event       evc_delivery_attempts, evc_consumer_effects,
--                             evc_reconciliations, evc_replay_items
--
-- Not a tenant's data, so not filtered: the registry mirror, the settings, heartbeats, consumer
-- state (a pause or mode for every tenant) and stale-token counts.

-- A delivery carries its event's tenant, so claims filter on a column of the row they lock.
-- Rows appended before this step take it from their event.
ALTER TABLE evc_deliveries ADD COLUMN IF NOT EXISTS tenant_scope text;

UPDATE evc_deliveries d SET tenant_scope = e.tenant_scope
FROM evc_events e
WHERE e.event_id = d.event_id AND e.tenant_scope IS NOT NULL AND d.tenant_scope IS NULL;

-- Records of operations and refusals belong to the tenant of the session that wrote them
-- (`*` for a session serving every tenant). The default is set after the column exists, so
-- the rows already there keep NULL (seen by sessions of every tenant only), whatever the
-- migrating session's setting.
DO $$
DECLARE
    tbl text;
BEGIN
    FOREACH tbl IN ARRAY ARRAY['evc_validation_rejects', 'evc_replays', 'evc_discards',
        'evc_plans', 'evc_purges']
    LOOP
        EXECUTE format('ALTER TABLE %I ADD COLUMN IF NOT EXISTS tenant_scope text', tbl);
        EXECUTE format('ALTER TABLE %I ALTER COLUMN tenant_scope '
            'SET DEFAULT current_setting(''evc.tenant'', true)', tbl);
    END LOOP;
END
$$;

-- A consumer paused for one tenant: its deliveries of that tenant wait, in order, while the
-- other tenants' are claimed. Written by a session of that tenant.
CREATE TABLE IF NOT EXISTS evc_tenant_pauses (
    consumer text NOT NULL,
    tenant_scope text NOT NULL DEFAULT current_setting('evc.tenant', true),
    paused_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, tenant_scope)
);

-- Whether the session may see a row of tenant `tenant`: every row for `*`, the tenant's for a
-- tenant's name, none for no setting (or an empty one). A plain SQL function, inlined into each
-- policy as a filter on the rows a statement reads.
CREATE OR REPLACE FUNCTION evc_tenant_visible(tenant text) RETURNS boolean
    LANGUAGE sql STABLE AS $$
    SELECT current_setting('evc.tenant', true) = '*'
        OR tenant = nullif(current_setting('evc.tenant', true), '')
$$;

DO $$
DECLARE
    tbl text;
BEGIN
    FOREACH tbl IN ARRAY ARRAY['evc_events', 'evc_deliveries', 'evc_validation_rejects',
        'evc_replays', 'evc_discards', 'evc_plans', 'evc_purges', 'evc_tenant_pauses']
    LOOP
        EXECUTE format('DROP POLICY IF EXISTS evc_tenant ON %I', tbl);
        EXECUTE format('CREATE POLICY evc_tenant ON %I USING (evc_tenant_visible(tenant_scope))',
            tbl);
    END LOOP;
    -- The event's own policy applies inside the subquery: a row is visible with its event.
    FOREACH tbl IN ARRAY ARRAY['evc_delivery_attempts', 'evc_consumer_effects',
        'evc_reconciliations', 'evc_replay_items']
    LOOP
        EXECUTE format('DROP POLICY IF EXISTS evc_tenant ON %I', tbl);
        EXECUTE format('CREATE POLICY evc_tenant ON %1$I USING ('
            'current_setting(''evc.tenant'', true) = ''*'' OR EXISTS ('
            'SELECT 1 FROM evc_events e WHERE e.event_id = %1$I.event_id))', tbl);
    END LOOP;
END
$$;

-- An append returns its event's tenant to give it to the deliveries; claims and status read
-- the tenant pauses, operators write them (the grants of the tenth step's roles).
DO $$
DECLARE
    item record;
BEGIN
    FOR item IN
        SELECT * FROM (VALUES
            ('evc_producer', 'SELECT (tenant_scope) ON evc_events'),
            ('evc_reader', 'SELECT ON evc_tenant_pauses'),
            ('evc_dispatcher', 'SELECT ON evc_tenant_pauses'),
            ('evc_operator', 'SELECT, INSERT, DELETE ON evc_tenant_pauses'),
            ('evc_approver', 'SELECT ON evc_tenant_pauses')
        ) AS grants (job, privileges)
    LOOP
        IF to_regrole(item.job) IS NOT NULL THEN
            EXECUTE format('GRANT %s TO %I', item.privileges, item.job);
        END IF;
    END LOOP;
END
$$;

-- Enables and forces row-level security on the tenant tables when `required`, disables it
-- otherwise; a table already in that state is left alone (no lock taken). A change takes an
-- ACCESS EXCLUSIVE lock on each table it alters, until the transaction that wrote the setting
-- commits: statements on those tables wait for it.
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
                'evc_tenant_pauses'::regclass,
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

-- The contracts' setting takes effect when it is written (a settings migration, or
-- `install_settings`; only the tables' owner may write `evc_settings`).
CREATE OR REPLACE FUNCTION evc_settings_tenancy() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    PERFORM evc_apply_tenancy(NEW.require_tenant_scope);
    RETURN NULL;
END;
$$;

CREATE OR REPLACE TRIGGER evc_settings_tenancy
    AFTER INSERT OR UPDATE OF require_tenant_scope ON evc_settings
    FOR EACH ROW EXECUTE FUNCTION evc_settings_tenancy();

SELECT evc_apply_tenancy(coalesce((SELECT require_tenant_scope FROM evc_settings), false));
