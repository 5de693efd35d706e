-- An effect key is scoped per consumer and tenant in the embedded SQLite store, as PostgreSQL's
-- fifteenth runtime step has it (docs/runtime.md, "Tenants"): the same key for two tenants'
-- events is two effects. Effects of events without a tenant share one scope: `*` is never an
-- event's tenant, so it stands for none in the index.
-- Never edited once released.

-- SQLite cannot drop a primary key: the table is rebuilt without it, each row given its
-- event's tenant, so a redelivery after the upgrade still finds what its first attempt recorded.
CREATE TABLE evc_consumer_effects_by_tenant (
    consumer TEXT NOT NULL,
    effect_key TEXT NOT NULL,
    event_id TEXT NOT NULL,
    outcome_digest TEXT NOT NULL,
    fencing_token INTEGER,
    created_at REAL NOT NULL,
    tenant_scope TEXT
);
INSERT INTO evc_consumer_effects_by_tenant (consumer, effect_key, event_id, outcome_digest,
    fencing_token, created_at, tenant_scope)
SELECT f.consumer, f.effect_key, f.event_id, f.outcome_digest, f.fencing_token, f.created_at,
    e.tenant_scope
FROM evc_consumer_effects f LEFT JOIN evc_events e ON e.event_id = f.event_id;
DROP TABLE evc_consumer_effects;
ALTER TABLE evc_consumer_effects_by_tenant RENAME TO evc_consumer_effects;
CREATE UNIQUE INDEX evc_consumer_effects_tenant_key_idx
    ON evc_consumer_effects (consumer, effect_key, ifnull(tenant_scope, '*'));
