//! Every SQL statement of the SQLite store, named after what it does, as its PostgreSQL
//! counterpart in [`crate::store::postgres::sql`] is. All are static text with numbered bind
//! parameters (prepared once per connection by sqlx); the tables are declared in
//! `runtime/migrations/sqlite/` (`0001_evc_runtime.sql`, `0002_evc_replays.sql`).
//!
//! Differences from PostgreSQL, all from SQLite having one writer at a time:
//! - no row locks and no `SKIP LOCKED`: the store's write transactions start with `BEGIN
//!   IMMEDIATE`, so a claim, an ack or a recovery runs alone, and a caller's transaction that
//!   wrote (an append, a lease fence) keeps every other writer waiting until it ends;
//! - the fence of a caller's transaction (`LOCK_LEASE`, `FENCE_LEASE`) is a no-op `UPDATE`
//!   of the leased row, which takes the database's write lock for the rest of the transaction;
//! - times are epoch seconds computed by the store and bound as parameters, never `now()`;
//! - lists are bound as JSON arrays and read with `json_each` (PostgreSQL: `UNNEST`), except
//!   appended rows, which are bound as parameters of multi-row `VALUES` (see [`VALUES_ROWS`]);
//! - an ack and its attempt row, or a fail and its attempt row, are two statements in one
//!   transaction (SQLite has no data-modifying CTEs).

use std::sync::OnceLock;

/// Rows one append statement writes at most. A batch is written in statements of this many
/// rows, then of powers of two for the rest, so a connection prepares (and caches) at most nine
/// statements per table whatever the batch sizes, and no statement nears SQLite's limit on bind
/// parameters. Rows are bound as parameters: handing SQLite one JSON array to unpack costs more
/// than the insert itself (every column would be a `json_extract` of a re-rendered entry).
pub(crate) const VALUES_ROWS: usize = 256;

/// Statement sizes of a batch of `rows`: `(first row, rows)` pairs, in order, each size
/// [`VALUES_ROWS`] or a smaller power of two.
pub(crate) fn values_chunks(rows: usize) -> impl Iterator<Item = (usize, usize)> {
    let full = rows / VALUES_ROWS * VALUES_ROWS;
    let rest = rows - full;
    let whole = (0..full)
        .step_by(VALUES_ROWS)
        .map(|start| (start, VALUES_ROWS));
    let powers = (0..VALUES_ROWS.trailing_zeros())
        .rev()
        .filter_map(move |bit| {
            let size = 1 << bit;
            (rest & size != 0).then(|| (full + (rest & !((size << 1) - 1)), size))
        });
    whole.chain(powers)
}

/// Appends `rows` events in one statement, in row order (so their seqs follow it). Each row
/// binds, in order: event id, event type, version, order key, tenant scope, producer class,
/// idempotency key, produced at (now), trace id, parent span id, trace flags, correlation id,
/// causation id, payload, payload bytes. Returns the event id and seq of each event written;
/// an event whose idempotency key was taken in its producer class and tenant (before, or by an
/// earlier row) has none. `rows` is a size [`values_chunks`] gives.
pub(crate) fn append_events(rows: usize) -> &'static str {
    static STATEMENTS: OnceLock<Vec<String>> = OnceLock::new();
    values_statement(
        &STATEMENTS,
        "INSERT INTO evc_events (event_id, event_type, schema_version, order_key, tenant_scope, \
         producer_class, idempotency_key, produced_at, trace_id, parent_span_id, trace_flags, \
         correlation_id, causation_id, payload, payload_bytes) VALUES ",
        15,
        " ON CONFLICT (producer_class, idempotency_key, ifnull(tenant_scope, '*')) \
         WHERE idempotency_key IS NOT NULL DO NOTHING RETURNING event_id, seq",
        rows,
    )
}

/// [`append_events`] for rows that carry no idempotency key, so none can conflict: every row
/// is written, in row order, and nothing is returned. The seqs are consecutive (one writer,
/// `AUTOINCREMENT` gives each row the last seq plus one) and end at the statement's last
/// insert rowid, so the caller reads them from the statement's result instead of from a row
/// per event, which the driver would hand over one message at a time.
pub(crate) fn append_unkeyed_events(rows: usize) -> &'static str {
    static STATEMENTS: OnceLock<Vec<String>> = OnceLock::new();
    values_statement(
        &STATEMENTS,
        "INSERT INTO evc_events (event_id, event_type, schema_version, order_key, tenant_scope, \
         producer_class, idempotency_key, produced_at, trace_id, parent_span_id, trace_flags, \
         correlation_id, causation_id, payload, payload_bytes) VALUES ",
        15,
        "",
        rows,
    )
}

/// The deliveries of new events, `rows` in one statement. Each row binds, in order: event id,
/// consumer, event seq, order key (null: the consumer does not order per key), due at, created
/// at and updated at (both now). `rows` is a size [`values_chunks`] gives.
pub(crate) fn append_deliveries(rows: usize) -> &'static str {
    static STATEMENTS: OnceLock<Vec<String>> = OnceLock::new();
    values_statement(
        &STATEMENTS,
        "INSERT INTO evc_deliveries (event_id, consumer, event_seq, order_key, next_attempt_at, \
         created_at, updated_at) VALUES ",
        7,
        "",
        rows,
    )
}

/// `head`, then `rows` tuples of `columns` anonymous parameters, then `tail`: built once per
/// size and kept for the process (the sizes are [`VALUES_ROWS`] and the powers of two below
/// it). The parameters are anonymous (`?`) because sqlx looks up each parameter's name when it
/// binds, which SQLite answers by a scan of the statement's named parameters: numbered ones
/// would make binding a row quadratic in the statement's size.
fn values_statement(
    statements: &'static OnceLock<Vec<String>>,
    head: &str,
    columns: usize,
    tail: &str,
    rows: usize,
) -> &'static str {
    let statements = statements.get_or_init(|| {
        let tuple = format!("({})", vec!["?"; columns].join(", "));
        (0..=VALUES_ROWS.trailing_zeros())
            .map(|bit| format!("{head}{}{tail}", vec![tuple.as_str(); 1 << bit].join(", ")))
            .collect()
    });
    assert!(
        rows.is_power_of_two() && rows <= VALUES_ROWS,
        "{rows} rows is not a size values_chunks gives"
    );
    &statements[rows.trailing_zeros() as usize]
}

/// The event an idempotency key names: `?1` producer class, `?2` key, `?3` tenant scope (NULL:
/// the events without one).
pub(crate) const FIND_BY_IDEMPOTENCY_KEY: &str = "\
SELECT event_id, seq FROM evc_events
WHERE producer_class = ?1 AND idempotency_key = ?2 AND ifnull(tenant_scope, '*') = ifnull(?3, '*')";

/// Records a refused append: `?1` event type, `?2` version, `?3` reason code, `?4` payload
/// digest, `?5` now, `?6` the appending handle's tenant (NULL: every tenant). Never the
/// payload.
pub(crate) const RECORD_REJECT: &str = "\
INSERT INTO evc_validation_rejects (event_type, schema_version, reason_code, payload_digest,
    rejected_at, tenant_scope)
VALUES (?1, ?2, ?3, ?4, ?5, ?6)";

/// The registry the file was opened with (no row: never opened by a store).
pub(crate) const REGISTRY_STATE: &str = "SELECT project, digest FROM evc_registry_state";

/// Records the registry the file is opened with: `?1` project, `?2` digest, `?3` now.
pub(crate) const RECORD_REGISTRY: &str = "\
INSERT INTO evc_registry_state (id, project, digest, recorded_at) VALUES (1, ?1, ?2, ?3)
ON CONFLICT (id) DO UPDATE SET project = excluded.project, digest = excluded.digest,
    recorded_at = excluded.recorded_at";

/// The whole registry the file records, as a JSON document (NULL: recorded before the
/// document was).
pub(crate) const REGISTRY_DOCUMENT: &str = "SELECT registry FROM evc_registry_state WHERE id = 1";

/// Records the whole registry the file is opened with: `?1` its JSON document.
pub(crate) const RECORD_REGISTRY_DOCUMENT: &str =
    "UPDATE evc_registry_state SET registry = ?1 WHERE id = 1";

/// Whether sqlx's migrator ever ran on the file (its table exists).
pub(crate) const HAS_MIGRATIONS: &str = "\
SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = '_sqlx_migrations')";

/// The versions sqlx's migrator recorded.
pub(crate) const APPLIED_MIGRATIONS: &str = "SELECT version FROM _sqlx_migrations";

/// Whether the file has the store's tables (an evc store opened it once).
pub(crate) const IS_OUTBOX: &str = "\
SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'evc_registry_state')";

/// Adds the registry the file is opened with to its history: `?1` project, `?2` digest, `?3`
/// now.
pub(crate) const RECORD_REGISTRY_HISTORY: &str = "\
INSERT INTO evc_registry_history (project, digest, recorded_at) VALUES (?1, ?2, ?3)";

// ---------------------------------------------------------------------------------------------
// Dispatch (docs/runtime.md, "Dispatch").
// ---------------------------------------------------------------------------------------------

/// Delivery `$d` is of the tenant bound as `$p`: its event's tenant scope (a lookup by `seq`,
/// the events' rowid). A NULL `$p` (a store serving every tenant) takes every delivery without
/// a lookup.
macro_rules! of_tenant {
    ($d:literal, $p:literal) => {
        concat!(
            "(",
            $p,
            " IS NULL OR (SELECT t.tenant_scope FROM evc_events t WHERE t.seq = ",
            $d,
            ".event_seq) = ",
            $p,
            ")"
        )
    };
}

/// The row whose event id is `$id` is of the tenant bound as `$p`, as [`of_tenant!`] (a lookup
/// by event id, for rows without the event's seq).
macro_rules! event_of_tenant {
    ($id:literal, $p:literal) => {
        concat!(
            "(",
            $p,
            " IS NULL OR (SELECT t.tenant_scope FROM evc_events t WHERE t.event_id = ",
            $id,
            ") = ",
            $p,
            ")"
        )
    };
}

/// Delivery `$d` of consumer `?1` is not of a tenant the consumer is paused for
/// (`evc_tenant_pauses`). The first test, uncorrelated, runs once per statement, so a consumer
/// without a tenant's pause pays nothing per row.
macro_rules! not_paused_for_its_tenant {
    ($d:literal) => {
        concat!(
            "(NOT EXISTS (SELECT 1 FROM evc_tenant_pauses p WHERE p.consumer = ?1)
            OR NOT EXISTS (
                SELECT 1 FROM evc_tenant_pauses p
                WHERE p.consumer = ?1 AND p.tenant_scope =
                    (SELECT t.tenant_scope FROM evc_events t WHERE t.seq = ",
            $d,
            ".event_seq)
            ))"
        )
    };
}

/// Pending delivery `d` heads its key: no other delivery of its key and tenant is leased, and
/// none earlier is pending. A delivery without a key orders with nothing; a key orders within
/// its tenant, as on PostgreSQL (the tenants are compared only for deliveries of the key in
/// flight or waiting, by the events' rowid).
macro_rules! heads_its_key {
    () => {
        "NOT EXISTS (
            SELECT 1 FROM evc_deliveries p
            WHERE p.consumer = d.consumer AND p.order_key = d.order_key
                AND p.order_key IS NOT NULL
                AND p.status IN ('pending', 'leased')
                AND (p.status = 'leased' OR p.event_seq < d.event_seq)
                AND (SELECT t.tenant_scope FROM evc_events t WHERE t.seq = p.event_seq)
                    IS (SELECT t.tenant_scope FROM evc_events t WHERE t.seq = d.event_seq)
        )"
    };
}

/// Claims up to `?6` due deliveries of consumer `?1` that need no per-key ordering and come
/// after `event_seq` `?5` (0: from the head) and at most at `?8`, oldest first (nothing while
/// the consumer is paused or off in `evc_consumer_state`) of tenant `?7` (NULL: every
/// tenant): leases them to owner `?2` until `?3`, counts the attempt and raises the fencing
/// token; `?4` now. Returns the claimed rows (unordered).
pub(crate) const CLAIM_BATCH: &str = concat!(
    "\
UPDATE evc_deliveries
SET status = 'leased', lease_owner = ?2, lease_until = ?3, attempt = attempt + 1,
    fencing_token = fencing_token + 1, updated_at = ?4
WHERE rowid IN (
    SELECT d.rowid FROM evc_deliveries d
    WHERE d.consumer = ?1 AND d.status = 'pending' AND d.next_attempt_at <= ?4
        AND d.event_seq > ?5 AND d.event_seq <= ?8
        AND NOT EXISTS (
            SELECT 1 FROM evc_consumer_state s
            WHERE s.consumer = ?1 AND (s.paused OR s.mode = 'off')
        )
        AND ",
    of_tenant!("d", "?7"),
    "
        AND ",
    not_paused_for_its_tenant!("d"),
    "
    ORDER BY d.event_seq
    LIMIT ?6
)
RETURNING event_id, consumer, generation, attempt, fencing_token, event_seq"
);

/// [`CLAIM_BATCH`] for a consumer ordering per key (no cursor): only the due deliveries that
/// head their key — no other delivery of the key is leased, none with a lower `event_seq` is
/// pending — so at most one per key is claimed, and none while the key has one in flight. A
/// delivery without a key orders with nothing. One statement in a `BEGIN IMMEDIATE`
/// transaction: no other writer runs meanwhile, and with one writer seq order is commit order,
/// so PostgreSQL's key locks and re-check are not needed. `?1` consumer, `?2` owner, `?3`
/// lease end, `?4` now, `?5` batch, `?6` tenant (NULL: every tenant).
pub(crate) const CLAIM_KEY_HEADS: &str = concat!(
    "\
UPDATE evc_deliveries
SET status = 'leased', lease_owner = ?2, lease_until = ?3, attempt = attempt + 1,
    fencing_token = fencing_token + 1, updated_at = ?4
WHERE rowid IN (
    SELECT d.rowid FROM evc_deliveries d
    WHERE d.consumer = ?1 AND d.status = 'pending' AND d.next_attempt_at <= ?4
        AND NOT EXISTS (
            SELECT 1 FROM evc_consumer_state s
            WHERE s.consumer = ?1 AND (s.paused OR s.mode = 'off')
        )
        AND ",
    of_tenant!("d", "?6"),
    "
        AND ",
    not_paused_for_its_tenant!("d"),
    "
        AND ",
    heads_its_key!(),
    "
    ORDER BY d.event_seq
    LIMIT ?5
)
RETURNING event_id, consumer, generation, attempt, fencing_token, event_seq"
);

/// Claim by event id (a broker's messages name the events): leases the deliveries of consumer
/// `?1` of the events `?5` (a JSON array of ids) that are pending, due, claimable and head
/// their key to owner `?2` until `?3`; `?4` now; `?6` tenant (NULL: every tenant). Counts the
/// attempt and raises the fencing token. Returns what [`CLAIM_BATCH`] returns. Run in a `BEGIN IMMEDIATE` transaction, as
/// [`CLAIM_KEY_HEADS`], so the head check sees every commit.
pub(crate) const CLAIM_EVENTS: &str = concat!(
    "\
UPDATE evc_deliveries
SET status = 'leased', lease_owner = ?2, lease_until = ?3, attempt = attempt + 1,
    fencing_token = fencing_token + 1, updated_at = ?4
WHERE rowid IN (
    SELECT d.rowid FROM evc_deliveries d
    WHERE d.consumer = ?1 AND d.status = 'pending' AND d.next_attempt_at <= ?4
        AND d.event_id IN (SELECT value FROM json_each(?5))
        AND NOT EXISTS (
            SELECT 1 FROM evc_consumer_state s
            WHERE s.consumer = ?1 AND (s.paused OR s.mode = 'off')
        )
        AND ",
    of_tenant!("d", "?6"),
    "
        AND ",
    not_paused_for_its_tenant!("d"),
    "
        AND ",
    heads_its_key!(),
    "
)
RETURNING event_id, consumer, generation, attempt, fencing_token, event_seq"
);

/// Where the deliveries of consumer `?1` of the events `?2` (a JSON array of ids) stand, per
/// event: whether one is open, whether one is dead or quarantined, and for an open one how many
/// seconds until it is due or its lease ends (`?3` now; never below zero). Deliveries of tenant
/// `?4` only (NULL: any): another tenant's event reads as settled, as under row-level security.
pub(crate) const UNCLAIMED_EVENTS: &str = concat!(
    "\
SELECT event_id,
    max(status IN ('pending', 'leased')) AS open,
    max(status IN ('dead', 'quarantined')) AS ended,
    max(0.0, coalesce(max(CASE status
        WHEN 'leased' THEN lease_until
        WHEN 'pending' THEN next_attempt_at
    END) - ?3, 0.0)) AS wait_s
FROM evc_deliveries
WHERE consumer = ?1 AND event_id IN (SELECT value FROM json_each(?2)) AND ",
    of_tenant!("evc_deliveries", "?4"),
    "
GROUP BY event_id"
);

/// Held claim (a batched transactional claim, in the caller's transaction, which will ack):
/// up to `?4` due deliveries of consumer `?1` that need no per-key ordering and come after
/// `event_seq` `?3` and at most at `?6`, oldest first (nothing while the consumer is paused or
/// off), of tenant `?5` (NULL: every tenant); `?2` now.
/// Nothing changes: a no-op update of the rows, which takes the database's write lock for the
/// rest of the caller's transaction (SQLite's `FOR UPDATE`), so no claimer, recovery or renewal
/// touches them until it ends. Returns `attempt` and `fencing_token` raised by one: the values
/// [`ACK_HELD`] writes.
pub(crate) const CLAIM_HELD: &str = concat!(
    "\
UPDATE evc_deliveries SET fencing_token = fencing_token
WHERE rowid IN (
    SELECT d.rowid FROM evc_deliveries d
    WHERE d.consumer = ?1 AND d.status = 'pending' AND d.next_attempt_at <= ?2
        AND d.event_seq > ?3 AND d.event_seq <= ?6
        AND NOT EXISTS (
            SELECT 1 FROM evc_consumer_state s
            WHERE s.consumer = ?1 AND (s.paused OR s.mode = 'off')
        )
        AND ",
    of_tenant!("d", "?5"),
    "
        AND ",
    not_paused_for_its_tenant!("d"),
    "
    ORDER BY d.event_seq
    LIMIT ?4
)
RETURNING event_id, consumer, generation, attempt + 1 AS attempt,
    fencing_token + 1 AS fencing_token, event_seq"
);

/// Acks held deliveries in the transaction that claimed them ([`CLAIM_HELD`]): of consumer
/// `?2`, `?1` a JSON array of `[event id, held token]` pairs, each still `pending` with the
/// token below its held token. Returns what each `acked` attempt row needs (the held attempt
/// and token); a pair without a row was not held by this claim. Fenced writes take the
/// deliveries of the handle's tenant only (here `?3`, NULL: any): another tenant's lease is stale
/// to it.
pub(crate) const ACK_HELD: &str = concat!(
    "\
DELETE FROM evc_deliveries
WHERE consumer = ?2 AND status = 'pending' AND (event_id, fencing_token) IN (
    SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') - 1 FROM json_each(?1)
) AND ",
    of_tenant!("evc_deliveries", "?3"),
    "
RETURNING event_id, consumer, generation, attempt + 1 AS attempt,
    fencing_token + 1 AS fencing_token"
);

/// The events of claimed deliveries: `?1` a JSON array of event ids, `?2` the consumer (for
/// its operator mode override, NULL: the contract's, and an inventory's repair of its
/// delivery: target version and digest, NULL for any other).
pub(crate) const CLAIMED_EVENTS: &str = "\
SELECT e.event_id, e.order_key, e.event_type, e.schema_version, e.payload, e.trace_id,
    e.parent_span_id, e.trace_flags,
    (SELECT s.mode FROM evc_consumer_state s WHERE s.consumer = ?2) AS mode_override,
    CASE WHEN r.repaired_digest IS NOT NULL THEN r.target_version END AS repair_version,
    r.repaired_digest AS repair_digest
FROM evc_events e
LEFT JOIN evc_inventory_items r
    ON r.event_id = e.event_id AND r.consumer = ?2 AND r.class IN ('safe', 'repair')
WHERE e.event_id IN (SELECT value FROM json_each(?1))";

/// Deletes delivery `?1` of consumer `?2` if it is still leased with token `?3` (an ack), of
/// tenant `?4` (NULL: any). Returns what its `acked` attempt row needs; no row: stale.
pub(crate) const ACK_FENCED: &str = concat!(
    "\
DELETE FROM evc_deliveries
WHERE event_id = ?1 AND consumer = ?2 AND fencing_token = ?3 AND status = 'leased' AND ",
    of_tenant!("evc_deliveries", "?4"),
    "
RETURNING event_id, consumer, generation, attempt, lease_owner, fencing_token"
);

/// Acks many leases in one statement, each fenced like [`ACK_FENCED`] and on its owner too (as
/// PostgreSQL's `ACK_BATCH_FENCED`): `?1` a JSON array of `[event id, consumer, token, owner]`
/// entries, of tenant `?2` (NULL: any). Returns what each acked delivery's attempt row needs;
/// an entry without a row is stale.
pub(crate) const ACK_BATCH: &str = concat!(
    "\
DELETE FROM evc_deliveries
WHERE status = 'leased' AND (event_id, consumer, fencing_token, lease_owner) IN (
    SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'),
        json_extract(value, '$[2]'), json_extract(value, '$[3]')
    FROM json_each(?1)
) AND ",
    of_tenant!("evc_deliveries", "?2"),
    "
RETURNING event_id, consumer, generation, attempt, lease_owner, fencing_token"
);

/// Attempt rows, one statement for any number: `?1` a JSON array of `[event id,
/// consumer, generation, attempt, owner, token, started at, finished at, duration in
/// milliseconds]` entries, all with outcome `?2` and error code `?3`.
pub(crate) const INSERT_ATTEMPTS: &str = "\
INSERT INTO evc_delivery_attempts (event_id, consumer, generation, attempt, owner,
    fencing_token, started_at, finished_at, outcome, error_code, duration_ms)
SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]'),
    json_extract(value, '$[3]'), json_extract(value, '$[4]'), json_extract(value, '$[5]'),
    json_extract(value, '$[6]'), json_extract(value, '$[7]'), ?2, ?3,
    json_extract(value, '$[8]')
FROM json_each(?1)";

/// Ends a failed attempt, fenced like [`ACK_FENCED`]: `?4` the new status (`pending` to retry,
/// `dead`, `quarantined`), due again at `?5` when pending, `?6` the error code, `?7` now.
/// Returns what the attempt row needs; no row: stale.
pub(crate) const FAIL_FENCED: &str = concat!(
    "\
UPDATE evc_deliveries
SET status = ?4, lease_until = NULL, last_error_code = ?6, updated_at = ?7,
    next_attempt_at = CASE WHEN ?4 = 'pending' THEN ?5 ELSE next_attempt_at END
WHERE event_id = ?1 AND consumer = ?2 AND fencing_token = ?3 AND status = 'leased' AND ",
    of_tenant!("evc_deliveries", "?9"),
    "
RETURNING event_id, consumer, generation, attempt, lease_owner, fencing_token"
);

/// [`FAIL_FENCED`] for a held delivery ([`CLAIM_HELD`]) after its batch rolled back: the
/// delivery must still be `pending` with the token below the held token `?3` (if another
/// claimer took it meanwhile, its run is the attempt and this writes nothing). Counts the
/// attempt, raises the token and records worker `?8` as the owner, as a claim would have.
pub(crate) const FAIL_HELD: &str = concat!(
    "\
UPDATE evc_deliveries
SET status = ?4, attempt = attempt + 1, fencing_token = fencing_token + 1, lease_owner = ?8,
    lease_until = NULL, last_error_code = ?6, updated_at = ?7,
    next_attempt_at = CASE WHEN ?4 = 'pending' THEN ?5 ELSE next_attempt_at END
WHERE event_id = ?1 AND consumer = ?2 AND fencing_token = ?3 - 1 AND status = 'pending' AND ",
    of_tenant!("evc_deliveries", "?9"),
    "
RETURNING event_id, consumer, generation, attempt, lease_owner, fencing_token"
);

/// Extends leases, fenced: `?1` a JSON array of `[event id, token]` pairs of consumer `?2`,
/// each still leased with its token, until `?3`. Returns the renewed ids.
pub(crate) const RENEW_FENCED: &str = concat!(
    "\
UPDATE evc_deliveries SET lease_until = ?3
WHERE consumer = ?2 AND status = 'leased'
    AND (event_id, fencing_token) IN (
        SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each(?1)
    ) AND ",
    of_tenant!("evc_deliveries", "?4"),
    "
RETURNING event_id"
);

/// Graceful shutdown: every lease of owner `?1` back to `pending` as if never claimed (attempt
/// count taken back, token kept raised, no attempt row); `?2` now; `?3` tenant (NULL: any).
pub(crate) const RELEASE_LEASES: &str = concat!(
    "\
UPDATE evc_deliveries
SET status = 'pending', lease_until = NULL, attempt = max(attempt - 1, 0), updated_at = ?2
WHERE lease_owner = ?1 AND status = 'leased' AND ",
    of_tenant!("evc_deliveries", "?3"),
);

/// Up to `?2` leases of tenant `?3` (NULL: every tenant) that ended before `?1`, soonest ended
/// first, with what recovery needs.
pub(crate) const EXPIRED_LEASES: &str = concat!(
    "\
SELECT d.rowid AS rowid, d.event_id, d.consumer, d.generation, d.attempt, d.lease_owner,
    d.fencing_token, d.updated_at
FROM evc_deliveries d
WHERE d.status = 'leased' AND d.lease_until < ?1 AND ",
    of_tenant!("d", "?3"),
    "
ORDER BY d.lease_until
LIMIT ?2"
);

/// Recovers one expired lease (by rowid `?1`, found by [`EXPIRED_LEASES`] in the same
/// transaction): to status `?2` (`pending` or `dead`), due `?3` (now).
pub(crate) const RECOVER_LEASE: &str = "\
UPDATE evc_deliveries
SET status = ?2, lease_until = NULL, next_attempt_at = ?3, last_error_code = 'lease_expired',
    updated_at = ?3
WHERE rowid = ?1 AND status = 'leased'";

/// The fence of a caller's transaction: delivery `?1` of consumer `?2` still leased with token
/// `?3`. A no-op update, so the caller's transaction holds the database's write lock from here
/// to its end: no recovery, claim or other fenced write can move the lease meanwhile. Returns
/// the delivery's generation; no row: stale (or of another tenant than `?4`; NULL: any).
pub(crate) const LOCK_LEASE: &str = concat!(
    "\
UPDATE evc_deliveries SET fencing_token = fencing_token
WHERE event_id = ?1 AND consumer = ?2 AND fencing_token = ?3 AND status = 'leased' AND ",
    of_tenant!("evc_deliveries", "?4"),
    "
RETURNING generation"
);

/// [`LOCK_LEASE`] under the name the effect and reconciliation writes use.
pub(crate) const FENCE_LEASE: &str = LOCK_LEASE;

/// [`FENCE_LEASE`] for a held lease ([`CLAIM_HELD`]): the delivery still `pending` with the
/// token below the held token `?3`, of tenant `?4` (NULL: any). Returns the delivery's
/// generation; no row: stale.
pub(crate) const FENCE_HELD: &str = concat!(
    "\
UPDATE evc_deliveries SET fencing_token = fencing_token
WHERE event_id = ?1 AND consumer = ?2 AND fencing_token = ?3 - 1 AND status = 'pending' AND ",
    of_tenant!("evc_deliveries", "?4"),
    "
RETURNING generation"
);

/// Records an effect once: `?1` consumer, `?2` effect key, `?3` event id, `?4` outcome digest,
/// `?5` token, `?6` now, `?7` idempotency namespace (NULL: the consumer has no executor
/// class); the row carries the event's tenant, and the key is unique within the consumer and
/// tenant, and within the namespace and tenant. Returns a row when inserted, none when
/// recorded before. (`WHERE true`: SQLite's grammar needs it between an `INSERT ... SELECT`
/// and its `ON CONFLICT`; no conflict target, so either unique index counts.)
pub(crate) const RECORD_EFFECT: &str = "\
INSERT INTO evc_consumer_effects (consumer, effect_key, event_id, outcome_digest,
    fencing_token, created_at, tenant_scope, idempotency_namespace)
SELECT ?1, ?2, ?3, ?4, ?5, ?6, (SELECT tenant_scope FROM evc_events WHERE event_id = ?3), ?7
WHERE true
ON CONFLICT DO NOTHING
RETURNING 1";

/// Whether consumer `?1`, or its idempotency namespace `?4` (NULL: none), has an effect row
/// under key `?2` in the tenant of event `?3` (what a shadow-mode handler is told).
pub(crate) const EFFECT_RECORDED: &str = "\
SELECT EXISTS (
    SELECT 1 FROM evc_consumer_effects
    WHERE (consumer = ?1 OR idempotency_namespace = ?4)
        AND effect_key = ?2 AND ifnull(tenant_scope, '*') = ifnull(
        (SELECT tenant_scope FROM evc_events WHERE event_id = ?3), '*')
)";

/// Records what a shadow-mode handler meant to do: `?1` consumer, `?2` event id, `?3`
/// generation, `?4` token, `?5` intended effects (a JSON array), `?6` now. One row per delivery
/// generation; a rerun keeps the first.
pub(crate) const RECORD_RECONCILIATION: &str = "\
INSERT INTO evc_reconciliations (consumer, event_id, generation, fencing_token, intended,
    recorded_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6)
ON CONFLICT (consumer, event_id, generation) DO NOTHING";

/// Counts `?2` stale-token refusals for consumer `?1` at `?3`.
pub(crate) const COUNT_STALE: &str = "\
INSERT INTO evc_stale_rejections (consumer, rejected, last_at) VALUES (?1, ?2, ?3)
ON CONFLICT (consumer) DO UPDATE SET rejected = rejected + excluded.rejected,
    last_at = excluded.last_at";

/// One worker's heartbeat: `?1` owner, `?2` consumer, `?3` now, `?4` where the payload policy
/// came from, `?5` the dispatcher's overrides (a JSON array of setting names).
pub(crate) const HEARTBEAT: &str = "\
INSERT INTO evc_heartbeats (owner, consumer, seen_at, payload_policy, dispatcher_overrides)
VALUES (?1, ?2, ?3, ?4, ?5)
ON CONFLICT (owner) DO UPDATE SET consumer = excluded.consumer, seen_at = excluded.seen_at,
    payload_policy = excluded.payload_policy,
    dispatcher_overrides = excluded.dispatcher_overrides";

/// Forgets the heartbeats of owners in the JSON array `?1` (a dispatcher that shut down is not
/// silent).
pub(crate) const FORGET_HEARTBEATS: &str = "\
DELETE FROM evc_heartbeats WHERE owner IN (SELECT value FROM json_each(?1))";

/// Opens the shadow-mode handler's savepoint (its writes are rolled back to it).
pub(crate) const SHADOW_SAVEPOINT: &str = "SAVEPOINT evc_shadow";

/// Undoes everything a shadow-mode handler wrote on the transaction.
pub(crate) const SHADOW_ROLLBACK: &str = "ROLLBACK TO SAVEPOINT evc_shadow";

// ---------------------------------------------------------------------------------------------
// Reads (tests, later the CLI).
// ---------------------------------------------------------------------------------------------

/// Delivery rows of delivery `?1` of consumer `?2` of tenant `?3` (NULL: any) in generation
/// order (ascending unless a suffix says otherwise).
macro_rules! deliveries {
    () => {
        concat!(
            "\
SELECT generation, status, attempt, fencing_token, lease_owner, lease_until, next_attempt_at,
    last_error_code, replay_id, discard_id
FROM evc_deliveries WHERE event_id = ?1 AND consumer = ?2 AND ",
            event_of_tenant!("?1", "?3"),
            "
ORDER BY generation"
        )
    };
}

/// The newest generation of delivery `?1` of consumer `?2`.
pub(crate) const DELIVERY: &str = concat!(deliveries!(), " DESC LIMIT 1");

/// Every generation of delivery `?1` of consumer `?2`, oldest first.
pub(crate) const DELIVERIES: &str = deliveries!();

/// The attempt rows of delivery `?1` of consumer `?2` (every generation) of tenant `?3` (NULL:
/// any), in the order written.
pub(crate) const ATTEMPTS: &str = concat!(
    "\
SELECT generation, attempt, owner, fencing_token, outcome, error_code, started_at, finished_at,
    duration_ms
FROM evc_delivery_attempts WHERE event_id = ?1 AND consumer = ?2 AND ",
    event_of_tenant!("?1", "?3"),
    "
ORDER BY id"
);

/// Deliveries of consumer `?1` whose status is in the JSON array `?2` (empty: any status), of
/// tenant `?3` (NULL: any).
pub(crate) const COUNT_DELIVERIES: &str = concat!(
    "\
SELECT count(*) FROM evc_deliveries d
WHERE d.consumer = ?1
    AND (json_array_length(?2) = 0 OR d.status IN (SELECT value FROM json_each(?2)))
    AND ",
    of_tenant!("d", "?3")
);

/// Attempt rows of consumer `?1` with outcome `?2`, of tenant `?3` (NULL: any).
pub(crate) const COUNT_ATTEMPTS: &str = concat!(
    "SELECT count(*) FROM evc_delivery_attempts a WHERE a.consumer = ?1 AND a.outcome = ?2 AND ",
    event_of_tenant!("a.event_id", "?3")
);

/// Events in the outbox whose type is in `?1` (a JSON array of strings; empty: any type), of
/// tenant `?2` (NULL: any).
pub(crate) const COUNT_EVENTS: &str = "\
SELECT count(*) FROM evc_events
WHERE (json_array_length(?1) = 0 OR event_type IN (SELECT value FROM json_each(?1)))
    AND (?2 IS NULL OR tenant_scope = ?2)";

/// The envelope of event `?1` (never its payload), if of tenant `?2` (NULL: any).
pub(crate) const EVENT: &str = "\
SELECT seq, event_type, schema_version, order_key, producer_class, tenant_scope,
    idempotency_key, trace_id, correlation_id, causation_id, payload_bytes
FROM evc_events WHERE event_id = ?1 AND (?2 IS NULL OR tenant_scope = ?2)";

/// The oldest `?1` reject rows written in tenant `?2`'s scope (NULL: every reject row).
pub(crate) const REJECTS: &str = "\
SELECT event_type, schema_version, reason_code, payload_digest, rejected_at
FROM evc_validation_rejects WHERE ?2 IS NULL OR tenant_scope = ?2 ORDER BY id LIMIT ?1";

/// Stale-token refusals counted for consumer `?1` (no row: none).
pub(crate) const STALE_REJECTIONS: &str = "\
SELECT rejected FROM evc_stale_rejections WHERE consumer = ?1";

/// The effect row of consumer `?1` under effect key `?2` in tenant `?3` (NULL: effects of
/// events without a tenant).
pub(crate) const EFFECT: &str = "\
SELECT event_id, outcome_digest, fencing_token, created_at
FROM evc_consumer_effects
WHERE consumer = ?1 AND effect_key = ?2 AND ifnull(tenant_scope, '*') = ifnull(?3, '*')";

/// The reconciliation rows of delivery `?1` of consumer `?2` of tenant `?3` (NULL: any),
/// oldest generation first.
pub(crate) const RECONCILIATIONS: &str = concat!(
    "\
SELECT generation, fencing_token, intended, recorded_at
FROM evc_reconciliations WHERE event_id = ?1 AND consumer = ?2 AND ",
    event_of_tenant!("?1", "?3"),
    "
ORDER BY generation"
);

// ---------------------------------------------------------------------------------------------
// Operator controls (docs/runtime.md, "Replay", "Pause, resume and modes"). The replay tables are
// declared in `runtime/migrations/sqlite/0002_evc_replays.sql`.
// ---------------------------------------------------------------------------------------------

/// The settled deliveries a replay selection takes, oldest event first (PostgreSQL's
/// `SETTLED_DELIVERIES` without the deployed requirement: the store reads it from the static
/// registry): `?1` consumer, `?2` a JSON array of statuses, `?3` event type (NULL: any), `?4` a
/// JSON array of event ids (empty: any), `?5` limit, `?6` tenant (NULL: any). No row locks:
/// apply runs it in its `BEGIN IMMEDIATE` transaction, which no other writer shares.
pub(crate) const SETTLED_DELIVERIES: &str = "\
SELECT d.event_id, d.consumer, d.generation, d.status, d.attempt, d.last_error_code,
    d.updated_at AS settled_at, e.event_type, e.schema_version
FROM evc_deliveries d
JOIN evc_events e ON e.event_id = d.event_id
WHERE d.consumer = ?1 AND d.status IN ('dead', 'quarantined')
    AND d.status IN (SELECT value FROM json_each(?2))
    AND (?3 IS NULL OR e.event_type = ?3)
    AND (json_array_length(?4) = 0 OR d.event_id IN (SELECT value FROM json_each(?4)))
    AND (?6 IS NULL OR e.tenant_scope = ?6)
ORDER BY d.event_seq, d.generation
LIMIT ?5";

/// The payload of each event in the JSON array `?1`, for replay's re-validation.
pub(crate) const REPLAY_PAYLOADS: &str = "\
SELECT event_id, payload FROM evc_events WHERE event_id IN (SELECT value FROM json_each(?1))";

/// The replay of consumer `?2` recorded under idempotency key `?1` in scope `?3` (a tenant, or
/// NULL: the scope of every tenant), if any: a key is unique per consumer and scope.
pub(crate) const REPLAY_BY_KEY: &str = "\
SELECT id, plan_digest, reason, approval_ref, approved_by, deliveries FROM evc_replays
WHERE idempotency_key = ?1 AND consumer = ?2 AND ifnull(tenant_scope, '*') = ifnull(?3, '*')";

/// The oldest `?1` replays applied in tenant `?2`'s scope (NULL: every replay), oldest first,
/// with their plans' planners.
pub(crate) const READ_REPLAYS: &str = "\
SELECT r.id, r.plan_digest, r.reason, r.approval_ref, r.idempotency_key, r.deliveries,
    r.applied_at, r.plan_id, p.planned_by, r.approved_by
FROM evc_replays r LEFT JOIN evc_plans p ON p.id = r.plan_id
WHERE ?2 IS NULL OR r.tenant_scope = ?2
ORDER BY r.id LIMIT ?1";

/// Records a proposed replay plan: `?1` consumer, `?2` digest, `?3` deliveries, `?4` planner,
/// `?5` now, `?6` the proposing handle's tenant (NULL: every tenant). Returns its id.
pub(crate) const INSERT_PLAN: &str = "\
INSERT INTO evc_plans (kind, consumer, plan_digest, deliveries, planned_by, planned_at,
    tenant_scope)
VALUES ('replay', ?1, ?2, ?3, ?4, ?5, ?6)
RETURNING id";

/// The recorded replay plans of consumer `?1` and digest `?2` proposed in tenant `?3`'s scope
/// (NULL: every plan): id, planner and whether a replay applied it, oldest first.
pub(crate) const PLANS_OF: &str = "\
SELECT p.id, p.planned_by,
    EXISTS (SELECT 1 FROM evc_replays r WHERE r.plan_id = p.id) AS applied
FROM evc_plans p
WHERE p.kind = 'replay' AND p.consumer = ?1 AND p.plan_digest = ?2
    AND (?3 IS NULL OR p.tenant_scope = ?3)
ORDER BY p.id";

/// The items of the replays in `?1` (a JSON array of ids), by replay and event id.
pub(crate) const READ_REPLAY_ITEMS: &str = "\
SELECT replay_id, event_id, consumer, generation, replayed_from, schema_version
FROM evc_replay_items WHERE replay_id IN (SELECT value FROM json_each(?1))
ORDER BY replay_id, event_id, consumer";

/// Records a replay as applied: `?1` consumer, `?2` plan digest, `?3` reason, `?4` approval
/// reference, `?5` idempotency key, `?6` deliveries, `?7` now, `?8` the recorded plan, `?9`
/// the approver, `?10` the applying handle's tenant (NULL: every tenant). Returns its id.
pub(crate) const INSERT_REPLAY: &str = "\
INSERT INTO evc_replays (consumer, plan_digest, reason, approval_ref, idempotency_key,
    deliveries, applied_at, plan_id, approved_by, tenant_scope)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)
RETURNING id";

/// The planned deliveries of consumer `?2` named by the JSON array `?3` of `[event id,
/// generation]` pairs, still dead or quarantined (the three statements of a replay's apply
/// share it).
macro_rules! planned {
    () => {
        "d.consumer = ?2 AND d.status IN ('dead', 'quarantined')
    AND (d.event_id, d.generation) IN (
        SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each(?3)
    )"
    };
}

/// A replay's items (first of its three statements): for replay `?1`, each planned delivery
/// ([`planned!`]) with the status it leaves and its event's version.
pub(crate) const INSERT_REPLAY_ITEMS: &str = concat!(
    "INSERT INTO evc_replay_items (replay_id, event_id, consumer, generation, replayed_from,
    schema_version)
SELECT ?1, d.event_id, d.consumer, d.generation, d.status, e.schema_version
FROM evc_deliveries d JOIN evc_events e ON e.event_id = d.event_id
WHERE ",
    planned!()
);

/// The next generation of each planned delivery ([`planned!`]): `pending`, due now (`?4`), no
/// attempt counted, the original's fencing token (so no token of the original is ever current
/// again) and replay `?1`'s id. Its row count is the replay's new deliveries.
pub(crate) const INSERT_NEXT_GENERATIONS: &str = concat!(
    "INSERT INTO evc_deliveries (event_id, consumer, generation, event_seq, order_key, status,
    attempt, next_attempt_at, fencing_token, replay_id, created_at, updated_at)
SELECT d.event_id, d.consumer, d.generation + 1, d.event_seq, d.order_key, 'pending', 0, ?4,
    d.fencing_token, ?1, ?4, ?4
FROM evc_deliveries d
WHERE ",
    planned!()
);

/// Supersedes each planned delivery ([`planned!`]; the new generations are pending, so they are
/// not taken): `replayed` at `?4`. The replay's `?1` is bound with the other two statements'
/// parameters and unused here (sqlx leaves extra arguments unbound).
pub(crate) const SUPERSEDE_PLANNED: &str = concat!(
    "UPDATE evc_deliveries AS d SET status = 'replayed', updated_at = ?4
WHERE ",
    planned!()
);

/// A consumer's operator state: `?1` consumer, paused when it is paused for every tenant or for
/// tenant `?2`; mode `?3` (the contract's) and revision 0 while no operator changed it.
pub(crate) const CONSUMER_STATE: &str = "\
SELECT coalesce(s.paused, 0) OR EXISTS (
        SELECT 1 FROM evc_tenant_pauses p WHERE p.consumer = ?1 AND p.tenant_scope = ?2
    ) AS paused,
    coalesce(s.mode, ?3) AS mode, coalesce(s.revision, 0) AS revision
FROM (SELECT 1) AS one LEFT JOIN evc_consumer_state s ON s.consumer = ?1";

/// Changes a consumer's operator state and raises its revision: `?1` consumer, `?2` paused
/// (NULL: unchanged), `?3` mode (NULL: unchanged), `?4` the contract's mode (for a first row),
/// `?5` now.
pub(crate) const CHANGE_CONSUMER_STATE: &str = "\
INSERT INTO evc_consumer_state (consumer, paused, mode, revision, updated_at)
VALUES (?1, coalesce(?2, 0), coalesce(?3, ?4), 1, ?5)
ON CONFLICT (consumer) DO UPDATE SET
    paused = coalesce(?2, paused),
    mode = coalesce(?3, mode),
    revision = revision + 1,
    updated_at = ?5
RETURNING paused, mode, revision";

/// Records a change of consumer `?1`'s operator state: `?2` `pause`, `resume` or `mode`, `?3`
/// the mode set (NULL unless a mode), `?4` who, `?5` why, `?6` now, `?7` the tenant it was made
/// for (NULL: every tenant).
pub(crate) const INSERT_STATE_CHANGE: &str = "\
INSERT INTO evc_state_changes (consumer, change, mode, changed_by, reason, changed_at,
    tenant_scope)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)";

/// The newest `?2` recorded changes of consumer `?1`'s operator state made in tenant `?3`'s
/// scope (NULL: every change), newest first.
pub(crate) const STATE_CHANGES: &str = "\
SELECT id, consumer, change, mode, tenant_scope, changed_by, reason, changed_at
FROM evc_state_changes WHERE consumer = ?1 AND (?3 IS NULL OR tenant_scope = ?3)
ORDER BY id DESC LIMIT ?2";

/// Pauses consumer `?1` for tenant `?2` at `?3`. Returns a row when it was not paused for the
/// tenant before.
pub(crate) const PAUSE_TENANT: &str = "\
INSERT INTO evc_tenant_pauses (consumer, tenant_scope, paused_at) VALUES (?1, ?2, ?3)
ON CONFLICT DO NOTHING
RETURNING 1";

/// Lifts tenant `?2`'s pause of consumer `?1` (a pause for every tenant is not the tenant's to
/// lift). Returns a row when there was one.
pub(crate) const RESUME_TENANT: &str = "\
DELETE FROM evc_tenant_pauses WHERE consumer = ?1 AND tenant_scope = ?2 RETURNING 1";

// ---------------------------------------------------------------------------------------------
// Observation (read only): status, lag, silent workers, the trace timeline.
// ---------------------------------------------------------------------------------------------

/// The deliveries of consumer `c.value` in status `$status` of tenant `?3` (NULL: any), for
/// [`STATUS_COUNTS`].
macro_rules! status_count {
    ($status:literal) => {
        concat!(
            "(SELECT count(*) FROM evc_deliveries d
        WHERE d.consumer = c.value AND d.status = '",
            $status,
            "' AND ",
            of_tenant!("d", "?3"),
            ")"
        )
    };
}

/// Per consumer of `?1` (a JSON array of names): deliveries pending, leased, dead and
/// quarantined of tenant `?3` (NULL: every tenant), the age in seconds at `?2` (now) of the
/// oldest pending one, and the operator state (paused for every tenant or for `?3`, mode
/// override; NULL mode: the contract's).
pub(crate) const STATUS_COUNTS: &str = concat!(
    "SELECT c.value AS consumer,\n    ",
    status_count!("pending"),
    " AS pending,\n    ",
    status_count!("leased"),
    " AS leased,\n    ",
    status_count!("dead"),
    " AS dead,\n    ",
    status_count!("quarantined"),
    " AS quarantined,
    (SELECT ?2 - d.created_at FROM evc_deliveries d
        WHERE d.consumer = c.value AND d.status = 'pending' AND ",
    of_tenant!("d", "?3"),
    "
        ORDER BY d.event_seq LIMIT 1) AS oldest_pending_s,
    coalesce(s.paused, 0) OR EXISTS (
        SELECT 1 FROM evc_tenant_pauses p WHERE p.consumer = c.value AND p.tenant_scope = ?3
    ) AS paused, s.mode AS mode,
    coalesce(r.rejected, 0) AS stale_rejections
FROM json_each(?1) AS c
LEFT JOIN evc_consumer_state s ON s.consumer = c.value
LEFT JOIN evc_stale_rejections r ON r.consumer = c.value
ORDER BY c.value"
);

/// Produce-to-ack lag samples: over the newest `?2` attempt rows of events of tenant `?3`
/// (NULL: any), those acked since `?1` (epoch seconds); seconds from the event's
/// `produced_at` to the ack.
pub(crate) const LAG_SAMPLE: &str = concat!(
    "\
WITH a AS (
    SELECT x.event_id, x.consumer, x.outcome, x.finished_at FROM evc_delivery_attempts x
    WHERE ",
    event_of_tenant!("x.event_id", "?3"),
    "
    ORDER BY x.id DESC LIMIT ?2
)
SELECT e.producer_class, a.consumer, a.finished_at - e.produced_at AS seconds
FROM a JOIN evc_events e ON e.event_id = a.event_id
WHERE a.outcome = 'acked' AND a.finished_at >= ?1"
);

/// Attempt duration samples over the same attempt rows as [`LAG_SAMPLE`] (every outcome), in
/// seconds.
pub(crate) const ATTEMPT_SAMPLE: &str = concat!(
    "\
WITH a AS (
    SELECT x.consumer, x.duration_ms, x.finished_at FROM evc_delivery_attempts x
    WHERE ",
    event_of_tenant!("x.event_id", "?3"),
    "
    ORDER BY x.id DESC LIMIT ?2
)
SELECT consumer, duration_ms / 1000.0 AS seconds FROM a WHERE finished_at >= ?1"
);

/// Appends refused since `?1` (epoch seconds), by event type and reason, over the newest `?2`
/// reject rows written in tenant `?3`'s scope (NULL: every reject row).
pub(crate) const RECENT_REJECTS: &str = "\
WITH r AS (
    SELECT event_type, reason_code, rejected_at FROM evc_validation_rejects
    WHERE ?3 IS NULL OR tenant_scope = ?3
    ORDER BY id DESC LIMIT ?2
)
SELECT event_type, reason_code, count(*) AS rejects, max(rejected_at) AS newest
FROM r
WHERE rejected_at >= ?1
GROUP BY event_type, reason_code
ORDER BY event_type, reason_code";

/// Every attempt ever recorded of the consumers `?1` (a JSON array) of tenant `?2` (NULL: any)
/// that ended one of the known ways, counted per
/// consumer, outcome and duration bucket: `bucket` indexes `AttemptTotals::durations`, from
/// the bounds of `DURATION_BUCKETS_MS`. Reads the whole table.
pub(crate) static ATTEMPT_TOTALS: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "SELECT consumer, outcome, {} AS bucket,
    count(*) AS attempts, sum(duration_ms) AS duration_ms
FROM evc_delivery_attempts a
WHERE consumer IN (SELECT value FROM json_each(?1)) AND outcome IN ({})
    AND {}
GROUP BY consumer, outcome, bucket",
        crate::store::observe::duration_bucket("duration_ms"),
        crate::store::observe::known_outcomes(),
        event_of_tenant!("a.event_id", "?2"),
    )
});

/// Workers silent at `?2` (now) for longer than their consumer's heartbeat threshold: `?1` a
/// JSON object of consumer names to thresholds in milliseconds. Longest silent first.
pub(crate) const SILENT_WORKERS: &str = "\
SELECT h.owner, h.consumer, ?2 - h.seen_at AS silent_s, t.value AS threshold_ms
FROM evc_heartbeats h JOIN json_each(?1) AS t ON t.key = h.consumer
WHERE h.seen_at < ?2 - t.value / 1000.0
ORDER BY h.seen_at, h.owner";

/// Every worker of the consumers in `?1` (a JSON array) and where its settings came from.
pub(crate) const WORKER_SETTINGS: &str = "\
SELECT owner, consumer, payload_policy, dispatcher_overrides FROM evc_heartbeats
WHERE consumer IN (SELECT value FROM json_each(?1))
ORDER BY consumer, owner";

/// Up to `?2` events after seq `?1` of tenant `?3` (NULL: any), in `seq` order: one writer at a
/// time commits, so `seq` is commit order and PostgreSQL's writer transaction is not needed.
pub(crate) const FEED: &str = "\
SELECT seq, event_id, event_type, schema_version, order_key, producer_class, tenant_scope,
    trace_id, correlation_id, causation_id, produced_at, payload
FROM evc_events WHERE seq > ?1 AND (?3 IS NULL OR tenant_scope = ?3) ORDER BY seq LIMIT ?2";

/// The payload of event `?1` of tenant `?2` (NULL: any), as text.
pub(crate) const READ_PAYLOAD: &str =
    "SELECT payload FROM evc_events WHERE event_id = ?1 AND (?2 IS NULL OR tenant_scope = ?2)";

/// The newest event's seq (0: none). Every tenant's: a feed position says where the outbox
/// stands, not what a tenant sees there.
pub(crate) const FEED_HEAD: &str = "SELECT coalesce(max(seq), 0) FROM evc_events";

/// The deliveries of consumer `?1` of tenant `?2` (NULL: any) leased now, in event order, as
/// PostgreSQL's.
pub(crate) const LEASES: &str = concat!(
    "\
SELECT d.event_id, d.generation, d.event_seq, d.order_key, d.lease_owner, d.fencing_token,
    d.attempt, d.lease_until
FROM evc_deliveries d WHERE d.consumer = ?1 AND d.status = 'leased' AND ",
    of_tenant!("d", "?2"),
    "
ORDER BY d.event_seq, d.generation"
);

/// Everything recorded for trace `?1` about events of tenant `?2` (NULL: any), replays applied
/// in its scope only, in time order, as PostgreSQL's timeline (no discards: this store has none). NULLs sort last, as PostgreSQL
/// sorts them.
pub(crate) const TIMELINE: &str = "\
WITH e AS (
    SELECT event_id, event_type, schema_version, produced_at, seq FROM evc_events
    WHERE trace_id = ?1 AND (?2 IS NULL OR tenant_scope = ?2)
)
SELECT t.at, t.kind, t.event_id, t.consumer, t.detail, t.attempt
FROM (
    SELECT e.produced_at AS at, 0 AS rank, e.seq AS seq, 'event' AS kind, e.event_id AS event_id,
        NULL AS consumer, e.event_type || ' ' || e.schema_version AS detail, NULL AS attempt
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
    SELECT r.applied_at, 3, e.seq, 'replay', i.event_id, i.consumer,
        'replay ' || r.id || ' of generation ' || i.generation || ' from ' || i.replayed_from
            || ' (approval ' || r.approval_ref
            || coalesce(', proposed by ' || p.planned_by, '')
            || coalesce(', approved by ' || r.approved_by, '') || ')',
        NULL
    FROM e JOIN evc_replay_items i ON i.event_id = e.event_id
    JOIN evc_replays r ON r.id = i.replay_id AND (?2 IS NULL OR r.tenant_scope = ?2)
    LEFT JOIN evc_plans p ON p.id = r.plan_id
) AS t
ORDER BY t.at, t.rank, t.seq, t.consumer IS NULL, t.consumer, t.attempt IS NULL, t.attempt";

/// What a lifecycle event about a delivery (`job.dead_lettered`) needs of its event `?1`:
/// type, version, tenant scope and trace, and the time of the state change `?2` (epoch
/// seconds) in RFC 3339, UTC. Never the payload.
pub(crate) const LIFECYCLE_SOURCE: &str = "\
SELECT event_type, schema_version, tenant_scope, trace_id, parent_span_id, trace_flags,
    strftime('%Y-%m-%dT%H:%M:%fZ', ?2, 'unixepoch') AS now
FROM evc_events WHERE event_id = ?1";

/// Epoch seconds `?1` in RFC 3339, UTC (the time a lifecycle event names).
pub(crate) const RFC3339_AT: &str = "SELECT strftime('%Y-%m-%dT%H:%M:%fZ', ?1, 'unixepoch')";

/// The replay that wrote generation `?3` of delivery `?1` for consumer `?2` (none for a
/// generation no replay wrote).
pub(crate) const REPLAY_OF: &str = "\
SELECT replay_id FROM evc_replay_items
WHERE event_id = ?1 AND consumer = ?2 AND generation = ?3 - 1";

/// The tenant scope shared by every event of replay `?1`'s items; NULL when they have none,
/// several, or some have none.
pub(crate) const REPLAY_TENANT: &str = "\
SELECT CASE WHEN count(*) > 0 AND count(e.tenant_scope) = count(*)
        AND min(e.tenant_scope) = max(e.tenant_scope)
    THEN min(e.tenant_scope) END AS tenant_scope
FROM evc_replay_items i
JOIN evc_events e ON e.event_id = i.event_id
WHERE i.replay_id = ?1";

/// Replay `?1`'s deliveries (the generation after each of its items): how many it made, how
/// many are still `pending` or `leased`, how many failed again (settled but not acked: an ack
/// deletes the row, so a missing row is an ack), of those how many are quarantined; and the
/// time `?2` (epoch seconds) in RFC 3339, UTC. No row: no such replay.
pub(crate) const REPLAY_PROGRESS: &str = "\
SELECT r.deliveries,
    count(*) FILTER (WHERE d.status IN ('pending', 'leased')) AS outstanding,
    count(*) FILTER (WHERE d.status IN ('dead', 'quarantined', 'replayed', 'discarded'))
        AS failed,
    count(*) FILTER (WHERE d.status = 'quarantined') AS quarantined,
    strftime('%Y-%m-%dT%H:%M:%fZ', ?2, 'unixepoch') AS now
FROM evc_replays r
LEFT JOIN evc_replay_items i ON i.replay_id = r.id
LEFT JOIN evc_deliveries d ON d.event_id = i.event_id AND d.consumer = i.consumer
    AND d.generation = i.generation + 1
WHERE r.id = ?1
GROUP BY r.deliveries";

// ---------------------------------------------------------------------------------------------
// The relay's cursors (`Cursors`).
// ---------------------------------------------------------------------------------------------

/// Takes cursor `?1` for owner `?2` until `?3` (epoch seconds), when it is new, its lease ran
/// out before `?4` (now) or `?2` holds it: a new token. No row: another owner holds it.
pub(crate) const TAKE_CURSOR: &str = "\
INSERT INTO evc_relay_cursors AS c (name, owner, token, lease_until, advanced_at)
VALUES (?1, ?2, 1, ?3, ?4)
ON CONFLICT (name) DO UPDATE
SET owner = excluded.owner, token = c.token + 1, lease_until = excluded.lease_until,
    advanced_at = excluded.advanced_at
WHERE c.lease_until < ?4 OR c.owner = excluded.owner
RETURNING token, writer, seq";

/// Moves cursor `?1` to (`?3`, `?4`) and its lease to `?5`, at `?6` (epoch seconds), adding
/// `?7` events passed at rate `?8`, if `?2` is its token. No row: stale.
pub(crate) const ADVANCE_CURSOR: &str = "\
UPDATE evc_relay_cursors
SET writer = ?3, seq = ?4, lease_until = ?5, advanced_at = ?6,
    published = published + ?7, rate_per_s = ?8,
    progressed_at = CASE WHEN ?7 > 0 THEN ?6 ELSE progressed_at END
WHERE name = ?1 AND token = ?2
RETURNING token";

/// Counts a failed round of cursor `?1` with error `?3` at `?4` (epoch seconds), if `?2` is its
/// token. No row: stale.
pub(crate) const NOTE_CURSOR_FAILURE: &str = "\
UPDATE evc_relay_cursors
SET failed_rounds = failed_rounds + 1, failed_at = ?4, last_error = ?3
WHERE name = ?1 AND token = ?2
RETURNING token";

/// Ends the lease of cursor `?1` at `?3` (now), if `?2` is its token. No row: stale.
pub(crate) const RELEASE_CURSOR: &str = "\
UPDATE evc_relay_cursors SET lease_until = ?3 WHERE name = ?1 AND token = ?2 RETURNING token";

/// The columns of a cursor; `failing` the last error while it is newer than the last progress.
macro_rules! cursor_columns {
    () => {
        "name, writer, seq, owner, token, lease_until, advanced_at, published, rate_per_s,
    progressed_at, failed_rounds,
    CASE WHEN failed_at > progressed_at THEN last_error END AS failing"
    };
}

/// Cursor `?1`.
pub(crate) const READ_CURSOR: &str = concat!(
    "SELECT ",
    cursor_columns!(),
    "\nFROM evc_relay_cursors WHERE name = ?1"
);

/// Every cursor by name, with whether a lease holds it at `?2` (now) and how many events of
/// tenant `?3` (NULL: any) are after it (counted up to `?1`).
pub(crate) const RELAY_CURSORS: &str = concat!(
    "SELECT ",
    cursor_columns!(),
    ",
    c.lease_until > ?2 AS held,
    (SELECT count(*) FROM (
        SELECT 1 FROM evc_events e
        WHERE e.seq > c.seq AND (?3 IS NULL OR e.tenant_scope = ?3) LIMIT ?1
    )) AS behind
FROM evc_relay_cursors c ORDER BY name"
);

// ---------------------------------------------------------------------------------------------
// Schedules (docs/runtime.md, "Schedules"): `evc_schedules`, migration 0014. The round's
// transaction is the store's one writer, which is its lock.
// ---------------------------------------------------------------------------------------------

/// The lag of consumer `$1` for events of producer class `$2` at `$3` (epoch seconds): how long
/// its longest-waiting open (pending or leased) delivery of such an event has waited, in
/// milliseconds, and that delivery's event, as PostgreSQL's `PAIR_LAG` measures it. No row:
/// none waits.
pub(crate) const PAIR_LAG: &str = "\
SELECT CAST(($3 - x.since) * 1000 AS INTEGER) AS lag_ms, x.event_id
FROM (
    SELECT CASE WHEN d.attempt = 0 THEN max(d.created_at, d.next_attempt_at)
            ELSE d.created_at END AS since,
        d.event_id
    FROM evc_deliveries d JOIN evc_events e ON e.event_id = d.event_id
    WHERE d.consumer = $1 AND d.status IN ('pending', 'leased') AND e.producer_class = $2
) x
WHERE x.since <= $3
ORDER BY x.since
LIMIT 1";

/// The open breach of consumer `$1` and producer class `$2`, if any.
pub(crate) const OPEN_BREACH: &str = "\
SELECT id, threshold_ms FROM evc_lag_breaches
WHERE consumer = $1 AND producer_class = $2 AND closed_at IS NULL";

/// Opens a breach of consumer `$1` and producer class `$2` (threshold `$3`, lag `$4` ms, the
/// waiting event `$5`) at `$6` (epoch seconds); returns its id.
pub(crate) const OPEN_LAG_BREACH: &str = "\
INSERT INTO evc_lag_breaches (consumer, producer_class, threshold_ms, lag_ms, oldest_event_id,
    opened_at)
VALUES ($1, $2, $3, $4, $5, $6)
RETURNING id";

/// Closes breach `$1` at `$2` (epoch seconds), never before it opened.
pub(crate) const CLOSE_LAG_BREACH: &str = "\
UPDATE evc_lag_breaches SET closed_at = max($2, opened_at) WHERE id = $1 AND closed_at IS NULL";

/// The breaches, open first, then the newest closed, at most `$1`.
pub(crate) const LAG_BREACHES: &str = "\
SELECT id, consumer, producer_class, threshold_ms, lag_ms, oldest_event_id, opened_at, closed_at
FROM evc_lag_breaches
ORDER BY closed_at IS NOT NULL, coalesce(closed_at, opened_at) DESC, id DESC
LIMIT $1";

/// Where schedule `$1` stands, in epoch seconds.
pub(crate) const SCHEDULE_POSITION: &str =
    "SELECT since, last_slot, cron, event_type FROM evc_schedules WHERE schedule = $1";

/// Records schedule `$1`'s cron expression `$2` and tick event `$3` (the build's), so that the
/// status report reads its next slot from them.
pub(crate) const RESTATE_SCHEDULE: &str =
    "UPDATE evc_schedules SET cron = $2, event_type = $3 WHERE schedule = $1";

/// Starts schedule `$1` (cron `$2`, tick event `$3`) at `$4` (epoch seconds).
pub(crate) const START_SCHEDULE: &str = "\
INSERT INTO evc_schedules (schedule, cron, event_type, since)
VALUES ($1, $2, $3, $4)
ON CONFLICT (schedule) DO NOTHING";

/// Moves schedule `$1` (cron `$2`, tick event `$3`) to slot `$4`, adding `$5` ticks and `$6`
/// skipped slots, at `$7` (epoch seconds).
pub(crate) const MOVE_SCHEDULE: &str = "\
UPDATE evc_schedules
SET cron = $2, event_type = $3, last_slot = $4,
    ticks = ticks + $5, skipped = skipped + $6, ticked_at = $7
WHERE schedule = $1";

/// Every schedule, by name.
pub(crate) const SCHEDULE_STATES: &str = "\
SELECT schedule, cron, event_type, since, last_slot, ticks, skipped, ticked_at
FROM evc_schedules
ORDER BY schedule";

/// The event type and version of event `?1`, if it is in tenant `?2` (NULL: any tenant).
pub(crate) const EVENT_TYPE_OF: &str = "\
SELECT event_type, schema_version FROM evc_events
WHERE event_id = ?1 AND (?2 IS NULL OR tenant_scope = ?2)";

/// The newest mode other than `off` an operator set for consumer `?1`, if any.
pub(crate) const LAST_ACTIVE_MODE: &str = "\
SELECT mode FROM evc_state_changes
WHERE consumer = ?1 AND change = 'mode' AND mode <> 'off'
ORDER BY id DESC LIMIT 1";

/// Records the legacy outcome `?3` (a JSON list of effects) of consumer `?1` for event `?2` at
/// `?4`; one per pair, the first stays.
pub(crate) const RECORD_LEGACY_OUTCOME: &str = "\
INSERT INTO evc_legacy_outcomes (consumer, event_id, outcome, recorded_at) VALUES (?1, ?2, ?3, ?4)
ON CONFLICT (consumer, event_id) DO NOTHING";

/// When consumer `?1` last entered shadow mode by an operator's change, NULL when none did.
pub(crate) const SHADOW_SINCE: &str = "\
SELECT max(changed_at) FROM evc_state_changes
WHERE consumer = ?1 AND change = 'mode' AND mode = 'shadow'";

/// Consumer `?1`'s shadow runs since it last entered shadow mode (every one when it never
/// did), optionally of event `?2` only: the newest generation's intents of each event, the
/// legacy outcome recorded for the event, and whether an operator explained a difference in
/// the same window.
pub(crate) const SHADOW_RUNS: &str = "\
WITH since AS (
    SELECT coalesce(max(changed_at), -1e308) AS at FROM evc_state_changes
    WHERE consumer = ?1 AND change = 'mode' AND mode = 'shadow'
), runs AS (
    SELECT r.event_id, r.intended, r.recorded_at,
        row_number() OVER (PARTITION BY r.event_id ORDER BY r.generation DESC) AS newest
    FROM evc_reconciliations r
    WHERE r.consumer = ?1 AND r.recorded_at >= (SELECT at FROM since)
        AND (?2 IS NULL OR r.event_id = ?2)
)
SELECT runs.event_id, runs.intended, l.outcome AS legacy,
    EXISTS (SELECT 1 FROM evc_cutover_explanations x
        WHERE x.consumer = ?1 AND x.event_id = runs.event_id
            AND x.explained_at >= (SELECT at FROM since)) AS explained,
    runs.recorded_at
FROM runs LEFT JOIN evc_legacy_outcomes l ON l.consumer = ?1 AND l.event_id = runs.event_id
WHERE runs.newest = 1
ORDER BY runs.recorded_at, runs.event_id";

/// How far consumer `?1` is on its way through its cut-over gate: when it last entered shadow
/// mode, its shadow runs since (events), and how many of them have a legacy outcome, each
/// counted up to `?2`.
/// Each count stops at the limit, an event counted by its newest generation (see
/// PostgreSQL's).
pub(crate) const GATE_PROGRESS: &str = "\
WITH since AS (
    SELECT coalesce(max(changed_at), -1e308) AS at, max(changed_at) AS shown
    FROM evc_state_changes
    WHERE consumer = ?1 AND change = 'mode' AND mode = 'shadow'
)
SELECT (SELECT shown FROM since) AS since,
    (SELECT count(*) FROM (
        SELECT 1 FROM evc_reconciliations r
        WHERE r.consumer = ?1 AND r.recorded_at >= (SELECT at FROM since)
            AND NOT EXISTS (SELECT 1 FROM evc_reconciliations n
                WHERE n.consumer = ?1 AND n.event_id = r.event_id AND n.generation > r.generation)
        LIMIT ?2)) AS shadow_runs,
    (SELECT count(*) FROM (
        SELECT 1 FROM evc_reconciliations r
        JOIN evc_legacy_outcomes l ON l.consumer = ?1 AND l.event_id = r.event_id
        WHERE r.consumer = ?1 AND r.recorded_at >= (SELECT at FROM since)
            AND NOT EXISTS (SELECT 1 FROM evc_reconciliations n
                WHERE n.consumer = ?1 AND n.event_id = r.event_id AND n.generation > r.generation)
        LIMIT ?2)) AS compared";

/// Records that `?3` explains, for `?4`, the difference of consumer `?1`'s shadow run of event
/// `?2`, at `?5`, for tenant `?6` (NULL: every tenant).
pub(crate) const EXPLAIN_DIFFERENCE: &str = "\
INSERT INTO evc_cutover_explanations (consumer, event_id, explained_by, reason, explained_at,
    tenant_scope)
VALUES (?1, ?2, ?3, ?4, ?5, ?6)";

/// The events of the types of `?1` (a JSON list of `[event type, cutoff]`) produced before
/// their type's cutoff whose deliveries are all settled: what a retention purge removes.
pub(crate) const EXPIRED_EVENTS: &str = "\
SELECT e.event_id FROM evc_events e
JOIN json_each(?1) AS c
    ON e.event_type = json_extract(c.value, '$[0]')
    AND e.produced_at < json_extract(c.value, '$[1]')
WHERE NOT EXISTS (SELECT 1 FROM evc_deliveries d
    WHERE d.event_id = e.event_id AND d.status IN ('pending', 'leased'))";

/// Removes the attempts of the events of `?1` (a JSON list of ids), and those finished before
/// `?2` of deliveries no longer open.
pub(crate) const PURGE_ATTEMPTS: &str = "\
DELETE FROM evc_delivery_attempts AS a
WHERE a.event_id IN (SELECT value FROM json_each(?1))
    OR (a.finished_at < ?2 AND NOT EXISTS (SELECT 1 FROM evc_deliveries d
        WHERE d.event_id = a.event_id AND d.consumer = a.consumer
            AND d.status IN ('pending', 'leased')))";

/// Removes the shadow runs of the events of `?1`, and those recorded before `?2`.
pub(crate) const PURGE_RECONCILIATIONS: &str = "\
DELETE FROM evc_reconciliations
WHERE event_id IN (SELECT value FROM json_each(?1)) OR recorded_at < ?2";

/// Removes the replay items of the events of `?1`.
pub(crate) const PURGE_REPLAY_ITEMS: &str = "\
DELETE FROM evc_replay_items WHERE event_id IN (SELECT value FROM json_each(?1))";

/// Removes the delivery rows of the events of `?1` (all settled).
pub(crate) const PURGE_DELIVERIES: &str = "\
DELETE FROM evc_deliveries WHERE event_id IN (SELECT value FROM json_each(?1))";

/// Removes the events of `?1`.
pub(crate) const PURGE_EVENTS: &str = "\
DELETE FROM evc_events WHERE event_id IN (SELECT value FROM json_each(?1))";

/// Removes the idempotency records of the consumers of `?1` (a JSON list of `[consumer,
/// cutoff]`) created before their consumer's cutoff whose event is gone.
pub(crate) const PURGE_EFFECTS: &str = "\
DELETE FROM evc_consumer_effects AS f
WHERE EXISTS (SELECT 1 FROM json_each(?1) AS c
        WHERE json_extract(c.value, '$[0]') = f.consumer
            AND f.created_at < json_extract(c.value, '$[1]'))
    AND NOT EXISTS (SELECT 1 FROM evc_events e WHERE e.event_id = f.event_id)";

/// Removes the rejects recorded before `?1`.
pub(crate) const PURGE_REJECTS: &str = "\
DELETE FROM evc_validation_rejects WHERE rejected_at < ?1";

/// Usage evidence: pairs of event types appended in one trace since `?1` (epoch seconds), in
/// at least `?2` traces, most first; at most `?3`.
pub(crate) const CO_TRIGGERED: &str = "\
WITH t AS (
    SELECT DISTINCT trace_id, event_type
    FROM evc_events
    WHERE trace_id IS NOT NULL AND produced_at >= ?1
)
SELECT a.event_type AS first, b.event_type AS second, count(*) AS n
FROM t a JOIN t b ON b.trace_id = a.trace_id AND b.event_type > a.event_type
GROUP BY a.event_type, b.event_type
HAVING count(*) >= ?2
ORDER BY n DESC, first, second
LIMIT ?3";

/// Usage evidence: pairs of consumers with a failed attempt in one slot of `?2` seconds since
/// `?1`, in at least `?3` slots, most first; at most `?4`.
pub(crate) const FAILING_TOGETHER: &str = "\
WITH f AS (
    SELECT DISTINCT consumer, CAST(finished_at / ?2 AS INTEGER) AS slot
    FROM evc_delivery_attempts
    WHERE finished_at >= ?1 AND outcome <> 'acked'
)
SELECT a.consumer AS first, b.consumer AS second, count(*) AS n
FROM f a JOIN f b ON b.slot = a.slot AND b.consumer > a.consumer
GROUP BY a.consumer, b.consumer
HAVING count(*) >= ?3
ORDER BY n DESC, first, second
LIMIT ?4";

/// Usage evidence: (producer class, consumer) pairs with at least `?2` dead-lettered or
/// quarantined deliveries, or lag breaches opened, since `?1`; most first, at most `?3`.
pub(crate) const CHRONIC_PAIRS: &str = "\
WITH dl AS (
    SELECT e.producer_class, a.consumer, count(*) AS n
    FROM evc_delivery_attempts a JOIN evc_events e ON e.event_id = a.event_id
    WHERE a.finished_at >= ?1 AND a.outcome IN ('dead', 'quarantined')
    GROUP BY e.producer_class, a.consumer
), lb AS (
    SELECT producer_class, consumer, count(*) AS n
    FROM evc_lag_breaches
    WHERE opened_at >= ?1
    GROUP BY producer_class, consumer
), pairs AS (
    SELECT producer_class, consumer FROM dl UNION SELECT producer_class, consumer FROM lb
)
SELECT p.producer_class, p.consumer, coalesce(dl.n, 0) AS dead_letters,
    coalesce(lb.n, 0) AS lag_breaches
FROM pairs p
LEFT JOIN dl ON dl.producer_class = p.producer_class AND dl.consumer = p.consumer
LEFT JOIN lb ON lb.producer_class = p.producer_class AND lb.consumer = p.consumer
WHERE coalesce(dl.n, 0) >= ?2 OR coalesce(lb.n, 0) >= ?2
ORDER BY coalesce(dl.n, 0) + coalesce(lb.n, 0) DESC, 1, 2
LIMIT ?3";

/// Usage evidence: each consumer's deliveries dead-lettered or quarantined since `?1`.
pub(crate) const ESCALATIONS: &str = "\
SELECT consumer, count(*) AS n
FROM evc_delivery_attempts
WHERE finished_at >= ?1 AND outcome IN ('dead', 'quarantined')
GROUP BY consumer";

/// Whether the snapshot of slot `?1` (epoch milliseconds) is recorded, and whether any
/// snapshot's slot is before `?2`.
pub(crate) const EVIDENCE_SNAPSHOT_STATE: &str = "\
SELECT EXISTS (SELECT 1 FROM evc_evidence_snapshots WHERE slot_ms = ?1),
    EXISTS (SELECT 1 FROM evc_evidence_snapshots WHERE slot_ms < ?2)";

/// Records the snapshot `?3` (a report, JSON) of slot `?1`, recorded at `?2`; a slot already
/// recorded keeps its snapshot.
pub(crate) const RECORD_EVIDENCE_SNAPSHOT: &str = "\
INSERT INTO evc_evidence_snapshots (slot_ms, recorded_at, report) VALUES (?1, ?2, ?3)
ON CONFLICT (slot_ms) DO NOTHING";

/// Removes the snapshots of slots before `?1` (epoch milliseconds).
pub(crate) const REMOVE_EVIDENCE_SNAPSHOTS: &str =
    "DELETE FROM evc_evidence_snapshots WHERE slot_ms < ?1";

/// The newest `?1` snapshots, newest slot first.
pub(crate) const READ_EVIDENCE_SNAPSHOTS: &str = "\
SELECT slot_ms, recorded_at, report FROM evc_evidence_snapshots
ORDER BY slot_ms DESC
LIMIT ?1";

/// The newest `?1` purges, newest first.
pub(crate) const READ_PURGES: &str = "\
SELECT id, ledger, cutoff, reason, actor, purged_at, counts
FROM evc_purges
ORDER BY id DESC
LIMIT ?1";

/// The newest purge of each ledger, by ledger.
pub(crate) const NEWEST_PURGES: &str = "\
SELECT id, ledger, cutoff, reason, actor, purged_at, counts
FROM evc_purges
WHERE id IN (SELECT max(id) FROM evc_purges GROUP BY ledger)
ORDER BY ledger";

/// Records a retention purge: the time its periods counted back from `?1`, reason `?2`, actor
/// `?3`, when `?4`, the rows removed per table `?5` (a JSON object).
pub(crate) const RECORD_PURGE: &str = "\
INSERT INTO evc_purges (ledger, cutoff, reason, actor, purged_at, counts)
VALUES ('retention', ?1, ?2, ?3, ?4, ?5)
RETURNING id";

/// The events of types `?1` (a JSON array) of which consumer `?2` has neither a delivery nor
/// an attempt (an ack deletes the delivery and keeps its attempt) and that no applied
/// inventory expired, in tenant `?4` (NULL: every tenant), oldest first, at most `?3`: an
/// inventory's candidates.
pub(crate) const INVENTORY_CANDIDATES: &str = "\
SELECT e.event_id, e.event_type, e.schema_version, e.tenant_scope, e.produced_at, e.payload
FROM evc_events e
WHERE e.event_type IN (SELECT value FROM json_each(?1))
    AND NOT EXISTS (
        SELECT 1 FROM evc_deliveries d WHERE d.event_id = e.event_id AND d.consumer = ?2)
    AND NOT EXISTS (
        SELECT 1 FROM evc_delivery_attempts a WHERE a.event_id = e.event_id AND a.consumer = ?2)
    AND NOT EXISTS (
        SELECT 1 FROM evc_inventory_items i
        WHERE i.event_id = e.event_id AND i.consumer = ?2 AND i.class = 'expire')
    AND (?4 IS NULL OR e.tenant_scope = ?4)
ORDER BY e.seq
LIMIT ?3";

/// The newest time a retention purge counted back from (epoch seconds; NULL: none ran).
pub(crate) const RETENTION_PURGED_THROUGH: &str =
    "SELECT max(cutoff) FROM evc_purges WHERE ledger = 'retention'";

/// The inventory of consumer `?1` applied under idempotency key `?2` in tenant `?3` (NULL: the
/// every-tenant handle's), if any.
pub(crate) const INVENTORY_BY_KEY: &str = "\
SELECT id, plan_digest, reason, approval_ref, approved_by, counts
FROM evc_inventories
WHERE consumer = ?1 AND idempotency_key = ?2
    AND coalesce(tenant_scope, '') = coalesce(?3, '')";

/// Records an inventory plan: `?1` consumer, `?2` digest, `?3` events, `?4` planner, `?5`
/// when, `?6` tenant. Returns its id.
pub(crate) const INSERT_INVENTORY_PLAN: &str = "\
INSERT INTO evc_inventory_plans (consumer, plan_digest, events, planned_by, planned_at,
    tenant_scope)
VALUES (?1, ?2, ?3, ?4, ?5, ?6)
RETURNING id";

/// The recorded inventory plans of consumer `?1` and digest `?2` proposed in tenant `?3`'s
/// scope (NULL: every plan): id, planner and whether an inventory applied it, oldest first.
pub(crate) const INVENTORY_PLANS_OF: &str = "\
SELECT p.id, p.planned_by,
    EXISTS (SELECT 1 FROM evc_inventories i WHERE i.plan_id = p.id) AS applied
FROM evc_inventory_plans p
WHERE p.consumer = ?1 AND p.plan_digest = ?2 AND (?3 IS NULL OR p.tenant_scope = ?3)
ORDER BY p.id";

/// Records an inventory as applied: `?1` consumer, `?2` plan, `?3` digest, `?4` reason, `?5`
/// approval reference, `?6` idempotency key, `?7` approver, `?8` counts (JSON), `?9` tenant,
/// `?10` when. Returns its id.
pub(crate) const INSERT_INVENTORY: &str = "\
INSERT INTO evc_inventories (consumer, plan_id, plan_digest, reason, approval_ref,
    idempotency_key, approved_by, counts, tenant_scope, applied_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)
RETURNING id";

/// Records inventory `?1`'s items for consumer `?2` from `?3`, a JSON array of `[event id,
/// class, reason, target version, payload digest, repaired digest]`; each in its event's
/// tenant.
pub(crate) const INSERT_INVENTORY_ITEMS: &str = "\
INSERT INTO evc_inventory_items (inventory_id, event_id, consumer, class, reason,
    target_version, payload_digest, repaired_digest, tenant_scope)
SELECT ?1, e.event_id, ?2, i.value ->> 1, i.value ->> 2, i.value ->> 3, i.value ->> 4,
    i.value ->> 5, e.tenant_scope
FROM json_each(?3) AS i JOIN evc_events e ON e.event_id = i.value ->> 0";

/// A pending delivery to consumer `?1` of each event in `?2` (a JSON array of ids), with its
/// order key when `?3` (the consumer orders per key), due `?4` (now), as an append writes them.
pub(crate) const DELIVER_INVENTORY: &str = "\
INSERT INTO evc_deliveries (event_id, consumer, event_seq, order_key, next_attempt_at,
    created_at, updated_at)
SELECT e.event_id, ?1, e.seq, CASE WHEN ?3 THEN e.order_key END, ?4, ?4, ?4
FROM evc_events e WHERE e.event_id IN (SELECT value FROM json_each(?2))";

/// Quarantines the pending deliveries [`DELIVER_INVENTORY`] wrote to consumer `?1` of the
/// events in `?2` (a JSON array of ids), at `?3`: they wait for an operator's replay or
/// discard.
pub(crate) const QUARANTINE_INVENTORY: &str = "\
UPDATE evc_deliveries SET status = 'quarantined', updated_at = ?3
WHERE consumer = ?1 AND event_id IN (SELECT value FROM json_each(?2)) AND generation = 0
    AND status = 'pending'";

/// The newest applied inventory of each consumer in tenant `?1` (NULL: every tenant), by
/// consumer.
pub(crate) const NEWEST_INVENTORIES: &str = "\
SELECT id, consumer, counts, approved_by, reason, applied_at
FROM evc_inventories
WHERE id IN (
    SELECT max(id) FROM evc_inventories WHERE ?1 IS NULL OR tenant_scope = ?1 GROUP BY consumer)
ORDER BY consumer";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fenced_statements_present_the_token() {
        for statement in [ACK_FENCED, FAIL_FENCED, LOCK_LEASE] {
            assert!(statement.contains("fencing_token = ?3 AND status = 'leased'"));
        }
        assert!(ACK_BATCH.contains("(event_id, consumer, fencing_token, lease_owner) IN"));
        assert!(ACK_HELD.contains("json_extract(value, '$[1]') - 1 FROM json_each(?1)"));
        for statement in [FAIL_HELD, FENCE_HELD] {
            assert!(statement.contains("fencing_token = ?3 - 1 AND status = 'pending'"));
        }
        assert!(RENEW_FENCED.contains("(event_id, fencing_token) IN"));
    }

    #[test]
    fn values_chunks_cover_every_row_once_in_order() {
        for rows in (0..600).chain([1000, 4096, 4097]) {
            let mut next = 0;
            for (start, size) in values_chunks(rows) {
                assert_eq!(start, next, "{rows} rows");
                assert!(
                    size.is_power_of_two() && size <= VALUES_ROWS,
                    "{rows}: {size}"
                );
                next += size;
            }
            assert_eq!(next, rows);
        }
        let sizes: Vec<usize> = values_chunks(700).map(|(_, size)| size).collect();
        assert_eq!(sizes, [256, 256, 128, 32, 16, 8, 4]);
    }

    #[test]
    fn values_statements_bind_each_column_of_each_row() {
        let events = append_events(2);
        let row = format!("({})", ["?"; 15].join(", "));
        assert!(
            events.contains(&format!("VALUES {row}, {row} ON CONFLICT")),
            "{events}"
        );
        for rows in [1, 2, 128, 256] {
            let sql = append_deliveries(rows);
            assert_eq!(sql.matches('?').count(), 7 * rows, "{rows}");
            assert!(
                sql.ends_with(&format!("({})", ["?"; 7].join(", "))),
                "{sql}"
            );
        }
    }
}
