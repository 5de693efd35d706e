//! The store boundary: what producers and the dispatcher need from an outbox database.
//!
//! [`Store`] is the only thing the dispatcher and the producers talk to. PostgreSQL
//! ([`postgres::PgStore`]) is the production store; the embedded store
//! ([`sqlite::SqliteStore`], one process per file) implements the same trait with the same
//! checks ([`crate::append::Checker`]) and the same lease and fencing semantics.
//!
//! Both stores also answer the same read methods (`delivery`, `attempts`, `count_deliveries`,
//! `count_events`, `rejects`, `stale_rejections`) with the types below ([`DeliveryRecord`],
//! [`AttemptRecord`], [`RejectRecord`]), so tests and tools read a delivery's state without
//! SQL of their own.
//!
//! What a store provides, and in which part of the runtime it lands:
//!
//! | Method | Used by | Status |
//! | --- | --- | --- |
//! | [`Store::verify_registry`] | start-up of producers and dispatchers | implemented |
//! | [`Store::append`] | producer functions (through [`crate::Publish`]) | implemented |
//! | [`Store::append_batch`] | bulk producers | implemented |
//! | [`Store::claim`] (`FOR UPDATE SKIP LOCKED`, lease owner, lease end, new fencing token, per-key head-of-line) | dispatcher | implemented |
//! | [`Store::ack`], [`Store::ack_in`], [`Store::fail`], [`Store::renew`] (each presenting the fencing token; a stale token is rejected and counted) | dispatcher | implemented |
//! | [`Store::ack_batch`] (many fenced acks in one statement; stale ones refused, counted and reported) | batching workers, the outbox benchmark | implemented |
//! | [`Store::lock_lease`] (the transactional kind's fence) | dispatcher | implemented |
//! | [`Store::release`] (graceful shutdown), [`Store::recover_expired`] | dispatcher | implemented |
//! | [`Store::record_effect`] (idempotent effect row, fenced) | consumer handlers | implemented |
//!
//! Appends run on the caller's connection ([`Store::Connection`], inside the caller's
//! transaction), so an event commits or rolls back with the caller's own writes. Rejections are
//! audited on the store's own connection so they survive the caller's rollback
//! (docs/runtime.md, "Transaction semantics").

use std::future::Future;
use std::time::{Duration, Instant};

use uuid::Uuid;

use crate::append::{AppendError, AppendOptions, AppendReceipt, NewEvent, SchemaCompileError};
use crate::handler::{Delivery, FailureClass};
use crate::publish::OutgoingEvent;
use crate::registry::Registry;
use crate::retry::{RetryDecision, RetryPolicyError};
use crate::trace::{TraceContext, TraceContextError};

pub mod parity;
pub mod postgres;
pub mod sqlite;

pub use parity::{Drift, RegistryDrift, RegistryObject};

/// An outbox store: appends events with their deliveries and, later, leases deliveries to the
/// dispatcher.
pub trait Store: Send + Sync {
    /// The connection appends run on: the caller's transaction (`PgConnection` for PostgreSQL;
    /// a `Transaction` dereferences to it).
    type Connection: ?Sized + Send;

    /// The static registry the store checks events against and fans out from.
    fn registry(&self) -> &Registry;

    /// Compares the database's registry mirror with the static registry. Producers and
    /// dispatchers call it at start-up and refuse to start on drift.
    ///
    /// # Errors
    /// [`StoreError::Drift`] naming every difference, or [`StoreError::Database`].
    fn verify_registry(&self) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Appends one event and its deliveries in the caller's transaction, after the checks of
    /// [`crate::append`].
    ///
    /// # Errors
    /// [`AppendError::Rejected`] when a check fails (one reject row is recorded, nothing else
    /// is written); [`AppendError::Database`] when the database fails.
    fn append(
        &self,
        connection: &mut Self::Connection,
        event: OutgoingEvent,
        options: AppendOptions,
    ) -> impl Future<Output = Result<AppendReceipt, AppendError>> + Send;

    /// Appends many events and their deliveries in the caller's transaction, in few
    /// statements. Every event is checked first; one refused event refuses the whole batch.
    /// Receipts come back in the order of `events`.
    ///
    /// # Errors
    /// [`AppendError::BatchRejected`] naming the first refused event (a reject row is recorded
    /// for every refused one, nothing else is written); [`AppendError::Database`].
    fn append_batch(
        &self,
        connection: &mut Self::Connection,
        events: Vec<NewEvent>,
    ) -> impl Future<Output = Result<Vec<AppendReceipt>, AppendError>> + Send;

    /// Claims up to `batch` due pending deliveries of `consumer` for `owner`, oldest first,
    /// each leased until now + `lease` with its attempt counted and a new fencing token. With
    /// `per_key` only the head of each key is claimed, and never while another delivery of the
    /// key is leased: at most one delivery per key and consumer is in flight.
    ///
    /// # Errors
    /// [`DispatchError::Database`] or [`DispatchError::Payload`].
    fn claim(
        &self,
        consumer: &str,
        owner: &str,
        batch: u32,
        lease: Duration,
        per_key: bool,
    ) -> impl Future<Output = Result<Vec<Claimed>, DispatchError>> + Send;

    /// Acks a lease (fenced): deletes the delivery and writes its `acked` attempt row, the
    /// delivery's record from then on, on the store's own connection (the leased kind).
    ///
    /// # Errors
    /// [`DispatchError::StaleToken`] (counted) when the lease's token is no longer current;
    /// [`DispatchError::Database`].
    fn ack(&self, lease: &Lease) -> impl Future<Output = Result<(), DispatchError>> + Send;

    /// Acks many leases in one statement on the store's own connection: each lease is fenced
    /// on its own (still leased to its owner with its token), and every acked one is deleted
    /// and gets its `acked` attempt row (started at [`Lease::started_at`]). Leases whose token
    /// is stale write nothing; they are counted like [`Store::ack`]'s and returned.
    ///
    /// # Errors
    /// [`DispatchError::Database`] (nothing is acked then).
    fn ack_batch(
        &self,
        leases: &[&Lease],
    ) -> impl Future<Output = Result<AckBatch, DispatchError>> + Send;

    /// [`Store::ack`] on the caller's connection: the transactional kind acks in the handler's
    /// transaction, so the handler's writes, its effect row and the ack commit together.
    ///
    /// # Errors
    /// As [`Store::ack`].
    fn ack_in(
        &self,
        connection: &mut Self::Connection,
        lease: &Lease,
    ) -> impl Future<Output = Result<(), DispatchError>> + Send;

    /// Ends a failed attempt (fenced) as `decision` says — back to pending after the delay,
    /// dead or quarantined — with the failure's class and code, and writes its attempt row.
    ///
    /// # Errors
    /// As [`Store::ack`].
    fn fail(
        &self,
        lease: &Lease,
        class: FailureClass,
        code: &str,
        decision: RetryDecision,
    ) -> impl Future<Output = Result<(), DispatchError>> + Send;

    /// Extends the leases that still carry their tokens until now + `lease`; returns how many
    /// were renewed. A lease not renewed was lost (its token is stale, counted).
    ///
    /// # Errors
    /// [`DispatchError::Database`].
    fn renew(
        &self,
        leases: &[&Lease],
        lease: Duration,
    ) -> impl Future<Output = Result<usize, DispatchError>> + Send;

    /// Locks the delivery of `lease` in the caller's transaction if its token is current: the
    /// transactional kind's fence, taken before the handler runs, which also keeps lease-expiry
    /// recovery off the row while the transaction runs.
    ///
    /// # Errors
    /// [`DispatchError::StaleToken`] (counted); [`DispatchError::Database`].
    fn lock_lease(
        &self,
        connection: &mut Self::Connection,
        lease: &Lease,
    ) -> impl Future<Output = Result<(), DispatchError>> + Send;

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
    /// transaction; `Ok(false)`: recorded before (a redelivery), skip it.
    ///
    /// # Errors
    /// [`DispatchError::StaleToken`] (counted) when the lease is no longer current;
    /// [`DispatchError::Database`].
    fn record_effect(
        &self,
        connection: &mut Self::Connection,
        lease: &Lease,
        effect_key: &str,
        outcome_digest: &str,
    ) -> impl Future<Output = Result<bool, DispatchError>> + Send;
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
    shadow: Option<ShadowLog>,
    generation: u32,
}

/// What a shadow-mode handler meant to do: the effects it would have recorded, in order
/// (shared by the clones of one lease, so the dispatcher reads what the handler wrote).
#[derive(Debug, Clone, Default)]
pub struct ShadowLog(std::sync::Arc<std::sync::Mutex<Vec<Intent>>>);

/// One effect a shadow-mode handler would have recorded.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
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
    /// [`crate::PgStore::claim_held`]).
    pub(crate) fn held(mut self) -> Self {
        self.held = true;
        self
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

/// What [`Store::ack_batch`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct AckBatch {
    /// Deliveries acked (each with its attempt row).
    pub acked: usize,
    /// Entries refused for a stale token (or another owner, or already settled), in input
    /// order: `(event_id, consumer, token)` as presented.
    pub stale: Vec<(Uuid, String, i64)>,
}

/// A delivery row's status. An acked delivery has no row (its `acked` attempt row is its
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
}

/// One attempt row: written once when an attempt ends (acked, failed, or its lease recovered).
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
    /// The database failed.
    #[error("outbox database error: {0}")]
    Database(#[from] sqlx::Error),
}
