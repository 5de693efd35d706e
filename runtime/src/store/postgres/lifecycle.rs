//! The runtime's own lifecycle events (docs/runtime.md, "Lifecycle events"): when the deployed
//! registry registers `job.dead_lettered`, dead-lettering a delivery appends one, in the
//! transaction of the state change, through the checked append path.

use serde_json::{Map, Value};
use sqlx::Row;
use sqlx::postgres::PgConnection;
use uuid::Uuid;

use super::{PgStore, sql};
use crate::append::{AppendError, AppendOptions};
use crate::handler::FailureClass;
use crate::publish::{OutgoingEvent, order_key_part};
use crate::registry::EventDescriptor;
use crate::store::DispatchError;
use crate::trace::TraceContext;

/// The lifecycle event a dead-lettered delivery emits, when the registry registers it.
pub const DEAD_LETTERED: &str = "job.dead_lettered";

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

impl PgStore {
    /// The registered `job.dead_lettered` type, if the deployed registry has one.
    pub(super) fn dead_letter_type(&self) -> Option<&'static EventDescriptor> {
        self.registry()
            .event(DEAD_LETTERED)
            .filter(|descriptor| !descriptor.versions.is_empty())
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
        let Some(source) = sqlx::query(sql::DEAD_LETTER_SOURCE)
            .bind(dead.event_id)
            .fetch_optional(&mut *transaction)
            .await?
        else {
            return Ok(());
        };
        let event_type: String = source.try_get("event_type")?;
        if event_type == DEAD_LETTERED {
            return Ok(());
        }
        let version: String = source.try_get("schema_version")?;
        let tenant_scope: Option<String> = source.try_get("tenant_scope")?;
        let trace_id: Option<String> = source.try_get("trace_id")?;
        let span_id: Option<String> = source.try_get("parent_span_id")?;
        let flags: Option<String> = source.try_get("trace_flags")?;
        let dead_lettered_at: String = source.try_get("dead_lettered_at")?;
        // The dead-lettered event's trace, so the lifecycle event shows up in its timeline.
        let trace = match (trace_id, span_id, flags) {
            (Some(trace_id), Some(span_id), Some(flags)) => u8::from_str_radix(&flags, 16)
                .ok()
                .and_then(|flags| TraceContext::new(trace_id, span_id, flags).ok()),
            _ => None,
        };
        let Some(trace) = trace.or_else(fresh_trace) else {
            return Ok(());
        };
        let Some(newest) = descriptor
            .versions
            .iter()
            .max_by_key(|version| version_key(version.version))
        else {
            return Ok(());
        };

        let mut payload = Map::new();
        payload.insert("job_id".into(), Uuid::now_v7().to_string().into());
        payload.insert("event_id".into(), dead.event_id.to_string().into());
        payload.insert("event_type".into(), event_type.into());
        payload.insert("event_version".into(), version.into());
        payload.insert("consumer_name".into(), dead.consumer.into());
        payload.insert("attempts".into(), dead.attempts.max(1).into());
        payload.insert("failure_class".into(), dead.failure_class.into());
        payload.insert("last_error_code".into(), error_code(dead.error_code).into());
        payload.insert("dead_lettered_at".into(), dead_lettered_at.into());
        // Only the fields the registered schema declares: the reference contract has no
        // `event_version` and forbids extra properties.
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
        let event = OutgoingEvent {
            event_type: descriptor.name,
            version: newest.version,
            order_key,
            trace,
            payload,
        };
        // Caused by the dead-lettered event, in its tenant (a registry that requires a tenant
        // scope would refuse the event without one).
        let mut options = AppendOptions::new().causation_id(dead.event_id.to_string());
        options.tenant_scope = tenant_scope;
        match self.append(transaction, event, options).await {
            Ok(_) => Ok(()),
            Err(AppendError::Database(error)) => Err(error.into()),
            Err(error) => {
                tracing::warn!(
                    event_id = %dead.event_id,
                    consumer = dead.consumer,
                    %error,
                    "job.dead_lettered not emitted: the registered contract refused it"
                );
                Ok(())
            }
        }
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
    fn undeclared_fields_are_dropped() {
        let mut payload = Map::new();
        payload.insert("job_id".into(), "x".into());
        payload.insert("event_version".into(), "1.0.0".into());
        keep_declared(&mut payload, r#"{"properties":{"job_id":{}}}"#);
        assert_eq!(payload.keys().collect::<Vec<_>>(), ["job_id"]);
    }
}
