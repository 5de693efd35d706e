//! The PostgreSQL store's lifecycle events (docs/runtime.md, "Lifecycle events"): when the
//! registry registers their type, dead-lettering a delivery (`job.dead_lettered`), applying a
//! replay (`dlq_replay.scheduled`), settling a replay's last delivery (`dlq_replay.completed` or
//! `dlq_replay.failed`) and discarding a delivery (`job.discarded`) append one, in the
//! transaction of the state change, through the checked append path. What each says is
//! [`crate::store::lifecycle`]'s.

use serde_json::Map;
use sqlx::Row;
use sqlx::postgres::PgConnection;
use uuid::Uuid;

use super::replay::Discarded;
use super::{PgStore, sql};
use crate::registry::EventDescriptor;
use crate::store::DispatchError;
use crate::store::lifecycle::{
    DEAD_LETTERED, DISCARDED, DeadLetter, Lifecycle, REPLAY_COMPLETED, REPLAY_FAILED,
    REPLAY_SCHEDULED, ReplayProgress, Source, dead_lettered, emit, error_code, replay_ended,
    replay_scheduled, role_uuid, stored_trace,
};
use crate::store::ops::SettledDelivery;

/// The source of event `event_id` (`None` once retention purged it).
async fn read_source(
    connection: &mut PgConnection,
    event_id: Uuid,
) -> Result<Option<Source>, sqlx::Error> {
    let Some(row) = sqlx::query(sql::LIFECYCLE_SOURCE)
        .bind(event_id)
        .fetch_optional(&mut *connection)
        .await?
    else {
        return Ok(None);
    };
    Ok(Some(Source {
        event_type: row.try_get("event_type")?,
        version: row.try_get("schema_version")?,
        tenant_scope: row.try_get("tenant_scope")?,
        trace: stored_trace(
            row.try_get("trace_id")?,
            row.try_get("parent_span_id")?,
            row.try_get("trace_flags")?,
        ),
        now: row.try_get("now")?,
    }))
}

impl PgStore {
    /// The registered lifecycle event type `name`, if the registry has a version of it.
    pub(super) fn lifecycle_type(&self, name: &str) -> Option<&'static EventDescriptor> {
        self.registry()
            .event(name)
            .filter(|descriptor| !descriptor.versions.is_empty())
    }

    /// The registered `job.dead_lettered` type, if the deployed registry has one.
    pub(super) fn dead_letter_type(&self) -> Option<&'static EventDescriptor> {
        self.lifecycle_type(DEAD_LETTERED)
    }

    /// Whether the registry registers an event that ends a replay (`dlq_replay.completed` or
    /// `dlq_replay.failed`): only then do settled replayed deliveries look at their replay.
    pub(super) fn tracks_replays(&self) -> bool {
        self.lifecycle_type(REPLAY_COMPLETED).is_some()
            || self.lifecycle_type(REPLAY_FAILED).is_some()
    }

    /// Appends the `job.dead_lettered` event of `dead` on `transaction` (the one that
    /// dead-lettered it), in the newest registered version, through [`PgStore::append`].
    ///
    /// Loop guard: a dead-lettered delivery of a `job.dead_lettered` event emits nothing, so a
    /// failing lifecycle consumer cannot feed itself. A refused event (the registered schema
    /// wants fields the runtime cannot fill) is recorded as a reject and logged; the
    /// dead-lettering stands.
    ///
    /// # Errors
    /// [`DispatchError::Database`]; the caller's transaction must then roll back.
    pub(super) async fn emit_dead_lettered(
        &self,
        transaction: &mut PgConnection,
        descriptor: &'static EventDescriptor,
        dead: DeadLetter<'_>,
    ) -> Result<(), DispatchError> {
        let Some(source) = read_source(transaction, dead.event_id).await? else {
            return Ok(());
        };
        let Some(event) = dead_lettered(source, dead) else {
            return Ok(());
        };
        Ok(emit(self, transaction, descriptor, event).await?)
    }

    /// Appends `dlq_replay.scheduled` for replay `replay_id` on `transaction` (the one that
    /// applied it), when the registry registers the type: its consumer, the deliveries it
    /// queued (due now: `scheduled_for` is the transaction's time), and who requested it
    /// (`requested_by`, else [`role_uuid`] of the database role).
    ///
    /// # Errors
    /// The database's; the caller's transaction must then roll back.
    pub(super) async fn emit_replay_scheduled(
        &self,
        transaction: &mut PgConnection,
        replay_id: i64,
        consumer: &str,
        jobs: i64,
        requested_by: Option<Uuid>,
    ) -> Result<(), sqlx::Error> {
        let Some(descriptor) = self.lifecycle_type(REPLAY_SCHEDULED) else {
            return Ok(());
        };
        let row = sqlx::query(sql::LIFECYCLE_NOW)
            .fetch_one(&mut *transaction)
            .await?;
        let now: String = row.try_get("now")?;
        let role: String = row.try_get("role")?;
        let requested_by = requested_by.unwrap_or_else(|| role_uuid(&role));
        let tenant = replay_tenant(transaction, replay_id).await?;
        let event = replay_scheduled(replay_id, consumer, jobs, requested_by, now, tenant);
        emit(self, transaction, descriptor, event).await
    }

    /// Appends `job.discarded` for `delivery` on `transaction` (the one of `discard`), when the
    /// registry registers the type. Never the reason's text: it is free text, kept in
    /// `evc_discards` only.
    ///
    /// # Errors
    /// The database's; the caller's transaction must then roll back.
    pub(super) async fn emit_discarded(
        &self,
        transaction: &mut PgConnection,
        discard: &Discarded<'_>,
        delivery: &SettledDelivery,
    ) -> Result<(), sqlx::Error> {
        let Some(descriptor) = self.lifecycle_type(DISCARDED) else {
            return Ok(());
        };
        let Some(source) = read_source(transaction, delivery.event_id).await? else {
            return Ok(());
        };
        let mut payload = Map::new();
        payload.insert("discard_id".into(), discard.discard_id.into());
        payload.insert("event_id".into(), delivery.event_id.to_string().into());
        payload.insert("event_type".into(), source.event_type.into());
        payload.insert("event_version".into(), source.version.into());
        payload.insert("consumer_name".into(), delivery.consumer.clone().into());
        payload.insert("generation".into(), delivery.generation.into());
        payload.insert("discarded_from".into(), delivery.status.as_str().into());
        payload.insert("attempts".into(), delivery.attempts.max(0).into());
        if let Some(code) = &delivery.last_error_code {
            payload.insert("last_error_code".into(), error_code(code).into());
        }
        payload.insert("approval_ref".into(), discard.approval_ref.into());
        payload.insert("discarded_by".into(), discard.discarded_by.clone().into());
        payload.insert("discarded_at".into(), discard.discarded_at.clone().into());
        // Caused by the discarded event, in its tenant and trace, like `job.dead_lettered`.
        let event = Lifecycle {
            payload,
            trace: source.trace,
            causation_id: Some(delivery.event_id.to_string()),
            tenant_scope: source.tenant_scope,
            idempotency_key: None,
        };
        emit(self, transaction, descriptor, event).await
    }

    /// Ends the replays of `replay_ids` whose last outstanding delivery `connection`'s
    /// transaction just settled: appends `dlq_replay.completed` when every replayed delivery
    /// was acked, `dlq_replay.failed` when any failed again (dead-lettered or quarantined),
    /// whichever the registry registers.
    ///
    /// Each replay's row is locked first (in id order), and its deliveries are counted by the
    /// statement after: two transactions settling a replay's last two deliveries take turns,
    /// and the second sees the first's settle. The idempotency key `evc:replay:<id>:end` keeps
    /// a replay's end to one event even so.
    ///
    /// # Errors
    /// The database's; the caller's transaction must then roll back.
    pub(super) async fn end_replays(
        &self,
        connection: &mut PgConnection,
        replay_ids: &[i64],
    ) -> Result<(), sqlx::Error> {
        if !self.tracks_replays() {
            return Ok(());
        }
        let mut ids = replay_ids.to_vec();
        ids.sort_unstable();
        ids.dedup();
        for id in ids {
            sqlx::query(sql::LOCK_REPLAY)
                .bind(id)
                .execute(&mut *connection)
                .await?;
            let Some(row) = sqlx::query(sql::REPLAY_PROGRESS)
                .bind(id)
                .fetch_optional(&mut *connection)
                .await?
            else {
                continue;
            };
            let replayed: i32 = row.try_get("deliveries")?;
            let outstanding: i64 = row.try_get("outstanding")?;
            let progress = ReplayProgress {
                replayed: i64::from(replayed),
                outstanding,
                failed: row.try_get("failed")?,
                quarantined: row.try_get("quarantined")?,
                now: row.try_get("now")?,
                tenant_scope: if outstanding > 0 {
                    None
                } else {
                    replay_tenant(connection, id).await?
                },
            };
            let Some((name, event)) = replay_ended(id, progress) else {
                continue;
            };
            let Some(descriptor) = self.lifecycle_type(name) else {
                continue;
            };
            tracing::info!(replay_id = id, event_type = name, "replay ended");
            emit(self, connection, descriptor, event).await?;
        }
        Ok(())
    }
}

/// The tenant of replay `replay_id`'s events when they all have the same one.
async fn replay_tenant(
    connection: &mut PgConnection,
    replay_id: i64,
) -> Result<Option<String>, sqlx::Error> {
    sqlx::query_scalar(sql::REPLAY_TENANT)
        .bind(replay_id)
        .fetch_one(connection)
        .await
}
