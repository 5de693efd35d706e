-- {{ notice }}
--
-- evc runtime tables, twenty-eighth step: applying an inventory (docs/runtime.md,
-- "Inventory"). It follows `NNNN_evc_runtime_v27.sql`.
--
-- An operator proposes an inventory (a plan of kind `inventory`); another person applies it,
-- like a replay: the consumer gets a pending delivery of each safe and repaired event and a
-- quarantined one of each event it cannot take, and the decision is recorded with every
-- event's class and payload digests. A repaired delivery is
-- conformed when it is claimed, so no payload is copied: an item keeps the conformed
-- payload's digest, which the claim checks. Both tables are append-only ledgers.

ALTER TABLE evc_plans DROP CONSTRAINT IF EXISTS evc_plans_kind_check;
ALTER TABLE evc_plans ADD CONSTRAINT evc_plans_kind_check
    CHECK (kind IN ('replay', 'discard', 'inventory'));

CREATE TABLE IF NOT EXISTS evc_inventories (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    consumer text NOT NULL,
    plan_id bigint NOT NULL REFERENCES evc_plans (id),
    plan_digest text NOT NULL,
    reason text NOT NULL CHECK (char_length(btrim(reason)) BETWEEN 1 AND 500),
    approval_ref text NOT NULL CHECK (char_length(btrim(approval_ref)) BETWEEN 1 AND 200),
    idempotency_key text NOT NULL
        CHECK (char_length(btrim(idempotency_key)) BETWEEN 1 AND 200),
    approved_by text NOT NULL,
    db_role text NOT NULL DEFAULT session_user,
    tenant_scope text DEFAULT current_setting('evc.tenant', true),
    -- {"safe": n, "repair": n, "quarantine": n, "expire": n}
    counts jsonb NOT NULL CHECK (jsonb_typeof(counts) = 'object'),
    applied_at timestamptz NOT NULL DEFAULT now(),
    -- The applying transaction, set by trigger: its items must be written by it.
    txid bigint NOT NULL DEFAULT txid_current()
);

-- Keys are scoped per consumer and tenant scope (no setting, empty and `*` alike: every
-- tenant), as replays' are.
CREATE UNIQUE INDEX IF NOT EXISTS evc_inventories_key ON evc_inventories
    (consumer, (coalesce(nullif(tenant_scope, ''), '*')), idempotency_key);

-- A plan is applied once.
CREATE UNIQUE INDEX IF NOT EXISTS evc_inventories_plan_once ON evc_inventories (plan_id);

CREATE TABLE IF NOT EXISTS evc_inventory_items (
    inventory_id bigint NOT NULL REFERENCES evc_inventories (id),
    event_id uuid NOT NULL,
    consumer text NOT NULL,
    class text NOT NULL CHECK (class IN ('safe', 'repair', 'quarantine', 'expire')),
    reason text,
    target_version text,
    payload_digest text NOT NULL,
    repaired_digest text,
    tenant_scope text,
    PRIMARY KEY (inventory_id, event_id),
    CONSTRAINT evc_inventory_items_repair_whole CHECK (
        (class = 'repair') = (repaired_digest IS NOT NULL)
        AND (class IN ('safe', 'repair')) = (target_version IS NOT NULL))
);

-- One delivered decision per consumer and event; the claim reads a repaired delivery's target
-- by it, and later inventories leave an expired event out by the other.
CREATE UNIQUE INDEX IF NOT EXISTS evc_inventory_items_delivered
    ON evc_inventory_items (event_id, consumer) WHERE class IN ('safe', 'repair');
CREATE INDEX IF NOT EXISTS evc_inventory_items_expired
    ON evc_inventory_items (event_id, consumer) WHERE class = 'expire';

CREATE OR REPLACE TRIGGER evc_inventories_two_person
    BEFORE INSERT ON evc_inventories
    FOR EACH ROW EXECUTE FUNCTION evc_two_person('inventory');

-- An inventory records its own transaction, whatever the insert says; an item is taken only
-- from the transaction that wrote its inventory, for that inventory's consumer. So an item
-- is always part of an apply that passed the two-person rule: no login writes a decision (an
-- expiry that hides an event, a repair) on its own.
CREATE OR REPLACE FUNCTION evc_inventory_txid() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    NEW.txid := txid_current();
    RETURN NEW;
END;
$$;

CREATE OR REPLACE TRIGGER evc_inventories_txid
    BEFORE INSERT ON evc_inventories
    FOR EACH ROW EXECUTE FUNCTION evc_inventory_txid();

CREATE OR REPLACE FUNCTION evc_inventory_item_of_apply() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM evc_inventories i
        WHERE i.id = NEW.inventory_id AND i.consumer = NEW.consumer
            AND i.txid = txid_current()
    ) THEN
        RAISE EXCEPTION 'an inventory item is written only by the apply of its inventory'
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END;
$$;

CREATE OR REPLACE TRIGGER evc_inventory_items_of_apply
    BEFORE INSERT ON evc_inventory_items
    FOR EACH ROW EXECUTE FUNCTION evc_inventory_item_of_apply();

DO $$
DECLARE
    tbl text;
BEGIN
    FOREACH tbl IN ARRAY ARRAY['evc_inventories', 'evc_inventory_items']
    LOOP
        EXECUTE format('CREATE OR REPLACE TRIGGER %I BEFORE UPDATE OR DELETE ON %I '
            'FOR EACH ROW EXECUTE FUNCTION evc_append_only()', tbl || '_append_only', tbl);
        EXECUTE format('CREATE OR REPLACE TRIGGER %I BEFORE TRUNCATE ON %I '
            'FOR EACH STATEMENT EXECUTE FUNCTION evc_append_only()', tbl || '_no_truncate', tbl);
    END LOOP;
END
$$;

-- An inventory belongs to the tenant of the session that applied it, an item to its event's.
DROP POLICY IF EXISTS evc_tenant ON evc_inventories;
CREATE POLICY evc_tenant ON evc_inventories USING (evc_tenant_visible(tenant_scope));
DROP POLICY IF EXISTS evc_tenant ON evc_inventory_items;
CREATE POLICY evc_tenant ON evc_inventory_items USING (evc_tenant_visible(tenant_scope));

-- Operators propose and read; approvers apply (the deliveries they already may insert);
-- dispatchers read the items their claims conform by; readers read the decisions without
-- the payload digests.
DO $$
DECLARE
    item record;
BEGIN
    FOR item IN
        SELECT * FROM (VALUES
            ('evc_reader', 'SELECT ON evc_inventories'),
            ('evc_reader', 'SELECT (inventory_id, event_id, consumer, class, reason, '
                'target_version, tenant_scope) ON evc_inventory_items'),
            ('evc_dispatcher', 'SELECT ON evc_inventory_items'),
            ('evc_operator', 'SELECT ON evc_inventories, evc_inventory_items'),
            ('evc_approver', 'SELECT, INSERT ON evc_inventories, evc_inventory_items')
        ) AS grants (job, privileges)
    LOOP
        IF to_regrole(item.job) IS NOT NULL THEN
            EXECUTE format('GRANT %s TO %I', item.privileges, item.job);
        END IF;
    END LOOP;
END
$$;

-- As the twenty-fifth step's function, with the two tables above among the tenant tables.
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
                'evc_inventory_items'::regclass)
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
