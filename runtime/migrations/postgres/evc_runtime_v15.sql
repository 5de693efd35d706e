-- {{ notice }}
--
-- evc runtime tables, fifteenth step: an effect key is scoped per consumer and tenant
-- (docs/runtime.md, "Tenants"). It follows `NNNN_evc_runtime_v14.sql`. Keyed per consumer
-- alone, an effect key a handler chose for one tenant's event (an invoice number, say) answered
-- "recorded before" to another tenant's event with the same key: the second tenant's effect was
-- skipped, and its handler learnt that another tenant had used the key.
--
-- Each effect row carries its event's tenant; rows written before this step get it from their
-- event (with the append-only trigger set aside for that one statement), so a redelivery after
-- the upgrade still finds what its first attempt recorded. Effects without a tenant share one
-- scope: `*` is never an event's tenant, so it stands for none in the index. The key comes
-- before the tenant, so a lookup by consumer and key reads one short range of the index. The
-- effect statements' `ON CONFLICT` names this index, so a runtime of an earlier release fails
-- its effects once the step ran, and this release's fails before: migrate and deploy together.
ALTER TABLE evc_consumer_effects ADD COLUMN IF NOT EXISTS tenant_scope text;

-- One block, so the setting holds for the backfill also where the file runs outside a
-- transaction: with `*` the backfill sees every tenant's rows when row-level security is
-- forced.
DO $$
BEGIN
    PERFORM set_config('evc.tenant', '*', true);
    ALTER TABLE evc_consumer_effects DISABLE TRIGGER evc_consumer_effects_append_only;
    UPDATE evc_consumer_effects f SET tenant_scope = e.tenant_scope
    FROM evc_events e
    WHERE e.event_id = f.event_id AND e.tenant_scope IS NOT NULL AND f.tenant_scope IS NULL;
    ALTER TABLE evc_consumer_effects ENABLE TRIGGER evc_consumer_effects_append_only;
END
$$;

CREATE UNIQUE INDEX IF NOT EXISTS evc_consumer_effects_tenant_key_idx
    ON evc_consumer_effects (consumer, effect_key, (coalesce(tenant_scope, '*')));
ALTER TABLE evc_consumer_effects DROP CONSTRAINT IF EXISTS evc_consumer_effects_pkey;
