-- An idempotency key is scoped per producer class and tenant in the embedded SQLite store, as
-- PostgreSQL's fourteenth runtime step has it (docs/runtime.md, "Tenants"): the same key in two
-- tenants is two events. Events without a tenant share one scope: `*` names every tenant and is
-- never an event's tenant, so it stands for none in the index.
-- Never edited once released.

CREATE UNIQUE INDEX evc_events_tenant_idempotency_key_idx
    ON evc_events (producer_class, idempotency_key, ifnull(tenant_scope, '*'))
    WHERE idempotency_key IS NOT NULL;
DROP INDEX evc_events_idempotency_key_idx;
