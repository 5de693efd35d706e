-- {{ notice }}
--
-- evc runtime tables (ARCHITECTURE §7). Every statement is `IF NOT EXISTS` or `OR REPLACE`, so
-- running this file again is a no-op; sqlx runs it once, in one transaction. The file is
-- additive only: once published it is never edited, and a later change to these tables is a new
-- migration after it. Requires PostgreSQL 14 or later (`CREATE OR REPLACE TRIGGER`).

-- ---------------------------------------------------------------------------------------------
-- Registry mirror. Written only by the generated registry migrations (`NNNN_evc_registry_*.sql`)
-- with upserts, never deleted: a type, consumer or subscription that leaves the contracts keeps
-- its row, and `registry_digest` (the digest of the last registry that contained the row) tells
-- current rows from retired ones. The compiled registry is the authority at append time; this
-- mirror serves operators, non-Rust readers and the start-up parity check. Keyword columns
-- (kind, status, mode, ...) hold the contract format's snake_case values, already validated by
-- evc; they carry no CHECK, so a new keyword in the format needs no change to these tables.
-- ---------------------------------------------------------------------------------------------

CREATE TABLE IF NOT EXISTS evc_retry_policies (
    name text PRIMARY KEY,
    kind text NOT NULL,
    base_delay_ms bigint NOT NULL CHECK (base_delay_ms >= 0),
    max_delay_ms bigint CHECK (max_delay_ms >= 0),
    max_attempts integer NOT NULL CHECK (max_attempts >= 1),
    jitter text NOT NULL,
    -- Failure classes retried; every other class dead-letters or quarantines at once.
    retry_on text[] NOT NULL,
    registry_digest text NOT NULL CHECK (registry_digest ~ '^[0-9a-f]{64}$')
);

CREATE TABLE IF NOT EXISTS evc_event_types (
    name text PRIMARY KEY,
    description text NOT NULL,
    producer_class text NOT NULL,
    -- Payload fields whose values, joined, form the envelope's order key; empty: the aggregate.
    order_key text[] NOT NULL,
    compat text NOT NULL,
    status text NOT NULL,
    max_payload_bytes integer NOT NULL CHECK (max_payload_bytes > 0),
    registry_digest text NOT NULL CHECK (registry_digest ~ '^[0-9a-f]{64}$')
);

CREATE TABLE IF NOT EXISTS evc_event_versions (
    event_type text NOT NULL REFERENCES evc_event_types (name),
    -- The semantic version as written; major/minor/patch order versions numerically
    -- (as text, '1.10.0' sorts before '1.9.0').
    version text NOT NULL,
    major bigint NOT NULL CHECK (major >= 0),
    minor bigint NOT NULL CHECK (minor >= 0),
    patch bigint NOT NULL CHECK (patch >= 0),
    schema jsonb NOT NULL,
    -- SHA-256 of the schema's canonical JSON (keys sorted, no whitespace), as in registry.json.
    schema_digest text NOT NULL CHECK (schema_digest ~ '^[0-9a-f]{64}$'),
    registry_digest text NOT NULL CHECK (registry_digest ~ '^[0-9a-f]{64}$'),
    PRIMARY KEY (event_type, version)
);

CREATE TABLE IF NOT EXISTS evc_consumers (
    name text PRIMARY KEY,
    description text NOT NULL,
    executor_kind text NOT NULL,
    retry_policy text NOT NULL REFERENCES evc_retry_policies (name),
    handler text NOT NULL,
    ordering text NOT NULL,
    -- The mode the contract declares; operators override it in evc_consumer_state.
    mode text NOT NULL,
    heartbeat_threshold_ms bigint NOT NULL CHECK (heartbeat_threshold_ms > 0),
    registry_digest text NOT NULL CHECK (registry_digest ~ '^[0-9a-f]{64}$')
);

CREATE TABLE IF NOT EXISTS evc_subscriptions (
    consumer text NOT NULL REFERENCES evc_consumers (name),
    event_type text NOT NULL REFERENCES evc_event_types (name),
    -- A semver requirement (`^1`, `>=1, <3`): the versions the consumer accepts.
    requirement text NOT NULL,
    registry_digest text NOT NULL CHECK (registry_digest ~ '^[0-9a-f]{64}$'),
    PRIMARY KEY (consumer, event_type)
);

-- One row: the digest of the registry last applied. The runtime compares it with the digest it
-- was compiled with and refuses to start on a mismatch.
CREATE TABLE IF NOT EXISTS evc_registry_state (
    id boolean PRIMARY KEY DEFAULT true CHECK (id),
    digest text NOT NULL CHECK (digest ~ '^[0-9a-f]{64}$'),
    applied_at timestamptz NOT NULL DEFAULT now()
);

-- ---------------------------------------------------------------------------------------------
-- Outbox and deliveries. Operational tables do not reference the registry mirror: appends are
-- checked against the compiled registry, and a stale mirror is caught by the parity check.
-- ---------------------------------------------------------------------------------------------

-- The append-only outbox. `seq` is the global order of appends; event_id (UUID v7) identifies an
-- event everywhere else.
CREATE TABLE IF NOT EXISTS evc_events (
    seq bigint GENERATED ALWAYS AS IDENTITY,
    event_id uuid PRIMARY KEY,
    event_type text NOT NULL,
    schema_version text NOT NULL,
    order_key text NOT NULL,
    tenant_scope text,
    producer_class text NOT NULL,
    idempotency_key text,
    produced_at timestamptz NOT NULL DEFAULT now(),
    -- W3C trace context, stored as its parts; `traceparent` is derived, never stored. All-zero
    -- ids are invalid in W3C and rejected here too.
    trace_id text CHECK (trace_id ~ '^[0-9a-f]{32}$' AND trace_id <> repeat('0', 32)),
    parent_span_id text
        CHECK (parent_span_id ~ '^[0-9a-f]{16}$' AND parent_span_id <> repeat('0', 16)),
    trace_flags text CHECK (trace_flags ~ '^[0-9a-f]{2}$'),
    correlation_id text,
    causation_id text,
    payload jsonb NOT NULL,
    payload_bytes integer NOT NULL CHECK (payload_bytes >= 0),
    CONSTRAINT evc_events_seq_key UNIQUE (seq),
    -- A retried append with the same key is the same event; NULL keys never collide.
    CONSTRAINT evc_events_idempotency_key UNIQUE (producer_class, idempotency_key),
    -- A trace context is whole or absent.
    CONSTRAINT evc_events_trace_context_whole CHECK (
        (trace_id IS NULL) = (parent_span_id IS NULL)
        AND (trace_id IS NULL) = (trace_flags IS NULL)
    )
);

-- The audit timeline by trace id; most rows carry one, so the index is partial on presence only.
CREATE INDEX IF NOT EXISTS evc_events_trace_idx
    ON evc_events (trace_id, seq) WHERE trace_id IS NOT NULL;

-- Append-only: an event, once written, is never changed. Deletion stays possible for retention.
CREATE OR REPLACE FUNCTION evc_refuse_update() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% is append-only: rows are never updated', TG_TABLE_NAME
        USING ERRCODE = 'restrict_violation';
END;
$$;

CREATE OR REPLACE TRIGGER evc_events_append_only
    BEFORE UPDATE ON evc_events
    FOR EACH ROW EXECUTE FUNCTION evc_refuse_update();

-- One delivery per event and consumer, created in the append transaction (fan-out at publish).
CREATE TABLE IF NOT EXISTS evc_deliveries (
    event_id uuid NOT NULL REFERENCES evc_events (event_id),
    consumer text NOT NULL,
    -- Copies of the event's seq and order key, so claiming never joins evc_events.
    event_seq bigint NOT NULL,
    order_key text NOT NULL,
    status text NOT NULL DEFAULT 'pending'
        CHECK (status IN ('pending', 'leased', 'acked', 'dead', 'quarantined')),
    attempt integer NOT NULL DEFAULT 0 CHECK (attempt >= 0),
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    lease_owner text,
    lease_until timestamptz,
    -- Raised on every claim; a leased handler's ack, fail, renewal or effect write must present
    -- the current value, so a worker whose lease expired cannot overwrite its successor.
    fencing_token bigint NOT NULL DEFAULT 0,
    last_error_code text,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (event_id, consumer),
    CONSTRAINT evc_deliveries_lease_held CHECK (
        status <> 'leased' OR (lease_owner IS NOT NULL AND lease_until IS NOT NULL)
    )
);

-- Claim: a dispatcher takes the due pending deliveries of a consumer
-- (`WHERE consumer = $1 AND status = 'pending' AND next_attempt_at <= now()`, SKIP LOCKED).
-- Partial on status because acked rows grow without bound while pending ones stay few; the
-- index only holds the work still to do.
CREATE INDEX IF NOT EXISTS evc_deliveries_claim_idx
    ON evc_deliveries (consumer, next_attempt_at) WHERE status = 'pending';

-- Per-key head-of-line: a delivery may run only when it is the oldest unfinished one of its key
-- for its consumer (a pending head that is backing off still blocks later ones; at most one is
-- leased per key). This index finds that head by (consumer, order_key) in seq order; partial
-- for the same reason as the claim index.
CREATE INDEX IF NOT EXISTS evc_deliveries_key_head_idx
    ON evc_deliveries (consumer, order_key, event_seq) WHERE status IN ('pending', 'leased');

-- Lease-expiry recovery scans leased deliveries by lease end; few rows are leased at a time.
CREATE INDEX IF NOT EXISTS evc_deliveries_lease_idx
    ON evc_deliveries (lease_until) WHERE status = 'leased';

-- Counts by status and the oldest pending age, per consumer, for the operations API.
CREATE INDEX IF NOT EXISTS evc_deliveries_status_idx
    ON evc_deliveries (consumer, status, event_seq);

-- Every attempt of every delivery, written once when the attempt ends (immutable).
CREATE TABLE IF NOT EXISTS evc_delivery_attempts (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id uuid NOT NULL,
    consumer text NOT NULL,
    attempt integer NOT NULL CHECK (attempt >= 1),
    owner text NOT NULL,
    fencing_token bigint NOT NULL,
    started_at timestamptz NOT NULL,
    finished_at timestamptz NOT NULL,
    outcome text NOT NULL,
    -- A typed error code, never an error message (messages can carry payload data).
    error_code text,
    duration_ms bigint NOT NULL CHECK (duration_ms >= 0),
    CONSTRAINT evc_delivery_attempts_delivery_fkey
        FOREIGN KEY (event_id, consumer) REFERENCES evc_deliveries (event_id, consumer),
    CONSTRAINT evc_delivery_attempts_in_order CHECK (finished_at >= started_at)
);

CREATE INDEX IF NOT EXISTS evc_delivery_attempts_delivery_idx
    ON evc_delivery_attempts (event_id, consumer, attempt);

CREATE OR REPLACE TRIGGER evc_delivery_attempts_immutable
    BEFORE UPDATE ON evc_delivery_attempts
    FOR EACH ROW EXECUTE FUNCTION evc_refuse_update();

-- Idempotency of handler effects: one row per consumer and effect key (the event id or a key
-- the handler chooses). A second attempt that finds the row skips the effect and compares the
-- outcome digest instead.
CREATE TABLE IF NOT EXISTS evc_consumer_effects (
    consumer text NOT NULL,
    effect_key text NOT NULL,
    event_id uuid NOT NULL,
    outcome_digest text NOT NULL,
    fencing_token bigint,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, effect_key)
);

-- ---------------------------------------------------------------------------------------------
-- Operations.
-- ---------------------------------------------------------------------------------------------

-- Audit of replays from dead-letter or quarantine: a dry run returns a plan and its digest; apply
-- presents the same digest with a reason, an approval reference and an idempotency key.
CREATE TABLE IF NOT EXISTS evc_replays (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    plan_digest text NOT NULL,
    reason text NOT NULL CHECK (char_length(reason) BETWEEN 1 AND 500),
    approval_ref text NOT NULL,
    idempotency_key text NOT NULL,
    requested_at timestamptz NOT NULL DEFAULT now(),
    applied_at timestamptz,
    -- Deliveries planned, replayed and skipped, by name: {"planned": 3, "replayed": 3, ...}.
    counts jsonb NOT NULL DEFAULT '{}'::jsonb CHECK (jsonb_typeof(counts) = 'object'),
    CONSTRAINT evc_replays_idempotency_key UNIQUE (idempotency_key)
);

-- Rejected appends: what was refused and why, never the payload (a rejected payload is exactly
-- the one that may carry data the policy forbids); its digest is enough to match reports.
CREATE TABLE IF NOT EXISTS evc_validation_rejects (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_type text NOT NULL,
    schema_version text,
    reason_code text NOT NULL,
    payload_digest text NOT NULL,
    rejected_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX IF NOT EXISTS evc_validation_rejects_type_idx
    ON evc_validation_rejects (event_type, rejected_at);

-- Liveness: one row per dispatcher worker, refreshed every heartbeat interval.
CREATE TABLE IF NOT EXISTS evc_heartbeats (
    owner text PRIMARY KEY,
    consumer text NOT NULL,
    seen_at timestamptz NOT NULL DEFAULT now()
);

-- Operator state per consumer: pause and mode overrides. `revision` grows on every change so
-- dispatchers notice changes with one cheap comparison.
CREATE TABLE IF NOT EXISTS evc_consumer_state (
    consumer text PRIMARY KEY,
    paused boolean NOT NULL DEFAULT false,
    mode text NOT NULL CHECK (mode IN ('off', 'shadow', 'live')),
    revision bigint NOT NULL DEFAULT 0 CHECK (revision >= 0),
    updated_at timestamptz NOT NULL DEFAULT now()
);
