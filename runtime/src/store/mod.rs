//! The store boundary: what producers, the dispatcher and handlers need from an outbox
//! database.
//!
//! [`Store`] is what the dispatcher ([`crate::Dispatcher`]), the handler context
//! ([`crate::HandlerContext`]) and generic producers talk to; every statement against the
//! runtime's tables lives behind it, in the store's own module. PostgreSQL
//! ([`postgres::PgStore`]) is the production store; the embedded store
//! ([`sqlite::SqliteStore`], one process per file) implements the same trait with the same
//! lease and fencing semantics. Every store applies the same checks
//! ([`crate::append::Checker`]); PostgreSQL's registry mirror follows the parity rules of
//! [`parity`].
//!
//! Both stores also answer the same read methods ([`Store::delivery`], [`Store::deliveries`],
//! [`Store::attempts`],
//! [`Store::event`], [`Store::count_deliveries`], [`Store::count_attempts`],
//! [`Store::count_events`], [`Store::rejects`], [`Store::effect`],
//! [`Store::reconciliations`]; and, inherent, `stale_rejections`) with the types below
//! ([`DeliveryRecord`], [`AttemptRecord`], [`EventRecord`], [`RejectRecord`],
//! [`EffectRecord`], [`ReconciliationRecord`]), so tests and tools read a delivery's state
//! without SQL of their own.
//! The operator surface common to both ([`Operate`]) is in [`ops`].
//!
//! | Method | Used by |
//! | --- | --- |
//! | [`Store::verify_registry`] | start-up of producers and dispatchers |
//! | [`Store::append`], [`Store::append_batch`], [`Store::publisher`] | producer functions (through [`crate::Publish`]) |
//! | [`Store::claim`] (leased or held, per-key head-of-line, from a claim cursor) | dispatcher workers |
//! | [`Store::ack`], [`Store::fail`], [`Store::renew`] (each fenced by the lease's token; a stale token is refused and counted) | dispatcher workers |
//! | [`Store::lock_lease`], [`Store::begin_shadow`], [`Store::end_shadow`], [`Store::record_reconciliation`] | the transactional kind's handler transaction |
//! | [`Store::release`], [`Store::recover_expired`] | shutdown, the recovery task |
//! | [`Store::record_effect`] (idempotent effect row, fenced) | consumer handlers |
//! | [`Store::heartbeat`], [`Store::forget_heartbeats`] | the heartbeat task |
//! | [`Store::listen`], [`Store::hold_doorbell`], [`Store::release_doorbell`] | wake-ups of idle workers |
//! | [`Store::begin`], [`Store::begin_on`] | applications (the transaction they append in), the transactional kind |
//! | [`Store::delivery`], [`Store::deliveries`], [`Store::attempts`], [`Store::event`], [`Store::count_deliveries`], [`Store::count_attempts`], [`Store::count_events`], [`Store::rejects`] | tests, tools, the tour |
//! | [`Store::effect`], [`Store::reconciliations`] | operators checking an effect, or what a shadow run meant to do; tests |
//! | [`Operate`] (dead letters, replay, pause and resume) | operators, the CLI |
//!
//! Appends run on the caller's connection ([`Connection`], inside the caller's transaction),
//! so an event commits or rolls back with the caller's own writes. Rejections are audited
//! outside the caller's transaction so they survive its rollback (docs/runtime.md,
//! "Transaction semantics").

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::{Notify, watch};
use uuid::Uuid;

use crate::append::{AppendError, AppendOptions, AppendReceipt, NewEvent, SchemaCompileError};
use crate::handler::{Delivery, FailureClass};
use crate::publish::{OutgoingEvent, Publish};
use crate::registry::Registry;
use crate::retry::{RetryDecision, RetryPolicyError};
use crate::trace::{TraceContext, TraceContextError};

pub(crate) mod cursor;
pub(crate) mod cutover;
pub(crate) mod evidence;
mod feed;
pub(crate) mod inventory;
mod lag;
mod lifecycle;
pub(crate) mod observe;
pub(crate) mod ops;
pub(crate) mod parity;
pub(crate) mod postgres;
pub(crate) mod retention;
mod rows;
pub(crate) mod schedule;
mod scheduling;
pub(crate) mod sqlite;

pub use cursor::{
    CursorLease, CursorProgress, CursorState, Cursors, MAX_CURSOR_ERROR_CHARS,
    MAX_CURSOR_NAME_CHARS, MAX_CURSOR_OWNER_CHARS,
};
pub use cutover::{
    COUNTED_RUNS, CutoverReport, CutoverTerms, Difference, GateProgress, MAX_LEGACY_EFFECTS,
    MAX_LEGACY_TEXT_CHARS, MAX_LISTED_DIFFERENCES, compare, normalise,
};
pub use evidence::{
    ChronicPair, CoTriggered, Escalations, EvidenceQuery, EvidenceReport, EvidenceRound,
    EvidenceSnapshot, FailingTogether, MAX_EVIDENCE_SNAPSHOTS, MAX_SIGNAL_ROWS,
};
pub use feed::{FeedEvent, FeedPosition, FeedPositionError};
pub use inventory::{
    InventoryApplied, InventoryClass, InventoryCounts, InventoryItem, InventoryReason,
    InventoryRecord, InventoryReport, MAX_INVENTORY_EVENTS,
};
pub use lag::{LAG_BREACH, LagBreach, LagRound};
pub use lifecycle::{
    DEAD_LETTERED, DISCARDED, REPLAY_COMPLETED, REPLAY_FAILED, REPLAY_SCHEDULED,
    REPLAYED_JOB_FAILED, replay_uuid,
};
pub use observe::Observe;
pub use ops::{Operate, StateChange, StateChangeRecord};
pub use parity::{Drift, RegistryDrift, RegistryObject};
pub use retention::{
    MAX_PURGE_ACTOR_CHARS, MAX_PURGE_REASON_CHARS, PurgeError, PurgeRecord, RetentionPurge,
};
pub use schedule::{MAX_COUNTED_SKIPS, ScheduleRound, ScheduleState};

/// The connection a store's appends and transactional handlers run on (`PgConnection` for
/// PostgreSQL; a `sqlx::Transaction` dereferences to it).
pub type Connection<S> = <<S as Store>::Database as sqlx::Database>::Connection;

/// An outbox store: appends events with their deliveries, leases deliveries to the
/// dispatcher and records how every attempt ended.
pub trait Store: Clone + Send + Sync + 'static {
    /// The sqlx database the store runs on (its connections shared by reference across a
    /// worker's awaits, hence `Sync`).
    type Database: sqlx::Database<Connection: Sync>;

    /// The [`Publish`] implementation over a caller's connection ([`Store::publisher`]).
    type Publisher<'a>: Publish<Receipt = AppendReceipt, Error = AppendError> + Send
    where
        Self: 'a;

    /// A consumer's doorbell held by a sleeping worker ([`Store::hold_doorbell`]).
    type Doorbell: Send + 'static;

    /// Whether a write transaction keeps every other writer waiting until it ends (SQLite's
    /// one writer). The dispatcher then renews the rest of a transactional handler's batch in
    /// the handler's own transaction, after the handler: a renewal beside it, on another
    /// connection, would wait for the very transaction it runs beside. No other writer can
    /// take those leases meanwhile, since none can write.
    const ONE_WRITER: bool;

    /// The static registry the store checks events against and fans out from.
    fn registry(&self) -> &Registry;

    /// The store's connection pool: workers take their connections from it.
    fn pool(&self) -> &sqlx::Pool<Self::Database>;

    /// A publisher over the caller's connection or transaction with `options` as its
    /// envelope options, for the generated producer functions (`emit_*`).
    fn publisher<'a>(
        &'a self,
        connection: &'a mut Connection<Self>,
        options: AppendOptions,
    ) -> Self::Publisher<'a>;

    /// Compares the database's registry mirror with the static registry. Producers and
    /// dispatchers call it at start-up and refuse to start on drift.
    ///
    /// # Errors
    /// [`StoreError::Drift`] naming every difference, [`StoreError::MissingStep`] where the
    /// database lacks a step of the store's own, or [`StoreError::Database`].
    fn verify_registry(&self) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Appends one event and its deliveries in the caller's transaction, after the checks of
    /// [`crate::append`].
    ///
    /// # Errors
    /// [`AppendError::Rejected`] when a check fails (one reject row is recorded, nothing else
    /// is written); [`AppendError::Database`] when the database fails.
    fn append(
        &self,
        connection: &mut Connection<Self>,
        event: OutgoingEvent,
        options: AppendOptions,
    ) -> impl Future<Output = Result<AppendReceipt, AppendError>> + Send;

    /// Appends many events and their deliveries in the caller's transaction. Every event is
    /// checked first; one refused event refuses the whole batch. Receipts come back in the
    /// order of `events`.
    ///
    /// # Errors
    /// [`AppendError::BatchRejected`] naming the first refused event (a reject row is recorded
    /// for every refused one, nothing else is written); [`AppendError::Database`].
    fn append_batch(
        &self,
        connection: &mut Connection<Self>,
        events: Vec<NewEvent>,
    ) -> impl Future<Output = Result<Vec<AppendReceipt>, AppendError>> + Send;

    /// Claims due pending deliveries as `request` says, oldest first, on `connection`.
    /// [`Hold::Lease`]: each leased to the owner until now + the lease, its attempt counted
    /// and a new fencing token set; the claim commits itself (run it outside a transaction).
    /// [`Hold::Transaction`]: held by the transaction open on `connection` and otherwise
    /// untouched (its [held](Lease::is_held) leases carry the token and attempt their ack
    /// writes); ack them with [`Store::ack`] on the same transaction. With
    /// [`ClaimRequest::per_key`] only the head of each key is claimed, and never while another
    /// delivery of the key is leased.
    ///
    /// # Errors
    /// [`DispatchError::Database`] or [`DispatchError::Payload`].
    fn claim(
        &self,
        connection: &mut Connection<Self>,
        request: &ClaimRequest<'_>,
    ) -> impl Future<Output = Result<Vec<Claimed>, DispatchError>> + Send;

    /// Claims the deliveries of `event_ids` to `consumer` (the events a broker's messages
    /// name), as a leased claim does: each that is pending, due, claimable and heads its key
    /// is leased to `owner` until now + `lease`, its attempt counted and its fencing token
    /// raised; the claim commits itself. Says for every other event why it was left alone.
    ///
    /// # Errors
    /// [`DispatchError::Database`] or [`DispatchError::Payload`].
    fn claim_events(
        &self,
        connection: &mut Connection<Self>,
        consumer: &str,
        owner: &str,
        event_ids: &[Uuid],
        lease: Duration,
    ) -> impl Future<Output = Result<ClaimedEvents, DispatchError>> + Send;

    /// Acks leases on `connection`, each fenced on its own (still leased to its owner with its
    /// token, or held by the transaction open on `connection`): every acked delivery is
    /// deleted and gets its `acked` attempt (started at [`Lease::started_at`]). Stale
    /// leases write nothing; they are counted and returned. On a transaction, the acks commit
    /// with it (the transactional kind acks in its handler's transaction).
    ///
    /// # Errors
    /// [`DispatchError::Database`] (nothing is acked then).
    fn ack(
        &self,
        connection: &mut Connection<Self>,
        leases: &[&Lease],
    ) -> impl Future<Output = Result<AckBatch, DispatchError>> + Send;

    /// Ends a failed attempt (fenced) as `decision` says — back to pending after the delay,
    /// dead or quarantined — with the failure's class and code, and writes its attempt row.
    ///
    /// # Errors
    /// [`DispatchError::StaleToken`] (counted); [`DispatchError::Database`].
    fn fail(
        &self,
        lease: &Lease,
        class: FailureClass,
        code: &str,
        decision: RetryDecision,
    ) -> impl Future<Output = Result<(), DispatchError>> + Send;

    /// Extends the leases (of one consumer) that still carry their tokens until now +
    /// `lease`, on `connection`; answers which were renewed, by event id. A lease not renewed
    /// was lost (its token is stale, counted). Outside a transaction the renewal commits
    /// itself; inside one, it commits with it.
    ///
    /// # Errors
    /// [`DispatchError::Database`].
    fn renew(
        &self,
        connection: &mut Connection<Self>,
        leases: &[&Lease],
        lease: Duration,
    ) -> impl Future<Output = Result<Vec<Uuid>, DispatchError>> + Send;

    /// Locks the delivery of `lease` in the caller's transaction if its token is current: the
    /// transactional kind's fence, taken before the handler runs, which also keeps lease-expiry
    /// recovery off the row while the transaction runs.
    ///
    /// # Errors
    /// [`DispatchError::StaleToken`] (counted); [`DispatchError::Database`].
    fn lock_lease(
        &self,
        connection: &mut Connection<Self>,
        lease: &Lease,
    ) -> impl Future<Output = Result<(), DispatchError>> + Send;

    /// Marks the point a shadow-mode handler's writes are rolled back to
    /// ([`Store::end_shadow`]), in the handler's transaction.
    ///
    /// # Errors
    /// [`DispatchError::Database`].
    fn begin_shadow(
        &self,
        connection: &mut Connection<Self>,
    ) -> impl Future<Output = Result<(), DispatchError>> + Send;

    /// Undoes everything a shadow-mode handler wrote since [`Store::begin_shadow`].
    ///
    /// # Errors
    /// [`DispatchError::Database`].
    fn end_shadow(
        &self,
        connection: &mut Connection<Self>,
    ) -> impl Future<Output = Result<(), DispatchError>> + Send;

    /// Records what a shadow-mode handler meant to do (its lease's intents), fenced like an
    /// effect write, on `connection`. One row per delivery generation.
    ///
    /// # Errors
    /// [`DispatchError::StaleToken`] or [`DispatchError::Database`].
    fn record_reconciliation(
        &self,
        connection: &mut Connection<Self>,
        lease: &Lease,
    ) -> impl Future<Output = Result<(), DispatchError>> + Send;

    /// Records, on `connection` (the legacy path's own transaction), the outcome the legacy
    /// path produced for `event_id` on behalf of `consumer`, which runs in shadow mode beside
    /// it: the effects it performed, described as the new handler would present them. The
    /// cut-over gate compares it with the shadow run of the same event
    /// ([`Operate::cutover_report`]). `Ok(true)`: recorded; `Ok(false)`: an outcome was
    /// recorded for the pair before, and it stays.
    ///
    /// # Errors
    /// [`DispatchError::UnknownConsumer`]; [`DispatchError::NotDelivered`] when the event is
    /// not one the consumer receives (or not visible in the session's tenant);
    /// [`DispatchError::InvalidOutcome`] ([`MAX_LEGACY_EFFECTS`], [`MAX_LEGACY_TEXT_CHARS`]);
    /// [`DispatchError::Database`]. Nothing is written then.
    fn record_legacy_outcome(
        &self,
        connection: &mut Connection<Self>,
        consumer: &str,
        event_id: Uuid,
        outcome: &[Intent],
    ) -> impl Future<Output = Result<bool, DispatchError>> + Send;

    /// Graceful shutdown: every lease of `owner` back to pending as if never claimed (attempt
    /// count restored, no attempt row, the token stays raised). Returns how many.
    ///
    /// # Errors
    /// [`DispatchError::Database`].
    fn release(&self, owner: &str) -> impl Future<Output = Result<u64, DispatchError>> + Send;

    /// Lease-expiry recovery: up to `limit` leases that ended back to pending (attempt kept, an
    /// attempt row with outcome `lease_expired`), or to `dead` when the attempts reached the
    /// consumer's retry policy's `max_attempts` (outcome `dead`, error code `lease_expired`).
    /// Returns how many.
    ///
    /// # Errors
    /// [`DispatchError::Database`].
    fn recover_expired(
        &self,
        limit: u32,
    ) -> impl Future<Output = Result<u64, DispatchError>> + Send;

    /// Records a handler's effect once, in the caller's transaction, checked against the
    /// lease's fencing token. `Ok(true)`: first time, perform the effect in the same
    /// transaction; `Ok(false)`: recorded before (a redelivery), skip it. The key is scoped per
    /// consumer and the event's tenant: the same key for another tenant's event is another
    /// effect. For a consumer on an executor class it is also scoped per the class's
    /// idempotency namespace: recorded by another consumer of the namespace, it reads as
    /// recorded before.
    ///
    /// # Errors
    /// [`DispatchError::StaleToken`] (counted) when the lease is no longer current;
    /// [`DispatchError::Database`].
    fn record_effect(
        &self,
        connection: &mut Connection<Self>,
        lease: &Lease,
        effect_key: &str,
        outcome_digest: &str,
    ) -> impl Future<Output = Result<bool, DispatchError>> + Send;

    /// Records that `workers` are alive now.
    ///
    /// # Errors
    /// [`DispatchError::Database`].
    fn heartbeat(
        &self,
        workers: &[Heartbeat],
    ) -> impl Future<Output = Result<(), DispatchError>> + Send;

    /// Removes the heartbeats of workers that stopped (shut down, not silent).
    ///
    /// # Errors
    /// [`DispatchError::Database`].
    fn forget_heartbeats(
        &self,
        owners: &[String],
    ) -> impl Future<Output = Result<(), DispatchError>> + Send;

    /// A scheduler round at `at`, or at the store's clock with `None` (PostgreSQL's, read in
    /// the locked transaction, so that processes whose clocks disagree agree on the slots;
    /// SQLite's is the process's): when this process takes the store's scheduler lock, appends one tick for each due slot of every schedule
    /// of the registry and moves the schedules on, in one transaction; a schedule seen for the
    /// first time starts at `now`. Without the lock (another process is running a round)
    /// nothing is done ([`ScheduleRound::leader`] is `false`). A slot is ticked once across
    /// every process: its tick's idempotency key names the schedule and slot (docs/runtime.md,
    /// "Schedules").
    ///
    /// # Errors
    /// [`DispatchError::TenantScoped`] for a handle scoped to one tenant (schedules span
    /// tenants); [`DispatchError::Database`] (nothing of the round is written).
    fn tick_schedules(
        &self,
        at: Option<SystemTime>,
    ) -> impl Future<Output = Result<ScheduleRound, DispatchError>> + Send;

    /// A lag-watch round (docs/runtime.md, "Lag breaches"): when this process takes the
    /// store's lag-watch lock, measures each lag threshold's pair (how long the oldest open
    /// delivery to the consumer of an event of the producer class has waited), opens a breach
    /// where the lag is over the threshold and none is open (appending one `event_lag.breach`,
    /// when the registry registers it, in the same transaction), and closes the open breach
    /// of a pair back at or under its threshold. Without the lock nothing is done
    /// ([`LagRound::leader`] is `false`).
    ///
    /// # Errors
    /// [`DispatchError::TenantScoped`] for a handle scoped to one tenant (a consumer's lag
    /// spans tenants); [`DispatchError::Database`] (nothing of the round is written).
    fn watch_lag(&self) -> impl Future<Output = Result<LagRound, DispatchError>> + Send;

    /// An evidence-recording round (docs/runtime.md, "Recorded evidence"): when the registry
    /// records usage evidence and this process takes the store's recording lock, records the
    /// report of the current slot of [`crate::EvidenceRecordingDescriptor::every_ms`] unless
    /// it is recorded already (one snapshot per slot across every process), and removes the
    /// snapshots older than its `keep_ms`, in one transaction. Without the lock, or without a
    /// recording in the registry, nothing is done ([`EvidenceRound::leader`] is `false`).
    ///
    /// # Errors
    /// [`DispatchError::TenantScoped`] for a handle scoped to one tenant (the signals span
    /// tenants); [`DispatchError::Database`] (nothing of the round is written).
    fn record_evidence(&self) -> impl Future<Output = Result<EvidenceRound, DispatchError>> + Send;

    /// The lag breaches, open ones first, then the newest closed, at most `limit` in all.
    ///
    /// # Errors
    /// [`DispatchError::Database`].
    fn lag_breaches(
        &self,
        limit: u32,
    ) -> impl Future<Output = Result<Vec<LagBreach>, DispatchError>> + Send;

    /// Every schedule a round has seen, by name.
    ///
    /// # Errors
    /// [`DispatchError::Database`].
    fn schedule_states(
        &self,
    ) -> impl Future<Output = Result<Vec<ScheduleState>, DispatchError>> + Send;

    /// Runs until `shutdown` turns true: wakes the [`Notify`] of a consumer in `wakers` when
    /// an append for it commits. Errors are logged and retried after `retry`; the workers'
    /// polling covers what is missed meanwhile.
    fn listen(
        &self,
        wakers: HashMap<String, Arc<Notify>>,
        retry: Duration,
        shutdown: watch::Receiver<bool>,
    ) -> impl Future<Output = ()> + Send;

    /// A consumer's doorbell for a worker about to sleep, waiting at most `wait` for it: while
    /// it is held, appends for the consumer wake [`Store::listen`]. `None`: not had in time,
    /// or the store wakes listeners on every append and needs no doorbell.
    ///
    /// # Errors
    /// [`DispatchError::Database`].
    fn hold_doorbell(
        &self,
        consumer: &str,
        wait: Duration,
    ) -> impl Future<Output = Result<Option<Self::Doorbell>, DispatchError>> + Send;

    /// Gives a doorbell back.
    ///
    /// # Errors
    /// [`DispatchError::Database`]; the doorbell is released anyway (its connection closed).
    fn release_doorbell(
        &self,
        doorbell: Self::Doorbell,
    ) -> impl Future<Output = Result<(), DispatchError>> + Send;

    /// Fenced operations refused so far because their token was stale. Monotonic for the life
    /// of the store.
    fn stale_tokens(&self) -> u64;

    /// A write transaction on the store's pool, begun the store's way (PostgreSQL: `BEGIN`;
    /// SQLite: `BEGIN IMMEDIATE`, which takes the write lock at once so a later write cannot
    /// fail to upgrade a stale read snapshot): the transaction an application appends in.
    ///
    /// # Errors
    /// [`DispatchError::Database`].
    fn begin(
        &self,
    ) -> impl Future<Output = Result<sqlx::Transaction<'static, Self::Database>, DispatchError>> + Send;

    /// A transaction on `connection` (a worker's kept connection), begun the store's way as
    /// [`Store::begin`]: the transactional handler's transaction.
    ///
    /// # Errors
    /// [`DispatchError::Database`].
    fn begin_on<'c>(
        &self,
        connection: &'c mut Connection<Self>,
    ) -> impl Future<Output = Result<sqlx::Transaction<'c, Self::Database>, DispatchError>> + Send;

    /// The newest generation of `event_id`'s delivery to `consumer` (`None`: no such delivery,
    /// or it was acked: an ack deletes the delivery, its `acked` attempt is its record).
    ///
    /// # Errors
    /// [`DispatchError::Database`].
    fn delivery(
        &self,
        event_id: Uuid,
        consumer: &str,
    ) -> impl Future<Output = Result<Option<DeliveryRecord>, DispatchError>> + Send;

    /// Every generation of `event_id`'s delivery to `consumer` that has a row, oldest first
    /// (the last is [`Store::delivery`]'s): a replayed delivery's superseded generations stay,
    /// with status [`DeliveryStatus::Replayed`]. Empty: no such delivery, or its only
    /// generation was acked.
    ///
    /// # Errors
    /// [`DispatchError::Database`].
    fn deliveries(
        &self,
        event_id: Uuid,
        consumer: &str,
    ) -> impl Future<Output = Result<Vec<DeliveryRecord>, DispatchError>> + Send;

    /// The attempt rows of `event_id`'s delivery to `consumer`, every generation, in the order
    /// they were written.
    ///
    /// # Errors
    /// [`DispatchError::Database`].
    fn attempts(
        &self,
        event_id: Uuid,
        consumer: &str,
    ) -> impl Future<Output = Result<Vec<AttemptRecord>, DispatchError>> + Send;

    /// Delivery rows of `consumer` in any of `statuses` (empty: every status). Acked
    /// deliveries have no row; count their attempts instead ([`Store::attempts`]).
    ///
    /// # Errors
    /// [`DispatchError::Database`].
    fn count_deliveries(
        &self,
        consumer: &str,
        statuses: &[DeliveryStatus],
    ) -> impl Future<Output = Result<u64, DispatchError>> + Send;

    /// Attempt rows of `consumer` with `outcome` (`acked`, `retry`, `dead`, `quarantined` or
    /// `lease_expired`, as [`AttemptRecord::outcome`]), every event and generation: acked
    /// deliveries are counted here, since an ack deletes the delivery row.
    ///
    /// # Errors
    /// [`DispatchError::Database`].
    fn count_attempts(
        &self,
        consumer: &str,
        outcome: &str,
    ) -> impl Future<Output = Result<u64, DispatchError>> + Send;

    /// Events in the outbox whose type is one of `event_types` (empty: every event): how
    /// many of a kind were appended, lifecycle events included.
    ///
    /// # Errors
    /// [`DispatchError::Database`].
    fn count_events(
        &self,
        event_types: &[&str],
    ) -> impl Future<Output = Result<u64, DispatchError>> + Send;

    /// The stored envelope of event `event_id` (`None`: no such event, or purged). Never the
    /// payload: its size only.
    ///
    /// # Errors
    /// [`DispatchError::Database`].
    fn event(
        &self,
        event_id: Uuid,
    ) -> impl Future<Output = Result<Option<EventRecord>, DispatchError>> + Send;

    /// The oldest `limit` reject rows, oldest first (a reject may be recorded shortly after
    /// the refused append returned: the audit runs outside the caller's transaction).
    ///
    /// # Errors
    /// [`DispatchError::Database`].
    fn rejects(
        &self,
        limit: u32,
    ) -> impl Future<Output = Result<Vec<RejectRecord>, DispatchError>> + Send;

    /// The effect row `consumer` recorded under `effect_key` for an event of `tenant_scope`
    /// (`None`: events without a tenant) ([`Store::record_effect`]; `None`: not recorded, so a
    /// handler would perform the effect): whether, when and by which delivery an effect was
    /// performed. An effect key is scoped per consumer and tenant.
    ///
    /// # Errors
    /// [`DispatchError::Database`].
    fn effect(
        &self,
        consumer: &str,
        effect_key: &str,
        tenant_scope: Option<&str>,
    ) -> impl Future<Output = Result<Option<EffectRecord>, DispatchError>> + Send;

    /// The reconciliation rows of `event_id`'s delivery to `consumer`: what its handler meant
    /// to do while the consumer ran in shadow mode, one row per delivery generation, oldest
    /// generation first (empty: never run in shadow mode).
    ///
    /// # Errors
    /// [`DispatchError::Database`].
    fn reconciliations(
        &self,
        event_id: Uuid,
        consumer: &str,
    ) -> impl Future<Output = Result<Vec<ReconciliationRecord>, DispatchError>> + Send;
}

/// What a [`Store::claim`] asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClaimRequest<'a> {
    /// The consumer whose deliveries are claimed.
    pub consumer: &'a str,
    /// The lease owner (one dispatcher worker).
    pub owner: &'a str,
    /// At most this many deliveries.
    pub batch: u32,
    /// Leased for a while, or held by the caller's transaction.
    pub hold: Hold,
    /// Only the head of each order key, never while another delivery of the key is leased.
    pub per_key: bool,
    /// Only deliveries whose `event_seq` is above this (0: all): the dispatcher's claim
    /// cursor. A per-key claim ignores it: it must see every head of a key.
    pub after_seq: i64,
    /// Only deliveries whose `event_seq` is at most this ([`i64::MAX`]: all): the end of the
    /// stretch the claim cursor handed the claim. A per-key claim ignores it.
    pub until_seq: i64,
}

impl<'a> ClaimRequest<'a> {
    /// A leased claim of up to `batch` deliveries of `consumer` for `owner`, from the head,
    /// without per-key ordering.
    pub fn leased(consumer: &'a str, owner: &'a str, batch: u32, lease: Duration) -> Self {
        Self {
            consumer,
            owner,
            batch,
            hold: Hold::Lease(lease),
            per_key: false,
            after_seq: 0,
            until_seq: i64::MAX,
        }
    }

    /// A claim held by the caller's transaction ([`Hold::Transaction`]).
    pub fn held(consumer: &'a str, owner: &'a str, batch: u32) -> Self {
        Self {
            hold: Hold::Transaction,
            ..Self::leased(consumer, owner, batch, Duration::ZERO)
        }
    }

    /// With or without per-key head-of-line ordering.
    #[must_use]
    pub fn per_key(mut self, per_key: bool) -> Self {
        self.per_key = per_key;
        self
    }

    /// Only deliveries whose `event_seq` is above `after_seq`.
    #[must_use]
    pub fn after_seq(mut self, after_seq: i64) -> Self {
        self.after_seq = after_seq;
        self
    }

    /// Only deliveries whose `event_seq` is at most `until_seq`.
    #[must_use]
    pub fn until_seq(mut self, until_seq: i64) -> Self {
        self.until_seq = until_seq;
        self
    }
}

/// How claimed deliveries are held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold {
    /// Leased until now + this long, with a new fencing token, committed by the claim.
    Lease(Duration),
    /// Held by the transaction open on the claim's connection (row locks, no write).
    Transaction,
}

/// One worker's heartbeat ([`Store::heartbeat`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Heartbeat {
    /// The worker (lease owner).
    pub owner: String,
    /// Its consumer.
    pub consumer: String,
    /// Its dispatcher's overrides ([`crate::Dispatcher::overrides`]), comma-separated.
    pub overrides: String,
}

impl Heartbeat {
    /// The heartbeat of worker `owner` of `consumer`.
    pub fn new(
        owner: impl Into<String>,
        consumer: impl Into<String>,
        overrides: impl Into<String>,
    ) -> Self {
        Self {
            owner: owner.into(),
            consumer: consumer.into(),
            overrides: overrides.into(),
        }
    }
}

/// A claimed delivery's lease: what every fenced operation presents.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Lease {
    /// The event.
    pub event_id: Uuid,
    /// The consumer.
    pub consumer: String,
    /// The lease owner (one dispatcher worker).
    pub owner: String,
    /// The fencing token the claim set; only the latest claim's token is current.
    pub token: i64,
    /// The attempt number, from 1.
    pub attempt: u32,
    /// The database's clock at the claim, in epoch seconds.
    pub claimed_at: f64,
    /// When the handler started, in epoch seconds of the database's clock (the claim time
    /// until [`Lease::mark_started`]); the attempt row's `started_at`.
    pub started_at: f64,
    claimed: Instant,
    held: bool,
    address: Option<String>,
    shadow: Option<ShadowLog>,
    generation: u32,
}

/// What a shadow-mode handler meant to do: the effects it would have recorded, in order
/// (shared by the clones of one lease, so the dispatcher reads what the handler wrote).
#[derive(Debug, Clone, Default)]
pub struct ShadowLog(std::sync::Arc<std::sync::Mutex<Vec<Intent>>>);

/// One effect a shadow-mode handler would have recorded.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Intent {
    /// The effect key it presented.
    pub effect_key: String,
    /// The outcome digest it presented.
    pub outcome_digest: String,
}

impl ShadowLog {
    /// Adds an intended effect.
    pub(crate) fn push(&self, intent: Intent) {
        if let Ok(mut intents) = self.0.lock() {
            intents.push(intent);
        }
    }

    /// The intended effects so far.
    pub fn intents(&self) -> Vec<Intent> {
        self.0
            .lock()
            .map(|intents| intents.clone())
            .unwrap_or_default()
    }
}

impl PartialEq for ShadowLog {
    /// The same log (clones of one lease), not equal contents.
    fn eq(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Lease {
    /// A lease as a claim returns it.
    pub fn new(
        event_id: Uuid,
        consumer: impl Into<String>,
        owner: impl Into<String>,
        token: i64,
        attempt: u32,
        claimed_at: f64,
    ) -> Self {
        Self {
            event_id,
            consumer: consumer.into(),
            owner: owner.into(),
            token,
            attempt,
            claimed_at,
            started_at: claimed_at,
            claimed: Instant::now(),
            held: false,
            address: None,
            shadow: None,
            generation: 0,
        }
    }

    /// The lease of a delivery of `generation` (0 for the delivery the append wrote, one more
    /// for each replay since).
    pub(crate) fn of_generation(mut self, generation: u32) -> Self {
        self.generation = generation;
        self
    }

    /// The delivery's generation: 0 for the delivery the append wrote, one more for each
    /// replay since. Settling a later generation may end its replay (docs/runtime.md,
    /// "Lifecycle events").
    pub fn generation(&self) -> u32 {
        self.generation
    }

    /// A lease of a consumer running in shadow mode: its effect writes are recorded as intents
    /// ([`Lease::shadow_log`]) instead of effect rows, and the dispatcher rolls back what its
    /// handler wrote on the transaction.
    pub(crate) fn shadowed(mut self) -> Self {
        self.shadow = Some(ShadowLog::default());
        self
    }

    /// Whether the consumer runs in shadow mode for this delivery: the handler computes its
    /// outcome, but must cause no side effect (the dispatcher rolls back its transaction's
    /// writes, and effect writes only record intents); a leased handler must check this before
    /// any external call.
    pub fn is_shadow(&self) -> bool {
        self.shadow.is_some()
    }

    /// The shadow-mode intent log (`None` in live mode).
    pub fn shadow_log(&self) -> Option<&ShadowLog> {
        self.shadow.as_ref()
    }

    /// A held claim's lease: the delivery stays `pending`, row-locked by the claiming
    /// transaction, and `token` and `attempt` are the values its ack writes (see
    /// [`Hold::Transaction`]).
    pub(crate) fn held(mut self) -> Self {
        self.held = true;
        self
    }

    /// A lease whose claim left its delivery's row at `address` (PostgreSQL's `ctid`, as
    /// text): the version a leased claim wrote, or the one a held claim locked. The ack reads
    /// the row there instead of probing the primary key. A held row cannot move while its lock
    /// is held; a leased one moves when its lease is renewed, and the ack then finds it by key.
    pub(crate) fn at_address(mut self, address: String) -> Self {
        self.address = Some(address);
        self
    }

    /// Where the claim left the delivery's row, when its store says.
    pub(crate) fn address(&self) -> Option<&str> {
        self.address.as_deref()
    }

    /// Whether the delivery is held by an open transaction (a batched transactional claim)
    /// rather than leased: its fence is the row lock, and its effect writes and ack must go
    /// through that transaction.
    pub fn is_held(&self) -> bool {
        self.held
    }

    /// Marks the handler's start: the claim's database time plus the local time elapsed since.
    pub fn mark_started(&mut self) {
        self.started_at = self.claimed_at + self.claimed.elapsed().as_secs_f64();
    }
}

/// What [`Store::ack`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct AckBatch {
    /// Deliveries acked (each with its attempt).
    pub acked: usize,
    /// Entries refused for a stale token (or another owner, or already settled), in input
    /// order: `(event_id, consumer, token)` as presented.
    pub stale: Vec<(Uuid, String, i64)>,
}

/// A delivery row's status. An acked delivery has no row (its `acked` attempt is its
/// record); [`DeliveryStatus::Acked`] is only found in PostgreSQL rows acked before acks
/// deleted the delivery (the fourth runtime step).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DeliveryStatus {
    /// Waiting for a claim (due at [`DeliveryRecord::available_at`]).
    Pending,
    /// Claimed: leased to [`DeliveryRecord::owner`] until [`DeliveryRecord::lease_until`].
    Leased,
    /// Acked before acks deleted the delivery (PostgreSQL only).
    Acked,
    /// Dead-lettered: out of attempts, or a permanent failure.
    Dead,
    /// Quarantined: a scope, schema or integrity failure, never retried.
    Quarantined,
    /// Superseded by a replay's next generation.
    Replayed,
    /// Discarded by an operator.
    Discarded,
}

impl DeliveryStatus {
    /// Every status, in the order above.
    pub const ALL: [Self; 7] = [
        Self::Pending,
        Self::Leased,
        Self::Acked,
        Self::Dead,
        Self::Quarantined,
        Self::Replayed,
        Self::Discarded,
    ];

    /// The status as the `status` column holds it (`pending`, `leased`, ...).
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Leased => "leased",
            Self::Acked => "acked",
            Self::Dead => "dead",
            Self::Quarantined => "quarantined",
            Self::Replayed => "replayed",
            Self::Discarded => "discarded",
        }
    }

    /// The status a `status` column value names (`None`: unknown).
    pub fn parse(status: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|known| known.as_str() == status)
    }

    /// Reads a status column value; an unknown one is a decode error.
    pub(crate) fn decode(status: &str) -> Result<Self, sqlx::Error> {
        Self::parse(status).ok_or_else(|| {
            sqlx::Error::Decode(format!("unknown delivery status {status:?}").into())
        })
    }
}

impl std::fmt::Display for DeliveryStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One delivery row as a store reads it (the newest generation of an event's delivery to a
/// consumer). Times are epoch seconds of the store's clock (PostgreSQL: the database's).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct DeliveryRecord {
    /// The generation: 0 for the delivery the append wrote, one more per replay.
    pub generation: u32,
    /// The status.
    pub status: DeliveryStatus,
    /// Claims counted so far (attempts made or running).
    pub attempts: u32,
    /// The current fencing token (raised by every claim).
    pub token: i64,
    /// The last lease owner (kept after the lease ends), if any.
    pub owner: Option<String>,
    /// When the current lease ends (`None` unless leased).
    pub lease_until: Option<f64>,
    /// When the delivery is (or was) due: its delay, or its retry's back-off.
    pub available_at: f64,
    /// The last failed attempt's error code (`lease_expired` after a recovery), if any.
    pub last_error_code: Option<String>,
    /// The replay that wrote this generation (`None` for generation 0, which the append wrote).
    pub replay_id: Option<i64>,
    /// The discard that settled it for good (status [`DeliveryStatus::Discarded`]; PostgreSQL
    /// only, where an operator console discards).
    pub discard_id: Option<i64>,
}

/// One stored event's envelope, as the outbox keeps it ([`Store::event`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct EventRecord {
    /// The global append order.
    pub seq: i64,
    /// The event type.
    pub event_type: String,
    /// The schema version it was appended under.
    pub schema_version: String,
    /// The order key (the registry's key fields of the payload, joined).
    pub order_key: String,
    /// The producer class that appended it.
    pub producer_class: String,
    /// The tenant scope, if any.
    pub tenant_scope: Option<String>,
    /// The idempotency key, if any.
    pub idempotency_key: Option<String>,
    /// The W3C trace id, if any.
    pub trace_id: Option<String>,
    /// The correlation id, if any.
    pub correlation_id: Option<String>,
    /// The causation id, if any.
    pub causation_id: Option<String>,
    /// The canonical payload's size in bytes.
    pub payload_bytes: u64,
}

/// One attempt: written once when an attempt ends (acked, failed, or its lease recovered).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct AttemptRecord {
    /// The delivery generation it belongs to.
    pub generation: u32,
    /// The attempt number, from 1.
    pub attempt: u32,
    /// The lease owner that made it.
    pub owner: String,
    /// The fencing token of its lease.
    pub token: i64,
    /// `acked`, `retry`, `dead`, `quarantined` or `lease_expired`.
    pub outcome: String,
    /// The typed error code of a failure (`lease_expired` for a recovered lease); `None` for
    /// an ack.
    pub error_code: Option<String>,
    /// When the handler started, in epoch seconds.
    pub started_at: f64,
    /// When the attempt ended, in epoch seconds.
    pub finished_at: f64,
    /// `finished_at - started_at` in whole milliseconds.
    pub duration_ms: u64,
}

/// One reject row: a refused append. Never the payload.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RejectRecord {
    /// The refused event's type.
    pub event_type: String,
    /// Its version, as the producer gave it.
    pub version: Option<String>,
    /// [`crate::Rejection::reason_code`].
    pub reason_code: String,
    /// The keyed payload digest (empty without a digest key, or for a size or depth refusal).
    pub payload_digest: String,
    /// When it was refused, in epoch seconds.
    pub rejected_at: f64,
}

/// One effect row: a handler's effect, recorded once per consumer and effect key
/// ([`Store::record_effect`], read with [`Store::effect`]).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct EffectRecord {
    /// The event whose delivery recorded it.
    pub event_id: Uuid,
    /// The outcome digest the handler presented.
    pub outcome_digest: String,
    /// The fencing token of the lease that recorded it (`None`: written without one).
    pub token: Option<i64>,
    /// When it was recorded, in epoch seconds.
    pub recorded_at: f64,
}

/// One reconciliation row: what a shadow-mode handler meant to do for one delivery generation
/// ([`Store::record_reconciliation`], read with [`Store::reconciliations`]).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ReconciliationRecord {
    /// The delivery generation.
    pub generation: u32,
    /// The fencing token of the lease whose handler ran.
    pub token: i64,
    /// The effects it would have recorded, in order.
    pub intents: Vec<Intent>,
    /// When it was recorded, in epoch seconds.
    pub recorded_at: f64,
}

/// A claimed delivery: its lease, what the handler is told and the event's payload.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Claimed {
    /// The lease every fenced operation presents.
    pub lease: Lease,
    /// The delivery as a handler sees it.
    pub delivery: Delivery,
    /// The event's global append order.
    pub event_seq: i64,
    /// The event's order key.
    pub order_key: String,
    /// The event's payload.
    pub payload: serde_json::Value,
    /// The event's W3C trace context, if it carried one.
    pub trace: Option<TraceContext>,
}

/// What a claim by event id ([`Store::claim_events`]) found.
#[derive(Debug, Clone, PartialEq, Default)]
#[non_exhaustive]
pub struct ClaimedEvents {
    /// The deliveries it leased, in `event_seq` order.
    pub claimed: Vec<Claimed>,
    /// The events whose delivery it left alone, and why.
    pub unclaimed: Vec<(Uuid, Unclaimed)>,
}

/// Why a claim by event id left an event's delivery to a consumer alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unclaimed {
    /// The consumer has no open delivery of the event: it was acked, replayed or discarded,
    /// or the event was never addressed to the consumer.
    Settled,
    /// Dead-lettered or quarantined: it waits for an operator's replay or discard.
    Ended,
    /// Open but not claimable now: not due yet, leased to another worker, behind an open
    /// delivery of its key, or its consumer is paused. Ask again after this long (zero when
    /// the store cannot tell when).
    Waiting(Duration),
}

/// The events of `event_ids` whose delivery `claimed` does not hold, in order.
pub(crate) fn not_claimed(event_ids: &[Uuid], claimed: &[Claimed]) -> Vec<Uuid> {
    event_ids
        .iter()
        .filter(|id| !claimed.iter().any(|c| c.lease.event_id == **id))
        .copied()
        .collect()
}

/// Where an event's delivery stands that a claim by id left alone, from what the store read:
/// whether one is open, whether one ended, and the seconds until an open one is due.
pub(crate) fn unclaimed_state(open: bool, ended: bool, wait_s: f64) -> Unclaimed {
    if open {
        Unclaimed::Waiting(Duration::try_from_secs_f64(wait_s.max(0.0)).unwrap_or_default())
    } else if ended {
        Unclaimed::Ended
    } else {
        Unclaimed::Settled
    }
}

/// Why a dispatch operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DispatchError {
    /// The lease's fencing token is no longer current: the lease expired and the delivery was
    /// recovered (and maybe claimed again), or it was acked, failed or released. Nothing was
    /// written; the store counts these.
    #[error("stale fencing token {token} for delivery {event_id} of consumer {consumer}")]
    StaleToken {
        /// The event.
        event_id: Uuid,
        /// The consumer.
        consumer: String,
        /// The token presented.
        token: i64,
    },
    /// A relay cursor's fencing token is no longer the newest: another relay took the cursor.
    /// Nothing was written.
    #[error("stale token {token} for relay cursor {name}: another relay took it")]
    StaleCursor {
        /// The cursor.
        name: String,
        /// The token presented.
        token: i64,
    },
    /// A relay cursor name that is not 1 to 64 of `a-z`, `0-9`, `.`, `_`, `-`, starting with a
    /// letter or digit.
    #[error(
        "`{0}` is not a cursor name: 1 to 64 of a-z, 0-9, '.', '_', '-', starting with a letter or digit"
    )]
    CursorName(String),
    /// A relay cursor owner that is empty or longer than 200 characters.
    #[error("a cursor owner of {chars} characters: it must have 1 to 200")]
    CursorOwner {
        /// Its length in characters.
        chars: usize,
    },
    /// A consumer handed to the dispatcher is not in the static registry.
    #[error("consumer {0} is not registered")]
    UnknownConsumer(String),
    /// A consumer names a retry policy the static registry lacks.
    #[error("consumer {consumer} names retry policy {policy}, which is not registered")]
    UnknownRetryPolicy {
        /// The consumer.
        consumer: String,
        /// The policy it names.
        policy: String,
    },
    /// A retry policy names an unknown kind, jitter or failure class.
    #[error(transparent)]
    RetryPolicy(#[from] RetryPolicyError),
    /// A claimed delivery of an event an inventory repaired cannot be conformed as the
    /// inventory recorded it: the registry lacks its target version, or the conformed payload's
    /// digest differs. The claim fails; the lease runs out and the delivery is retried, then
    /// dead-lettered, by recovery.
    #[error(
        "delivery of event {event_id} to {consumer} cannot be repaired as its inventory recorded"
    )]
    RepairUnavailable {
        /// The event.
        event_id: Uuid,
        /// The consumer.
        consumer: String,
    },
    /// A claimed event's payload did not parse (the column is `jsonb`, so this means a broken
    /// database).
    #[error("payload of event {event_id} is not JSON: {source}")]
    Payload {
        /// The event.
        event_id: Uuid,
        /// Why.
        source: serde_json::Error,
    },
    /// A trace id given to a timeline is not a W3C trace id; nothing was read.
    #[error("{0}")]
    TraceId(#[from] TraceContextError),
    /// The store cannot do what was asked (named in docs/runtime.md, "Stores"); nothing was
    /// written.
    #[error("not supported by this store: {0}")]
    Unsupported(&'static str),
    /// What was asked applies to every tenant, and the session works for one
    /// (docs/runtime.md, "Tenants"); nothing was written.
    #[error("{0} applies to every tenant: do it in the scope of all tenants, not tenant {1}")]
    TenantScoped(&'static str, String),
    /// A change of a consumer's operator state does not say who makes it or why, or says it
    /// in a way that cannot be recorded; nothing was written.
    #[error("{0}")]
    InvalidChange(String),
    /// The event is not one the consumer receives (not registered for it, unknown, or not
    /// visible in the session's tenant).
    #[error("event {event_id} is not an event consumer {consumer} receives")]
    NotDelivered {
        /// The consumer.
        consumer: String,
        /// The event.
        event_id: Uuid,
    },
    /// A legacy outcome that cannot be recorded as it is (too many effects, a blank or too
    /// long key or digest); nothing was written.
    #[error("{0}")]
    InvalidOutcome(String),
    /// The consumer's cut-over gate does not pass yet: its mode stays. The report says why.
    #[error("consumer {} may not go live yet: {}", .0.consumer, .0.shortfalls.join("; "))]
    CutoverRefused(Box<CutoverReport>),
    /// The database failed.
    #[error("outbox database error: {0}")]
    Database(#[from] sqlx::Error),
}

impl DispatchError {
    /// Whether this is [`DispatchError::StaleToken`].
    pub fn is_stale_token(&self) -> bool {
        matches!(self, Self::StaleToken { .. })
    }
}

/// Why a store could not be built or refuses to start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// A registered schema does not compile.
    #[error(transparent)]
    Schema(#[from] SchemaCompileError),
    /// The database's registry differs from the static registry.
    #[error(transparent)]
    Drift(#[from] RegistryDrift),
    /// The database lacks a runtime step this release writes through: its generated
    /// migrations were not applied.
    #[error(
        "the database lacks {what} (runtime step {step}): apply the generated migrations \
         before starting this release"
    )]
    MissingStep {
        /// The step's migration file, its number left out, e.g. `NNNN_evc_runtime_v31.sql`.
        step: &'static str,
        /// What the step creates that is missing.
        what: &'static str,
    },
    /// The database failed.
    #[error("outbox database error: {0}")]
    Database(#[from] sqlx::Error),
}
