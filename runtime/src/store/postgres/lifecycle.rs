//! The runtime's own lifecycle events (docs/runtime.md, "Lifecycle events"): when the registry
//! registers their type, dead-lettering a delivery (`job.dead_lettered`), applying a replay
//! (`dlq_replay.scheduled`), settling a replay's last delivery (`dlq_replay.completed` or
//! `dlq_replay.failed`) and discarding a delivery (`job.discarded`) append one, in the
//! transaction of the state change, through the checked append path.

use serde_json::{Map, Value};
use sha2::Digest as _;
use sqlx::Row;
use sqlx::postgres::PgConnection;
use uuid::Uuid;

use super::replay::Discarded;
use super::{PgStore, sql};
use crate::append::{AppendError, AppendOptions};
use crate::handler::FailureClass;
use crate::publish::{OutgoingEvent, order_key_part};
use crate::registry::EventDescriptor;
use crate::store::DispatchError;
use crate::store::ops::SettledDelivery;
use crate::trace::TraceContext;

/// The lifecycle event a dead-lettered delivery emits, when the registry registers it.
pub const DEAD_LETTERED: &str = "job.dead_lettered";

/// The lifecycle event an applied replay emits, when the registry registers it.
pub const REPLAY_SCHEDULED: &str = "dlq_replay.scheduled";

/// The lifecycle event a replay emits when its last replayed delivery settles and every one
/// was acked, when the registry registers it.
pub const REPLAY_COMPLETED: &str = "dlq_replay.completed";

/// The lifecycle event a replay emits when its last replayed delivery settles and any failed
/// again (dead-lettered or quarantined), when the registry registers it.
pub const REPLAY_FAILED: &str = "dlq_replay.failed";

/// The lifecycle event each discarded delivery emits, when the registry registers it.
pub const DISCARDED: &str = "job.discarded";

/// The error code of `dlq_replay.failed`: a replayed delivery failed again.
pub const REPLAYED_JOB_FAILED: &str = "REPLAYED_JOB_FAILED";

/// A delivery that was just dead-lettered, as the lifecycle event describes it.
#[derive(Debug, Clone, Copy)]
pub(super) struct DeadLetter<'a> {
    /// The delivered event.
    pub(super) event_id: Uuid,
    /// The consumer whose delivery it was.
    pub(super) consumer: &'a str,
    /// Attempts made, the first included.
    pub(super) attempts: u32,
    /// The contract's class of the last failure (`transient`, `permanent`, `poison`).
    pub(super) failure_class: &'static str,
    /// The last attempt's error code, as the handler or the store gave it.
    pub(super) error_code: &'a str,
}

/// The contract's failure class of a handler's failure class: the classes that quarantine
/// (scope, schema, integrity) never dead-letter through a retry policy, so they count as
/// permanent should a policy dead-letter them.
pub(super) fn failure_class(class: FailureClass) -> &'static str {
    match class {
        FailureClass::Transient => "transient",
        FailureClass::Poison => "poison",
        _ => "permanent",
    }
}

/// An error code in the contract's shape (`^[A-Z][A-Z0-9_]*$`, at most 64 characters): upper
/// case, any other character an underscore, `E_` in front when it does not start with a letter.
pub(super) fn error_code(code: &str) -> String {
    let mut shaped: String = code
        .chars()
        .map(|c| match c.to_ascii_uppercase() {
            upper @ ('A'..='Z' | '0'..='9' | '_') => upper,
            _ => '_',
        })
        .collect();
    if !shaped.starts_with(|c: char| c.is_ascii_uppercase()) {
        shaped.insert_str(0, "E_");
    }
    shaped.truncate(64);
    shaped
}

/// `major.minor.patch` as numbers, for picking the newest registered version.
fn version_key(version: &str) -> (u64, u64, u64) {
    let mut parts = version
        .split(['.', '-', '+'])
        .map(|part| part.parse().unwrap_or(0));
    (
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
    )
}

/// A fresh trace for a lifecycle event whose source event carries none (random, non-zero).
fn fresh_trace() -> Option<TraceContext> {
    let trace_id = Uuid::now_v7().simple().to_string();
    let span_id = Uuid::now_v7().simple().to_string()[..16].to_owned();
    TraceContext::new(trace_id, span_id, 0).ok()
}

/// A lifecycle event before the registry's descriptor shapes it: the payload (fields the
/// registered schema does not declare are dropped) and the envelope fields the runtime sets.
pub(super) struct Lifecycle {
    /// Every field the runtime can fill.
    pub(super) payload: Map<String, Value>,
    /// The trace to carry (`None`: a fresh one).
    pub(super) trace: Option<TraceContext>,
    /// The event that caused it, if one did.
    pub(super) causation_id: Option<String>,
    /// The tenant scope of the event it describes, if any.
    pub(super) tenant_scope: Option<String>,
    /// Set when two transactions may both find the event due: the second append then adds
    /// nothing.
    pub(super) idempotency_key: Option<String>,
}

/// What a lifecycle event about one delivery needs of its event: never the payload.
pub(super) struct Source {
    /// The event's type.
    pub(super) event_type: String,
    /// The event's schema version.
    pub(super) version: String,
    /// The event's tenant scope.
    pub(super) tenant_scope: Option<String>,
    /// The event's trace context, if it had a valid one.
    pub(super) trace: Option<TraceContext>,
    /// The transaction's time, RFC 3339 UTC.
    pub(super) now: String,
}

impl Source {
    /// The source of event `event_id` (`None` once retention purged it).
    pub(super) async fn read(
        connection: &mut PgConnection,
        event_id: Uuid,
    ) -> Result<Option<Self>, sqlx::Error> {
        let Some(row) = sqlx::query(sql::LIFECYCLE_SOURCE)
            .bind(event_id)
            .fetch_optional(&mut *connection)
            .await?
        else {
            return Ok(None);
        };
        let trace_id: Option<String> = row.try_get("trace_id")?;
        let span_id: Option<String> = row.try_get("parent_span_id")?;
        let flags: Option<String> = row.try_get("trace_flags")?;
        let trace = match (trace_id, span_id, flags) {
            (Some(trace_id), Some(span_id), Some(flags)) => u8::from_str_radix(&flags, 16)
                .ok()
                .and_then(|flags| TraceContext::new(trace_id, span_id, flags).ok()),
            _ => None,
        };
        Ok(Some(Self {
            event_type: row.try_get("event_type")?,
            version: row.try_get("schema_version")?,
            tenant_scope: row.try_get("tenant_scope")?,
            trace,
            now: row.try_get("now")?,
        }))
    }
}

/// The UUID a lifecycle event names replay `id` (`evc_replays.id`) by: version 8, `65766352`
/// (`evcR`) then the id's high 16 bits, and its low 48 bits as the last group, so
/// `65766352-0000-8000-8000-00000000002a` is replay 42. The contracts want a UUID; the
/// database numbers replays.
pub fn replay_uuid(id: i64) -> Uuid {
    let id = id.to_be_bytes();
    let mut bytes = [0_u8; 16];
    bytes[..4].copy_from_slice(b"evcR");
    bytes[4..6].copy_from_slice(&id[..2]);
    bytes[6] = 0x80;
    bytes[8] = 0x80;
    bytes[10..].copy_from_slice(&id[2..]);
    uuid::Builder::from_custom_bytes(bytes).into_uuid()
}

/// The UUID a lifecycle event names database role `role` by, when the caller named no person:
/// version 8, the first 16 bytes of SHA-256 of `evc-role:` and the role. The same role always
/// maps to the same id.
pub(super) fn role_uuid(role: &str) -> Uuid {
    let digest = sha2::Sha256::digest(format!("evc-role:{role}").as_bytes());
    let mut bytes = [0_u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    uuid::Builder::from_custom_bytes(bytes).into_uuid()
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

    /// Appends `event` as `descriptor`'s newest registered version on `transaction` (the one
    /// of the state change it describes), through [`PgStore::append`].
    ///
    /// A refused event (the registered schema wants fields the runtime cannot fill, a payload
    /// cap below its size) is recorded as a reject and logged; the state change stands.
    ///
    /// # Errors
    /// The database's; the caller's transaction must then roll back.
    pub(super) async fn emit_lifecycle(
        &self,
        transaction: &mut PgConnection,
        descriptor: &'static EventDescriptor,
        event: Lifecycle,
    ) -> Result<(), sqlx::Error> {
        let Some(trace) = event.trace.or_else(fresh_trace) else {
            return Ok(());
        };
        let Some(newest) = descriptor
            .versions
            .iter()
            .max_by_key(|version| version_key(version.version))
        else {
            return Ok(());
        };
        let mut payload = event.payload;
        // Only the fields the registered schema declares: a contract may leave out what the
        // runtime fills, and forbid extra properties.
        keep_declared(&mut payload, newest.schema);
        let payload = Value::Object(payload);
        let order_key = (!descriptor.order_key.is_empty()).then(|| {
            descriptor
                .order_key
                .iter()
                .map(|field| order_key_part(payload.get(*field).unwrap_or(&Value::Null)))
                .collect::<Vec<_>>()
                .join("/")
        });
        let outgoing = OutgoingEvent {
            event_type: descriptor.name,
            version: newest.version,
            order_key,
            trace,
            payload,
        };
        let mut options = AppendOptions::new();
        options.causation_id = event.causation_id;
        options.tenant_scope = event.tenant_scope;
        options.idempotency_key = event.idempotency_key;
        match self.append(transaction, outgoing, options).await {
            Ok(_) => Ok(()),
            Err(AppendError::Database(error)) => Err(error),
            Err(error) => {
                tracing::warn!(
                    event_type = descriptor.name,
                    %error,
                    "lifecycle event not emitted: the registered contract refused it"
                );
                Ok(())
            }
        }
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
        let Some(source) = Source::read(transaction, dead.event_id).await? else {
            return Ok(());
        };
        if source.event_type == DEAD_LETTERED {
            return Ok(());
        }
        let mut payload = Map::new();
        payload.insert("job_id".into(), Uuid::now_v7().to_string().into());
        payload.insert("event_id".into(), dead.event_id.to_string().into());
        payload.insert("event_type".into(), source.event_type.into());
        payload.insert("event_version".into(), source.version.into());
        payload.insert("consumer_name".into(), dead.consumer.into());
        payload.insert("attempts".into(), dead.attempts.max(1).into());
        payload.insert("failure_class".into(), dead.failure_class.into());
        payload.insert("last_error_code".into(), error_code(dead.error_code).into());
        payload.insert("dead_lettered_at".into(), source.now.into());
        // Caused by the dead-lettered event, in its tenant (a registry that requires a tenant
        // scope would refuse the event without one), in its trace, so the lifecycle event
        // shows up in its timeline.
        let event = Lifecycle {
            payload,
            trace: source.trace,
            causation_id: Some(dead.event_id.to_string()),
            tenant_scope: source.tenant_scope,
            idempotency_key: None,
        };
        Ok(self.emit_lifecycle(transaction, descriptor, event).await?)
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
        let mut payload = Map::new();
        payload.insert(
            "replay_id".into(),
            replay_uuid(replay_id).to_string().into(),
        );
        payload.insert("consumer_name".into(), consumer.into());
        payload.insert("job_count".into(), jobs.into());
        payload.insert("requested_by_id".into(), requested_by.to_string().into());
        payload.insert("scheduled_for".into(), now.into());
        let event = Lifecycle {
            payload,
            trace: None,
            causation_id: None,
            tenant_scope: None,
            idempotency_key: None,
        };
        self.emit_lifecycle(transaction, descriptor, event).await
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
        let Some(source) = Source::read(transaction, delivery.event_id).await? else {
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
        self.emit_lifecycle(transaction, descriptor, event).await
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
            let outstanding: i64 = row.try_get("outstanding")?;
            if outstanding > 0 {
                continue;
            }
            let replayed: i32 = row.try_get("deliveries")?;
            let failed: i64 = row.try_get("failed")?;
            let quarantined: i64 = row.try_get("quarantined")?;
            let now: String = row.try_get("now")?;
            let replayed = i64::from(replayed.max(0));
            let mut payload = Map::new();
            payload.insert("replay_id".into(), replay_uuid(id).to_string().into());
            payload.insert("replayed_count".into(), replayed.into());
            let (name, descriptor) = if failed == 0 {
                payload.insert("succeeded_count".into(), replayed.into());
                payload.insert("failed_count".into(), 0.into());
                payload.insert("completed_at".into(), now.into());
                (REPLAY_COMPLETED, self.lifecycle_type(REPLAY_COMPLETED))
            } else {
                let mut error = Map::new();
                error.insert("code".into(), REPLAYED_JOB_FAILED.into());
                // A dead-lettered delivery may have run out of transient retries; a
                // quarantined one fails the same way until something changes.
                error.insert("retryable".into(), (quarantined == 0).into());
                payload.insert("error".into(), Value::Object(error));
                payload.insert("failed_at".into(), now.into());
                (REPLAY_FAILED, self.lifecycle_type(REPLAY_FAILED))
            };
            let Some(descriptor) = descriptor else {
                continue;
            };
            tracing::info!(replay_id = id, event_type = name, "replay ended");
            let event = Lifecycle {
                payload,
                trace: None,
                causation_id: None,
                tenant_scope: None,
                idempotency_key: Some(format!("evc:replay:{id}:end")),
            };
            self.emit_lifecycle(connection, descriptor, event).await?;
        }
        Ok(())
    }
}

/// Removes the fields `schema` does not declare under `properties` (keeps all when the schema
/// names no properties or does not parse).
fn keep_declared(payload: &mut Map<String, Value>, schema: &str) {
    let Ok(schema) = serde_json::from_str::<Value>(schema) else {
        return;
    };
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        return;
    };
    payload.retain(|key, _| properties.contains_key(key));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_codes_take_the_contract_shape() {
        assert_eq!(error_code("transient_failure"), "TRANSIENT_FAILURE");
        assert_eq!(error_code("LEASE_EXPIRED"), "LEASE_EXPIRED");
        assert_eq!(error_code("9-lives"), "E_9_LIVES");
        assert_eq!(error_code(""), "E_");
        assert_eq!(error_code(&"a".repeat(100)).len(), 64);
    }

    #[test]
    fn the_newest_version_is_picked_numerically() {
        assert!(version_key("1.10.0") > version_key("1.9.3"));
        assert!(version_key("2.0.0") > version_key("1.99.99"));
    }

    #[test]
    fn replays_are_named_by_a_readable_uuid() {
        assert_eq!(
            replay_uuid(42).to_string(),
            "65766352-0000-8000-8000-00000000002a"
        );
        assert_eq!(
            replay_uuid(1 << 48).to_string(),
            "65766352-0001-8000-8000-000000000000"
        );
        assert_ne!(replay_uuid(1), replay_uuid(2));
    }

    #[test]
    fn a_role_always_names_the_same_person() {
        assert_eq!(role_uuid("ops"), role_uuid("ops"));
        assert_ne!(role_uuid("ops"), role_uuid("root"));
        assert_eq!(role_uuid("ops").get_version_num(), 8);
    }

    #[test]
    fn undeclared_fields_are_dropped() {
        let mut payload = Map::new();
        payload.insert("job_id".into(), "x".into());
        payload.insert("event_version".into(), "1.0.0".into());
        keep_declared(&mut payload, r#"{"properties":{"job_id":{}}}"#);
        assert_eq!(payload.keys().collect::<Vec<_>>(), ["job_id"]);
    }
}
