-- {{ notice }}
--
-- evc runtime tables, fourteenth step: an idempotency key is scoped per producer class and
-- tenant (docs/runtime.md, "Tenants"). It follows `NNNN_evc_runtime_v13.sql`. Keyed per
-- producer class alone, a key one tenant used first answered another tenant's append with the
-- first tenant's event: a producer serving every tenant dropped the second event, and a
-- producer of one tenant's scope was refused (the first event is not in its scope) and learnt
-- that another tenant had used the key.
--
-- Events without a tenant share one scope, as they did: `*` names every tenant and is never an
-- event's tenant, so it stands for none in the index (and PostgreSQL 14 has no
-- `NULLS NOT DISTINCT`). The key comes before the tenant, so a lookup by class and key reads
-- one short range of the index. The appends' `ON CONFLICT` names this index, so a runtime of
-- an earlier release fails its appends once the step ran, and this release's fails before:
-- migrate and deploy together.
CREATE UNIQUE INDEX IF NOT EXISTS evc_events_tenant_idempotency_key_idx
    ON evc_events (producer_class, idempotency_key, (coalesce(tenant_scope, '*')))
    WHERE idempotency_key IS NOT NULL;
DROP INDEX IF EXISTS evc_events_idempotency_key_idx;
