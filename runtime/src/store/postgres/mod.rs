//! The PostgreSQL store: appends in the caller's transaction, rejections audited on the
//! store's pool, registry parity at start-up, and the fenced lease operations the dispatcher
//! ([`crate::Dispatcher`]) runs on.
//!
//! ```no_run
//! # async fn example(pool: sqlx::PgPool, registry: evc_runtime::Registry,
//! #     event: evc_runtime::OutgoingEvent) -> Result<(), Box<dyn std::error::Error>> {
//! use evc_runtime::PgStore;
//! use evc_runtime::{AppendOptions, Publish};
//!
//! // Refuses to start when the database's registry differs from the compiled one. Appends
//! // are checked against the registry's payload policy and envelope requirements.
//! let store = PgStore::start(pool.clone(), registry).await?;
//! let mut tx = pool.begin().await?;
//! // ... the caller's own writes on `tx` ...
//! let mut publisher = store
//!     .publisher(&mut tx)
//!     .with_options(AppendOptions::new().idempotency_key("order-42"));
//! let receipt = publisher.publish(event).await?;
//! tx.commit().await?; // the event, its deliveries and the notification, or nothing
//! # let _ = receipt; Ok(()) }
//! ```

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use sqlx::Row;
use sqlx::postgres::{PgConnection, PgPool, Postgres};
use tokio::sync::{Notify, watch};
use uuid::Uuid;

use crate::append::{
    AppendError, AppendOptions, AppendReceipt, CheckedEvent, Checker, NewEvent, Refused, order_key,
};
use crate::handler::FailureClass;
use crate::policy::{DigestKey, PayloadPolicy};
use crate::publish::{OutgoingEvent, Publish};
use crate::registry::Registry;
use crate::retry::RetryDecision;
use crate::store::parity::{self, Mirror};
use crate::store::{
    AckBatch, AttemptRecord, ClaimRequest, Claimed, ClaimedEvents, DeliveryRecord, DeliveryStatus,
    DispatchError, EffectRecord, EventRecord, Heartbeat, Hold, Lease, ReconciliationRecord,
    RegistryDrift, RejectRecord, Store, StoreError,
};

mod console;
mod copy;
mod cursor;
mod cutover;
mod deployed;
mod dispatch;
mod doorbell;
mod evidence;
mod inventory;
mod lag;
mod lifecycle;
mod listen;
mod maintenance;
mod observe;
mod operations;
mod read;
mod replay;
mod retention;
mod roles;
mod schedule;
pub(crate) mod sql;
mod tenant;

pub use console::Console;
pub use copy::CopyRows;
pub use deployed::deployed_registry;
pub use doorbell::Doorbell;
pub use maintenance::TableSpace;
pub use observe::{
    AttemptLatency, AttemptOutcomes, AttemptTotals, ClassHealth, ClassOwner, ConsumerStatus,
    DURATION_BUCKETS_MS, Lag, LeasedDelivery, Percentiles, Problem, RELAY_BEHIND_COUNTED,
    RecentRejects, RelayStatus, SCHEDULE_GRACE, ScheduleStatus, SilentWorker, StatusReport,
    TimelineEntry, WatchedConsumer, WorkerSettings,
};
pub use replay::{DiscardApplied, DiscardPlan, DiscardRecord, DiscardedDelivery};
pub use roles::{Role, RoleCheck};
// The operator types moved to `store::ops` (both stores use them); kept here for old paths.
pub use crate::store::ops::{
    ConsumerState, DEFAULT_REPLAY_LIMIT, MAX_REPLAY_REASON_CHARS, MAX_REPLAY_REF_CHARS,
    NotReplayable, NotReplayableReason, Proposed, ReplayApplied, ReplayApproval, ReplayError,
    ReplayItem, ReplayPlan, ReplayRecord, ReplaySelection, SettledDelivery, SettledStatus,
};

pub use retention::{EventsPurged, RejectsPurged};
pub use sql::NOTIFY_CHANNEL;

/// Events per statement of a batch append. Large enough that per-statement costs vanish, small
/// enough that one statement's arrays stay a few megabytes.
const BATCH_CHUNK: usize = 5_000;

/// Events from which a batch's checks are split over the available cores.
const PARALLEL_CHECK_MIN: usize = 2_000;

/// Where a store's payload policy came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicySource {
    /// The registry's `payload_policy`, as the contracts declare it.
    Registry,
    /// [`PgStoreBuilder::payload_policy`]: the application replaced the contracts' policy.
    Override,
}

impl PolicySource {
    /// `registry` or `override`, as heartbeats record it and `evc status` shows it.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Registry => "registry",
            Self::Override => "override",
        }
    }
}

/// Builds a [`PgStore`]: the payload policy comes from the registry unless
/// [`PgStoreBuilder::payload_policy`] overrides it; the deployment's digest key is added with
/// [`PgStoreBuilder::digest_key`].
///
/// ```no_run
/// # async fn example(pool: sqlx::PgPool, registry: evc_runtime::Registry)
/// #     -> Result<(), Box<dyn std::error::Error>> {
/// use evc_runtime::{DigestKey, PgStore};
///
/// let mut builder = PgStore::builder(pool, registry);
/// if let Some(key) = DigestKey::from_env()? {
///     builder = builder.digest_key(key);
/// }
/// let store = builder.start().await?;
/// # let _ = store; Ok(()) }
/// ```
#[derive(Debug)]
#[must_use]
pub struct PgStoreBuilder {
    pool: PgPool,
    registry: Registry,
    policy: Option<PayloadPolicy>,
    digest_key: Option<DigestKey>,
}

impl PgStoreBuilder {
    /// Replaces the registry's payload policy with `policy` (its digest key too, unless
    /// [`PgStoreBuilder::digest_key`] sets one). [`PgStore::payload_policy`] reports the
    /// override.
    pub fn payload_policy(mut self, policy: PayloadPolicy) -> Self {
        self.policy = Some(policy);
        self
    }

    /// The deployment's key for the digests of refused payloads ([`DigestKey::from_env`]).
    pub fn digest_key(mut self, key: DigestKey) -> Self {
        self.digest_key = Some(key);
        self
    }

    /// The store, without touching the database (see [`PgStore::new`]).
    ///
    /// # Errors
    /// [`StoreError::Schema`] when a registered schema does not compile.
    pub fn build(self) -> Result<PgStore, StoreError> {
        let (mut policy, policy_source) = match self.policy {
            Some(policy) => {
                tracing::info!(
                    project = self.registry.project,
                    "payload policy overridden by the application; the registry's does not apply"
                );
                (policy, PolicySource::Override)
            }
            None => (
                PayloadPolicy::from_registry(&self.registry),
                PolicySource::Registry,
            ),
        };
        if let Some(key) = self.digest_key {
            policy = policy.with_digest_key(key);
        }
        let attempt_limits = attempt_limits(&self.registry);
        let checker = Checker::new(self.registry, &policy)?;
        Ok(PgStore {
            inner: Arc::new(Inner {
                pool: self.pool,
                checker,
                policy,
                policy_source,
                attempt_limits,
                stale_tokens: AtomicU64::new(0),
            }),
        })
    }

    /// [`PgStoreBuilder::build`], then [`PgStore::verify_registry`].
    ///
    /// # Errors
    /// [`StoreError::Schema`], [`StoreError::MissingStep`], [`StoreError::Drift`] or
    /// [`StoreError::Database`].
    pub async fn start(self) -> Result<PgStore, StoreError> {
        let store = self.build()?;
        store.verify_registry().await?;
        Ok(store)
    }
}

/// The PostgreSQL outbox store. Cheap to clone (shared state behind an `Arc`).
#[derive(Debug, Clone)]
pub struct PgStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    pool: PgPool,
    checker: Checker,
    /// The policy `checker` applies (digest key included; `Debug` never shows the key).
    policy: PayloadPolicy,
    policy_source: PolicySource,
    /// Each consumer's attempt limit from its retry policy, as parallel arrays for
    /// [`sql::RECOVER_EXPIRED`] (fixed with the registry, so computed once).
    attempt_limits: (Vec<&'static str>, Vec<i32>),
    /// Fenced operations refused for a stale token (acks, fails, renewals, effect writes).
    stale_tokens: AtomicU64,
}

impl PgStore {
    /// A store over `pool` for `registry`, checking appends against the registry's payload
    /// policy and envelope requirements: compiles every registered schema once (formats on)
    /// and the fan-out of every event version. Does not touch the database; call
    /// [`PgStore::verify_registry`] (or use [`PgStore::start`]) before serving. To set the
    /// deployment's digest key or override the policy, use [`PgStore::builder`].
    ///
    /// The pool records rejected appends on a connection of its own, so it must have a
    /// connection to spare while a caller's transaction holds one.
    ///
    /// # Errors
    /// [`StoreError::Schema`] when a registered schema does not compile.
    pub fn new(pool: PgPool, registry: Registry) -> Result<Self, StoreError> {
        Self::builder(pool, registry).build()
    }

    /// [`PgStore::new`], then [`PgStore::verify_registry`]: a store that refuses to start on
    /// a missing runtime step or registry drift.
    ///
    /// # Errors
    /// [`StoreError::Schema`], [`StoreError::MissingStep`], [`StoreError::Drift`] or
    /// [`StoreError::Database`].
    pub async fn start(pool: PgPool, registry: Registry) -> Result<Self, StoreError> {
        Self::builder(pool, registry).start().await
    }

    /// A builder for a store over `pool` for `registry`, with the deployment's digest key or
    /// an overriding payload policy.
    pub fn builder(pool: PgPool, registry: Registry) -> PgStoreBuilder {
        PgStoreBuilder {
            pool,
            registry,
            policy: None,
            digest_key: None,
        }
    }

    /// The payload policy appends are checked against, and where it came from.
    pub fn payload_policy(&self) -> (&PayloadPolicy, PolicySource) {
        (&self.inner.policy, self.inner.policy_source)
    }

    /// The pool rejections are recorded on.
    pub fn pool(&self) -> &PgPool {
        &self.inner.pool
    }

    /// The static registry.
    pub fn registry(&self) -> &Registry {
        self.inner.checker.registry()
    }

    /// A [`Publish`] implementation over the caller's connection or transaction, for the
    /// generated producer functions (`emit_*`).
    pub fn publisher<'a>(&'a self, connection: &'a mut PgConnection) -> PgPublisher<'a> {
        PgPublisher {
            store: self,
            connection,
            options: AppendOptions::default(),
        }
    }

    /// Compares the database's registry mirror with the static registry, after checking that
    /// the database has the newest runtime step this release writes through (every ack writes
    /// `evc_acked_batches`).
    ///
    /// # Errors
    /// [`StoreError::MissingStep`], [`StoreError::Drift`] naming every difference, or
    /// [`StoreError::Database`].
    pub async fn verify_registry(&self) -> Result<(), StoreError> {
        let stepped: bool = sqlx::query_scalar(sql::HAS_ACKED_BATCHES)
            .fetch_one(&self.inner.pool)
            .await?;
        if !stepped {
            return Err(StoreError::MissingStep {
                step: "NNNN_evc_runtime_v31.sql",
                what: "the table evc_acked_batches",
            });
        }
        let mirror = read_mirror(&self.inner.pool).await?;
        let differences = parity::compare(self.registry(), &mirror);
        if differences.is_empty() {
            Ok(())
        } else {
            Err(RegistryDrift { differences }.into())
        }
    }

    /// Appends one event in the caller's transaction (see [`Store::append`]).
    ///
    /// # Errors
    /// [`AppendError::Rejected`], [`AppendError::IdempotencyConflict`] or
    /// [`AppendError::Database`].
    pub async fn append(
        &self,
        connection: &mut PgConnection,
        event: OutgoingEvent,
        options: AppendOptions,
    ) -> Result<AppendReceipt, AppendError> {
        let checked = match self.inner.checker.check(&event, &options) {
            Ok(checked) => checked,
            Err(refused) => {
                let rejection = refused.rejection.clone();
                self.record_rejects(&[(&event, &*refused)]).await;
                return Err(AppendError::Rejected(rejection));
            }
        };
        let event_id = Uuid::now_v7();
        let row = EventRow::new(&event, &options, &checked, event_id);
        let inserted = sqlx::query(sql::APPEND_EVENT)
            .bind(event_id)
            .bind(event.event_type)
            .bind(event.version)
            .bind(&row.order_key)
            .bind(&options.tenant_scope)
            .bind(checked.descriptor.producer_class)
            .bind(&options.idempotency_key)
            .bind(event.trace.trace_id())
            .bind(event.trace.parent_span_id())
            .bind(&row.trace_flags)
            .bind(&options.correlation_id)
            .bind(&options.causation_id)
            .bind(&checked.payload)
            .bind(row.payload_bytes)
            .bind(checked.consumers)
            .bind(checked.ordered)
            .bind(options.not_before_epoch())
            .fetch_optional(&mut *connection)
            .await?;
        if let Some(inserted) = inserted {
            let deliveries: i64 = inserted.try_get("deliveries")?;
            return Ok(AppendReceipt {
                event_id: inserted.try_get("event_id")?,
                seq: inserted.try_get("seq")?,
                created: true,
                deliveries: u32::try_from(deliveries).unwrap_or(u32::MAX),
            });
        }
        let producer_class = checked.descriptor.producer_class;
        let existing = sqlx::query(sql::FIND_BY_IDEMPOTENCY_KEY)
            .bind(producer_class)
            .bind(&options.idempotency_key)
            .bind(&options.tenant_scope)
            .fetch_optional(&mut *connection)
            .await?;
        match existing {
            Some(existing) => Ok(AppendReceipt {
                event_id: existing.try_get("event_id")?,
                seq: existing.try_get("seq")?,
                created: false,
                deliveries: 0,
            }),
            None => Err(AppendError::IdempotencyConflict {
                producer_class: producer_class.to_owned(),
            }),
        }
    }

    /// Appends many events in the caller's transaction (see [`Store::append_batch`]): every
    /// event is checked first. A batch without idempotency keys and delays is then written
    /// with two `COPY` commands (events, deliveries) and one notification per consumer; a
    /// batch with keys or delays goes in chunks of 5,000 events, one `INSERT ... ON CONFLICT`
    /// statement per chunk for the events, their deliveries and the notifications.
    ///
    /// Run it inside a transaction: on a connection in autocommit mode each chunk commits on
    /// its own.
    ///
    /// # Errors
    /// [`AppendError::BatchRejected`], [`AppendError::IdempotencyConflict`] or
    /// [`AppendError::Database`].
    pub async fn append_batch(
        &self,
        connection: &mut PgConnection,
        events: Vec<NewEvent>,
    ) -> Result<Vec<AppendReceipt>, AppendError> {
        let (checked, refused) = self.check_all(&events);
        if let Some((index, first)) = refused.first() {
            let rows: Vec<(&OutgoingEvent, &Refused)> = refused
                .iter()
                .map(|(index, why)| (&events[*index].event, &**why))
                .collect();
            self.record_rejects(&rows).await;
            return Err(AppendError::BatchRejected {
                index: *index,
                rejection: first.rejection.clone(),
                rejected: refused.len(),
            });
        }

        // `COPY` writes deliveries due now; keys and delays go through `INSERT`, and so does
        // every batch where tenants are required: PostgreSQL refuses `COPY FROM` into a table
        // under row-level security (for the deliveries alone, `copy::append` decides).
        if !self.inner.checker.requires_tenant_scope()
            && events.iter().all(|new| {
                new.options.idempotency_key.is_none() && new.options.not_before.is_none()
            })
        {
            return copy::append(connection, &events, &checked).await;
        }
        let mut receipts = Vec::with_capacity(events.len());
        for (chunk, checked) in events.chunks(BATCH_CHUNK).zip(checked.chunks(BATCH_CHUNK)) {
            receipts.extend(append_chunk(connection, chunk, checked).await?);
        }
        Ok(receipts)
    }

    /// Checks every event of a batch: the events that passed, in order, and the refused ones
    /// with their index. Large batches are split over the available cores (the checks are
    /// CPU-bound: schema validation, policy scan, canonical JSON); this runs on the caller's
    /// task, as the checks of a single event do.
    fn check_all<'a>(
        &'a self,
        events: &[NewEvent],
    ) -> (Vec<CheckedEvent<'a>>, Vec<(usize, Box<Refused>)>) {
        let check_part = |offset: usize, part: &[NewEvent]| {
            let mut checked = Vec::with_capacity(part.len());
            let mut refused = Vec::new();
            for (index, new) in part.iter().enumerate() {
                match self.inner.checker.check(&new.event, &new.options) {
                    Ok(event) => checked.push(event),
                    Err(why) => refused.push((offset + index, why)),
                }
            }
            (checked, refused)
        };
        let threads = std::thread::available_parallelism().map_or(1, usize::from);
        if threads < 2 || events.len() < PARALLEL_CHECK_MIN {
            return check_part(0, events);
        }
        let size = events.len().div_ceil(threads);
        let parts: Vec<_> = std::thread::scope(|scope| {
            let handles: Vec<_> = events
                .chunks(size)
                .enumerate()
                .map(|(n, part)| scope.spawn(move || check_part(n * size, part)))
                .collect();
            handles
                .into_iter()
                .map(|handle| {
                    handle
                        .join()
                        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
                })
                .collect()
        });
        let mut checked = Vec::with_capacity(events.len());
        let mut refused = Vec::new();
        for (part_checked, part_refused) in parts {
            checked.extend(part_checked);
            refused.extend(part_refused);
        }
        (checked, refused)
    }

    /// Records reject rows on the store's pool, outside the caller's transaction, so the audit
    /// survives the caller's rollback. A failure to record is logged, never returned: the
    /// caller must learn that its event was refused either way.
    async fn record_rejects(&self, refused: &[(&OutgoingEvent, &Refused)]) {
        let mut types = Vec::with_capacity(refused.len());
        let mut versions = Vec::with_capacity(refused.len());
        let mut reasons = Vec::with_capacity(refused.len());
        let mut digests = Vec::with_capacity(refused.len());
        for (event, why) in refused {
            types.push(event.event_type);
            versions.push(why.version.as_str());
            reasons.push(why.rejection.reason_code());
            digests.push(why.digest.as_str());
        }
        let result = sqlx::query(sql::RECORD_REJECTS)
            .bind(&types)
            .bind(&versions)
            .bind(&reasons)
            .bind(&digests)
            .execute(&self.inner.pool)
            .await;
        if let Err(error) = result {
            tracing::warn!(
                rejects = refused.len(),
                error = %error,
                "could not record rejected appends in evc_validation_rejects"
            );
        }
    }
}

/// Each consumer whose retry policy is registered, with that policy's `max_attempts`.
fn attempt_limits(registry: &Registry) -> (Vec<&'static str>, Vec<i32>) {
    registry
        .consumers
        .iter()
        .filter_map(|consumer| {
            let policy = registry
                .retry_policies
                .iter()
                .find(|policy| policy.name == consumer.retry_policy)?;
            // The dispatcher's ceiling bounds every policy, as the dispatcher applies it.
            let attempts = policy.max_attempts.min(registry.dispatcher.max_attempts);
            Some((consumer.name, i32::try_from(attempts).unwrap_or(i32::MAX)))
        })
        .unzip()
}

/// The envelope columns computed for one event.
struct EventRow {
    order_key: String,
    trace_flags: String,
    payload_bytes: i32,
}

impl EventRow {
    fn new(
        event: &OutgoingEvent,
        options: &AppendOptions,
        checked: &CheckedEvent<'_>,
        event_id: Uuid,
    ) -> Self {
        Self {
            order_key: order_key(event, options, event_id),
            trace_flags: format!("{:02x}", event.trace.trace_flags()),
            // Below the hard cap, which is a u32 of at most a few megabytes in practice.
            payload_bytes: i32::try_from(checked.payload.len()).unwrap_or(i32::MAX),
        }
    }
}

/// Column arrays of one batch statement.
#[derive(Default)]
struct Columns<'a> {
    event_id: Vec<Uuid>,
    event_type: Vec<&'a str>,
    version: Vec<&'a str>,
    order_key: Vec<String>,
    tenant_scope: Vec<Option<&'a str>>,
    producer_class: Vec<&'a str>,
    idempotency_key: Vec<Option<&'a str>>,
    trace_id: Vec<&'a str>,
    parent_span_id: Vec<&'a str>,
    trace_flags: Vec<String>,
    correlation_id: Vec<Option<&'a str>>,
    causation_id: Vec<Option<&'a str>>,
    payload: Vec<&'a str>,
    payload_bytes: Vec<i32>,
    delivery_event: Vec<Uuid>,
    delivery_consumer: Vec<&'a str>,
    delivery_ordered: Vec<bool>,
    delivery_not_before: Vec<Option<f64>>,
}

async fn append_chunk(
    connection: &mut PgConnection,
    events: &[NewEvent],
    checked: &[CheckedEvent<'_>],
) -> Result<Vec<AppendReceipt>, AppendError> {
    let mut columns = Columns::default();
    for (new, checked) in events.iter().zip(checked) {
        let (event, options) = (&new.event, &new.options);
        let event_id = Uuid::now_v7();
        let row = EventRow::new(event, options, checked, event_id);
        columns.event_id.push(event_id);
        columns.event_type.push(event.event_type);
        columns.version.push(event.version);
        columns.order_key.push(row.order_key);
        columns.tenant_scope.push(options.tenant_scope.as_deref());
        columns
            .producer_class
            .push(checked.descriptor.producer_class);
        columns
            .idempotency_key
            .push(options.idempotency_key.as_deref());
        columns.trace_id.push(event.trace.trace_id());
        columns.parent_span_id.push(event.trace.parent_span_id());
        columns.trace_flags.push(row.trace_flags);
        columns
            .correlation_id
            .push(options.correlation_id.as_deref());
        columns.causation_id.push(options.causation_id.as_deref());
        columns.payload.push(&checked.payload);
        columns.payload_bytes.push(row.payload_bytes);
        for (consumer, &ordered) in checked.consumers.iter().zip(checked.ordered) {
            columns.delivery_event.push(event_id);
            columns.delivery_consumer.push(consumer);
            columns.delivery_ordered.push(ordered);
            columns.delivery_not_before.push(options.not_before_epoch());
        }
    }
    let rows = sqlx::query(sql::APPEND_BATCH)
        .bind(&columns.event_id)
        .bind(&columns.event_type)
        .bind(&columns.version)
        .bind(&columns.order_key)
        .bind(&columns.tenant_scope)
        .bind(&columns.producer_class)
        .bind(&columns.idempotency_key)
        .bind(&columns.trace_id)
        .bind(&columns.parent_span_id)
        .bind(&columns.trace_flags)
        .bind(&columns.correlation_id)
        .bind(&columns.causation_id)
        .bind(&columns.payload)
        .bind(&columns.payload_bytes)
        .bind(&columns.delivery_event)
        .bind(&columns.delivery_consumer)
        .bind(&columns.delivery_ordered)
        .bind(&columns.delivery_not_before)
        .fetch_all(&mut *connection)
        .await?;
    let mut written: HashMap<Uuid, i64> = HashMap::with_capacity(rows.len());
    for row in rows {
        written.insert(row.try_get("event_id")?, row.try_get("seq")?);
    }

    // Per event of the batch whose idempotency key was taken (earlier, or by an earlier event
    // of this batch): the event that took the key in its producer class and tenant.
    let mut existing: Vec<Option<(Uuid, i64)>> = vec![None; events.len()];
    if written.len() < events.len() {
        let mut indexes = Vec::new();
        let (mut classes, mut keys, mut tenants) = (Vec::new(), Vec::new(), Vec::new());
        for (index, event_id) in columns.event_id.iter().enumerate() {
            if !written.contains_key(event_id)
                && let Some(key) = columns.idempotency_key[index]
            {
                indexes.push(index);
                classes.push(columns.producer_class[index]);
                keys.push(key);
                tenants.push(columns.tenant_scope[index]);
            }
        }
        let rows = sqlx::query(sql::FIND_BY_IDEMPOTENCY_KEYS)
            .bind(&classes)
            .bind(&keys)
            .bind(&tenants)
            .fetch_all(&mut *connection)
            .await?;
        for row in &rows {
            let ord: i64 = row.try_get("ord")?;
            let index = usize::try_from(ord - 1)
                .ok()
                .and_then(|at| indexes.get(at))
                .ok_or_else(|| sqlx::Error::Protocol(format!("key {ord} was not asked")))?;
            existing[*index] = Some((row.try_get("event_id")?, row.try_get("seq")?));
        }
    }

    let mut receipts = Vec::with_capacity(events.len());
    for (index, checked) in checked.iter().enumerate() {
        let event_id = columns.event_id[index];
        let receipt = if let Some(&seq) = written.get(&event_id) {
            AppendReceipt {
                event_id,
                seq,
                created: true,
                deliveries: u32::try_from(checked.consumers.len()).unwrap_or(u32::MAX),
            }
        } else {
            let Some((event_id, seq)) = existing[index] else {
                return Err(AppendError::IdempotencyConflict {
                    producer_class: columns.producer_class[index].to_owned(),
                });
            };
            AppendReceipt {
                event_id,
                seq,
                created: false,
                deliveries: 0,
            }
        };
        receipts.push(receipt);
    }
    Ok(receipts)
}

/// Reads every registry mirror row.
async fn read_mirror(pool: &PgPool) -> Result<Mirror, sqlx::Error> {
    let mut connection = pool.acquire().await?;
    let connection = &mut *connection;
    let digest: Option<String> = sqlx::query_scalar(sql::REGISTRY_DIGEST)
        .fetch_optional(&mut *connection)
        .await?;
    let mut mirror = Mirror {
        digest,
        ..Mirror::default()
    };
    for row in fetch(connection, sql::REGISTRY_EVENT_TYPES).await? {
        mirror.event_types.push(parity::EventTypeRow {
            name: row.try_get("name")?,
            description: row.try_get("description")?,
            producer_class: row.try_get("producer_class")?,
            order_key: row.try_get("order_key")?,
            status: row.try_get("status")?,
            max_payload_bytes: row.try_get("max_payload_bytes")?,
            registry_digest: row.try_get("registry_digest")?,
        });
    }
    for row in fetch(connection, sql::REGISTRY_EVENT_VERSIONS).await? {
        mirror.versions.push(parity::EventVersionRow {
            event_type: row.try_get("event_type")?,
            version: row.try_get("version")?,
            major: row.try_get("major")?,
            schema_digest: row.try_get("schema_digest")?,
            registry_digest: row.try_get("registry_digest")?,
        });
    }
    for row in fetch(connection, sql::REGISTRY_CONSUMERS).await? {
        mirror.consumers.push(parity::ConsumerRow {
            name: row.try_get("name")?,
            retry_policy: row.try_get("retry_policy")?,
            handler: row.try_get("handler")?,
            ordering: row.try_get("ordering")?,
            mode: row.try_get("mode")?,
            heartbeat_threshold_ms: row.try_get("heartbeat_threshold_ms")?,
            registry_digest: row.try_get("registry_digest")?,
        });
    }
    for row in fetch(connection, sql::REGISTRY_SUBSCRIPTIONS).await? {
        mirror.subscriptions.push(parity::SubscriptionRow {
            consumer: row.try_get("consumer")?,
            event_type: row.try_get("event_type")?,
            requirement: row.try_get("requirement")?,
            registry_digest: row.try_get("registry_digest")?,
        });
    }
    for row in fetch(connection, sql::REGISTRY_RETRY_POLICIES).await? {
        mirror.retry_policies.push(parity::RetryPolicyRow {
            name: row.try_get("name")?,
            kind: row.try_get("kind")?,
            base_delay_ms: row.try_get("base_delay_ms")?,
            max_delay_ms: row.try_get("max_delay_ms")?,
            max_attempts: row.try_get("max_attempts")?,
            jitter: row.try_get("jitter")?,
            retry_on: row.try_get("retry_on")?,
            registry_digest: row.try_get("registry_digest")?,
        });
    }
    Ok(mirror)
}

async fn fetch(
    connection: &mut PgConnection,
    statement: &'static str,
) -> Result<Vec<sqlx::postgres::PgRow>, sqlx::Error> {
    sqlx::query(statement).fetch_all(connection).await
}

impl Store for PgStore {
    type Database = Postgres;
    type Publisher<'a> = PgPublisher<'a>;
    type Doorbell = Doorbell;

    const ONE_WRITER: bool = false;

    fn registry(&self) -> &Registry {
        PgStore::registry(self)
    }

    fn pool(&self) -> &PgPool {
        PgStore::pool(self)
    }

    fn publisher<'a>(
        &'a self,
        connection: &'a mut PgConnection,
        options: AppendOptions,
    ) -> PgPublisher<'a> {
        PgStore::publisher(self, connection).with_options(options)
    }

    async fn verify_registry(&self) -> Result<(), StoreError> {
        PgStore::verify_registry(self).await
    }

    async fn append(
        &self,
        connection: &mut PgConnection,
        event: OutgoingEvent,
        options: AppendOptions,
    ) -> Result<AppendReceipt, AppendError> {
        PgStore::append(self, connection, event, options).await
    }

    async fn append_batch(
        &self,
        connection: &mut PgConnection,
        events: Vec<NewEvent>,
    ) -> Result<Vec<AppendReceipt>, AppendError> {
        PgStore::append_batch(self, connection, events).await
    }

    async fn claim(
        &self,
        connection: &mut PgConnection,
        request: &ClaimRequest<'_>,
    ) -> Result<Vec<Claimed>, DispatchError> {
        let ClaimRequest {
            consumer,
            owner,
            batch,
            per_key,
            after_seq,
            until_seq,
            ..
        } = *request;
        match request.hold {
            Hold::Lease(lease) => {
                self.claim_leased(
                    connection, consumer, owner, batch, lease, per_key, after_seq, until_seq,
                )
                .await
            }
            Hold::Transaction if per_key => Err(DispatchError::Unsupported(
                "a claim held by a transaction does not order per key",
            )),
            Hold::Transaction => {
                self.claim_held(connection, consumer, owner, batch, after_seq, until_seq)
                    .await
            }
        }
    }

    async fn claim_events(
        &self,
        connection: &mut PgConnection,
        consumer: &str,
        owner: &str,
        event_ids: &[Uuid],
        lease: Duration,
    ) -> Result<ClaimedEvents, DispatchError> {
        self.claim_by_id(connection, consumer, owner, event_ids, lease)
            .await
    }

    async fn ack(
        &self,
        connection: &mut PgConnection,
        leases: &[&Lease],
    ) -> Result<AckBatch, DispatchError> {
        if !leases.is_empty() && leases.iter().all(|lease| lease.is_held()) {
            let acked = self.held_acks(connection, leases).await?;
            let stale = leases
                .iter()
                .filter(|lease| !acked.contains(&lease.event_id))
                .map(|lease| (lease.event_id, lease.consumer.clone(), lease.token))
                .collect();
            return Ok(AckBatch {
                acked: acked.len(),
                stale,
            });
        }
        if let [lease] = leases {
            // One lease: the fenced single ack, which also ends a replay in the caller's
            // transaction.
            return match self.ack_one(connection, lease).await {
                Ok(()) => Ok(AckBatch {
                    acked: 1,
                    stale: Vec::new(),
                }),
                Err(DispatchError::StaleToken {
                    event_id,
                    consumer,
                    token,
                }) => Ok(AckBatch {
                    acked: 0,
                    stale: vec![(event_id, consumer, token)],
                }),
                Err(error) => Err(error),
            };
        }
        self.ack_many(connection, leases).await
    }

    async fn fail(
        &self,
        lease: &Lease,
        class: FailureClass,
        code: &str,
        decision: RetryDecision,
    ) -> Result<(), DispatchError> {
        PgStore::fail(self, lease, class, code, decision).await
    }

    async fn renew(
        &self,
        connection: &mut PgConnection,
        leases: &[&Lease],
        lease: Duration,
    ) -> Result<Vec<Uuid>, DispatchError> {
        self.renewed(connection, leases, lease).await
    }

    async fn lock_lease(
        &self,
        connection: &mut PgConnection,
        lease: &Lease,
    ) -> Result<(), DispatchError> {
        PgStore::lock_lease(self, connection, lease).await
    }

    async fn begin_shadow(&self, connection: &mut PgConnection) -> Result<(), DispatchError> {
        sqlx::query(sql::SHADOW_SAVEPOINT)
            .execute(connection)
            .await?;
        Ok(())
    }

    async fn end_shadow(&self, connection: &mut PgConnection) -> Result<(), DispatchError> {
        sqlx::query(sql::SHADOW_ROLLBACK)
            .execute(connection)
            .await?;
        Ok(())
    }

    async fn record_reconciliation(
        &self,
        connection: &mut PgConnection,
        lease: &Lease,
    ) -> Result<(), DispatchError> {
        PgStore::record_reconciliation(self, connection, lease).await
    }

    async fn record_legacy_outcome(
        &self,
        connection: &mut PgConnection,
        consumer: &str,
        event_id: uuid::Uuid,
        outcome: &[crate::store::Intent],
    ) -> Result<bool, DispatchError> {
        self.write_legacy_outcome(connection, consumer, event_id, outcome)
            .await
    }

    async fn release(&self, owner: &str) -> Result<u64, DispatchError> {
        PgStore::release(self, owner).await
    }

    async fn recover_expired(&self, limit: u32) -> Result<u64, DispatchError> {
        PgStore::recover_expired(self, limit).await
    }

    async fn record_effect(
        &self,
        connection: &mut PgConnection,
        lease: &Lease,
        effect_key: &str,
        outcome_digest: &str,
    ) -> Result<bool, DispatchError> {
        PgStore::record_effect(self, connection, lease, effect_key, outcome_digest).await
    }

    async fn heartbeat(&self, workers: &[Heartbeat]) -> Result<(), DispatchError> {
        PgStore::heartbeat(self, workers).await
    }

    async fn forget_heartbeats(&self, owners: &[String]) -> Result<(), DispatchError> {
        PgStore::forget_heartbeats(self, owners).await
    }

    async fn tick_schedules(
        &self,
        at: Option<std::time::SystemTime>,
    ) -> Result<crate::store::ScheduleRound, DispatchError> {
        self.run_schedules(at).await
    }

    async fn schedule_states(&self) -> Result<Vec<crate::store::ScheduleState>, DispatchError> {
        self.read_schedules().await
    }

    async fn watch_lag(&self) -> Result<crate::store::LagRound, DispatchError> {
        self.run_lag_watch().await
    }

    async fn record_evidence(&self) -> Result<crate::store::EvidenceRound, DispatchError> {
        self.run_evidence_recording().await
    }

    async fn lag_breaches(
        &self,
        limit: u32,
    ) -> Result<Vec<crate::store::LagBreach>, DispatchError> {
        self.read_lag_breaches(limit).await
    }

    async fn listen(
        &self,
        wakers: HashMap<String, Arc<Notify>>,
        retry: Duration,
        shutdown: watch::Receiver<bool>,
    ) {
        listen::listen(self, wakers, retry, shutdown).await;
    }

    async fn hold_doorbell(
        &self,
        consumer: &str,
        wait: Duration,
    ) -> Result<Option<Doorbell>, DispatchError> {
        PgStore::hold_doorbell(self, consumer, wait).await
    }

    async fn release_doorbell(&self, doorbell: Doorbell) -> Result<(), DispatchError> {
        doorbell.release().await
    }

    fn stale_tokens(&self) -> u64 {
        PgStore::stale_tokens(self)
    }

    async fn begin(&self) -> Result<sqlx::Transaction<'static, Postgres>, DispatchError> {
        Ok(self.inner.pool.begin().await?)
    }

    async fn begin_on<'c>(
        &self,
        connection: &'c mut PgConnection,
    ) -> Result<sqlx::Transaction<'c, Postgres>, DispatchError> {
        Ok(sqlx::Connection::begin(connection).await?)
    }

    async fn delivery(
        &self,
        event_id: Uuid,
        consumer: &str,
    ) -> Result<Option<DeliveryRecord>, DispatchError> {
        PgStore::delivery(self, event_id, consumer).await
    }

    async fn deliveries(
        &self,
        event_id: Uuid,
        consumer: &str,
    ) -> Result<Vec<DeliveryRecord>, DispatchError> {
        read::deliveries(self, event_id, consumer).await
    }

    async fn attempts(
        &self,
        event_id: Uuid,
        consumer: &str,
    ) -> Result<Vec<AttemptRecord>, DispatchError> {
        PgStore::attempts(self, event_id, consumer).await
    }

    async fn count_deliveries(
        &self,
        consumer: &str,
        statuses: &[DeliveryStatus],
    ) -> Result<u64, DispatchError> {
        PgStore::count_deliveries(self, consumer, statuses).await
    }

    async fn count_attempts(&self, consumer: &str, outcome: &str) -> Result<u64, DispatchError> {
        read::count_attempts(self.pool(), consumer, outcome).await
    }

    async fn count_events(&self, event_types: &[&str]) -> Result<u64, DispatchError> {
        PgStore::count_events(self, event_types).await
    }

    async fn event(&self, event_id: Uuid) -> Result<Option<EventRecord>, DispatchError> {
        read::event(self.pool(), event_id).await
    }

    async fn rejects(&self, limit: u32) -> Result<Vec<RejectRecord>, DispatchError> {
        PgStore::rejects(self, limit).await
    }

    async fn effect(
        &self,
        consumer: &str,
        effect_key: &str,
        tenant_scope: Option<&str>,
    ) -> Result<Option<EffectRecord>, DispatchError> {
        read::effect(self.pool(), consumer, effect_key, tenant_scope).await
    }

    async fn reconciliations(
        &self,
        event_id: Uuid,
        consumer: &str,
    ) -> Result<Vec<ReconciliationRecord>, DispatchError> {
        read::reconciliations(self.pool(), event_id, consumer).await
    }
}

/// The [`Publish`] implementation of the PostgreSQL store: appends on the caller's connection
/// or transaction with the envelope options set on it.
///
/// The per-event options (idempotency key, aggregate key, delay) apply to the next published
/// event only and are cleared after it, so one key never names two events; the context options
/// (tenant scope, correlation and causation ids) stay for every event published through it.
#[derive(Debug)]
pub struct PgPublisher<'a> {
    store: &'a PgStore,
    connection: &'a mut PgConnection,
    options: AppendOptions,
}

impl PgPublisher<'_> {
    /// Replaces the envelope options.
    #[must_use]
    pub fn with_options(mut self, options: AppendOptions) -> Self {
        self.options = options;
        self
    }

    /// The envelope options the next publish uses.
    pub fn options_mut(&mut self) -> &mut AppendOptions {
        &mut self.options
    }

    /// Sets the idempotency key of the next published event.
    pub fn idempotency_key(&mut self, key: impl Into<String>) -> &mut Self {
        self.options.idempotency_key = Some(key.into());
        self
    }
}

impl Publish for PgPublisher<'_> {
    type Receipt = AppendReceipt;
    type Error = AppendError;

    async fn publish(&mut self, event: OutgoingEvent) -> Result<AppendReceipt, AppendError> {
        let options = AppendOptions {
            idempotency_key: self.options.idempotency_key.take(),
            aggregate_key: self.options.aggregate_key.take(),
            not_before: self.options.not_before.take(),
            ..self.options.clone()
        };
        self.store.append(self.connection, event, options).await
    }
}
