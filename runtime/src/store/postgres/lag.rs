//! Lag-watch rounds on PostgreSQL (`evc_lag_breaches`, the twenty-fourth runtime step): one
//! process at a time, under a transaction-level advisory lock, on the database's clock; see
//! [`crate::store::lag`].

use sqlx::Row;
use sqlx::postgres::{PgPool, PgRow};
use uuid::Uuid;

use super::{PgStore, sql};
use crate::store::DispatchError;
use crate::store::lag::{self, Change, LAG_BREACH, LagBreach, LagRound, Measured};
use crate::store::lifecycle;

impl PgStore {
    /// [`crate::Store::watch_lag`] on PostgreSQL.
    pub(super) async fn run_lag_watch(&self) -> Result<LagRound, DispatchError> {
        let thresholds = self.registry().lag_thresholds;
        if thresholds.is_empty() {
            return Ok(LagRound::default());
        }
        // Under row-level security a session of one tenant sees only that tenant's
        // deliveries, and would close a breach the other tenants keep open.
        if let Some(tenant) = super::operations::session_tenant(self.pool()).await? {
            return Err(DispatchError::TenantScoped("a lag watch", tenant));
        }
        let descriptor = self.registry().event(LAG_BREACH);
        let mut transaction = self.pool().begin().await?;
        sqlx::query(sql::READ_COMMITTED)
            .execute(&mut *transaction)
            .await?;
        let locked: bool = sqlx::query_scalar(sql::TRY_LAG_WATCH_LOCK)
            .fetch_one(&mut *transaction)
            .await?;
        if !locked {
            return Ok(LagRound::default());
        }
        let mut round = LagRound {
            leader: true,
            ..LagRound::default()
        };
        for threshold in thresholds {
            let row = sqlx::query(sql::PAIR_LAG)
                .bind(threshold.consumer)
                .bind(threshold.producer_class)
                .fetch_optional(&mut *transaction)
                .await?;
            let measured = Measured {
                lag_ms: row.as_ref().map(|r| r.try_get("lag_ms")).transpose()?,
                oldest_event_id: row
                    .as_ref()
                    .map(|r| r.try_get::<Uuid, _>("event_id"))
                    .transpose()?,
            };
            let open: Option<(i64, i64)> = sqlx::query_as(sql::OPEN_BREACH)
                .bind(threshold.consumer)
                .bind(threshold.producer_class)
                .fetch_optional(&mut *transaction)
                .await?;
            match lag::change(threshold, measured, open) {
                Some(Change::Open) => {
                    // A breach whose event the contract refuses is not opened: the next round
                    // tries again, and the other pairs go on.
                    let mut savepoint = sqlx::Connection::begin(&mut *transaction).await?;
                    let opened = sqlx::query(sql::OPEN_LAG_BREACH)
                        .bind(threshold.consumer)
                        .bind(threshold.producer_class)
                        .bind(i64::try_from(threshold.threshold_ms).unwrap_or(i64::MAX))
                        .bind(measured.lag_ms.unwrap_or(0))
                        .bind(measured.oldest_event_id)
                        .fetch_one(&mut *savepoint)
                        .await?;
                    let id: i64 = opened.try_get("id")?;
                    let appended = match descriptor {
                        Some(descriptor) => {
                            let at = opened.try_get("opened")?;
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

    /// [`crate::Store::lag_breaches`] on PostgreSQL.
    pub(super) async fn read_lag_breaches(
        &self,
        limit: u32,
    ) -> Result<Vec<LagBreach>, DispatchError> {
        Ok(breaches(self.pool(), limit).await?)
    }
}

/// The breaches, open first, then the newest closed, at most `limit`; none on a database
/// without the twenty-fourth step.
pub(super) async fn breaches(pool: &PgPool, limit: u32) -> Result<Vec<LagBreach>, sqlx::Error> {
    let present: bool = sqlx::query_scalar(sql::HAS_LAG_BREACHES)
        .fetch_one(pool)
        .await?;
    if !present {
        return Ok(Vec::new());
    }
    sqlx::query(sql::LAG_BREACHES)
        .bind(i64::from(limit))
        .fetch_all(pool)
        .await?
        .iter()
        .map(breach)
        .collect()
}

fn breach(row: &PgRow) -> Result<LagBreach, sqlx::Error> {
    Ok(LagBreach {
        id: row.try_get("id")?,
        consumer: row.try_get("consumer")?,
        producer_class: row.try_get("producer_class")?,
        threshold_ms: row.try_get("threshold_ms")?,
        lag_ms: row.try_get("lag_ms")?,
        oldest_event_id: row.try_get("oldest_event_id")?,
        opened_at: row.try_get("opened_at")?,
        closed_at: row.try_get("closed_at")?,
    })
}
