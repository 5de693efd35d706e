-- Tenant scopes of the embedded SQLite store's records (docs/runtime.md, "Tenants"). SQLite
-- has no row-level security: a store handle of one tenant (`SqliteStore::scoped`) filters its
-- own statements on the events' `tenant_scope`, and the records of operations carry the scope
-- of the handle that wrote them, as PostgreSQL's rows carry the session's `evc.tenant`:
-- - `tenant_scope` on reject rows, plans, replays and state changes: the writing handle's
--   tenant, NULL for a handle of every tenant (which only such a handle reads back);
-- - `evc_tenant_pauses`: a consumer paused for one tenant, which every claim of the consumer
--   skips for that tenant's deliveries only;
-- - a replay's idempotency key unique per consumer and scope, as PostgreSQL's sixteenth
--   runtime step has it: `evc_replays` is rebuilt, as 0004 rebuilt it, because SQLite cannot
--   drop the UNIQUE constraint on (consumer, idempotency_key). Foreign keys are off while
--   `evc_replay_items` refers to the table being replaced, so the store runs this file
--   outside its migration transaction and brings its own.
-- Never edited once released.
PRAGMA foreign_keys = OFF;

BEGIN IMMEDIATE;

ALTER TABLE evc_validation_rejects ADD COLUMN tenant_scope TEXT;
ALTER TABLE evc_state_changes ADD COLUMN tenant_scope TEXT;
ALTER TABLE evc_plans ADD COLUMN tenant_scope TEXT;

CREATE TABLE evc_tenant_pauses (
    consumer TEXT NOT NULL,
    tenant_scope TEXT NOT NULL,
    paused_at REAL NOT NULL,
    PRIMARY KEY (consumer, tenant_scope)
) WITHOUT ROWID;

CREATE TABLE evc_replays_0012 (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    consumer TEXT NOT NULL,
    plan_digest TEXT NOT NULL,
    reason TEXT NOT NULL CHECK (length(reason) BETWEEN 1 AND 500),
    approval_ref TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    -- New deliveries the replay created.
    deliveries INTEGER NOT NULL CHECK (deliveries >= 0),
    applied_at REAL NOT NULL,
    plan_id INTEGER REFERENCES evc_plans (id),
    approved_by TEXT,
    tenant_scope TEXT
);

INSERT INTO evc_replays_0012 (id, consumer, plan_digest, reason, approval_ref,
    idempotency_key, deliveries, applied_at, plan_id, approved_by)
SELECT id, consumer, plan_digest, reason, approval_ref, idempotency_key, deliveries,
    applied_at, plan_id, approved_by
FROM evc_replays;

DROP TABLE evc_replays;

ALTER TABLE evc_replays_0012 RENAME TO evc_replays;

-- `*` is never a tenant's name, so it stands for the scope of every tenant in the key.
CREATE UNIQUE INDEX evc_replays_tenant_key_idx
    ON evc_replays (consumer, idempotency_key, ifnull(tenant_scope, '*'));

CREATE INDEX evc_replays_plan ON evc_replays (plan_id);

CREATE TRIGGER evc_replays_immutable BEFORE UPDATE ON evc_replays
BEGIN
    SELECT RAISE(ABORT, 'evc_replays is append-only: rows are never updated');
END;

CREATE TRIGGER evc_replays_two_person BEFORE INSERT ON evc_replays
WHEN NOT EXISTS (
    SELECT 1 FROM evc_plans p
    WHERE p.id = NEW.plan_id AND p.kind = 'replay' AND p.consumer = NEW.consumer
        AND p.plan_digest = NEW.plan_digest
        AND length(trim(coalesce(NEW.approved_by, ''))) > 0
        AND lower(trim(p.planned_by)) <> lower(trim(NEW.approved_by))
)
BEGIN
    SELECT RAISE(ABORT, 'evc_replays needs a plan proposed by another person than its approver (two-person rule)');
END;

CREATE TRIGGER evc_replays_plan_once BEFORE INSERT ON evc_replays
WHEN NEW.plan_id IS NOT NULL
    AND EXISTS (SELECT 1 FROM evc_replays r WHERE r.plan_id = NEW.plan_id)
BEGIN
    SELECT RAISE(ABORT, 'evc_replays: the plan was applied already, propose it again');
END;

COMMIT;

PRAGMA foreign_keys = ON;
