//! What operators see of a PostgreSQL outbox (read only): the status report, a trace's
//! timeline and the leases held now ([`Observe`]; the report types are the shared ones of [`crate::store::observe`]),
//! over the static registry's consumers or, for the console, the deployed ones.

use std::time::Duration;

use sqlx::Row;
use sqlx::postgres::{PgPool, PgRow};

use super::{PgStore, sql};
use crate::registry::ConsumerMode;
use crate::store::{DispatchError, FeedEvent, FeedPosition, PurgeRecord};
// The report types moved to `store::observe` (both stores use them); kept here for old paths.
pub use crate::store::observe::ClassOwner;
pub use crate::store::observe::{
    AttemptLatency, AttemptOutcomes, AttemptTotals, ClassHealth, ConsumerStatus,
    DURATION_BUCKETS_MS, Lag, LeasedDelivery, Percentiles, Problem, RELAY_BEHIND_COUNTED,
    RecentRejects, RelayStatus, SCHEDULE_GRACE, ScheduleStatus, SilentWorker, StatusReport,
    TimelineEntry, WorkerSettings,
};
use crate::store::observe::{Observe, SAMPLE_ATTEMPTS, TotalsRow, class_health};

/// A consumer as the status report watches it: its name, the mode its contract declares and
/// its heartbeat threshold.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct WatchedConsumer {
    /// The consumer.
    pub name: String,
    /// The mode the contract declares (an operator may override it).
    pub declared_mode: ConsumerMode,
    /// How long its workers may go without a heartbeat.
    pub heartbeat_threshold: Duration,
    /// The executor class it runs on and who answers for its workers, if it names a class.
    pub class: Option<ClassOwner>,
}

impl WatchedConsumer {
    /// A watched consumer.
    pub fn new(
        name: impl Into<String>,
        declared_mode: ConsumerMode,
        heartbeat_threshold: Duration,
    ) -> Self {
        Self {
            name: name.into(),
            declared_mode,
            heartbeat_threshold,
            class: None,
        }
    }

    /// This consumer, running on executor class `class`.
    #[must_use]
    pub fn with_class(mut self, class: Option<ClassOwner>) -> Self {
        self.class = class;
        self
    }
}

impl Observe for PgStore {
    async fn status(&self, window: Duration) -> Result<StatusReport, DispatchError> {
        PgStore::status(self, window).await
    }

    async fn timeline(&self, trace_id: &str) -> Result<Vec<TimelineEntry>, DispatchError> {
        PgStore::timeline(self, trace_id).await
    }

    async fn attempt_totals(&self) -> Result<Vec<AttemptTotals>, DispatchError> {
        let names: Vec<&str> = self.registry().consumers.iter().map(|c| c.name).collect();
        attempt_totals(self.pool(), &names).await
    }

    async fn leases(&self, consumer: &str) -> Result<Vec<LeasedDelivery>, DispatchError> {
        let rows = sqlx::query(sql::LEASES)
            .bind(consumer)
            .fetch_all(&self.inner.pool)
            .await?;
        rows.iter()
            .map(|row| {
                Ok(LeasedDelivery {
                    event_id: row.try_get("event_id")?,
                    consumer: consumer.to_owned(),
                    generation: u32::try_from(row.try_get::<i32, _>("generation")?).unwrap_or(0),
                    event_seq: row.try_get("event_seq")?,
                    order_key: row.try_get("order_key")?,
                    owner: row.try_get("lease_owner")?,
                    token: row.try_get("fencing_token")?,
                    attempt: u32::try_from(row.try_get::<i32, _>("attempt")?).unwrap_or(0),
                    lease_until: row.try_get("lease_until")?,
                })
            })
            .collect::<Result<_, sqlx::Error>>()
            .map_err(DispatchError::from)
    }

    async fn feed(&self, after: FeedPosition, limit: u32) -> Result<Vec<FeedEvent>, DispatchError> {
        let rows = sqlx::query(sql::FEED)
            .bind(after.writer)
            .bind(after.seq)
            .bind(i64::from(limit))
            .fetch_all(&self.inner.pool)
            .await?;
        rows.iter()
            .map(|row| {
                let position = FeedPosition {
                    writer: row.try_get("writer")?,
                    seq: row.try_get("seq")?,
                };
                crate::store::rows::feed_event(row, position, row.try_get("event_id")?)
            })
            .collect()
    }

    async fn payload(
        &self,
        event_id: uuid::Uuid,
    ) -> Result<Option<serde_json::Value>, DispatchError> {
        let text: Option<String> = sqlx::query_scalar(sql::READ_PAYLOAD)
            .bind(event_id)
            .fetch_optional(&self.inner.pool)
            .await?;
        text.map(|text| {
            serde_json::from_str(&text)
                .map_err(|source| DispatchError::Payload { event_id, source })
        })
        .transpose()
    }

    async fn evidence(
        &self,
        query: &crate::store::EvidenceQuery,
    ) -> Result<crate::store::EvidenceReport, DispatchError> {
        super::evidence::evidence(&self.inner.pool, self.registry(), query).await
    }

    async fn evidence_snapshots(
        &self,
        limit: u32,
    ) -> Result<Vec<crate::store::EvidenceSnapshot>, DispatchError> {
        super::evidence::snapshots(&self.inner.pool, limit).await
    }

    async fn purges(&self, limit: u32) -> Result<Vec<PurgeRecord>, DispatchError> {
        super::retention::purges(&self.inner.pool, limit).await
    }

    async fn feed_head(&self) -> Result<FeedPosition, DispatchError> {
        let row = sqlx::query(sql::FEED_HEAD)
            .fetch_optional(&self.inner.pool)
            .await?;
        Ok(match row {
            Some(row) => FeedPosition {
                writer: row.try_get("writer")?,
                seq: row.try_get("seq")?,
            },
            None => FeedPosition::default(),
        })
    }
}

impl PgStore {
    /// The status report (see [`status`]) for the consumers of the static registry, with
    /// this store's stale-token count.
    ///
    /// # Errors
    /// [`DispatchError::Database`].
    pub async fn status(&self, window: Duration) -> Result<StatusReport, DispatchError> {
        let consumers: Vec<WatchedConsumer> = self
            .registry()
            .consumers
            .iter()
            .map(|c| {
                WatchedConsumer::new(
                    c.name,
                    c.mode,
                    Duration::from_millis(c.heartbeat_threshold_ms),
                )
                .with_class(ClassOwner::of(self.registry(), c.name))
            })
            .collect();
        let schedules: Vec<&str> = self.registry().schedules.iter().map(|s| s.name).collect();
        let pairs: Vec<(&str, &str)> = self
            .registry()
            .lag_thresholds
            .iter()
            .map(|t| (t.consumer, t.producer_class))
            .collect();
        let gates: Vec<(&str, crate::store::CutoverTerms)> = self
            .registry()
            .cutover_gates
            .iter()
            .map(|g| (g.consumer, g.into()))
            .collect();
        let watched = Watched {
            schedules: &schedules,
            lag_pairs: &pairs,
            gates: &gates,
        };
        let mut report = status(&self.inner.pool, &consumers, watched, window).await?;
        report.stale_tokens = self.stale_tokens();
        Ok(report)
    }

    /// Everything recorded for one W3C trace id (see [`timeline`]).
    ///
    /// # Errors
    /// [`DispatchError::TraceId`] when `trace_id` is not 32 lower-case hex digits (not all
    /// zero); [`DispatchError::Database`].
    pub async fn timeline(&self, trace_id: &str) -> Result<Vec<TimelineEntry>, DispatchError> {
        timeline(&self.inner.pool, trace_id).await
    }

    /// How many deliveries of `consumers` are still open: pending (due or not) or leased.
    /// Zero means nothing is left for those consumers to run until something new is appended;
    /// `evc dispatch --exit-when-idle` stops then.
    ///
    /// # Errors
    /// [`DispatchError::Database`].
    pub async fn open_deliveries(&self, consumers: &[String]) -> Result<u64, DispatchError> {
        let open: i64 = sqlx::query_scalar(sql::OPEN_DELIVERIES)
            .bind(consumers)
            .fetch_one(&self.inner.pool)
            .await?;
        // count(*) is never negative.
        Ok(u64::try_from(open).unwrap_or_default())
    }

    /// Forgets the heartbeats of `owners` (a dispatcher that shut down is not silent).
    pub(crate) async fn forget_heartbeats(&self, owners: &[String]) -> Result<(), DispatchError> {
        sqlx::query(sql::FORGET_HEARTBEATS)
            .bind(owners)
            .execute(&self.inner.pool)
            .await?;
        Ok(())
    }
}

/// The schedules and lag thresholds a status report covers: those of the registry (the
/// deployed one, for a console). Rows of others stay in the database once they leave the
/// contracts, and would read as overdue or breached for ever.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Watched<'a> {
    /// Schedule names.
    pub(crate) schedules: &'a [&'a str],
    /// (consumer, producer class) of each lag threshold.
    pub(crate) lag_pairs: &'a [(&'a str, &'a str)],
    /// (consumer, gate) of each cut-over gate.
    pub(crate) gates: &'a [(&'a str, crate::store::CutoverTerms)],
}

/// The status report of `consumers`: each one's deliveries by status (from the partial
/// indexes, so acked deliveries are not counted), oldest pending age and operator state; lag
/// and attempt latency percentiles over the attempts of the last `window` (at most the newest
/// 100,000 attempt rows); workers silent past their consumer's heartbeat threshold.
/// `stale_tokens` is 0: that count lives in the dispatching process's store.
///
/// # Errors
/// [`DispatchError::Database`].
pub(crate) async fn status(
    pool: &PgPool,
    consumers: &[WatchedConsumer],
    watched: Watched<'_>,
    window: Duration,
) -> Result<StatusReport, DispatchError> {
    let schedules = watched.schedules;
    let names: Vec<&str> = consumers.iter().map(|c| c.name.as_str()).collect();
    let rows = sqlx::query(sql::STATUS_COUNTS)
        .bind(&names)
        .fetch_all(pool)
        .await?;
    let mut statuses = Vec::with_capacity(rows.len());
    for row in &rows {
        let consumer: String = row.try_get("consumer")?;
        let declared = consumers
            .iter()
            .find(|c| c.name == consumer)
            .map_or(ConsumerMode::Live, |c| c.declared_mode);
        let mode: Option<String> = row.try_get("mode")?;
        statuses.push(ConsumerStatus {
            pending: row.try_get("pending")?,
            leased: row.try_get("leased")?,
            dead: row.try_get("dead")?,
            quarantined: row.try_get("quarantined")?,
            oldest_pending: row
                .try_get::<Option<f64>, _>("oldest_pending_s")?
                .map(seconds),
            paused: row.try_get("paused")?,
            stale_rejections: row.try_get("stale_rejections")?,
            mode: mode
                .as_deref()
                .and_then(ConsumerMode::parse)
                .unwrap_or(declared),
            consumer,
        });
    }

    let window_ms = i64::try_from(window.as_millis()).unwrap_or(i64::MAX);
    let lag = sampled(pool, sql::LAG, window_ms, |row, latency| {
        Ok(Lag {
            producer_class: row.try_get("producer_class")?,
            consumer: row.try_get("consumer")?,
            latency,
        })
    })
    .await?;
    let attempts = sampled(pool, sql::ATTEMPT_LATENCY, window_ms, |row, latency| {
        Ok(AttemptLatency {
            consumer: row.try_get("consumer")?,
            latency,
        })
    })
    .await?;

    let rejects = sqlx::query(sql::RECENT_REJECTS)
        .bind(window_ms)
        .bind(SAMPLE_ATTEMPTS)
        .fetch_all(pool)
        .await?
        .iter()
        .map(|row| {
            Ok(RecentRejects {
                event_type: row.try_get("event_type")?,
                reason_code: row.try_get("reason_code")?,
                rejects: row.try_get("rejects")?,
                newest: row.try_get("newest")?,
            })
        })
        .collect::<Result<Vec<_>, sqlx::Error>>()?;

    let thresholds: Vec<i64> = consumers
        .iter()
        .map(|c| i64::try_from(c.heartbeat_threshold.as_millis()).unwrap_or(i64::MAX))
        .collect();
    let silent_workers = sqlx::query(sql::SILENT_WORKERS)
        .bind(&names)
        .bind(&thresholds)
        .fetch_all(pool)
        .await?
        .iter()
        .map(|row| {
            let threshold: i64 = row.try_get("threshold_ms")?;
            let consumer: String = row.try_get("consumer")?;
            Ok(SilentWorker {
                owner: row.try_get("owner")?,
                class: consumers
                    .iter()
                    .find(|c| c.name == consumer)
                    .and_then(|c| c.class.clone()),
                consumer,
                silent_for: seconds(row.try_get("silent_s")?),
                threshold: Duration::from_millis(u64::try_from(threshold).unwrap_or(0)),
            })
        })
        .collect::<Result<Vec<_>, sqlx::Error>>()?;

    let workers = sqlx::query(sql::WORKER_SETTINGS)
        .bind(&names)
        .fetch_all(pool)
        .await?
        .iter()
        .map(|row| {
            Ok(WorkerSettings {
                owner: row.try_get("owner")?,
                consumer: row.try_get("consumer")?,
                payload_policy: row.try_get("payload_policy")?,
                dispatcher_overrides: row.try_get("dispatcher_overrides")?,
            })
        })
        .collect::<Result<Vec<_>, sqlx::Error>>()?;

    let relays = sqlx::query(sql::RELAY_CURSORS)
        .bind(RELAY_BEHIND_COUNTED)
        .fetch_all(pool)
        .await?
        .iter()
        .map(|row| {
            Ok(RelayStatus {
                cursor: crate::store::cursor::cursor_state(row)?,
                held: row.try_get("held")?,
                behind: row.try_get("behind")?,
            })
        })
        .collect::<Result<Vec<_>, sqlx::Error>>()?;

    let classes = class_health(
        consumers
            .iter()
            .filter_map(|c| Some((c.name.as_str(), c.class.as_ref()?))),
        &workers,
        &silent_workers,
    );
    // A database without the twenty-third step has no schedules to report.
    let has_schedules: bool = sqlx::query_scalar(sql::HAS_SCHEDULES)
        .fetch_one(pool)
        .await?;
    let now = std::time::SystemTime::now();
    let schedules = if has_schedules {
        // Only the registry's: a schedule that left the contracts keeps its row, and would read
        // as overdue for ever.
        super::schedule::states(pool)
            .await?
            .into_iter()
            .filter(|state| schedules.contains(&state.name.as_str()))
            .map(|state| ScheduleStatus::at(state, now))
            .collect()
    } else {
        Vec::new()
    };
    let lag_breaches = super::lag::breaches(pool, crate::store::observe::REPORTED_BREACHES)
        .await?
        .into_iter()
        .filter(|breach| {
            breach.closed_at.is_none()
                && watched.lag_pairs.iter().any(|(consumer, class)| {
                    breach.consumer == *consumer && breach.producer_class == *class
                })
        })
        .collect();
    Ok(StatusReport {
        consumers: statuses,
        lag,
        attempts,
        totals: Vec::new(),
        rejects,
        silent_workers,
        classes,
        workers,
        stale_tokens: 0,
        relays,
        schedules,
        lag_breaches,
        cutover_gates: super::cutover::progress_of(pool, watched.gates).await?,
        last_purges: super::retention::newest_purges(pool).await?,
        last_inventories: super::inventory::newest(pool).await?,
    })
}

/// Every attempt of `consumers` since the store was set up ([`Observe::attempt_totals`]).
///
/// # Errors
/// [`DispatchError::Database`].
pub(crate) async fn attempt_totals(
    pool: &PgPool,
    consumers: &[&str],
) -> Result<Vec<AttemptTotals>, DispatchError> {
    Ok(AttemptTotals::fold(
        sqlx::query(sql::ATTEMPT_TOTALS.as_str())
            .bind(consumers)
            .fetch_all(pool)
            .await?
            .iter()
            .map(totals_row)
            .collect::<Result<Vec<_>, sqlx::Error>>()?,
    ))
}

fn totals_row(row: &PgRow) -> Result<TotalsRow, sqlx::Error> {
    Ok(TotalsRow {
        consumer: row.try_get("consumer")?,
        outcome: row.try_get("outcome")?,
        bucket: row.try_get("bucket")?,
        attempts: row.try_get("attempts")?,
        duration_ms: row.try_get("duration_ms")?,
    })
}

/// Everything recorded for one W3C trace id, in time order: its events, their deliveries and
/// their attempts. Empty for an unknown trace.
///
/// # Errors
/// [`DispatchError::TraceId`] when `trace_id` is not a W3C trace id (checked before any
/// query: an upper-case or malformed id would match nothing and look like an empty trace);
/// [`DispatchError::Database`].
pub(crate) async fn timeline(
    pool: &PgPool,
    trace_id: &str,
) -> Result<Vec<TimelineEntry>, DispatchError> {
    crate::trace::check_trace_id(trace_id)?;
    let rows = sqlx::query(sql::TIMELINE)
        .bind(trace_id)
        .fetch_all(pool)
        .await?;
    rows.iter()
        .map(|row| {
            Ok(TimelineEntry {
                at: row.try_get("at")?,
                kind: row.try_get("kind")?,
                event_id: row.try_get("event_id")?,
                consumer: row.try_get("consumer")?,
                detail: row.try_get("detail")?,
                attempt: row.try_get("attempt")?,
            })
        })
        .collect::<Result<Vec<_>, sqlx::Error>>()
        .map_err(DispatchError::from)
}

/// Runs a percentile statement ([`sql::LAG`], [`sql::ATTEMPT_LATENCY`]) over the attempt
/// sample of the last `window_ms`, building one `T` per row from it and its percentiles.
async fn sampled<T>(
    pool: &PgPool,
    statement: &'static str,
    window_ms: i64,
    build: impl Fn(&PgRow, Percentiles) -> Result<T, sqlx::Error>,
) -> Result<Vec<T>, DispatchError> {
    let rows = sqlx::query(statement)
        .bind(window_ms)
        .bind(SAMPLE_ATTEMPTS)
        .fetch_all(pool)
        .await?;
    let built = rows
        .iter()
        .map(|row| build(row, percentiles(row)?))
        .collect::<Result<Vec<_>, sqlx::Error>>()?;
    Ok(built)
}

fn seconds(value: f64) -> Duration {
    Duration::try_from_secs_f64(value.max(0.0)).unwrap_or(Duration::ZERO)
}

fn percentiles(row: &PgRow) -> Result<Percentiles, sqlx::Error> {
    let values: Vec<f64> = row.try_get("seconds")?;
    let at = |index: usize| seconds(values.get(index).copied().unwrap_or(0.0));
    Ok(Percentiles {
        samples: row.try_get("samples")?,
        p50: at(0),
        p95: at(1),
        p99: at(2),
    })
}
