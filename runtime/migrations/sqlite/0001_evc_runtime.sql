-- evc runtime tables of the embedded SQLite store (`evc_runtime::store::sqlite`), the
-- counterparts of the PostgreSQL runtime steps (`codegen/templates/evc_runtime*.sql`) that the
-- store's operations need. The store embeds this file and applies it when it opens its file
-- (sqlx's migrator, one transaction, recorded in `_sqlx_migrations`). Once released it is never
-- edited: a later change is `0002_*.sql` after it.
--
-- Conventions (docs/runtime.md, "SQLite store"):
-- - times are epoch seconds (REAL) of the owning process's clock, computed in Rust: one process
--   owns the file (an exclusive lock on `<file>.lock`), so there is one clock;
-- - event ids are UUID text (hyphenated, lower case); payloads are canonical JSON text;
-- - keyword columns hold the same snake_case values as the PostgreSQL tables.

-- The registry the file was opened with: one row, written on first open and compared by
-- `verify_registry`. The registry mirror tables of PostgreSQL have no counterpart: the store
-- owns its file, and the compiled registry is the only authority.
CREATE TABLE evc_registry_state (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    project TEXT NOT NULL,
    digest TEXT NOT NULL,
    recorded_at REAL NOT NULL
);

-- Every registry the file was opened with, in order (an accepted registry change adds a row).
CREATE TABLE evc_registry_history (
    id INTEGER PRIMARY KEY,
    project TEXT NOT NULL,
    digest TEXT NOT NULL,
    recorded_at REAL NOT NULL
);

-- The append-only outbox. `seq` is the global append order (AUTOINCREMENT: never reused, as
-- PostgreSQL's identity). With one writer at a time, seq order is also commit order.
CREATE TABLE evc_events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id TEXT NOT NULL UNIQUE,
    event_type TEXT NOT NULL,
    schema_version TEXT NOT NULL,
    order_key TEXT NOT NULL,
    tenant_scope TEXT,
    producer_class TEXT NOT NULL,
    idempotency_key TEXT,
    produced_at REAL NOT NULL,
    trace_id TEXT,
    parent_span_id TEXT,
    trace_flags TEXT,
    correlation_id TEXT,
    causation_id TEXT,
    payload TEXT NOT NULL,
    payload_bytes INTEGER NOT NULL CHECK (payload_bytes >= 0),
    -- A trace context is whole or absent.
    CHECK ((trace_id IS NULL) = (parent_span_id IS NULL)
        AND (trace_id IS NULL) = (trace_flags IS NULL))
);

-- A retried append with the same key is the same event; events without a key never collide.
CREATE UNIQUE INDEX evc_events_idempotency_key_idx
    ON evc_events (producer_class, idempotency_key) WHERE idempotency_key IS NOT NULL;

-- The audit timeline by trace id.
CREATE INDEX evc_events_trace_idx ON evc_events (trace_id, seq) WHERE trace_id IS NOT NULL;

CREATE TRIGGER evc_events_append_only BEFORE UPDATE ON evc_events
BEGIN
    SELECT RAISE(ABORT, 'evc_events is append-only: rows are never updated');
END;

-- One delivery per event, consumer and generation (a replay writes the next generation), created
-- in the append transaction. An ack deletes the delivery: its `acked` attempt row is its record.
CREATE TABLE evc_deliveries (
    event_id TEXT NOT NULL REFERENCES evc_events (event_id),
    consumer TEXT NOT NULL,
    generation INTEGER NOT NULL DEFAULT 0 CHECK (generation >= 0),
    -- Copies of the event's seq and (for consumers ordering per key) order key.
    event_seq INTEGER NOT NULL,
    order_key TEXT,
    status TEXT NOT NULL DEFAULT 'pending' CHECK (
        status IN ('pending', 'leased', 'dead', 'quarantined', 'replayed', 'discarded')
    ),
    -- Claims made (attempts counted), from 0.
    attempt INTEGER NOT NULL DEFAULT 0 CHECK (attempt >= 0),
    -- When the delivery is due (a delay, a retry's back-off), epoch seconds.
    next_attempt_at REAL NOT NULL,
    lease_owner TEXT,
    lease_until REAL,
    -- Raised on every claim; every fenced write presents it.
    fencing_token INTEGER NOT NULL DEFAULT 0,
    last_error_code TEXT,
    -- The replay that wrote this generation, the discard that settled it (later steps).
    replay_id INTEGER,
    discard_id INTEGER,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (event_id, consumer, generation),
    CHECK (status <> 'leased' OR (lease_owner IS NOT NULL AND lease_until IS NOT NULL))
);

-- Claims: a consumer's pending deliveries in seq order.
CREATE INDEX evc_deliveries_due_idx
    ON evc_deliveries (consumer, event_seq) WHERE status = 'pending';

-- Per-key head-of-line: the unfinished deliveries of a key in seq order.
CREATE INDEX evc_deliveries_key_order_idx
    ON evc_deliveries (consumer, order_key, event_seq)
    WHERE order_key IS NOT NULL AND status IN ('pending', 'leased');

-- Lease-expiry recovery by lease end.
CREATE INDEX evc_deliveries_lease_expiry_idx
    ON evc_deliveries (lease_until) WHERE lease_until IS NOT NULL;

-- A lease owner's leases (release at shutdown).
CREATE INDEX evc_deliveries_owner_idx
    ON evc_deliveries (lease_owner) WHERE status = 'leased';

-- Settled deliveries (dead-letter and quarantine listings, counts).
CREATE INDEX evc_deliveries_settled_idx
    ON evc_deliveries (consumer, status, event_seq) WHERE status IN ('dead', 'quarantined');

-- Every attempt of every delivery, written once when the attempt ends. Never a message or a
-- payload: a typed error code only.
CREATE TABLE evc_delivery_attempts (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id TEXT NOT NULL,
    consumer TEXT NOT NULL,
    generation INTEGER NOT NULL DEFAULT 0 CHECK (generation >= 0),
    attempt INTEGER NOT NULL CHECK (attempt >= 1),
    owner TEXT NOT NULL,
    fencing_token INTEGER NOT NULL,
    started_at REAL NOT NULL,
    finished_at REAL NOT NULL,
    outcome TEXT NOT NULL,
    error_code TEXT,
    duration_ms INTEGER NOT NULL CHECK (duration_ms >= 0),
    CHECK (finished_at >= started_at)
);

CREATE INDEX evc_delivery_attempts_delivery_idx
    ON evc_delivery_attempts (event_id, consumer, attempt);

CREATE TRIGGER evc_delivery_attempts_immutable BEFORE UPDATE ON evc_delivery_attempts
BEGIN
    SELECT RAISE(ABORT, 'evc_delivery_attempts is append-only: rows are never updated');
END;

-- Idempotency of handler effects: one row per consumer and effect key.
CREATE TABLE evc_consumer_effects (
    consumer TEXT NOT NULL,
    effect_key TEXT NOT NULL,
    event_id TEXT NOT NULL,
    outcome_digest TEXT NOT NULL,
    fencing_token INTEGER,
    created_at REAL NOT NULL,
    PRIMARY KEY (consumer, effect_key)
);

-- What shadow-mode handlers meant to do: one row per delivery generation.
CREATE TABLE evc_reconciliations (
    consumer TEXT NOT NULL,
    event_id TEXT NOT NULL,
    generation INTEGER NOT NULL DEFAULT 0,
    fencing_token INTEGER NOT NULL,
    intended TEXT NOT NULL CHECK (json_type(intended) = 'array'),
    recorded_at REAL NOT NULL,
    PRIMARY KEY (consumer, event_id, generation)
);

-- Rejected appends: what was refused and why, never the payload; its keyed digest only.
CREATE TABLE evc_validation_rejects (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    event_type TEXT NOT NULL,
    schema_version TEXT,
    reason_code TEXT NOT NULL,
    payload_digest TEXT NOT NULL,
    rejected_at REAL NOT NULL
);

CREATE INDEX evc_validation_rejects_type_idx
    ON evc_validation_rejects (event_type, rejected_at);

-- Liveness: one row per dispatcher worker. `dispatcher_overrides` is a JSON array of setting
-- names (PostgreSQL: `text[]`).
CREATE TABLE evc_heartbeats (
    owner TEXT PRIMARY KEY,
    consumer TEXT NOT NULL,
    seen_at REAL NOT NULL,
    payload_policy TEXT,
    dispatcher_overrides TEXT
);

-- Operator state per consumer: pause and mode overrides (claims skip a paused or `off` one).
CREATE TABLE evc_consumer_state (
    consumer TEXT PRIMARY KEY,
    paused INTEGER NOT NULL DEFAULT 0 CHECK (paused IN (0, 1)),
    mode TEXT NOT NULL CHECK (mode IN ('off', 'shadow', 'live')),
    revision INTEGER NOT NULL DEFAULT 0 CHECK (revision >= 0),
    updated_at REAL NOT NULL
);

-- Fenced operations refused for a stale token, per consumer.
CREATE TABLE evc_stale_rejections (
    consumer TEXT PRIMARY KEY,
    rejected INTEGER NOT NULL DEFAULT 0 CHECK (rejected >= 0),
    last_at REAL NOT NULL
);
