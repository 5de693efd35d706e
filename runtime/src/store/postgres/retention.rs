//! Retention (docs/runtime.md, "Append-only ledgers"): the ledger tables refuse `UPDATE`,
//! `DELETE` and `TRUNCATE`; old rows leave only through the purge functions of the fifth
//! runtime step, each of which writes an `evc_purges` audit row (who, why, when, the cutoff,
//! how many rows per table) in the transaction that deletes.

use std::time::SystemTime;

use sqlx::Row;

use super::{PgStore, sql};

/// Longest purge reason, in characters (the `evc_purges` check).
pub const MAX_PURGE_REASON_CHARS: usize = 500;

/// Longest purge actor, in characters (the `evc_purges` check).
pub const MAX_PURGE_ACTOR_CHARS: usize = 200;

/// Why a purge was refused. Nothing was deleted.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PurgeError {
    /// No reason was given.
    #[error("a purge needs a reason (1 to {MAX_PURGE_REASON_CHARS} characters)")]
    ReasonMissing,
    /// The reason is too long.
    #[error(
        "the purge reason has {chars} characters; at most {MAX_PURGE_REASON_CHARS} are allowed"
    )]
    ReasonTooLong {
        /// Its length in characters.
        chars: usize,
    },
    /// No actor was given.
    #[error("a purge needs an actor (1 to {MAX_PURGE_ACTOR_CHARS} characters)")]
    ActorMissing,
    /// The actor is too long.
    #[error("the purge actor has {chars} characters; at most {MAX_PURGE_ACTOR_CHARS} are allowed")]
    ActorTooLong {
        /// Its length in characters.
        chars: usize,
    },
    /// The cutoff is before 1970 or not representable.
    #[error("the purge cutoff is not a time after 1970")]
    Cutoff,
    /// The database failed or refused (a role without `DELETE` on the ledgers, the fifth
    /// runtime step not applied).
    #[error("outbox database error: {0}")]
    Database(#[from] sqlx::Error),
}

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

/// The cutoff as epoch seconds, after the reason and actor are checked.
fn check(before: SystemTime, reason: &str, actor: &str) -> Result<f64, PurgeError> {
    if reason.trim().is_empty() {
        return Err(PurgeError::ReasonMissing);
    }
    let chars = reason.chars().count();
    if chars > MAX_PURGE_REASON_CHARS {
        return Err(PurgeError::ReasonTooLong { chars });
    }
    if actor.trim().is_empty() {
        return Err(PurgeError::ActorMissing);
    }
    let chars = actor.chars().count();
    if chars > MAX_PURGE_ACTOR_CHARS {
        return Err(PurgeError::ActorTooLong { chars });
    }
    before
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|since| since.as_secs_f64())
        .map_err(|_| PurgeError::Cutoff)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_and_actors_are_checked_before_the_database() {
        let now = SystemTime::now();
        assert!(check(now, "retention", "ops").is_ok());
        assert!(matches!(
            check(now, " ", "ops"),
            Err(PurgeError::ReasonMissing)
        ));
        assert!(matches!(
            check(now, &"é".repeat(501), "ops"),
            Err(PurgeError::ReasonTooLong { chars: 501 })
        ));
        assert!(check(now, &"é".repeat(500), "ops").is_ok());
        assert!(matches!(
            check(now, "retention", ""),
            Err(PurgeError::ActorMissing)
        ));
        assert!(matches!(
            check(now, "retention", &"a".repeat(201)),
            Err(PurgeError::ActorTooLong { chars: 201 })
        ));
        let before_epoch = SystemTime::UNIX_EPOCH - std::time::Duration::from_secs(1);
        assert!(matches!(
            check(before_epoch, "retention", "ops"),
            Err(PurgeError::Cutoff)
        ));
    }
}
