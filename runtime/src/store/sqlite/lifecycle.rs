//! The SQLite store's lifecycle events (docs/runtime.md, "Lifecycle events"): when the registry
//! registers their type, dead-lettering a delivery (`job.dead_lettered`), applying a replay
//! (`dlq_replay.scheduled`) and settling a replay's last delivery (`dlq_replay.completed` or
//! `dlq_replay.failed`) append one, in the transaction of the state change, through the
//! checked append path. What each says is [`crate::store::lifecycle`]'s, as on PostgreSQL.

use sqlx::Row;
use sqlx::sqlite::SqliteConnection;
use uuid::Uuid;

use super::{SqliteStore, sql};
use crate::registry::EventDescriptor;
use crate::store::DispatchError;
use crate::store::lifecycle::{
    DEAD_LETTERED, DeadLetter, REPLAY_COMPLETED, REPLAY_FAILED, REPLAY_SCHEDULED, ReplayProgress,
    Source, dead_lettered, emit, replay_ended, replay_scheduled, role_uuid, stored_trace,
};

/// Who a replay's `dlq_replay.scheduled` names when the approval names no person: the store
/// has no database roles, so [`role_uuid`] of this name.
const REQUESTER: &str = "sqlite";

/// A settled delivery, as [`SqliteStore::end_replays`] looks it up: event id, consumer,
/// generation.
pub(super) type SettledKey<'a> = (&'a str, &'a str, i64);

impl SqliteStore {
    /// The registered lifecycle event type `name`, if the registry has a version of it.
    fn lifecycle_type(&self, name: &str) -> Option<&'static EventDescriptor> {
        self.registry()
            .event(name)
            .filter(|descriptor| !descriptor.versions.is_empty())
    }

    /// The registered `job.dead_lettered` type, if the registry has a version of it.
    pub(super) fn dead_letter_type(&self) -> Option<&'static EventDescriptor> {
        self.lifecycle_type(DEAD_LETTERED)
    }

    /// Whether the registry registers an event that ends a replay: only then do settled
    /// replayed deliveries look at their replay.
    fn tracks_replays(&self) -> bool {
        self.lifecycle_type(REPLAY_COMPLETED).is_some()
            || self.lifecycle_type(REPLAY_FAILED).is_some()
    }

    /// Appends the `job.dead_lettered` event of `dead` on `transaction` (the one that
    /// dead-lettered it, at `now`, epoch seconds). A dead-lettered `job.dead_lettered`
    /// delivery emits nothing (the loop guard).
    ///
    /// # Errors
    /// [`DispatchError::Database`]; the caller's transaction must then roll back.
    pub(super) async fn emit_dead_lettered(
        &self,
        transaction: &mut SqliteConnection,
        descriptor: &'static EventDescriptor,
        dead: DeadLetter<'_>,
        now: f64,
    ) -> Result<(), DispatchError> {
        let Some(row) = sqlx::query(sql::LIFECYCLE_SOURCE)
            .bind(dead.event_id.to_string())
            .bind(now)
            .fetch_optional(&mut *transaction)
            .await?
        else {
            return Ok(());
        };
        let source = Source {
            event_type: row.try_get("event_type")?,
            version: row.try_get("schema_version")?,
            tenant_scope: row.try_get("tenant_scope")?,
            trace: stored_trace(
                row.try_get("trace_id")?,
                row.try_get("parent_span_id")?,
                row.try_get("trace_flags")?,
            ),
            now: row.try_get("now")?,
        };
        let Some(event) = dead_lettered(source, dead) else {
            return Ok(());
        };
        Ok(emit(self, transaction, descriptor, event).await?)
    }

    /// Appends `dlq_replay.scheduled` for replay `replay_id` on `transaction` (the one that
    /// applied it at `now`, epoch seconds), when the registry registers the type.
    ///
    /// # Errors
    /// The database's; the caller's transaction must then roll back.
    pub(super) async fn emit_replay_scheduled(
        &self,
        transaction: &mut SqliteConnection,
        replay_id: i64,
        consumer: &str,
        jobs: u64,
        requested_by: Option<Uuid>,
        now: f64,
    ) -> Result<(), sqlx::Error> {
        let Some(descriptor) = self.lifecycle_type(REPLAY_SCHEDULED) else {
            return Ok(());
        };
        let at: String = sqlx::query_scalar(sql::RFC3339_AT)
            .bind(now)
            .fetch_one(&mut *transaction)
            .await?;
        let requested_by = requested_by.unwrap_or_else(|| role_uuid(REQUESTER));
        let jobs = i64::try_from(jobs).unwrap_or(i64::MAX);
        let tenant = replay_tenant(transaction, replay_id).await?;
        let event = replay_scheduled(replay_id, consumer, jobs, requested_by, at, tenant);
        emit(self, transaction, descriptor, event).await
    }

    /// Ends the replays whose last outstanding delivery `transaction` just settled (one of the
    /// replayed deliveries `settled`, at `now`, epoch seconds): appends `dlq_replay.completed`
    /// when every replayed delivery was acked, `dlq_replay.failed` when any failed again,
    /// whichever the registry registers. One writer at a time: the count sees every earlier settle.
    ///
    /// # Errors
    /// The database's; the caller's transaction must then roll back.
    pub(super) async fn end_replays(
        &self,
        transaction: &mut SqliteConnection,
        settled: &[SettledKey<'_>],
        now: f64,
    ) -> Result<(), sqlx::Error> {
        if settled.is_empty() || !self.tracks_replays() {
            return Ok(());
        }
        let mut ids: Vec<i64> = Vec::new();
        for &(event_id, consumer, generation) in settled {
            let found: Vec<i64> = sqlx::query_scalar(sql::REPLAY_OF)
                .bind(event_id)
                .bind(consumer)
                .bind(generation)
                .fetch_all(&mut *transaction)
                .await?;
            ids.extend(found);
        }
        ids.sort_unstable();
        ids.dedup();
        for id in ids {
            let Some(row) = sqlx::query(sql::REPLAY_PROGRESS)
                .bind(id)
                .bind(now)
                .fetch_optional(&mut *transaction)
                .await?
            else {
                continue;
            };
            let outstanding: i64 = row.try_get("outstanding")?;
            let progress = ReplayProgress {
                replayed: row.try_get("deliveries")?,
                outstanding,
                failed: row.try_get("failed")?,
                quarantined: row.try_get("quarantined")?,
                now: row.try_get("now")?,
                tenant_scope: if outstanding > 0 {
                    None
                } else {
                    replay_tenant(transaction, id).await?
                },
            };
            let Some((name, event)) = replay_ended(id, progress) else {
                continue;
            };
            let Some(descriptor) = self.lifecycle_type(name) else {
                continue;
            };
            tracing::info!(replay_id = id, event_type = name, "replay ended");
            emit(self, transaction, descriptor, event).await?;
        }
        Ok(())
    }
}

/// The tenant of replay `replay_id`'s events when they all have the same one.
async fn replay_tenant(
    connection: &mut SqliteConnection,
    replay_id: i64,
) -> Result<Option<String>, sqlx::Error> {
    sqlx::query_scalar(sql::REPLAY_TENANT)
        .bind(replay_id)
        .fetch_one(connection)
        .await
}
