//! Read methods of the PostgreSQL store (the SQLite store answers the same ones): a delivery's
//! state, its attempt rows, counts and reject rows, without SQL of the caller's own. Times are
//! epoch seconds of the database's clock.

use sqlx::Row;
use sqlx::postgres::PgRow;
use uuid::Uuid;

use super::{PgStore, sql};
use crate::store::rows;
use crate::store::{
    AttemptRecord, DeliveryRecord, DeliveryStatus, DispatchError, EffectRecord, EventRecord,
    ReconciliationRecord, RejectRecord,
};

impl PgStore {
    /// The newest generation of `event_id`'s delivery to `consumer` (`None`: no such delivery,
    /// or it was acked: an ack deletes the delivery, its `acked` attempt is its record).
    ///
    /// # Errors
    /// [`DispatchError::Database`].
    pub async fn delivery(
        &self,
        event_id: Uuid,
        consumer: &str,
    ) -> Result<Option<DeliveryRecord>, DispatchError> {
        let row = sqlx::query(sql::READ_DELIVERY)
            .bind(event_id)
            .bind(consumer)
            .fetch_optional(self.pool())
            .await?;
        Ok(row.as_ref().map(delivery_record).transpose()?)
    }

    /// The attempt rows of `event_id`'s delivery to `consumer`, every generation, in the order
    /// they were written.
    ///
    /// # Errors
    /// [`DispatchError::Database`].
    pub async fn attempts(
        &self,
        event_id: Uuid,
        consumer: &str,
    ) -> Result<Vec<AttemptRecord>, DispatchError> {
        let rows = sqlx::query(sql::READ_ATTEMPTS)
            .bind(event_id)
            .bind(consumer)
            .fetch_all(self.pool())
            .await?;
        Ok(rows.iter().map(attempt_record).collect::<Result<_, _>>()?)
    }

    /// Delivery rows of `consumer` in any of `statuses` (empty: every status). Acked
    /// deliveries have no row; count their attempts instead ([`PgStore::attempts`]).
    ///
    /// # Errors
    /// [`DispatchError::Database`].
    pub async fn count_deliveries(
        &self,
        consumer: &str,
        statuses: &[DeliveryStatus],
    ) -> Result<u64, DispatchError> {
        let statuses: Vec<&str> = statuses.iter().map(|status| status.as_str()).collect();
        let count: i64 = sqlx::query_scalar(sql::COUNT_DELIVERIES)
            .bind(consumer)
            .bind(&statuses)
            .fetch_one(self.pool())
            .await?;
        Ok(u64::try_from(count).unwrap_or(0))
    }

    /// Events in the outbox whose type is one of `event_types` (empty: every event).
    ///
    /// # Errors
    /// [`DispatchError::Database`].
    pub async fn count_events(&self, event_types: &[&str]) -> Result<u64, DispatchError> {
        let count: i64 = sqlx::query_scalar(sql::COUNT_EVENTS)
            .bind(event_types)
            .fetch_one(self.pool())
            .await?;
        Ok(u64::try_from(count).unwrap_or(0))
    }

    /// The oldest `limit` reject rows, oldest first.
    ///
    /// # Errors
    /// [`DispatchError::Database`].
    pub async fn rejects(&self, limit: u32) -> Result<Vec<RejectRecord>, DispatchError> {
        let rows = sqlx::query(sql::READ_REJECTS)
            .bind(i64::from(limit))
            .fetch_all(self.pool())
            .await?;
        let mut rejects = Vec::with_capacity(rows.len());
        for row in &rows {
            rejects.push(RejectRecord {
                event_type: row.try_get("event_type")?,
                version: row.try_get("schema_version")?,
                reason_code: row.try_get("reason_code")?,
                payload_digest: row.try_get("payload_digest")?,
                rejected_at: row.try_get("rejected_at")?,
            });
        }
        Ok(rejects)
    }

    /// Stale-token refusals recorded in the database for `consumer` (by every process;
    /// written by a task of their own, so shortly after the refusal).
    ///
    /// # Errors
    /// [`DispatchError::Database`].
    pub async fn stale_rejections(&self, consumer: &str) -> Result<u64, DispatchError> {
        let count: Option<i64> = sqlx::query_scalar(sql::READ_STALE_REJECTIONS)
            .bind(consumer)
            .fetch_optional(self.pool())
            .await?;
        Ok(count.map_or(0, |count| u64::try_from(count).unwrap_or(0)))
    }
}

/// Every generation of `event_id`'s delivery to `consumer`, oldest first
/// ([`crate::Store::deliveries`]).
pub(super) async fn deliveries(
    store: &PgStore,
    event_id: Uuid,
    consumer: &str,
) -> Result<Vec<DeliveryRecord>, DispatchError> {
    let rows = sqlx::query(sql::READ_DELIVERIES)
        .bind(event_id)
        .bind(consumer)
        .fetch_all(store.pool())
        .await?;
    Ok(rows.iter().map(delivery_record).collect::<Result<_, _>>()?)
}

fn delivery_record(row: &PgRow) -> Result<DeliveryRecord, sqlx::Error> {
    Ok(DeliveryRecord {
        generation: u32::try_from(row.try_get::<i32, _>("generation")?).unwrap_or(0),
        status: DeliveryStatus::decode(&row.try_get::<String, _>("status")?)?,
        attempts: u32::try_from(row.try_get::<i32, _>("attempt")?).unwrap_or(0),
        token: row.try_get("fencing_token")?,
        owner: row.try_get("lease_owner")?,
        lease_until: row.try_get("lease_until")?,
        available_at: row.try_get("next_attempt_at")?,
        last_error_code: row.try_get("last_error_code")?,
        replay_id: row.try_get("replay_id")?,
        discard_id: row.try_get("discard_id")?,
    })
}

fn attempt_record(row: &PgRow) -> Result<AttemptRecord, sqlx::Error> {
    Ok(AttemptRecord {
        generation: u32::try_from(row.try_get::<i32, _>("generation")?).unwrap_or(0),
        attempt: u32::try_from(row.try_get::<i32, _>("attempt")?).unwrap_or(0),
        owner: row.try_get("owner")?,
        token: row.try_get("fencing_token")?,
        outcome: row.try_get("outcome")?,
        error_code: row.try_get("error_code")?,
        started_at: row.try_get("started_at")?,
        finished_at: row.try_get("finished_at")?,
        duration_ms: u64::try_from(row.try_get::<i64, _>("duration_ms")?).unwrap_or(0),
    })
}

/// The envelope of event `event_id` ([`crate::Store::event`]).
pub(super) async fn event(
    pool: &sqlx::PgPool,
    event_id: Uuid,
) -> Result<Option<EventRecord>, DispatchError> {
    let row = sqlx::query(sql::READ_EVENT)
        .bind(event_id)
        .fetch_optional(pool)
        .await?;
    Ok(row.as_ref().map(rows::event_record).transpose()?)
}

/// Attempt rows of `consumer` with `outcome` ([`crate::Store::count_attempts`]).
pub(super) async fn count_attempts(
    pool: &sqlx::PgPool,
    consumer: &str,
    outcome: &str,
) -> Result<u64, DispatchError> {
    let count: i64 = sqlx::query_scalar(sql::COUNT_ATTEMPTS)
        .bind(consumer)
        .bind(outcome)
        .fetch_one(pool)
        .await?;
    Ok(u64::try_from(count).unwrap_or(0))
}

/// The effect row of `consumer` under `effect_key` in `tenant_scope` ([`crate::Store::effect`]).
pub(super) async fn effect(
    pool: &sqlx::PgPool,
    consumer: &str,
    effect_key: &str,
    tenant_scope: Option<&str>,
) -> Result<Option<EffectRecord>, DispatchError> {
    let row = sqlx::query(sql::READ_EFFECT)
        .bind(consumer)
        .bind(effect_key)
        .bind(tenant_scope)
        .fetch_optional(pool)
        .await?;
    let Some(row) = row else {
        return Ok(None);
    };
    Ok(Some(EffectRecord {
        event_id: row.try_get("event_id")?,
        outcome_digest: row.try_get("outcome_digest")?,
        token: row.try_get("fencing_token")?,
        recorded_at: row.try_get("created_at")?,
    }))
}

/// The reconciliation rows of `event_id`'s delivery to `consumer`
/// ([`crate::Store::reconciliations`]).
pub(super) async fn reconciliations(
    pool: &sqlx::PgPool,
    event_id: Uuid,
    consumer: &str,
) -> Result<Vec<ReconciliationRecord>, DispatchError> {
    let rows = sqlx::query(sql::READ_RECONCILIATIONS)
        .bind(event_id)
        .bind(consumer)
        .fetch_all(pool)
        .await?;
    let mut records = Vec::with_capacity(rows.len());
    for row in &rows {
        records.push(ReconciliationRecord {
            generation: u32::try_from(row.try_get::<i32, _>("generation")?).unwrap_or(0),
            token: row.try_get("fencing_token")?,
            intents: rows::intents(&row.try_get::<String, _>("intended")?)?,
            recorded_at: row.try_get("recorded_at")?,
        });
    }
    Ok(records)
}
