//! Read methods of the SQLite store (the PostgreSQL store answers the same ones): a delivery's
//! state, its attempt rows, counts and reject rows, without SQL of the caller's own.

use sqlx::Row;
use sqlx::sqlite::SqliteRow;
use uuid::Uuid;

use super::{SqliteStore, sql};
use crate::store::rows;
use crate::store::{
    AttemptRecord, DeliveryRecord, DeliveryStatus, DispatchError, EffectRecord, EventRecord,
    ReconciliationRecord, RejectRecord,
};

impl SqliteStore {
    /// The newest generation of `event_id`'s delivery to `consumer` (`None`: no such delivery,
    /// or it was acked: an ack deletes the delivery, its `acked` attempt row is its record).
    ///
    /// # Errors
    /// [`DispatchError::Database`].
    pub async fn delivery(
        &self,
        event_id: Uuid,
        consumer: &str,
    ) -> Result<Option<DeliveryRecord>, DispatchError> {
        let row = sqlx::query(sql::DELIVERY)
            .bind(event_id.to_string())
            .bind(consumer)
            .bind(self.tenant())
            .fetch_optional(&self.inner.pool)
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
        let rows = sqlx::query(sql::ATTEMPTS)
            .bind(event_id.to_string())
            .bind(consumer)
            .bind(self.tenant())
            .fetch_all(&self.inner.pool)
            .await?;
        Ok(rows.iter().map(attempt_record).collect::<Result<_, _>>()?)
    }

    /// Delivery rows of `consumer` in any of `statuses` (empty: every status). Acked
    /// deliveries have no row; count their attempt rows instead ([`SqliteStore::attempts`]).
    ///
    /// # Errors
    /// [`DispatchError::Database`].
    pub async fn count_deliveries(
        &self,
        consumer: &str,
        statuses: &[DeliveryStatus],
    ) -> Result<u64, DispatchError> {
        let statuses = serde_json::Value::from(
            statuses
                .iter()
                .map(|status| status.as_str())
                .collect::<Vec<_>>(),
        )
        .to_string();
        let count: i64 = sqlx::query_scalar(sql::COUNT_DELIVERIES)
            .bind(consumer)
            .bind(statuses)
            .bind(self.tenant())
            .fetch_one(&self.inner.pool)
            .await?;
        Ok(u64::try_from(count).unwrap_or(0))
    }

    /// Events in the outbox whose type is one of `event_types` (empty: every event).
    ///
    /// # Errors
    /// [`DispatchError::Database`].
    pub async fn count_events(&self, event_types: &[&str]) -> Result<u64, DispatchError> {
        let event_types = serde_json::Value::from(event_types.to_vec()).to_string();
        let count: i64 = sqlx::query_scalar(sql::COUNT_EVENTS)
            .bind(event_types)
            .bind(self.tenant())
            .fetch_one(&self.inner.pool)
            .await?;
        Ok(u64::try_from(count).unwrap_or(0))
    }

    /// The oldest `limit` reject rows, oldest first. Rejects are recorded by a task of their
    /// own after the refusal returns (it waits for the write lock a caller's transaction may
    /// hold), so a row can appear shortly after the refused append returned.
    ///
    /// # Errors
    /// [`DispatchError::Database`].
    pub async fn rejects(&self, limit: u32) -> Result<Vec<RejectRecord>, DispatchError> {
        let rows = sqlx::query(sql::REJECTS)
            .bind(i64::from(limit))
            .bind(self.tenant())
            .fetch_all(&self.inner.pool)
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

    /// Stale-token refusals recorded in the file for `consumer` (by every store that opened
    /// it; written by a task of their own, so shortly after the refusal).
    ///
    /// # Errors
    /// [`DispatchError::Database`].
    pub async fn stale_rejections(&self, consumer: &str) -> Result<u64, DispatchError> {
        let count: Option<i64> = sqlx::query_scalar(sql::STALE_REJECTIONS)
            .bind(consumer)
            .fetch_optional(&self.inner.pool)
            .await?;
        Ok(count.map_or(0, |count| u64::try_from(count).unwrap_or(0)))
    }
}

/// Every generation of `event_id`'s delivery to `consumer`, oldest first
/// ([`crate::Store::deliveries`]).
pub(super) async fn deliveries(
    store: &SqliteStore,
    event_id: Uuid,
    consumer: &str,
) -> Result<Vec<DeliveryRecord>, DispatchError> {
    let rows = sqlx::query(sql::DELIVERIES)
        .bind(event_id.to_string())
        .bind(consumer)
        .bind(store.tenant())
        .fetch_all(&store.inner.pool)
        .await?;
    Ok(rows.iter().map(delivery_record).collect::<Result<_, _>>()?)
}

fn delivery_record(row: &SqliteRow) -> Result<DeliveryRecord, sqlx::Error> {
    Ok(DeliveryRecord {
        generation: u32::try_from(row.try_get::<i64, _>("generation")?).unwrap_or(0),
        status: DeliveryStatus::decode(&row.try_get::<String, _>("status")?)?,
        attempts: u32::try_from(row.try_get::<i64, _>("attempt")?).unwrap_or(0),
        token: row.try_get("fencing_token")?,
        owner: row.try_get("lease_owner")?,
        lease_until: row.try_get("lease_until")?,
        available_at: row.try_get("next_attempt_at")?,
        last_error_code: row.try_get("last_error_code")?,
        replay_id: row.try_get("replay_id")?,
        discard_id: row.try_get("discard_id")?,
    })
}

fn attempt_record(row: &SqliteRow) -> Result<AttemptRecord, sqlx::Error> {
    Ok(AttemptRecord {
        generation: u32::try_from(row.try_get::<i64, _>("generation")?).unwrap_or(0),
        attempt: u32::try_from(row.try_get::<i64, _>("attempt")?).unwrap_or(0),
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
    store: &SqliteStore,
    event_id: Uuid,
) -> Result<Option<EventRecord>, DispatchError> {
    let row = sqlx::query(sql::EVENT)
        .bind(event_id.to_string())
        .bind(store.tenant())
        .fetch_optional(&store.inner.pool)
        .await?;
    Ok(row.as_ref().map(rows::event_record).transpose()?)
}

/// Attempt rows of `consumer` with `outcome` ([`crate::Store::count_attempts`]).
pub(super) async fn count_attempts(
    store: &SqliteStore,
    consumer: &str,
    outcome: &str,
) -> Result<u64, DispatchError> {
    let count: i64 = sqlx::query_scalar(sql::COUNT_ATTEMPTS)
        .bind(consumer)
        .bind(outcome)
        .bind(store.tenant())
        .fetch_one(&store.inner.pool)
        .await?;
    Ok(u64::try_from(count).unwrap_or(0))
}

/// The effect row of `consumer` under `effect_key` in `tenant_scope` ([`crate::Store::effect`]);
/// none outside the store's tenant.
pub(super) async fn effect(
    store: &SqliteStore,
    consumer: &str,
    effect_key: &str,
    tenant_scope: Option<&str>,
) -> Result<Option<EffectRecord>, DispatchError> {
    if store
        .tenant()
        .is_some_and(|tenant| tenant_scope != Some(tenant))
    {
        return Ok(None);
    }
    let row = sqlx::query(sql::EFFECT)
        .bind(consumer)
        .bind(effect_key)
        .bind(tenant_scope)
        .fetch_optional(&store.inner.pool)
        .await?;
    let Some(row) = row else {
        return Ok(None);
    };
    let event_id: String = row.try_get("event_id")?;
    Ok(Some(EffectRecord {
        event_id: Uuid::parse_str(&event_id)
            .map_err(|error| sqlx::Error::Decode(Box::new(error)))?,
        outcome_digest: row.try_get("outcome_digest")?,
        token: row.try_get("fencing_token")?,
        recorded_at: row.try_get("created_at")?,
    }))
}

/// The reconciliation rows of `event_id`'s delivery to `consumer`
/// ([`crate::Store::reconciliations`]).
pub(super) async fn reconciliations(
    store: &SqliteStore,
    event_id: Uuid,
    consumer: &str,
) -> Result<Vec<ReconciliationRecord>, DispatchError> {
    let rows = sqlx::query(sql::RECONCILIATIONS)
        .bind(event_id.to_string())
        .bind(consumer)
        .bind(store.tenant())
        .fetch_all(&store.inner.pool)
        .await?;
    let mut records = Vec::with_capacity(rows.len());
    for row in &rows {
        records.push(ReconciliationRecord {
            generation: u32::try_from(row.try_get::<i64, _>("generation")?).unwrap_or(0),
            token: row.try_get("fencing_token")?,
            intents: rows::intents(&row.try_get::<String, _>("intended")?)?,
            recorded_at: row.try_get("recorded_at")?,
        });
    }
    Ok(records)
}
