-- {{ notice }}
--
-- evc runtime tables, twenty-second step: executor classes in the registry mirror, and
-- effect keys unique within a class's idempotency namespace (docs/runtime.md, "Executor
-- classes"). It follows `NNNN_evc_runtime_v21.sql`.
--
-- The classes of `executor-classes.yaml` (what a consumer's handlers are, who answers when
-- their workers fall silent) and the class each consumer runs on, so that `evc status` and
-- the console, which read the mirror rather than a build of the application, report silent
-- workers by class and owner. Rows are written by the registry migrations, like the other
-- mirror tables. Contract metadata, no tenant data: every role reads it.

CREATE TABLE IF NOT EXISTS evc_executor_classes (
    name text PRIMARY KEY,
    description text NOT NULL,
    mutating boolean NOT NULL,
    idempotency_namespace text NOT NULL,
    heartbeat_owner text NOT NULL,
    -- The threshold of its consumers that set none; NULL: it sets none.
    heartbeat_threshold_ms bigint CHECK (heartbeat_threshold_ms > 0),
    active boolean NOT NULL,
    registry_digest text NOT NULL
);
GRANT SELECT ON evc_executor_classes TO PUBLIC;

-- No foreign key: a class may leave the contracts while a consumer row that named it stays.
ALTER TABLE evc_consumers ADD COLUMN IF NOT EXISTS executor_class text;

-- The idempotency namespace of the recording consumer's executor class: an effect key is then
-- recorded once per namespace and tenant, whichever consumer of the namespace records it
-- first. NULL for a consumer without a class (and for every row recorded before this step),
-- which keeps its keys per consumer and tenant only.
ALTER TABLE evc_consumer_effects ADD COLUMN IF NOT EXISTS idempotency_namespace text;
CREATE UNIQUE INDEX IF NOT EXISTS evc_consumer_effects_namespace_key_idx
    ON evc_consumer_effects (idempotency_namespace, effect_key, (coalesce(tenant_scope, '*')))
    WHERE idempotency_namespace IS NOT NULL;
