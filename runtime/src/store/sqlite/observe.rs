//! What operators see of a SQLite outbox ([`Observe`]): the status report, a trace's
//! timeline and the leases held now, with PostgreSQL's semantics (docs/runtime.md, "Observing"). SQLite has no
//! `percentile_cont`: the sample is read in order and its percentiles are interpolated here the
//! same way. Times are the process's clock, as every time of this store.

use std::collections::BTreeMap;
use std::time::Duration;

use sqlx::Row;

use super::{SqliteStore, epoch_now, parse_uuid, sql};
use crate::registry::ConsumerMode;
use crate::store::observe::{
    AttemptLatency, AttemptTotals, ClassOwner, ConsumerStatus, Lag, LeasedDelivery, Observe,
    Percentiles, RELAY_BEHIND_COUNTED, RecentRejects, RelayStatus, SAMPLE_ATTEMPTS, ScheduleStatus,
    SilentWorker, StatusReport, TimelineEntry, TotalsRow, WorkerSettings, class_health,
};
use crate::store::{DispatchError, FeedEvent, FeedPosition, PurgeRecord};

impl Observe for SqliteStore {
    async fn status(&self, window: Duration) -> Result<StatusReport, DispatchError> {
        let pool = &self.inner.pool;
        let registry = self.registry();
        let names = serde_json::Value::from(
            registry
                .consumers
                .iter()
                .map(|c| c.name)
                .collect::<Vec<_>>(),
        )
        .to_string();
        let now = epoch_now();
        let mut consumers = Vec::with_capacity(registry.consumers.len());
        for row in sqlx::query(sql::STATUS_COUNTS)
            .bind(&names)
            .bind(now)
            .bind(self.tenant())
            .fetch_all(pool)
            .await?
        {
            let consumer: String = row.try_get("consumer")?;
            let declared = registry
                .consumer(&consumer)
                .map_or(ConsumerMode::Live, |c| c.mode);
            let mode: Option<String> = row.try_get("mode")?;
            consumers.push(ConsumerStatus {
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

        let since = now - window.as_secs_f64();
        let mut lag_samples: BTreeMap<(String, String), Vec<f64>> = BTreeMap::new();
        for row in sqlx::query(sql::LAG_SAMPLE)
            .bind(since)
            .bind(SAMPLE_ATTEMPTS)
            .bind(self.tenant())
            .fetch_all(pool)
            .await?
        {
            lag_samples
                .entry((row.try_get("producer_class")?, row.try_get("consumer")?))
                .or_default()
                .push(row.try_get("seconds")?);
        }
        let lag = lag_samples
            .into_iter()
            .map(|((producer_class, consumer), values)| Lag {
                producer_class,
                consumer,
                latency: percentiles(values),
            })
            .collect();
        let mut attempt_samples: BTreeMap<String, Vec<f64>> = BTreeMap::new();
        for row in sqlx::query(sql::ATTEMPT_SAMPLE)
            .bind(since)
            .bind(SAMPLE_ATTEMPTS)
            .bind(self.tenant())
            .fetch_all(pool)
            .await?
        {
            attempt_samples
                .entry(row.try_get("consumer")?)
                .or_default()
                .push(row.try_get("seconds")?);
        }
        let attempts = attempt_samples
            .into_iter()
            .map(|(consumer, values)| AttemptLatency {
                consumer,
                latency: percentiles(values),
            })
            .collect();

        let thresholds = serde_json::Value::Object(
            registry
                .consumers
                .iter()
                .map(|c| (c.name.to_owned(), c.heartbeat_threshold_ms.into()))
                .collect(),
        )
        .to_string();
        let silent_workers = sqlx::query(sql::SILENT_WORKERS)
            .bind(&thresholds)
            .bind(now)
            .fetch_all(pool)
            .await?
            .iter()
            .map(|row| {
                let threshold: i64 = row.try_get("threshold_ms")?;
                let consumer: String = row.try_get("consumer")?;
                Ok(SilentWorker {
                    owner: row.try_get("owner")?,
                    class: ClassOwner::of(registry, &consumer),
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
                let overrides: Option<String> = row.try_get("dispatcher_overrides")?;
                Ok(WorkerSettings {
                    owner: row.try_get("owner")?,
                    consumer: row.try_get("consumer")?,
                    payload_policy: row.try_get("payload_policy")?,
                    // A JSON array of setting names; anything else records nothing.
                    dispatcher_overrides: overrides
                        .and_then(|text| serde_json::from_str::<Vec<String>>(&text).ok()),
                })
            })
            .collect::<Result<Vec<_>, sqlx::Error>>()?;

        let mut rejects = Vec::new();
        for row in sqlx::query(sql::RECENT_REJECTS)
            .bind(since)
            .bind(SAMPLE_ATTEMPTS)
            .bind(self.tenant())
            .fetch_all(pool)
            .await?
        {
            rejects.push(RecentRejects {
                event_type: row.try_get("event_type")?,
                reason_code: row.try_get("reason_code")?,
                rejects: row.try_get("rejects")?,
                newest: row.try_get("newest")?,
            });
        }
        let mut relays = Vec::new();
        for row in sqlx::query(sql::RELAY_CURSORS)
            .bind(RELAY_BEHIND_COUNTED)
            .bind(now)
            .bind(self.tenant())
            .fetch_all(pool)
            .await?
        {
            relays.push(RelayStatus {
                cursor: crate::store::cursor::cursor_state(&row)?,
                held: row.try_get("held")?,
                behind: row.try_get("behind")?,
            });
        }
        let owners: Vec<(&str, ClassOwner)> = registry
            .consumers
            .iter()
            .filter_map(|c| Some((c.name, ClassOwner::of(registry, c.name)?)))
            .collect();
        let classes = class_health(
            owners.iter().map(|(consumer, class)| (*consumer, class)),
            &workers,
            &silent_workers,
        );
        let now = std::time::SystemTime::now();
        let schedules = self
            .read_schedules()
            .await?
            .into_iter()
            // Only the registry's: a schedule that left the contracts keeps its row.
            .filter(|state| registry.schedules.iter().any(|s| s.name == state.name))
            .map(|state| ScheduleStatus::at(state, now))
            .collect();
        let lag_breaches = self
            .read_lag_breaches(crate::store::observe::REPORTED_BREACHES)
            .await?
            .into_iter()
            // Only the registry's pairs (see PostgreSQL's `Watched`).
            .filter(|breach| {
                breach.closed_at.is_none()
                    && registry.lag_thresholds.iter().any(|t| {
                        breach.consumer == t.consumer && breach.producer_class == t.producer_class
                    })
            })
            .collect();
        Ok(StatusReport {
            consumers,
            lag,
            attempts,
            totals: Vec::new(),
            rejects,
            silent_workers,
            classes,
            workers,
            stale_tokens: self.stale_tokens(),
            relays,
            schedules,
            lag_breaches,
            cutover_gates: self.gate_progress().await?,
            last_purges: self.newest_purges().await?,
            last_inventories: self.newest_inventories().await?,
        })
    }

    async fn attempt_totals(&self) -> Result<Vec<AttemptTotals>, DispatchError> {
        let names = serde_json::Value::from(
            self.registry()
                .consumers
                .iter()
                .map(|c| c.name)
                .collect::<Vec<_>>(),
        )
        .to_string();
        let mut totals = Vec::new();
        for row in sqlx::query(sql::ATTEMPT_TOTALS.as_str())
            .bind(&names)
            .bind(self.tenant())
            .fetch_all(&self.inner.pool)
            .await?
        {
            totals.push(TotalsRow {
                consumer: row.try_get("consumer")?,
                outcome: row.try_get("outcome")?,
                bucket: row.try_get("bucket")?,
                attempts: row.try_get("attempts")?,
                duration_ms: row.try_get("duration_ms")?,
            });
        }
        Ok(AttemptTotals::fold(totals))
    }

    async fn timeline(&self, trace_id: &str) -> Result<Vec<TimelineEntry>, DispatchError> {
        crate::trace::check_trace_id(trace_id)?;
        let rows = sqlx::query(sql::TIMELINE)
            .bind(trace_id)
            .bind(self.tenant())
            .fetch_all(&self.inner.pool)
            .await?;
        rows.iter()
            .map(|row| {
                Ok(TimelineEntry {
                    at: row.try_get("at")?,
                    kind: row.try_get("kind")?,
                    event_id: parse_uuid(&row.try_get::<String, _>("event_id")?)?,
                    consumer: row.try_get("consumer")?,
                    detail: row.try_get("detail")?,
                    attempt: row
                        .try_get::<Option<i64>, _>("attempt")?
                        .map(|n| i32::try_from(n).unwrap_or(i32::MAX)),
                })
            })
            .collect::<Result<Vec<_>, sqlx::Error>>()
            .map_err(DispatchError::from)
    }

    async fn leases(&self, consumer: &str) -> Result<Vec<LeasedDelivery>, DispatchError> {
        let rows = sqlx::query(sql::LEASES)
            .bind(consumer)
            .bind(self.tenant())
            .fetch_all(&self.inner.pool)
            .await?;
        rows.iter()
            .map(|row| {
                Ok(LeasedDelivery {
                    event_id: parse_uuid(&row.try_get::<String, _>("event_id")?)?,
                    consumer: consumer.to_owned(),
                    generation: u32::try_from(row.try_get::<i64, _>("generation")?).unwrap_or(0),
                    event_seq: row.try_get("event_seq")?,
                    order_key: row.try_get("order_key")?,
                    owner: row.try_get("lease_owner")?,
                    token: row.try_get("fencing_token")?,
                    attempt: u32::try_from(row.try_get::<i64, _>("attempt")?).unwrap_or(0),
                    lease_until: row.try_get("lease_until")?,
                })
            })
            .collect::<Result<_, sqlx::Error>>()
            .map_err(DispatchError::from)
    }

    async fn feed(&self, after: FeedPosition, limit: u32) -> Result<Vec<FeedEvent>, DispatchError> {
        let rows = sqlx::query(sql::FEED)
            .bind(after.seq)
            .bind(i64::from(limit))
            .bind(self.tenant())
            .fetch_all(&self.inner.pool)
            .await?;
        rows.iter()
            .map(|row| {
                let position = FeedPosition {
                    writer: 0,
                    seq: row.try_get("seq")?,
                };
                let event_id = parse_uuid(&row.try_get::<String, _>("event_id")?)?;
                crate::store::rows::feed_event(row, position, event_id)
            })
            .collect()
    }

    async fn payload(
        &self,
        event_id: uuid::Uuid,
    ) -> Result<Option<serde_json::Value>, DispatchError> {
        let text: Option<String> = sqlx::query_scalar(sql::READ_PAYLOAD)
            .bind(event_id.to_string())
            .bind(self.tenant())
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
        self.read_evidence(query).await
    }

    async fn evidence_snapshots(
        &self,
        limit: u32,
    ) -> Result<Vec<crate::store::EvidenceSnapshot>, DispatchError> {
        self.read_evidence_snapshots(limit).await
    }

    async fn purges(&self, limit: u32) -> Result<Vec<PurgeRecord>, DispatchError> {
        self.read_purges(limit).await
    }

    async fn feed_head(&self) -> Result<FeedPosition, DispatchError> {
        let seq: i64 = sqlx::query_scalar(sql::FEED_HEAD)
            .fetch_one(&self.inner.pool)
            .await?;
        Ok(FeedPosition { writer: 0, seq })
    }
}

fn seconds(value: f64) -> Duration {
    Duration::try_from_secs_f64(value.max(0.0)).unwrap_or(Duration::ZERO)
}

/// p50, p95 and p99 of `values` as PostgreSQL's `percentile_cont` computes them: linear
/// interpolation between the two nearest ranks of the sorted sample.
fn percentiles(mut values: Vec<f64>) -> Percentiles {
    values.sort_by(f64::total_cmp);
    let at = |fraction: f64| {
        let Some(last) = values.len().checked_sub(1) else {
            return Duration::ZERO;
        };
        let position = fraction * last as f64;
        let below = position.floor() as usize;
        let above = position.ceil() as usize;
        let value = values[below] + (values[above] - values[below]) * (position - below as f64);
        seconds(value)
    };
    Percentiles {
        samples: i64::try_from(values.len()).unwrap_or(i64::MAX),
        p50: at(0.5),
        p95: at(0.95),
        p99: at(0.99),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_interpolate_as_percentile_cont() {
        let p = percentiles(vec![4.0, 1.0, 3.0, 2.0]);
        assert_eq!(p.samples, 4);
        assert_eq!(p.p50, Duration::from_secs_f64(2.5));
        assert_eq!(p.p99, Duration::from_secs_f64(3.97));
        assert_eq!(percentiles(vec![7.0]).p95, Duration::from_secs(7));
    }
}
