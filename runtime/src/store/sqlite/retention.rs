//! Retention on SQLite (`evc_purges`: migration 0017); see [`crate::store::retention`]. The
//! purge runs in one write transaction, which no other writer shares: it removes, counts and
//! records in that order, and a dry run rolls the same transaction back.

use std::time::SystemTime;

use serde_json::{Value, json};

use super::{SqliteStore, epoch_now, sql};
use crate::store::DispatchError;
use crate::store::retention::{
    PurgeColumns, PurgeError, PurgeRecord, RetentionPurge, expiry, purge_record,
};

impl SqliteStore {
    /// [`crate::Observe::purges`] on SQLite; none on a handle of one tenant (purges span every
    /// tenant).
    pub(super) async fn read_purges(&self, limit: u32) -> Result<Vec<PurgeRecord>, DispatchError> {
        if self.tenant().is_some() {
            return Ok(Vec::new());
        }
        let rows: Vec<PurgeColumns> = sqlx::query_as(sql::READ_PURGES)
            .bind(i64::from(limit))
            .fetch_all(self.pool())
            .await?;
        Ok(rows
            .into_iter()
            .map(purge_record)
            .collect::<Result<_, _>>()?)
    }

    /// The newest purge of each ledger, by ledger (the status report's), like
    /// [`SqliteStore::read_purges`].
    pub(super) async fn newest_purges(&self) -> Result<Vec<PurgeRecord>, DispatchError> {
        if self.tenant().is_some() {
            return Ok(Vec::new());
        }
        let rows: Vec<PurgeColumns> = sqlx::query_as(sql::NEWEST_PURGES)
            .fetch_all(self.pool())
            .await?;
        Ok(rows
            .into_iter()
            .map(purge_record)
            .collect::<Result<_, _>>()?)
    }

    /// [`crate::Operate::purge_expired`] on SQLite.
    pub(super) async fn purge_expired_rows(
        &self,
        as_of: SystemTime,
        reason: &str,
        actor: &str,
        apply: bool,
    ) -> Result<RetentionPurge, PurgeError> {
        let expiry = expiry(self.registry(), as_of, reason, actor)?;
        if self.tenant().is_some() {
            return Err(PurgeError::TenantScoped);
        }
        if expiry.is_empty() {
            return Ok(RetentionPurge::default());
        }
        let pairs = |entries: &[(&str, f64)]| -> String {
            Value::from_iter(entries.iter().map(|(name, cutoff)| json!([name, cutoff]))).to_string()
        };
        let mut transaction = SqliteStore::begin(self).await?;
        let ids: Vec<String> = sqlx::query_scalar(sql::EXPIRED_EVENTS)
            .bind(pairs(&expiry.events))
            .fetch_all(&mut *transaction)
            .await?;
        let ids = Value::from(ids).to_string();
        let mut run = async |query: &'static str, first: &str, second: Option<f64>| {
            sqlx::query(query)
                .bind(first.to_owned())
                .bind(second)
                .execute(&mut *transaction)
                .await
                .map(|done| done.rows_affected())
        };
        let attempts = run(sql::PURGE_ATTEMPTS, &ids, expiry.attempts).await?;
        let reconciliations = run(sql::PURGE_RECONCILIATIONS, &ids, expiry.reconciliations).await?;
        let replay_items = run(sql::PURGE_REPLAY_ITEMS, &ids, None).await?;
        let deliveries = run(sql::PURGE_DELIVERIES, &ids, None).await?;
        let events = run(sql::PURGE_EVENTS, &ids, None).await?;
        let effects = run(sql::PURGE_EFFECTS, &pairs(&expiry.effects), None).await?;
        let rejects = sqlx::query(sql::PURGE_REJECTS)
            .bind(expiry.rejects)
            .execute(&mut *transaction)
            .await?
            .rows_affected();
        let mut purged = RetentionPurge {
            purge_id: None,
            events,
            deliveries,
            attempts,
            reconciliations,
            replay_items,
            rejects,
            effects,
        };
        if !apply {
            transaction.rollback().await?;
            return Ok(purged);
        }
        let counts = json!({
            "evc_events": events,
            "evc_deliveries": deliveries,
            "evc_delivery_attempts": attempts,
            "evc_reconciliations": reconciliations,
            "evc_replay_items": replay_items,
            "evc_validation_rejects": rejects,
            "evc_consumer_effects": effects,
        });
        let id: i64 = sqlx::query_scalar(sql::RECORD_PURGE)
            .bind(expiry.as_of)
            .bind(reason)
            .bind(actor)
            .bind(epoch_now())
            .bind(counts.to_string())
            .fetch_one(&mut *transaction)
            .await?;
        transaction.commit().await?;
        purged.purge_id = Some(id);
        tracing::info!(
            purge_id = id,
            events,
            attempts,
            effects,
            "expired rows purged"
        );
        Ok(purged)
    }
}
