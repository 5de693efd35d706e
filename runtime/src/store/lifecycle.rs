//! The runtime's own lifecycle events (docs/runtime.md, "Lifecycle events"): their names, and
//! the payloads and envelopes both stores append, through their checked append path, in the
//! transaction of the state change they describe. Each store reads an event's source and
//! appends; what the events say is decided here.

use serde_json::{Map, Value};
use sha2::Digest as _;
use uuid::Uuid;

use crate::append::{AppendError, AppendOptions};
use crate::handler::FailureClass;
use crate::publish::{OutgoingEvent, order_key_part};
use crate::registry::EventDescriptor;
use crate::store::{Connection, Store};
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
pub(in crate::store) struct DeadLetter<'a> {
    /// The delivered event.
    pub(in crate::store) event_id: Uuid,
    /// The consumer whose delivery it was.
    pub(in crate::store) consumer: &'a str,
    /// Attempts made, the first included.
    pub(in crate::store) attempts: u32,
    /// The contract's class of the last failure (`transient`, `permanent`, `poison`).
    pub(in crate::store) failure_class: &'static str,
    /// The last attempt's error code, as the handler or the store gave it.
    pub(in crate::store) error_code: &'a str,
}

/// The contract's failure class of a handler's failure class: the classes that quarantine
/// (scope, schema, integrity) never dead-letter through a retry policy, so they count as
/// permanent should a policy dead-letter them.
pub(in crate::store) fn failure_class(class: FailureClass) -> &'static str {
    match class {
        FailureClass::Transient => "transient",
        FailureClass::Poison => "poison",
        _ => "permanent",
    }
}

/// An error code in the contract's shape (`^[A-Z][A-Z0-9_]*$`, at most 64 characters): upper
/// case, any other character an underscore, `E_` in front when it does not start with a letter.
pub(in crate::store) fn error_code(code: &str) -> String {
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
pub(in crate::store) struct Lifecycle {
    /// Every field the runtime can fill.
    pub(in crate::store) payload: Map<String, Value>,
    /// The trace to carry (`None`: a fresh one).
    pub(in crate::store) trace: Option<TraceContext>,
    /// The event that caused it, if one did.
    pub(in crate::store) causation_id: Option<String>,
    /// The tenant scope of the event it describes, if any.
    pub(in crate::store) tenant_scope: Option<String>,
    /// Set when two transactions may both find the event due: the second append then adds
    /// nothing.
    pub(in crate::store) idempotency_key: Option<String>,
}

/// What a lifecycle event about one delivery needs of its event: never the payload.
pub(in crate::store) struct Source {
    /// The event's type.
    pub(in crate::store) event_type: String,
    /// The event's schema version.
    pub(in crate::store) version: String,
    /// The event's tenant scope.
    pub(in crate::store) tenant_scope: Option<String>,
    /// The event's trace context, if it had a valid one.
    pub(in crate::store) trace: Option<TraceContext>,
    /// The transaction's time, RFC 3339 UTC.
    pub(in crate::store) now: String,
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
pub(in crate::store) fn role_uuid(role: &str) -> Uuid {
    let digest = sha2::Sha256::digest(format!("evc-role:{role}").as_bytes());
    let mut bytes = [0_u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    uuid::Builder::from_custom_bytes(bytes).into_uuid()
}

/// The event `descriptor`'s newest registered version says for `event`, and its append
/// options; `None` when the registry holds no version of it or no trace could be made.
pub(in crate::store) fn outgoing(
    descriptor: &'static EventDescriptor,
    event: Lifecycle,
) -> Option<(OutgoingEvent, AppendOptions)> {
    let trace = event.trace.or_else(fresh_trace)?;
    let newest = descriptor
        .versions
        .iter()
        .max_by_key(|version| version_key(version.version))?;
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
    Some((outgoing, options))
}

/// Appends `event` as `descriptor`'s newest registered version on `transaction` (the one of
/// the state change it describes), through `store`'s checked append. A refused event (the
/// registered schema wants fields the runtime cannot fill, a payload cap below its size) is
/// recorded as a reject and logged; the state change stands.
///
/// # Errors
/// The database's; the caller's transaction must then roll back.
pub(in crate::store) async fn emit<S: Store>(
    store: &S,
    transaction: &mut Connection<S>,
    descriptor: &'static EventDescriptor,
    event: Lifecycle,
) -> Result<(), sqlx::Error> {
    emit_checked(store, transaction, descriptor, event).await?;
    Ok(())
}

/// [`emit`], saying whether the event was appended: `false` when the registered contract
/// refused it (recorded as a reject and logged), for a caller whose state change must not
/// stand without its event (a schedule's slot, a lag breach).
///
/// # Errors
/// The database's; the caller's transaction must then roll back.
pub(in crate::store) async fn emit_checked<S: Store>(
    store: &S,
    transaction: &mut Connection<S>,
    descriptor: &'static EventDescriptor,
    event: Lifecycle,
) -> Result<bool, sqlx::Error> {
    let Some((event, options)) = outgoing(descriptor, event) else {
        return Ok(false);
    };
    match store.append(transaction, event, options).await {
        Ok(_) => Ok(true),
        Err(AppendError::Database(error)) => Err(error),
        Err(error) => {
            tracing::warn!(
                event_type = descriptor.name,
                %error,
                "lifecycle event not emitted: the registered contract refused it"
            );
            Ok(false)
        }
    }
}

/// The `job.dead_lettered` event of `dead`, whose event is `source`; `None` for a delivery of
/// a `job.dead_lettered` event (the loop guard: a failing lifecycle consumer cannot feed
/// itself).
pub(in crate::store) fn dead_lettered(source: Source, dead: DeadLetter<'_>) -> Option<Lifecycle> {
    if source.event_type == DEAD_LETTERED {
        return None;
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
    // scope would refuse the event without one), in its trace, so the lifecycle event shows up
    // in its timeline.
    Some(Lifecycle {
        payload,
        trace: source.trace,
        causation_id: Some(dead.event_id.to_string()),
        tenant_scope: source.tenant_scope,
        idempotency_key: None,
    })
}

/// The `dlq_replay.scheduled` event of replay `replay_id` (`evc_replays.id`): its consumer,
/// the deliveries it queued (`jobs`, due now: `scheduled_for` is the apply's time, `now`), and
/// who requested it; in `tenant_scope`, the tenant of the replayed events when they share one
/// (the stores' `REPLAY_TENANT`).
pub(in crate::store) fn replay_scheduled(
    replay_id: i64,
    consumer: &str,
    jobs: i64,
    requested_by: Uuid,
    now: String,
    tenant_scope: Option<String>,
) -> Lifecycle {
    let mut payload = Map::new();
    payload.insert(
        "replay_id".into(),
        replay_uuid(replay_id).to_string().into(),
    );
    payload.insert("consumer_name".into(), consumer.into());
    payload.insert("job_count".into(), jobs.into());
    payload.insert("requested_by_id".into(), requested_by.to_string().into());
    payload.insert("scheduled_for".into(), now.into());
    // A registry that requires a tenant scope refuses a replay's events without one; a replay
    // of several tenants' events (applied in an all-tenant scope) has none to give.
    Lifecycle {
        payload,
        trace: None,
        causation_id: None,
        tenant_scope,
        idempotency_key: None,
    }
}

/// Where a replay stands after a settle: the deliveries it made, how many are still pending or
/// leased, how many failed again (settled but not acked), of those how many are quarantined,
/// and the settle's time, RFC 3339 UTC.
pub(in crate::store) struct ReplayProgress {
    pub(in crate::store) replayed: i64,
    pub(in crate::store) outstanding: i64,
    pub(in crate::store) failed: i64,
    pub(in crate::store) quarantined: i64,
    pub(in crate::store) now: String,
    /// The tenant of the replayed events when they share one.
    pub(in crate::store) tenant_scope: Option<String>,
}

/// The event that ends replay `id` and its type (`dlq_replay.completed` when every replayed
/// delivery was acked, `dlq_replay.failed` when any failed again); `None` while deliveries are
/// outstanding. The idempotency key `evc:replay:<id>:end` keeps a replay's end to one event.
pub(in crate::store) fn replay_ended(
    id: i64,
    progress: ReplayProgress,
) -> Option<(&'static str, Lifecycle)> {
    if progress.outstanding > 0 {
        return None;
    }
    let replayed = progress.replayed.max(0);
    let mut payload = Map::new();
    payload.insert("replay_id".into(), replay_uuid(id).to_string().into());
    payload.insert("replayed_count".into(), replayed.into());
    let name = if progress.failed == 0 {
        payload.insert("succeeded_count".into(), replayed.into());
        payload.insert("failed_count".into(), 0.into());
        payload.insert("completed_at".into(), progress.now.into());
        REPLAY_COMPLETED
    } else {
        let mut error = Map::new();
        error.insert("code".into(), REPLAYED_JOB_FAILED.into());
        // A dead-lettered delivery may have run out of transient retries; a quarantined one
        // fails the same way until something changes.
        error.insert("retryable".into(), (progress.quarantined == 0).into());
        payload.insert("error".into(), Value::Object(error));
        payload.insert("failed_at".into(), progress.now.into());
        REPLAY_FAILED
    };
    let event = Lifecycle {
        payload,
        trace: None,
        causation_id: None,
        tenant_scope: progress.tenant_scope,
        idempotency_key: Some(format!("evc:replay:{id}:end")),
    };
    Some((name, event))
}

/// The trace of a stored event's columns, if they hold a valid one.
pub(in crate::store) fn stored_trace(
    trace_id: Option<String>,
    span_id: Option<String>,
    flags: Option<String>,
) -> Option<TraceContext> {
    match (trace_id, span_id, flags) {
        (Some(trace_id), Some(span_id), Some(flags)) => u8::from_str_radix(&flags, 16)
            .ok()
            .and_then(|flags| TraceContext::new(trace_id, span_id, flags).ok()),
        _ => None,
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
