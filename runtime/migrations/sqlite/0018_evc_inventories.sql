-- Applying an inventory in the embedded SQLite store, as PostgreSQL's twenty-eighth runtime
-- step has it (docs/runtime.md, "Inventory"): an operator's proposed inventory plan, another
-- person's apply with its reason, approval and idempotency key, and every event's class and
-- payload digests (a quarantined event gets a quarantined delivery). A repaired delivery is conformed when it is claimed, by the item's target
-- version and digest. Append-only. Times are epoch seconds. Never edited once released.

CREATE TABLE evc_inventory_plans (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    consumer TEXT NOT NULL,
    plan_digest TEXT NOT NULL,
    events INTEGER NOT NULL CHECK (events >= 1),
    planned_by TEXT NOT NULL CHECK (length(trim(planned_by)) BETWEEN 1 AND 200),
    planned_at REAL NOT NULL,
    tenant_scope TEXT
);

CREATE INDEX evc_inventory_plans_digest ON evc_inventory_plans (consumer, plan_digest);

CREATE TABLE evc_inventories (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    consumer TEXT NOT NULL,
    plan_id INTEGER NOT NULL UNIQUE REFERENCES evc_inventory_plans (id),
    plan_digest TEXT NOT NULL,
    reason TEXT NOT NULL CHECK (length(trim(reason)) BETWEEN 1 AND 500),
    approval_ref TEXT NOT NULL CHECK (length(trim(approval_ref)) BETWEEN 1 AND 200),
    idempotency_key TEXT NOT NULL CHECK (length(trim(idempotency_key)) BETWEEN 1 AND 200),
    approved_by TEXT NOT NULL,
    tenant_scope TEXT,
    counts TEXT NOT NULL CHECK (json_type(counts) = 'object'),
    applied_at REAL NOT NULL
);

-- Keys are scoped per consumer and tenant (no tenant: the store's every-tenant handle).
CREATE UNIQUE INDEX evc_inventories_key
    ON evc_inventories (consumer, coalesce(tenant_scope, ''), idempotency_key);

CREATE TRIGGER evc_inventories_two_person BEFORE INSERT ON evc_inventories
WHEN NOT EXISTS (
    SELECT 1 FROM evc_inventory_plans p
    WHERE p.id = NEW.plan_id AND p.consumer = NEW.consumer
        AND p.plan_digest = NEW.plan_digest
        AND length(trim(NEW.approved_by)) > 0
        AND lower(trim(p.planned_by)) <> lower(trim(NEW.approved_by))
)
BEGIN
    SELECT RAISE(ABORT, 'evc_inventories needs a plan proposed by another person than its approver (two-person rule)');
END;

CREATE TABLE evc_inventory_items (
    inventory_id INTEGER NOT NULL REFERENCES evc_inventories (id),
    event_id TEXT NOT NULL,
    consumer TEXT NOT NULL,
    class TEXT NOT NULL CHECK (class IN ('safe', 'repair', 'quarantine', 'expire')),
    reason TEXT,
    target_version TEXT,
    payload_digest TEXT NOT NULL,
    repaired_digest TEXT,
    tenant_scope TEXT,
    PRIMARY KEY (inventory_id, event_id),
    CHECK ((class = 'repair') = (repaired_digest IS NOT NULL)
        AND (class IN ('safe', 'repair')) = (target_version IS NOT NULL))
);

CREATE UNIQUE INDEX evc_inventory_items_delivered
    ON evc_inventory_items (event_id, consumer) WHERE class IN ('safe', 'repair');
CREATE INDEX evc_inventory_items_expired
    ON evc_inventory_items (event_id, consumer) WHERE class = 'expire';

CREATE TRIGGER evc_inventory_plans_immutable BEFORE UPDATE ON evc_inventory_plans
BEGIN
    SELECT RAISE(ABORT, 'evc_inventory_plans is append-only: rows are never updated');
END;

CREATE TRIGGER evc_inventory_plans_kept BEFORE DELETE ON evc_inventory_plans
BEGIN
    SELECT RAISE(ABORT, 'evc_inventory_plans is append-only: rows are never deleted');
END;

CREATE TRIGGER evc_inventories_immutable BEFORE UPDATE ON evc_inventories
BEGIN
    SELECT RAISE(ABORT, 'evc_inventories is append-only: rows are never updated');
END;

CREATE TRIGGER evc_inventories_kept BEFORE DELETE ON evc_inventories
BEGIN
    SELECT RAISE(ABORT, 'evc_inventories is append-only: rows are never deleted');
END;

CREATE TRIGGER evc_inventory_items_immutable BEFORE UPDATE ON evc_inventory_items
BEGIN
    SELECT RAISE(ABORT, 'evc_inventory_items is append-only: rows are never updated');
END;

CREATE TRIGGER evc_inventory_items_kept BEFORE DELETE ON evc_inventory_items
BEGIN
    SELECT RAISE(ABORT, 'evc_inventory_items is append-only: rows are never deleted');
END;
