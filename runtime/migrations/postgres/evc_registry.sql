-- {{ notice }}
--
-- evc registry rows for registry digest {{ digest }}
-- (the `digest` of registry.json). Upserts only, never a DELETE: rows of types, consumers or
-- subscriptions that left the contracts stay, with the digest of the last registry that held them.
-- A row whose values are unchanged is not rewritten, so running this file again changes nothing.
{%- if !registry.retry_policies.is_empty() %}

-- Retry policies, before the consumers that name them.
INSERT INTO evc_retry_policies (name, kind, base_delay_ms, max_delay_ms, max_attempts, jitter, retry_on, registry_digest)
VALUES
{%- for row in registry.retry_policies %}
    ({{ row|join(", ") }}){% if !loop.last %},{% endif %}
{%- endfor %}
ON CONFLICT (name) DO UPDATE SET
    kind = EXCLUDED.kind,
    base_delay_ms = EXCLUDED.base_delay_ms,
    max_delay_ms = EXCLUDED.max_delay_ms,
    max_attempts = EXCLUDED.max_attempts,
    jitter = EXCLUDED.jitter,
    retry_on = EXCLUDED.retry_on,
    registry_digest = EXCLUDED.registry_digest
WHERE (evc_retry_policies.kind, evc_retry_policies.base_delay_ms, evc_retry_policies.max_delay_ms, evc_retry_policies.max_attempts, evc_retry_policies.jitter, evc_retry_policies.retry_on, evc_retry_policies.registry_digest)
    IS DISTINCT FROM (EXCLUDED.kind, EXCLUDED.base_delay_ms, EXCLUDED.max_delay_ms, EXCLUDED.max_attempts, EXCLUDED.jitter, EXCLUDED.retry_on, EXCLUDED.registry_digest);
{%- endif %}
{%- if !registry.event_types.is_empty() %}

-- Event types.
INSERT INTO evc_event_types (name, description, producer_class, order_key, compat, status, max_payload_bytes, registry_digest)
VALUES
{%- for row in registry.event_types %}
    ({{ row|join(", ") }}){% if !loop.last %},{% endif %}
{%- endfor %}
ON CONFLICT (name) DO UPDATE SET
    description = EXCLUDED.description,
    producer_class = EXCLUDED.producer_class,
    order_key = EXCLUDED.order_key,
    compat = EXCLUDED.compat,
    status = EXCLUDED.status,
    max_payload_bytes = EXCLUDED.max_payload_bytes,
    registry_digest = EXCLUDED.registry_digest
WHERE (evc_event_types.description, evc_event_types.producer_class, evc_event_types.order_key, evc_event_types.compat, evc_event_types.status, evc_event_types.max_payload_bytes, evc_event_types.registry_digest)
    IS DISTINCT FROM (EXCLUDED.description, EXCLUDED.producer_class, EXCLUDED.order_key, EXCLUDED.compat, EXCLUDED.status, EXCLUDED.max_payload_bytes, EXCLUDED.registry_digest);
{%- endif %}
{%- if !registry.event_versions.is_empty() %}

-- Event versions: the payload schema and the digest of its canonical JSON.
INSERT INTO evc_event_versions (event_type, version, major, minor, patch, schema, schema_digest, registry_digest)
VALUES
{%- for row in registry.event_versions %}
    ({{ row|join(", ") }}){% if !loop.last %},{% endif %}
{%- endfor %}
ON CONFLICT (event_type, version) DO UPDATE SET
    major = EXCLUDED.major,
    minor = EXCLUDED.minor,
    patch = EXCLUDED.patch,
    schema = EXCLUDED.schema,
    schema_digest = EXCLUDED.schema_digest,
    registry_digest = EXCLUDED.registry_digest
WHERE (evc_event_versions.major, evc_event_versions.minor, evc_event_versions.patch, evc_event_versions.schema, evc_event_versions.schema_digest, evc_event_versions.registry_digest)
    IS DISTINCT FROM (EXCLUDED.major, EXCLUDED.minor, EXCLUDED.patch, EXCLUDED.schema, EXCLUDED.schema_digest, EXCLUDED.registry_digest);
{%- endif %}
{%- if !registry.executor_classes.is_empty() %}

-- Executor classes, before the consumers that run on them.
INSERT INTO evc_executor_classes (name, description, mutating, idempotency_namespace, heartbeat_owner, heartbeat_threshold_ms, active, registry_digest)
VALUES
{%- for row in registry.executor_classes %}
    ({{ row|join(", ") }}){% if !loop.last %},{% endif %}
{%- endfor %}
ON CONFLICT (name) DO UPDATE SET
    description = EXCLUDED.description,
    mutating = EXCLUDED.mutating,
    idempotency_namespace = EXCLUDED.idempotency_namespace,
    heartbeat_owner = EXCLUDED.heartbeat_owner,
    heartbeat_threshold_ms = EXCLUDED.heartbeat_threshold_ms,
    active = EXCLUDED.active,
    registry_digest = EXCLUDED.registry_digest
WHERE (evc_executor_classes.description, evc_executor_classes.mutating, evc_executor_classes.idempotency_namespace, evc_executor_classes.heartbeat_owner, evc_executor_classes.heartbeat_threshold_ms, evc_executor_classes.active, evc_executor_classes.registry_digest)
    IS DISTINCT FROM (EXCLUDED.description, EXCLUDED.mutating, EXCLUDED.idempotency_namespace, EXCLUDED.heartbeat_owner, EXCLUDED.heartbeat_threshold_ms, EXCLUDED.active, EXCLUDED.registry_digest);
{%- endif %}
{%- if !registry.consumers.is_empty() %}

-- Consumers.
INSERT INTO evc_consumers (name, description, executor_kind, retry_policy, handler, ordering, mode, heartbeat_threshold_ms, registry_digest)
VALUES
{%- for row in registry.consumers %}
    ({{ row|join(", ") }}){% if !loop.last %},{% endif %}
{%- endfor %}
ON CONFLICT (name) DO UPDATE SET
    description = EXCLUDED.description,
    executor_kind = EXCLUDED.executor_kind,
    retry_policy = EXCLUDED.retry_policy,
    handler = EXCLUDED.handler,
    ordering = EXCLUDED.ordering,
    mode = EXCLUDED.mode,
    heartbeat_threshold_ms = EXCLUDED.heartbeat_threshold_ms,
    registry_digest = EXCLUDED.registry_digest
WHERE (evc_consumers.description, evc_consumers.executor_kind, evc_consumers.retry_policy, evc_consumers.handler, evc_consumers.ordering, evc_consumers.mode, evc_consumers.heartbeat_threshold_ms, evc_consumers.registry_digest)
    IS DISTINCT FROM (EXCLUDED.description, EXCLUDED.executor_kind, EXCLUDED.retry_policy, EXCLUDED.handler, EXCLUDED.ordering, EXCLUDED.mode, EXCLUDED.heartbeat_threshold_ms, EXCLUDED.registry_digest);
{%- endif %}
{%- if !registry.consumer_classes.is_empty() %}

-- The executor class each consumer runs on.
UPDATE evc_consumers SET executor_class = classes.executor_class
FROM (VALUES
{%- for row in registry.consumer_classes %}
    ({{ row|join(", ") }}){% if !loop.last %},{% endif %}
{%- endfor %}
) AS classes (name, executor_class)
WHERE evc_consumers.name = classes.name
    AND evc_consumers.executor_class IS DISTINCT FROM classes.executor_class;
{%- endif %}
{%- if !registry.subscriptions.is_empty() %}

-- Subscriptions: the event versions each consumer accepts.
INSERT INTO evc_subscriptions (consumer, event_type, requirement, registry_digest)
VALUES
{%- for row in registry.subscriptions %}
    ({{ row|join(", ") }}){% if !loop.last %},{% endif %}
{%- endfor %}
ON CONFLICT (consumer, event_type) DO UPDATE SET
    requirement = EXCLUDED.requirement,
    registry_digest = EXCLUDED.registry_digest
WHERE (evc_subscriptions.requirement, evc_subscriptions.registry_digest)
    IS DISTINCT FROM (EXCLUDED.requirement, EXCLUDED.registry_digest);
{%- endif %}

-- The registry this database holds, compared at start-up with the one the runtime was built with.
INSERT INTO evc_registry_state (id, digest)
VALUES (true, {{ digest_literal }})
ON CONFLICT (id) DO UPDATE SET
    digest = EXCLUDED.digest,
    applied_at = now()
WHERE evc_registry_state.digest IS DISTINCT FROM EXCLUDED.digest;
