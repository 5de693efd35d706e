-- An effect key of a consumer on an executor class is unique within the class's idempotency
-- namespace and the event's tenant, as PostgreSQL's twenty-second runtime step has it
-- (docs/runtime.md, "Executor classes"): whichever consumer of the namespace records it first
-- performs the effect. NULL for a consumer without a class and for every row recorded before
-- this step: those keys stay unique per consumer and tenant only.
-- Never edited once released.

ALTER TABLE evc_consumer_effects ADD COLUMN idempotency_namespace TEXT;
CREATE UNIQUE INDEX evc_consumer_effects_namespace_key_idx
    ON evc_consumer_effects (idempotency_namespace, effect_key, ifnull(tenant_scope, '*'))
    WHERE idempotency_namespace IS NOT NULL;
