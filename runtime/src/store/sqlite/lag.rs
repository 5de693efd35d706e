//! Lag-watch rounds on SQLite (`evc_lag_breaches`, migration 0015): the round's `BEGIN
//! IMMEDIATE` transaction is the store's one writer, so it is also the watch's lock; times
//! from the process's clock, as every time of this store. See [`crate::store::lag`].

use sqlx::Row;
use sqlx::sqlite::SqliteRow;

use super::{SqliteStore, epoch_now, parse_uuid, sql};
use crate::store::lag::{self, Change, LAG_BREACH, LagBreach, LagRound, Measured};
use crate::store::{DispatchError, lifecycle, schedule};

impl SqliteStore {
    /// [`crate::Store::watch_lag`] on SQLite.
    pub(super) async fn run_lag_watch(&self) -> Result<LagRound, DispatchError> {
        let thresholds = self.registry().lag_thresholds;
        if thresholds.is_empty() {
            return Ok(LagRound::default());
        }
        if let Some(tenant) = self.tenant() {
            return Err(DispatchError::TenantScoped(
                "a lag watch",
                tenant.to_owned(),
            ));
        }
        let descriptor = self.registry().event(LAG_BREACH);
        let mut transaction = self.begin().await?;
        // Read once the one writer is ours: a round that waited must not date its changes
        // before those of the round it waited for.
        let now = epoch_now();
        let mut round = LagRound {
            leader: true,
            ..LagRound::default()
        };
        for threshold in thresholds {
            let row = sqlx::query(sql::PAIR_LAG)
                .bind(threshold.consumer)
                .bind(threshold.producer_class)
                .bind(now)
                .fetch_optional(&mut *transaction)
                .await?;
            let measured = Measured {
                lag_ms: row.as_ref().map(|r| r.try_get("lag_ms")).transpose()?,
                oldest_event_id: row
                    .as_ref()
                    .map(|r| parse_uuid(&r.try_get::<String, _>("event_id")?))
                    .transpose()?,
            };
            let open: Option<(i64, i64)> = sqlx::query_as(sql::OPEN_BREACH)
                .bind(threshold.consumer)
                .bind(threshold.producer_class)
                .fetch_optional(&mut *transaction)
                .await?;
            match lag::change(threshold, measured, open) {
                Some(Change::Open) => {
                    // A breach whose event the contract refuses is not opened (see PostgreSQL's).
                    let mut savepoint = sqlx::Connection::begin(&mut *transaction).await?;
                    let id: i64 = sqlx::query_scalar(sql::OPEN_LAG_BREACH)
                        .bind(threshold.consumer)
                        .bind(threshold.producer_class)
                        .bind(i64::try_from(threshold.threshold_ms).unwrap_or(i64::MAX))
                        .bind(measured.lag_ms.unwrap_or(0))
                        .bind(measured.oldest_event_id.map(|id| id.to_string()))
                        .bind(now)
                        .fetch_one(&mut *savepoint)
                        .await?;
                    let appended = match descriptor {
                        Some(descriptor) => {
                            let at = schedule::slot_text(schedule::from_epoch(now));
                            let event = lag::breach_event(threshold, id, measured, at);
                            lifecycle::emit_checked(self, &mut savepoint, descriptor, event).await?
                        }
                        None => true,
                    };
                    if appended {
                        savepoint.commit().await?;
                        round.opened += 1;
                    } else {
                        savepoint.rollback().await?;
                    }
                }
                Some(Change::Close(id)) => {
                    sqlx::query(sql::CLOSE_LAG_BREACH)
                        .bind(id)
                        .bind(now)
                        .execute(&mut *transaction)
                        .await?;
                    round.closed += 1;
                }
                None => {}
            }
        }
        transaction.commit().await?;
        Ok(round)
    }

    /// [`crate::Store::lag_breaches`] on SQLite.
    pub(in crate::store) async fn read_lag_breaches(
        &self,
        limit: u32,
    ) -> Result<Vec<LagBreach>, DispatchError> {
        let rows = sqlx::query(sql::LAG_BREACHES)
            .bind(i64::from(limit))
            .fetch_all(self.pool())
            .await?;
        Ok(rows
            .iter()
            .map(breach)
            .collect::<Result<_, sqlx::Error>>()?)
    }
}

fn breach(row: &SqliteRow) -> Result<LagBreach, sqlx::Error> {
    Ok(LagBreach {
        id: row.try_get("id")?,
        consumer: row.try_get("consumer")?,
        producer_class: row.try_get("producer_class")?,
        threshold_ms: row.try_get("threshold_ms")?,
        lag_ms: row.try_get("lag_ms")?,
        oldest_event_id: row
            .try_get::<Option<String>, _>("oldest_event_id")?
            .map(|id| parse_uuid(&id))
            .transpose()?,
        opened_at: row.try_get("opened_at")?,
        closed_at: row.try_get("closed_at")?,
    })
}
