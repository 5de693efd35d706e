//! Retention (docs/runtime.md, "Retention", "Append-only ledgers"): the ledger tables refuse
//! `UPDATE`, `DELETE` and `TRUNCATE`; old rows leave only through the purge functions, each of
//! which writes an `evc_purges` audit row (who, why, when, the cutoff, how many rows per table)
//! in the transaction that deletes: `evc_purge_events` and `evc_purge_rejects` of the fifth
//! runtime step (a fixed cutoff), and `evc_purge_expired` of the twenty-sixth (the contracts'
//! retention periods, [`crate::Operate::purge_expired`]).

use std::time::SystemTime;

use sqlx::Row;
use sqlx::postgres::PgPool;

use super::{PgStore, operations, sql};
use crate::store::DispatchError;
use crate::store::retention::{
    PurgeColumns, PurgeError, PurgeRecord, RetentionPurge, check, expiry, purge_record,
};
use crate::tenant::ALL_TENANTS;

/// What [`PgStore::purge_events`] removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct EventsPurged {
    /// The `evc_purges` row that records the purge.
    pub purge_id: i64,
    /// Events removed.
    pub events: u64,
    /// Settled delivery rows removed (dead, quarantined, replayed).
    pub deliveries: u64,
    /// Attempt rows removed.
    pub attempts: u64,
    /// Shadow-mode reconciliation rows removed.
    pub reconciliations: u64,
    /// Replay items removed.
    pub replay_items: u64,
}

/// What [`PgStore::purge_rejects`] removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RejectsPurged {
    /// The `evc_purges` row that records the purge.
    pub purge_id: i64,
    /// Reject rows removed.
    pub rejects: u64,
}

impl PgStore {
    /// Removes the events produced before `before` whose deliveries are all settled (none
    /// `pending` or `leased`: an open delivery keeps its event), with their delivery rows,
    /// attempts, reconciliations and replay items, in one transaction that first writes an
    /// `evc_purges` row naming `actor` and `reason`. Effects and replays are kept.
    ///
    /// # Errors
    /// [`PurgeError`]; nothing is deleted then.
    pub async fn purge_events(
        &self,
        before: SystemTime,
        reason: &str,
        actor: &str,
    ) -> Result<EventsPurged, PurgeError> {
        let before = check(before, reason, actor)?;
        let row = sqlx::query(sql::PURGE_EVENTS)
            .bind(before)
            .bind(reason)
            .bind(actor)
            .fetch_one(self.pool())
            .await?;
        let count = |column: &str| -> Result<u64, sqlx::Error> {
            Ok(u64::try_from(row.try_get::<i64, _>(column)?).unwrap_or(0))
        };
        let purged = EventsPurged {
            purge_id: row.try_get("purge_id")?,
            events: count("events")?,
            deliveries: count("deliveries")?,
            attempts: count("attempts")?,
            reconciliations: count("reconciliations")?,
            replay_items: count("replay_items")?,
        };
        tracing::info!(
            purge_id = purged.purge_id,
            events = purged.events,
            attempts = purged.attempts,
            "events purged"
        );
        Ok(purged)
    }

    /// Removes the rejects recorded before `before`, audited like [`PgStore::purge_events`].
    ///
    /// # Errors
    /// [`PurgeError`]; nothing is deleted then.
    pub async fn purge_rejects(
        &self,
        before: SystemTime,
        reason: &str,
        actor: &str,
    ) -> Result<RejectsPurged, PurgeError> {
        let before = check(before, reason, actor)?;
        let row = sqlx::query(sql::PURGE_REJECTS)
            .bind(before)
            .bind(reason)
            .bind(actor)
            .fetch_one(self.pool())
            .await?;
        let purged = RejectsPurged {
            purge_id: row.try_get("purge_id")?,
            rejects: u64::try_from(row.try_get::<i64, _>("rejects")?).unwrap_or(0),
        };
        tracing::info!(
            purge_id = purged.purge_id,
            rejects = purged.rejects,
            "rejects purged"
        );
        Ok(purged)
    }
}

impl PgStore {
    /// Removes what this store's registry's retention expires as of `as_of`
    /// (`evc_purge_expired`), or, when `apply` is false, counts it in a transaction it rolls
    /// back ([`crate::Operate::purge_expired`]).
    pub(crate) async fn purge_expired_rows(
        &self,
        as_of: SystemTime,
        reason: &str,
        actor: &str,
        apply: bool,
    ) -> Result<RetentionPurge, PurgeError> {
        let expiry = expiry(self.registry(), as_of, reason, actor)?;
        let tenant: Option<String> = sqlx::query_scalar(sql::SESSION_TENANT)
            .fetch_one(self.pool())
            .await?;
        if tenant.is_some_and(|tenant| !tenant.is_empty() && tenant != ALL_TENANTS) {
            return Err(PurgeError::TenantScoped);
        }
        if expiry.is_empty() {
            return Ok(RetentionPurge::default());
        }
        let (types, type_cutoffs): (Vec<&str>, Vec<f64>) = expiry.events.iter().copied().unzip();
        let (consumers, effect_cutoffs): (Vec<&str>, Vec<f64>) =
            expiry.effects.iter().copied().unzip();
        let mut transaction = self.pool().begin().await?;
        let row = sqlx::query(sql::PURGE_EXPIRED)
            .bind(expiry.as_of)
            .bind(types)
            .bind(type_cutoffs)
            .bind(expiry.attempts)
            .bind(expiry.reconciliations)
            .bind(expiry.rejects)
            .bind(consumers)
            .bind(effect_cutoffs)
            .bind(reason)
            .bind(actor)
            .fetch_one(&mut *transaction)
            .await?;
        let count = |column: &str| -> Result<u64, sqlx::Error> {
            Ok(u64::try_from(row.try_get::<i64, _>(column)?).unwrap_or(0))
        };
        let mut purged = RetentionPurge {
            purge_id: None,
            events: count("events")?,
            deliveries: count("deliveries")?,
            attempts: count("attempts")?,
            reconciliations: count("reconciliations")?,
            replay_items: count("replay_items")?,
            rejects: count("rejects")?,
            effects: count("effects")?,
        };
        if apply {
            purged.purge_id = Some(row.try_get("purge_id")?);
            transaction.commit().await?;
            tracing::info!(
                purge_id = purged.purge_id,
                events = purged.events,
                attempts = purged.attempts,
                effects = purged.effects,
                "expired rows purged"
            );
        } else {
            transaction.rollback().await?;
        }
        Ok(purged)
    }
}

/// The newest `limit` purges, newest first ([`crate::Observe::purges`]); none in a database
/// before the fifth step, and none for a session of one tenant: purges span every tenant.
pub(crate) async fn purges(pool: &PgPool, limit: u32) -> Result<Vec<PurgeRecord>, DispatchError> {
    if !purges_visible(pool).await? {
        return Ok(Vec::new());
    }
    let rows: Vec<PurgeColumns> = sqlx::query_as(sql::READ_PURGES)
        .bind(i64::from(limit))
        .fetch_all(pool)
        .await?;
    Ok(rows
        .into_iter()
        .map(purge_record)
        .collect::<Result<_, _>>()?)
}

/// The newest purge of each ledger, by ledger (the status report's), like [`purges`].
pub(crate) async fn newest_purges(pool: &PgPool) -> Result<Vec<PurgeRecord>, DispatchError> {
    if !purges_visible(pool).await? {
        return Ok(Vec::new());
    }
    let rows: Vec<PurgeColumns> = sqlx::query_as(sql::NEWEST_PURGES).fetch_all(pool).await?;
    Ok(rows
        .into_iter()
        .map(purge_record)
        .collect::<Result<_, _>>()?)
}

/// Whether the session may list purges: every tenant's, on a database with the audit table.
async fn purges_visible(pool: &PgPool) -> Result<bool, DispatchError> {
    Ok(operations::session_tenant(pool).await?.is_none()
        && sqlx::query_scalar::<_, bool>(sql::HAS_PURGES)
            .fetch_one(pool)
            .await?)
}
