//! What operators see of a store (read only), on both stores ([`Observe`]): a status report
//! per consumer (deliveries by status, oldest pending age, operator state), produce-to-ack lag
//! and attempt latency percentiles, silent workers, the same as Prometheus metrics, the
//! timeline of one trace, and the leases held now (docs/runtime.md, "Observing").

use std::future::Future;
use std::time::Duration;

use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry as MetricRegistry;
use uuid::Uuid;

use crate::registry::Registry;

use crate::registry::ConsumerMode;
use crate::store::{CursorState, DispatchError, FeedEvent, FeedPosition, Store};

/// Attempt rows the lag and latency percentiles read at most (the newest ones).
pub(crate) const SAMPLE_ATTEMPTS: i64 = 100_000;

/// The read-only operator view of a store: the status report and a trace's timeline.
/// Implemented by [`crate::PgStore`] and [`crate::SqliteStore`] with the same semantics
/// (docs/runtime.md, "Observing").
pub trait Observe: Store {
    /// The status report of the store's registered consumers: each one's deliveries by status
    /// (acked deliveries are not counted), oldest pending age and operator state; lag and
    /// attempt latency percentiles over the attempts of the last `window` (at most the newest
    /// 100,000 attempt rows); workers silent past their consumer's heartbeat threshold; this
    /// store's stale-token count.
    ///
    /// # Errors
    /// [`DispatchError::Database`].
    fn status(
        &self,
        window: Duration,
    ) -> impl Future<Output = Result<StatusReport, DispatchError>> + Send;

    /// Everything recorded for one W3C trace id, in time order: its events, their deliveries,
    /// their attempts, and the replays (and, on PostgreSQL, discards) of them. Empty for an
    /// unknown trace.
    ///
    /// # Errors
    /// [`DispatchError::TraceId`] when `trace_id` is not 32 lower-case hex digits (not all
    /// zero), checked before any query; [`DispatchError::Database`].
    fn timeline(
        &self,
        trace_id: &str,
    ) -> impl Future<Output = Result<Vec<TimelineEntry>, DispatchError>> + Send;

    /// The deliveries of `consumer` leased now, in event order: which worker holds each, until
    /// when, with which token, and the order key it holds (what a stuck worker or a blocked key
    /// is waiting on). Deliveries held by a transactional batch's open transaction stay
    /// `pending` and are not listed.
    ///
    /// # Errors
    /// [`DispatchError::Database`].
    fn leases(
        &self,
        consumer: &str,
    ) -> impl Future<Output = Result<Vec<LeasedDelivery>, DispatchError>> + Send;

    /// Every attempt of each registered consumer since the store was set up, counted by
    /// outcome and duration ([`AttemptTotals`]): counts that only grow, for Prometheus. Reads
    /// the whole attempts table (docs/runtime.md, "Observing"), so [`Observe::status`] leaves
    /// it out; add it with [`StatusReport::with_totals`] where metrics are rendered.
    ///
    /// # Errors
    /// [`DispatchError::Database`].
    fn attempt_totals(
        &self,
    ) -> impl Future<Output = Result<Vec<AttemptTotals>, DispatchError>> + Send;

    /// Up to `limit` events of the feed after `after`, in feed order, with their payloads
    /// (docs/runtime.md, "The event feed"): only events no later commit can precede, so a
    /// reader that moves its position to the last one returned never skips an event. Events
    /// of other tenants are not returned to a tenant's session.
    ///
    /// # Errors
    /// [`DispatchError::Database`]; [`DispatchError::Payload`] for a stored payload that is
    /// not JSON (a broken database).
    fn feed(
        &self,
        after: FeedPosition,
        limit: u32,
    ) -> impl Future<Output = Result<Vec<FeedEvent>, DispatchError>> + Send;

    /// The stored payload of event `event_id` (`None`: no such event, or purged). Whoever
    /// shows it to a person should pass it through [`crate::PayloadPolicy::redact`] first.
    ///
    /// # Errors
    /// [`DispatchError::Database`] (on PostgreSQL also when the session's role may not read
    /// payloads, as `evc_reader` may not); [`DispatchError::Payload`] for a stored payload that
    /// is not JSON.
    fn payload(
        &self,
        event_id: Uuid,
    ) -> impl Future<Output = Result<Option<serde_json::Value>, DispatchError>> + Send;

    /// The position of the newest event [`Observe::feed`] would return now (the start of the
    /// feed when there is none): where a reader that wants only new events begins.
    ///
    /// # Errors
    /// [`DispatchError::Database`].
    fn feed_head(&self) -> impl Future<Output = Result<FeedPosition, DispatchError>> + Send;

    /// The newest `limit` purges, newest first, as their audit rows record them: who, why,
    /// when and the rows removed per table (docs/runtime.md, "Retention"). A session of one
    /// tenant sees none: purges span every tenant.
    ///
    /// # Errors
    /// [`DispatchError::Database`].
    fn purges(
        &self,
        limit: u32,
    ) -> impl Future<Output = Result<Vec<crate::store::PurgeRecord>, DispatchError>> + Send;

    /// Usage evidence over `query`'s window, from the ledger alone (docs/runtime.md, "Usage
    /// evidence"): event types appended in one trace, consumers failing in one slot,
    /// (producer class, consumer) pairs with repeated dead letters or lag breaches, and
    /// escalations by step kind, each listed when seen at least `query.min_count` times.
    /// Refused in a session of one tenant ([`DispatchError::TenantScoped`]): the signals span
    /// every tenant.
    ///
    /// # Errors
    /// [`DispatchError::TenantScoped`] or [`DispatchError::Database`].
    fn evidence(
        &self,
        query: &crate::store::EvidenceQuery,
    ) -> impl Future<Output = Result<crate::store::EvidenceReport, DispatchError>> + Send;

    /// The newest `limit` (at most [`crate::MAX_EVIDENCE_SNAPSHOTS`]) usage-evidence snapshots
    /// the dispatcher recorded ([`crate::Store::record_evidence`]), newest slot first. A
    /// session of one tenant sees none: the signals span every tenant.
    ///
    /// # Errors
    /// [`DispatchError::Database`].
    fn evidence_snapshots(
        &self,
        limit: u32,
    ) -> impl Future<Output = Result<Vec<crate::store::EvidenceSnapshot>, DispatchError>> + Send;
}

/// A delivery leased now ([`Observe::leases`]). Times are epoch seconds of the store's clock.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct LeasedDelivery {
    /// The event.
    pub event_id: Uuid,
    /// The consumer.
    pub consumer: String,
    /// The delivery's generation (0 unless replayed).
    pub generation: u32,
    /// The event's global append order.
    pub event_seq: i64,
    /// The order key the delivery holds (`None`: the consumer does not order per key).
    pub order_key: Option<String>,
    /// The worker holding the lease.
    pub owner: String,
    /// The lease's fencing token.
    pub token: i64,
    /// The attempt the lease runs, from 1.
    pub attempt: u32,
    /// When the lease ends unless renewed.
    pub lease_until: f64,
}

/// One consumer's deliveries and operator state.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ConsumerStatus {
    /// The consumer.
    pub consumer: String,
    /// Deliveries waiting to be claimed (due or backing off).
    pub pending: i64,
    /// Deliveries leased to a worker now.
    pub leased: i64,
    /// Dead-lettered deliveries.
    pub dead: i64,
    /// Quarantined deliveries.
    pub quarantined: i64,
    /// How long the oldest pending delivery has waited; `None` when nothing is pending.
    pub oldest_pending: Option<Duration>,
    /// Paused by an operator.
    pub paused: bool,
    /// The mode in force: the operator's override, else the contract's.
    pub mode: ConsumerMode,
    /// Fenced operations refused for a stale token, by every process, since the database was
    /// set up (`evc_stale_rejections`; stored after the refusal, on its own task).
    pub stale_rejections: i64,
}

/// p50, p95 and p99 of a sample.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct Percentiles {
    /// Values in the sample.
    pub samples: i64,
    /// Median.
    pub p50: Duration,
    /// 95th percentile.
    pub p95: Duration,
    /// 99th percentile.
    pub p99: Duration,
}

/// Produce-to-ack lag of one producer class's events at one consumer.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Lag {
    /// The producer class of the events.
    pub producer_class: String,
    /// The consumer.
    pub consumer: String,
    /// From the event's `produced_at` to its delivery's ack.
    pub latency: Percentiles,
}

/// How long one consumer's attempts took, from handler start to settlement.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct AttemptLatency {
    /// The consumer.
    pub consumer: String,
    /// Attempt durations (every outcome).
    pub latency: Percentiles,
}

/// How many attempts ended each way: the claims that were acked, failed (to be retried, dead,
/// quarantined) or lost their lease.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct AttemptOutcomes {
    /// Acked.
    pub acked: i64,
    /// Failed, to be retried.
    pub retry: i64,
    /// Failed for good: dead-lettered.
    pub dead: i64,
    /// Failed for good: quarantined.
    pub quarantined: i64,
    /// The lease ran out and recovery took the delivery back.
    pub lease_expired: i64,
}

impl AttemptOutcomes {
    /// Counts one attempt that ended as `outcome` (an attempt row's `outcome`); an unknown
    /// outcome counts nowhere.
    pub(crate) fn count(&mut self, outcome: &str, by: i64) {
        match outcome {
            "acked" => self.acked += by,
            "retry" => self.retry += by,
            "dead" => self.dead += by,
            "quarantined" => self.quarantined += by,
            "lease_expired" => self.lease_expired += by,
            _ => {}
        }
    }

    /// Each outcome with its count, in a fixed order.
    pub fn each(&self) -> [(&'static str, i64); 5] {
        [
            ("acked", self.acked),
            ("retry", self.retry),
            ("dead", self.dead),
            ("quarantined", self.quarantined),
            ("lease_expired", self.lease_expired),
        ]
    }
}

/// The upper bounds, in milliseconds, of the attempt-duration histogram's buckets
/// ([`AttemptTotals::durations`]): Prometheus's default buckets, 5 ms to 10 s.
pub const DURATION_BUCKETS_MS: [i64; 11] =
    [5, 10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000];

/// The SQL expression (both stores) of the duration bucket of `column`, in milliseconds: the
/// index of the first of [`DURATION_BUCKETS_MS`] it does not pass, or their count.
pub(crate) fn duration_bucket(column: &str) -> String {
    let mut case = String::from("CASE");
    for (index, bound) in DURATION_BUCKETS_MS.iter().enumerate() {
        case.push_str(&format!(" WHEN {column} <= {bound} THEN {index}"));
    }
    case.push_str(&format!(" ELSE {} END", DURATION_BUCKETS_MS.len()));
    case
}

/// The outcomes [`AttemptOutcomes`] counts, as a SQL list (`'acked', 'retry', ...`).
pub(crate) fn known_outcomes() -> String {
    AttemptOutcomes::default()
        .each()
        .iter()
        .map(|(outcome, _)| format!("'{outcome}'"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Every attempt one consumer's deliveries have had since the store was set up: counts that
/// only grow (until a purge erases the attempts of purged events), so that Prometheus can take
/// rates of them.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct AttemptTotals {
    /// The consumer.
    pub consumer: String,
    /// How the attempts ended.
    pub outcomes: AttemptOutcomes,
    /// Attempts by duration: `durations[i]` counts those that took at most
    /// [`DURATION_BUCKETS_MS`]`[i]` and longer than the bound before it; the last, those longer
    /// than every bound.
    pub durations: [i64; DURATION_BUCKETS_MS.len() + 1],
    /// The attempts' durations added up.
    pub duration_sum: Duration,
}

impl AttemptTotals {
    /// The totals of rows of `(consumer, outcome, bucket, attempts, duration_ms)`, as the
    /// stores' attempt-totals queries return them (`bucket` indexes [`Self::durations`]), one
    /// per consumer in name order.
    pub(crate) fn fold(rows: impl IntoIterator<Item = TotalsRow>) -> Vec<Self> {
        let mut totals: std::collections::BTreeMap<String, Self> =
            std::collections::BTreeMap::new();
        for row in rows {
            let entry = totals.entry(row.consumer.clone()).or_insert_with(|| Self {
                consumer: row.consumer,
                outcomes: AttemptOutcomes::default(),
                durations: [0; DURATION_BUCKETS_MS.len() + 1],
                duration_sum: Duration::ZERO,
            });
            entry.outcomes.count(&row.outcome, row.attempts);
            let bucket = usize::try_from(row.bucket)
                .unwrap_or(0)
                .min(DURATION_BUCKETS_MS.len());
            entry.durations[bucket] += row.attempts;
            entry.duration_sum +=
                Duration::from_millis(u64::try_from(row.duration_ms).unwrap_or(0));
        }
        totals.into_values().collect()
    }

    /// How many attempts there are.
    pub fn attempts(&self) -> i64 {
        self.durations.iter().sum()
    }
}

/// Appends of one event type refused for one reason within the report's window (the
/// newest 100,000 reject rows at most).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RecentRejects {
    /// The refused events' type.
    pub event_type: String,
    /// Why they were refused ([`crate::Rejection::reason_code`]).
    pub reason_code: String,
    /// How many were refused.
    pub rejects: i64,
    /// When the newest was refused, in epoch seconds.
    pub newest: f64,
}

/// One row of a store's attempt-totals query.
pub(crate) struct TotalsRow {
    pub(crate) consumer: String,
    pub(crate) outcome: String,
    pub(crate) bucket: i64,
    pub(crate) attempts: i64,
    pub(crate) duration_ms: i64,
}

/// A worker whose last heartbeat is older than its consumer's threshold.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct SilentWorker {
    /// The worker (lease owner).
    pub owner: String,
    /// Its consumer.
    pub consumer: String,
    /// Time since its last heartbeat.
    pub silent_for: Duration,
    /// The consumer's heartbeat threshold.
    pub threshold: Duration,
    /// The executor class its consumer runs on, and who answers for its workers; `None`
    /// when the consumer names no class.
    pub class: Option<ClassOwner>,
}

/// An executor class and the owner its contract names for silent workers.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClassOwner {
    /// The class (`notification.email`).
    pub executor_class: String,
    /// Who answers when its workers fall silent (`heartbeat_owner`).
    pub heartbeat_owner: String,
}

impl ClassOwner {
    /// Class `executor_class`, answered for by `heartbeat_owner`.
    pub fn new(executor_class: impl Into<String>, heartbeat_owner: impl Into<String>) -> Self {
        Self {
            executor_class: executor_class.into(),
            heartbeat_owner: heartbeat_owner.into(),
        }
    }

    /// The class of consumer `consumer` in `registry`, if it names one.
    pub(crate) fn of(registry: &Registry, consumer: &str) -> Option<Self> {
        registry
            .class_of(consumer)
            .map(|class| Self::new(class.name, class.heartbeat_owner))
    }
}

/// The heartbeats of one executor class's workers ([`StatusReport::classes`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClassHealth {
    /// The class and who answers for it.
    pub class: ClassOwner,
    /// Its consumers, by name.
    pub consumers: Vec<String>,
    /// Workers of those consumers with a heartbeat row.
    pub workers: usize,
    /// Of those, the workers silent past their consumer's threshold.
    pub silent: usize,
}

/// The health of every class that `classes` (consumer and class, per watched consumer) names,
/// by class: its consumers, their workers and the silent ones.
pub(crate) fn class_health<'a>(
    classes: impl IntoIterator<Item = (&'a str, &'a ClassOwner)>,
    workers: &[WorkerSettings],
    silent: &[SilentWorker],
) -> Vec<ClassHealth> {
    let mut by_class: std::collections::BTreeMap<&str, ClassHealth> =
        std::collections::BTreeMap::new();
    for (consumer, class) in classes {
        let health = by_class
            .entry(class.executor_class.as_str())
            .or_insert_with(|| ClassHealth {
                class: class.clone(),
                consumers: Vec::new(),
                workers: 0,
                silent: 0,
            });
        health.consumers.push(consumer.to_owned());
        health.workers += workers.iter().filter(|w| w.consumer == consumer).count();
        health.silent += silent.iter().filter(|w| w.consumer == consumer).count();
    }
    let mut health: Vec<ClassHealth> = by_class.into_values().collect();
    for class in &mut health {
        class.consumers.sort();
    }
    health
}

/// Where a live worker's settings came from, as its heartbeat records it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkerSettings {
    /// The worker (lease owner).
    pub owner: String,
    /// Its consumer.
    pub consumer: String,
    /// Where its store's payload policy came from: `registry` or `override`
    /// ([`crate::PolicySource`]); `None`: a process that does not record it.
    pub payload_policy: Option<String>,
    /// The dispatcher settings its configuration sets apart from the registry's
    /// ([`crate::Dispatcher::overrides`]); empty: all the registry's; `None`: a process that
    /// does not record them.
    pub dispatcher_overrides: Option<Vec<String>>,
}

impl WorkerSettings {
    /// Whether the worker runs on anything but the registry's settings.
    pub fn overridden(&self) -> bool {
        self.payload_policy.as_deref() == Some("override")
            || self
                .dispatcher_overrides
                .as_ref()
                .is_some_and(|overrides| !overrides.is_empty())
    }
}

/// What [`Observe::status`] reports.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct StatusReport {
    /// Every registered consumer, by name.
    pub consumers: Vec<ConsumerStatus>,
    /// Produce-to-ack lag per producer class and consumer, over the window.
    pub lag: Vec<Lag>,
    /// Attempt durations per consumer, over the window.
    pub attempts: Vec<AttemptLatency>,
    /// Every attempt per consumer since the store was set up, whatever the window: empty
    /// unless added with [`StatusReport::with_totals`].
    pub totals: Vec<AttemptTotals>,
    /// Appends refused within the window, by event type and reason.
    pub rejects: Vec<RecentRejects>,
    /// Workers silent past their consumer's threshold, longest silent first.
    pub silent_workers: Vec<SilentWorker>,
    /// Heartbeats by executor class: each class a watched consumer runs on, by name.
    pub classes: Vec<ClassHealth>,
    /// Every worker with a heartbeat row, by consumer and owner, and where its settings came
    /// from.
    pub workers: Vec<WorkerSettings>,
    /// Fenced operations this process's store refused for a stale token (not shared between
    /// processes).
    pub stale_tokens: u64,
    /// Every relay cursor, by name.
    pub relays: Vec<RelayStatus>,
    /// Every schedule a scheduler round has seen, by name.
    pub schedules: Vec<ScheduleStatus>,
    /// The open lag breaches (docs/runtime.md, "Lag breaches"), newest first.
    pub lag_breaches: Vec<crate::store::LagBreach>,
    /// The progress of each consumer with a cut-over gate (docs/runtime.md, "Cut-over gate"),
    /// by consumer.
    pub cutover_gates: Vec<crate::store::GateProgress>,
    /// The newest purge of each ledger, by ledger (docs/runtime.md, "Retention"); none
    /// before the first, and in a session of one tenant.
    pub last_purges: Vec<crate::store::PurgeRecord>,
    /// The newest applied inventory of each consumer, by consumer (docs/runtime.md,
    /// "Applying an inventory"); in a session of one tenant, that tenant's.
    pub last_inventories: Vec<crate::store::InventoryRecord>,
}

/// The most breaches a status report reads.
pub(crate) const REPORTED_BREACHES: u32 = 100;

/// How long a schedule's slot may stay unticked before the report calls it a problem: a
/// running scheduler ticks a slot within its round interval (a second by default).
pub const SCHEDULE_GRACE: Duration = Duration::from_secs(60);

/// A schedule in the status report.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ScheduleStatus {
    /// The schedule as stored.
    pub state: crate::store::ScheduleState,
    /// The slot after the newest handled one, epoch seconds (`None`: its cron expression
    /// has no further slot, or does not parse).
    pub next_slot: Option<f64>,
    /// How long that slot has been due without a tick at the report's time (zero: not due).
    pub overdue: Duration,
}

impl ScheduleStatus {
    /// `state` as it stands at `now`: its next slot, and how long that slot is overdue.
    pub fn at(state: crate::store::ScheduleState, now: std::time::SystemTime) -> Self {
        let next_slot = crate::store::schedule::next_slot(&state);
        let now = now
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or(Duration::ZERO)
            .as_secs_f64();
        let overdue = next_slot
            .map(|slot| now - slot)
            .filter(|late| *late > 0.0)
            .map_or(Duration::ZERO, Duration::from_secs_f64);
        Self {
            state,
            next_slot,
            overdue,
        }
    }

    /// The newest slot handled as a tick names it (RFC 3339, UTC: `2026-12-06T03:00:00Z`).
    pub fn last_slot_text(&self) -> Option<String> {
        self.state.last_slot.map(slot_text)
    }

    /// The next slot as a tick will name it.
    pub fn next_slot_text(&self) -> Option<String> {
        self.next_slot.map(slot_text)
    }
}

/// Epoch seconds as a slot is named.
fn slot_text(seconds: f64) -> String {
    crate::store::schedule::slot_text(crate::store::schedule::from_epoch(seconds))
}

/// Events after a relay cursor are counted up to this many ([`RelayStatus::behind`]).
pub const RELAY_BEHIND_COUNTED: i64 = 100_000;

/// A relay cursor in the status report.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RelayStatus {
    /// The cursor as stored.
    pub cursor: CursorState,
    /// Whether a relay's lease holds it now.
    pub held: bool,
    /// Events of the feed after it: the relay's lag, counted up to [`RELAY_BEHIND_COUNTED`].
    pub behind: i64,
}

impl RelayStatus {
    /// The publish rate now: its holder's last reported rate while a relay holds the cursor,
    /// 0 when none does.
    pub fn rate_per_s(&self) -> f64 {
        if self.held {
            self.cursor.rate_per_s
        } else {
            0.0
        }
    }

    /// `40 events` or `100000+ events` (the count stopped at [`RELAY_BEHIND_COUNTED`]).
    pub fn behind_text(&self) -> String {
        let plus = if self.behind >= RELAY_BEHIND_COUNTED {
            "+"
        } else {
            ""
        };
        let s = if self.behind == 1 { "" } else { "s" };
        format!("{}{plus} event{s}", self.behind)
    }
}

/// Something an operator should look at, most urgent kinds first (see
/// [`StatusReport::problems`]).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Problem {
    /// Deliveries dead-lettered or quarantined.
    DeadLetters {
        /// The consumer.
        consumer: String,
        /// Dead deliveries.
        dead: i64,
        /// Quarantined deliveries.
        quarantined: i64,
    },
    /// A worker stopped sending heartbeats.
    SilentWorker(SilentWorker),
    /// The p99 produce-to-ack lag is over the limit.
    LagBreach {
        /// The producer class.
        producer_class: String,
        /// The consumer.
        consumer: String,
        /// The measured p99.
        p99: Duration,
        /// The limit it breaks.
        limit: Duration,
    },
    /// Producers' appends of an event type were refused (and not stored) within the window.
    Rejects(RecentRejects),
    /// A relay cursor has events after it, and no relay holds it or its relay's rounds fail.
    RelayBehind(RelayStatus),
    /// A schedule's slot is due for longer than [`SCHEDULE_GRACE`] without a tick: no
    /// dispatcher runs the scheduler, or its rounds fail.
    ScheduleOverdue(ScheduleStatus),
    /// A consumer's lag for a producer class is over the threshold its contract sets (an open
    /// breach).
    LagThresholdBreached(crate::store::LagBreach),
    /// An operator paused the consumer, or set it `off`.
    Stopped {
        /// The consumer.
        consumer: String,
        /// Paused (else: mode `off`).
        paused: bool,
    },
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::DeadLetters {
                consumer,
                dead,
                quarantined,
            } => write!(
                f,
                "{consumer}: {dead} dead-lettered, {quarantined} quarantined"
            ),
            Self::SilentWorker(worker) => {
                write!(
                    f,
                    "{}: worker {} silent for {:.1} s (threshold {:.1} s",
                    worker.consumer,
                    worker.owner,
                    worker.silent_for.as_secs_f64(),
                    worker.threshold.as_secs_f64()
                )?;
                if let Some(class) = &worker.class {
                    write!(
                        f,
                        "; class {}, owner {}",
                        class.executor_class, class.heartbeat_owner
                    )?;
                }
                f.write_str(")")
            }
            Self::LagBreach {
                producer_class,
                consumer,
                p99,
                limit,
            } => write!(
                f,
                "{consumer}: p99 lag of {producer_class} events {:.3} s over {:.3} s",
                p99.as_secs_f64(),
                limit.as_secs_f64()
            ),
            Self::Rejects(rejects) => write!(
                f,
                "{}: {} append{} refused ({})",
                rejects.event_type,
                rejects.rejects,
                if rejects.rejects == 1 { "" } else { "s" },
                rejects.reason_code
            ),
            Self::RelayBehind(relay) => {
                write!(
                    f,
                    "relay {}: {} behind",
                    relay.cursor.name,
                    relay.behind_text()
                )?;
                match &relay.cursor.failing {
                    Some(error) => write!(f, ", failing: {error}"),
                    None => write!(f, ", no relay holds it"),
                }
            }
            Self::LagThresholdBreached(breach) => write!(
                f,
                "{}: lag of {} events over {:.3} s (breach {}, {:.3} s when it opened)",
                breach.consumer,
                breach.producer_class,
                breach.threshold_ms as f64 / 1000.0,
                breach.id,
                breach.lag_ms as f64 / 1000.0
            ),
            Self::ScheduleOverdue(schedule) => write!(
                f,
                "schedule {}: a slot due {:.0} s ago is not ticked (is a dispatcher running its scheduler?)",
                schedule.state.name,
                schedule.overdue.as_secs_f64()
            ),
            Self::Stopped { consumer, paused } => {
                let how = if *paused { "paused" } else { "mode off" };
                write!(f, "{consumer}: {how}")
            }
        }
    }
}

impl StatusReport {
    /// The report with `totals` ([`Observe::attempt_totals`]), which its metrics render as
    /// counters and histograms.
    #[must_use]
    pub fn with_totals(mut self, totals: Vec<AttemptTotals>) -> Self {
        self.totals = totals;
        self
    }

    /// The problems in the report, dead letters first, then silent workers, then lag over
    /// `lag_limit` (p99), then open lag breaches, then refused appends, then relays behind and
    /// stalled, then overdue schedules, then paused or stopped consumers.
    pub fn problems(&self, lag_limit: Duration) -> Vec<Problem> {
        let mut problems: Vec<Problem> = self
            .consumers
            .iter()
            .filter(|c| c.dead + c.quarantined > 0)
            .map(|c| Problem::DeadLetters {
                consumer: c.consumer.clone(),
                dead: c.dead,
                quarantined: c.quarantined,
            })
            .collect();
        problems.extend(
            self.silent_workers
                .iter()
                .cloned()
                .map(Problem::SilentWorker),
        );
        problems.extend(
            self.lag
                .iter()
                .filter(|lag| lag.latency.p99 > lag_limit)
                .map(|lag| Problem::LagBreach {
                    producer_class: lag.producer_class.clone(),
                    consumer: lag.consumer.clone(),
                    p99: lag.latency.p99,
                    limit: lag_limit,
                }),
        );
        problems.extend(
            self.lag_breaches
                .iter()
                .cloned()
                .map(Problem::LagThresholdBreached),
        );
        problems.extend(self.rejects.iter().cloned().map(Problem::Rejects));
        problems.extend(
            self.relays
                .iter()
                .filter(|r| r.behind > 0 && (!r.held || r.cursor.failing.is_some()))
                .cloned()
                .map(Problem::RelayBehind),
        );
        problems.extend(
            self.schedules
                .iter()
                .filter(|s| s.overdue > SCHEDULE_GRACE)
                .cloned()
                .map(Problem::ScheduleOverdue),
        );
        problems.extend(
            self.consumers
                .iter()
                .filter(|c| c.paused || c.mode == ConsumerMode::Off)
                .map(|c| Problem::Stopped {
                    consumer: c.consumer.clone(),
                    paused: c.paused,
                }),
        );
        problems
    }

    /// The report as Prometheus metrics, in the OpenMetrics text format.
    pub fn prometheus(&self) -> String {
        let mut registry = MetricRegistry::with_prefix("evc");
        let deliveries = gauge_family(
            &mut registry,
            "deliveries",
            "Deliveries by consumer and status",
        );
        let oldest = gauge_family(
            &mut registry,
            "oldest_pending_age_seconds",
            "Age of the oldest pending delivery",
        );
        let paused = gauge_family(
            &mut registry,
            "consumer_paused",
            "1 while an operator paused the consumer",
        );
        let lag = gauge_family(
            &mut registry,
            "lag_seconds",
            "Produce-to-ack lag by producer class and consumer",
        );
        registry.register(
            "attempt_duration_seconds",
            "Durations of every attempt since the store was set up, by consumer",
            DurationHistograms::of(&self.totals),
        );
        let outcomes = Family::<Labels, Counter<u64>>::default();
        registry.register(
            "attempts",
            "Attempts since the store was set up (claims that ended), by consumer and outcome",
            outcomes.clone(),
        );
        let rejected = gauge_family(
            &mut registry,
            "rejected_appends",
            "Appends refused within the window, by event type and reason",
        );
        let silent = gauge_family(
            &mut registry,
            "silent_workers",
            "Workers past their consumer's heartbeat threshold",
        );
        let class_silent = gauge_family(
            &mut registry,
            "class_silent_workers",
            "Workers past their consumer's heartbeat threshold, by executor class and owner",
        );
        let class_workers = gauge_family(
            &mut registry,
            "class_workers",
            "Workers with a heartbeat row, by executor class and owner",
        );
        let rejections = Family::<Labels, Counter<u64>>::default();
        registry.register(
            "stale_rejections",
            "Fenced operations refused for a stale token, by every process",
            rejections.clone(),
        );
        let stale = Counter::<u64>::default();
        registry.register(
            "stale_tokens",
            "Fenced operations refused for a stale token by this process",
            stale.clone(),
        );
        let relay_behind = gauge_family(
            &mut registry,
            "relay_behind_events",
            "Events of the feed after a relay cursor (its lag; counted up to 100000)",
        );
        let relay_held = gauge_family(
            &mut registry,
            "relay_held",
            "1 while a relay's lease holds the cursor",
        );
        let relay_rate = gauge_family(
            &mut registry,
            "relay_publish_rate",
            "Events per second the cursor's holder published over its recent rounds",
        );
        let relay_published = Family::<Labels, Counter<u64>>::default();
        registry.register(
            "relay_published_events",
            "Events the cursor's moves passed, by every relay",
            relay_published.clone(),
        );
        let relay_failures = Family::<Labels, Counter<u64>>::default();
        registry.register(
            "relay_failed_rounds",
            "Relay rounds that failed while a relay held the cursor",
            relay_failures.clone(),
        );
        let schedule_ticks = Family::<Labels, Counter<u64>>::default();
        registry.register(
            "schedule_ticks",
            "Ticks a schedule's rounds appended, by every dispatcher",
            schedule_ticks.clone(),
        );
        let schedule_skipped = Family::<Labels, Counter<u64>>::default();
        registry.register(
            "schedule_skipped_slots",
            "Missed slots of a schedule its rounds skipped",
            schedule_skipped.clone(),
        );
        let schedule_overdue = gauge_family(
            &mut registry,
            "schedule_overdue_seconds",
            "How long a schedule's next slot has been due without a tick (0: not due)",
        );
        let cutover_compared = gauge_family(
            &mut registry,
            "cutover_compared_deliveries",
            "Shadow runs since the consumer entered shadow mode that have a legacy outcome",
        );
        let cutover_required = gauge_family(
            &mut registry,
            "cutover_required_deliveries",
            "Compared deliveries the consumer's cut-over gate needs",
        );
        let purged_at = gauge_family(
            &mut registry,
            "retention_last_purge_timestamp_seconds",
            "When the newest purge ran (epoch seconds), by its ledger",
        );
        let purged_rows = gauge_family(
            &mut registry,
            "retention_last_purge_rows",
            "Rows the newest purge removed, by its ledger",
        );

        for c in &self.consumers {
            for (status, count) in [
                ("pending", c.pending),
                ("leased", c.leased),
                ("dead", c.dead),
                ("quarantined", c.quarantined),
            ] {
                deliveries
                    .get_or_create(&labels(&[("consumer", &c.consumer), ("status", status)]))
                    .set(count as f64);
            }
            let consumer = labels(&[("consumer", &c.consumer)]);
            oldest
                .get_or_create(&consumer)
                .set(c.oldest_pending.map_or(0.0, |age| age.as_secs_f64()));
            paused
                .get_or_create(&consumer)
                .set(f64::from(u8::from(c.paused)));
            let silent_count = self
                .silent_workers
                .iter()
                .filter(|w| w.consumer == c.consumer)
                .count();
            silent.get_or_create(&consumer).set(silent_count as f64);
            rejections
                .get_or_create(&consumer)
                .inc_by(u64::try_from(c.stale_rejections).unwrap_or(0));
        }
        for class in &self.classes {
            let class_labels = labels(&[
                ("executor_class", &class.class.executor_class),
                ("heartbeat_owner", &class.class.heartbeat_owner),
            ]);
            class_silent
                .get_or_create(&class_labels)
                .set(class.silent as f64);
            class_workers
                .get_or_create(&class_labels)
                .set(class.workers as f64);
        }
        for l in &self.lag {
            set_quantiles(
                &lag,
                &[
                    ("producer_class", &l.producer_class),
                    ("consumer", &l.consumer),
                ],
                &l.latency,
            );
        }
        for r in &self.rejects {
            rejected
                .get_or_create(&labels(&[
                    ("event_type", &r.event_type),
                    ("reason", &r.reason_code),
                ]))
                .set(r.rejects as f64);
        }
        for total in &self.totals {
            for (outcome, count) in total.outcomes.each() {
                outcomes
                    .get_or_create(&labels(&[
                        ("consumer", &total.consumer),
                        ("outcome", outcome),
                    ]))
                    .inc_by(u64::try_from(count).unwrap_or(0));
            }
        }
        for relay in &self.relays {
            let cursor = labels(&[("cursor", &relay.cursor.name)]);
            relay_behind.get_or_create(&cursor).set(relay.behind as f64);
            relay_held
                .get_or_create(&cursor)
                .set(f64::from(u8::from(relay.held)));
            relay_rate.get_or_create(&cursor).set(relay.rate_per_s());
            relay_published
                .get_or_create(&cursor)
                .inc_by(u64::try_from(relay.cursor.published).unwrap_or(0));
            relay_failures
                .get_or_create(&cursor)
                .inc_by(u64::try_from(relay.cursor.failed_rounds).unwrap_or(0));
        }
        for schedule in &self.schedules {
            let name = labels(&[("schedule", &schedule.state.name)]);
            schedule_ticks
                .get_or_create(&name)
                .inc_by(u64::try_from(schedule.state.ticks).unwrap_or(0));
            schedule_skipped
                .get_or_create(&name)
                .inc_by(u64::try_from(schedule.state.skipped).unwrap_or(0));
            schedule_overdue
                .get_or_create(&name)
                .set(schedule.overdue.as_secs_f64());
        }
        for gate in &self.cutover_gates {
            let consumer = labels(&[("consumer", &gate.consumer)]);
            cutover_compared
                .get_or_create(&consumer)
                .set(gate.compared as f64);
            cutover_required
                .get_or_create(&consumer)
                .set(f64::from(gate.gate.min_reconciled));
        }
        for purge in &self.last_purges {
            let ledger = labels(&[("ledger", &purge.ledger)]);
            purged_at.get_or_create(&ledger).set(purge.purged_at);
            purged_rows.get_or_create(&ledger).set(purge.total() as f64);
        }
        stale.inc_by(self.stale_tokens);

        let mut text = String::new();
        // Writing to a String cannot fail.
        let _ = encode(&mut text, &registry);
        text
    }
}

type Labels = Vec<(String, String)>;
type GaugeFamily = Family<Labels, Gauge<f64, std::sync::atomic::AtomicU64>>;

fn gauge_family(registry: &mut MetricRegistry, name: &str, help: &str) -> GaugeFamily {
    let family = GaugeFamily::default();
    registry.register(name, help, family.clone());
    family
}

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
        .collect()
}

fn set_quantiles(family: &GaugeFamily, pairs: &[(&str, &str)], latency: &Percentiles) {
    for (quantile, value) in [
        ("0.5", latency.p50),
        ("0.95", latency.p95),
        ("0.99", latency.p99),
    ] {
        let mut labels = labels(pairs);
        labels.push(("quantile".to_owned(), quantile.to_owned()));
        family.get_or_create(&labels).set(value.as_secs_f64());
    }
}

/// The attempt-duration histograms of [`AttemptTotals`], one per consumer, encoded from the
/// store's bucket counts (prometheus-client's own `Histogram` only counts observations made
/// in this process).
#[derive(Debug)]
struct DurationHistograms(Vec<(Labels, AttemptTotals)>);

impl DurationHistograms {
    fn of(totals: &[AttemptTotals]) -> Self {
        Self(
            totals
                .iter()
                .map(|t| (labels(&[("consumer", &t.consumer)]), t.clone()))
                .collect(),
        )
    }
}

impl EncodeMetric for DurationHistograms {
    fn encode(&self, mut encoder: MetricEncoder<'_>) -> Result<(), std::fmt::Error> {
        for (labels, totals) in &self.0 {
            let buckets: Vec<(f64, u64)> = DURATION_BUCKETS_MS
                .iter()
                .map(|ms| *ms as f64 / 1_000.0)
                .chain([f64::INFINITY])
                .zip(totals.durations)
                .map(|(bound, count)| (bound, u64::try_from(count).unwrap_or(0)))
                .collect();
            encoder
                .encode_family(labels)?
                .encode_histogram::<NoLabelSet>(
                    totals.duration_sum.as_secs_f64(),
                    u64::try_from(totals.attempts()).unwrap_or(0),
                    &buckets,
                    None,
                )?;
        }
        Ok(())
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

/// One entry of a trace's timeline.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct TimelineEntry {
    /// When, in epoch seconds of the database's clock: an event's `produced_at`, a delivery's
    /// creation, an attempt's end, a replay's or a discard's application.
    pub at: f64,
    /// `event`, `delivery`, `attempt`, `replay` or `discard`.
    pub kind: String,
    /// The event.
    pub event_id: Uuid,
    /// The consumer (deliveries and attempts).
    pub consumer: Option<String>,
    /// An event's type and version; a delivery's current status (and generation); an
    /// attempt's outcome and error code; a replay's or discard's id, the generation it
    /// superseded or discarded, the approval reference, and who proposed and approved it.
    pub detail: String,
    /// The attempt number (attempts), or the delivery's attempts so far (deliveries).
    pub attempt: Option<i32>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bucket SQL puts each duration where the bounds say, on a real SQLite.
    #[tokio::test]
    async fn the_bucket_expression_follows_the_bounds() -> Result<(), sqlx::Error> {
        let pool = sqlx::SqlitePool::connect("sqlite::memory:").await?;
        let mut durations = vec![0_i64];
        for bound in DURATION_BUCKETS_MS {
            durations.extend([bound - 1, bound, bound + 1]);
        }
        for duration in durations {
            let sql = format!("SELECT {}", duration_bucket(&duration.to_string()));
            let bucket: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
                .fetch_one(&pool)
                .await?;
            let expected = DURATION_BUCKETS_MS
                .iter()
                .position(|bound| duration <= *bound)
                .unwrap_or(DURATION_BUCKETS_MS.len());
            assert_eq!(
                usize::try_from(bucket).ok(),
                Some(expected),
                "{duration} ms"
            );
        }
        assert_eq!(
            known_outcomes(),
            "'acked', 'retry', 'dead', 'quarantined', 'lease_expired'"
        );
        Ok(())
    }
}
