//! Every SQL statement of the PostgreSQL store, named after what it does. All are static text
//! with bind parameters (prepared once per connection by sqlx); the tables and the indexes that
//! serve them are declared in this crate's `migrations/postgres/evc_runtime.sql` and changed by
//! the later runtime steps (`evc_runtime_v2.sql` to `evc_runtime_v7.sql`), which `evc generate`
//! renders into `generated/migrations/`. No SQL against those tables is written outside the
//! store (`tests/store_boundary.rs`).

/// The channel every append notifies after commit; the payload is the name of a consumer that
/// got a delivery (never event data). Dispatchers `LISTEN` on it.
pub const NOTIFY_CHANNEL: &str = "evc_deliveries";

/// Appends one event, its deliveries and one notification per delivery's consumer, in one
/// statement on the caller's connection.
///
/// `$1` event id, `$2` type, `$3` version, `$4` order key, `$5` tenant scope, `$6` producer
/// class, `$7` idempotency key, `$8` trace id, `$9` parent span id, `$10` trace flags, `$11`
/// correlation id, `$12` causation id, `$13` canonical payload text, `$14` payload bytes,
/// `$15` consumers (`text[]`), `$16` per consumer whether it orders per key (`bool[]`: its
/// delivery carries the order key, the others' carry NULL), `$17` the deliveries' due time in
/// epoch seconds (`AppendOptions::not_before`; NULL: now). Returns one row (event id, seq,
/// deliveries) when the event was written, none when the idempotency key is taken in the
/// producer class and tenant.
///
/// Notifies only while a dispatcher waits for the consumer (docs/runtime.md, "Doorbell"): for
/// each delivery's consumer the statement tries the shared transaction lock of the consumer's
/// doorbell ([`HOLD_DOORBELL`]); it is refused only while a sleeping worker holds the doorbell,
/// and then the consumer is notified. Otherwise the shared lock stays held to the commit, so a
/// worker cannot take the doorbell (and go to sleep) before this event is visible to its last
/// claim. The notify calls read the inserted deliveries, so they run after the inserts;
/// notifications are sent by PostgreSQL at commit and discarded on rollback.
pub(crate) const APPEND_EVENT: &str = "\
WITH e AS (
    INSERT INTO evc_events (event_id, event_type, schema_version, order_key, tenant_scope,
        producer_class, idempotency_key, trace_id, parent_span_id, trace_flags, correlation_id,
        causation_id, payload, payload_bytes)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13::jsonb, $14)
    ON CONFLICT (producer_class, idempotency_key, (coalesce(tenant_scope, '*')))
        WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING event_id, seq, order_key, tenant_scope
), d AS (
    INSERT INTO evc_deliveries (event_id, consumer, event_seq, order_key, next_attempt_at,
        tenant_scope)
    SELECT e.event_id, c.consumer, e.seq, CASE WHEN c.ordered THEN e.order_key END,
        coalesce(to_timestamp($17::float8), now()), e.tenant_scope
    FROM e CROSS JOIN UNNEST($15::text[], $16::bool[]) AS c (consumer, ordered)
    RETURNING consumer
), n AS (
    SELECT pg_notify('evc_deliveries', d.consumer) FROM d
    WHERE NOT pg_try_advisory_xact_lock_shared(hashtextextended(d.consumer, 7265))
)
SELECT e.event_id, e.seq, (SELECT count(*) FROM d) AS deliveries,
    (SELECT count(*) FROM n) AS notified
FROM e";

/// The event an idempotency key names: `$1` producer class, `$2` key, `$3` tenant scope (NULL:
/// the events without one).
pub(crate) const FIND_BY_IDEMPOTENCY_KEY: &str = "\
SELECT event_id, seq FROM evc_events
WHERE producer_class = $1 AND idempotency_key = $2
    AND coalesce(tenant_scope, '*') = coalesce($3, '*')";

/// Appends a chunk of events and their deliveries in one statement, then notifies each
/// consumer that got a delivery once.
///
/// Events are parallel arrays `$1`..`$14` in the column order of [`APPEND_EVENT`] (`$13`
/// canonical payload text, `$14` payload bytes as `int4[]`); deliveries are the parallel arrays
/// `$15` event ids, `$16` consumers, `$17` whether the consumer orders per key and `$18` the
/// delivery's due time in epoch seconds (NULL: now). Events are
/// inserted in array order (so `seq` follows it); an event whose idempotency key is taken is
/// skipped with its deliveries. Returns the event id and seq of every event written.
///
/// Batches whose events carry no idempotency key and no delay go through `COPY` instead
/// ([`COPY_EVENTS`], [`COPY_DELIVERIES`]).
pub(crate) const APPEND_BATCH: &str = "\
WITH input AS (
    SELECT * FROM UNNEST($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[],
        $7::text[], $8::text[], $9::text[], $10::text[], $11::text[], $12::text[], $13::text[],
        $14::int4[])
        WITH ORDINALITY AS t (event_id, event_type, schema_version, order_key, tenant_scope,
            producer_class, idempotency_key, trace_id, parent_span_id, trace_flags,
            correlation_id, causation_id, payload, payload_bytes, ord)
), e AS (
    INSERT INTO evc_events (event_id, event_type, schema_version, order_key, tenant_scope,
        producer_class, idempotency_key, trace_id, parent_span_id, trace_flags, correlation_id,
        causation_id, payload, payload_bytes)
    SELECT event_id, event_type, schema_version, order_key, tenant_scope, producer_class,
        idempotency_key, trace_id, parent_span_id, trace_flags, correlation_id, causation_id,
        payload::jsonb, payload_bytes
    FROM input ORDER BY ord
    ON CONFLICT (producer_class, idempotency_key, (coalesce(tenant_scope, '*')))
        WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING event_id, seq, order_key, tenant_scope
), d AS (
    INSERT INTO evc_deliveries (event_id, consumer, event_seq, order_key, next_attempt_at,
        tenant_scope)
    SELECT e.event_id, f.consumer, e.seq, CASE WHEN f.ordered THEN e.order_key END,
        coalesce(to_timestamp(f.not_before), now()), e.tenant_scope
    FROM UNNEST($15::uuid[], $16::text[], $17::bool[], $18::float8[])
        AS f (event_id, consumer, ordered, not_before)
    JOIN e ON e.event_id = f.event_id
    RETURNING consumer
)
SELECT e.event_id, e.seq,
    (SELECT count(*) FROM (
        SELECT pg_notify('evc_deliveries', n.consumer) FROM (SELECT DISTINCT consumer FROM d) AS n
    ) AS x) AS notified
FROM e";

/// Reserves `$1` values of the events' sequence for a `COPY` of as many events (the deliveries
/// copy the seq of their event, so it must be known before either copy), as one `int8[]`; and
/// whether row-level security applies to this session's writes of `evc_deliveries`, which
/// PostgreSQL then refuses to `COPY` into.
pub(crate) const RESERVE_SEQS: &str = "\
WITH s AS MATERIALIZED (
    -- Materialized: resolving the name once, not once per value, is most of the cost.
    SELECT pg_get_serial_sequence('evc_events', 'seq')::regclass AS id
)
SELECT array_agg(nextval(s.id)) AS seqs,
    row_security_active('evc_deliveries') AS deliveries_under_row_security
FROM s CROSS JOIN generate_series(1, $1)";

/// `COPY` of events in text format, columns in this order; the rows are encoded by
/// [`super::copy`].
pub(crate) const COPY_EVENTS: &str = "\
COPY evc_events (seq, event_id, event_type, schema_version, order_key, tenant_scope,
    producer_class, trace_id, parent_span_id, trace_flags, correlation_id, causation_id, payload,
    payload_bytes) FROM STDIN";

/// `COPY` of deliveries in text format, columns in this order.
pub(crate) const COPY_DELIVERIES: &str = "\
COPY evc_deliveries (event_id, consumer, event_seq, tenant_scope, order_key) FROM STDIN";

/// The first statement of a transaction whose reads share one snapshot and write nothing.
pub(crate) const ONE_SNAPSHOT: &str = "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY";

/// Every event row in the text format and columns of [`COPY_EVENTS`], in `seq` order.
pub(crate) const COPY_EVENTS_OUT: &str = "\
COPY (SELECT seq, event_id, event_type, schema_version, order_key, tenant_scope, producer_class,
    trace_id, parent_span_id, trace_flags, correlation_id, causation_id, payload, payload_bytes
    FROM evc_events ORDER BY seq) TO STDOUT";

/// Every delivery row in the text format and columns of [`COPY_DELIVERIES`], in `event_seq`
/// order.
pub(crate) const COPY_DELIVERIES_OUT: &str = "\
COPY (SELECT event_id, consumer, event_seq, tenant_scope, order_key
    FROM evc_deliveries ORDER BY event_seq, consumer) TO STDOUT";

/// The delivery rows of a batch append where the session may not `COPY` them (row-level
/// security applies), as parallel arrays in the columns of [`COPY_DELIVERIES`].
pub(crate) const INSERT_DELIVERIES: &str = "\
INSERT INTO evc_deliveries (event_id, consumer, event_seq, tenant_scope, order_key)
SELECT * FROM UNNEST($1::uuid[], $2::text[], $3::int8[], $4::text[], $5::text[])";

/// One notification per consumer in `$1` (after a `COPY`, which cannot notify).
pub(crate) const NOTIFY_CONSUMERS: &str = "\
SELECT count(pg_notify('evc_deliveries', c)) AS notified FROM UNNEST($1::text[]) AS c";

/// The events that idempotency keys name: parallel arrays `$1` producer classes, `$2` keys,
/// `$3` tenant scopes; each row carries the index (from 1) of the key it answers.
pub(crate) const FIND_BY_IDEMPOTENCY_KEYS: &str = "\
SELECT k.ord, e.event_id, e.seq
FROM UNNEST($1::text[], $2::text[], $3::text[])
    WITH ORDINALITY AS k (producer_class, idempotency_key, tenant_scope, ord)
JOIN evc_events e
    ON e.producer_class = k.producer_class AND e.idempotency_key = k.idempotency_key
    AND coalesce(e.tenant_scope, '*') = coalesce(k.tenant_scope, '*')";

/// Records refused appends, one row each, on the store's own connection: parallel arrays `$1`
/// event types, `$2` versions, `$3` reason codes, `$4` payload digests. Never the payload.
pub(crate) const RECORD_REJECTS: &str = "\
INSERT INTO evc_validation_rejects (event_type, schema_version, reason_code, payload_digest)
SELECT * FROM UNNEST($1::text[], $2::text[], $3::text[], $4::text[])";

/// The registry digest the database holds (no row: the migrations were not applied).
pub(crate) const REGISTRY_DIGEST: &str = "SELECT digest FROM evc_registry_state";

// Writes of the registry mirror ([`crate::PgStore::install_registry`]): the upserts a generated
// registry migration (`NNNN_evc_registry_*.sql`) runs, one row at a time. Never a DELETE: rows
// of objects the registry lacks stay, with the digest of the last registry that held them.

/// Upserts retry policy `$1`: kind, base and max delay, max attempts, jitter, retry-on classes
/// (`text[]`), registry digest `$8`.
pub(crate) const INSTALL_RETRY_POLICY: &str = "\
INSERT INTO evc_retry_policies (name, kind, base_delay_ms, max_delay_ms, max_attempts, jitter,
    retry_on, registry_digest)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
ON CONFLICT (name) DO UPDATE SET kind = EXCLUDED.kind, base_delay_ms = EXCLUDED.base_delay_ms,
    max_delay_ms = EXCLUDED.max_delay_ms, max_attempts = EXCLUDED.max_attempts,
    jitter = EXCLUDED.jitter, retry_on = EXCLUDED.retry_on,
    registry_digest = EXCLUDED.registry_digest";

/// Upserts event type `$1`: description, producer class, order key (`text[]`), compatibility,
/// status, payload cap, registry digest `$8`.
pub(crate) const INSTALL_EVENT_TYPE: &str = "\
INSERT INTO evc_event_types (name, description, producer_class, order_key, compat, status,
    max_payload_bytes, registry_digest)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
ON CONFLICT (name) DO UPDATE SET description = EXCLUDED.description,
    producer_class = EXCLUDED.producer_class, order_key = EXCLUDED.order_key,
    compat = EXCLUDED.compat, status = EXCLUDED.status,
    max_payload_bytes = EXCLUDED.max_payload_bytes, registry_digest = EXCLUDED.registry_digest";

/// Upserts version `$2` of event type `$1`: major, minor, patch, schema (JSON text), schema
/// digest, registry digest `$8`.
pub(crate) const INSTALL_EVENT_VERSION: &str = "\
INSERT INTO evc_event_versions (event_type, version, major, minor, patch, schema, schema_digest,
    registry_digest)
VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7, $8)
ON CONFLICT (event_type, version) DO UPDATE SET major = EXCLUDED.major, minor = EXCLUDED.minor,
    patch = EXCLUDED.patch, schema = EXCLUDED.schema, schema_digest = EXCLUDED.schema_digest,
    registry_digest = EXCLUDED.registry_digest";

/// Upserts consumer `$1`: description, executor kind, retry policy, handler kind, ordering,
/// mode, heartbeat threshold, registry digest `$9`.
pub(crate) const INSTALL_CONSUMER: &str = "\
INSERT INTO evc_consumers (name, description, executor_kind, retry_policy, handler, ordering,
    mode, heartbeat_threshold_ms, registry_digest)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
ON CONFLICT (name) DO UPDATE SET description = EXCLUDED.description,
    executor_kind = EXCLUDED.executor_kind, retry_policy = EXCLUDED.retry_policy,
    handler = EXCLUDED.handler, ordering = EXCLUDED.ordering, mode = EXCLUDED.mode,
    heartbeat_threshold_ms = EXCLUDED.heartbeat_threshold_ms,
    registry_digest = EXCLUDED.registry_digest";

/// Upserts the subscription of consumer `$1` to event type `$2` under requirement `$3`,
/// registry digest `$4`.
pub(crate) const INSTALL_SUBSCRIPTION: &str = "\
INSERT INTO evc_subscriptions (consumer, event_type, requirement, registry_digest)
VALUES ($1, $2, $3, $4)
ON CONFLICT (consumer, event_type) DO UPDATE SET requirement = EXCLUDED.requirement,
    registry_digest = EXCLUDED.registry_digest";

/// Upserts executor class `$1`: mutating, idempotency namespace, heartbeat owner, active,
/// registry digest `$6` (no description, no heartbeat threshold: the compiled registry holds
/// neither).
pub(crate) const INSTALL_EXECUTOR_CLASS: &str = "\
INSERT INTO evc_executor_classes (name, description, mutating, idempotency_namespace,
    heartbeat_owner, active, registry_digest)
VALUES ($1, '', $2, $3, $4, $5, $6)
ON CONFLICT (name) DO UPDATE SET mutating = EXCLUDED.mutating,
    idempotency_namespace = EXCLUDED.idempotency_namespace,
    heartbeat_owner = EXCLUDED.heartbeat_owner, active = EXCLUDED.active,
    registry_digest = EXCLUDED.registry_digest";

/// Sets consumer `$1`'s executor class to `$2`.
pub(crate) const INSTALL_CONSUMER_CLASS: &str =
    "UPDATE evc_consumers SET executor_class = $2 WHERE name = $1";

/// Makes `$1` the deployed registry digest.
pub(crate) const INSTALL_REGISTRY_DIGEST: &str = "\
INSERT INTO evc_registry_state (id, digest) VALUES (true, $1)
ON CONFLICT (id) DO UPDATE SET digest = EXCLUDED.digest, applied_at = now()
WHERE evc_registry_state.digest IS DISTINCT FROM EXCLUDED.digest";

/// Upserts the settings row ([`crate::PgStore::install_settings`]), as a generated settings
/// migration (`NNNN_evc_settings_*.sql`) does: settings digest `$1`, denied keys and credential
/// key names (`text[]`), default and hard payload caps, tenant-scope requirement, batch size,
/// lease, heartbeat, max attempts, backoff ceiling, handler timeouts `$12` (JSON text). A row
/// whose values are unchanged is not rewritten.
pub(crate) const INSTALL_SETTINGS: &str = "\
INSERT INTO evc_settings (id, settings_digest, denied_keys, credential_key_names,
    default_max_bytes, hard_max_bytes, require_tenant_scope, batch_size, lease_ms, heartbeat_ms,
    max_attempts, backoff_ceiling_ms, handler_timeouts)
VALUES (true, $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12::jsonb)
ON CONFLICT (id) DO UPDATE SET settings_digest = EXCLUDED.settings_digest,
    denied_keys = EXCLUDED.denied_keys, credential_key_names = EXCLUDED.credential_key_names,
    default_max_bytes = EXCLUDED.default_max_bytes, hard_max_bytes = EXCLUDED.hard_max_bytes,
    require_tenant_scope = EXCLUDED.require_tenant_scope, batch_size = EXCLUDED.batch_size,
    lease_ms = EXCLUDED.lease_ms, heartbeat_ms = EXCLUDED.heartbeat_ms,
    max_attempts = EXCLUDED.max_attempts, backoff_ceiling_ms = EXCLUDED.backoff_ceiling_ms,
    handler_timeouts = EXCLUDED.handler_timeouts, applied_at = now()
WHERE (evc_settings.settings_digest, evc_settings.denied_keys, evc_settings.credential_key_names,
    evc_settings.default_max_bytes, evc_settings.hard_max_bytes,
    evc_settings.require_tenant_scope, evc_settings.batch_size, evc_settings.lease_ms,
    evc_settings.heartbeat_ms, evc_settings.max_attempts, evc_settings.backoff_ceiling_ms,
    evc_settings.handler_timeouts)
    IS DISTINCT FROM (EXCLUDED.settings_digest, EXCLUDED.denied_keys,
    EXCLUDED.credential_key_names, EXCLUDED.default_max_bytes, EXCLUDED.hard_max_bytes,
    EXCLUDED.require_tenant_scope, EXCLUDED.batch_size, EXCLUDED.lease_ms, EXCLUDED.heartbeat_ms,
    EXCLUDED.max_attempts, EXCLUDED.backoff_ceiling_ms, EXCLUDED.handler_timeouts)";

/// Records the schedules `$1` and lag thresholds `$2` (JSON lists) with settings digest `$3`
/// in the settings row (twenty-fourth step), as a settings migration of contracts with either
/// does.
pub(crate) const INSTALL_SCHEDULING: &str = "\
UPDATE evc_settings
SET schedules = $1::jsonb, lag_thresholds = $2::jsonb, scheduling_digest = $3
WHERE id AND scheduling_digest IS DISTINCT FROM $3";

/// Writes the cut-over gates `$1` (a JSON list) recorded under settings digest `$2` (the
/// twenty-fifth step), as a settings migration does.
pub(crate) const INSTALL_GATES: &str = "\
UPDATE evc_settings
SET cutover_gates = $1::jsonb, gates_digest = $2
WHERE id AND gates_digest IS DISTINCT FROM $2";

/// The cut-over gates of the settings row, when the settings migration that wrote them is the
/// one in force (twenty-fifth step); no row otherwise.
pub(crate) const DEPLOYED_GATES: &str = "\
SELECT cutover_gates::text AS cutover_gates
FROM evc_settings
WHERE id AND gates_digest = settings_digest";

/// Whether the twenty-fifth step (the cut-over gate) is applied.
pub(crate) const HAS_CUTOVER: &str = "SELECT to_regclass('evc_legacy_outcomes') IS NOT NULL";

/// Writes the retention periods `$1` (a JSON object) recorded under settings digest `$2` (the
/// twenty-sixth step), as a settings migration does.
pub(crate) const INSTALL_RETENTION: &str = "\
UPDATE evc_settings
SET retention = $1::jsonb, retention_digest = $2
WHERE id AND retention_digest IS DISTINCT FROM $2";

/// The retention periods of the settings row, when the settings migration that wrote them is
/// the one in force (twenty-sixth step); no row otherwise.
pub(crate) const DEPLOYED_RETENTION: &str = "\
SELECT retention::text AS retention
FROM evc_settings
WHERE id AND retention_digest = settings_digest AND retention IS NOT NULL";

/// Writes the inventory rules `$1` (a JSON list) recorded under settings digest `$2` (the
/// twenty-seventh step).
pub(crate) const INSTALL_INVENTORY: &str = "\
UPDATE evc_settings
SET inventory_rules = $1::jsonb, inventory_digest = $2
WHERE id AND inventory_digest IS DISTINCT FROM $2";

/// The inventory rules of the settings row, when the settings migration that wrote them is the
/// one in force (twenty-seventh step); no row otherwise.
pub(crate) const DEPLOYED_INVENTORY: &str = "\
SELECT inventory_rules::text AS inventory_rules
FROM evc_settings
WHERE id AND inventory_digest = settings_digest AND inventory_rules IS NOT NULL";

/// Whether the twenty-seventh step (inventory rules) is applied.
pub(crate) const HAS_INVENTORY: &str = "\
SELECT EXISTS (SELECT 1 FROM information_schema.columns
    WHERE table_name = 'evc_settings' AND column_name = 'inventory_rules'
        AND table_schema = current_schema())";

/// Usage evidence: pairs of event types appended in one trace since `$1` (epoch seconds), in
/// at least `$2` traces, most first; at most `$3`.
pub(crate) const CO_TRIGGERED: &str = "\
WITH t AS (
    SELECT DISTINCT trace_id, event_type COLLATE \"C\" AS event_type
    FROM evc_events
    WHERE trace_id IS NOT NULL AND produced_at >= to_timestamp($1::float8)
)
SELECT a.event_type AS first, b.event_type AS second, count(*)::int8 AS n
FROM t a JOIN t b ON b.trace_id = a.trace_id AND b.event_type > a.event_type
GROUP BY a.event_type, b.event_type
HAVING count(*) >= $2
ORDER BY n DESC, first, second
LIMIT $3";

/// Usage evidence: pairs of consumers with a failed attempt in one slot of `$2` seconds since
/// `$1`, in at least `$3` slots, most first; at most `$4`.
pub(crate) const FAILING_TOGETHER: &str = "\
WITH f AS (
    SELECT DISTINCT consumer COLLATE \"C\" AS consumer,
        floor(extract(epoch FROM finished_at) / $2::float8) AS slot
    FROM evc_delivery_attempts
    WHERE finished_at >= to_timestamp($1::float8) AND outcome <> 'acked'
)
SELECT a.consumer AS first, b.consumer AS second, count(*)::int8 AS n
FROM f a JOIN f b ON b.slot = a.slot AND b.consumer > a.consumer
GROUP BY a.consumer, b.consumer
HAVING count(*) >= $3
ORDER BY n DESC, first, second
LIMIT $4";

/// Usage evidence: (producer class, consumer) pairs with at least `$2` dead-lettered or
/// quarantined deliveries, or lag breaches opened, since `$1`; most first, at most `$3`.
pub(crate) const CHRONIC_PAIRS: &str = "\
WITH dl AS (
    SELECT e.producer_class, a.consumer, count(*) AS n
    FROM evc_delivery_attempts a JOIN evc_events e ON e.event_id = a.event_id
    WHERE a.finished_at >= to_timestamp($1::float8) AND a.outcome IN ('dead', 'quarantined')
    GROUP BY e.producer_class, a.consumer
), lb AS (
    SELECT producer_class, consumer, count(*) AS n
    FROM evc_lag_breaches
    WHERE opened_at >= to_timestamp($1::float8)
    GROUP BY producer_class, consumer
)
SELECT coalesce(dl.producer_class, lb.producer_class) AS producer_class,
    coalesce(dl.consumer, lb.consumer) AS consumer,
    coalesce(dl.n, 0)::int8 AS dead_letters, coalesce(lb.n, 0)::int8 AS lag_breaches
FROM dl FULL JOIN lb ON lb.producer_class = dl.producer_class AND lb.consumer = dl.consumer
WHERE coalesce(dl.n, 0) >= $2 OR coalesce(lb.n, 0) >= $2
ORDER BY coalesce(dl.n, 0) + coalesce(lb.n, 0) DESC,
    coalesce(dl.producer_class, lb.producer_class) COLLATE \"C\",
    coalesce(dl.consumer, lb.consumer) COLLATE \"C\"
LIMIT $3";

/// Usage evidence: each consumer's deliveries dead-lettered or quarantined since `$1`.
pub(crate) const ESCALATIONS: &str = "\
SELECT consumer, count(*)::int8 AS n
FROM evc_delivery_attempts
WHERE finished_at >= to_timestamp($1::float8) AND outcome IN ('dead', 'quarantined')
GROUP BY consumer";

/// Takes the evidence recording's lock for the rest of the transaction when no other session
/// holds it.
pub(crate) const TRY_EVIDENCE_LOCK: &str =
    "SELECT pg_try_advisory_xact_lock(hashtextextended('evc.evidence', 7269)) AS locked";

/// Whether the snapshot of slot `$1` (epoch milliseconds) is recorded.
pub(crate) const HAS_EVIDENCE_SNAPSHOT: &str =
    "SELECT EXISTS (SELECT 1 FROM evc_evidence_snapshots WHERE slot_ms = $1)";

/// Records the snapshot `$3` (a report, JSON) of slot `$1`, taken at `$2` (epoch seconds, the
/// clock the slot was found by); a slot already recorded keeps its snapshot.
pub(crate) const RECORD_EVIDENCE_SNAPSHOT: &str = "\
INSERT INTO evc_evidence_snapshots (slot_ms, recorded_at, report)
VALUES ($1, to_timestamp($2::float8), $3::jsonb)
ON CONFLICT (slot_ms) DO NOTHING";

/// Removes the snapshots of slots before `$1` (epoch milliseconds).
pub(crate) const REMOVE_EVIDENCE_SNAPSHOTS: &str =
    "DELETE FROM evc_evidence_snapshots WHERE slot_ms < $1";

/// Whether the database has the twenty-ninth step's `evc_evidence_snapshots`.
pub(crate) const HAS_EVIDENCE_SNAPSHOTS: &str =
    "SELECT to_regclass('evc_evidence_snapshots') IS NOT NULL";

/// The newest `$1` snapshots, newest slot first.
pub(crate) const READ_EVIDENCE_SNAPSHOTS: &str = "\
SELECT slot_ms, extract(epoch FROM recorded_at)::float8 AS recorded_at, report::text AS report
FROM evc_evidence_snapshots
ORDER BY slot_ms DESC
LIMIT $1";

/// The newest `$1` purges, newest first (the audit table of the fifth step).
pub(crate) const READ_PURGES: &str = "\
SELECT id, ledger, extract(epoch FROM cutoff)::float8 AS cutoff, reason, actor,
    extract(epoch FROM purged_at)::float8 AS purged_at, counts::text AS counts
FROM evc_purges
ORDER BY id DESC
LIMIT $1";

/// The newest purge of each ledger, by ledger.
pub(crate) const NEWEST_PURGES: &str = "\
SELECT DISTINCT ON (ledger) id, ledger, extract(epoch FROM cutoff)::float8 AS cutoff, reason,
    actor, extract(epoch FROM purged_at)::float8 AS purged_at, counts::text AS counts
FROM evc_purges
ORDER BY ledger, id DESC";

/// The newest applied inventory of each consumer the session sees, by consumer.
pub(crate) const NEWEST_INVENTORIES: &str = "\
SELECT DISTINCT ON (consumer) id, consumer, counts::text AS counts, approved_by, reason,
    extract(epoch FROM applied_at)::float8 AS applied_at
FROM evc_inventories
ORDER BY consumer, id DESC";

/// Whether the twenty-eighth step's inventory ledger is there.
pub(crate) const HAS_INVENTORIES: &str = "SELECT to_regclass('evc_inventories') IS NOT NULL";

/// Whether the fifth step's purge audit table is there.
pub(crate) const HAS_PURGES: &str = "SELECT to_regclass('evc_purges') IS NOT NULL";

/// Whether the thirty-first runtime step ran: every ack writes `evc_acked_batches`.
pub(crate) const HAS_ACKED_BATCHES: &str = "SELECT to_regclass('evc_acked_batches') IS NOT NULL";

/// Whether the twenty-sixth step (retention) is applied.
pub(crate) const HAS_RETENTION: &str = "\
SELECT to_regprocedure('evc_purge_expired(timestamptz, text[], timestamptz[], timestamptz, \
timestamptz, timestamptz, text[], timestamptz[], text, text)') IS NOT NULL";

/// Removes what the retention periods expire as of `$1` (`evc_purge_expired`, the
/// twenty-sixth step): cutoffs per event type `$2`/`$3`, of attempts `$4`, reconciliations
/// `$5` and rejects `$6`, per consumer of idempotency records `$7`/`$8`, reason `$9`, actor
/// `$10`, all as epoch seconds.
pub(crate) const PURGE_EXPIRED: &str = "\
SELECT purge_id, events, deliveries, attempts, reconciliations, replay_items, rejects, effects
FROM evc_purge_expired(to_timestamp($1::float8), $2::text[],
    ARRAY(SELECT to_timestamp(s) FROM unnest($3::float8[]) WITH ORDINALITY AS u (s, n) ORDER BY n),
    to_timestamp($4::float8), to_timestamp($5::float8), to_timestamp($6::float8), $7::text[],
    ARRAY(SELECT to_timestamp(s) FROM unnest($8::float8[]) WITH ORDINALITY AS u (s, n) ORDER BY n),
    $9, $10)";

/// The event type mirror rows.
pub(crate) const REGISTRY_EVENT_TYPES: &str = "\
SELECT name, description, producer_class, order_key, status, max_payload_bytes::int8 AS max_payload_bytes,
    registry_digest
FROM evc_event_types ORDER BY name";

/// The event version mirror rows.
pub(crate) const REGISTRY_EVENT_VERSIONS: &str = "\
SELECT event_type, version, major, schema_digest, registry_digest
FROM evc_event_versions ORDER BY event_type, major, minor, patch";

/// The consumer mirror rows.
pub(crate) const REGISTRY_CONSUMERS: &str = "\
SELECT name, retry_policy, handler, ordering, mode, heartbeat_threshold_ms, registry_digest
FROM evc_consumers ORDER BY name";

/// The subscription mirror rows.
pub(crate) const REGISTRY_SUBSCRIPTIONS: &str = "\
SELECT consumer, event_type, requirement, registry_digest
FROM evc_subscriptions ORDER BY consumer, event_type";

/// The retry policy mirror rows.
pub(crate) const REGISTRY_RETRY_POLICIES: &str = "\
SELECT name, kind, base_delay_ms, max_delay_ms, max_attempts::int8 AS max_attempts, jitter,
    retry_on, registry_digest
FROM evc_retry_policies ORDER BY name";

// ---------------------------------------------------------------------------------------------
// Dispatch (docs/runtime.md, "Dispatch"). Served by evc_deliveries_due_idx (pending deliveries
// of a consumer in seq order), evc_deliveries_tenant_due_idx (the same for one tenant),
// evc_deliveries_key_order_idx (the head of a key; only deliveries of consumers with per-key
// ordering carry the key) and evc_deliveries_lease_expiry_idx (expired leases).
// ---------------------------------------------------------------------------------------------

/// The claim statements' test that consumer `$1` may be claimed for the delivery row `$row`:
/// not paused and not `off` in `evc_consumer_state`, and not paused for the row's tenant in
/// `evc_tenant_pauses`. The first tenant test, uncorrelated, is evaluated once per statement,
/// so the per-row test runs only while the consumer is paused for some tenant.
macro_rules! claimable {
    ($row:literal) => {
        concat!(
            "NOT EXISTS (
            SELECT 1 FROM evc_consumer_state s
            WHERE s.consumer = $1 AND (s.paused OR s.mode = 'off')
        )
        AND (NOT EXISTS (SELECT 1 FROM evc_tenant_pauses p WHERE p.consumer = $1)
            OR NOT EXISTS (
                SELECT 1 FROM evc_tenant_pauses p
                WHERE p.consumer = $1 AND p.tenant_scope = ",
            $row,
            ".tenant_scope
            ))"
        )
    };
}

/// Delivery `d` heads its key: no other delivery of its key (and tenant) is leased, and none
/// earlier is pending. A delivery without a key orders with nothing. `OFFSET 0` keeps the
/// sub-select a subplan run per candidate, one index probe each, rather than an anti-join
/// that scans every keyed delivery of the consumer (docs/design.md, "Claim statements").
macro_rules! heads_its_key {
    () => {
        "NOT EXISTS (
            SELECT 1 FROM evc_deliveries p
            WHERE p.consumer = d.consumer AND p.order_key = d.order_key
                AND p.order_key IS NOT NULL
                AND p.tenant_scope IS NOT DISTINCT FROM d.tenant_scope
                AND p.event_id <> d.event_id
                AND p.status IN ('pending', 'leased')
                AND (p.status = 'leased' OR p.event_seq < d.event_seq)
            OFFSET 0
        )"
    };
}

/// The two scans of a claim statement, as CTEs `every_tenant` and `one_tenant`, each of the
/// due deliveries `$due` (which reads `evc_deliveries` as `d`) that `claimable!`, oldest first,
/// at most a batch, with `$select` columns and `$lock` (`FOR UPDATE SKIP LOCKED`, or nothing).
/// Only one of them reads rows: `every_tenant` for a session of every tenant (`evc.tenant`
/// `*`, or unset where tenants are not required), `one_tenant` for a tenant's session, through
/// `evc_deliveries_tenant_due_idx`, so a tenant's claim does not read past the backlog of the
/// others (row-level security would filter those rows one by one). The test of
/// `every_tenant` has no column in it, so PostgreSQL evaluates it once, before the scan; for
/// a session of every tenant `one_tenant` compares with NULL and reads nothing.
macro_rules! scoped_scans {
    ($select:literal, $due:literal, $lock:literal) => {
        concat!(
            "every_tenant AS (
    SELECT ",
            $select,
            " FROM evc_deliveries d
    WHERE ",
            $due,
            "
        AND ",
            claimable!("d"),
            "
        AND coalesce(nullif(current_setting('evc.tenant', true), ''), '*') = '*'
    ORDER BY d.event_seq
    LIMIT $batch",
            $lock,
            "
), one_tenant AS (
    SELECT ",
            $select,
            " FROM evc_deliveries d
    WHERE ",
            $due,
            "
        AND ",
            claimable!("d"),
            "
        AND d.tenant_scope = nullif(nullif(current_setting('evc.tenant', true), ''), '*')
    ORDER BY d.event_seq
    LIMIT $batch",
            $lock,
            "
)"
        )
    };
}

/// Matches a replay's or discard's row written in the session's tenant scope: the expression
/// the sixteenth step's unique indexes use, against the session's `evc.tenant` (no tenant
/// and an empty setting are the `*` scope).
macro_rules! session_scope {
    () => {
        "coalesce(nullif(tenant_scope, ''), '*') \
        = coalesce(nullif(current_setting('evc.tenant', true), ''), '*')"
    };
}

/// The end every claim statement shares: its claimed rows `d` joined with their events, in
/// `event_seq` order (what `dispatch::claimed` reads), with the address (`ctid`, as text) of
/// each row's claimed version for the ack (`address` in `d`), the target version and digest of
/// an inventory's repair of the delivery (NULL for any other; one probe of a partial index). Each event is one probe of its primary
/// key (`OFFSET 0` keeps the lateral sub-select a subplan): joined plainly, a claim of 200 or
/// more rows made PostgreSQL hash the whole events table, read from the first row to the last
/// on every claim (docs/design.md, "Claim statements").
macro_rules! claimed_rows {
    () => {
        concat!(
            "SELECT d.event_id, d.consumer, d.generation, d.attempt, d.fencing_token, d.event_seq,
    d.address, e.order_key,
    e.event_type, e.schema_version, e.payload::text AS payload, e.trace_id, e.parent_span_id,
    e.trace_flags, extract(epoch FROM now())::float8 AS claimed_at,
    (SELECT s.mode FROM evc_consumer_state s WHERE s.consumer = $1) AS mode_override,
    CASE WHEN r.repaired_digest IS NOT NULL THEN r.target_version END AS repair_version,
    r.repaired_digest AS repair_digest
FROM d CROSS JOIN LATERAL (
    SELECT e.order_key, e.event_type, e.schema_version, e.payload, e.trace_id,
        e.parent_span_id, e.trace_flags
    FROM evc_events e WHERE e.event_id = d.event_id
    OFFSET 0
) AS e
LEFT JOIN LATERAL (
    SELECT i.target_version, i.repaired_digest FROM evc_inventory_items i
    WHERE i.event_id = d.event_id AND i.consumer = d.consumer
        AND i.class IN ('safe', 'repair')
    OFFSET 0
) AS r ON true
ORDER BY d.event_seq"
        )
    };
}

/// The `acked` attempts every ack writes, as CTE `a`: the rows of `x` (columns `event_id,
/// consumer, generation, attempt, lease_owner, fencing_token, started, tenant_scope,
/// event_seq`), finished now, in one `evc_acked_batches` row per consumer, worker, tenant and
/// bucket of event sequence numbers, each in event order; `a` returns each row's number of
/// attempts, `n`. One row and two index entries for the whole batch where a row per delivery
/// wrote about 330 B of WAL each (docs/design.md, "Acked batches").
macro_rules! acked_batch_rows {
    () => {
        "clock AS (
    SELECT clock_timestamp() AS now
), a AS (
    INSERT INTO evc_acked_batches (consumer, owner, tenant_scope, seq_bucket, finished_at,
        event_ids, generations, attempts, fencing_tokens, started_at)
    SELECT x.consumer, x.lease_owner, x.tenant_scope, x.event_seq / 256,
        greatest(min(clock.now), max(x.started)),
        array_agg(x.event_id ORDER BY x.event_seq, x.generation),
        array_agg(x.generation ORDER BY x.event_seq, x.generation),
        array_agg(x.attempt ORDER BY x.event_seq, x.generation),
        array_agg(x.fencing_token ORDER BY x.event_seq, x.generation),
        array_agg(x.started ORDER BY x.event_seq, x.generation)
    FROM x CROSS JOIN clock
    GROUP BY x.consumer, x.lease_owner, x.tenant_scope, x.event_seq / 256
    RETURNING cardinality(event_ids) AS n
)"
    };
}

/// Stands for the batch size in the claim statements ([`CLAIM_BATCH`], [`CLAIM_HELD`],
/// [`CLAIM_KEY_HEADS_LOCK`], once in each of their two scans); [`with_batch`] writes the number
/// in.
const BATCH_LIMIT: &str = "LIMIT $batch";

/// A claim statement with its batch size written in as a constant (one prepared statement per
/// batch size and connection).
///
/// Not a bind parameter: PostgreSQL's generic plan cannot know a `LIMIT $n`, estimates it at a
/// tenth of the rows it limits (tens of thousands under a backlog), and hash-joins whole tables
/// for it, so every execution was planned anew (a custom plan, about 0.2 ms of server CPU per
/// claim of 100, docs/design.md, "Claim statements"). With the number in the text the generic plan is the custom one, and
/// PostgreSQL keeps it from the sixth execution on.
pub(crate) fn with_batch(statement: &str, batch: u32) -> String {
    statement.replace(BATCH_LIMIT, &format!("LIMIT {}", batch.max(1)))
}

/// Claims up to a batch ([`with_batch`]) of due deliveries of consumer `$1` that need no
/// per-key ordering and come after `event_seq` `$4` (0: from the head; the dispatcher's claim
/// cursor) and at most at `$5` (the end of the claim's stretch), oldest first, in one
/// statement (nothing while the consumer is paused or its mode is `off`, none of a tenant it
/// is paused for: `claimable!`): locks them (`SKIP LOCKED`, so concurrent claimers take
/// disjoint rows), leases them to owner `$2` until now + `$3` milliseconds, counts the
/// attempt and raises the fencing token. Returns the leases joined with their events, in
/// `event_seq` order.
///
/// The scans read the consumer and the stretch's bounds as sub-selects (`(SELECT $1::text)`,
/// `(SELECT $4::int8)`), not as `$n`. A custom plan sees the values, the generic plan
/// estimates them at PostgreSQL's defaults, and for a stretch, for the whole backlog and for
/// a consumer with a small share of the table alike the custom plans, their planning
/// included, are estimated cheaper: with `$n`, PostgreSQL plans every claim anew, about
/// 0.4 ms of server time per claim of 100 (docs/design.md, "Claim statements"). A sub-select
/// is an init plan whose value no plan knows, so the custom plans estimate as the generic one
/// does, and from the sixth execution on PostgreSQL keeps the generic plan: the same index
/// range scan.
pub(crate) const CLAIM_BATCH: &str = concat!(
    "\
WITH ",
    scoped_scans!(
        "d.ctid",
        "d.consumer = (SELECT $1::text) AND d.status = 'pending' AND d.next_attempt_at <= now()
        AND d.event_seq > (SELECT $4::int8) AND d.event_seq <= (SELECT $5::int8)",
        "
    FOR UPDATE SKIP LOCKED"
    ),
    ", c AS (
    SELECT ctid FROM every_tenant UNION ALL SELECT ctid FROM one_tenant
), d AS (
    -- By ctid: a TID scan of the rows the scans locked, not a join with `c`: for 200 rows or
    -- more PostgreSQL hash-joined `c` with a sequential scan of every delivery row, dead
    -- versions included. (A row whose newest version committed after this statement's
    -- snapshot is locked but not seen here, and stays pending: it is claimed next time.)
    UPDATE evc_deliveries d
    SET status = 'leased', lease_owner = $2,
        lease_until = now() + $3::int8 * interval '1 millisecond',
        attempt = d.attempt + 1, fencing_token = d.fencing_token + 1, updated_at = now()
    WHERE d.ctid = ANY (ARRAY(SELECT ctid FROM c))
    RETURNING d.event_id, d.consumer, d.generation, d.attempt, d.fencing_token, d.event_seq,
        d.ctid::text AS address
)
",
    claimed_rows!()
);

/// Step 1 of a per-key claim (inside one transaction with [`CLAIM_KEY_HEADS_LEASE`]): the due
/// pending deliveries of consumer `$1` that head their key (no other delivery of the key and
/// tenant is leased, none with a lower `event_seq` is pending) and whose key's transaction-scoped
/// advisory lock (`hashtext(consumer), hashtext(order_key)`) this transaction obtains, oldest
/// first, at most a batch ([`with_batch`]); returns their `event_id` and `event_seq`. The `CASE`
/// fixes the order: the lock is tried only
/// for a head, and the scan stops once a batch of heads is locked, so a concurrent claimer
/// skips the keys taken here and goes on to the next heads. A delivery without a key (written
/// while its consumer did not order per key) orders with nothing and needs no key lock.
///
/// No row locks: the key lock is what keeps two claimers off one key. `FOR UPDATE SKIP LOCKED`
/// here would make PostgreSQL re-check concurrently updated rows through the head predicate,
/// which keeps claims running for minutes under load, and a row lock kept after a failed
/// re-check blocks transactional handlers.
///
/// The head predicate is evaluated on this statement's snapshot, which may predate a
/// concurrent claim of the same key; step 2 re-checks it on a snapshot taken after the key's
/// advisory lock was granted (docs/runtime.md, "At most one in flight per key").
pub(crate) const CLAIM_KEY_HEADS_LOCK: &str = concat!(
    "\
WITH ",
    scoped_scans!(
        "d.event_id, d.event_seq",
        "d.consumer = $1 AND d.status = 'pending' AND d.next_attempt_at <= now()
        AND CASE
            WHEN EXISTS (
                SELECT 1 FROM evc_deliveries p
                WHERE p.consumer = d.consumer AND p.order_key = d.order_key
                    -- Implied by the equality; spelled out so the planner matches the partial
                    -- index evc_deliveries_key_order_idx.
                    AND p.order_key IS NOT NULL
                    -- A key orders within its tenant.
                    AND p.tenant_scope IS NOT DISTINCT FROM d.tenant_scope
                    AND p.status IN ('pending', 'leased')
                    AND (p.status = 'leased' OR p.event_seq < d.event_seq)
            ) THEN false
            WHEN d.order_key IS NULL THEN true
            ELSE pg_try_advisory_xact_lock(hashtext($1), hashtext(d.order_key))
        END",
        ""
    ),
    "
SELECT event_id, event_seq FROM every_tenant UNION ALL SELECT event_id, event_seq FROM one_tenant"
);

/// Step 2 of a per-key claim: leases the candidates `$2` (event ids, key-locked by step 1,
/// their `event_seq` from `$5` to `$6`) of consumer `$1` to owner `$3` until now + `$4`
/// milliseconds, re-checking on this statement's fresh snapshot that each is still due and
/// heads its key; counts the attempt and raises the fencing token. Returns what
/// [`CLAIM_BATCH`] returns.
///
/// The `event_seq` window bounds the scan whichever index the planner picks: without
/// statistics it reads the due index, and without the window that is every pending delivery
/// of the consumer.
///
/// `OFFSET 0` keeps the head re-check a subplan run per candidate, an index probe on the
/// candidate's key. Without it PostgreSQL turns `NOT EXISTS` into an anti-join, and before
/// `evc_deliveries` has statistics (a backlog written faster than autovacuum analyses it) it
/// estimates one row on each side and scans every keyed delivery of the consumer once per
/// candidate (docs/design.md, "Claim statements").
pub(crate) const CLAIM_KEY_HEADS_LEASE: &str = concat!(
    "\
WITH d AS (
    UPDATE evc_deliveries d
    SET status = 'leased', lease_owner = $3,
        lease_until = now() + $4::int8 * interval '1 millisecond',
        attempt = d.attempt + 1, fencing_token = d.fencing_token + 1, updated_at = now()
    WHERE d.consumer = $1 AND d.event_id = ANY($2::uuid[]) AND d.status = 'pending'
        -- Due again on this snapshot: a candidate step 1 saw due may have been claimed,
        -- failed and rescheduled since, and must then wait out its delay.
        AND d.next_attempt_at <= now()
        AND d.event_seq BETWEEN $5 AND $6
        AND ",
    heads_its_key!(),
    "
    RETURNING d.event_id, d.consumer, d.generation, d.attempt, d.fencing_token, d.event_seq,
        d.ctid::text AS address
)
",
    claimed_rows!()
);

/// Claim by event id (a broker's messages name the events): leases the deliveries of consumer
/// `$1` of the events `$2` that are pending, due, claimable (`claimable!`) and head their key
/// to owner `$3` until now + `$4` milliseconds; counts the attempt and raises the fencing
/// token. Returns what [`CLAIM_BATCH`] returns. A concurrent claim of the same row waits for
/// this one and then finds it no longer pending. The head check reads this statement's
/// snapshot: a broker consumer that delivers one message of a partition at a time is what
/// orders a key (docs/relay.md, "Consumers on JetStream").
pub(crate) const CLAIM_EVENTS: &str = concat!(
    "\
WITH d AS (
    UPDATE evc_deliveries d
    SET status = 'leased', lease_owner = $3,
        lease_until = now() + $4::int8 * interval '1 millisecond',
        attempt = d.attempt + 1, fencing_token = d.fencing_token + 1, updated_at = now()
    WHERE d.consumer = $1 AND d.event_id = ANY($2::uuid[]) AND d.status = 'pending'
        AND d.next_attempt_at <= now()
        -- A tenant's session claims its own tenant's deliveries only, as the other claims.
        AND (coalesce(nullif(current_setting('evc.tenant', true), ''), '*') = '*'
            OR d.tenant_scope = nullif(current_setting('evc.tenant', true), ''))
        AND ",
    claimable!("d"),
    "
        AND ",
    heads_its_key!(),
    "
    RETURNING d.event_id, d.consumer, d.generation, d.attempt, d.fencing_token, d.event_seq,
        d.ctid::text AS address
)
",
    claimed_rows!()
);

/// Where the deliveries of consumer `$1` of the events `$2` stand, per event: whether one is
/// open (`pending` or `leased`), whether one is dead or quarantined, and for an open one how
/// many seconds until it is due or its lease ends (never below zero).
pub(crate) const UNCLAIMED_EVENTS: &str = "\
SELECT d.event_id,
    bool_or(d.status IN ('pending', 'leased')) AS open,
    bool_or(d.status IN ('dead', 'quarantined')) AS ended,
    coalesce(greatest(0, max(extract(epoch FROM CASE d.status
        WHEN 'leased' THEN d.lease_until
        WHEN 'pending' THEN d.next_attempt_at
    END - now()))), 0)::float8 AS wait_s
FROM evc_deliveries d
WHERE d.consumer = $1 AND d.event_id = ANY($2::uuid[])
GROUP BY d.event_id";

/// Held claim (a batched transactional claim, run in the transaction that will ack): locks up
/// to a batch ([`with_batch`]) of due deliveries of consumer `$1` that need no per-key ordering
/// and come after `event_seq` `$2` (0: from the head) and at most at `$3`, oldest first
/// (`FOR UPDATE SKIP LOCKED`; nothing while the consumer is paused or off), and returns them
/// joined with their events. Nothing is written: the rows stay `pending`, and the row locks,
/// held until the transaction ends, keep every other claimer, recovery and renewal off them.
/// `attempt` and `fencing_token` are returned raised by one: the values [`ACK_HELD`] writes.
/// Its scans read the consumer and the stretch's bounds as sub-selects, as in [`CLAIM_BATCH`].
pub(crate) const CLAIM_HELD: &str = concat!(
    "\
WITH ",
    scoped_scans!(
        "d.event_id, d.consumer, d.generation, d.attempt + 1 AS attempt,
        d.fencing_token + 1 AS fencing_token, d.event_seq, d.ctid::text AS address",
        "d.consumer = (SELECT $1::text) AND d.status = 'pending' AND d.next_attempt_at <= now()
        AND d.event_seq > (SELECT $2::int8) AND d.event_seq <= (SELECT $3::int8)",
        "
    FOR UPDATE SKIP LOCKED"
    ),
    ", d AS (
    SELECT * FROM every_tenant UNION ALL SELECT * FROM one_tenant
)
",
    claimed_rows!()
);

/// Acks held deliveries in the transaction that claimed them ([`CLAIM_HELD`]): parallel
/// arrays `$1` event ids, `$2` their held tokens, `$4` handler start times (epoch seconds) and
/// `$6` the addresses (`ctid`, as text) at which the claim locked their rows, all of consumer
/// `$3`, worker `$5`. Each delivery still `pending` with the token below the held one is
/// deleted, and its `acked` attempt (the held attempt number, token and owner, in a batch row)
/// is its record from then on (the data-modifying `a` runs whether or not it is read). A
/// `DELETE` leaves no new row version and no index entry behind, where setting `acked` wrote
/// both (docs/design.md, "Held batches"). Returns the acked event ids, each with the replay that
/// made its delivery (NULL: none).
///
/// The rows are read at their addresses (a TID scan), not found by a primary-key probe each:
/// the claim's row lock keeps every other session off them, and the runtime's own statements
/// on the holding transaction only lock them again, so each locked version stays where the
/// claim saw it. The delete repeats the fence (consumer, `pending`, the entry's event and
/// token) as a hashed filter: an address that holds no such row (a version a handler's own
/// update replaced, a lease this transaction does not hold) deletes nothing, and the entry
/// counts as stale; its delivery runs again. The addresses are a sub-select, as in
/// [`ACK_BATCH_FENCED`]: a custom plan that sees 500 of them chooses an index scan instead.
pub(crate) const ACK_HELD: &str = concat!(
    "\
WITH r AS (
    SELECT DISTINCT ON (event_id, fencing_token) event_id, fencing_token, started
    FROM UNNEST($1::uuid[], $2::int8[], $4::float8[]) AS r (event_id, fencing_token, started)
), k AS (
    DELETE FROM evc_deliveries d
    WHERE d.ctid = ANY ((SELECT $6::text[]::tid[])::tid[])
        AND d.consumer = $3 AND d.status = 'pending'
        AND coalesce((d.event_id, d.fencing_token + 1)
            IN (SELECT event_id, fencing_token FROM r), false)
    RETURNING d.event_id, d.consumer, d.generation, d.attempt, d.fencing_token, d.replay_id,
        d.tenant_scope, d.event_seq
), x AS (
    SELECT k.event_id, k.consumer, k.generation, k.attempt + 1 AS attempt,
        $5::text AS lease_owner, k.fencing_token + 1 AS fencing_token,
        to_timestamp(r.started) AS started, k.replay_id, k.tenant_scope, k.event_seq
    FROM k JOIN r ON r.event_id = k.event_id AND r.fencing_token = k.fencing_token + 1
), ",
    acked_batch_rows!(),
    "
SELECT x.event_id, x.replay_id FROM x"
);

/// Acks a lease, fenced: delivery `$1` of consumer `$2` still leased with token `$3`. Deletes
/// the delivery and writes its `acked` attempt (owner, token, started at epoch seconds `$4`,
/// finished now; a batch row of one) in the same statement, like every ack ([`ACK_HELD`]: the
/// attempt is the acked delivery's record). Returns one row when the token was current (with the replay that
/// made the delivery, NULL for none), none when it was stale.
pub(crate) const ACK_FENCED: &str = concat!(
    "\
WITH x AS (
    DELETE FROM evc_deliveries
    WHERE event_id = $1 AND consumer = $2 AND fencing_token = $3 AND status = 'leased'
    RETURNING event_id, consumer, generation, attempt, lease_owner, fencing_token,
        to_timestamp($4::float8) AS started, replay_id, tenant_scope, event_seq
), ",
    acked_batch_rows!(),
    "
SELECT (SELECT coalesce(sum(n), 0) FROM a) AS attempts, x.replay_id FROM x"
);

/// Acks many leases in one statement, each fenced on its own: parallel arrays `$1` event ids,
/// `$2` consumers, `$3` tokens, `$4` owners, `$5` handler start times (epoch seconds) and `$6`
/// the addresses (`ctid`, as text; NULL for none) of the row versions their claims wrote. A
/// delivery still leased to its owner with its token is deleted and gets its `acked` attempt
/// row (started at `$5`, finished now); any other entry (stale token, settled, released,
/// another owner) writes nothing. Returns the acked `(event_id, consumer)` pairs, each with the
/// replay that made its delivery (`replay_id`, NULL for none).
///
/// Two deletes, one statement: `at_address` takes the rows at the claims' addresses (a TID
/// scan), and `by_key` finds each entry it did not ack by one probe of the primary key (the
/// lateral sub-select, kept a subplan by `OFFSET 0`): a lease renewed since its claim, whose
/// row moved, or one without an address. Usually every entry is acked at its address and no
/// probe runs. Both repeat the fence (status, and the entry's event, consumer, token and
/// owner) as a hashed filter: when another writer changed a row after the statement's
/// snapshot, PostgreSQL re-evaluates the filter on the row's newest version, which then fails
/// unless the lease is still the entry's (a renewal keeps owner and token). The address alone
/// is not a fence: TID scans re-checked it on the newest version only from a 2025 minor
/// release on, and a vacuumed address may hold another row. Written as `DELETE ... USING r`,
/// the custom plan PostgreSQL made for a batch of 200 or more scanned the whole table for
/// `status = 'leased'` on every ack (docs/design.md, "Claim statements").
///
/// The addresses are a sub-select, as the claims' bounds are: a custom plan that sees 500
/// addresses prices a TID scan at a random page read each and chooses a sequential scan of a
/// small table (`runtime/tests/schema/claim_plans.rs`), where an unknown array is priced at a
/// few addresses.
///
/// No `FOR UPDATE` first: a row lock is a heap write and a WAL record of its own, and no order
/// of locks is needed to rule out deadlocks. An ack waits only for a row whose lease it held
/// when the statement began and another writer has moved on since (recovery, a reclaim, a
/// renewal), and those writers never wait for an ack: recovery and claims take their rows
/// `SKIP LOCKED`, and renewals and fails touch only their own owner's leases, which one worker
/// never acks and renews at once. `r` is sorted by `DISTINCT ON`, so the deletes go in key
/// order all the same.
pub(crate) const ACK_BATCH_FENCED: &str = concat!(
    "\
WITH r AS (
    SELECT DISTINCT ON (event_id, consumer, fencing_token, owner)
        event_id, consumer, fencing_token, owner, started
    FROM UNNEST($1::uuid[], $2::text[], $3::int8[], $4::text[], $5::float8[])
        AS r (event_id, consumer, fencing_token, owner, started)
), at_address AS (
    DELETE FROM evc_deliveries d
    WHERE d.ctid = ANY ((SELECT $6::text[]::tid[])::tid[])
        AND d.status = 'leased'
        -- A hashed filter, not a join: a semi-join would compare every row with every entry.
        AND coalesce((d.event_id, d.consumer, d.fencing_token, d.lease_owner)
            IN (SELECT event_id, consumer, fencing_token, owner FROM r), false)
    RETURNING d.event_id, d.consumer, d.generation, d.attempt, d.lease_owner,
        d.fencing_token, d.replay_id, d.tenant_scope, d.event_seq
), by_key AS (
    DELETE FROM evc_deliveries d
    WHERE d.ctid = ANY (ARRAY(
        SELECT f.ctid FROM r CROSS JOIN LATERAL (
            SELECT l.ctid FROM evc_deliveries l
            WHERE l.event_id = r.event_id AND l.consumer = r.consumer
                AND l.fencing_token = r.fencing_token AND l.lease_owner = r.owner
                AND l.status = 'leased'
            OFFSET 0
        ) AS f
        WHERE NOT coalesce((r.event_id, r.consumer)
            IN (SELECT event_id, consumer FROM at_address), false)
    ))
        AND d.status = 'leased'
        AND coalesce((d.event_id, d.consumer, d.fencing_token, d.lease_owner)
            IN (SELECT event_id, consumer, fencing_token, owner FROM r), false)
    RETURNING d.event_id, d.consumer, d.generation, d.attempt, d.lease_owner,
        d.fencing_token, d.replay_id, d.tenant_scope, d.event_seq
), k AS (
    SELECT * FROM at_address UNION ALL SELECT * FROM by_key
), x AS (
    SELECT k.event_id, k.consumer, k.generation, k.attempt, k.lease_owner, k.fencing_token,
        to_timestamp(r.started) AS started, k.replay_id, k.tenant_scope, k.event_seq
    FROM k JOIN r ON r.event_id = k.event_id AND r.consumer = k.consumer
        AND r.fencing_token = k.fencing_token AND r.owner = k.lease_owner
), ",
    acked_batch_rows!(),
    "
SELECT x.event_id, x.consumer, x.replay_id, (SELECT coalesce(sum(n), 0) FROM a) AS attempts
FROM x"
);

/// The start both fail statements share: CTE `t` reads the clock once (`$7` handler start in
/// epoch seconds), and both the attempt row's `finished_at` and a retry's `next_attempt_at`
/// (`finished_at` + delay) come from that one read. Two reads would let a stall between the
/// update and the insert (a WAL flush, a relation extension) eat into the retry delay.
///
/// The read happens when the update first reaches the row, before any wait for its lock, and
/// is not repeated when PostgreSQL re-checks the row after such a wait. Only the lease's
/// holder changes a leased row and keeps its fence (a renewal), and a worker renews and fails
/// its own leases one statement after the other, so a fail that waited and still matches does
/// not come from the dispatcher.
macro_rules! failed_attempt_clock {
    () => {
        "\
WITH t AS MATERIALIZED (
    SELECT to_timestamp($7::float8) AS started,
        greatest(clock_timestamp(), to_timestamp($7::float8)) AS finished
), d AS (
"
    };
}

/// The end both fail statements share: the failed attempt's row for the delivery `d` they
/// updated (`$6` error code, `$8` outcome, times from `t`), and the count with the replay
/// that made the delivery (NULL: none).
macro_rules! failed_attempt_row {
    () => {
        "), a AS (
    INSERT INTO evc_delivery_attempts (event_id, consumer, generation, attempt, owner,
        fencing_token, started_at, finished_at, outcome, error_code, duration_ms)
    SELECT d.event_id, d.consumer, d.generation, d.attempt, d.lease_owner, d.fencing_token,
        t.started, t.finished, $8, $6,
        floor(extract(epoch FROM t.finished - t.started) * 1000)::int8
    FROM d CROSS JOIN t
    RETURNING 1
)
SELECT (SELECT count(*) FROM a) AS attempts, d.replay_id FROM d"
    };
}

/// Ends a failed attempt, fenced like [`ACK_FENCED`]: `$4` the new status (`pending` to
/// retry, `dead`, `quarantined`), due again after `$5` milliseconds when pending, `$6` the
/// error code, `$7` started at (epoch seconds), `$8` the attempt's outcome (`retry`, `dead`,
/// `quarantined`). Writes the attempt row in the same statement.
pub(crate) const FAIL_FENCED: &str = concat!(
    failed_attempt_clock!(),
    "\
    UPDATE evc_deliveries
    SET status = $4, lease_until = NULL, last_error_code = $6, updated_at = now(),
        -- From the clock, not the transaction start: the delay runs from the attempt's
        -- recorded end (its `finished_at`).
        next_attempt_at = CASE WHEN $4 = 'pending'
            THEN (SELECT finished FROM t) + $5::int8 * interval '1 millisecond'
            ELSE next_attempt_at END
    WHERE event_id = $1 AND consumer = $2 AND fencing_token = $3 AND status = 'leased'
    RETURNING event_id, consumer, generation, attempt, lease_owner, fencing_token, replay_id
",
    failed_attempt_row!()
);

/// [`FAIL_FENCED`] for a held delivery ([`CLAIM_HELD`]) after its batch rolled back: the
/// delivery must still be `pending` with the token below the held token `$3` (the rows are
/// unlocked now; if another claimer took the delivery meanwhile, its run is the attempt and
/// this writes nothing). Counts the attempt, raises the token and records worker `$9` as the
/// owner, like a claim would have.
pub(crate) const FAIL_HELD: &str = concat!(
    failed_attempt_clock!(),
    "\
    UPDATE evc_deliveries
    SET status = $4, attempt = attempt + 1, fencing_token = fencing_token + 1,
        lease_owner = $9, lease_until = NULL, last_error_code = $6, updated_at = now(),
        next_attempt_at = CASE WHEN $4 = 'pending'
            THEN (SELECT finished FROM t) + $5::int8 * interval '1 millisecond'
            ELSE next_attempt_at END
    WHERE event_id = $1 AND consumer = $2 AND fencing_token = $3 - 1 AND status = 'pending'
    RETURNING event_id, consumer, generation, attempt, lease_owner, fencing_token, replay_id
",
    failed_attempt_row!()
);

/// Extends leases, fenced: parallel arrays `$1` event ids and `$2` tokens of consumer `$3`,
/// each still leased with its token, until now + `$4` milliseconds. Returns the renewed ids.
pub(crate) const RENEW_FENCED: &str = "\
UPDATE evc_deliveries d
SET lease_until = now() + $4::int8 * interval '1 millisecond'
FROM UNNEST($1::uuid[], $2::int8[]) AS r (event_id, fencing_token)
WHERE d.event_id = r.event_id AND d.consumer = $3 AND d.fencing_token = r.fencing_token
    AND d.status = 'leased'
RETURNING d.event_id";

/// Graceful shutdown: every lease of owner `$1` back to `pending`, as if never claimed (the
/// claim's attempt count is taken back, the token stays raised so the released lease's token
/// is stale, no attempt row: no handler ran). Returns the number released.
pub(crate) const RELEASE_LEASES: &str = "\
WITH d AS (
    UPDATE evc_deliveries
    SET status = 'pending', lease_until = NULL, attempt = greatest(attempt - 1, 0),
        updated_at = now()
    WHERE lease_owner = $1 AND status = 'leased'
    RETURNING 1
)
SELECT count(*) FROM d";

/// Lease-expiry recovery: leased deliveries whose lease ended (`lease_until < now()`) and
/// whose row no transaction holds (`SKIP LOCKED`: a running transactional handler keeps its
/// row) go back to `pending`, due now, attempt kept; each gets an attempt row with outcome
/// `lease_expired` (started at the claim, `updated_at`). A delivery whose attempts reached its
/// consumer's `max_attempts` (parallel arrays `$2` consumers, `$3` max attempts; a consumer not
/// named has no limit) goes `dead` instead, with outcome `dead` and error code
/// `lease_expired`: a handler that takes its process down every time is not claimed forever.
/// At most `$1` rows per call. Returns the numbers recovered (pending or dead) and dead, and
/// the dead deliveries as parallel arrays (`dead_events`, `dead_consumers`, `dead_attempts`),
/// and the replays that made any of them (`dead_replays`).
pub(crate) const RECOVER_EXPIRED: &str = "\
WITH x AS (
    SELECT ctid, event_id, consumer, generation, attempt, lease_owner, fencing_token, updated_at,
        replay_id
    FROM evc_deliveries
    WHERE status = 'leased' AND lease_until < now()
    ORDER BY lease_until
    LIMIT $1
    FOR UPDATE SKIP LOCKED
), y AS (
    SELECT x.*, x.attempt >= coalesce(p.max_attempts, 2147483647) AS exhausted
    FROM x LEFT JOIN UNNEST($2::text[], $3::int4[]) AS p (consumer, max_attempts)
        ON p.consumer = x.consumer
), d AS (
    UPDATE evc_deliveries d
    SET status = CASE WHEN y.exhausted THEN 'dead' ELSE 'pending' END, lease_until = NULL,
        next_attempt_at = now(), last_error_code = 'lease_expired', updated_at = now()
    FROM y
    -- By ctid: the rows are locked, so they stay where `x` found them (and an earlier,
    -- replayed generation of the delivery is left alone). The `ANY` over their addresses
    -- makes it a TID scan: joined by `d.ctid = y.ctid` alone, PostgreSQL hashes a
    -- sequential scan of every delivery row once many deliveries are leased.
    WHERE d.ctid = ANY (ARRAY(SELECT ctid FROM x)) AND d.ctid = y.ctid
    RETURNING d.event_id
), a AS (
    INSERT INTO evc_delivery_attempts (event_id, consumer, generation, attempt, owner,
        fencing_token, started_at, finished_at, outcome, error_code, duration_ms)
    SELECT y.event_id, y.consumer, y.generation, greatest(y.attempt, 1), y.lease_owner, y.fencing_token,
        y.updated_at, greatest(clock_timestamp(), y.updated_at),
        CASE WHEN y.exhausted THEN 'dead' ELSE 'lease_expired' END, 'lease_expired',
        floor(extract(epoch FROM greatest(clock_timestamp(), y.updated_at) - y.updated_at)
            * 1000)::int8
    FROM y
    RETURNING 1
)
SELECT (SELECT count(*) FROM d) AS recovered, (SELECT count(*) FROM a) AS attempts,
    (SELECT count(*) FROM y WHERE y.exhausted) AS dead,
    ARRAY(SELECT y.event_id FROM y WHERE y.exhausted ORDER BY y.event_id, y.consumer)
        AS dead_events,
    ARRAY(SELECT y.consumer FROM y WHERE y.exhausted ORDER BY y.event_id, y.consumer)
        AS dead_consumers,
    ARRAY(SELECT greatest(y.attempt, 1) FROM y WHERE y.exhausted
        ORDER BY y.event_id, y.consumer) AS dead_attempts,
    ARRAY(SELECT DISTINCT y.replay_id FROM y WHERE y.exhausted AND y.replay_id IS NOT NULL)
        AS dead_replays";

/// The transaction's time in RFC 3339, UTC, as lifecycle events carry it.
macro_rules! rfc3339_now {
    () => {
        "to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')"
    };
}

/// What a lifecycle event about a delivery (`job.dead_lettered`, `job.discarded`) needs of its
/// event `$1`: type, version, tenant scope and trace, and the time of the state change (the
/// transaction's, as the delivery's `updated_at`) in RFC 3339, UTC. Never the payload.
pub(crate) const LIFECYCLE_SOURCE: &str = concat!(
    "\
SELECT event_type, schema_version, tenant_scope, trace_id, parent_span_id, trace_flags,
    ",
    rfc3339_now!(),
    " AS now
FROM evc_events WHERE event_id = $1"
);

/// The transaction's time (RFC 3339, UTC) and the database role, for `dlq_replay.scheduled`.
pub(crate) const LIFECYCLE_NOW: &str = concat!(
    "SELECT ",
    rfc3339_now!(),
    " AS now, session_user::text AS role"
);

/// Locks replay `$1`'s row until the transaction ends: settles of its last deliveries take
/// turns counting them ([`REPLAY_PROGRESS`], a statement of its own so its snapshot follows
/// the lock).
pub(crate) const LOCK_REPLAY: &str = "SELECT 1 FROM evc_replays WHERE id = $1 FOR UPDATE";

/// Replay `$1`'s deliveries (the generation after each of its items): how many it made,
/// how many are still `pending` or `leased`, how many failed again (settled but not acked: an
/// ack deletes the row, so a missing row is an ack), of those how many are quarantined; and
/// the transaction's time in RFC 3339, UTC. No row: no such replay.
pub(crate) const REPLAY_PROGRESS: &str = concat!(
    "\
SELECT r.deliveries,
    count(*) FILTER (WHERE d.status IN ('pending', 'leased')) AS outstanding,
    count(*) FILTER (WHERE d.status IN ('dead', 'quarantined', 'replayed', 'discarded'))
        AS failed,
    count(*) FILTER (WHERE d.status = 'quarantined') AS quarantined,
    ",
    rfc3339_now!(),
    " AS now
FROM evc_replays r
LEFT JOIN evc_replay_items i ON i.replay_id = r.id
LEFT JOIN evc_deliveries d ON d.event_id = i.event_id AND d.consumer = i.consumer
    AND d.generation = i.generation + 1
WHERE r.id = $1
GROUP BY r.deliveries"
);

/// The tenant scope shared by every event of replay `$1`'s items; NULL when they have none,
/// several, or some have none.
pub(crate) const REPLAY_TENANT: &str = "\
SELECT CASE WHEN count(*) > 0 AND count(e.tenant_scope) = count(*)
        AND min(e.tenant_scope) = max(e.tenant_scope)
    THEN min(e.tenant_scope) END AS tenant_scope
FROM evc_replay_items i
JOIN evc_events e ON e.event_id = i.event_id
WHERE i.replay_id = $1";

/// Locks delivery `$1` of consumer `$2` for the rest of the transaction if it is still leased
/// with token `$3` (the transactional kind's fence, and [`RECORD_EFFECT`]'s). No row: stale.
pub(crate) const LOCK_LEASE: &str = "\
SELECT 1 AS held FROM evc_deliveries
WHERE event_id = $1 AND consumer = $2 AND fencing_token = $3 AND status = 'leased'
FOR UPDATE";

/// Records an effect once, fenced: consumer `$1`, effect key `$2`, event `$3`, outcome digest
/// `$4`, token `$5`, for a consumer without an executor class. The delivery must still be
/// leased with the token (row-locked here for the rest of the caller's transaction); the effect
/// row, with the delivery's tenant, is inserted `ON CONFLICT DO NOTHING` on the key within the
/// consumer and tenant. Returns `leased` (0: stale token) and `inserted` (0: recorded before).
/// It names no column of the twenty-second step, so a project without classes runs on a
/// database before it.
pub(crate) const RECORD_EFFECT: &str = "\
WITH l AS (
    SELECT tenant_scope FROM evc_deliveries
    WHERE event_id = $3 AND consumer = $1 AND fencing_token = $5 AND status = 'leased'
    FOR UPDATE
), i AS (
    INSERT INTO evc_consumer_effects (consumer, effect_key, event_id, outcome_digest,
        fencing_token, tenant_scope)
    SELECT $1, $2, $3, $4, $5, l.tenant_scope FROM l
    ON CONFLICT (consumer, effect_key, (coalesce(tenant_scope, '*'))) DO NOTHING
    RETURNING 1
)
SELECT (SELECT count(*) FROM l) AS leased, (SELECT count(*) FROM i) AS inserted";

/// [`RECORD_EFFECT`] for a held delivery ([`CLAIM_HELD`]): the delivery must still be
/// `pending` with the token below the held token `$5` (it is row-locked by the caller's
/// transaction, which claimed it).
pub(crate) const RECORD_EFFECT_HELD: &str = "\
WITH l AS (
    SELECT tenant_scope FROM evc_deliveries
    WHERE event_id = $3 AND consumer = $1 AND fencing_token = $5 - 1 AND status = 'pending'
    FOR UPDATE
), i AS (
    INSERT INTO evc_consumer_effects (consumer, effect_key, event_id, outcome_digest,
        fencing_token, tenant_scope)
    SELECT $1, $2, $3, $4, $5, l.tenant_scope FROM l
    ON CONFLICT (consumer, effect_key, (coalesce(tenant_scope, '*'))) DO NOTHING
    RETURNING 1
)
SELECT (SELECT count(*) FROM l) AS leased, (SELECT count(*) FROM i) AS inserted";

/// [`RECORD_EFFECT`] for a consumer on an executor class, whose idempotency namespace is `$6`:
/// the row carries the namespace, and is not inserted when the key is taken within the
/// consumer and tenant or within the namespace and tenant (no conflict target: either unique
/// index answers).
pub(crate) const RECORD_EFFECT_IN_NAMESPACE: &str = "\
WITH l AS (
    SELECT tenant_scope FROM evc_deliveries
    WHERE event_id = $3 AND consumer = $1 AND fencing_token = $5 AND status = 'leased'
    FOR UPDATE
), i AS (
    INSERT INTO evc_consumer_effects (consumer, effect_key, event_id, outcome_digest,
        fencing_token, tenant_scope, idempotency_namespace)
    SELECT $1, $2, $3, $4, $5, l.tenant_scope, $6 FROM l
    ON CONFLICT DO NOTHING
    RETURNING 1
)
SELECT (SELECT count(*) FROM l) AS leased, (SELECT count(*) FROM i) AS inserted";

/// [`RECORD_EFFECT_IN_NAMESPACE`] for a held delivery, fenced as [`RECORD_EFFECT_HELD`].
pub(crate) const RECORD_EFFECT_HELD_IN_NAMESPACE: &str = "\
WITH l AS (
    SELECT tenant_scope FROM evc_deliveries
    WHERE event_id = $3 AND consumer = $1 AND fencing_token = $5 - 1 AND status = 'pending'
    FOR UPDATE
), i AS (
    INSERT INTO evc_consumer_effects (consumer, effect_key, event_id, outcome_digest,
        fencing_token, tenant_scope, idempotency_namespace)
    SELECT $1, $2, $3, $4, $5, l.tenant_scope, $6 FROM l
    ON CONFLICT DO NOTHING
    RETURNING 1
)
SELECT (SELECT count(*) FROM l) AS leased, (SELECT count(*) FROM i) AS inserted";

/// Takes consumer `$1`'s doorbell: the session-level exclusive advisory lock on
/// `hashtextextended(consumer, 7265)` that [`APPEND_EVENT`] tests with a shared transaction lock.
/// Run in a transaction with a short `lock_timeout`: it waits for the appends in flight (they
/// hold the shared lock to their commit) and fails fast while another worker holds it.
pub(crate) const HOLD_DOORBELL: &str = "SELECT pg_advisory_lock(hashtextextended($1, 7265))";

/// Gives consumer `$1`'s doorbell back.
pub(crate) const RELEASE_DOORBELL: &str =
    "SELECT pg_advisory_unlock(hashtextextended($1, 7265)) AS released";

/// Sets the current transaction's `lock_timeout` to `$1` (text, e.g. `50ms`).
pub(crate) const LOCAL_LOCK_TIMEOUT: &str = "SELECT set_config('lock_timeout', $1, true)";

/// A consumer's operator state: `$1` consumer. Paused when it is paused for every tenant or for
/// the session's tenant (`evc.tenant`); mode NULL and revision 0 while no operator changed it.
pub(crate) const CONSUMER_STATE: &str = "\
SELECT coalesce(s.paused, false) OR EXISTS (
        SELECT 1 FROM evc_tenant_pauses p
        WHERE p.consumer = $1 AND p.tenant_scope = current_setting('evc.tenant', true)
    ) AS paused,
    s.mode, coalesce(s.revision, 0) AS revision
FROM (SELECT) AS one LEFT JOIN evc_consumer_state s ON s.consumer = $1";

/// Pauses consumer `$1` for the session's tenant (`evc.tenant`) and records it, `$2` who and
/// `$3` why, in one statement; a pause already in place changes nothing and records nothing.
pub(crate) const PAUSE_TENANT: &str = "\
WITH paused AS (
    INSERT INTO evc_tenant_pauses (consumer) VALUES ($1) ON CONFLICT DO NOTHING
    RETURNING consumer
)
INSERT INTO evc_state_changes (consumer, change, changed_by, reason)
SELECT consumer, 'pause', $2, $3 FROM paused";

/// Resumes consumer `$1` for the session's tenant (row-level security keeps the other tenants'
/// pauses out of reach) and records it like [`PAUSE_TENANT`]: only when the tenant's pause was
/// there (a pause for every tenant is not the tenant's to lift).
pub(crate) const RESUME_TENANT: &str = "\
WITH resumed AS (
    DELETE FROM evc_tenant_pauses WHERE consumer = $1
        AND tenant_scope = current_setting('evc.tenant', true)
    RETURNING consumer
)
INSERT INTO evc_state_changes (consumer, change, changed_by, reason)
SELECT consumer, 'resume', $2, $3 FROM resumed";

/// The newest `$2` recorded changes of consumer `$1`'s operator state the session may see,
/// newest first (`*` and no tenant read as every tenant's).
pub(crate) const STATE_CHANGES: &str = "\
SELECT id, consumer, change, mode, nullif(nullif(tenant_scope, '*'), '') AS tenant_scope,
    changed_by, reason, extract(epoch FROM changed_at)::float8 AS changed_at
FROM evc_state_changes WHERE consumer = $1
ORDER BY id DESC LIMIT $2";

/// The session's tenant scope: `evc.tenant` (NULL or empty: none; `*`: every tenant).
pub(crate) const SESSION_TENANT: &str = "SELECT current_setting('evc.tenant', true)";

/// Changes a consumer's operator state, raises its revision and records the change, in one
/// statement: `$1` consumer, `$2` paused (NULL: unchanged), `$3` mode (NULL: unchanged), `$4`
/// the contract's mode (for a first row), `$5` the change (`pause`, `resume` or `mode`), `$6`
/// who, `$7` why.
pub(crate) const CHANGE_CONSUMER_STATE: &str = "\
WITH changed AS (
    INSERT INTO evc_consumer_state AS s (consumer, paused, mode, revision, updated_at)
    VALUES ($1, coalesce($2, false), coalesce($3, $4), 1, now())
    ON CONFLICT (consumer) DO UPDATE SET
        paused = coalesce($2, s.paused),
        mode = coalesce($3, s.mode),
        revision = s.revision + 1,
        updated_at = now()
    RETURNING paused, mode, revision
), recorded AS (
    INSERT INTO evc_state_changes (consumer, change, mode, changed_by, reason)
    VALUES ($1, $5, $3, $6, $7)
)
SELECT paused, mode, revision FROM changed";

/// Heartbeats: parallel arrays `$1` owners, `$2` consumers and `$3` dispatcher overrides
/// (comma-separated setting names, empty: none) seen now; `$4` where the payload policy came
/// from (`registry`, `override`).
pub(crate) const HEARTBEAT: &str = "\
INSERT INTO evc_heartbeats (owner, consumer, seen_at, payload_policy, dispatcher_overrides)
SELECT owner, consumer, now(), $4, string_to_array(overrides, ',')
FROM UNNEST($1::text[], $2::text[], $3::text[]) AS h (owner, consumer, overrides)
ON CONFLICT (owner) DO UPDATE SET consumer = EXCLUDED.consumer, seen_at = EXCLUDED.seen_at,
    payload_policy = EXCLUDED.payload_policy,
    dispatcher_overrides = EXCLUDED.dispatcher_overrides";

/// The live workers of consumers `$1` (`text[]`), by consumer and owner: where each one's
/// settings came from (NULL: a process older than the seventh runtime step).
pub(crate) const WORKER_SETTINGS: &str = "\
SELECT owner, consumer, payload_policy, dispatcher_overrides
FROM evc_heartbeats WHERE consumer = ANY($1)
ORDER BY consumer, owner";

// ---------------------------------------------------------------------------------------------
// Observation (read only): status, lag, silent workers, the trace timeline.
// ---------------------------------------------------------------------------------------------

/// Per consumer of `$1` (`text[]`): deliveries pending, leased, dead and quarantined (each
/// counted through the partial index of its status), the age in seconds of the oldest pending
/// delivery, and the operator state (paused, mode override; NULL mode: the contract's).
pub(crate) const STATUS_COUNTS: &str = "\
SELECT c.consumer,
    (SELECT count(*) FROM evc_deliveries d
        WHERE d.consumer = c.consumer AND d.status = 'pending') AS pending,
    (SELECT count(*) FROM evc_deliveries d
        WHERE d.consumer = c.consumer AND d.status = 'leased') AS leased,
    (SELECT count(*) FROM evc_deliveries d
        WHERE d.consumer = c.consumer AND d.status = 'dead') AS dead,
    (SELECT count(*) FROM evc_deliveries d
        WHERE d.consumer = c.consumer AND d.status = 'quarantined') AS quarantined,
    (SELECT extract(epoch FROM now() - d.created_at)::float8 FROM evc_deliveries d
        WHERE d.consumer = c.consumer AND d.status = 'pending'
        ORDER BY d.event_seq LIMIT 1) AS oldest_pending_s,
    coalesce(s.paused, false) OR EXISTS (
        SELECT 1 FROM evc_tenant_pauses p
        WHERE p.consumer = c.consumer AND p.tenant_scope = current_setting('evc.tenant', true)
    ) AS paused, s.mode AS mode,
    coalesce(r.rejected, 0) AS stale_rejections
FROM UNNEST($1::text[]) AS c (consumer)
LEFT JOIN evc_consumer_state s ON s.consumer = c.consumer
LEFT JOIN evc_stale_rejections r ON r.consumer = c.consumer
ORDER BY c.consumer";

/// How many deliveries of the consumers in `$1` (`text[]`) are open: pending (due or not) or
/// leased. Acked deliveries are deleted, and dead, quarantined and discarded ones wait for an
/// operator, so none of those counts.
pub(crate) const OPEN_DELIVERIES: &str = "\
SELECT count(*) FROM evc_deliveries WHERE consumer = ANY($1) AND status IN ('pending', 'leased')";

/// Produce-to-ack lag per producer class and consumer: over the newest `$2` attempt rows and
/// the newest `$2` acked attempts of the batch rows (each table's primary key, read
/// backwards), those acked in the last `$1` milliseconds; seconds from the event's
/// `produced_at` to the ack, as p50, p95 and p99.
pub(crate) const LAG: &str = "\
WITH a AS (
    SELECT r.event_id, r.consumer, r.finished_at FROM (
        SELECT event_id, consumer, outcome, finished_at FROM evc_delivery_attempts
        ORDER BY id DESC LIMIT $2
    ) AS r
    WHERE r.outcome = 'acked'
    UNION ALL
    (SELECT u.event_id, b.consumer, b.finished_at
    FROM (
        SELECT id, consumer, finished_at, event_ids FROM evc_acked_batches
        ORDER BY id DESC LIMIT $2
    ) AS b
    CROSS JOIN LATERAL unnest(b.event_ids) AS u (event_id)
    ORDER BY b.id DESC
    LIMIT $2)
)
SELECT e.producer_class, a.consumer, count(*) AS samples,
    percentile_cont(ARRAY[0.5, 0.95, 0.99]::float8[]) WITHIN GROUP (
        ORDER BY extract(epoch FROM a.finished_at - e.produced_at)::float8) AS seconds
FROM a JOIN evc_events e ON e.event_id = a.event_id
WHERE a.finished_at >= now() - $1::int8 * interval '1 millisecond'
GROUP BY e.producer_class, a.consumer
ORDER BY e.producer_class, a.consumer";

/// Attempt duration per consumer, over the same sample as [`LAG`] (every outcome): seconds as
/// p50, p95 and p99.
pub(crate) const ATTEMPT_LATENCY: &str = "\
WITH a AS (
    SELECT r.consumer, r.duration_ms, r.finished_at FROM (
        SELECT consumer, duration_ms, finished_at FROM evc_delivery_attempts
        ORDER BY id DESC LIMIT $2
    ) AS r
    UNION ALL
    (SELECT b.consumer, floor(extract(epoch FROM b.finished_at - u.started_at) * 1000)::int8,
        b.finished_at
    FROM (
        SELECT id, consumer, finished_at, started_at FROM evc_acked_batches
        ORDER BY id DESC LIMIT $2
    ) AS b
    CROSS JOIN LATERAL unnest(b.started_at) AS u (started_at)
    ORDER BY b.id DESC
    LIMIT $2)
)
SELECT a.consumer, count(*) AS samples,
    percentile_cont(ARRAY[0.5, 0.95, 0.99]::float8[]) WITHIN GROUP (
        ORDER BY a.duration_ms / 1000.0::float8) AS seconds
FROM a
WHERE a.finished_at >= now() - $1::int8 * interval '1 millisecond'
GROUP BY a.consumer
ORDER BY a.consumer";

/// Appends refused in the last `$1` milliseconds, by event type and reason, over the newest
/// `$2` reject rows.
pub(crate) const RECENT_REJECTS: &str = "\
WITH r AS (
    SELECT event_type, reason_code, rejected_at FROM evc_validation_rejects
    ORDER BY id DESC LIMIT $2
)
SELECT event_type, reason_code, count(*)::int8 AS rejects,
    extract(epoch FROM max(rejected_at))::float8 AS newest
FROM r
WHERE rejected_at >= now() - $1::int8 * interval '1 millisecond'
GROUP BY event_type, reason_code
ORDER BY event_type, reason_code";

/// Every attempt ever recorded of the consumers `$1` that ended one of the known ways, counted per
/// consumer, outcome and duration bucket: `bucket` indexes `AttemptTotals::durations`, from
/// the bounds of `DURATION_BUCKETS_MS`. Reads the whole table.
pub(crate) static ATTEMPT_TOTALS: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "SELECT consumer, outcome, {}::int8 AS bucket,
    count(*)::int8 AS attempts, sum(duration_ms)::int8 AS duration_ms
FROM (
    SELECT consumer, outcome, duration_ms FROM evc_delivery_attempts
    WHERE consumer = ANY($1::text[]) AND outcome IN ({})
    UNION ALL
    SELECT b.consumer, 'acked',
        floor(extract(epoch FROM b.finished_at - u.started_at) * 1000)::int8
    FROM evc_acked_batches b CROSS JOIN LATERAL unnest(b.started_at) AS u (started_at)
    WHERE b.consumer = ANY($1::text[])
) AS a
GROUP BY consumer, outcome, bucket",
        crate::store::observe::duration_bucket("duration_ms"),
        crate::store::observe::known_outcomes(),
    )
});

/// Workers silent for longer than their consumer's heartbeat threshold: parallel arrays `$1`
/// consumers and `$2` thresholds in milliseconds. Longest silent first.
pub(crate) const SILENT_WORKERS: &str = "\
SELECT h.owner, h.consumer, extract(epoch FROM now() - h.seen_at)::float8 AS silent_s,
    t.threshold_ms
FROM evc_heartbeats h
JOIN UNNEST($1::text[], $2::int8[]) AS t (consumer, threshold_ms) ON t.consumer = h.consumer
WHERE h.seen_at < now() - t.threshold_ms * interval '1 millisecond'
ORDER BY h.seen_at, h.owner";

/// The consumers the database's registry mirror lists for the registry digest it is on (the
/// deployed contracts): name, declared mode and heartbeat threshold.
pub(crate) const DEPLOYED_CONSUMERS: &str = "\
SELECT c.name, c.mode, c.heartbeat_threshold_ms
FROM evc_consumers c JOIN evc_registry_state r ON r.digest = c.registry_digest
ORDER BY c.name";

/// The deployed (current-digest) event types, by name.
pub(crate) const DEPLOYED_EVENT_TYPES: &str = "\
SELECT t.name, t.description, t.producer_class, t.order_key, t.status,
    t.max_payload_bytes::int8 AS max_payload_bytes
FROM evc_event_types t JOIN evc_registry_state r ON r.digest = t.registry_digest
ORDER BY t.name";

/// The deployed event versions with their schemas, ascending per type.
pub(crate) const DEPLOYED_VERSIONS: &str = "\
SELECT v.event_type, v.version, v.major, v.schema::text AS schema, v.schema_digest
FROM evc_event_versions v JOIN evc_registry_state r ON r.digest = v.registry_digest
ORDER BY v.event_type, v.major, v.minor, v.patch";

/// The deployed consumers, by name.
pub(crate) const DEPLOYED_CONSUMER_ROWS: &str = "\
SELECT c.name, c.handler, c.ordering, c.mode, c.retry_policy, c.heartbeat_threshold_ms
FROM evc_consumers c JOIN evc_registry_state r ON r.digest = c.registry_digest
ORDER BY c.name";

/// The deployed subscriptions.
pub(crate) const DEPLOYED_SUBSCRIPTIONS: &str = "\
SELECT s.consumer, s.event_type, s.requirement
FROM evc_subscriptions s JOIN evc_registry_state r ON r.digest = s.registry_digest
ORDER BY s.consumer, s.event_type";

/// The deployed retry policies, by name.
pub(crate) const DEPLOYED_RETRY_POLICIES: &str = "\
SELECT p.name, p.kind, p.base_delay_ms, p.max_delay_ms, p.max_attempts::int8 AS max_attempts,
    p.jitter, p.retry_on
FROM evc_retry_policies p JOIN evc_registry_state r ON r.digest = p.registry_digest
ORDER BY p.name";

/// Whether the database has the settings table (the seventh runtime step).
pub(crate) const HAS_SETTINGS: &str = "SELECT to_regclass('evc_settings') IS NOT NULL";

/// Whether the database mirrors executor classes (the twenty-second runtime step).
pub(crate) const HAS_EXECUTOR_CLASSES: &str =
    "SELECT to_regclass('evc_executor_classes') IS NOT NULL";

/// The deployed executor classes.
pub(crate) const DEPLOYED_EXECUTOR_CLASSES: &str = "\
SELECT x.name, x.mutating, x.idempotency_namespace, x.heartbeat_owner, x.active
FROM evc_executor_classes x JOIN evc_registry_state r ON r.digest = x.registry_digest
ORDER BY x.name";

/// Each deployed consumer that runs on a deployed executor class: the class and its
/// heartbeat owner.
pub(crate) const DEPLOYED_CLASS_OWNERS: &str = "\
SELECT c.name AS consumer, x.name AS executor_class, x.heartbeat_owner
FROM evc_consumers c
JOIN evc_registry_state r ON r.digest = c.registry_digest
JOIN evc_executor_classes x ON x.name = c.executor_class AND x.registry_digest = r.digest
ORDER BY c.name";

/// The class each deployed consumer runs on, where it names one.
pub(crate) const DEPLOYED_CONSUMER_CLASSES: &str = "\
SELECT c.name, c.executor_class
FROM evc_consumers c JOIN evc_registry_state r ON r.digest = c.registry_digest
WHERE c.executor_class IS NOT NULL";

/// The deployed runtime settings (no row: no settings migration was applied).
pub(crate) const DEPLOYED_SETTINGS: &str = "\
SELECT denied_keys, credential_key_names, default_max_bytes, hard_max_bytes,
    require_tenant_scope, batch_size, lease_ms, heartbeat_ms, max_attempts, backoff_ceiling_ms,
    handler_timeouts::text AS handler_timeouts
FROM evc_settings";

/// Forgets the heartbeats of owners `$1` (a dispatcher that shut down is not silent).
pub(crate) const FORGET_HEARTBEATS: &str = "DELETE FROM evc_heartbeats WHERE owner = ANY($1)";

// ---------------------------------------------------------------------------------------------
// Replay (docs/runtime.md, "Replay"). A replay supersedes settled deliveries with a next
// generation; served by evc_deliveries_settled_idx.
// ---------------------------------------------------------------------------------------------

/// The settled deliveries of consumer `$1` a replay would take (and `evc dlq list` lists):
/// status in `$2` (`dead`, `quarantined`), event type `$3` (NULL: any), event ids `$4` (empty:
/// any), oldest first, at most `$5`; each with its event's type and version and the requirement
/// under which the deployed registry subscribes the consumer to that type (NULL: no longer
/// subscribed).
macro_rules! settled_deliveries {
    () => {
        "SELECT d.event_id, d.consumer, d.generation, d.status, d.attempt, d.last_error_code,
    extract(epoch FROM d.updated_at)::float8 AS settled_at, e.event_type, e.schema_version,
    s.requirement
FROM evc_deliveries d
JOIN evc_events e ON e.event_id = d.event_id
LEFT JOIN evc_subscriptions s ON s.consumer = d.consumer AND s.event_type = e.event_type
    AND s.registry_digest = (SELECT digest FROM evc_registry_state)
WHERE d.consumer = $1 AND d.status IN ('dead', 'quarantined') AND d.status = ANY($2::text[])
    AND ($3::text IS NULL OR e.event_type = $3)
    AND (cardinality($4::uuid[]) = 0 OR d.event_id = ANY($4::uuid[]))
ORDER BY d.event_seq, d.generation
LIMIT $5"
    };
}

/// [`settled_deliveries!`], read only.
pub(crate) const SETTLED_DELIVERIES: &str = settled_deliveries!();

/// [`settled_deliveries!`], row-locked for the rest of the replay's transaction.
pub(crate) const SETTLED_DELIVERIES_LOCKED: &str =
    concat!(settled_deliveries!(), "\nFOR UPDATE OF d");

/// The payload of each event in `$1` (`uuid[]`) with the schema of its version in the deployed
/// registry (NULL: that version is not deployed), for replay's re-validation.
pub(crate) const REPLAY_PAYLOADS: &str = "\
SELECT e.event_id, e.payload::text AS payload, v.schema::text AS schema
FROM evc_events e
LEFT JOIN evc_event_versions v ON v.event_type = e.event_type AND v.version = e.schema_version
    AND v.registry_digest = (SELECT digest FROM evc_registry_state)
WHERE e.event_id = ANY($1::uuid[])";

/// The events of types `$1` (`text[]`) of which consumer `$2` has neither a delivery nor an
/// attempt (an ack deletes the delivery and keeps its attempt, in a batch row) and that no
/// applied inventory expired, oldest first, at most `$3`: an inventory's candidates (row-level
/// security keeps a tenant's session to its events).
///
/// The events come through a sub-select kept whole (`OFFSET 0`) that gives each its bucket as
/// a column: compared with a column, the batch rows' lookup applies no function but `=`, so
/// PostgreSQL searches their index with it under row-level security too (as in [`TIMELINE`]).
pub(crate) const INVENTORY_CANDIDATES: &str = "\
SELECT e.event_id::text AS event_id, e.event_type, e.schema_version, e.tenant_scope,
    extract(epoch FROM e.produced_at)::float8 AS produced_at, e.payload::text AS payload
FROM (
    SELECT event_id, event_type, schema_version, tenant_scope, produced_at, payload, seq,
        seq / 256 AS seq_bucket
    FROM evc_events
    WHERE event_type = ANY($1::text[])
    OFFSET 0
) AS e
WHERE NOT EXISTS (
        SELECT 1 FROM evc_deliveries d WHERE d.event_id = e.event_id AND d.consumer = $2)
    AND NOT EXISTS (
        SELECT 1 FROM evc_delivery_attempts a WHERE a.event_id = e.event_id AND a.consumer = $2)
    AND NOT EXISTS (
        SELECT 1 FROM evc_acked_batches b
        WHERE b.seq_bucket = e.seq_bucket AND b.consumer = $2 AND e.event_id = ANY (b.event_ids))
    AND NOT EXISTS (
        SELECT 1 FROM evc_inventory_items i
        WHERE i.event_id = e.event_id AND i.consumer = $2 AND i.class = 'expire')
ORDER BY e.seq
LIMIT $3";

/// Serializes the inventory applies of consumer `$1` (transaction-scoped): a second apply
/// takes its inventory again after the first committed, and finds its deliveries.
pub(crate) const LOCK_INVENTORY: &str =
    "SELECT pg_advisory_xact_lock(hashtextextended('evc-inventory:' || $1, 7267))";

/// The inventory of consumer `$1` applied under idempotency key `$2` in the session's tenant
/// scope (every tenant's: `*`), if any.
pub(crate) const INVENTORY_BY_KEY: &str = concat!(
    "\
SELECT id, plan_digest, reason, approval_ref, approved_by, counts::text AS counts
FROM evc_inventories WHERE consumer = $1 AND idempotency_key = $2 AND ",
    session_scope!()
);

/// The recorded inventory plans of consumer `$1` and digest `$2`: id, planner and whether an
/// inventory applied it, oldest first.
pub(crate) const INVENTORY_PLANS_OF: &str = "\
SELECT p.id, p.planned_by,
    EXISTS (SELECT 1 FROM evc_inventories i WHERE i.plan_id = p.id) AS applied
FROM evc_plans p
WHERE p.kind = 'inventory' AND p.consumer = $1 AND p.plan_digest = $2
ORDER BY p.id";

/// The operator's mode override of consumer `$1`, if an operator set one.
pub(crate) const MODE_OVERRIDE: &str = "SELECT mode FROM evc_consumer_state WHERE consumer = $1";

/// Records an inventory as applied: `$1` consumer, `$2` the recorded plan, `$3` its digest,
/// `$4` reason, `$5` approval reference, `$6` idempotency key, `$7` approver, `$8` counts
/// (JSON). Returns its id.
pub(crate) const INSERT_INVENTORY: &str = "\
INSERT INTO evc_inventories (consumer, plan_id, plan_digest, reason, approval_ref,
    idempotency_key, approved_by, counts)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8::jsonb)
RETURNING id";

/// Records inventory `$1`'s items for consumer `$2`: parallel arrays `$3` event ids, `$4`
/// classes, `$5` reasons, `$6` target versions, `$7` payload digests, `$8` repaired digests;
/// each item in its event's tenant.
pub(crate) const INSERT_INVENTORY_ITEMS: &str = "\
INSERT INTO evc_inventory_items (inventory_id, event_id, consumer, class, reason,
    target_version, payload_digest, repaired_digest, tenant_scope)
SELECT $1, e.event_id, $2, i.class, i.reason, i.target_version, i.payload_digest,
    i.repaired_digest, e.tenant_scope
FROM UNNEST($3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[])
    AS i (event_id, class, reason, target_version, payload_digest, repaired_digest)
JOIN evc_events e ON e.event_id = i.event_id::uuid";

/// A pending delivery to consumer `$1` of each event in `$2` (`uuid[]`), with its order key
/// when `$3` (the consumer orders per key), due now, as an append writes them.
pub(crate) const DELIVER_INVENTORY: &str = "\
INSERT INTO evc_deliveries (event_id, consumer, event_seq, order_key, tenant_scope)
SELECT e.event_id, $1, e.seq, CASE WHEN $3 THEN e.order_key END, e.tenant_scope
FROM evc_events e WHERE e.event_id = ANY($2::uuid[])";

/// Quarantines the pending deliveries [`DELIVER_INVENTORY`] wrote to consumer `$1` of the
/// events in `$2` (`uuid[]`): they wait for an operator's replay or discard.
pub(crate) const QUARANTINE_INVENTORY: &str = "\
UPDATE evc_deliveries SET status = 'quarantined', updated_at = now()
WHERE consumer = $1 AND event_id = ANY($2::uuid[]) AND generation = 0 AND status = 'pending'";

/// The newest time a retention purge counted back from (epoch seconds; NULL: none ran).
pub(crate) const RETENTION_PURGED_THROUGH: &str = "\
SELECT extract(epoch FROM max(cutoff))::float8 FROM evc_purges WHERE ledger = 'retention'";

/// Serializes replays that present idempotency key `$1`, for any consumer (transaction-scoped).
pub(crate) const LOCK_REPLAY_KEY: &str = "SELECT pg_advisory_xact_lock(hashtextextended($1, 7266))";

/// The oldest `$1` replays, oldest first, with their plans' planners; times in epoch seconds.
pub(crate) const READ_REPLAYS: &str = "\
SELECT r.id, r.plan_digest, r.reason, r.approval_ref, r.idempotency_key, r.deliveries,
    extract(epoch FROM coalesce(r.applied_at, r.requested_at))::float8 AS applied_at,
    r.plan_id, p.planned_by, r.approved_by
FROM evc_replays r LEFT JOIN evc_plans p ON p.id = r.plan_id
ORDER BY r.id LIMIT $1";

/// The items of the replays `$1` (`bigint[]`), by replay and event id.
pub(crate) const READ_REPLAY_ITEMS: &str = "\
SELECT replay_id, event_id, consumer, generation, replayed_from, schema_version
FROM evc_replay_items WHERE replay_id = ANY($1::bigint[])
ORDER BY replay_id, event_id, consumer";

/// The oldest `$1` discards, oldest first, with their plans' planners; times in epoch seconds.
pub(crate) const READ_DISCARDS: &str = "\
SELECT x.id, x.consumer, x.plan_digest, x.reason, x.approval_ref, x.idempotency_key, x.db_role,
    extract(epoch FROM x.discarded_at)::float8 AS discarded_at, x.deliveries,
    x.items::text AS items, x.plan_id, p.planned_by, x.approved_by
FROM evc_discards x LEFT JOIN evc_plans p ON p.id = x.plan_id
ORDER BY x.id LIMIT $1";

/// Records a proposed plan: `$1` kind (`replay`, `discard`), `$2` consumer, `$3` digest, `$4`
/// deliveries, `$5` planner. Returns its id.
pub(crate) const INSERT_PLAN: &str = "\
INSERT INTO evc_plans (kind, consumer, plan_digest, deliveries, planned_by)
VALUES ($1, $2, $3, $4, $5)
RETURNING id";

/// The recorded plans of kind `$1`, consumer `$2` and digest `$3`: id, planner and whether
/// a replay or discard applied it, oldest first.
pub(crate) const PLANS_OF: &str = "\
SELECT p.id, p.planned_by,
    EXISTS (SELECT 1 FROM evc_replays r WHERE r.plan_id = p.id)
        OR EXISTS (SELECT 1 FROM evc_discards d WHERE d.plan_id = p.id) AS applied
FROM evc_plans p
WHERE p.kind = $1 AND p.consumer = $2 AND p.plan_digest = $3
ORDER BY p.id";

/// The replay of consumer `$2` recorded under idempotency key `$1` in the session's tenant
/// scope, if any (the key is unique per consumer and scope: `session_scope!`).
pub(crate) const REPLAY_BY_KEY: &str = concat!(
    "\
SELECT id, plan_digest, reason, approval_ref, approved_by, deliveries FROM evc_replays
WHERE idempotency_key = $1 AND consumer = $2 AND ",
    session_scope!()
);

/// Records a replay as applied: `$1` plan digest, `$2` reason, `$3` approval reference, `$4`
/// idempotency key, `$5` deliveries, `$6` consumer, `$7` the recorded plan, `$8` the approver.
/// Returns its id.
pub(crate) const INSERT_REPLAY: &str = "\
INSERT INTO evc_replays (plan_digest, reason, approval_ref, idempotency_key, applied_at, counts,
    deliveries, consumer, plan_id, approved_by)
VALUES ($1, $2, $3, $4, now(), jsonb_build_object('planned', $5::int4, 'replayed', $5::int4), $5,
    $6, $7, $8)
RETURNING id";

/// Records what replay `$1` re-delivers: one `evc_replay_items` row per settled delivery of
/// consumer `$2` named by parallel arrays `$3` event ids and `$4` generations (locked by
/// [`SETTLED_DELIVERIES_LOCKED`]), with the status it leaves and its event's version. Runs before
/// [`APPLY_REPLAY`], whose status change the database admits only for a delivery with an item of
/// a replay of this transaction (docs/runtime.md, "Settled deliveries").
pub(crate) const RECORD_REPLAY_ITEMS: &str = "\
INSERT INTO evc_replay_items (replay_id, event_id, consumer, generation, replayed_from,
    schema_version)
SELECT $1, d.event_id, d.consumer, d.generation, d.status, e.schema_version
FROM evc_deliveries d
JOIN UNNEST($3::uuid[], $4::int4[]) AS r (event_id, generation)
    ON d.event_id = r.event_id AND d.generation = r.generation
JOIN evc_events e ON e.event_id = d.event_id
WHERE d.consumer = $2 AND d.status IN ('dead', 'quarantined')";

/// Applies replay `$1` to consumer `$2`'s settled deliveries named by parallel arrays `$3`
/// event ids and `$4` generations (locked by [`SETTLED_DELIVERIES_LOCKED`], their items
/// recorded by [`RECORD_REPLAY_ITEMS`]): each original becomes `replayed`, and a next
/// generation is written `pending`, due now, with no attempt counted, the original's fencing
/// token (so no token of the original is ever current again) and the replay's id. Returns the
/// number of new deliveries.
pub(crate) const APPLY_REPLAY: &str = "\
WITH p AS (
    SELECT d.ctid, d.event_id, d.consumer, d.generation, d.status, d.event_seq, d.order_key,
        d.fencing_token, d.tenant_scope
    FROM evc_deliveries d
    JOIN UNNEST($3::uuid[], $4::int4[]) AS r (event_id, generation)
        ON d.event_id = r.event_id AND d.generation = r.generation
    WHERE d.consumer = $2 AND d.status IN ('dead', 'quarantined')
), o AS (
    UPDATE evc_deliveries d SET status = 'replayed', updated_at = now()
    FROM p WHERE d.ctid = p.ctid
    RETURNING 1
), n AS (
    INSERT INTO evc_deliveries (event_id, consumer, generation, event_seq, order_key, status,
        attempt, next_attempt_at, fencing_token, replay_id, tenant_scope)
    SELECT p.event_id, p.consumer, p.generation + 1, p.event_seq, p.order_key, 'pending', 0,
        now(), p.fencing_token, $1, p.tenant_scope
    FROM p
    RETURNING 1
)
SELECT (SELECT count(*) FROM n) AS created, (SELECT count(*) FROM o) AS superseded";

/// Serializes discards that present idempotency key `$1` (transaction-scoped; apart from
/// replays' keys).
pub(crate) const LOCK_DISCARD_KEY: &str =
    "SELECT pg_advisory_xact_lock(hashtextextended($1, 7267))";

/// The discard of consumer `$2` recorded under idempotency key `$1` in the session's tenant
/// scope, if any ([`REPLAY_BY_KEY`]).
pub(crate) const DISCARD_BY_KEY: &str = concat!(
    "\
SELECT id, plan_digest, reason, approval_ref, approved_by, items::text AS items
FROM evc_discards WHERE idempotency_key = $1 AND consumer = $2 AND ",
    session_scope!()
);

/// Discards consumer `$1`'s settled deliveries named by parallel arrays `$6` event ids and `$7`
/// generations (locked by [`SETTLED_DELIVERIES_LOCKED`]), under plan digest `$2`, reason `$3`,
/// approval reference `$4`, idempotency key `$5`, recorded plan `$8` and approver `$9`: one
/// `evc_discards` row lists them (event, generation, the status each left, type and version,
/// in array order), and each becomes `discarded` with the discard's id, its row kept. Returns the discard's id, its items, the
/// database role that applied it and when (RFC 3339, UTC).
pub(crate) const APPLY_DISCARD: &str = "\
WITH p AS (
    SELECT d.ctid, d.event_id, d.generation, d.status, e.event_type, e.schema_version, r.ord
    FROM evc_deliveries d
    JOIN UNNEST($6::uuid[], $7::int4[]) WITH ORDINALITY AS r (event_id, generation, ord)
        ON d.event_id = r.event_id AND d.generation = r.generation
    JOIN evc_events e ON e.event_id = d.event_id
    WHERE d.consumer = $1 AND d.status IN ('dead', 'quarantined')
), a AS (
    INSERT INTO evc_discards (consumer, plan_digest, reason, approval_ref, idempotency_key,
        deliveries, items, plan_id, approved_by)
    SELECT $1, $2, $3, $4, $5, count(*)::int4,
        coalesce(jsonb_agg(jsonb_build_object('event_id', p.event_id,
            'generation', p.generation, 'status', p.status, 'event_type', p.event_type,
            'version', p.schema_version) ORDER BY p.ord), '[]'::jsonb),
        $8, $9
    FROM p
    RETURNING id, items, db_role, discarded_at
), u AS (
    UPDATE evc_deliveries d SET status = 'discarded', discard_id = a.id, updated_at = now()
    FROM p, a WHERE d.ctid = p.ctid
    RETURNING 1
)
SELECT a.id, a.items::text AS items, a.db_role,
    to_char(a.discarded_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')
        AS discarded_at,
    (SELECT count(*) FROM u) AS discarded
FROM a";

// ---------------------------------------------------------------------------------------------
// Shadow mode and stale-token counts (docs/runtime.md, "Modes").
// ---------------------------------------------------------------------------------------------

/// Records what a shadow-mode handler meant to do, fenced like [`RECORD_EFFECT`]: consumer
/// `$1`, event `$2`, token `$3`, intended effects `$4` (a JSON array). `$5`: the lease is held
/// (the delivery is still `pending` with the token below `$3`, row-locked by the caller's
/// transaction) rather than leased. One row per delivery generation; a rerun after a lost ack
/// keeps the first. Returns `leased` (0: stale token).
pub(crate) const RECORD_RECONCILIATION: &str = "\
WITH l AS (
    SELECT generation FROM evc_deliveries
    WHERE event_id = $2 AND consumer = $1
        AND CASE WHEN $5 THEN fencing_token = $3 - 1 AND status = 'pending'
            ELSE fencing_token = $3 AND status = 'leased' END
    FOR UPDATE
), i AS (
    INSERT INTO evc_reconciliations (consumer, event_id, generation, fencing_token, intended)
    SELECT $1, $2, l.generation, $3, $4::jsonb FROM l
    ON CONFLICT (consumer, event_id, generation) DO NOTHING
    RETURNING 1
)
SELECT (SELECT count(*) FROM l) AS leased";

/// Opens the shadow-mode handler's savepoint (its writes are rolled back to it).
pub(crate) const SHADOW_SAVEPOINT: &str = "SAVEPOINT evc_shadow";

/// Undoes everything a shadow-mode handler wrote on the transaction.
pub(crate) const SHADOW_ROLLBACK: &str = "ROLLBACK TO SAVEPOINT evc_shadow";

/// Whether consumer `$1` has an effect row under key `$2` in the tenant of its delivery of
/// event `$3` (a shadow-mode handler is told, as a live one would be, whether the effect was
/// recorded before; the tenant is read where [`RECORD_EFFECT`] reads it).
pub(crate) const EFFECT_RECORDED: &str = "\
SELECT EXISTS (
    SELECT 1 FROM evc_consumer_effects
    WHERE consumer = $1 AND effect_key = $2 AND coalesce(tenant_scope, '*') = coalesce(
        (SELECT tenant_scope FROM evc_deliveries WHERE event_id = $3 AND consumer = $1
         ORDER BY generation DESC LIMIT 1), '*')
)";

/// [`EFFECT_RECORDED`] for a consumer on an executor class: by the consumer or by any consumer
/// of its idempotency namespace `$4`.
pub(crate) const EFFECT_RECORDED_IN_NAMESPACE: &str = "\
SELECT EXISTS (
    SELECT 1 FROM evc_consumer_effects
    WHERE (consumer = $1 OR idempotency_namespace = $4)
        AND effect_key = $2 AND coalesce(tenant_scope, '*') = coalesce(
        (SELECT tenant_scope FROM evc_deliveries WHERE event_id = $3 AND consumer = $1
         ORDER BY generation DESC LIMIT 1), '*')
)";

/// Counts `$2` stale-token refusals for consumer `$1`, for every process to see.
pub(crate) const COUNT_STALE: &str = "\
INSERT INTO evc_stale_rejections AS r (consumer, rejected) VALUES ($1, $2)
ON CONFLICT (consumer) DO UPDATE SET rejected = r.rejected + EXCLUDED.rejected, last_at = now()";

/// Up to `$3` events of the feed after position (`$1` writer, `$2` seq), in feed order: only
/// rows whose writing transaction is older than every transaction still open, ordered by that
/// transaction and then `seq` (through `evc_events_feed_idx`); `produced_at` in epoch seconds.
pub(crate) const FEED: &str = "\
SELECT coalesce(writer_xid, '0'::xid8)::text::bigint AS writer, seq, event_id, event_type,
    schema_version, order_key, producer_class, tenant_scope, trace_id, correlation_id,
    causation_id, extract(epoch FROM produced_at)::float8 AS produced_at,
    payload::text AS payload
FROM evc_events
WHERE (coalesce(writer_xid, '0'::xid8), seq) > ($1::bigint::text::xid8, $2)
    AND coalesce(writer_xid, '0'::xid8) < pg_snapshot_xmin(pg_current_snapshot())
ORDER BY coalesce(writer_xid, '0'::xid8), seq
LIMIT $3";

/// The payload of event `$1`, as text.
pub(crate) const READ_PAYLOAD: &str = "SELECT payload::text FROM evc_events WHERE event_id = $1";

/// The position of the newest event [`FEED`] would return now (no row: none).
pub(crate) const FEED_HEAD: &str = "\
SELECT coalesce(writer_xid, '0'::xid8)::text::bigint AS writer, seq
FROM evc_events
WHERE coalesce(writer_xid, '0'::xid8) < pg_snapshot_xmin(pg_current_snapshot())
ORDER BY coalesce(writer_xid, '0'::xid8) DESC, seq DESC
LIMIT 1";

/// The deliveries of consumer `$1` leased now, in event order (through the lease index);
/// `lease_until` in epoch seconds.
pub(crate) const LEASES: &str = "\
SELECT event_id, generation, event_seq, order_key, lease_owner, fencing_token, attempt,
    extract(epoch FROM lease_until)::float8 AS lease_until
FROM evc_deliveries WHERE consumer = $1 AND status = 'leased'
ORDER BY event_seq, generation";

/// Everything recorded for trace `$1`, in order: its events (when produced), their delivery
/// rows (when created; detail: the current status, and the generation and replay of a replayed
/// one; an acked delivery has no row, its `acked` attempt is its entry), their attempts (when
/// finished; detail: the outcome and error code; acked ones from their batch rows), the replays that superseded their deliveries
/// and the discards that settled them (when applied).
pub(crate) const TIMELINE: &str = "\
WITH e AS MATERIALIZED (
    -- The bucket as a column of its own: compared with a column, `b.seq_bucket = e.seq_bucket`
    -- applies no function but `=`, so PostgreSQL searches the batch rows' index with it under
    -- row-level security too (`e.seq / 256` in the join would not be leakproof).
    SELECT event_id, event_type, schema_version, produced_at, seq, seq / 256 AS seq_bucket
    FROM evc_events
    WHERE trace_id = $1
)
SELECT extract(epoch FROM t.at)::float8 AS at, t.kind, t.event_id, t.consumer, t.detail,
    t.attempt
FROM (
    SELECT e.produced_at AS at, 0 AS rank, e.seq, 'event' AS kind, e.event_id,
        NULL::text AS consumer, e.event_type || ' ' || e.schema_version AS detail,
        NULL::int4 AS attempt
    FROM e
    UNION ALL
    SELECT d.created_at, 1, e.seq, 'delivery', d.event_id, d.consumer,
        d.status || CASE WHEN d.generation > 0
            THEN ' (generation ' || d.generation || ', replay ' || d.replay_id || ')' ELSE '' END,
        d.attempt
    FROM e JOIN evc_deliveries d ON d.event_id = e.event_id
    UNION ALL
    SELECT a.finished_at, 2, e.seq, 'attempt', a.event_id, a.consumer,
        a.outcome || coalesce(' (' || a.error_code || ')', '')
            || CASE WHEN a.generation > 0 THEN ' [generation ' || a.generation || ']' ELSE '' END,
        a.attempt
    FROM e JOIN evc_delivery_attempts a ON a.event_id = e.event_id
    UNION ALL
    SELECT b.finished_at, 2, e.seq, 'attempt', e.event_id, b.consumer,
        'acked' || CASE WHEN u.generation > 0
            THEN ' [generation ' || u.generation || ']' ELSE '' END,
        u.attempt
    FROM e JOIN evc_acked_batches b ON b.seq_bucket = e.seq_bucket
    CROSS JOIN LATERAL unnest(b.event_ids, b.generations, b.attempts)
        AS u (event_id, generation, attempt)
    WHERE u.event_id = e.event_id
    UNION ALL
    SELECT r.applied_at, 3, e.seq, 'replay', i.event_id, i.consumer,
        'replay ' || r.id || ' of generation ' || i.generation || ' from ' || i.replayed_from
            || ' (approval ' || r.approval_ref
            || coalesce(', proposed by ' || p.planned_by, '')
            || coalesce(', approved by ' || r.approved_by, '') || ')',
        NULL::int4
    FROM e JOIN evc_replay_items i ON i.event_id = e.event_id
    JOIN evc_replays r ON r.id = i.replay_id
    LEFT JOIN evc_plans p ON p.id = r.plan_id
    UNION ALL
    SELECT x.discarded_at, 3, e.seq, 'discard', d.event_id, d.consumer,
        'discard ' || x.id || ' of generation ' || d.generation
            || ' (approval ' || x.approval_ref
            || coalesce(', proposed by ' || p.planned_by, '')
            || coalesce(', approved by ' || x.approved_by, '') || ')',
        NULL::int4
    FROM e JOIN evc_deliveries d ON d.event_id = e.event_id AND d.discard_id IS NOT NULL
    JOIN evc_discards x ON x.id = d.discard_id
    LEFT JOIN evc_plans p ON p.id = x.plan_id
) AS t
ORDER BY t.at, t.rank, t.seq, t.consumer, t.attempt";

// ---------------------------------------------------------------------------------------------
// Retention (docs/runtime.md, "Append-only ledgers"): the purge functions of the fifth runtime
// step, the only way rows leave the append-only tables.
// ---------------------------------------------------------------------------------------------

/// Purges the events produced before `$1` (epoch seconds) whose deliveries are all settled,
/// with their rows in the other ledgers; `$2` reason, `$3` actor. One row: the audit row's id
/// and the counts removed.
pub(crate) const PURGE_EVENTS: &str = "\
SELECT purge_id, events, deliveries, attempts, reconciliations, replay_items
FROM evc_purge_events(to_timestamp($1::float8), $2, $3)";

/// Purges the rejects recorded before `$1` (epoch seconds); `$2` reason, `$3` actor.
pub(crate) const PURGE_REJECTS: &str = "\
SELECT purge_id, rejects FROM evc_purge_rejects(to_timestamp($1::float8), $2, $3)";

// ---------------------------------------------------------------------------------------------
// Reads shared with the SQLite store (`PgStore::delivery`, `attempts`, `count_deliveries`, ...):
// tests and tools read a delivery's state without SQL of their own.
// ---------------------------------------------------------------------------------------------

/// Delivery rows of delivery `$1` of consumer `$2` in generation order (ascending unless a
/// suffix says otherwise); times in epoch seconds.
macro_rules! read_deliveries {
    () => {
        "\
SELECT generation, status, attempt, fencing_token, lease_owner,
    extract(epoch FROM lease_until)::float8 AS lease_until,
    extract(epoch FROM next_attempt_at)::float8 AS next_attempt_at, last_error_code,
    replay_id, discard_id
FROM evc_deliveries WHERE event_id = $1 AND consumer = $2
ORDER BY generation"
    };
}

/// The newest generation of delivery `$1` of consumer `$2`; times in epoch seconds.
pub(crate) const READ_DELIVERY: &str = concat!(read_deliveries!(), " DESC LIMIT 1");

/// Every generation of delivery `$1` of consumer `$2`, oldest first.
pub(crate) const READ_DELIVERIES: &str = read_deliveries!();

/// The attempts of delivery `$1` of consumer `$2` (every generation), in the order written
/// (generation, then attempt: an attempt of a delivery ends before the next begins), the
/// acked ones from their batch rows; times in epoch seconds.
pub(crate) const READ_ATTEMPTS: &str = "\
SELECT generation, attempt, owner, fencing_token, outcome, error_code,
    extract(epoch FROM started_at)::float8 AS started_at,
    extract(epoch FROM finished_at)::float8 AS finished_at, duration_ms
FROM (
    SELECT generation, attempt, owner, fencing_token, outcome, error_code, started_at,
        finished_at, duration_ms
    FROM evc_delivery_attempts WHERE event_id = $1 AND consumer = $2
    UNION ALL
    SELECT u.generation, u.attempt, b.owner, u.fencing_token, 'acked', NULL, u.started_at,
        b.finished_at, floor(extract(epoch FROM b.finished_at - u.started_at) * 1000)::int8
    FROM evc_acked_batches b
    CROSS JOIN LATERAL unnest(b.event_ids, b.generations, b.attempts, b.fencing_tokens,
        b.started_at) AS u (event_id, generation, attempt, fencing_token, started_at)
    WHERE b.seq_bucket = (SELECT e.seq / 256 FROM evc_events e WHERE e.event_id = $1)
        AND b.consumer = $2 AND u.event_id = $1
) AS a
ORDER BY generation, attempt, finished_at";

/// Deliveries of consumer `$1` whose status is in `$2` (`text[]`; empty: any status).
pub(crate) const COUNT_DELIVERIES: &str = "\
SELECT count(*) FROM evc_deliveries
WHERE consumer = $1 AND (cardinality($2::text[]) = 0 OR status = ANY($2::text[]))";

/// Attempts of consumer `$1` with outcome `$2` (`acked` ones counted in their batch rows).
pub(crate) const COUNT_ATTEMPTS: &str = "\
SELECT (SELECT count(*) FROM evc_delivery_attempts WHERE consumer = $1 AND outcome = $2)
    + CASE WHEN $2 = 'acked' THEN (
        SELECT coalesce(sum(cardinality(event_ids)), 0)::int8 FROM evc_acked_batches
        WHERE consumer = $1) ELSE 0 END";

/// Events in the outbox whose type is in `$1` (`text[]`; empty: any type).
pub(crate) const COUNT_EVENTS: &str = "\
SELECT count(*) FROM evc_events
WHERE cardinality($1::text[]) = 0 OR event_type = ANY($1::text[])";

/// The envelope of event `$1` (never its payload).
pub(crate) const READ_EVENT: &str = "\
SELECT seq, event_type, schema_version, order_key, producer_class, tenant_scope,
    idempotency_key, trace_id, correlation_id, causation_id, payload_bytes::int8 AS payload_bytes
FROM evc_events WHERE event_id = $1";

/// The oldest `$1` reject rows; times in epoch seconds.
pub(crate) const READ_REJECTS: &str = "\
SELECT event_type, schema_version, reason_code, payload_digest,
    extract(epoch FROM rejected_at)::float8 AS rejected_at
FROM evc_validation_rejects ORDER BY id LIMIT $1";

/// Stale-token refusals counted for consumer `$1` (no row: none).
pub(crate) const READ_STALE_REJECTIONS: &str = "\
SELECT rejected FROM evc_stale_rejections WHERE consumer = $1";

/// The effect row of consumer `$1` under effect key `$2` in tenant `$3` (NULL: effects of
/// events without a tenant); time in epoch seconds.
pub(crate) const READ_EFFECT: &str = "\
SELECT event_id, outcome_digest, fencing_token,
    extract(epoch FROM created_at)::float8 AS created_at
FROM evc_consumer_effects
WHERE consumer = $1 AND effect_key = $2 AND coalesce(tenant_scope, '*') = coalesce($3, '*')";

/// The reconciliation rows of delivery `$1` of consumer `$2`, oldest generation first; the
/// intents as JSON text, the time in epoch seconds.
pub(crate) const READ_RECONCILIATIONS: &str = "\
SELECT generation, fencing_token, intended::text AS intended,
    extract(epoch FROM recorded_at)::float8 AS recorded_at
FROM evc_reconciliations WHERE event_id = $1 AND consumer = $2
ORDER BY generation";

// ---------------------------------------------------------------------------------------------
// Maintenance (`PgStore::analyze`, `PgStore::set_payload_cap`).
// ---------------------------------------------------------------------------------------------

/// Fresh planner statistics for the outbox, one statement each (`VACUUM` refuses to run in the
/// implicit transaction of a multi-statement string): deliveries vacuumed and analyzed, events
/// analyzed.
pub(crate) const ANALYZE_OUTBOX: [&str; 2] =
    ["VACUUM ANALYZE evc_deliveries", "ANALYZE evc_events"];

/// Switches the database-side payload cap off (the `evc_events_payload_cap` trigger).
pub(crate) const DISABLE_PAYLOAD_CAP: &str =
    "ALTER TABLE evc_events DISABLE TRIGGER evc_events_payload_cap";

/// Switches the database-side payload cap on again.
pub(crate) const ENABLE_PAYLOAD_CAP: &str =
    "ALTER TABLE evc_events ENABLE TRIGGER evc_events_payload_cap";

/// The consumers the session's login is scoped to (`text[]`), NULL when it is not scoped
/// (docs/runtime.md, "A dispatcher role per consumer").
pub(crate) const LOGIN_CONSUMERS: &str = "SELECT evc_login_consumers() AS consumers";

/// Whether group role `$1` exists, has grants in this database (it may read `evc_events`, as
/// every role may), and whether the session's login may take it (`SET ROLE`: membership, and
/// from PostgreSQL 16 on a grant not made `WITH SET FALSE`); and the login.
pub(crate) const ROLE_CHECK: &str = "\
SELECT r.oid IS NOT NULL AS exists,
    COALESCE(has_any_column_privilege(r.oid, to_regclass('evc_events'), 'SELECT'), false)
        AS granted,
    COALESCE(CASE WHEN current_setting('server_version_num')::int >= 160000
        THEN pg_has_role(session_user, r.oid, 'SET')
        ELSE pg_has_role(session_user, r.oid, 'MEMBER') END, false) AS member,
    session_user::text AS login
FROM (SELECT 1) AS one LEFT JOIN pg_roles r ON r.rolname = $1";

/// The space of the tables a delivery churns: name, live and dead rows (the cumulative
/// statistics' estimates), heap and index bytes, and autovacuum's finished passes.
pub(crate) const TABLE_SPACE: &str = "\
SELECT c.relname::text, COALESCE(s.n_live_tup, 0), COALESCE(s.n_dead_tup, 0),
    pg_table_size(c.oid), pg_indexes_size(c.oid),
    COALESCE(s.autovacuum_count, 0)
FROM pg_class c LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
WHERE c.oid IN ('evc_deliveries'::regclass, 'evc_delivery_attempts'::regclass,
    'evc_acked_batches'::regclass, 'evc_events'::regclass)
ORDER BY c.relname";

// ---------------------------------------------------------------------------------------------
// The relay's cursors (`Cursors`).
// ---------------------------------------------------------------------------------------------

/// Takes cursor `$1` for owner `$2` for `$3` milliseconds, when it is new, its lease ran out or
/// `$2` holds it: a new token. No row: another owner holds it.
pub(crate) const TAKE_CURSOR: &str = "\
INSERT INTO evc_relay_cursors AS c (name, owner, token, lease_until)
VALUES ($1, $2, 1, now() + $3::int8 * interval '1 millisecond')
ON CONFLICT (name) DO UPDATE
SET owner = EXCLUDED.owner, token = c.token + 1, lease_until = EXCLUDED.lease_until,
    advanced_at = now()
WHERE c.lease_until < now() OR c.owner = EXCLUDED.owner
RETURNING token, writer_xid::text::bigint AS writer, seq";

/// Moves cursor `$1` to (`$3`, `$4`), adds `$6` events passed at rate `$7`, and its lease to
/// `$5` milliseconds from now, if `$2` is its token. No row: stale.
pub(crate) const ADVANCE_CURSOR: &str = "\
UPDATE evc_relay_cursors
SET writer_xid = $3::bigint::text::xid8, seq = $4,
    lease_until = now() + $5::int8 * interval '1 millisecond', advanced_at = now(),
    published = published + $6, rate_per_s = $7,
    progressed_at = CASE WHEN $6 > 0 THEN now() ELSE progressed_at END
WHERE name = $1 AND token = $2
RETURNING token";

/// Counts a failed round of cursor `$1` with error `$3`, if `$2` is its token. No row: stale.
pub(crate) const NOTE_CURSOR_FAILURE: &str = "\
UPDATE evc_relay_cursors
SET failed_rounds = failed_rounds + 1, failed_at = now(), last_error = $3
WHERE name = $1 AND token = $2
RETURNING token";

/// Ends the lease of cursor `$1` now, if `$2` is its token. No row: stale.
pub(crate) const RELEASE_CURSOR: &str = "\
UPDATE evc_relay_cursors SET lease_until = now() WHERE name = $1 AND token = $2 RETURNING token";

/// The columns of a cursor; times in epoch seconds, `failing` the last error while it is newer
/// than the last progress.
macro_rules! cursor_columns {
    () => {
        "name, writer_xid::text::bigint AS writer, seq, owner, token,
    extract(epoch FROM lease_until)::float8 AS lease_until,
    extract(epoch FROM advanced_at)::float8 AS advanced_at, published, rate_per_s,
    extract(epoch FROM progressed_at)::float8 AS progressed_at, failed_rounds,
    CASE WHEN failed_at > progressed_at THEN last_error END AS failing"
    };
}

/// Cursor `$1`.
pub(crate) const READ_CURSOR: &str = concat!(
    "SELECT ",
    cursor_columns!(),
    "\nFROM evc_relay_cursors WHERE name = $1"
);

/// Every cursor by name, with whether a lease holds it now and how many events of the feed
/// are after it (counted up to `$1`: a status read stays cheap however far behind).
pub(crate) const RELAY_CURSORS: &str = concat!(
    "SELECT ",
    cursor_columns!(),
    ",
    c.lease_until > now() AS held,
    (SELECT count(*) FROM (
        SELECT 1 FROM evc_events e
        WHERE (coalesce(e.writer_xid, '0'::xid8), e.seq) > (c.writer_xid, c.seq)
            AND coalesce(e.writer_xid, '0'::xid8) < pg_snapshot_xmin(pg_current_snapshot())
        LIMIT $1) AS after) AS behind
FROM evc_relay_cursors c ORDER BY name"
);

// ---------------------------------------------------------------------------------------------
// Schedules (docs/runtime.md, "Schedules"): `evc_schedules`, the twenty-third runtime step.
// ---------------------------------------------------------------------------------------------

/// Takes the scheduler's lock for the rest of the transaction when no other session holds it:
/// one process runs a scheduler round at a time, and the lock goes with its transaction,
/// whether it commits, rolls back or its connection dies.
pub(crate) const TRY_SCHEDULER_LOCK: &str =
    "SELECT pg_try_advisory_xact_lock(hashtextextended('evc.schedules', 7268)) AS locked";

/// The isolation a scheduler or lag-watch round needs whatever the session's default: each
/// statement after the lock sees what the previous round committed.
pub(crate) const READ_COMMITTED: &str = "SET TRANSACTION ISOLATION LEVEL READ COMMITTED";

/// The database's clock now, in epoch seconds (not the transaction's start: a round may have
/// waited for its lock).
pub(crate) const CLOCK: &str = "SELECT extract(epoch FROM clock_timestamp())::float8";

/// Where the schedules named in `$1` stand, in epoch seconds.
pub(crate) const SCHEDULE_POSITIONS: &str = "\
SELECT schedule, cron, event_type,
    extract(epoch FROM since)::float8 AS since,
    extract(epoch FROM last_slot)::float8 AS last_slot
FROM evc_schedules
WHERE schedule = ANY($1)";

/// Starts schedule `$1` (cron `$2`, tick event `$3`) at `$4` (epoch seconds).
pub(crate) const START_SCHEDULE: &str = "\
INSERT INTO evc_schedules (schedule, cron, event_type, since)
VALUES ($1, $2, $3, to_timestamp($4))
ON CONFLICT (schedule) DO NOTHING";

/// Records schedule `$1`'s cron expression `$2` and tick event `$3` (the build's), so that the
/// status report reads its next slot from them.
pub(crate) const RESTATE_SCHEDULE: &str =
    "UPDATE evc_schedules SET cron = $2, event_type = $3 WHERE schedule = $1";

/// Moves schedule `$1` (cron `$2`, tick event `$3`) to slot `$4`, adding `$5` ticks and `$6`
/// skipped slots, at `$7` (epoch seconds).
pub(crate) const MOVE_SCHEDULE: &str = "\
UPDATE evc_schedules
SET cron = $2, event_type = $3, last_slot = to_timestamp($4),
    ticks = ticks + $5, skipped = skipped + $6, ticked_at = to_timestamp($7)
WHERE schedule = $1";

/// Takes the lag watch's lock for the rest of the transaction when no other session holds it.
pub(crate) const TRY_LAG_WATCH_LOCK: &str =
    "SELECT pg_try_advisory_xact_lock(hashtextextended('evc.lag', 7268)) AS locked";

/// The lag of consumer `$1` for events of producer class `$2`: how long its longest-waiting
/// open (pending or leased) delivery of such an event has waited, in milliseconds, and that
/// delivery's event. A delivery waits from when it was written (a replay's generation from the
/// replay), or from when it became due if it was held back and never attempted; one not due yet
/// does not wait. Reads every open delivery of the consumer; no row: none waits.
pub(crate) const PAIR_LAG: &str = "\
SELECT (extract(epoch FROM clock_timestamp() - x.since) * 1000)::bigint AS lag_ms, x.event_id
FROM (
    SELECT CASE WHEN d.attempt = 0 THEN greatest(d.created_at, d.next_attempt_at)
            ELSE d.created_at END AS since,
        d.event_id
    FROM evc_deliveries d JOIN evc_events e ON e.event_id = d.event_id
    WHERE d.consumer = $1 AND d.status IN ('pending', 'leased') AND e.producer_class = $2
) x
WHERE x.since <= clock_timestamp()
ORDER BY x.since
LIMIT 1";

/// The open breach of consumer `$1` and producer class `$2`, if any, with its threshold.
pub(crate) const OPEN_BREACH: &str = "\
SELECT id, threshold_ms FROM evc_lag_breaches
WHERE consumer = $1 AND producer_class = $2 AND closed_at IS NULL";

/// Opens a breach of consumer `$1` and producer class `$2` (threshold `$3`, lag `$4` ms, the
/// waiting event `$5`); returns its id and when, RFC 3339 in UTC.
pub(crate) const OPEN_LAG_BREACH: &str = "\
INSERT INTO evc_lag_breaches (consumer, producer_class, threshold_ms, lag_ms, oldest_event_id,
    opened_at)
VALUES ($1, $2, $3, $4, $5, clock_timestamp())
RETURNING id, to_char(opened_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"') AS opened";

/// Closes breach `$1` (never before it opened, whatever the clock did).
pub(crate) const CLOSE_LAG_BREACH: &str = "\
UPDATE evc_lag_breaches SET closed_at = greatest(clock_timestamp(), opened_at)
WHERE id = $1 AND closed_at IS NULL";

/// The schedules and lag thresholds of the settings row, when the settings migration that
/// wrote them is the one in force (twenty-fourth step); no row otherwise.
pub(crate) const DEPLOYED_SCHEDULING: &str = "\
SELECT schedules::text AS schedules, lag_thresholds::text AS lag_thresholds
FROM evc_settings
WHERE id AND scheduling_digest = settings_digest";

/// The names of the schedules of the settings row in force ([`DEPLOYED_SCHEDULING`]).
pub(crate) const DEPLOYED_SCHEDULE_NAMES: &str = "\
SELECT coalesce(array_agg(s->>'name'), ARRAY[]::text[])
FROM evc_settings, jsonb_array_elements(schedules) AS s
WHERE id AND scheduling_digest = settings_digest";

/// The (consumer, producer class) of the lag thresholds of the settings row in force.
pub(crate) const DEPLOYED_LAG_PAIRS: &str = "\
SELECT t->>'consumer', t->>'producer_class'
FROM evc_settings, jsonb_array_elements(lag_thresholds) AS t
WHERE id AND scheduling_digest = settings_digest";

/// Records the evidence recording `$1` (JSON) with the settings digest `$2` that writes it.
pub(crate) const INSTALL_EVIDENCE: &str = "\
UPDATE evc_settings
SET evidence_recording = $1::jsonb, evidence_digest = $2
WHERE id AND evidence_digest IS DISTINCT FROM $2";

/// The evidence recording in force: recorded by the settings row's own digest.
pub(crate) const DEPLOYED_EVIDENCE: &str = "\
SELECT evidence_recording::text
FROM evc_settings
WHERE id AND evidence_digest = settings_digest AND evidence_recording IS NOT NULL";

/// Whether the database has the twenty-ninth step's settings columns.
pub(crate) const HAS_EVIDENCE_RECORDING: &str = "\
SELECT EXISTS (SELECT 1 FROM information_schema.columns
    WHERE table_name = 'evc_settings' AND column_name = 'evidence_recording'
        AND table_schema = current_schema())";

/// Whether the database has the twenty-fourth step's `evc_lag_breaches`.
pub(crate) const HAS_LAG_BREACHES: &str = "SELECT to_regclass('evc_lag_breaches') IS NOT NULL";

/// The breaches, open first, then the newest closed, at most `$1`.
pub(crate) const LAG_BREACHES: &str = "\
SELECT id, consumer, producer_class, threshold_ms, lag_ms, oldest_event_id,
    extract(epoch FROM opened_at)::float8 AS opened_at,
    extract(epoch FROM closed_at)::float8 AS closed_at
FROM evc_lag_breaches
ORDER BY closed_at IS NOT NULL, coalesce(closed_at, opened_at) DESC, id DESC
LIMIT $1";

/// Whether the database has the twenty-third step's `evc_schedules`.
pub(crate) const HAS_SCHEDULES: &str = "SELECT to_regclass('evc_schedules') IS NOT NULL";

/// Every schedule, by name.
pub(crate) const SCHEDULE_STATES: &str = "\
SELECT schedule, cron, event_type,
    extract(epoch FROM since)::float8 AS since,
    extract(epoch FROM last_slot)::float8 AS last_slot,
    ticks, skipped,
    extract(epoch FROM ticked_at)::float8 AS ticked_at
FROM evc_schedules
ORDER BY schedule";

/// Serializes the mode changes of consumer `$1` (a transaction-level advisory lock), so a
/// cut-over gate is judged on the state its move to `live` changes.
pub(crate) const LOCK_CONSUMER_MODE: &str =
    "SELECT pg_advisory_xact_lock(hashtextextended('evc.mode:' || $1, 7268))";

/// The event type and version of event `$1`, if the session sees it.
pub(crate) const EVENT_TYPE_OF: &str =
    "SELECT event_type, schema_version FROM evc_events WHERE event_id = $1";

/// The newest mode other than `off` an operator set for consumer `$1`, if any.
pub(crate) const LAST_ACTIVE_MODE: &str = "\
SELECT mode FROM evc_state_changes
WHERE consumer = $1 AND change = 'mode' AND mode <> 'off'
ORDER BY id DESC LIMIT 1";

/// Records the legacy outcome `$3` (a JSON list of effects) of consumer `$1` for event `$2`;
/// one per pair, the first stays.
pub(crate) const RECORD_LEGACY_OUTCOME: &str = "\
INSERT INTO evc_legacy_outcomes (consumer, event_id, outcome) VALUES ($1, $2, $3::jsonb)
ON CONFLICT (consumer, event_id) DO NOTHING";

/// When consumer `$1` last entered shadow mode by an operator's change (epoch seconds), NULL
/// when none did.
pub(crate) const SHADOW_SINCE: &str = "\
SELECT extract(epoch FROM max(changed_at))::float8 FROM evc_state_changes
WHERE consumer = $1 AND change = 'mode' AND mode = 'shadow'";

/// Consumer `$1`'s shadow runs since it last entered shadow mode (every one when it never
/// did), optionally of event `$2` only: the newest generation's intents of each event, the
/// legacy outcome recorded for the event, and whether an operator explained a difference in
/// the same window.
pub(crate) const SHADOW_RUNS: &str = "\
WITH since AS (
    SELECT coalesce(max(changed_at), '-infinity') AS at FROM evc_state_changes
    WHERE consumer = $1 AND change = 'mode' AND mode = 'shadow'
), runs AS (
    SELECT DISTINCT ON (r.event_id) r.event_id, r.intended, r.recorded_at
    FROM evc_reconciliations r, since
    WHERE r.consumer = $1 AND r.recorded_at >= since.at AND ($2::uuid IS NULL OR r.event_id = $2)
    ORDER BY r.event_id, r.generation DESC
)
SELECT runs.event_id, runs.intended::text AS intended, l.outcome::text AS legacy,
    EXISTS (SELECT 1 FROM evc_cutover_explanations x, since
        WHERE x.consumer = $1 AND x.event_id = runs.event_id AND x.explained_at >= since.at)
        AS explained,
    extract(epoch FROM runs.recorded_at)::float8 AS recorded_at
FROM runs LEFT JOIN evc_legacy_outcomes l ON l.consumer = $1 AND l.event_id = runs.event_id
ORDER BY runs.recorded_at, runs.event_id";

/// How far consumer `$1` is on its way through its cut-over gate, in columns every reading
/// role may see: when it last entered shadow mode, its shadow runs since (events), and how many
/// of them have a legacy outcome, each counted up to `$2` (a status report runs this on every
/// scrape: the count stops where it stops mattering).
///
/// Each count walks the window's rows by `(consumer, recorded_at)` and stops at the limit: an
/// event counts by its newest generation (no newer one of the consumer's rows exists), so no
/// `DISTINCT` has to read the whole window first.
pub(crate) const GATE_PROGRESS: &str = "\
WITH since AS (
    SELECT coalesce(max(changed_at), '-infinity') AS at FROM evc_state_changes
    WHERE consumer = $1 AND change = 'mode' AND mode = 'shadow'
)
SELECT (SELECT extract(epoch FROM nullif(at, '-infinity'))::float8 FROM since) AS since,
    (SELECT count(*) FROM (
        SELECT 1 FROM evc_reconciliations r
        WHERE r.consumer = $1 AND r.recorded_at >= (SELECT at FROM since)
            AND NOT EXISTS (SELECT 1 FROM evc_reconciliations n
                WHERE n.consumer = $1 AND n.event_id = r.event_id AND n.generation > r.generation)
        LIMIT $2) AS s) AS shadow_runs,
    (SELECT count(*) FROM (
        SELECT 1 FROM evc_reconciliations r
        JOIN evc_legacy_outcomes l ON l.consumer = $1 AND l.event_id = r.event_id
        WHERE r.consumer = $1 AND r.recorded_at >= (SELECT at FROM since)
            AND NOT EXISTS (SELECT 1 FROM evc_reconciliations n
                WHERE n.consumer = $1 AND n.event_id = r.event_id AND n.generation > r.generation)
        LIMIT $2) AS c) AS compared";

/// Records that `$3` explains, for `$4`, the difference of consumer `$1`'s shadow run of event
/// `$2`.
pub(crate) const EXPLAIN_DIFFERENCE: &str = "\
INSERT INTO evc_cutover_explanations (consumer, event_id, explained_by, reason)
VALUES ($1, $2, $3, $4)";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fenced_statements_present_the_token() {
        for statement in [ACK_FENCED, FAIL_FENCED, LOCK_LEASE] {
            assert!(statement.contains("fencing_token = $3 AND status = 'leased'"));
        }
        assert!(RENEW_FENCED.contains("d.fencing_token = r.fencing_token"));
        assert!(ACK_BATCH_FENCED.contains("l.fencing_token = r.fencing_token"));
        assert!(ACK_BATCH_FENCED.contains("AND l.lease_owner = r.owner"));
        assert!(ACK_BATCH_FENCED.contains("AND l.status = 'leased'"));
        // The delete itself is fenced too, for rows changed after the lookup.
        assert!(ACK_BATCH_FENCED.contains(
            "AND d.status = 'leased'
        -- A hashed filter"
        ));
        assert!(ACK_BATCH_FENCED.contains(
            "(d.event_id, d.consumer, d.fencing_token, d.lease_owner)
            IN (SELECT event_id, consumer, fencing_token, owner FROM r)"
        ));
        for leased in [RECORD_EFFECT, RECORD_EFFECT_IN_NAMESPACE] {
            assert!(leased.contains("fencing_token = $5 AND status = 'leased'"));
        }
        for held in [RECORD_EFFECT_HELD, RECORD_EFFECT_HELD_IN_NAMESPACE] {
            assert!(held.contains("fencing_token = $5 - 1 AND status = 'pending'"));
        }
        // Without a namespace, nothing of the twenty-second step: a database before it works.
        for statement in [RECORD_EFFECT, RECORD_EFFECT_HELD, EFFECT_RECORDED] {
            assert!(!statement.contains("idempotency_namespace"));
        }
        // Rows are read where the claim left them (as a sub-select: no plan knows how many),
        // the fence repeated on the delete.
        for ack in [ACK_HELD, ACK_BATCH_FENCED] {
            assert!(ack.contains("d.ctid = ANY ((SELECT $6::text[]::tid[])::tid[])"));
        }
        assert!(!ACK_HELD.contains("LATERAL"));
        assert!(ACK_HELD.contains(
            "(d.event_id, d.fencing_token + 1)
            IN (SELECT event_id, fencing_token FROM r)"
        ));
    }

    #[test]
    fn claims_take_their_batch_size_as_a_constant() {
        for statement in [CLAIM_BATCH, CLAIM_HELD, CLAIM_KEY_HEADS_LOCK] {
            assert_eq!(statement.matches(BATCH_LIMIT).count(), 2);
            let written = with_batch(statement, 50);
            assert!(!written.contains("$batch"), "{written}");
            assert_eq!(written.matches("LIMIT 50").count(), 2, "{written}");
        }
        assert!(with_batch(CLAIM_BATCH, 0).contains("LIMIT 1\n"));
    }

    #[test]
    fn appends_notify_on_the_documented_channel() {
        for statement in [APPEND_EVENT, APPEND_BATCH] {
            assert!(statement.contains(&format!("pg_notify('{NOTIFY_CHANNEL}'")));
        }
    }
}
