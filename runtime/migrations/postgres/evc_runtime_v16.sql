-- {{ notice }}
--
-- evc runtime tables, sixteenth step: a replay's or discard's idempotency key is scoped per
-- consumer and tenant (docs/runtime.md, "Tenants"). It follows `NNNN_evc_runtime_v15.sql`.
-- Keyed per consumer alone, a key one tenant's approver used first refused another tenant's
-- replay or discard with a unique violation naming the index: the second tenant could not
-- apply under its own key, and learnt that another tenant had used it.
--
-- A replay or discard belongs to the scope that wrote it (`tenant_scope`, the session's
-- `evc.tenant`). No tenant and an empty setting (a session whose transaction-local setting
-- ended) are the `*` scope, where tenants are not required and where a session serves every
-- tenant. The lookups by key read the session's scope, so a repeat within a tenant is still
-- the first replay.
CREATE UNIQUE INDEX IF NOT EXISTS evc_replays_tenant_key
    ON evc_replays (consumer, idempotency_key, (coalesce(nullif(tenant_scope, ''), '*')));
DROP INDEX IF EXISTS evc_replays_consumer_key;

CREATE UNIQUE INDEX IF NOT EXISTS evc_discards_tenant_key
    ON evc_discards (consumer, idempotency_key, (coalesce(nullif(tenant_scope, ''), '*')));
DROP INDEX IF EXISTS evc_discards_consumer_key;
