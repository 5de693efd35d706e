//! Row mappings both stores share: the columns have the same names and, once the statements
//! cast them alike (integers as 64-bit, text as text), the same Rust types on either driver.

use sqlx::{ColumnIndex, Decode, Row, Type};

use crate::registry::{DispatcherDescriptor, PayloadPolicyDescriptor};
use crate::store::{DispatchError, EventRecord, FeedEvent, FeedPosition, Intent};

/// `text` for the life of the process: a registry read from a database (the mirror, a SQLite
/// file's recorded document) lives as long as a compiled one does.
pub(crate) fn leak(text: String) -> &'static str {
    Box::leak(text.into_boxed_str())
}

/// `items` for the life of the process (see [`leak`]).
pub(crate) fn leak_slice<T>(items: Vec<T>) -> &'static [T] {
    Box::leak(items.into_boxed_slice())
}

/// A payload policy as the stores' settings documents hold it (the PostgreSQL settings row,
/// the SQLite file's recorded registry), under the keys their readers take it from.
pub(crate) fn payload_policy_document(policy: &PayloadPolicyDescriptor) -> serde_json::Value {
    serde_json::json!({
        "denied_keys": policy.denied_keys,
        "credential_key_names": policy.credential_key_names,
        "default_max_bytes": policy.default_max_bytes,
        "hard_max_bytes": policy.hard_max_bytes,
    })
}

/// A dispatcher block as the stores' settings documents hold it (see
/// [`payload_policy_document`]).
pub(crate) fn dispatcher_document(dispatcher: &DispatcherDescriptor) -> serde_json::Value {
    serde_json::json!({
        "batch_size": dispatcher.batch_size,
        "lease_ms": dispatcher.lease_ms,
        "heartbeat_ms": dispatcher.heartbeat_ms,
        "max_attempts": dispatcher.max_attempts,
        "backoff_ceiling_ms": dispatcher.backoff_ceiling_ms,
    })
}

/// The intents of a reconciliation row's `intended` column (a JSON array of
/// `{"effect_key", "outcome_digest"}`, as text); anything else is a decode error.
pub(crate) fn intents(intended: &str) -> Result<Vec<Intent>, sqlx::Error> {
    serde_json::from_str(intended).map_err(|error| sqlx::Error::Decode(Box::new(error)))
}

/// An [`EventRecord`] from a row of the stores' event statements (`payload_bytes` as a 64-bit
/// integer).
pub(crate) fn event_record<'r, R>(row: &'r R) -> Result<EventRecord, sqlx::Error>
where
    R: Row,
    &'r str: ColumnIndex<R>,
    String: Decode<'r, R::Database> + Type<R::Database>,
    Option<String>: Decode<'r, R::Database> + Type<R::Database>,
    i64: Decode<'r, R::Database> + Type<R::Database>,
{
    Ok(EventRecord {
        seq: row.try_get("seq")?,
        event_type: row.try_get("event_type")?,
        schema_version: row.try_get("schema_version")?,
        order_key: row.try_get("order_key")?,
        producer_class: row.try_get("producer_class")?,
        tenant_scope: row.try_get("tenant_scope")?,
        idempotency_key: row.try_get("idempotency_key")?,
        trace_id: row.try_get("trace_id")?,
        correlation_id: row.try_get("correlation_id")?,
        causation_id: row.try_get("causation_id")?,
        payload_bytes: u64::try_from(row.try_get::<i64, _>("payload_bytes")?).unwrap_or(0),
    })
}

/// A [`FeedEvent`] at `position` from a row of the stores' feed statements (`produced_at` in
/// epoch seconds, the payload as JSON text); `event_id` as the store decodes its column.
pub(crate) fn feed_event<'r, R>(
    row: &'r R,
    position: FeedPosition,
    event_id: uuid::Uuid,
) -> Result<FeedEvent, DispatchError>
where
    R: Row,
    &'r str: ColumnIndex<R>,
    String: Decode<'r, R::Database> + Type<R::Database>,
    Option<String>: Decode<'r, R::Database> + Type<R::Database>,
    f64: Decode<'r, R::Database> + Type<R::Database>,
{
    let payload: String = row.try_get("payload")?;
    Ok(FeedEvent {
        position,
        event_id,
        event_type: row.try_get("event_type")?,
        schema_version: row.try_get("schema_version")?,
        order_key: row.try_get("order_key")?,
        producer_class: row.try_get("producer_class")?,
        tenant_scope: row.try_get("tenant_scope")?,
        trace_id: row.try_get("trace_id")?,
        correlation_id: row.try_get("correlation_id")?,
        causation_id: row.try_get("causation_id")?,
        produced_at: row.try_get("produced_at")?,
        payload: serde_json::from_str(&payload)
            .map_err(|source| DispatchError::Payload { event_id, source })?,
    })
}
